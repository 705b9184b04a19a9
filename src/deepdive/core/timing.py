"""Synced, blocked, interleaved timing with medians, IQRs and intervals.

The method follows `torch.utils.benchmark`'s blocked autorange: calls run in blocks
grown until a block lasts long enough that timer overhead is negligible, and every
block ends by waiting for the device (`deepdive.core.sync.block`). Inside a block each call's
output is dropped when the next call returns, as in a real loop, so the allocator can
reuse its memory; only the last output is kept, for the sync. That waits for every call
of the block because each framework finishes a device's work in the order it was
issued (CUDA streams, JAX's per-device queue; PyTorch on a CPU runs synchronously);
`tests/test_timing.py` checks this for JAX. The first call, which includes tracing and
compilation, is timed on its own and never mixed into the steady state. Chapter 1
introduces `measure` and `compare`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from deepdive.core.memory import is_out_of_memory
from deepdive.core.source import defined_in
from deepdive.core.sync import block, pace

__all__ = ["BLOCKS", "BOOTSTRAP_RESAMPLES", "MIN_BLOCK_S", "NOISY_REACH", "LocalRunner",
           "OutOfMemory", "Runner", "TimedElsewhere", "Timing", "compare", "compilations",
           "harness_cost", "interleaved", "measure", "median_interval", "speedup", "table"]

# A side is noisy when the 95% interval of its own median reaches more than 10% from it: a
# precision, which more rounds improve, not a spread (IQR/median), which load on a shared
# 2-vCPU machine sets and more rounds do not lower. 10% sits at or above the build's tie band
# (8-12% on those machines), so the label marks sides whose uncertainty can move a verdict.
NOISY_REACH = 0.10
BOOTSTRAP_RESAMPLES = 2000
# Every timed variant in the book gets at least this many blocks (samples): with fewer, a
# median's interval is too coarse to decide a comparison (methodology page).
BLOCKS = 15
# A block grows until it lasts this long: timer and sync overheads vanish in it. Blocks
# three times as long were no steadier on the 2-core build machine and took three times as
# long; the methodology page probes both lengths on every build.
MIN_BLOCK_S = 0.01
_MAX_CALLS_PER_BLOCK = 1_000_000
_sessions = itertools.count(1)


@dataclass(frozen=True)
class Timing:
    """Steady-state seconds per call, one sample per timed block, plus the first call."""

    label: str
    samples: np.ndarray = field(repr=False)
    calls_per_block: int
    first_call: float
    recompiles: int = 0
    # Which `compare` call produced it: samples of one session are paired round by round.
    session: int = 0
    # Seconds per call taken out of every sample: the harness's own readiness check
    # (`deepdive.core.sync.pace`), measured on this variant's output (`harness_cost`).
    harness_s: float = 0.0
    # Where the timed code was written ("module:qualname"; `deepdive.core.source`).
    code: tuple[str, ...] = ()

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
    def reach(self) -> float:
        """How uncertain the median is: how far, as a fraction of it, the distribution-free
        95% interval of the samples' median reaches from it (unpaired)."""
        low, high = self.ci95
        return max(high / self.median - 1, self.median / low - 1, 0.0)

    @property
    def noisy(self) -> bool:
        """True when the median's own 95% interval reaches beyond NOISY_REACH of it."""
        return self.reach > NOISY_REACH

    @property
    def ci95(self) -> tuple[float, float]:
        """A distribution-free 95% interval for the median (`median_interval`)."""
        return median_interval(self.samples)

    def __str__(self) -> str:
        flags = " NOISY" if self.noisy else ""
        flags += f" RECOMPILED x{self.recompiles}" if self.recompiles else ""
        spread = f"(IQR {_fmt(self.iqr)}, n={self.n} blocks x {self.calls_per_block} calls)"
        return f"{self.label}: median {_fmt(self.median)} {spread}, " \
               f"first call {_fmt(self.first_call)}{flags}"


@dataclass(frozen=True)
class OutOfMemory:
    """A variant that could not run for lack of memory: a result, not a crash (sweeps)."""

    label: str
    error: str

    def __str__(self) -> str:
        return f"{self.label}: out of memory ({self.error})"


def interleaved(a: Timing, b: Timing) -> bool:
    """True when `a` and `b` came from one `compare` call, so sample i of each is round i."""
    return a.session != 0 and a.session == b.session and a.n == b.n


