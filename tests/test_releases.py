"""`make releases`' machinery: the matrix, runs.csv, and one tiny release pair run end to end
(the reduced set's two probes in this environment, and a release whose install fails),
read back as bundles. Nothing here installs a package."""

import datetime as dt
import json
import sys

import numpy as np
import pytest

from deepdive.book import bundles
from deepdive.core import env
from deepdive.releases import matrix, run, workloads
from deepdive.releases.matrix import Release


def test_the_matrix_runs_every_release_once_with_the_held_point_in_jax_sweep():
    names = [(r.sweep, r.version) for r in matrix.releases()]
    assert names == [("jax", v) for v in ("0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0",
                                          "0.12.0.1")] + [("torch", "2.13.0"), ("torch", "2.14.1")]
    assert Release("torch", "2.13.0").jax == matrix.HELD["jax"]
    assert Release("jax", "0.11.1").torch == matrix.HELD["torch"]


def test_each_release_installs_exact_pins_with_a_flax_that_supports_it():
    assert Release("jax", "0.10.2").requirements == (
        "torch==2.15.0", "jax==0.10.2", "jaxlib==0.10.2", "flax==0.12.8", "optax==0.2.8")
    assert "flax==0.12.12" in Release("jax", "0.11.1").requirements  # flax 0.12.9+ needs 0.11.1
    assert "torch==2.14.1" in Release("torch", "2.14.1").requirements


def test_an_unknown_release_or_sweep_is_refused_naming_what_is_accepted():
    with pytest.raises(ValueError, match="accepted: 0.10.2"):
        Release("jax", "0.9.0")
    with pytest.raises(ValueError, match="sweep must be one of"):
        Release("numpy", "2.5.5")
    with pytest.raises(ValueError, match="accepted: jax, torch, jax==0.10.2"):
        matrix.select(["jax==0.4.0"])
    assert [r.version for r in matrix.select(["torch"])] == ["2.13.0", "2.14.1"]
    assert matrix.select(["jax==0.11.1", "jax==0.11.1"]) == [Release("jax", "0.11.1")]


def test_runs_csv_keeps_one_row_per_release_in_the_matrixs_order(tmp_path):
    path = tmp_path / "runs.csv"
    matrix.write_run(path, matrix.Run("torch", "2.13.0", status="install failed", error="no"))
    matrix.write_run(path, matrix.Run("jax", "0.11.1", run_s=12.5))
    matrix.write_run(path, matrix.Run("torch", "2.13.0", bundle="b"))
    rows = matrix.read_runs(path)
    assert [(r["sweep"], r["release"], r["status"]) for r in rows] == [
        ("jax", "0.11.1", "ok"), ("torch", "2.13.0", "ok")]
    assert rows[0]["run_s"] == "12.5"
    with pytest.raises(ValueError, match="status must be one of"):
        matrix.Run("jax", "0.11.1", status="skipped")


def test_a_run_that_replaces_a_row_removes_the_bundle_it_superseded(tmp_path):
    path = tmp_path / "runs.csv"
    for name in ("day-1", "day-2"):
        (tmp_path / name).mkdir()
    matrix.write_run(path, matrix.Run("jax", "0.11.1", bundle="day-1"))
    matrix.write_run(path, matrix.Run("jax", "0.11.1", bundle="day-2"))
    assert not (tmp_path / "day-1").exists() and (tmp_path / "day-2").exists()
    matrix.write_run(path, matrix.Run("jax", "0.11.1", status="run failed", error="boom"))
    assert not (tmp_path / "day-2").exists()
    assert [r["bundle"] for r in matrix.read_runs(path)] == [""]


def test_a_sweep_with_the_held_point_runs_it_again_as_the_control(tmp_path, capsys):
    ran = []

    def fake(release, into, workdir):
        ran.append((release.name, into.name))
        return matrix.Run(release.sweep, release.version, bundle="b")

    run.sweep([Release("jax", "0.11.1"), matrix.held_point()], tmp_path, tmp_path, fake)
    assert ran == [("jax 0.11.1", tmp_path.name), ("jax 0.12.0.1", tmp_path.name),
                   ("jax 0.12.0.1", "control")]
    control = "jax 0.12.0.1 (control)"
    assert f"{control}: ok" in capsys.readouterr().out
    ran.clear()
    run.sweep([Release("torch", "2.13.0")], tmp_path, tmp_path, fake)
    assert ran == [("torch 2.13.0", tmp_path.name)]  # no held point, no control


