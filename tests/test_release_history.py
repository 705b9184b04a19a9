"""The release sweeps on the ledger page: runs.csv and the release bundles read back by
`deepdive.chapters.ledger.releases` from small fixtures in tmp_path (three jax releases with
torch held, one torch release with jax held plus the held point; one torch release failed
to install), laid out per sweep, and the page's "Releases over time" cells run on them, with
and without a rebuild control."""

import csv

import pandas as pd
import pytest
from test_bundles import claim, hand_bundle, make_results
from test_ledger import run_page

from deepdive.book import bundles, results
from deepdive.book.bundles import BundleError
from deepdive.chapters import ledger
from deepdive.releases.matrix import CONTROL_FOLDER, RUN_COLUMNS

BAND = 0.05  # every fixture claim's tie band: "tie" inside [0.952, 1.05]
LABELS = {  # baseline, candidate: as deepdive.releases.workloads labels them
    "release_dot_jit_vmap_vs_torch_vmap": ("torch.func.vmap", "jax.jit(vmap)"),
    "release_chain_compile_vs_eager": ("PyTorch eager", "torch.compile"),
    "release_fori_write_40k_vs_4x10k": ("4 x 10,000 iterations", "40,000 iterations"),
}
DOT, COMPILE, FORI = LABELS
HELD_TORCH, HELD_JAX = "2.15.0", "0.12.0.1"
# per run: date, {claim: ratio}, fori medians (s) at 10k/20k/40k, and whether jit equalled
# eager on #39103's pattern. Intervals are ±0.5%, so a ratio of ratios is decided by where
# its centre lies: steady within ±3.4%, moved beyond ±5.7%.
RUNS = {
    ("jax", "0.10.2"): ("2026-12-01", {DOT: 2.0, COMPILE: 1.5, FORI: 1.0},
                        (0.001, 0.002, 0.004), False),
    ("jax", "0.11.1"): ("2026-12-01", {DOT: 2.0, COMPILE: 1.58, FORI: 0.25},
                        (0.002, 0.008, 0.032), True),  # the loop's time: its length squared
    ("jax", HELD_JAX): ("2026-12-02", {DOT: 3.0, COMPILE: 1.2, FORI: 1.0},
                        (0.001, 0.002, 0.004), True),
    ("torch", "2.9.1"): ("2026-12-02", {DOT: 2.0, COMPILE: 2.4, FORI: 1.0},
                         (0.001, 0.002, 0.004), True),
}


def versions(sweep, release):
    return {"torch": release if sweep == "torch" else HELD_TORCH,
            "jax": release if sweep == "jax" else HELD_JAX}


def records(medians, jit_right):
    rows = [("jax-ml/jax#39103", "jit(vmap(row -> sum((m @ row)**2)))", 32769, metric, value,
             unit) for metric, value, unit in (("jit equals eager", float(jit_right), "flag"),
                                               ("jit result", 130.25 if jit_right else 123.5,
                                                "value"),
                                               ("eager result", 130.25, "value"))]
    for n, median in zip((10000, 20000, 40000), medians, strict=True):
        rows += [("fori_loop write", "x.at[i].set(x[i-1]*0.5+1.0)", n, "median", median, "s"),
                 ("fori_loop write", "x.at[i].set(x[i-1]*0.5+1.0)", n, "correct", 1.0, "flag")]
    return pd.DataFrame([dict(zip(results.COLUMNS, ("releases", e, "JAX", v, s, m, x, u,
                                                     "AMD EPYC 7B13 (2 cores)", "small", ""),
                                  strict=True)) for e, v, s, m, x, u in rows])


def release_bundle(root, sweep, release, date, ratios, medians, jit_right):
    """A release's bundle: its claims of chapter "releases", its records and build.json's
    sweep and release; returns its folder's name."""
    rows = []
    for claim_id, ratio in ratios.items():
        row = claim("releases", claim_id, (ratio, ratio * 0.995, ratio * 1.005), band=BAND)
        row["baseline"], row["candidate"] = LABELS[claim_id]
        rows.append(row)
    folder = hand_bundle(root, rows, date=date, build_id=f"{date.replace('-', '')}T0{len(release)}"
                         f"0000Z-{sweep}-{release}", versions=versions(sweep, release),
                         sweep=sweep, release=release)
    records(medians, jit_right).to_csv(folder / bundles.RESULTS_FOLDER / "releases.csv",
                                       index=False)
    return folder.name


