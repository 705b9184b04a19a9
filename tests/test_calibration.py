"""deepdive.book.calibration: one tie band and one CPU peak per build, read by every page."""

import dataclasses

import pytest

from deepdive.book import calibration, provenance
from deepdive.core import flops
from deepdive.core.verdict import TieBand

BUILD = "build-under-test"


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("DEEPDIVE_BUILD_ID", BUILD)
    return tmp_path


def fake(width=0.04, key=None):
    peaks = {dtype: {"flops_per_s": rate, "source": f"measured ({dtype})", "torch": rate,
                     "jax": rate / 2} for dtype, rate in (("fp32", 1e11), ("bf16", 5e11))}
    return calibration.Calibration(key or calibration.this_key(), provenance.build_id(), "now",
                                   {"cpu": TieBand(width, ({"workload": "w", "reach": width},))},
                                   peaks)


def counting(monkeypatch, width=0.04):
    """Replace the measurement (a minute of timing) with a counted fake."""
    made = []

    def measure():
        made.append(1)
        return fake(width)

    monkeypatch.setattr(calibration, "measure", measure)
    return made


def test_a_saved_calibration_round_trips():
    saved = fake()
    calibration.save(saved)

    assert calibration.load() == saved
    assert calibration.load().tie_band("cpu").evidence[0]["workload"] == "w"


def test_a_build_measures_once_and_every_page_reads_the_same_band(monkeypatch):
    made = counting(monkeypatch)

    bands = [calibration.tie_band("cpu") for _ in range(3)]

    assert len(made) == 1 and bands[0] == bands[1] == bands[2]
    assert calibration.path().exists()


def test_other_conditions_measure_again(monkeypatch):
    made = counting(monkeypatch)
    calibration.save(fake(key=dataclasses.replace(calibration.this_key(), threads=16)))

    calibration.current()
    assert len(made) == 1


def test_an_incremental_build_keeps_the_calibration_its_cached_pages_used(monkeypatch):
    """A later build over the same results (cached pages keep their verdicts) reads the
    band those verdicts were decided with; `make clean` or a fresh clone measures anew."""
    made = counting(monkeypatch)
    first = calibration.current()
    monkeypatch.setenv("DEEPDIVE_BUILD_ID", "the next build")

    assert calibration.current() == first and len(made) == 1
    assert first.build_id == BUILD


def test_the_builds_first_step_keeps_a_calibration_that_holds(monkeypatch, capsys):
    made = counting(monkeypatch)
    for setting_up in ("pin_cpu_threads", "let_jax_share_the_gpu"):  # not in pytest's process
        monkeypatch.setattr(calibration.env, setting_up, lambda: None)
    monkeypatch.setattr(calibration.allocator, "keep_freed_memory", lambda: None)
    calibration.main()
    calibration.main()

    assert len(made) == 1
    said = capsys.readouterr().err
    assert BUILD in said.split("calibration kept,")[1]


def test_the_cpu_peak_is_the_builds_and_says_when_bf16_is_emulated(monkeypatch):
    counting(monkeypatch)

    fp32 = calibration.peak("cpu", "fp32")
    emulated = calibration.peak("cpu", "bf16", bf16_native=False)

    assert fp32 == flops.Peak(1e11, "fp32", "measured (fp32)")
    assert emulated.flops_per_s == 5e11 and emulated.source.endswith("emulated bf16")


def test_asking_for_what_a_build_did_not_measure_names_what_it_did(monkeypatch):
    counting(monkeypatch)

    with pytest.raises(KeyError, match=r"for \['cpu'\], not 'cuda'"):
        calibration.tie_band("cuda")
    with pytest.raises(KeyError, match="not 'fp16'"):
        calibration.current().cpu_peak("fp16")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        calibration.peak("tpu", "fp32")


def test_the_reproduce_page_names_the_build_that_measured_the_calibration(monkeypatch):
    before = calibration.describe()
    counting(monkeypatch, width=0.061)
    calibration.current()

    after = calibration.describe()
    assert BUILD not in before and "±6.1%" not in before
    assert "cpu ±6.1%" in after and after.endswith(f"{BUILD} at now")


def test_a_file_from_an_older_format_is_measured_anew(monkeypatch):
    made = counting(monkeypatch)
    calibration.path().write_text('{"key": {"build_id": "old"}, "bands": {}}')

    calibration.current()
    assert len(made) == 1 and calibration.load().build_id == BUILD
