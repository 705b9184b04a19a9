"""A chapter's plan: what it will run at this scale, and whether that fits, before it runs.

A plan lists `Work`: groups of timed configurations with their analytic FLOPs, memory
traffic and device memory. Its time estimate is a roofline under stated assumptions: a
call takes the longest of its FLOPs at `EFFICIENCY` of the device's peak for its dtype,
its traffic at the same share of the device's bandwidth, and its dispatches at `DISPATCH_S`
each; `timing.compare`'s protocol sets how many calls run (`BLOCKS` blocks of at least
`MIN_BLOCK_S`; the extra rounds a noisy variant gets are not counted); each compilation
adds assumed seconds (`compile_seconds`).
`Plan.check` refuses a plan whose estimate passes the scale's budget or the book's cell
timeout, or whose required memory passes the device's, and names a smaller scale.
Chapter 1 introduces plans; every chapter prints its own before it measures anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from deepdive.core import flops
from deepdive.core.env import SCALES
from deepdive.core.timing import BLOCKS, MIN_BLOCK_S

__all__ = ["BUDGET_S", "CELL_HEADROOM", "CELL_TIMEOUT_S", "COMPILE_S", "CPU_BANDWIDTH_PER_THREAD",
           "CPU_FLOPS_PER_THREAD", "DISPATCH_S", "EFFICIENCY", "MEMORY_HEADROOM",
           "PROCESS_START_S", "REFERENCE_CPU_FP32_FLOPS", "Call", "Plan", "PlanDoesNotFit",
           "Target", "Work", "alike", "compile_seconds", "cpu_target", "gpu_target",
           "host_target", "slowness", "this_target"]

# Assumptions, stated on every printed plan. The share of peak FLOP/s and bandwidth a step
# or a large kernel reaches: on a GPU 0.2, near the low end of the MFU the PyTorch 2.0
# slides state for GPT-2 on an A100 (16.25% and 27.2%; the choosing chapter's sources);
# on a CPU 0.6, below what the GPT chapter's steps reached against this build's measured
# matmul peak.
EFFICIENCY = {"cuda": 0.2, "cpu": 0.6}
DISPATCH_S = 20e-6  # one eager op or one jitted call from Python, launch included
# Seconds per compilation, (base, per transformer layer): Dynamo inlines every layer and
# XLA compiles the whole program, so both grow with depth. CPU figures are this book's
# 2-core build (first calls in the results: a tiny function ~1 s once Inductor is set up,
# a two-layer GPT's training step 14-20 s, jax.jit well under a second; aot_eager and
# the cudagraphs backend generate no code); GPU figures are
# assumed: Inductor generates Triton kernels from a cold cache on every build
# (env.fresh_inductor_cache), and max-autotune also benchmarks GEMM and kernel variants.
# torch_xla: one graph of the PyTorch/XLA page's two-layer ViT step took 4.5-5.3 s on the
# CPU build (lazy tensors, first steps); it runs on CPUs only, so the cuda entry is unused.
COMPILE_S = {
    "cpu": {"jax.jit": (0.2, 0.5), "aot_eager": (1.0, 0.5), "torch.compile": (1.5, 7.0),
            "max-autotune": (1.5, 7.0), "torch_xla": (2.0, 1.25)},
    "cuda": {"jax.jit": (1.0, 1.0), "aot_eager": (1.0, 0.5), "torch.compile": (3.0, 4.0),
             "max-autotune": (40.0, 15.0), "torch_xla": (2.0, 1.25)},
}
# Seconds to start a fresh Python process that imports the frameworks (and, on a GPU,
# initialises CUDA): chapters start some to measure what a process alone can show.
PROCESS_START_S = {"cpu": 3.0, "cuda": 10.0}
# What a scale's chapter may take in all (DESIGN.md, Scale); `full` is bounded per cell.
BUDGET_S = {"small": 180.0, "medium": 600.0, "full": None}
# The budgets are the reference build machine's: a 2-core Intel Xeon whose calibration
# measured this fp32 matmul peak (the 2026-11-28 bundle of torch 2.15.0 and jax 0.12.0.1,
# 152.9 GFLOP/s), on which the book's pages ran in about 870 s. A slower CPU gets budgets
# and hang guards stretched by its measured slowness (`slowness`): a 2-core AMD EPYC without
# AVX-512 measured 93.4 GFLOP/s (1.64x slower) and ran the same pages in 1,391 s (1.60x).
REFERENCE_CPU_FP32_FLOPS = 152.9e9
CELL_TIMEOUT_S = 3600.0  # _config.yml execute.timeout (a test keeps them equal)
CELL_HEADROOM = 0.75  # a cell's estimate may use this share of the timeout: estimates err
MEMORY_HEADROOM = 0.85  # of the device's memory: CUDA context, allocator fragmentation
# A CPU build's assumed rates per compute thread (one thread per framework by default):
# an AVX2 server core's fp32 FMA peak at ~3 GHz, and its streaming bandwidth.
CPU_FLOPS_PER_THREAD = 100e9
CPU_BANDWIDTH_PER_THREAD = 10e9

# Datasheet memory bandwidth, GB/s, keyed like flops' peak table (lower figure where
# variants of a part differ: A100 40GB PCIe's 1555 over 80GB SXM's 2039).
_BANDWIDTH_GBS = {"T4": 320, "L4": 300, "A10": 600, "L40S": 864, "A100": 1555,
                  "H100 SXM": 3350, "H100 PCIe": 2000, "H100 NVL": 3900, "H200 SXM": 4800,
                  "H200 NVL": 4800, "B200": 7700}


def slowness(fp32_flops_per_s: float) -> float:
    """How much longer than the reference machine this CPU takes, from its measured fp32
    matmul peak (`deepdive.book.calibration`): at least 1, so a faster CPU keeps the budgets."""
    if not (isinstance(fp32_flops_per_s, int | float) and fp32_flops_per_s > 0
            and math.isfinite(fp32_flops_per_s)):
        raise ValueError(f"a measured peak is a positive number of FLOP/s, "
                         f"got {fp32_flops_per_s!r}")
    return max(1.0, REFERENCE_CPU_FP32_FLOPS / fp32_flops_per_s)


class PlanDoesNotFit(RuntimeError):
    """A chapter's plan would overrun its budget, a cell's timeout or the device's memory."""


