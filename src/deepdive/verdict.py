"""One rule for every comparison in the book: faster, slower, tie, or inconclusive.

A comparison is two timings of one `deepdive.timing.compare` call, so their blocks were
interleaved round by round. Its ratio is the median of the per-round ratios
(baseline time / candidate time: above 1, the candidate is faster) with a
distribution-free 95% interval for that median (`deepdive.timing.speedup`). The verdict
then reads:

- **inconclusive** when either side is noisy (IQR above 10% of its median): its median is
  not trustworthy enough to compare;
- **faster** when the whole interval lies above the tie band, **slower** when it lies
  below it;
- **tie** when the whole interval lies inside the band;
- **inconclusive** otherwise: the interval straddles an edge of the band, so the data
  cannot tell a tie from a difference.

The tie band is this build's own run-to-run spread, measured when the chapter runs
(`measure_tie_band`): separately built copies of the same workloads, timed against each
other like any comparison; the band reaches as far from 1 as their intervals did. A
comparison that carries its own A/A control (a second copy of its baseline in the same
rounds) widens the band to that control's reach (`widen`). Chapter 1 introduces the rule;
`deepdive.claims` records every verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from deepdive.timing import Timing, compare, interleaved, speedup

VERDICTS = ("faster", "slower", "tie", "inconclusive")
FRAMEWORKS = ("torch", "jax")


@dataclass(frozen=True)
class TieBand:
    """Ratios within [1 / (1 + width), 1 + width] are ties on this build.

    `evidence` holds one row per A/A pair: the workload, its ratio and interval.
    """

    width: float
    evidence: tuple[dict, ...] = ()

    def __post_init__(self):
        if not (isinstance(self.width, int | float) and 0 <= self.width < 10):
            raise ValueError(f"a tie band's width is a fraction such as 0.03, got {self.width!r}")

    @property
    def low(self) -> float:
        return 1 / (1 + self.width)

    @property
    def high(self) -> float:
        return 1 + self.width

    def frame(self):
        """The A/A evidence as a table, for the page."""
        import pandas as pd

        return pd.DataFrame(list(self.evidence))


def classify(ratio: float, low: float, high: float, noisy: bool, band: TieBand) -> str:
    """The verdict for a speed-up `ratio` with 95% interval [`low`, `high`] (see module doc)."""
    for name, value in (("ratio", ratio), ("low", low), ("high", high)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite ratio, got {value!r}")
    if not low <= ratio <= high:
        raise ValueError(f"the interval [{low}, {high}] must contain the ratio {ratio}")
    if noisy:
        return "inconclusive"
    if low > band.high:
        return "faster"
    if high < band.low:
        return "slower"
    if band.low <= low and high <= band.high:
        return "tie"
    return "inconclusive"


@dataclass(frozen=True)
class Verdict:
    """A decided comparison: candidate against baseline, and what the rule made of it."""

    baseline: str
    candidate: str
    ratio: float
    low: float
    high: float
    noisy: bool
    n: int
    verdict: str


def decide(baseline: Timing, candidate: Timing, band: TieBand) -> Verdict:
    """Apply the rule to two interleaved timings; refuses timings from separate runs."""
    if not interleaved(baseline, candidate):
        raise ValueError(
            f"{baseline.label!r} and {candidate.label!r} were not timed in one compare() "
            "call: the rule needs interleaved rounds, so time them together"
        )
    ratio, low, high = speedup(baseline, candidate)
    noisy = bool(baseline.noisy or candidate.noisy)
    return Verdict(baseline.label, candidate.label, ratio, low, high, noisy, baseline.n,
                   classify(ratio, low, high, noisy, band))


def reach(ratio_interval: tuple[float, float, float]) -> float:
    """How far from 1, as a fraction, an A/A pair's 95% interval reaches."""
    _, low, high = ratio_interval
    return max(high - 1, 1 / low - 1, 0.0)


def widen(band: TieBand, baseline: Timing, control: Timing) -> TieBand:
    """The band for one comparison: the chapter's, or as far as an A/A control of that
    comparison's own baseline reached, whichever is wider."""
    if not interleaved(baseline, control):
        raise ValueError(f"the control {control.label!r} was not timed in the same compare() "
                         f"call as {baseline.label!r}: time the copy in the same rounds")
    return TieBand(max(band.width, reach(speedup(baseline, control))), band.evidence)


def measure_tie_band(frameworks: Iterable[str] = FRAMEWORKS, copies: int = 2) -> TieBand:
    """This build's run-to-run spread, measured now: the tie band for its comparisons.

    For each framework, three workloads at the time scales the book compares, a tiny
    elementwise op (microseconds: dispatch), a 256x256 matmul (a fraction of a
    millisecond) and a 1024x1024 matmul (tens of milliseconds on one CPU core, as long as
    a small training step), are each built `copies` times, with their own inputs and, for
    JAX, their own compilation. All copies are timed in one interleaved `compare`,
    exactly as comparisons are. Every pair of copies of one workload should be a tie; the
    band reaches as far from 1 as any of their 95% intervals did.
    """
    frameworks = tuple(frameworks)
    unknown = set(frameworks) - set(FRAMEWORKS)
    if not frameworks or unknown:
        raise ValueError(f"frameworks must be some of {FRAMEWORKS}, got {frameworks!r}")
    if not isinstance(copies, int) or copies < 2:
        raise ValueError(f"copies must be an integer >= 2 (pairs need two), got {copies!r}")
    builders = {name: build for framework in frameworks
                for name, build in _WORKLOADS[framework]().items()}
    variants = {f"{name} #{i + 1}": build() for name, build in builders.items()
                for i in range(copies)}
    timings = compare(variants)
    evidence, widest = [], 0.0
    for name in builders:
        first = timings[f"{name} #1"]
        for i in range(2, copies + 1):
            other = timings[f"{name} #{i}"]
            ratio, low, high = speedup(first, other)
            widest = max(widest, reach((ratio, low, high)))
            evidence.append({"workload": name, "pair": f"#1 / #{i}", "ratio": ratio,
                             "low": low, "high": high,
                             "noisy": bool(first.noisy or other.noisy),
                             "median (µs)": first.median * 1e6})
    return TieBand(float(widest), tuple(evidence))


def _torch_workloads() -> dict[str, Callable[[], Callable[[], object]]]:
    import torch

    def matmul(n):
        def build():
            a, b = torch.randn(n, n), torch.randn(n, n)
            return lambda: a @ b
        return build

    def tiny():
        v = torch.ones(16)
        return lambda: torch.sin(v * 1.0001 + 0.5)

    return {"torch tiny elementwise": tiny, "torch 256x256 matmul": matmul(256),
            "torch 1024x1024 matmul": matmul(1024)}


def _jax_workloads() -> dict[str, Callable[[], Callable[[], object]]]:
    import jax
    import jax.numpy as jnp

    def matmul(n):
        def build():
            rng = np.random.default_rng(0)
            a, b = (jnp.asarray(rng.standard_normal((n, n), dtype=np.float32))
                    for _ in range(2))
            fn = jax.jit(lambda x, y: jnp.tanh(x @ y))
            return lambda: fn(a, b)
        return build

    def tiny():
        v = jnp.ones(16)
        fn = jax.jit(lambda x: jnp.sin(x * 1.0001 + 0.5))
        return lambda: fn(v)

    return {"jax.jit tiny elementwise": tiny, "jax.jit 256x256 matmul": matmul(256),
            "jax.jit 1024x1024 matmul": matmul(1024)}


_WORKLOADS = {"torch": _torch_workloads, "jax": _jax_workloads}
