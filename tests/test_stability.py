"""deepdive.chapters.stability: the probes behind the CPU set-up, and the A/A check's building
blocks."""

import pandas as pd
import pytest

from deepdive.chapters import stability


@pytest.mark.parametrize(("cores", "threads", "block_ms", "message"), [
    (0, 1, 10, "cores must be a positive integer"),
    (1, True, 10, "threads must be a positive integer"),
    (1, 1, 0.5, "block_ms must be a positive integer"),
    (1, 2, 10, r"threads \(2\) cannot exceed cores \(1\)")])
def test_a_probe_refuses_a_set_up_that_cannot_run(cores, threads, block_ms, message):
    with pytest.raises(ValueError, match=message):
        stability.probe(cores, threads, block_ms)


def test_the_probes_include_the_timers_block_length_and_a_longer_one():
    from deepdive.core.timing import MIN_BLOCK_S

    build = [s for s in stability.SETUPS if s[:2] == (1, 1)]
    assert {s[2] for s in build} == {round(MIN_BLOCK_S * 1000), 3 * round(MIN_BLOCK_S * 1000)}


def test_the_a_a_workloads_build_separate_copies_of_both_frameworks_work():
    builders = stability.aa_workloads()

    assert {name.split()[0] for name in builders} == {"torch", "jax.jit"}
    for build in builders.values():
        first, second = build(), build()
        assert first is not second and first() is not None


def test_a_loaded_machine_starts_one_load_per_core_and_stops_them():
    with stability.loaded_machine() as loads:
        assert loads >= 1


def test_the_a_a_check_refuses_fewer_than_two_copies():
    from deepdive.core.verdict import TieBand

    with pytest.raises(ValueError, match="copies must be an integer >= 2"):
        stability.aa_under_load(TieBand(0.05), copies=1, load=False)


def probe_frame(iqr, own_core_jax=1.0, medians=None):
    """A probes() frame: every workload at every set-up, IQR/median per set-up."""
    import pandas as pd

    rows = []
    for cores, threads, block in stability.SETUPS:
        label = stability.setup_label(cores, threads, block)
        for workload in stability.WORKLOADS + stability.PER_CALL:
            median = (medians or {}).get(label, 1e-4)
            if label == stability.OWN_CORE and workload.startswith("jax"):
                median = 1e-4 * own_core_jax
            rows.append({"cores": cores, "threads": threads, "block (ms)": block, "probe": 1,
                         "workload": workload, "median_s": median, "iqr_fraction": iqr[label]})
    return pd.DataFrame(rows)


def test_the_findings_read_each_choice_from_the_probes():
    iqr = {stability.BUILD: 0.02, stability.BOTH_CORES: 0.2, stability.OWN_CORE: 0.05,
           stability.LONG_BLOCKS: 0.03}
    found = stability.findings(probe_frame(iqr, medians={stability.BOTH_CORES: 5e-5}), 1,
                                0.08)

    assert (found["iqr_one"], found["iqr_two"], found["iqr_long"]) == pytest.approx((2, 20, 3))
    assert found["ratio_lo"] == found["ratio_hi"] == pytest.approx(2.0)
    assert found["own_core_jax"] == "1.00 and 1.00"
    assert "agree with that choice" in found["threads_agreement"]
    assert "agree: JAX's per-call work was not faster" in found["one_core_agreement"]
    assert "agree: the longer blocks were no steadier" in found["block_agreement"]


def test_the_findings_say_when_the_probes_disagree():
    iqr = {stability.BUILD: 0.2, stability.BOTH_CORES: 0.02, stability.OWN_CORE: 0.05,
           stability.LONG_BLOCKS: 0.03}
    found = stability.findings(probe_frame(iqr, own_core_jax=0.5), 1, 0.08)

    assert "do not agree with that choice" in found["threads_agreement"]
    assert "disagree for some JAX workload" in found["one_core_agreement"]
    assert "the longer blocks were steadier" in found["block_agreement"]


def test_a_jax_workload_within_the_tie_band_of_its_one_core_time_is_no_disagreement():
    iqr = dict.fromkeys((stability.BUILD, stability.BOTH_CORES, stability.OWN_CORE,
                         stability.LONG_BLOCKS), 0.05)

    within = stability.findings(probe_frame(iqr, own_core_jax=0.94), 1, 0.08)
    beyond = stability.findings(probe_frame(iqr, own_core_jax=0.90), 1, 0.08)

    assert "agree: JAX's per-call work was not faster" in within["one_core_agreement"]
    assert "disagree for some JAX workload" in beyond["one_core_agreement"]


def test_the_aa_reading_counts_straddles_under_load_and_decisions_on_the_quiet_machine():
    from deepdive.core.verdict import TieBand

    quiet = ({"low": 0.98, "high": 1.02}, {"low": 1.11, "high": 1.13},
             {"low": 0.97, "high": 1.05})
    band = TieBand(0.1, quiet)
    loaded = pd.DataFrame({"low": [0.8, 0.95, 0.7], "high": [1.6, 1.05, 0.95]})

    found = stability.aa_reading(loaded, band)

    assert found["aa_straddled"] == 2  # [0.95, 1.05] lies inside the band
    assert found["quiet_pairs"] == 3 and found["quiet_decided"] == 1
    assert found["quiet_rate_pct"] == pytest.approx(100 / 3)
    assert found["aa_width_pct"] == pytest.approx(100 * (0.95 / 0.7 - 1))  # the median
