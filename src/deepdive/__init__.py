"""Measurement helpers for *PyTorch vs JAX, Deep Dives*.

Each module has one job: `env` (provenance, scale, threads), `sync` (wait for device work),
`timing` (synced, blocked, interleaved timing with intervals), `verdict` (the one rule:
faster, slower, tie or inconclusive), `claims` (every verdict in claims.csv, glued back into
the prose), `stability` (how steady timings are per thread count), `memory` (the right
memory tool per question), `flops` (analytic and counted FLOPs, peaks, MFU, measured
bandwidth), `compilation` (compile stages timed, kernels named in HLO), `plan` (a
chapter's estimated time and memory, refused when it cannot fit), `plans` (every chapter's
sizes at every scale), `plots` (house style) and `results` (tidy records for the pages).
torch and jax are imported lazily, so a chapter that uses one framework never pays for the
other.
"""

__version__ = "0.1.0"
