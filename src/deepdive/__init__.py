"""Measurement helpers for *PyTorch vs JAX, Deep Dives*.

Each module has one job: `env` (provenance and scale), `sync` (wait for device work),
`timing` (synced, blocked timing with intervals), `memory` (the right memory tool per
question), `flops` (analytic and counted FLOPs, peaks, MFU, measured bandwidth),
`compilation` (compile stages timed, kernels counted in HLO), `plots` (house style) and
`results` (tidy records for the pages). torch and jax are imported lazily, so a chapter
that uses one framework never pays for the other.
"""

__version__ = "0.1.0"
