"""Memory, with the tool that answers each question, and each reading labelled.

- How much did this PyTorch call need on the GPU?      `torch_cuda_peak`
- How much has JAX used on the GPU (whole process)?    `jax_device_peak`
- What does XLA plan to allocate for a program?        `xla_memory_plan`
- How much host memory does a workload take at peak?   `host_peak_rss` (fresh process)
- How much host memory does one more call add?         `host_call_peak` (this process)
- What does the GPU driver see, all processes?         `nvml_used`
- The seed's method, kept to show its limits:          `psutil_rss_deltas`
- Did that fail for lack of memory?                    `is_out_of_memory`
- What does one more training step add, per framework? `step_peak` (picks among the above)

Chapter 1 compares them on the vmap workloads.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from deepdive.core import allocator
from deepdive.core.sync import block

__all__ = ["TOOLS", "MemoryReading", "host_call_peak", "host_peak_rss", "is_out_of_memory",
           "jax_device_peak", "nvml_used", "psutil_rss_deltas", "step_peak", "torch_cuda_peak",
           "xla_memory_plan"]


@dataclass(frozen=True)
class MemoryReading:
    """A number of bytes, the tool that produced it, and what that tool counts."""

    bytes: int
    tool: str
    scope: str

    @property
    def mib(self) -> float:
        return self.bytes / 2**20


# Each tool, and what it counts: every reading carries both, so a page can say which it shows.
TOOLS = {
    "torch_cuda": ("torch.cuda.max_memory_allocated",
                   "tensors allocated by this call through PyTorch's caching allocator"),
    "jax_device": ("{platform} memory_stats()['peak_bytes_in_use']",
                   "JAX buffers on this device since process start (not resettable)"),
    "fresh_process": ("VmHWM - VmRSS in a fresh process (/proc/self/status)",
                      "host memory the code added at its peak, all allocators and threads"),
    "one_call": ("VmHWM - VmRSS around one call, after malloc_trim (this process)",
                 "host memory the call added at its peak, all allocators and threads"),
    "one_call_arenas": ("VmHWM - VmRSS around one call, after malloc_trim and trimmed thread "
                        "arenas (this process)",
                        "host memory the call added at its peak, all allocators and threads"),
    "xla_plan": ("XLA memory_analysis(): temp + output - alias",
                 "what the compiled step allocates beyond its donated inputs"),
    "nvml": ("NVML nvmlDeviceGetMemoryInfo().used",
             "the whole device: all processes, reserved and cached memory"),
}


def torch_cuda_peak(fn: Callable[[], object]) -> MemoryReading | None:
    """Peak CUDA memory that `fn()` allocated above what was allocated before it.

    Uses the caching allocator's counters (`reset_peak_memory_stats`,
    `max_memory_allocated`); ``None`` when no CUDA device is visible.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    block(fn())
    torch.cuda.synchronize()
    return MemoryReading(torch.cuda.max_memory_allocated() - before, *TOOLS["torch_cuda"])


def jax_device_peak(device=None) -> MemoryReading | None:
    """JAX's peak bytes in use on `device` since the process started; ``None`` on CPU.

    JAX cannot reset this peak, so each configuration needs a fresh process.
    """
    import jax

    device = device or jax.devices()[0]
    stats = device.memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    tool, scope = TOOLS["jax_device"]
    return MemoryReading(int(stats["peak_bytes_in_use"]), tool.format(platform=device.platform),
                         scope)


def xla_memory_plan(jitted: Callable, *args) -> dict[str, int]:
    """XLA's static allocation plan for ``jitted(*args)``, in bytes, without running it.

    Keys: argument, output, temp, alias, generated_code, and total (argument + output +
    temp - alias), which is what the program needs while it runs. `jitted` must have
    `.lower`, as `jax.jit` functions do.
    """
    if not hasattr(jitted, "lower"):
        raise TypeError(
            f"xla_memory_plan needs a jax.jit-wrapped function (it has .lower); got {jitted!r}"
        )
    stats = jitted.lower(*args).compile().memory_analysis()
    plan = {
        "argument": stats.argument_size_in_bytes,
        "output": stats.output_size_in_bytes,
        "temp": stats.temp_size_in_bytes,
        "alias": stats.alias_size_in_bytes,
        "generated_code": stats.generated_code_size_in_bytes,
    }
    plan["total"] = plan["argument"] + plan["output"] + plan["temp"] - plan["alias"]
    return plan


_PEAK_RSS_SCRIPT = """
import json, os, sys
def _rss(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
{setup}
# Memory the setup freed goes back to the kernel first: with freed memory kept (the book's
# allocator regime, which the child inherits), the code would reuse it unseen.
try:
    import ctypes, gc
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
except OSError:  # not glibc
    pass
# Writing 5 to clear_refs resets the kernel's high-water mark (VmHWM) to the current RSS.
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")
_baseline = _rss("VmRSS")
{run}
print("DEEPDIVE_PEAK " + json.dumps({{"baseline": _baseline, "peak": _rss("VmHWM")}}))
"""