def run_row(sweep, release, status="ok", bundle="", date="2026-12-01", **changes):
    installed = versions(sweep, release) if status != "install failed" else {}
    row = dict.fromkeys(RUN_COLUMNS, "")
    row.update(sweep=sweep, release=release, python="3.13.0", status=status, install_s="61.5",
               run_s="300.25" if status == "ok" else "", bundle=bundle, date=date, **installed)
    return row | changes


def write_runs(root, rows):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "runs.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RUN_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def write_fixture(root, control=None):
    """The fixture's runs.csv, out of version order (the held point first), each ok run's
    bundle written; with `control` ({claim: ratio}), a second run of the held point too."""
    rows = {}
    for (sweep, release), (date, ratios, medians, jit_right) in RUNS.items():
        name = release_bundle(root, sweep, release, date, ratios, medians, jit_right)
        rows[sweep, release] = run_row(sweep, release, bundle=name, date=date)
    failed = run_row("torch", "2.14.1", status="install failed", error="ERROR: no torch")
    write_runs(root, [rows["jax", HELD_JAX], rows["jax", "0.10.2"], rows["jax", "0.11.1"],
                      failed, rows["torch", "2.9.1"]])
    if control is not None:
        date, _, medians, right = RUNS["jax", HELD_JAX]
        name = release_bundle(root / CONTROL_FOLDER, "jax", HELD_JAX, "2026-12-03", control,
                              medians, right)
        write_runs(root / CONTROL_FOLDER, [run_row("jax", HELD_JAX, bundle=name,
                                                   date="2026-12-03")])
    return root


# ---- reading ------------------------------------------------------------------------------

def test_each_finished_run_is_a_build_and_every_attempt_a_row(tmp_path):
    runs, found = ledger.releases(write_fixture(tmp_path / "releases", control=RUNS[
        "jax", HELD_JAX][1]))
    assert list(zip(runs["sweep"], runs["release"], runs["status"], strict=True))[-2:] == [
        ("torch", "2.9.1", "ok"), ("control", HELD_JAX, "ok")]
    assert len(runs) == 6 and "torch 2.14.1" not in found
    assert sorted(found) == ["control", "jax 0.10.2", "jax 0.11.1", "jax 0.12.0.1",
                             "torch 2.9.1"]
    fori = found["jax 0.11.1"].claims.set_index("claim_id").loc[FORI]
    assert (fori["ratio"], fori["baseline"]) == (0.25, "4 x 10,000 iterations")
    assert found["control"].pins == (HELD_TORCH, HELD_JAX)


def test_each_sweep_is_in_version_order_with_the_held_point_in_both(tmp_path):
    runs, found = ledger.releases(write_fixture(tmp_path / "releases"))
    assert ledger.sweeps(runs, found) == {
        "jax": ["jax 0.10.2", "jax 0.11.1", "jax 0.12.0.1"],
        "torch": ["torch 2.9.1", "jax 0.12.0.1"]}  # 2.9.1 before 2.15.0, as versions


def test_no_runs_file_is_an_empty_history(tmp_path):
    runs, found = ledger.releases(tmp_path / "releases")
    assert runs.empty and found == {}
    assert ledger.sweeps(runs, found) == {"jax": [], "torch": []}