@dataclass(frozen=True)
class Target:
    """The device a plan is for: its name, kind, memory, bandwidth and peaks per dtype."""

    name: str
    kind: str  # "cuda" or "cpu"
    memory: float  # bytes
    bandwidth: float  # bytes per second
    peaks: dict = field(repr=False)  # dtype -> FLOP/s; a missing dtype runs at fp32's rate
    source: str = ""
    # Whether Inductor compiles bf16 here: on a CPU always (emulated where the CPU has no
    # bf16); on a GPU only with native bf16 (compute capability 8.0 on), else it refuses.
    inductor_bf16: bool = True
    # Whether the device computes in bf16 (env.bf16_native): where it emulates bf16, no bf16
    # claim is decided, so the chapters time only what a reader who turns bf16 on would meet.
    bf16_native: bool = True

    def peak(self, dtype: str) -> float:
        return self.peaks.get(dtype) or self.peaks["fp32"]


def gpu_target(name: str, memory: float, measure_peak=None, measure_bandwidth=None,
               bf16_native: bool | None = None) -> Target:
    """A GPU by its driver name and memory: datasheet peaks and bandwidth where the table has
    them; for a GPU the table does not know, the measurements passed in
    (`measure_peak(dtype)` -> flops.Peak for fp32 and bf16, `measure_bandwidth()` ->
    bytes/s), labelled as measured. A known part without a dtype's tensor cores (a T4's
    bf16) runs that dtype at its fp32 rate. Never raises for a name it does not know unless
    nothing was passed to measure with. `bf16_native` (compute capability 8.0 on, which
    also brings TF32) defaults to whether the datasheet lists bf16 tensor cores."""
    key = flops.datasheet_key(name)
    peaks, datasheet, sources = {}, set(), []
    for dtype in flops.DTYPES:
        try:
            peaks[dtype] = flops.peak_flops(name, dtype)[0]
            datasheet.add(dtype)
        except flops.NoDatasheetPeak:
            if key is None and measure_peak is not None and dtype in ("fp32", "bf16"):
                peaks[dtype] = measure_peak(dtype).flops_per_s
                sources.append(f"{dtype} peak measured")
    if key in _BANDWIDTH_GBS:
        bandwidth = _BANDWIDTH_GBS[key] * 1e9
        sources.append("datasheet bandwidth")
    elif measure_bandwidth is not None:
        bandwidth = measure_bandwidth()
        sources.append("bandwidth measured")
    else:
        raise ValueError(f"no datasheet bandwidth for {name!r} and nothing to measure it with; "
                         f"known: {', '.join(_BANDWIDTH_GBS)}")
    if "fp32" not in peaks:
        raise ValueError(f"no fp32 peak for {name!r}: pass measure_peak")
    if datasheet:
        sources.insert(0, f"datasheet peaks ({', '.join(sorted(datasheet))})")
    native = "bf16" in datasheet if bf16_native is None else bool(bf16_native)
    return Target(name, "cuda", memory, bandwidth, peaks, "; ".join(sources),
                  inductor_bf16=native, bf16_native=native)


