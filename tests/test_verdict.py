"""deepdive.verdict: the one rule, on synthetic intervals and on real interleaved timings."""

import time

import numpy as np
import pytest

from deepdive.timing import Timing, compare
from deepdive.verdict import TieBand, classify, decide, measure_tie_band

BAND = TieBand(0.05)  # ties within [0.952, 1.05]


@pytest.mark.parametrize(
    ("ratio", "low", "high", "noisy", "expected"),
    [
        (2.0, 1.8, 2.2, False, "faster"),
        (1.08, 1.06, 1.10, False, "faster"),  # the whole interval above the band
        (0.5, 0.45, 0.55, False, "slower"),
        (1.01, 0.98, 1.03, False, "tie"),  # the whole interval inside the band
        (1.05, 1.02, 1.08, False, "inconclusive"),  # straddles the band's upper edge
        (1.0, 0.62, 2.49, False, "inconclusive"),  # too wide to decide anything
        (2.0, 1.8, 2.2, True, "inconclusive"),  # a noisy side decides nothing
        (1.0, 0.99, 1.01, True, "inconclusive"),
    ],
)
def test_classify_follows_the_rule(ratio, low, high, noisy, expected):
    assert classify(ratio, low, high, noisy, BAND) == expected


def test_the_tie_band_is_symmetric_in_log_space():
    assert BAND.low * BAND.high == pytest.approx(1.0)
    # A candidate 1.06x faster is faster; the same pair the other way round is slower.
    assert classify(1.07, 1.06, 1.08, False, BAND) == "faster"
    assert classify(1 / 1.07, 1 / 1.08, 1 / 1.06, False, BAND) == "slower"


def test_a_wider_band_turns_a_small_difference_into_a_tie():
    assert classify(1.04, 1.03, 1.05, False, TieBand(0.02)) == "faster"
    assert classify(1.04, 1.03, 1.05, False, TieBand(0.06)) == "tie"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.0, 1.1, 1.2), "must contain the ratio"),
        ((float("nan"), 0.9, 1.1), "ratio must be a positive finite ratio"),
        ((1.0, 0.0, 1.1), "low must be a positive finite ratio"),
    ],
)
def test_classify_rejects_impossible_intervals(args, message):
    with pytest.raises(ValueError, match=message):
        classify(*args, False, BAND)


@pytest.mark.parametrize("width", [-0.1, float("nan"), "5%"])
def test_a_tie_band_must_be_a_fraction(width):
    with pytest.raises(ValueError, match="a tie band's width is a fraction"):
        TieBand(width)


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_decide_calls_three_busy_waits_faster_than_one_per_three():
    timings = compare({"three": lambda: spin(3e-4), "one": lambda: spin(1e-4)},
                      min_block_s=0.01)

    v = decide(timings["three"], timings["one"], BAND)

    assert v.ratio == pytest.approx(3, rel=0.1)
    assert v.verdict == "faster" or v.noisy  # a loaded machine may flag it, never reverse it
    assert v.n == 15


def test_decide_refuses_timings_that_were_not_interleaved():
    first = compare({"a": lambda: spin(1e-4)}, blocks=3, min_block_s=0.001)["a"]
    second = compare({"b": lambda: spin(1e-4)}, blocks=3, min_block_s=0.001)["b"]

    with pytest.raises(ValueError, match="not timed in one compare"):
        decide(first, second, BAND)


def test_decide_pairs_rounds_so_a_slow_round_cancels():
    # Round 3 is slow for both sides: paired, the ratio stays exactly 2 in every round.
    base = np.array([2.0, 2.0, 6.0, 2.0, 2.0]) * 1e-3
    cand = base / 2
    baseline = Timing("base", base, 1, 0.0, session=7)
    candidate = Timing("cand", cand, 1, 0.0, session=7)

    v = decide(baseline, candidate, BAND)

    assert (v.ratio, v.low, v.high) == (2.0, 2.0, 2.0)


def test_measure_tie_band_reports_its_evidence_and_a_plausible_width():
    band = measure_tie_band(frameworks=("torch",))

    frame = band.frame()
    assert set(frame["workload"]) == {"torch tiny elementwise", "torch 256x256 matmul",
                                      "torch 1024x1024 matmul"}
    assert 0 < band.width < 1  # copies of one workload differ by less than 2x
    # The band reaches as far as the widest A/A interval, no less.
    assert band.high >= frame["high"].max() - 1e-12
    assert band.low <= frame["low"].min() + 1e-12


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"frameworks": ("tensorflow",)}, "frameworks must be some of"),
     ({"frameworks": ()}, "frameworks must be some of"),
     ({"copies": 1}, "copies must be an integer >= 2")],
)
def test_measure_tie_band_rejects_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        measure_tie_band(**kwargs)
