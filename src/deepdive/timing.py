"""Synced, blocked timing with medians, IQRs and bootstrap intervals.

The method follows `torch.utils.benchmark`'s blocked autorange: calls run in blocks
grown until a block lasts long enough that timer overhead is negligible, and every
block ends by waiting for the device (`deepdive.sync.block`). The first call, which
includes tracing and compilation, is timed on its own and never mixed into the steady
state. Chapter 1 introduces `measure` and `compare`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from deepdive.memory import is_out_of_memory
from deepdive.sync import block

NOISY_IQR_FRACTION = 0.10  # torch.utils.benchmark warns above the same ratio
BOOTSTRAP_RESAMPLES = 2000
_MAX_CALLS_PER_BLOCK = 1_000_000


@dataclass(frozen=True)
class Timing:
    """Steady-state seconds per call, one sample per timed block, plus the first call."""

    label: str
    samples: np.ndarray = field(repr=False)
    calls_per_block: int
    first_call: float
    recompiles: int = 0

    @property
    def n(self) -> int:
        """Number of samples (timed blocks)."""
        return len(self.samples)

    @property
    def calls(self) -> int:
        """Number of timed calls behind the samples."""
        return self.n * self.calls_per_block

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def q1(self) -> float:
        return float(np.percentile(self.samples, 25))

    @property
    def q3(self) -> float:
        return float(np.percentile(self.samples, 75))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def min(self) -> float:
        return float(np.min(self.samples))

    @property
    def noisy(self) -> bool:
        """True when IQR/median exceeds 10%: the median is then less trustworthy."""
        return self.iqr / self.median > NOISY_IQR_FRACTION

    @property
    def ci95(self) -> tuple[float, float]:
        """Bootstrap 95% interval for the median."""
        medians = np.median(_resample(self.samples, seed=0), axis=1)
        lo, hi = np.percentile(medians, [2.5, 97.5])
        return float(lo), float(hi)

    def __str__(self) -> str:
        flags = " NOISY" if self.noisy else ""
        flags += f" RECOMPILED x{self.recompiles}" if self.recompiles else ""
        return (
            f"{self.label}: median {_fmt(self.median)} (IQR {_fmt(self.iqr)}, "
            f"n={self.n} blocks x {self.calls_per_block} calls), "
            f"first call {_fmt(self.first_call)}{flags}"
        )


@dataclass(frozen=True)
class OutOfMemory:
    """A variant that could not run for lack of memory: a result, not a crash (sweeps)."""

    label: str
    error: str

    def __str__(self) -> str:
        return f"{self.label}: out of memory ({self.error})"


def speedup(baseline: Timing, candidate: Timing) -> tuple[float, float, float]:
    """How many times faster `candidate` is than `baseline`, with a bootstrap 95% interval.

    Returns ``(ratio, low, high)`` where ratio = median(baseline) / median(candidate);
    both sample sets are resampled independently.
    """
    if candidate is baseline:
        return 1.0, 1.0, 1.0
    base = np.median(_resample(baseline.samples, seed=1), axis=1)
    cand = np.median(_resample(candidate.samples, seed=2), axis=1)
    lo, hi = np.percentile(base / cand, [2.5, 97.5])
    return baseline.median / candidate.median, float(lo), float(hi)


def measure(
    fn: Callable,
    *args,
    label: str | None = None,
    blocks: int = 15,
    warmup: int = 1,
    min_block_s: float = 0.01,
    min_calls: int = 1,
    sync: Callable | None = block,
    check: Callable[[object], None] | None = None,
) -> Timing:
    """Time ``fn(*args)``: first call apart, then `blocks` synced blocks of calls.

    blocks: timed blocks, one sample each (at least 1).
    warmup: untimed calls after the first call (at least 0).
    min_block_s: a block grows until it lasts this long, so timer and sync overhead
        vanish in it.
    min_calls: at least this many timed calls in all (the seed's 1000 iterations).
    sync: called on each block's outputs before the clock stops; ``None`` times dispatch
        only, which is wrong for asynchronous frameworks and exists to show that.
    check: called with the first call's output before anything else is timed; it
        raises when the output is wrong (correct before fast).
    """
    if not callable(fn):
        raise TypeError(
            f"measure needs a callable, got a {type(fn).__name__}; pass the function and "
            "its arguments separately: measure(f, x), not measure(f(x))"
        )
    name = label or getattr(fn, "__name__", "fn")
    return compare({name: lambda: fn(*args)}, blocks=blocks, warmup=warmup,
                   min_block_s=min_block_s, min_calls=min_calls, sync=sync,
                   check=None if check is None else {name: check})[name]


def compare(
    variants: Mapping[str, Callable[[], object]],
    *,
    blocks: int = 15,
    warmup: int = 1,
    min_block_s: float = 0.01,
    min_calls: int = 1,
    sync: Callable | None = block,
    check: Mapping[str, Callable[[object], None]] | None = None,
    record_oom: bool = False,
) -> dict[str, Timing | OutOfMemory]:
    """Time several zero-argument callables with their blocks interleaved (A B C, B C A, ...).

    Interleaving spreads slow drifts of the machine (thermal, background load) over all
    variants instead of charging them to whichever ran last. Returns a Timing per label,
    in the given order; `table` turns it into a tidy frame with speed-ups. `check` maps
    labels to functions that validate the first call's output before any timing.
    With `record_oom`, a variant that runs out of memory (`memory.is_out_of_memory`)
    becomes an `OutOfMemory` entry and the others go on; other errors always propagate.
    Chapter 4's batch-size sweep uses it.
    """
    _check_options(variants, blocks, warmup, min_block_s, min_calls, sync)
    checks = dict(check or {})
    unknown = set(checks) - set(variants)
    if unknown:
        raise KeyError(f"check names variants that do not exist: {sorted(unknown)}")
    runners = [_Runner(label, fn, sync, checks.get(label)) for label, fn in variants.items()]
    failed: dict[str, OutOfMemory] = {}

    def attempt(runner, action) -> None:
        if runner.label in failed:
            return
        try:
            action()
        except Exception as error:
            if not (record_oom and is_out_of_memory(error)):
                raise
            runner.outputs = []  # let the framework reclaim what the failed call held
            failed[runner.label] = OutOfMemory(runner.label, str(error).strip().split("\n")[0])

    for runner in runners:
        attempt(runner, lambda r=runner: r.prepare(warmup, min_block_s,
                                                   math.ceil(min_calls / blocks)))
    for round_index in range(blocks):
        shift = round_index % len(runners)
        for runner in runners[shift:] + runners[:shift]:
            attempt(runner, runner.time_block)
    return {r.label: failed.get(r.label) or r.result() for r in runners}


def table(timings: Mapping[str, Timing], baseline: str | None = None):
    """A tidy pandas frame of timings; with `baseline`, speed-ups and their 95% intervals."""
    import pandas as pd

    if baseline is not None and baseline not in timings:
        raise KeyError(f"baseline {baseline!r} is not among the variants: {list(timings)}")
    if baseline is not None and isinstance(timings[baseline], OutOfMemory):
        raise ValueError(f"baseline {baseline!r} ran out of memory; pick a variant that ran")
    rows = []
    for label, t in timings.items():
        if isinstance(t, OutOfMemory):
            rows.append({"variant": label, "out_of_memory": True})
            continue
        row = {
            "variant": label, "median_s": t.median, "iqr_s": t.iqr, "min_s": t.min,
            "n_blocks": t.n, "calls": t.calls, "first_call_s": t.first_call,
            "noisy": t.noisy, "recompiles": t.recompiles, "out_of_memory": False,
        }
        if baseline is not None:
            ratio, lo, hi = speedup(timings[baseline], t)
            row.update(speedup=ratio, speedup_lo=lo, speedup_hi=hi)
        rows.append(row)
    return pd.DataFrame(rows)


class _Runner:
    """One variant's state while `compare` interleaves it with the others."""

    def __init__(self, label: str, fn: Callable[[], object], sync: Callable | None,
                 check: Callable[[object], None] | None = None):
        self.label, self.fn, self.sync, self.check = label, fn, sync, check
        self.samples: list[float] = []
        self.calls_per_block = 1
        self.first_call = math.nan
        self.recompiles = 0

    def _run(self, calls: int) -> float:
        self.outputs = []
        start = time.perf_counter()
        for _ in range(calls):
            self.outputs.append(self.fn())
        if self.sync is not None:
            self.sync(self.outputs)
        return time.perf_counter() - start

    def prepare(self, warmup: int, min_block_s: float, min_calls_per_block: int) -> None:
        self.first_call = self._run(1)
        if self.check is not None:
            self.check(self.outputs[0])
        for _ in range(warmup):
            self._run(1)
        calls = 1
        # Grow through 1, 2, 5, 10, 20, 50, ... calls until a block is long enough. An
        # interruption (or a size's first, colder run) can make one run look long enough,
        # which would leave every timed block short, so a second run must agree.
        while calls < _MAX_CALLS_PER_BLOCK and not (
            self._run(calls) >= min_block_s and self._run(calls) >= min_block_s
        ):
            calls = _next_block_size(calls)
        self.calls_per_block = max(calls, min_calls_per_block)

    def time_block(self) -> None:
        before = compilations()
        elapsed = self._run(self.calls_per_block)
        self.outputs = []
        self.recompiles += compilations() - before
        self.samples.append(elapsed / self.calls_per_block)

    def result(self) -> Timing:
        return Timing(self.label, np.asarray(self.samples), self.calls_per_block,
                      self.first_call, self.recompiles)


_jax_compiles = 0
_jax_listener_installed = False


def compilations() -> int:
    """Compilations so far in this process: XLA backend compiles plus Dynamo graphs.

    A change during timed blocks means the steady state was not steady (a recompile on a
    new shape, say); `Timing.recompiles` reports it instead of absorbing it.
    """
    global _jax_listener_installed
    total = 0
    if "jax" in sys.modules:
        if not _jax_listener_installed:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(_count_jax_compile)
            _jax_listener_installed = True
        total += _jax_compiles
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        total += counters["stats"]["unique_graphs"]
    return total


def _count_jax_compile(event: str, duration: float, **_) -> None:
    global _jax_compiles
    if event == "/jax/core/compile/backend_compile_duration":
        _jax_compiles += 1


def _next_block_size(calls: int) -> int:
    magnitude = 10 ** int(math.log10(calls))
    for step in (1, 2, 5, 10):
        if step * magnitude > calls:
            return step * magnitude
    return 10 * magnitude


def _resample(samples: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(samples, size=(BOOTSTRAP_RESAMPLES, len(samples)), replace=True)


def _check_options(variants, blocks, warmup, min_block_s, min_calls, sync) -> None:
    if not isinstance(variants, Mapping) or not variants:
        raise TypeError("variants must be a non-empty mapping of label -> zero-argument callable")
    for label, fn in variants.items():
        if not callable(fn):
            raise TypeError(
                f"variant {label!r} is a {type(fn).__name__}, not a callable; pass the "
                "function itself (or a lambda), not its result"
            )
    for name, value, least in (("blocks", blocks, 1), ("warmup", warmup, 0),
                               ("min_calls", min_calls, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if not isinstance(min_block_s, int | float) or not min_block_s >= 0:
        raise ValueError(f"min_block_s must be a number of seconds >= 0, got {min_block_s!r}")
    if sync is not None and not callable(sync):
        raise TypeError(
            f"sync must be a callable such as deepdive.sync.block, or None; got {sync!r}"
        )


def _fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