def cpu_target(name: str, threads: int, memory: float, bf16_native: bool = True) -> Target:
    """A CPU build: `threads` compute threads at the assumed per-thread rates; `bf16_native`
    whether the CPU computes in bf16 (AVX512-BF16 or AMX: env.bf16_native)."""
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    noun = "thread" if threads == 1 else "threads"
    flops_s, bytes_s = CPU_FLOPS_PER_THREAD / 1e9, CPU_BANDWIDTH_PER_THREAD / 1e9
    rates = f"{flops_s:.0f} GFLOP/s and {bytes_s:.0f} GB/s"
    return Target(f"{name}, {threads} {noun}", "cpu", memory,
                  CPU_BANDWIDTH_PER_THREAD * threads, {"fp32": CPU_FLOPS_PER_THREAD * threads},
                  f"assumed {rates} per thread", bf16_native=bool(bf16_native))


def compile_seconds(kind: str, device: str, layers: int = 0) -> float:
    """Assumed seconds for one compilation by `kind` ("jax.jit", "torch.compile",
    "max-autotune") on `device` ("cpu" or "cuda") of a program of `layers` layers."""
    if device not in COMPILE_S:
        raise ValueError(f"device must be one of {', '.join(COMPILE_S)}, got {device!r}")
    if kind not in COMPILE_S[device]:
        raise ValueError(f"compiler {kind!r} is not known; accepted: "
                         f"{', '.join(COMPILE_S[device])}")
    base, per_layer = COMPILE_S[device][kind]
    return base + per_layer * layers


@dataclass(frozen=True)
class Call:
    """One variant's call: `flops` FLOPs, `traffic` bytes moved, `dispatches` framework
    calls from Python; `host` runs on the CPU beside a GPU (NumPy, simulated devices)."""

    flops: float = 0.0
    traffic: float = 0.0
    dispatches: float = 1.0
    dtype: str = "fp32"
    host: bool = False
    overhead_s: float = 0.0  # assumed seconds inside every call (a compile per call, ...)

    def seconds(self, target: Target, host: Target) -> float:
        on = host if self.host else target
        share = EFFICIENCY[on.kind]
        return self.overhead_s + max(self.flops / (on.peak(self.dtype) * share),
                                     self.traffic / (on.bandwidth * share),
                                     self.dispatches * DISPATCH_S)


