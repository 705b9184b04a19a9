"""Measurement helpers for *PyTorch vs JAX, Deep Dives*, in five layers, one subpackage
each; a module imports only from its own layer and the layers before it
(`tests/test_package.py` checks this, and that no import circle exists).

1. `deepdive.core`, the measurement, which knows no model and no page: `env` (where a number
   came from: machine, versions, precision, scale, threads; where the build keeps its
   results), `sync` (wait for device work), `allocator` (glibc's allocator regime), `memory`
   (the right memory tool per question), `timing` (synced, blocked, interleaved timing with
   intervals), `verdict` (the one rule: faster, slower, tie or withheld), `equality` (does
   an output match its reference), `flops` (analytic FLOPs per model, counted FLOPs, peaks,
   MFU, measured bandwidth) and `compilation` (compile stages, kernels in HLO).
2. `deepdive.models`, the models and what runs them: `gpt` (nanoGPT in PyTorch), `gpt_jax`
   and `vit` (their Flax NNX twins, HF's ViT), `parity` (proof that twins train alike, and
   `strict_fp32`, the book's one switch for strict fp32), `data` (the corpus),
   `torch_distributed` (the distributed chapter's ranks) and `xla_route` with `xla_worker`
   (the PyTorch/XLA route, run in its own environment and process).
3. `deepdive.book`, the book's plumbing: `results` (tidy records per chapter), `provenance`
   (which build measured them), `calibration` (the tie band and CPU peak, measured once per
   build), `claims` (every verdict in claims.csv, glued back into the prose), `evidence`
   (the claims that compare the frameworks, read by the intro and chapter 7), `claim_ids`
   (every claim id the pages can save), `bundles` (a build's evidence committed as a dated
   bundle, and read back validated), `plots` (house style), `plan` (a chapter's estimated
   time and memory, refused when it cannot fit), `plans` (every chapter's sizes at every
   scale) and `colab` (the Colab set-up cell).
4. `deepdive.chapters`, the pages' own code: each chapter's helpers and readings, `stability`
   and `regimes` (the methodology page's probe workers), `choosing` (chapter 7's kernel
   backends and short errors), and `ledger` (the ledger page's: every committed bundle
   beside this build, and the release sweeps, read back as tables).
5. `deepdive.releases`, the release sweeps (`make releases`, never part of a build): `matrix`
   (which jax and torch releases, what each installs, the runs' ledger), `workloads` (the
   reduced set each release runs) and `run` (a throwaway environment per release, one
   bundle each).

Importing the core or the plumbing imports neither torch nor jax (they are imported inside
the functions that need them), so a page or worker that uses one framework never pays for
the other. The models import their frameworks when imported: `gpt` torch, `vit` jax and
flax, and `gpt_jax` (built on both) all three.
"""

__version__ = "0.1.0"