def median_interval(values, confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of `values`: two order statistics.

    The median lies below the k-th smallest of n values with the probability that a fair
    coin shows fewer than k heads in n throws, so [x(k), x(n-k+1)] covers it with
    probability 1 - 2 P(Binomial(n, 1/2) < k). k is the largest count that keeps that
    coverage at `confidence` or more: for 15 values, the 4th and 12th (96.5%). Unlike a
    bootstrap of the median, it does not undercover at the book's sample sizes; with too
    few values for any k (under 6 at 95%) it is the full range.
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("median_interval needs at least one value")
    tail, k = 0.0, 0
    while k < n // 2 and tail + math.comb(n, k) / 2**n <= (1 - confidence) / 2:
        tail += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return float(x[0]), float(x[-1])
    return float(x[k - 1]), float(x[n - k])


def speedup(baseline: Timing, candidate: Timing) -> tuple[float, float, float]:
    """How many times faster `candidate` is than `baseline`, with a 95% interval.

    Returns ``(ratio, low, high)``. For two timings of one `compare` call (interleaved)
    the ratio is the median of the per-round ratios baseline/candidate, so a slow round
    slows both sides and cancels, and the interval is `median_interval` of those ratios.
    Otherwise it is median(baseline) / median(candidate) with a bootstrap interval, the
    two sample sets resampled independently. `deepdive.core.verdict` turns this into faster,
    slower, tie or inconclusive.
    """
    if candidate is baseline:
        return 1.0, 1.0, 1.0
    if interleaved(baseline, candidate):
        per_round = baseline.samples / candidate.samples
        low, high = median_interval(per_round)
        return float(np.median(per_round)), low, high
    base = np.median(_resample(baseline.samples, seed=1), axis=1)
    cand = np.median(_resample(candidate.samples, seed=2), axis=1)
    lo, hi = np.percentile(base / cand, [2.5, 97.5])
    return baseline.median / candidate.median, float(lo), float(hi)


def measure(
    fn: Callable,
    *args,
    label: str | None = None,
    blocks: int = BLOCKS,
    warmup: int = 1,
    min_block_s: float = MIN_BLOCK_S,
    min_calls: int = 1,
    sync: Callable | None = block,
    check: Callable[[object], None] | None = None,
    max_blocks: int | None = None,
) -> Timing:
    """Time ``fn(*args)``: first call apart, then `blocks` synced blocks of calls.

    blocks: timed blocks, one sample each (at least 1).
    warmup: untimed calls after the first call (at least 0).
    min_block_s: a block grows until it lasts this long, so timer and sync overhead
        vanish in it.
    min_calls: at least this many timed calls in all (the seed's 1000 iterations).
    sync: called on each block's last output before the clock stops; ``None`` times dispatch
        only, which is wrong for asynchronous frameworks and exists to show that.
    check: called with the first call's output before anything else is timed; it
        raises when the output is wrong (correct before fast).
    max_blocks: while the samples are noisy, blocks go on up to this many (`compare`).
    """
    if not callable(fn):
        raise TypeError(
            f"measure needs a callable, got a {type(fn).__name__}; pass the function and "
            "its arguments separately: measure(f, x), not measure(f(x))"
        )
    name = label or getattr(fn, "__name__", "fn")
    call = functools.partial(fn, *args)  # its code is fn's (`deepdive.core.source`)
    return compare({name: call}, blocks=blocks, warmup=warmup,
                   min_block_s=min_block_s, min_calls=min_calls, sync=sync,
                   check=None if check is None else {name: check}, max_blocks=max_blocks)[name]


def compare(
    variants: Mapping[str, Callable[[], object]],
    *,
    blocks: int = BLOCKS,
    warmup: int = 1,
    min_block_s: float = MIN_BLOCK_S,
    min_calls: int = 1,
    sync: Callable | None = block,
    check: Mapping[str, Callable[[object], None]] | None = None,
    record_oom: bool = False,
    max_blocks: int | None = None,
) -> dict[str, Timing | OutOfMemory]:
    """Time several zero-argument callables in rounds: one block of each per round.

    Interleaving spreads slow drifts of the machine (thermal, background load) over all
    variants instead of charging them to whichever ran last, and pairs their samples
    round by round (`speedup`, `deepdive.core.verdict`). The first round runs in the given
    order, later ones in a shuffled order (seeded, so a rerun repeats it): a fixed
    rotation would give each variant the same predecessor in almost every round, and
    what a block leaves behind in caches and allocators would bias its successor.
    Returns a Timing per label, in the given order; `table` turns it into a tidy frame
    with speed-ups. `check` maps labels to functions that validate the first call's
    output before any timing.

    After `blocks` rounds, while any variant is still noisy (its median's 95% interval
    reaching more than 10% from it: `Timing.noisy`), more rounds run, up to `max_blocks`
    (default: twice `blocks`), as
    `torch.utils.benchmark`'s adaptive autorange does: a slow spell of a shared machine
    then weighs less in the quartiles. Every variant gets the same rounds, so pairs stay
    paired; a variant still noisy at the end stays flagged.

    With `record_oom`, a variant that runs out of memory (`memory.is_out_of_memory`)
    becomes an `OutOfMemory` entry and the others go on; other errors always propagate.
    Chapter 5's batch-size sweep uses it.

    A variant may also be `TimedElsewhere`: an object whose ``runner(label, session)``
    returns a `Runner` timed elsewhere (`deepdive.models.xla_route.Remote`: steps in another
    process, whose own clock times each block); its blocks take their turns in the same
    rounds.
    """
    _check_options(variants, blocks, warmup, min_block_s, min_calls, sync)
    max_blocks = 2 * blocks if max_blocks is None else max_blocks
    if not isinstance(max_blocks, int) or isinstance(max_blocks, bool) or max_blocks < blocks:
        raise ValueError(f"max_blocks must be an integer >= blocks ({blocks}), got {max_blocks!r}")
    checks = dict(check or {})
    unknown = set(checks) - set(variants)
    if unknown:
        raise KeyError(f"check names variants that do not exist: {sorted(unknown)}")
    remote = sorted(label for label in checks if _is_remote(variants[label]))
    if remote:
        raise ValueError(f"check names variants timed elsewhere, whose outputs stay there: "
                         f"{remote}; give the remote variant its own check")
    session = next(_sessions)
    runners = [fn.runner(label, session) if _is_remote(fn)
               else LocalRunner(label, fn, sync, checks.get(label), session)
               for label, fn in variants.items()]
    for runner, fn in zip(runners, variants.values(), strict=True):
        runner.code = defined_in(fn)  # kept with the timing, as benchmark.Timer keeps its stmt
    failed: dict[str, OutOfMemory] = {}

    def attempt(runner, action) -> None:
        if runner.label in failed:
            return
        try:
            action()
        except Exception as error:
            if not (record_oom and is_out_of_memory(error)):
                raise
            runner.output = None  # let the framework reclaim what the failed call held
            failed[runner.label] = OutOfMemory(runner.label, str(error).strip().split("\n")[0])

    for runner in runners:
        attempt(runner, lambda r=runner: r.prepare(warmup, min_block_s,
                                                   math.ceil(min_calls / blocks)))
    def still_noisy() -> bool:
        return any(r.label not in failed and r.result().noisy for r in runners)

    order, rounds = np.random.default_rng(0), 0
    while rounds < blocks or (rounds < max_blocks and still_noisy()):
        for index in order.permutation(len(runners)) if rounds else range(len(runners)):
            attempt(runners[index], runners[index].time_block)
        rounds += 1
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


class Runner:
    """One variant's state while `compare` interleaves it with the others: the protocol
    every variant's runner follows, whether its calls run in this process (`LocalRunner`)
    or elsewhere (a `TimedElsewhere` variant's, such as `deepdive.models.xla_route.Remote`).

    `compare` calls `prepare(warmup, min_block_s, min_calls_per_block)` once (the first
    call, its check, the warm-up and the sizing of blocks), then `time_block()` once per
    round, then `result()`. A subclass implements the first two, which fill `first_call`,
    `calls_per_block`, `harness_s` (seconds per call of readiness checks taken out of each
    sample), `samples` (seconds per call, one per block) and `recompiles`; `result` turns
    them into a `Timing`. `output` holds the latest call's output where it is kept here
    (`compare` drops it when the variant runs out of memory)."""

    def __init__(self, label: str, session: int = 0):
        self.label, self.session = label, session
        self.samples: list[float] = []
        self.calls_per_block = 1
        self.first_call = math.nan
        self.recompiles = 0
        self.harness_s = 0.0
        self.output = None
        self.code: tuple[str, ...] = ()

    def prepare(self, warmup: int, min_block_s: float, min_calls_per_block: int) -> None:
        raise NotImplementedError

    def time_block(self) -> None:
        raise NotImplementedError

    def result(self) -> Timing:
        """The samples so far as a `Timing` (harness cost per call included)."""
        per_call = self.harness_s * (self.calls_per_block - 1) / self.calls_per_block
        return Timing(self.label, np.asarray(self.samples), self.calls_per_block,
                      self.first_call, self.recompiles, self.session, per_call, self.code)


@runtime_checkable
class TimedElsewhere(Protocol):
    """A `compare` variant whose calls run elsewhere (another process): instead of a
    zero-argument callable, an object whose `runner(label, session)` returns the `Runner`
    that times its blocks there, in the same rounds as the others."""

    def runner(self, label: str, session: int) -> Runner: ...


class LocalRunner(Runner):
    """A zero-argument callable timed in this process: `compare`'s runner for a plain
    variant, and the PyTorch/XLA worker's for its steps (`deepdive.models.xla_worker`)."""

    def __init__(self, label: str, fn: Callable[[], object], sync: Callable | None,
                 check: Callable[[object], None] | None = None, session: int = 0):
        super().__init__(label, session)
        self.fn, self.sync, self.check = fn, sync, check

    def run(self, calls: int) -> float:
        """Seconds for `calls` calls and the sync of the last one, garbage collector off."""
        self.output = None  # the previous block's output is not this block's business
        with _collector_paused():
            return self._timed_calls(calls)

    def _timed_calls(self, calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            previous, self.output = self.output, self.fn()
            # Dropping the previous output, as a loop does, lets its memory be reused:
            # holding every output would charge each call for fresh pages. With a sync,
            # the previous call is also waited for (`deepdive.core.sync.pace`), so no more
            # than one call runs ahead of the device.
            if self.sync is not None and previous is not None:
                pace(previous)
            previous = None
        if self.sync is not None:
            self.sync(self.output)
        return time.perf_counter() - start

    def prepare(self, warmup: int, min_block_s: float, min_calls_per_block: int) -> None:
        self.first_call = self.run(1)
        if self.check is not None:
            self.check(self.output)
        if self.sync is not None:  # the output is ready now: what checking it costs
            self.harness_s = harness_cost(self.output)
        warm = [self.run(1) for _ in range(warmup)]
        # Grow through 1, 2, 5, 10, 20, 50, ... calls until a block is long enough. An
        # interruption (or a size's first, colder run) can make one run look long enough,
        # which would leave every timed block short, so a second run must agree. The last
        # warm-up call counts as the first one-call run: a slow function pays less.
        calls, earlier = 1, (warm[-1] if warm else None)
        while calls < _MAX_CALLS_PER_BLOCK:
            first = earlier if earlier is not None else self.run(calls)
            earlier = None
            if first >= min_block_s and self.run(calls) >= min_block_s:
                break
            calls = _next_block_size(calls)
        self.calls_per_block = max(calls, min_calls_per_block)
        self.output = None

    def time_block(self) -> None:
        before = compilations()
        elapsed = self.run(self.calls_per_block)
        self.output = None
        self.recompiles += compilations() - before
        # Every call but the block's first paced its predecessor: take those checks out.
        paced = self.harness_s * (self.calls_per_block - 1)
        if paced >= 0.5 * elapsed:  # a lower bound cannot be half the block: a broken one
            raise RuntimeError(f"{self.label}: the readiness checks ({self.harness_s:.2e} s "
                               "each) would be half of the block they are part of; a call "
                               "this short cannot be timed with this harness")
        self.samples.append((elapsed - paced) / self.calls_per_block)


def harness_cost(output, calls: int = 500, repeats: int = 7) -> float:
    """Seconds the timer's readiness check (`deepdive.core.sync.pace`) costs on `output`, an
    output that is already computed, beyond what it costs on an object that needs no wait:
    a loop of `calls` checks of `output` less the same loop over a plain object, the
    smallest of `repeats` such differences. The timer takes it out of every sample, for
    PyTorch and JAX alike, so the check costs both frameworks the same: what remains is
    the common part every call pays (one attribute lookup), and what is taken out is what
    only some outputs need (a ready JAX array answers its wait in about half a microsecond;
    a pytree is walked). The smallest difference is a lower bound: noise on the loops can
    only make the timer take out less than the check cost, never more."""
    plain = object()

    def loop(value):
        start = time.perf_counter()
        for _ in range(calls):
            pace(value)
        return time.perf_counter() - start

    differences = [loop(output) - loop(plain) for _ in range(repeats)]
    return max(float(min(differences)) / calls, 0.0)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for one block, as `timeit` does: a collection
    would land in whichever block triggers it. Reference counting still frees every
    output; cycles wait until the block is over."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
        if not callable(fn) and not _is_remote(fn):
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
            f"sync must be a callable such as deepdive.core.sync.block, or None; got {sync!r}"
        )


def _is_remote(variant) -> bool:
    return isinstance(variant, TimedElsewhere) and callable(variant.runner)


def _fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
