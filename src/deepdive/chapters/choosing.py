"""Chapter 7's kernel and error helpers, kept here because their GPU and IPython branches
are tested without a GPU or a notebook (tests/test_chapters_choosing.py).

`pallas_backend` decides where the page's Pallas kernel runs (a pure decision: the page's
CPU build only ever takes "interpret"), `pallas_launch` turns that decision into
`pallas_call` keywords, and `short_errors` makes the cells that fail on purpose show their
error's type and first lines, not the frames inside the frameworks.
"""

from __future__ import annotations

import re

__all__ = ["has_pallas_triton", "pallas_backend", "pallas_launch", "short_errors",
           "short_traceback"]


def pallas_backend(platform: str, has_triton_backend: bool,
                   compute_capability: tuple[int, int] | None) -> str | None:
    """Chapter 7: where the Pallas kernel runs. "interpret" off a GPU (CPUs have no Pallas
    compiler; on a TPU the one-row block breaks Mosaic's block rule); on a GPU, "triton"
    while JAX still ships Pallas's Triton backend (deprecated since JAX 0.11.0), so that both
    kernels lower to Triton; once it is gone, "mosaic_gpu" on Hopper and newer (compute
    capability 9.0 and up, what Mosaic GPU is written for), and None below that: Pallas then
    has no GPU backend there, and the page says so instead of running it."""
    if platform != "gpu":
        return "interpret"
    if has_triton_backend:
        return "triton"
    if compute_capability is not None and tuple(compute_capability) >= (9, 0):
        return "mosaic_gpu"
    return None


def has_pallas_triton() -> bool:
    """Whether this JAX still ships Pallas's Triton backend (deprecated since JAX 0.11.0)."""
    import importlib.util

    return importlib.util.find_spec("jax.experimental.pallas.triton") is not None


def pallas_launch(backend: str) -> dict:
    """`pallas_call` keywords for a backend `pallas_backend` chose."""
    if backend == "interpret":
        return {"interpret": True}
    if backend == "triton":
        from jax.experimental.pallas import triton as pallas_triton

        return {"compiler_params": pallas_triton.CompilerParams()}
    if backend == "mosaic_gpu":
        from jax.experimental.pallas import mosaic_gpu as plgpu

        return {"compiler_params": plgpu.CompilerParams()}
    raise ValueError(f"backend must be 'interpret', 'triton' or 'mosaic_gpu', got {backend!r}")


def short_traceback(etype, value, lines: int = 4) -> list[str]:
    """The error a cell meant to fail shows: its type and the first `lines` lines of its
    message, with the kernel's temporary cell paths named "<cell>", and how many lines were
    left out. An IPython custom exception handler returns it (`set_custom_exc`), so the
    cell still raises the same exception; only the frames inside the frameworks and the
    message's tail are not printed."""
    message = re.sub(r"/tmp/ipykernel_\d+/\d+\.py", "<cell>", str(value)).rstrip().splitlines()
    shown = [f"{etype.__name__}: {message[0] if message else ''}", *message[1:lines]]
    rest = len(message) - len(shown)
    return shown + ([f"[... {rest} more lines of the message]"] if rest > 0 else [])


def short_errors(shell, lines: int = 4) -> None:
    """Make an IPython `shell` show every error as `short_traceback` does (the cells that
    fail on purpose): the cell still fails, and its error output (type, value, the short
    traceback) is sent as any error's is, which a custom handler must do itself."""
    def show(_shell, etype, value, tb, tb_offset=None):
        stb = short_traceback(etype, value, lines)
        shell._showtraceback(etype, value, stb)  # IPython's hook that sends the error output
        return stb

    shell.set_custom_exc((Exception,), show)
