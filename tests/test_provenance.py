"""deepdive.book.provenance: each chapter's results carry the build, commit and machine that
measured them, so the site can say which build produced what."""

import numpy as np
import pytest

from deepdive.book import provenance
from deepdive.book.claims import Claims
from deepdive.book.results import Results
from deepdive.core.timing import Timing
from deepdive.core.verdict import TieBand

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")
    monkeypatch.setenv("DEEPDIVE_BUILD_ID", "build-1")


def test_a_stamp_records_the_build_commit_machine_and_scale():
    provenance.stamp("01_vmap")
    stamps = provenance.load()

    assert list(stamps.columns) == list(provenance.COLUMNS)
    row = stamps.set_index("chapter").loc["01_vmap"]
    assert row["build_id"] == "build-1" and row["scale"] == "small"
    assert row["device"] and row["commit"] and row["executed_at"].endswith("UTC")


def test_a_new_stamp_replaces_the_chapters_old_one_and_keeps_the_others(monkeypatch):
    provenance.stamp("01_vmap")
    provenance.stamp("02_jit_xla")
    monkeypatch.setenv("DEEPDIVE_BUILD_ID", "build-2")
    provenance.stamp("01_vmap")

    stamps = provenance.load().set_index("chapter")["build_id"].to_dict()
    assert stamps == {"01_vmap": "build-2", "02_jit_xla": "build-1"}


def test_a_run_outside_make_book_says_so(monkeypatch):
    monkeypatch.delenv("DEEPDIVE_BUILD_ID")

    assert provenance.build_id() == provenance.OUTSIDE_BUILD


def test_nothing_stamped_yet_loads_as_none():
    assert provenance.load() is None


def test_saving_results_or_claims_stamps_the_chapter():
    records = Results("03_torch_compile")
    records.add("e", "torch", "v", 1, "m", 1.0, "s")
    records.save()
    claims = Claims("05_vit_training", TieBand(0.05))
    a = Timing("a", np.full(15, 1e-3), calls_per_block=1, first_call=0.0, session=7)
    b = Timing("b", np.full(15, 2e-3), calls_per_block=1, first_call=0.0, session=7)
    claims.compare("b_vs_a", "q: b against a", a, b)
    claims.save()

    assert set(provenance.load()["chapter"]) == {"03_torch_compile", "05_vit_training"}


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_stamp_needs_a_chapter_name(bad):
    with pytest.raises(ValueError, match="chapter must be"):
        provenance.stamp(bad)


@pytest.mark.parametrize(("status", "expected"), [("", "abc123"), (" M src/x.py\n",
                                                                    "abc123+uncommitted")])
def test_the_commit_says_when_tracked_files_differ_from_it(monkeypatch, status, expected):
    import subprocess

    monkeypatch.setattr(provenance.env, "git_commit", lambda: "abc123")
    monkeypatch.setattr(provenance.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, stdout=status, stderr=""))

    assert provenance.commit() == expected


def test_a_stamp_records_the_framework_versions_that_ran():
    provenance.stamp("01_vmap")
    row = provenance.load().iloc[0]

    assert row["torch"] != "none" and row["jax"] != "none"


def test_work_that_ran_on_the_cpu_is_labelled_so_where_a_gpu_is_present(monkeypatch):
    from deepdive.core import env

    monkeypatch.setattr(env, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    records = Results("06_distributed", device=env.cpu_label())
    records.add("e", "jax", "v", 1, "m", 1.0, "s")
    claims = Claims("06_distributed", TieBand(0.05), device=env.cpu_label())
    a = Timing("a", np.full(15, 1e-3), calls_per_block=1, first_call=0.0, session=3)
    claim = claims.compare("b_vs_a", "q: b against a", a, a)

    assert env.device_label() == H100
    assert env.is_cpu_label(records.frame()["device"].iat[0])
    assert env.is_cpu_label(claim.device)
    assert Results("x").frame().empty and Claims("x", TieBand(0.05))._device == \
        "NVIDIA H100 80GB HBM3"  # the default stays the GPU