def test_a_bundle_of_another_release_is_refused(tmp_path):
    root = write_fixture(tmp_path / "releases")
    with open(root / "runs.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[1]["bundle"], rows[2]["bundle"] = rows[2]["bundle"], rows[1]["bundle"]
    write_runs(root, rows)
    with pytest.raises(BundleError, match=r"build.json names sweep 'jax', release '0.11.1'; "
                                          r"runs.csv names 'jax', '0.10.2'"):
        ledger.releases(root)


def test_a_malformed_or_missing_release_bundle_fails_naming_it(tmp_path):
    import shutil

    root = write_fixture(tmp_path / "releases")
    bundle = next(root.glob("*_jax-0.11.1"))
    (bundle / "claims.csv").write_text("chapter,claim_id\n")
    with pytest.raises(BundleError, match=f"{bundle.name}/claims.csv: missing column"):
        ledger.releases(root)
    shutil.rmtree(bundle)
    with pytest.raises(BundleError, match=f"{bundle.name}: not a bundle folder"):
        ledger.releases(root)


# ---- the page -----------------------------------------------------------------------------

def run_ledger(book, monkeypatch, **fixture):
    """The ledger page run in a book at `book` with the fixture's releases (`write_fixture`)."""
    write_fixture(book / "book" / "data" / "releases", **fixture)
    make_results(book / "_build" / "results", [claim("01_vmap", "dot_jit_vs_compile")])
    return run_page(book, monkeypatch)


def test_the_page_compares_consecutive_releases_without_a_control(tmp_path, monkeypatch):
    ran = run_ledger(tmp_path, monkeypatch)
    names = ran["names"]
    moved = names["releases_moved"].reset_index()
    assert list(zip(moved["sweep"], moved["releases"], moved["claim_id"], strict=True)) == [
        ("jax", "0.10.2 → 0.11.1", FORI), ("jax", "0.11.1 → 0.12.0.1", DOT),
        ("jax", "0.11.1 → 0.12.0.1", COMPILE), ("jax", "0.11.1 → 0.12.0.1", FORI),
        ("torch", "2.9.1 → 2.15.0", DOT), ("torch", "2.9.1 → 2.15.0", COMPILE)]
    assert moved["new / old"].iat[0] == pytest.approx(0.25)
    assert names["control"] is None and moved["beyond control"].isna().all()
    assert ran["glued"]["releases_runs"] == "5"
    saved = names["records"]
    wrong = saved[(saved["metric"] == "jit equals eager") & (saved["value"] == 0)]
    assert set(wrong["run"]) == {"jax 0.10.2"}
    loop = saved[(saved["metric"] == "median") & (saved["size"] == 40000)]
    assert loop.set_index("run")["value"].to_dict() == {
        "jax 0.10.2": 0.004, "jax 0.11.1": 0.032, "jax 0.12.0.1": 0.004, "torch 2.9.1": 0.004}
    # the one long loop slower than four short ones: the run whose loop grew with its square
    runs, medians, others = (ran["glued"][f"releases_{k}"] for k in (
        "quadratic", "quadratic_ms", "linear_ms"))
    assert (runs, medians) == (repr("jax 0.11.1"), repr("jax 0.11.1: 2.000"))
    assert float(others) == pytest.approx(1.0)  # the other runs' 10,000 iterations


def test_a_move_counts_as_the_releases_only_beyond_the_rebuild_control(tmp_path, monkeypatch):
    held = RUNS["jax", HELD_JAX][1]
    ran = run_ledger(tmp_path, monkeypatch, control={**held, DOT: held[DOT] * 1.6})
    names = ran["names"]
    assert names["control"].loc[("releases", DOT), "change"] == "moved"
    assert names["reach"] == pytest.approx(1.6)
    beyond = names["releases_moved"].droplevel("chapter")["beyond control"]
    assert beyond.to_dict() == {  # beyond ×1.6 either way
        ("jax", "0.10.2 → 0.11.1", FORI): True, ("jax", "0.11.1 → 0.12.0.1", DOT): False,
        ("jax", "0.11.1 → 0.12.0.1", COMPILE): False, ("jax", "0.11.1 → 0.12.0.1", FORI): True,
        ("torch", "2.9.1 → 2.15.0", DOT): False, ("torch", "2.9.1 → 2.15.0", COMPILE): True}
    assert ran["glued"]["releases_beyond"] == "3"
    # the control's largest change is named with its factor, and bounds "beyond" both ways
    largest, factor, low = (ran["glued"][f"releases_reach_{k}"] for k in ("claim", "ratio", "low"))
    assert largest == repr(DOT)
    assert (float(factor), float(low)) == pytest.approx((1.6, 1 / 1.6))
    steady = run_ledger(tmp_path / "steady", monkeypatch, control=held)
    assert set(steady["names"]["control"]["change"]) == {"steady"}


def test_the_ledger_reads_releases_where_make_releases_writes_them(tmp_path, monkeypatch):
    from deepdive.core import env
    from deepdive.releases import matrix

    monkeypatch.chdir(tmp_path)
    assert env.book_root() / ledger.RELEASES == matrix.releases_dir()
    assert ledger.CONTROL_FOLDER == matrix.CONTROL_FOLDER