def host_peak_rss(run: str, setup: str = "", timeout_s: float = 600) -> MemoryReading:
    """Peak resident memory that the code `run` adds, measured in a fresh Python process.

    `setup` (imports, inputs) runs first and is not counted: what it freed is handed back
    to the kernel (`malloc_trim`, so an allocator regime that keeps freed memory cannot
    hide the code's needs), then the kernel's high-water mark is reset, so the reading is
    exact rather than sampled. Linux only (it reads /proc). JAX GPU preallocation is
    switched off in the child.
    """
    if not os.path.exists("/proc/self/clear_refs"):
        raise OSError("host_peak_rss reads /proc/self/status and /proc/self/clear_refs: Linux only")
    script = _PEAK_RSS_SCRIPT.format(setup=textwrap.dedent(setup), run=textwrap.dedent(run))
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout_s, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the measured code failed in its own process:\n{done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("DEEPDIVE_PEAK "))
    readings = json.loads(line.removeprefix("DEEPDIVE_PEAK "))
    return MemoryReading(readings["peak"] - readings["baseline"], *TOOLS["fresh_process"])


def host_call_peak(fn: Callable[[], object], *, thread_arenas: bool = False) -> MemoryReading:
    """Peak host memory that one call of `fn` adds, measured in this process (Linux, glibc).

    For steady-state steps after warm-up: compile caches and resident state (weights,
    optimizer moments) stay; what the call allocates and frees again (activations,
    gradients, temporaries) is counted. Freed heap pages are first handed back to the
    kernel (`malloc_trim`), so reuse of cached pages cannot hide the call's needs; then
    the high-water mark is reset and read after the synced call.

    thread_arenas: also count buffers that `fn` allocates on other threads (XLA's CPU
        runtime runs a compiled step on a worker thread of its own). `malloc_trim` hands
        back the free top of the main thread's heap only; a buffer below glibc's mmap
        threshold (which grows to 32 MiB as large blocks are freed) that a worker thread
        freed stays resident at the top of that thread's arena, and the next call reuses
        it without touching a new page, so the reading misses it. With `thread_arenas`,
        `fn` runs once more first with glibc's trim threshold at zero, so every arena
        returns its freed top to the kernel, and the threshold is set back afterwards
        (to the book's allocator regime, `deepdive.core.allocator`, where it is in force, else
        to 64 MiB, the most glibc's own rule sets it to). That extra call is a side effect:
        use it on steps whose state may advance. Chapter 5 checks the readings against
        XLA's plan at every batch size.
    """
    if not os.path.exists("/proc/self/clear_refs"):
        raise OSError("host_call_peak reads /proc/self/status and /proc/self/clear_refs: "
                      "Linux only")
    libc = ctypes.CDLL("libc.so.6")
    if thread_arenas:
        libc.mallopt(_M_TRIM_THRESHOLD, 0)
        try:
            block(fn())
        except BaseException:
            allocator.restore_trim_threshold(libc)
            raise
    try:
        gc.collect()
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        before = _rss("VmRSS")
        block(fn())
        peak = _rss("VmHWM")
    finally:
        if thread_arenas:
            allocator.restore_trim_threshold(libc)
    return MemoryReading(peak - before,
                         *TOOLS["one_call_arenas" if thread_arenas else "one_call"])


# glibc's mallopt parameter number for the trim threshold (malloc.h).
_M_TRIM_THRESHOLD = -1


def step_peak(framework: str, device: str, run: Callable[[], object],
              xla_plan: Callable[[], dict] | None = None) -> MemoryReading:
    """What one more training step adds on top of the resident weights and optimizer state,
    with the tool that answers it for `framework` ("torch" or "jax") on `device` ("cpu" or
    "cuda"): on a GPU, PyTorch's `torch_cuda_peak` around `run()`, and for JAX XLA's plan
    of the compiled step (`xla_plan()`, the `xla_memory_plan` of it: temporaries plus
    outputs not written in place), since JAX's device peak cannot be reset; on a CPU,
    where neither framework has a resettable peak, `host_call_peak` with thread arenas
    (it runs `run` twice). Chapter `04_gpt_training` reads its steps this way."""
    if framework not in ("torch", "jax"):
        raise ValueError(f"framework must be 'torch' or 'jax', got {framework!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return host_call_peak(run, thread_arenas=True)
    if framework == "torch":
        return torch_cuda_peak(run)
    if xla_plan is None:
        raise ValueError("a JAX step on a GPU needs xla_plan: its device peak cannot be reset")
    plan = xla_plan()
    return MemoryReading(plan["temp"] + plan["output"] - plan["alias"], *TOOLS["xla_plan"])


def _rss(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field} line")


_OOM_MARKERS = ("out of memory", "can't allocate memory", "resource_exhausted",
                "cannot allocate memory")


def is_out_of_memory(error: BaseException) -> bool:
    """True when `error` says an allocation failed: PyTorch (CUDA or CPU), JAX/XLA, NumPy.

    A sweep records such a configuration as OOM and goes on; any other error is a bug and
    should propagate.
    """
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(m in text for m in _OOM_MARKERS)


def psutil_rss_deltas(fn: Callable[[], object], calls: int) -> np.ndarray:
    """The seed's method: RSS after minus RSS before each call, in bytes, in this process.

    Kept to show why it misleads: allocators keep freed memory, so most calls read zero
    and the first reads everything; other threads' allocations land in any call's delta.
    """
    import psutil

    if not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be an integer >= 1, got {calls!r}")
    process = psutil.Process()
    deltas = np.empty(calls, dtype=np.int64)
    for i in range(calls):
        before = process.memory_info().rss
        block(fn())
        deltas[i] = process.memory_info().rss - before
    return deltas


def nvml_used(index: int = 0) -> MemoryReading | None:
    """Device-wide used memory as the driver reports it; ``None`` without an NVIDIA GPU.

    It counts every process and every reserved byte: under JAX's default preallocation
    (75% of the GPU at the first array) it says nothing about a workload's needs.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no driver or no device: nothing to read
        return None
    used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
    return MemoryReading(int(used), *TOOLS["nvml"])
