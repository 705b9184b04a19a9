"""One rule for every comparison in the book: faster, slower, tie, or withheld.

A comparison is two timings of one `deepdive.core.timing.compare` call, so their blocks were
interleaved round by round. Its ratio is the median of the per-round ratios
(baseline time / candidate time: above 1, the candidate is faster) with a
distribution-free 95% interval for that median (`deepdive.core.timing.speedup`). The verdict
then reads the interval against a tie band, ratios within [1 / (1 + w), 1 + w]:

- **faster** when the whole interval lies above the band, **slower** when it lies below;
- **tie** when the whole interval lies inside the band;
- **withheld** when the interval straddles an edge of the band: the data cannot tell a
  tie from a difference.

The band is the build's run-to-run spread, measured once per build
(`deepdive.book.calibration`, which calls `measure_tie_band`): separately built copies of the
same workloads, timed against each other like any comparison; it reaches as far from 1 as
nine in ten of their intervals did. Two things can widen it for one comparison, never narrow it:

- an A/A control of that comparison's baseline, timed in the same rounds (`widen`): the
  band reaches as far as the control's interval did;
- a **noisy** side (`Timing.noisy`): one whose own median is uncertain, that is, the
  distribution-free 95% interval of its median, from its samples alone and unpaired,
  reaches more than 10% from that median (`noise_reach`). The paired interval already
  carries the noise that hits both sides of a round, but such a side's median moves more
  from one build to the next, so the band that faster or slower must clear (the decision
  band) widens to that reach where it exceeds the band. A tie still needs the interval inside the
  unwidened band: noise makes no difference look smaller. A noisy side never withholds a
  verdict by itself; it is always reported, and a verdict decided with it reads "noisy,
  size uncertain".

`tests/test_verdict.py` times A/A pairs on a loaded machine and checks that the rule
decides at most 5% of them; the methodology page runs the same experiment on every build.
The methodology page explains the rule; `deepdive.book.claims` records every verdict.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from deepdive.core.timing import Timing, compare, interleaved, speedup

__all__ = ["BAND_COPIES", "BAND_QUANTILE", "BY_CONTROL", "BY_NOISE", "DECIDED", "FRAMEWORKS",
           "REASONS", "VERDICTS", "TieBand", "Verdict", "best_of", "classify", "decide",
           "measure_tie_band", "noise_reach", "reach", "reason", "straddles", "widen"]

VERDICTS = ("faster", "slower", "tie", "withheld")
DECIDED = ("faster", "slower")
FRAMEWORKS = ("torch", "jax")
# Why a verdict reads as it does: claims.csv's `reason` column, and the pages' words.
REASONS = {"decided": "the interval lies outside the band",
           "decided, noisy": "noisy, size uncertain",
           "tie": "the interval lies inside the band",
           "tie, noisy": "noisy; the interval lies inside the band",
           "withheld": "the interval straddles an edge of the band",
           "withheld, noisy": "noisy: the interval reaches into the band widened for it"}
# What widened a comparison's band beyond the build's (claims.csv's `widened_by`).
BY_CONTROL, BY_NOISE = "an A/A control", "a noisy side"


@dataclass(frozen=True)
class TieBand:
    """Ratios within [1 / (1 + width), 1 + width] are ties on this build.

    `evidence` holds one row per A/A pair: the workload, its ratio and interval.
    """

    width: float
    evidence: tuple[dict, ...] = ()

    def __post_init__(self):
        # No upper bound: under load a noisy side's own median can be uncertain by more than
        # 10x, and the band a decision must clear is then that wide (the verdict withheld).
        if not (isinstance(self.width, int | float) and 0 <= self.width < math.inf):
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


def classify(ratio: float, low: float, high: float, band: TieBand,
             decision_band: TieBand | None = None) -> str:
    """The verdict for a speed-up `ratio` with 95% interval [`low`, `high`] (see module
    doc): faster or slower when the interval clears `decision_band` (`band` widened by a
    noisy side's uncertainty; by default `band` itself), tie when it lies inside `band`."""
    for name, value in (("ratio", ratio), ("low", low), ("high", high)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite ratio, got {value!r}")
    if not low <= ratio <= high:
        raise ValueError(f"the interval [{low}, {high}] must contain the ratio {ratio}")
    wide = decision_band or band
    if wide.width < band.width:
        raise ValueError(f"the decision band (±{wide.width}) may not be narrower than the "
                         f"tie band (±{band.width})")
    if low > wide.high:
        return "faster"
    if high < wide.low:
        return "slower"
    if band.low <= low and high <= band.high:
        return "tie"
    return "withheld"


def reason(verdict: str, noisy: bool, straddles: bool = True) -> str:
    """Why `verdict` reads as it does (`REASONS`), given whether a side was noisy and, for
    a withheld one, whether its interval straddles the unwidened band (else it reached
    only into the part a noisy side added)."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if verdict == "withheld":
        return REASONS["withheld" if straddles or not noisy else "withheld, noisy"]
    key = "tie" if verdict == "tie" else "decided"
    return REASONS[f"{key}, noisy" if noisy else key]


def straddles(low: float, high: float, band: TieBand) -> bool:
    """Whether the interval [`low`, `high`] crosses an edge of `band`."""
    return low < band.low <= high or low <= band.high < high


@dataclass(frozen=True)
class Verdict:
    """A decided comparison: candidate against baseline, and what the rule made of it.

    `band` is the tie band the rule applied; `decision_band` what faster or slower had to
    clear (the tie band, widened by a noisy side's own uncertainty where that reaches
    further); `widened_by` says whether noise widened it."""

    baseline: str
    candidate: str
    ratio: float
    low: float
    high: float
    noisy: bool
    n: int
    verdict: str
    band: float
    decision_band: float
    widened_by: str = ""

    @property
    def reason(self) -> str:
        return reason(self.verdict, self.noisy,
                      straddles(self.low, self.high, TieBand(self.band)))


def noise_reach(timing: Timing) -> float:
    """How uncertain a side's own median is (`Timing.reach`): how far, as a fraction of the
    median, the distribution-free 95% interval of its samples' median reaches from it."""
    return timing.reach


def decide(baseline: Timing, candidate: Timing, band: TieBand) -> Verdict:
    """Apply the rule to two interleaved timings; refuses timings from separate runs."""
    if not interleaved(baseline, candidate):
        raise ValueError(
            f"{baseline.label!r} and {candidate.label!r} were not timed in one compare() "
            "call: the rule needs interleaved rounds, so time them together"
        )
    ratio, low, high = speedup(baseline, candidate)
    # One threshold: a noisy side (`Timing.noisy`: its median's own interval reaches more
    # than 10% from it) widens the band to that reach where the reach exceeds the band.
    noisy_sides = [t for t in (baseline, candidate) if t.noisy]
    width = max([band.width, *(noise_reach(t) for t in noisy_sides)])
    widened_by = BY_NOISE if width > band.width else ""
    verdict = classify(ratio, low, high, band, TieBand(width))
    return Verdict(baseline.label, candidate.label, ratio, low, high, bool(noisy_sides),
                   baseline.n, verdict, band.width, width, widened_by)


def best_of(timings: Mapping[str, Timing], labels: Iterable[str]) -> str:
    """Of `labels`, the one whose timing has the lowest median: a framework's best checked
    variant, which a cross-framework claim compares (and names in its question)."""
    labels = list(labels)
    missing = [label for label in labels if label not in timings]
    if not labels or missing:
        raise KeyError(f"best_of needs labels among the timings; missing: {missing or 'all'}")
    usable = [label for label in labels if isinstance(timings[label], Timing)]
    if not usable:
        raise ValueError(f"none of {labels} has a timing (out of memory?)")
    return min(usable, key=lambda label: timings[label].median)


def reach(ratio_interval: tuple[float, float, float]) -> float:
    """How far from 1, as a fraction, an A/A pair's 95% interval reaches."""
    _, low, high = ratio_interval
    return max(high - 1, 1 / low - 1, 0.0)


def widen(band: TieBand, baseline: Timing, control: Timing) -> TieBand:
    """The band for one comparison: the given one, or as far as an A/A control of that
    comparison's own baseline reached, whichever is wider."""
    if not interleaved(baseline, control):
        raise ValueError(f"the control {control.label!r} was not timed in the same compare() "
                         f"call as {baseline.label!r}: time the copy in the same rounds")
    return TieBand(max(band.width, reach(speedup(baseline, control))), band.evidence)


# The share of A/A pairs whose interval the band must contain: not every pair's, since the
# single widest of many pairs moves from build to build more than the spread it stands for.
BAND_QUANTILE = 0.9
BAND_COPIES = 3


def measure_tie_band(frameworks: Iterable[str] = FRAMEWORKS, copies: int = BAND_COPIES,
                     device: str = "cpu") -> TieBand:
    """This build's run-to-run spread, measured now: the tie band for its comparisons.

    For each framework, three workloads at the time scales the book compares, a tiny
    elementwise op (microseconds: dispatch), a 256x256 matmul (a fraction of a
    millisecond) and a 1024x1024 matmul (tens of milliseconds on one CPU core, as long as
    a small training step), are each built `copies` times, with their own inputs and, for
    JAX, their own compilation. All copies are timed in one interleaved `compare`,
    exactly as comparisons are. Every pair of copies of one workload should be a tie; the
    band reaches as far from 1 as nine in ten of their 95% intervals did (`BAND_QUANTILE`
    of the pairs' reaches, an observed one): with three copies, 18 pairs, so one outlying
    pair does not set the band, and two builds' bands agree more closely. `device` is
    where PyTorch's copies run ("cpu" or "cuda"); JAX's run on its CPU or its default
    device. A build measures it once (`deepdive.book.calibration`) and every page reads it.
    """
    frameworks = tuple(frameworks)
    unknown = set(frameworks) - set(FRAMEWORKS)
    if not frameworks or unknown:
        raise ValueError(f"frameworks must be some of {FRAMEWORKS}, got {frameworks!r}")
    if not isinstance(copies, int) or copies < 2:
        raise ValueError(f"copies must be an integer >= 2 (pairs need two), got {copies!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    builders = {name: build for framework in frameworks
                for name, build in _WORKLOADS[framework](device).items()}
    variants = {f"{name} #{i + 1}": build() for name, build in builders.items()
                for i in range(copies)}
    timings = compare(variants)
    evidence = []
    for name in builders:
        for i, j in itertools.combinations(range(1, copies + 1), 2):
            first, other = timings[f"{name} #{i}"], timings[f"{name} #{j}"]
            ratio, low, high = speedup(first, other)
            evidence.append({"workload": name, "pair": f"#{i} / #{j}", "ratio": ratio,
                             "low": low, "high": high,
                             "reach": reach((ratio, low, high)),
                             "noisy": bool(first.noisy or other.noisy),
                             "median (µs)": first.median * 1e6})
    width = float(np.quantile([e["reach"] for e in evidence], BAND_QUANTILE,
                              method="higher"))
    return TieBand(width, tuple(evidence))


def _torch_workloads(device: str) -> dict[str, Callable[[], Callable[[], object]]]:
    import torch

    def matmul(n):
        def build():
            a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
            return lambda: a @ b
        return build

    def tiny():
        v = torch.ones(16, device=device)
        return lambda: torch.sin(v * 1.0001 + 0.5)

    return {"torch tiny elementwise": tiny, "torch 256x256 matmul": matmul(256),
            "torch 1024x1024 matmul": matmul(1024)}


def _jax_workloads(device: str) -> dict[str, Callable[[], Callable[[], object]]]:
    import jax
    import jax.numpy as jnp

    # Committed to the device, so each jitted call runs there (JAX's CPU on a GPU build).
    target = jax.devices("cpu")[0] if device == "cpu" else jax.devices()[0]

    def matmul(n):
        def build():
            rng = np.random.default_rng(0)
            a, b = (jax.device_put(rng.standard_normal((n, n), dtype=np.float32), target)
                    for _ in range(2))
            fn = jax.jit(lambda x, y: jnp.tanh(x @ y))
            return lambda: fn(a, b)
        return build

    def tiny():
        v = jax.device_put(np.ones(16, dtype=np.float32), target)
        fn = jax.jit(lambda x: jnp.sin(x * 1.0001 + 0.5))
        return lambda: fn(v)

    return {"jax.jit tiny elementwise": tiny, "jax.jit 256x256 matmul": matmul(256),
            "jax.jit 1024x1024 matmul": matmul(1024)}


_WORKLOADS = {"torch": _torch_workloads, "jax": _jax_workloads}