def test_the_write_loops_closed_form_is_what_the_loop_computes():
    x = np.zeros(6)
    for i in range(1, 6):
        x[i] = x[i - 1] * 0.5 + 1.0
    np.testing.assert_allclose(workloads.fori_closed_form(6), x)


def test_an_unknown_workload_is_refused():
    fori = "fori_loop write"
    assert list(workloads.chosen(fori)) == [fori]
    with pytest.raises(ValueError, match="accepted: jax-ml/jax#39103"):
        workloads.chosen("vmap, nothing")


def test_a_tool_error_is_kept_as_its_last_lines():
    assert run.tail("a\n\nb\nc\nd\n").split(" | ") == ["b", "c", "d"]
    assert workloads.one_line(ValueError("first\nsecond")) == "ValueError: first"


@pytest.fixture(scope="module")
def release_pair(tmp_path_factory):
    """The held point measured for real (this environment is the book's, which is that
    release: the two probes only, written as its bundle), and jax 0.11.2 whose install
    fails. Returns the folder holding runs.csv and the bundle, both rows, and the work
    folder the environments lived in."""
    into = tmp_path_factory.mktemp("releases")
    work = tmp_path_factory.mktemp("work")
    held = Release("jax", matrix.HELD["jax"])
    installed = env.versions()
    if (installed["torch"] or "").split("+")[0] != held.torch or installed["jax"] != held.jax:
        pytest.skip(f"this environment is not the held point {held.torch}/{held.jax}")

    def this_environment(release, folder):
        folder.mkdir(parents=True)
        versions = {n: installed.get(n) or "" for n in ("torch", "jax", "jaxlib")}
        return run.Environment(folder, sys.executable, versions | {"flax": "", "optax": ""})

    def no_wheel(release, folder):
        raise RuntimeError("pip install jax==0.11.2 failed: no matching distribution")

    when = lambda: dt.datetime(2026, 11, 28, 3, 0, tzinfo=dt.UTC)  # noqa: E731
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEEPDIVE_RELEASE_WORKLOADS", "jax-ml/jax#39103,fori_loop write")
        ok = run.run_release(held, into, work, installer=this_environment, now=when)
    failed = run.run_release(Release("jax", "0.11.2"), into, work, installer=no_wheel, now=when)
    return into, ok, failed, work


def test_a_release_pair_writes_its_bundle_and_records_both_runs(release_pair):
    into, ok, failed, work = release_pair
    assert ok.status == "ok" and ok.bundle, ok.error
    pip_said = "no matching distribution"
    assert failed.status == "install failed" and pip_said in failed.error
    rows = {r["release"]: r for r in matrix.read_runs(into / "runs.csv")}
    assert rows["0.11.2"]["bundle"] == "" and rows[ok.release]["bundle"] == ok.bundle
    bundle = bundles.load(into / ok.bundle)
    assert bundle.build["sweep"] == "jax" and bundle.build["release"] == ok.release
    assert bundle.build["versions"]["jax"] == ok.release
    assert list(bundle.claims["claim_id"]) == ["release_fori_write_40k_vs_4x10k"]
    assert not (work / f"jax-{ok.release}").exists()  # the environment is gone


def test_a_release_pair_records_both_probes_right_on_the_held_jax(release_pair):
    import pandas as pd

    into, ok, _, _ = release_pair
    records = pd.read_csv(into / ok.bundle / "results" / "releases.csv")
    probe = records[(records["experiment"] == "jax-ml/jax#39103")
                    & (records["metric"] == "jit equals eager")]
    assert probe["value"].tolist() == [1.0]  # 0.12.0.1 fixed #39103
    writes = records[(records["experiment"] == "fori_loop write")
                     & (records["metric"] == "correct")]
    assert sorted(writes["size"].astype(int)) == list(workloads.FORI_ITERATIONS)
    assert (writes["value"] == 1.0).all()
    json.dumps(ok.__dict__)  # a run row is plain data


def test_the_release_sweep_checks_jax_39103_at_the_chapters_size_without_importing_it_early():
    """The chapter's saved code imports the frameworks; the sweep must pin threads first."""
    import subprocess
    import sys

    from deepdive.chapters import vmap

    assert workloads.JAX_39103_ROWS == vmap.JAX_39103_ROWS
    probe = ("import sys, deepdive.releases.workloads; "
             "print(sorted({'jax', 'torch'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"