@dataclass(frozen=True)
class Work:
    """Configurations timed together (one `compare` call, or one loop of one-off runs): one
    `Call` per variant, `compile_s` assumed seconds of compilation in all, `memory` bytes
    held on the device at the peak."""

    name: str
    calls: tuple
    compile_s: float = 0.0
    min_calls: int = 1  # timed calls per variant, at least (compare's min_calls)
    untimed_calls: int = 2  # the checked first call and the warm-up, plus any checked steps
    timed: bool = True  # False: each variant's calls run `min_calls` times, unblocked
    memory: float = 0.0
    may_oom: bool = False  # a sweep point that may run out of memory: recorded as OOM
    cell: str = ""  # the cell that runs it; a cell's items share one timeout
    fixed_s: float = 0.0  # seconds the model does not cover (process start-up, ...)

    def __post_init__(self):
        if not self.calls:
            raise ValueError(f"work {self.name!r} has no calls")

    def call_s(self, target: Target, host: Target | None = None) -> float:
        """The slowest variant's seconds per call."""
        return max(c.seconds(target, host or target) for c in self.calls)

    def runs_out(self, target: Target) -> bool:
        """A point that may run out and will: it fails at its first call, recorded as OOM."""
        return self.may_oom and self.memory > MEMORY_HEADROOM * target.memory

    def seconds(self, target: Target, host: Target | None = None) -> float:
        total = self.compile_s + self.fixed_s
        if self.runs_out(target):
            return total
        for c in self.calls:
            call = c.seconds(target, host or target)
            if self.timed:  # growing the first block (about two), then BLOCKS blocks
                block = max(MIN_BLOCK_S, max(1, math.ceil(self.min_calls / BLOCKS)) * call)
                total += (BLOCKS + 2) * block + self.untimed_calls * call
            else:
                total += (self.min_calls + self.untimed_calls) * call
        return total


def alike(n: int, call: Call) -> tuple:
    """`n` variants making the same call."""
    return (call,) * n


