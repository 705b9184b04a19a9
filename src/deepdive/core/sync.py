"""Wait for the device work behind a value before a clock stops.

JAX dispatches asynchronously on every backend (CPU included) and CUDA kernels run after
the Python call returns, so a timer stopped without `block` measures dispatch, not work.
Chapter 1 shows how large that error is.
"""

from __future__ import annotations

import sys

__all__ = ["block", "pace"]

_SCALARS = (int, float, complex, bool, type(None))


def _is_leaf(item) -> bool:
    """An array, a tensor or a number: nothing inside it to wait for but itself."""
    if isinstance(item, _SCALARS) or hasattr(item, "block_until_ready"):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(item, torch.Tensor)


def block(x):
    """Return `x` once every JAX array and CUDA tensor inside it is computed.

    `x` may be a single array or tensor, or any nesting of lists, tuples and dicts of
    them (a pytree). Note that `torch.cuda.synchronize` does not wait for JAX, and
    `jax.block_until_ready` does not wait for torch, so each is handled on its own.
    Once PyTorch has touched a GPU, every call synchronizes it, whatever `x` holds: a
    training step that returns nothing, or a Python number, still launched kernels.
    """
    if "jax" in sys.modules:
        import jax

        jax.block_until_ready(x)
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    return x


def pace(x) -> None:
    """Wait for the device work behind `x` if it is a JAX value; do nothing for others.

    The timer calls it on each call's output once the next call is dispatched, so at
    most one call runs ahead of the device. JAX would otherwise queue a whole block of
    calls at once, each holding a fresh output buffer, and charge every call for memory
    no loop that uses its results would hold. A ready JAX array answers in well under a
    microsecond. PyTorch needs no pacing: it runs CPU work before returning, and a CUDA
    stream reuses freed memory in order.
    """
    wait = getattr(x, "block_until_ready", None)
    if wait is not None:
        wait()
    elif isinstance(x, (list, tuple)) and all(_is_leaf(item) for item in x):
        # A flat sequence of arrays, tensors and numbers (a compiled function's outputs)
        # is waited on item by item: jax's pytree walk costs about 1.4 us, as much as the
        # shortest calls the book times, and the timer would take out half of what it
        # measured. Anything else in it (a dict, an nnx.State) gets the walk.
        for item in x:
            wait = getattr(item, "block_until_ready", None)
            if wait is not None:
                wait()
    elif isinstance(x, (list, tuple, dict)) and "jax" in sys.modules:
        jax = sys.modules["jax"]
        leaves = jax.tree.leaves(x)  # a PyTorch pytree is walked once, not waited on
        if any(hasattr(leaf, "block_until_ready") for leaf in leaves):
            jax.block_until_ready(leaves)
