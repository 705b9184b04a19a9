"""deepdive.releases.history: the release runs read back from small fixture bundles in tmp_path
(three jax releases with torch held, two torch releases with jax held plus the held point;
one torch release failed to install, one finished run lost a workload), laid out per
release, compared between consecutive releases by the ledger's rule, drawn and told in
sentences; a malformed runs.csv named by file and column or row; and the ledger page's
section run with no release bundle and with the fixtures."""

import csv
import math

import matplotlib
import pandas as pd
import pytest
from test_bundles import claim, hand_bundle, make_results
from test_ledger import run_page

from deepdive.book import bundles, results
from deepdive.book.bundles import BundleError
from deepdive.releases import history
from deepdive.releases.matrix import CONTROL_FOLDER, RUN_COLUMNS

matplotlib.use("Agg")

BAND = 0.05  # every fixture claim's tie band: "tie" inside [0.952, 1.05]
LABELS = {  # baseline, candidate: as deepdive.releases.workloads labels them
    "release_dot_jit_vmap_vs_torch_vmap": ("torch.func.vmap", "jax.jit(vmap)"),
    "release_chain_compile_vs_eager": ("PyTorch eager", "torch.compile"),
    "release_chain_jit_vs_eager": ("JAX op by op", "jax.jit"),
    "release_gpt_jax_vs_compile": ("torch.compile", "jax.jit"),
    "release_fori_write_40k_vs_4x10k": ("4 x 10,000 iterations", "40,000 iterations"),
}
DOT, COMPILE, JIT, GPT, FORI = LABELS
HELD_TORCH, HELD_JAX = "2.15.0", "0.12.0.1"
# per run: sweep, release, date, {claim: ratio}, fori medians (s) at 10k/20k/40k, and whether
# jit equalled eager on #39103's pattern. Intervals are ±0.5%, so a ratio of ratios is
# decided by where its centre lies: steady within ±3.4%, moved beyond ±5.7%.
RUNS = {
    ("jax", "0.10.2"): ("2026-12-01", {DOT: 2.0, COMPILE: 1.5, JIT: 3.0, GPT: 1.2, FORI: 1.0},
                        (0.001, 0.002, 0.004), False),
    ("jax", "0.11.1"): ("2026-12-01", {DOT: 2.0, COMPILE: 1.58, JIT: 3.0, FORI: 0.25},
                        (0.001, 0.004, 0.016), True),
    ("jax", HELD_JAX): ("2026-12-02", {DOT: 3.0, COMPILE: 1.2, JIT: 2.0, GPT: 1.2, FORI: 1.0},
                        (0.001, 0.002, 0.004), True),
    ("torch", "2.9.1"): ("2026-12-02", {DOT: 2.0, COMPILE: 2.4, JIT: 2.0, GPT: 1.2, FORI: 1.0},
                         (0.001, 0.002, 0.004), True),
}
INSTALL_ERROR = "ERROR: No matching distribution found for torch==2.14.1\n(pip's long tail)"


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
    rows += [("GPT step", "jax.jit", "16x64", "median", 0.5, "s")]  # a size that is no number
    return pd.DataFrame([dict(zip(results.COLUMNS, ("releases", e, "JAX", v, s, m, x, u,
                                                     "AMD EPYC 7B13 (2 cores)", "small"),
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
    (folder / bundles.RESULTS_FOLDER / "releases.csv").unlink()
    records(medians, jit_right).to_csv(folder / bundles.RESULTS_FOLDER / "releases.csv",
                                       index=False)
    return folder.name


def run_row(sweep, release, status="ok", bundle="", date="2026-12-01", **changes):
    installed = versions(sweep, release) if status != "install failed" else {}
    row = dict.fromkeys(RUN_COLUMNS, "")
    row.update(sweep=sweep, release=release, python="3.13.0", status=status, install_s="61.5",
               run_s="300.25" if status == "ok" else "", bundle=bundle, date=date, **installed)
    return row | changes


def write_runs(root, rows, columns=RUN_COLUMNS):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / history.RUNS_FILE, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def fixture_rows(root):
    """The fixture's runs.csv rows, written out of version order (the held point first;
    torch 2.9.1 after 2.14.1, which sorts first as text), each ok row's bundle written."""
    rows = {}
    for (sweep, release), (date, ratios, medians, jit_right) in RUNS.items():
        name = release_bundle(root, sweep, release, date, ratios, medians, jit_right)
        lost = "GPT step: RuntimeError: boom" if release == "0.11.1" else ""
        rows[sweep, release] = run_row(sweep, release, bundle=name, date=date,
                                       failed_workloads=lost)
    failed = run_row("torch", "2.14.1", status="install failed", error=INSTALL_ERROR)
    return [rows["jax", HELD_JAX], rows["jax", "0.10.2"], rows["jax", "0.11.1"], failed,
            rows["torch", "2.9.1"]]


@pytest.fixture(scope="module")
def releases_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("book") / "releases"
    write_runs(root, fixture_rows(root))
    return root


@pytest.fixture(scope="module")
def found(releases_root):
    return history.load(releases_root)


# ---- reading ------------------------------------------------------------------------------

def test_each_sweep_is_in_version_order_with_the_held_point_in_both(found):
    assert [p.release for p in found.sweeps["jax"]] == ["0.10.2", "0.11.1", "0.12.0.1"]
    assert [p.release for p in found.sweeps["torch"]] == ["2.9.1", "2.14.1", "2.15.0"]
    assert found.held == {"jax": HELD_TORCH, "torch": HELD_JAX}
    held_in_jax, held_in_torch = found.sweeps["jax"][-1], found.sweeps["torch"][-1]
    assert held_in_torch.bundle is held_in_jax.bundle and held_in_torch.sweep == "torch"
    assert held_in_torch.bundle.build["versions"] == {**held_in_torch.bundle.build["versions"],
                                                      "torch": "2.15.0", "jax": "0.12.0.1"}
    failed = found.sweeps["torch"][1]
    assert (failed.measured, failed.run["status"]) == (False, "install failed")
    assert not found.empty


def test_points_reread_each_verdict_and_keep_the_families_order(found):
    table = history.points(found, "jax")
    first = table[table["release"] == "0.10.2"]
    assert list(first["claim_id"]) == [DOT, JIT, COMPILE, GPT, FORI]  # FAMILIES' order
    fori = table[(table["release"] == "0.11.1") & (table["claim_id"] == FORI)].iloc[0]
    assert (fori["ratio"], fori["verdict"], fori["family"]) == (0.25, "slower", "probes")
    assert fori["low"] == pytest.approx(0.25 * 0.995)
    tie = table[(table["release"] == "0.10.2") & (table["claim_id"] == FORI)].iloc[0]
    assert tie["verdict"] == "tie"  # the fixture's saved word is "stale": re-read, never read
    assert GPT not in set(table.loc[table["release"] == "0.11.1", "claim_id"])  # its failed one
    torch_side = history.points(found, "torch")
    assert list(dict.fromkeys(torch_side["release"])) == ["2.9.1", "2.15.0"]
    with pytest.raises(ValueError, match="sweep must be one of jax, torch"):
        history.points(found, "numpy")


def test_a_missing_runs_file_is_an_empty_history_and_the_page_says_how_to_make_one(tmp_path):
    empty = history.load(tmp_path / "releases")
    assert empty.empty and empty.runs.empty and empty.sweeps == {"jax": (), "torch": ()}
    sentence = history.summary_sentence(empty)
    assert sentence.startswith("No release bundles are committed") and "make releases" in sentence
    assert history.changes(empty).empty and history.points(empty, "jax").empty
    for table in (history.runs_table(empty), history.correctness(empty),
                  history.regressions(empty)):
        assert table.iat[0, 0] == sentence


def test_a_history_whose_every_run_failed_says_so(tmp_path):
    write_runs(tmp_path, [run_row("torch", "2.14.1", status="install failed",
                                  error=INSTALL_ERROR)])
    failed = history.load(tmp_path)
    assert failed.empty and [p.release for p in failed.sweeps["torch"]] == ["2.14.1"]
    assert history.correctness(failed).iat[0, 0] == (
        "No release run finished, so no release bundle is committed: runs.csv names 1 "
        "attempt, every one failed.")
    said = history.summary_sentence(failed)
    assert said.startswith("The jax sweep has not run; the torch sweep ran 1 release (2.14.1); 1 "
                           "failed: torch 2.14.1 (install failed: ERROR: No matching")
    assert history.upgrade_notes(failed) == "- " + history.correctness(failed).iat[0, 0]


# ---- changes between releases -------------------------------------------------------------

def change(table, sweep, to, claim_id):
    rows = table[(table["sweep"] == sweep) & (table["to"] == to) & (table["claim_id"] == claim_id)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_changes_decide_each_shared_claim_between_consecutive_releases(found):
    table = history.changes(found)
    fori = change(table, "jax", "0.11.1", FORI)
    assert (fori["from"], fori["ratio from"], fori["ratio to"]) == ("0.10.2", 1.0, 0.25)
    assert fori["change"] == pytest.approx(0.25)
    assert fori["low"] < fori["change"] < fori["high"] < 0.26
    assert (fori["decision"], fori["direction"]) == ("moved", "regression")
    assert fori["upstream"] == history.KNOWN_ISSUES["jax", "0.11.1", FORI]
    assert "jax-ml/jax#40101" in fori["upstream"]
    steady = change(table, "jax", "0.11.1", DOT)
    assert (steady["decision"], steady["direction"], steady["upstream"]) == ("steady", "", "")
    assert change(table, "jax", "0.11.1", COMPILE)["decision"] == "undecided"  # 1.053 at the edge
    # GPT: not in 0.11.1, so never compared across it
    assert GPT not in set(table.loc[table["sweep"] == "jax", "claim_id"])
    # the torch sweep skips its failed 2.14.1: 2.9.1 against the held point
    torch_side = table[table["sweep"] == "torch"]
    assert set(zip(torch_side["from"], torch_side["to"], strict=True)) == {("2.9.1", "2.15.0")}
    assert len(table) == 4 + 4 + 5  # claims both releases of each pair made


def test_a_move_is_named_for_the_framework_the_sweep_moves(found):
    table = history.changes(found)
    directions = {(r["sweep"], r["to"], r["claim_id"]): r["direction"]
                  for _, r in table[table["decision"] == "moved"].iterrows()}
    assert directions == {
        ("jax", "0.11.1", FORI): "regression",
        ("jax", "0.12.0.1", FORI): "improvement",  # the loop's cost linear again
        ("jax", "0.12.0.1", DOT): "improvement",  # jax's candidate gained on torch's baseline
        ("jax", "0.12.0.1", JIT): "jax.jit lost to JAX op by op",  # both sides jax's
        ("jax", "0.12.0.1", COMPILE): "other framework: torch.compile lost to PyTorch eager",
        ("torch", "2.15.0", DOT): "regression",  # torch's baseline lost to jax's candidate
        ("torch", "2.15.0", COMPILE): "torch.compile lost to PyTorch eager",
    }
    back = change(table, "jax", "0.12.0.1", FORI)
    assert back["upstream"] == ""  # the report names the release that brought the slowdown


@pytest.mark.parametrize(("label", "framework"), [
    ("torch.func.vmap", "PyTorch"), ("PyTorch eager", "PyTorch"), ("torch eager", "PyTorch"),
    ("torch.compile", "PyTorch"), ("jax.jit(vmap)", "JAX"), ("JAX op by op", "JAX"),
    ("jax.jit(.at[].set fori_loop)", "JAX")])
def test_a_variant_label_names_its_framework(label, framework):
    assert history.framework_of(label) == framework


def test_a_label_that_names_no_framework_is_refused():
    with pytest.raises(ValueError, match="'NumPy' names neither framework"):
        history.framework_of("NumPy")


@pytest.mark.parametrize(("sweep", "claim_id", "rose", "expected"), [
    ("torch", DOT, False, "improvement"),
    ("torch", JIT, True, "other framework: jax.jit gained on JAX op by op"),
    ("torch", FORI, False, "other framework: 40,000 iterations lost to 4 x 10,000 iterations"),
    ("jax", FORI, True, "improvement"), ("jax", GPT, False, "regression")])
def test_direction_reads_both_sides_of_the_claim(sweep, claim_id, rose, expected):
    assert history.direction(sweep, claim_id, *LABELS[claim_id], rose) == expected


def test_regressions_list_the_moved_rows_by_sweep_and_release(found):
    listed = history.regressions(found).reset_index()
    assert list(zip(listed["sweep"], listed["releases"], listed["claim_id"], strict=True)) == [
        ("jax", "0.10.2 → 0.11.1", FORI), ("jax", "0.11.1 → 0.12.0.1", DOT),
        ("jax", "0.11.1 → 0.12.0.1", JIT), ("jax", "0.11.1 → 0.12.0.1", COMPILE),
        ("jax", "0.11.1 → 0.12.0.1", FORI), ("torch", "2.9.1 → 2.15.0", DOT),
        ("torch", "2.9.1 → 2.15.0", COMPILE)]
    first = listed.iloc[0]
    assert (first["ratio from"], first["ratio to"]) == ("1.000", "0.250")
    assert first["to / from [95% interval]"].startswith("0.250 [0.248, 0.25")


# ---- correctness --------------------------------------------------------------------------

def test_correctness_reads_each_runs_probes(found):
    table = history.correctness(found)
    assert list(table.index) == [("jax", "0.10.2"), ("jax", "0.11.1"), ("jax", "0.12.0.1"),
                                 ("torch", "2.9.1"), ("torch", "2.15.0")]
    old = table.loc[("jax", "0.10.2")]
    assert old["#39103 jit equals eager"] == "no (jit 124, eager 130)"  # whole numbers
    assert old["upstream"] == "jax-ml/jax#39103"
    assert table.loc[("jax", "0.11.1"), "#39103 jit equals eager"] == "yes"
    assert table.loc[("torch", "2.15.0"), "upstream"] == ""
    assert set(table["fori write correct"]) == {"yes"}
    assert list(table.loc[("jax", "0.11.1"), ["fori 10,000 (ms)", "fori 20,000 (ms)",
                                              "fori 40,000 (ms)"]]) == pytest.approx([1, 4, 16])
    assert table.loc[("torch", "2.15.0"), "jax"] == "0.12.0.1"


# ---- sentences ----------------------------------------------------------------------------

def test_the_runs_sentence_counts_releases_and_names_failures(found):
    said = history.runs_sentence(found)
    assert said.startswith("The jax sweep ran 3 releases (0.10.2 to 0.12.0.1) with torch 2.15.0 "
                           "held; none failed; 1 finished run lost workloads: jax 0.11.1 (GPT "
                           "step); the torch sweep ran 3 releases (2.9.1 to 2.15.0) with jax "
                           "0.12.0.1 held, its 2.15.0 point the jax sweep's 0.12.0.1 run (the "
                           "held point, the book's own pins, shared by both sweeps); 1 failed: "
                           "torch 2.14.1 (install failed: ERROR: No matching distribution found "
                           "for torch==2.14.1).")
    assert "pip's long tail" not in said
    assert said.endswith("on AMD EPYC 7B13 (2 cores) at small scale, from 2026-12-01 to "
                         "2026-12-02, by the book's code at commit abc123.")


def test_the_summary_counts_what_moved_and_the_notes_answer_the_two_questions(found):
    said = history.summary_sentence(found)
    assert history.runs_sentence(found) in said
    assert "Between consecutive releases, 7 of 13 claim changes moved beyond the claim's band" \
        in said
    assert "no rebuild control is committed to say how far a claim moves without a release" \
        in said
    notes = history.upgrade_notes(found)  # no control: every move is told
    assert ("- **jax 0.11.1** (against 0.10.2): the jitted fori_loop write "
            "`x.at[i].set(x[i-1]*0.5+1.0)`: 40,000 iterations took 4 ms on 0.10.2 and 16 ms on "
            "0.11.1, 4.0× slower at that length, 1.0× faster at 10,000 iterations (the claim's "
            "ratio went 1.000 → 0.250") in notes
    assert "jax 0.12.0.1 undid it" in notes and "jax-ml/jax#40101" in notes
    assert ("- jax 0.10.2 returned a wrong result under jit on jax-ml/jax#39103's pattern, "
            "jax.jit(jax.vmap(lambda row: jnp.sum((m @ row) ** 2))) over 32,769 float32 rows on "
            "the CPU: 124 against eager's 130; 0.11.1 and 0.12.0.1 returned eager's value.") \
        in notes  # each jax version once, the held point's however many runs installed it
    headline = history.headline_sentence(found)
    assert headline.startswith("One release at a time (4 runs on AMD EPYC 7B13 (2 cores), small "
                               "sizes, 5 claims): jax 0.11.1 made the jitted fori_loop write")
    assert "jax 0.10.2 returned a wrong result under jit (jax-ml/jax#39103)" in headline


# ---- the figure ---------------------------------------------------------------------------

def test_plot_family_draws_both_sweeps_on_log_axes(found):
    import matplotlib.pyplot as plt

    fig = history.plot_family(found, "jit and fusion (chapter 2)")
    try:
        jax_axes, torch_axes = fig.axes
        assert jax_axes.get_yscale() == "log" and torch_axes.get_yscale() == "log"
        assert [t.get_text() for t in jax_axes.get_xticklabels()] == ["0.10.2", "0.11.1",
                                                                      "0.12.0.1"]
        assert [t.get_text() for t in torch_axes.get_xticklabels()] == [
            "2.9.1", "2.14.1\n(install failed)", "2.15.0"]
        assert jax_axes.get_title() == "jax releases, torch 2.15.0 held"
        lines = {c.get_label() for c in jax_axes.containers}
        assert lines == {"chain_jit_vs_eager: jax.jit against JAX op by op",
                         "chain_compile_vs_eager: torch.compile against PyTorch eager"}
        assert "fp32" not in fig.texts[-1].get_text()  # the fixture's questions name none
        assert "AMD EPYC 7B13 (2 cores)" in fig.texts[-1].get_text()
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="no family 'nope'"):
        history.plot_family(found, "nope")


def test_plot_family_of_an_empty_history_says_so(tmp_path):
    import matplotlib.pyplot as plt

    fig = history.plot_family(history.load(tmp_path), "probes")
    try:
        assert len(fig.axes) == 2
        assert [t.get_text() for ax in fig.axes for t in ax.texts] == [
            "no jax release measured", "no torch release measured"]
    finally:
        plt.close(fig)


# ---- a malformed runs.csv -----------------------------------------------------------------

@pytest.fixture
def copy_of(tmp_path, releases_root):
    """The fixture's releases in a fresh folder, with its runs.csv rows to change."""
    import shutil

    root = tmp_path / "releases"
    shutil.copytree(releases_root, root)
    with open(root / history.RUNS_FILE, newline="") as handle:
        return root, list(csv.DictReader(handle))


def test_a_missing_column_is_named(copy_of):
    root, rows = copy_of
    write_runs(root, rows, [c for c in RUN_COLUMNS if c != "status"])
    with pytest.raises(BundleError, match=r"releases/runs.csv: missing column 'status'"):
        history.load(root)


@pytest.mark.parametrize(("column", "value", "message"), [
    ("status", "crashed", r"unknown status 'crashed' in column 'status' \(row 2\); accepted: "
                          "ok, install failed, run failed"),
    ("sweep", "numpy", r"unknown sweep 'numpy' in column 'sweep' \(row 2\)"),
    ("release", "latest", r"column 'release' \(row 2\): 'latest' is not a version"),
    ("date", "01/12/2026", r"column 'date' must be YYYY-MM-DD, got '01/12/2026' \(row 2\)"),
    ("install_s", "slow", r"column 'install_s' must be seconds, got 'slow' \(row 2\)")])
def test_an_unknown_value_is_named_with_its_row(copy_of, column, value, message):
    root, rows = copy_of
    rows[1][column] = value
    write_runs(root, rows)
    with pytest.raises(BundleError, match=message):
        history.load(root)


def test_an_ok_run_whose_bundle_is_missing_is_named(copy_of):
    import shutil

    root, rows = copy_of
    shutil.rmtree(root / rows[1]["bundle"])
    with pytest.raises(BundleError, match=rf"the bundle of jax 0.10.2 \(row 2\), "
                                          rf".*{rows[1]['bundle']}, is missing"):
        history.load(root)
    rows[1]["bundle"] = ""
    write_runs(root, rows)
    with pytest.raises(BundleError, match=r"jax 0.10.2 is ok but names no bundle"):
        history.load(root)


def test_a_bundle_no_row_names_is_refused(copy_of):
    root, rows = copy_of
    write_runs(root, [r for r in rows if r["release"] != "0.11.1"])
    with pytest.raises(BundleError, match="no row names the bundle .*torch-2.15.0_jax-0.11.1"):
        history.load(root)


def test_a_bundle_of_another_release_is_refused(copy_of):
    root, rows = copy_of
    rows[1]["bundle"], rows[2]["bundle"] = rows[2]["bundle"], rows[1]["bundle"]
    write_runs(root, rows)
    with pytest.raises(BundleError, match=r"build.json: field 'release' is '0.11.1', but .* "
                                          "names it for jax 0.10.2"):
        history.load(root)


def test_a_bundle_that_names_no_release_is_refused(copy_of):
    import json

    root, rows = copy_of
    build_file = root / rows[1]["bundle"] / bundles.BUILD_FILE
    build_file.write_text(json.dumps({k: v for k, v in json.loads(build_file.read_text()).items()
                                      if k != "release"}))
    with pytest.raises(BundleError, match=r"build.json: missing field 'release'"):
        history.load(root)


def test_a_claim_whose_label_names_no_framework_is_named_by_its_bundle(copy_of):
    root, rows = copy_of
    saved = pd.read_csv(root / rows[2]["bundle"] / "claims.csv")
    saved.loc[saved["claim_id"] == DOT, "baseline"] = "NumPy"
    saved.to_csv(root / rows[2]["bundle"] / "claims.csv", index=False)
    with pytest.raises(BundleError, match=rf"{rows[2]['bundle']}/claims.csv: {DOT}: the variant "
                                          "label 'NumPy' names neither framework"):
        history.changes(history.load(root))


def test_a_sweep_that_holds_two_versions_is_refused(copy_of):
    root, rows = copy_of
    rows[1]["torch"] = "2.14.1"
    write_runs(root, rows)
    with pytest.raises(BundleError, match=r"the jax sweep's runs hold more than one torch "
                                          r"\(2.14.1, 2.15.0\)"):
        history.load(root)


def test_a_release_attempted_twice_counts_by_its_last_row(copy_of):
    root, rows = copy_of
    retried = run_row("torch", "2.14.1", status="run failed", error="Killed\nOOM", run_s="12.0")
    write_runs(root, [*rows, retried])
    again = history.load(root)
    point = next(p for p in again.sweeps["torch"] if p.release == "2.14.1")
    assert (point.run["status"], point.run["error"]) == ("run failed", "Killed\nOOM")
    assert len(history.runs_table(again)) == 6  # every attempt stays in the table
    assert "torch 2.14.1 (run failed: Killed)" in history.runs_sentence(again)


# ---- the page -----------------------------------------------------------------------------

def run_ledger(book, monkeypatch):
    import matplotlib.pyplot as plt

    make_results(book / "_build" / "results", [claim("01_vmap", "dot_jit_vs_compile")])
    try:
        return run_page(book, monkeypatch)
    finally:
        plt.close("all")


def test_the_ledger_page_shows_the_empty_state_without_release_bundles(tmp_path, monkeypatch):
    ran = run_ledger(tmp_path, monkeypatch)
    assert ran["glued"]["releases_summary"].startswith("'No release bundles are committed")
    runs, probes, fori, plotted, moved, control = ran["shown"][4:10]
    assert fori is None and plotted is None  # figures, each drawn empty
    for table in (runs, probes, moved):
        assert len(table) == 1 and table.iat[0, 0].startswith("No release bundles")
    assert control.iat[0, 0].startswith("No second run of the held point is committed")


def test_the_ledger_page_reads_committed_release_bundles(tmp_path, monkeypatch):
    write_runs(tmp_path / "book" / "data" / "releases",
               fixture_rows(tmp_path / "book" / "data" / "releases"))
    ran = run_ledger(tmp_path, monkeypatch)
    summary = ran["glued"]["releases_summary"]
    assert "The jax sweep ran 3 releases" in summary
    assert "jax 0.10.2 returned a wrong result under jit (jax-ml/jax#39103)" in ran["glued"][
        "releases_headline"]
    runs, probes, _, _, moved, _ = ran["shown"][4:10]
    assert len(runs) == 5 and len(probes) == 5 and len(moved) == 7
    assert not math.isnan(probes.loc[("jax", "0.10.2"), "fori 40,000 (ms)"])


# ---- the rebuild control ------------------------------------------------------------------

def with_control(tmp_path, ratios, **changes):
    """The fixture, plus a second run of the held point under control/ with `ratios`."""
    root = tmp_path / "releases"
    write_runs(root, fixture_rows(root))
    control = root / CONTROL_FOLDER
    date, _, medians, right = RUNS["jax", HELD_JAX]
    name = release_bundle(control, "jax", HELD_JAX, "2026-12-03", ratios, medians, right)
    write_runs(control, [run_row("jax", HELD_JAX, bundle=name, date="2026-12-03", **changes)])
    return history.load(root)


def test_the_control_reruns_the_held_point_and_names_what_moved_without_a_release(tmp_path):
    held = RUNS["jax", HELD_JAX][1]
    found = with_control(tmp_path, {**held, DOT: held[DOT] * 1.10})  # moved: beyond ±5.7%
    assert found.control is not None and found.control.release == HELD_JAX
    table = history.control_changes(found)
    assert set(table["claim_id"]) == set(held)
    moved = table[table["decision"] == "moved"]
    assert list(moved["claim_id"]) == [DOT] and (moved["direction"] == "").all()
    shown = history.control_table(found)
    assert set(shown.index) == set(held) and shown.loc[DOT, "decision"] == "moved"
    assert shown.loc[DOT, "to / from [95% interval]"].startswith("1.100 [")
    assert history.control_reach(found) == pytest.approx(1.10)
    said = history.moves_sentence(found)
    assert (f"(a second run of the held point, the rebuild control, moved 1 of its {len(held)} "
            f"claims: {history.PLAIN[DOT]}; its largest move of any claim was ×1.10)") in said
    listed = history.regressions(found).set_index("claim_id")
    assert listed.loc[DOT, "in the rebuild control"].iloc[0].startswith("moved, 1.100 [")
    assert (listed.loc[[FORI], "in the rebuild control"].str.startswith("steady")).all()
    # a move further than ×1.10 counts as the release's; one no further does not
    dot = listed.loc[[DOT]].set_index("question", append=True)
    assert set(dot["further than the control moved any claim"]) <= {"yes", "no"}
    notes = history.upgrade_notes(found)
    assert "Not counted" not in notes or "no further than a second run" in notes


def test_a_control_that_moved_nothing_says_so_and_none_is_said_where_none_ran(tmp_path, found):
    held = RUNS["jax", HELD_JAX][1]
    steady = with_control(tmp_path, held)
    assert set(history.control_table(steady)["decision"]) == {"steady"}
    assert "moved 0 of its" in history.moves_sentence(steady)
    assert found.control is None
    assert "no rebuild control is committed" in history.moves_sentence(found)
    assert "No rebuild control is committed" in history.upgrade_notes(found)


def test_a_control_that_installed_other_releases_is_refused(tmp_path):
    with pytest.raises(BundleError, match="the control installed flax 0.12.8"):
        with_control(tmp_path, RUNS["jax", HELD_JAX][1], flax="0.12.8")