@dataclass(frozen=True)
class Plan:
    """What a chapter runs at `scale` on `target`, plus `other_s` assumed for the rest of
    the page (imports, checks, tie band, figures)."""

    chapter: str
    scale: str
    target: Target
    works: tuple
    other_s: float = 0.0
    host: Target | None = None  # the CPU beside a GPU, for host calls (default: target)
    budget_s: float | None = None  # default: BUDGET_S[scale]; plans.BUDGET_S_OF names longer ones

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r} is not one of {', '.join(SCALES)}")
        if not self.works:
            raise ValueError(f"{self.chapter}'s plan lists no work")
        if self.budget_s is None:
            object.__setattr__(self, "budget_s", BUDGET_S[self.scale])

    def seconds(self) -> float:
        return self.other_s + sum(w.seconds(self.target, self.host) for w in self.works)

    def cell_seconds(self) -> dict[str, float]:
        cells: dict[str, float] = {}
        for w in self.works:
            cells[w.cell or w.name] = (cells.get(w.cell or w.name, 0.0)
                                      + w.seconds(self.target, self.host))
        return cells

    def memory(self) -> float:
        """Peak bytes the plan needs on the device (points that may run out excluded)."""
        return max((w.memory for w in self.works if not w.may_oom), default=0.0)

    def problems(self) -> list[str]:
        found, budget = [], self.budget_s
        if budget is not None and self.seconds() > budget:
            found.append(f"estimated {self.seconds() / 60:.1f} min, over the {self.scale} "
                         f"budget of {budget / 60:.0f} min")
        for cell, seconds in self.cell_seconds().items():
            if seconds > CELL_HEADROOM * CELL_TIMEOUT_S:
                found.append(f"cell {cell!r} estimated {seconds / 60:.0f} min, over "
                             f"{CELL_HEADROOM:.0%} of the {CELL_TIMEOUT_S / 60:.0f} min cell "
                             "timeout")
        usable = MEMORY_HEADROOM * self.target.memory
        for w in self.works:
            if not w.may_oom and w.memory > usable:
                found.append(f"{w.name!r} needs {w.memory / 2**30:.1f} GiB, over "
                             f"{MEMORY_HEADROOM:.0%} of the device's "
                             f"{self.target.memory / 2**30:.1f} GiB")
        return found

    def check(self) -> Plan:
        """Return the plan if it fits; raise PlanDoesNotFit naming a smaller scale if not."""
        problems = self.problems()
        if problems:
            index = SCALES.index(self.scale)
            fix = (f"run a smaller scale: DEEPDIVE_SCALE={SCALES[index - 1]}" if index
                   else "this chapter cannot run on this device")
            raise PlanDoesNotFit(f"{self.chapter} at scale {self.scale} on {self.target.name}: "
                                 f"{'; '.join(problems)}; {fix}")
        return self

    def table(self):
        """One row per work item: variants, the slowest call, compiling and start-up
        seconds, the estimate and the memory, to three significant figures."""
        import pandas as pd

        def sig(x):
            return float(f"{x:.3g}")

        rows = [{"work": w.name, "variants": len(w.calls),
                 "GFLOP per call (most)": sig(max(c.flops for c in w.calls) / 1e9),
                 "ms per call (slowest)": sig(w.call_s(self.target, self.host) * 1e3),
                 "compiling s": sig(w.compile_s), "start-up s": sig(w.fixed_s),
                 "estimated s": sig(w.seconds(self.target, self.host)),
                 "memory GiB": sig(w.memory / 2**30),
                 "runs out": ("expected" if w.runs_out(self.target) else
                              "may" if w.may_oom else "no")}
                for w in self.works]
        rows.append({"work": "rest of the page (assumed)", "variants": "",
                     "GFLOP per call (most)": "", "ms per call (slowest)": "",
                     "compiling s": "", "start-up s": "", "estimated s": sig(self.other_s),
                     "memory GiB": "", "runs out": ""})
        return pd.DataFrame(rows).set_index("work")

    def summary(self) -> str:
        """The estimate, the limits it was checked against, and every assumption in it."""
        budget = self.budget_s
        limit = (f"budget {budget / 60:.0f} min" if budget is not None else
                 f"each cell within {CELL_HEADROOM:.0%} of {CELL_TIMEOUT_S / 60:.0f} min")
        kind = self.target.kind
        compiles = ", ".join(f"{k} {base:g} s + {layer:g} s per layer"
                             for k, (base, layer) in COMPILE_S[kind].items())
        on_cpu = kind == "cpu"
        return (f"{self.chapter} at scale {self.scale} on {self.target.name}, "
                f"{self.target.memory / 2**30:.1f} GiB: estimated "
                f"{self.seconds() / 60:.1f} min ({limit}) and about "
                f"{self.memory() / 2**30:.2f} GiB at the peak ({MEMORY_HEADROOM:.0%} of the "
                f"memory usable). Time assumes: {EFFICIENCY[kind]:.0%} of peak FLOP/s and "
                f"bandwidth ({self.target.source}); {DISPATCH_S * 1e6:.0f} µs per dispatch; "
                f"{BLOCKS} timed blocks per variant and about two more to size the first (the "
                "extra rounds a noisy variant gets are not counted); compiling ("
                + ("rounded from first-call times in this book's 2-core CPU build" if on_cpu
                   else "assumed, not measured") + f"): {compiles}; "
                f"{PROCESS_START_S[kind]:g} s per fresh process (assumed); the rest of the "
                f"page {self.other_s:g} s ("
                + ("fitted to this book's CPU build" if on_cpu else "assumed") + "). Memory "
                "assumes: weights and optimizer state at 12 bytes per fp32 parameter (16 with "
                "gradients kept), activations at 68 bytes per token, width and layer in fp32 "
                "(Korthikanti et al.'s 34 at 16 bits), plus attention scores where no flash "
                "kernel runs and three copies of the logits, once per allocator or CUDA-graph "
                "pool that keeps them (deepdive.book.plans says which).")


def this_target(kind: str) -> Target:
    """The device this build runs on ("cuda" or "cpu"), as a plan's target. A GPU outside
    the datasheet tables gets its peak and bandwidth measured, labelled as measured."""
    if kind == "cpu":
        return host_target()
    if kind != "cuda":
        raise ValueError(f"kind must be 'cuda' or 'cpu', got {kind!r}")
    import torch

    props = torch.cuda.get_device_properties(0)
    return gpu_target(props.name, props.total_memory, measure_peak=flops.measured_cuda_peak,
                      measure_bandwidth=lambda: flops.measured_copy_bandwidth(
                          2**28, device="cuda")[0],
                      bf16_native=(props.major, props.minor) >= (8, 0))


def host_target(threads: int | None = None) -> Target:
    """This machine's CPU with `threads` compute threads (default: env.compute_threads)."""
    import psutil

    from deepdive.core import env

    return cpu_target(env.cpu_model(), threads or env.compute_threads(),
                      psutil.virtual_memory().total, bf16_native=env.bf16_native("cpu"))
