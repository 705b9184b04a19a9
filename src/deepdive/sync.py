"""Wait for the device work behind a value before a clock stops.

JAX dispatches asynchronously on every backend (CPU included) and CUDA kernels run after
the Python call returns, so a timer stopped without `block` measures dispatch, not work.
Chapter 1 shows how large that error is.
"""

from __future__ import annotations

import sys


def block(x):
    """Return `x` once every JAX array and CUDA tensor inside it is computed.

    `x` may be a single array or tensor, or any nesting of lists, tuples and dicts of
    them (a pytree). Note that `torch.cuda.synchronize` does not wait for JAX, and
    `jax.block_until_ready` does not wait for torch, so each is handled on its own.
    """
    if "jax" in sys.modules:
        import jax

        jax.block_until_ready(x)
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available() and _holds_cuda_tensor(x):
            torch.cuda.synchronize()
    return x


def _holds_cuda_tensor(x) -> bool:
    import torch

    if isinstance(x, torch.Tensor):
        return x.is_cuda
    if isinstance(x, dict):
        return any(_holds_cuda_tensor(v) for v in x.values())
    if isinstance(x, list | tuple):
        return any(_holds_cuda_tensor(v) for v in x)
    return False
