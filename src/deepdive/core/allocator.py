"""How the CPU build's timed work gets memory: one allocator regime for every page and worker.

On Linux both frameworks allocate host memory through glibc's `malloc` (PyTorch's CPU
allocator and XLA's CPU buffers alike). By default glibc serves a request above its mmap
threshold (128 KiB at first, rising to at most 32 MiB as mapped blocks are freed) with
fresh pages from the kernel and unmaps them on `free`, and it hands the free top of a heap
back to the kernel past its trim threshold. The next large array then has its pages
faulted in and zeroed again on first touch. Whether a timed call pays for that depends
on array sizes near the threshold and on what ran before it in the round, which is a
fact about glibc, not about PyTorch or JAX; GPU caching allocators keep freed memory by
default. So every page of the book, and every worker process it starts, runs with glibc
told to keep freed memory (`keep_freed_memory`): nothing below `KEEP["mmap threshold"]`
is mapped afresh, nothing is trimmed back, and the heap grows in steps of its top pad.
The methodology page measures why (minor page faults and step times under both regimes);
chapter 2 keeps glibc's defaults as its lesson, in a process of their own (`DEFAULTS_ENV`).

The settings take effect in a running process through `mallopt`, so they hold in a
Jupyter or Colab kernel too, and through the environment variables glibc reads at start-up,
which every child process inherits. `describe()` says what is in force, and every page's
provenance records it; where another allocator is preloaded (Colab preloads tcmalloc),
glibc's settings do not apply and `describe()` says so.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
from pathlib import Path

__all__ = ["DEFAULTS", "DEFAULTS_ENV", "KEEP", "KEEP_ENV", "KEPT", "PRELOADED", "child_env",
           "describe", "is_glibc", "keep_freed_memory", "preloaded", "restore_trim_threshold",
           "serves_from_heap"]

# glibc's mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
KEEP = {"mmap threshold": 2**31 - 1, "trim threshold": 2**31 - 1, "top pad": 64 * 2**20}
_PARAMETERS = {"mmap threshold": (_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"),
               "trim threshold": (_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_"),
               "top pad": (_M_TOP_PAD, "MALLOC_TOP_PAD_")}
# The environment that starts a process with the regime; `DEFAULTS_ENV` removes it again.
KEEP_ENV = {variable: str(KEEP[name]) for name, (_, variable) in _PARAMETERS.items()}
DEFAULTS_ENV = dict.fromkeys(KEEP_ENV)  # None: unset in the child (see `child_env`)
KEPT = "glibc, freed memory kept"
DEFAULTS = "glibc defaults"
_PRELOADED = re.compile(r"lib(tcmalloc|jemalloc|mimalloc)[\w.-]*\.so")
_applied: dict[str, int] = {}


def is_glibc() -> bool:
    return platform.libc_ver()[0] == "glibc"


def preloaded() -> str | None:
    """The replacement allocator mapped into this process (tcmalloc, jemalloc, mimalloc),
    or None: with one, glibc's malloc settings do not apply."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return None
    found = _PRELOADED.search(maps.read_text())
    return found.group(1) if found else None


def keep_freed_memory() -> str:
    """Put the book's regime in force in this process and in every process it starts:
    glibc keeps freed memory for the next allocation. Returns `describe()`. A no-op where
    glibc is not the allocator (macOS, a preloaded tcmalloc), which `describe()` names."""
    os.environ.update(KEEP_ENV)
    if is_glibc() and preloaded() is None:
        libc = ctypes.CDLL("libc.so.6")
        for name, (parameter, _) in _PARAMETERS.items():
            if libc.mallopt(parameter, KEEP[name]) != 1:
                raise OSError(f"glibc refused mallopt({name}={KEEP[name]})")
            _applied[name] = KEEP[name]
    return describe()


def restore_trim_threshold(libc=None) -> None:
    """Set glibc's trim threshold back to the regime's (after a measurement that lowered
    it, `deepdive.core.memory.host_call_peak`), or to the largest value glibc's own rule
    reaches where the regime is not in force."""
    libc = libc or ctypes.CDLL("libc.so.6")
    libc.mallopt(_M_TRIM_THRESHOLD, _applied.get("trim threshold", 2 * 32 * 2**20))


def child_env(regime: str = KEPT, base: dict | None = None) -> dict[str, str]:
    """An environment for a child process under `regime` (`KEPT` or `DEFAULTS`)."""
    if regime not in (KEPT, DEFAULTS):
        raise ValueError(f"regime must be {KEPT!r} or {DEFAULTS!r}, got {regime!r}")
    environment = dict(os.environ if base is None else base)
    for variable in KEEP_ENV:
        environment.pop(variable, None)
    if regime == KEPT:
        environment.update(KEEP_ENV)
    return environment


def _from_environment() -> bool:
    """Whether this process started with the regime's variables (glibc read them then)."""
    return all(os.environ.get(variable) == value for variable, value in KEEP_ENV.items())


# Said of an allocator preloaded in glibc's place (tcmalloc, jemalloc).
PRELOADED = "(preloaded; glibc's settings do not apply)"


def describe() -> str:
    """The allocator regime in force in this process, in words: `KEPT` with its settings,
    `DEFAULTS`, or the allocator that replaces glibc's."""
    if not is_glibc():
        return f"not glibc ({platform.system()}'s allocator)"
    other = preloaded()
    if other:
        return f"{other} {PRELOADED}"
    if _applied == KEEP or (not _applied and _from_environment() and serves_from_heap()):
        settings = ", ".join(f"{name} {_size(value)}" for name, value in KEEP.items())
        return f"{KEPT} ({settings})"
    return DEFAULTS


def serves_from_heap(n_bytes: int = 48 * 2**20) -> bool:
    """Whether a `malloc` of `n_bytes` (above glibc's largest default mmap threshold) comes
    from the heap rather than fresh mapped pages: the regime at work, observed. glibc 2.33
    or newer (`mallinfo2`)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblkhd
    pointer = libc.malloc(n_bytes)
    mapped = libc.mallinfo2().hblkhd - before
    libc.free(pointer)
    return mapped < n_bytes


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.0f} GiB" if n_bytes >= 2**30 - 1 else f"{n_bytes / 2**20:.0f} MiB"
