"""deepdive.chapters.regimes: what the allocator regime did to a workload, read from the methodology
page's saved probe, one sentence chosen by the intervals."""

import pandas as pd
import pytest

from deepdive.chapters import regimes
from deepdive.core import allocator


def saved(kept, defaults, workload="GPT", jax_side="GPT jax.jit"):
    rows = []
    for regime, (ratio, low, high) in ((allocator.KEPT, kept), (allocator.DEFAULTS, defaults)):
        for metric, value in (("jax speed-up", ratio), ("low", low), ("high", high)):
            rows.append({"experiment": "allocator_regimes", "framework": "both",
                         "variant": f"{workload}: {jax_side} against GPT torch eager",
                         "size": regime, "metric": metric, "value": value})
    return pd.DataFrame(rows)


def test_intervals_apart_say_the_allocator_explained_part_of_the_gap():
    said = regimes.explained(saved((0.75, 0.73, 0.77), (0.55, 0.53, 0.57)), "GPT")

    assert "0.550x [0.530, 0.570] with glibc's defaults and 0.750x [0.730, 0.770] with " \
           "freed memory kept, intervals apart" in said
    assert said.endswith("fresh pages cost the two frameworks differently.")


def test_overlapping_intervals_say_the_regime_did_not_move_the_ratio():
    said = regimes.explained(saved((0.75, 0.70, 0.80), (0.74, 0.69, 0.79)), "GPT")

    assert said.endswith("The allocator regime did not move these ratios measurably.")


def test_no_probe_yet_and_an_unknown_workload_are_said_plainly():
    assert "has not run in this build" in regimes.explained(None, "ViT")
    with pytest.raises(KeyError, match="no allocator readings for 'ViT'"):
        regimes.explained(saved((1, 1, 1), (1, 1, 1)), "ViT")


class Recorder:
    """`Results.add`'s signature, rows kept as a frame like the saved results."""

    def __init__(self):
        self.rows = []

    def add(self, experiment, framework, variant, size, metric, value, unit):
        self.rows.append({"experiment": experiment, "framework": framework, "variant": variant,
                          "size": size, "metric": metric, "value": value, "unit": unit})


def probe_pairs():
    return pd.DataFrame([
        {"regime": regime, "workload": "ViT", "pytorch": "ViT torch eager, SDPA",
         "jax": "ViT jax.jit split/merge, dot_product_attention", "jax speed-up": ratio,
         "low": ratio - 0.01, "high": ratio + 0.01}
        for regime, ratio in ((allocator.DEFAULTS, 0.5), (allocator.KEPT, 0.7))])


def test_the_recorded_probe_is_what_the_pages_read_back():
    recorder = Recorder()
    regimes.record(recorder, probe_pairs())

    said = regimes.explained(pd.DataFrame(recorder.rows), "ViT")
    assert "0.500x [0.490, 0.510] with glibc's defaults and 0.700x [0.690, 0.710]" in said
    assert "intervals apart" in said


def test_the_readings_show_one_column_per_regime():
    table = regimes.readings(probe_pairs())

    assert set(table.columns) == {allocator.DEFAULTS, allocator.KEPT}
    assert table.iloc[0][allocator.KEPT] == "0.700x [0.690, 0.710]"
