"""deepdive.chapters.ledger: the ledger page's tables and sentences, from small fixture bundles
and a fixture "this build" in tmp_path; the page's own code run with none, one and two
bundles; and the claim-id registry checked against what the pages can save."""

import ast
import json
import math
import re
import statistics
from pathlib import Path

import jupytext
import pandas as pd
import pytest
import yaml
from test_bundles import CPU, GPU, JAX, TORCH, claim, hand_bundle, make_results, stamp

from deepdive.book import bundles, claim_ids, provenance
from deepdive.book.bundles import BundleError
from deepdive.chapters import claim_map, evidence, ledger
from deepdive.core import env

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "ledger.md"
OLD = {"torch": "2.13.0", "jax": "0.10.2"}
NEW = {"torch": "2.99.0", "jax": "0.99.0"}  # a release no test environment has
# ratio, low, high: decided against a band of ±5% ("tie" inside [0.952, 1.05])
FASTER, SLOWER, TIE, OPEN = (1.5, 1.4, 1.6), (0.6, 0.55, 0.65), (1.0, 0.99, 1.01), \
    (1.05, 1.0, 1.1)


def rows(**ratios):
    """Claims of 01_vmap by id, each with its (ratio, low, high)."""
    return [claim("01_vmap", claim_id, ratio) for claim_id, ratio in ratios.items()]


def this_build(tmp_path, claims_rows, build_id="20261201T100000Z-new", device=CPU,
               date="2026-12-01"):
    stamps = [stamp(c, device=device, build_id=build_id, executed_at=f"{date} 10:00:00 UTC")
              for c in dict.fromkeys(r["chapter"] for r in claims_rows)]
    return ledger.this_build(make_results(tmp_path / "results", claims_rows, stamps))


def committed(tmp_path, *specs):
    """Bundles under tmp_path/builds from (claim rows, build.json changes), loaded."""
    root = tmp_path / "builds"
    for number, (claims_rows, changes) in enumerate(specs):
        # each bundle its own build unless a test says otherwise
        day = changes.get("date", "2026-11-28").replace("-", "")
        changes = {"build_id": f"{day}T11550{number}Z-bundle{number}", **changes}
        hand_bundle(root, claims_rows, **changes)
    return bundles.load_all(root, current=claim_map.current)


# ---- columns ------------------------------------------------------------------------------

def test_columns_put_cpu_then_gpu_bundles_oldest_first_then_this_build(tmp_path):
    found = committed(tmp_path,
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-27", device=GPU,
                                                             device_kind="gpu")),
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-30",
                                                             build_id="20261130T090000Z-b")),
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-30", versions=NEW,
                                                             build_id="20261130T080000Z-a")),
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-28", versions=NEW)))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER))
    labels = [c.label for c in ledger.columns(found, this)]
    # on one date, the earlier build id first, whatever its folder's name
    assert labels == ["2026-11-28_cpu-2core_torch-2.99.0_jax-0.99.0",
                      "2026-11-30_cpu-2core_torch-2.99.0_jax-0.99.0",
                      "2026-11-30_cpu-2core_torch-2.13.0_jax-0.10.2",
                      "2026-11-27_gpu-nvidia-h100-80gb-hbm3_torch-2.13.0_jax-0.10.2",
                      "this build"]
    assert [c.kind for c in ledger.columns(found, None)] == ["cpu", "cpu", "cpu", "gpu"]


def test_this_build_committed_as_a_bundle_shows_once(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=FASTER),
                                 dict(build_id="20261201T100000Z-new", date="2026-12-01")))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER))
    (only,) = ledger.columns(found, this)
    assert (only.label, only.bundle) == ("this build", found[0].name)
    assert only.build["build_id"] == found[0].build["build_id"] and only.build["notes"] == ""
    table = ledger.provenance_table(found, this)
    assert table.loc["this build", "committed"] == f"as {found[0].name}" and len(table) == 1


def test_pages_re_run_after_the_bundle_stay_one_build_and_say_how_many_claims_moved(tmp_path):
    """Pages re-run in a later build keep the bundle's build id on the cached pages: one
    build, shown once with this build's numbers, and its notes count the re-measured claims."""
    found = committed(tmp_path, (rows(dot_jit_vs_compile=FASTER),
                                 dict(build_id="20261201T100000Z-new", date="2026-12-01")))
    for changed in (rows(dot_jit_vs_compile=(1.5, 1.4, 1.7)),  # one number
                    rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE)):  # one more claim
        this = this_build(tmp_path / str(len(changed)), changed)
        (mine,) = ledger.columns(found, this)
        assert (mine.label, mine.bundle) == ("this build", found[0].name)
        assert mine.build["notes"] == ("1 of its claims re-measured since its bundle was "
                                       "written (pages re-run in a later build)")
        assert ledger.rebuild_pair(found, this) is None  # one build is no rebuild control
    other = this_build(tmp_path / "other", rows(dot_jit_vs_compile=FASTER),
                       build_id="20261202T100000Z-later")
    assert [c.label for c in ledger.columns(found, other)] == [found[0].name, "this build"]


def test_a_build_run_outside_make_book_never_matches_a_bundle(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=FASTER),
                                 dict(build_id=provenance.OUTSIDE_BUILD)))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER), build_id=provenance.OUTSIDE_BUILD)
    assert len(ledger.columns(found, this)) == 2


def test_there_is_no_this_build_before_a_chapter_saved_a_claim(tmp_path):
    assert ledger.this_build(tmp_path) is None
    make_results(tmp_path, [], [stamp("01_vmap")])
    assert ledger.this_build(tmp_path) is None


def test_this_build_shows_stamps_that_disagree_in_its_notes(tmp_path):
    claims_rows = rows(dot_jit_vs_compile=FASTER) + [claim("04_gpt_training",
                                                           "char_fp32_jax_vs_torch")]
    stamps = [stamp("01_vmap"), stamp("04_gpt_training", torch="2.12.0")]
    this = ledger.this_build(make_results(tmp_path, claims_rows, stamps))
    assert "chapters disagree on torch" in this.build["notes"]
    assert "04_gpt_training" in ledger.provenance_table([], this).loc["this build", "notes"]


def test_load_ledger_reads_bundles_and_this_build_and_fails_on_a_malformed_bundle(tmp_path):
    hand_bundle(tmp_path / "builds", rows(dot_jit_vs_compile=FASTER))
    make_results(tmp_path / "results", rows(dot_jit_vs_compile=FASTER))
    found, this = ledger.load_ledger(tmp_path / "builds", tmp_path / "results")
    assert len(found) == 1 and this.label == "this build"
    hand_bundle(tmp_path / "builds", [claim("01_vmap", "foo_vs_bar")], date="2026-11-29")
    with pytest.raises(BundleError, match="claims.csv: unknown claim id 'foo_vs_bar' \\(row 1\\)"):
        ledger.load_ledger(tmp_path / "builds", tmp_path / "results")


# ---- the tables ---------------------------------------------------------------------------

def test_the_provenance_table_has_one_row_per_build(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=FASTER), dict(notes="a note")))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER))
    table = ledger.provenance_table(found, this)
    assert list(table.columns) == ["committed", "date", "device", "cores", "python", "torch",
                                   "jax", "flax", "scale", "tie band", "notes"]
    old = table.loc[found[0].name]
    assert (old["torch"], old["jax"], old["flax"], old["tie band"], old["notes"], old["cores"]) \
        == ("2.13.0", "0.10.2", "1.0", "±5.0%", "a note", 2)
    assert (table.loc["this build", "committed"], old["committed"]) == ("no", "yes")
    assert ledger.provenance_table([], None).empty


def test_the_claims_table_recomputes_verdicts_and_marks_flips(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=SLOWER, dot_jit_vs_vmap=OPEN,
                                      attention_jit_vs_vmap=TIE), dict(versions=NEW)))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=FASTER,
                                     grads_jit_vs_compile=TIE))
    table = ledger.claims_table(found, this)
    name = found[0].name
    assert table.loc[("01_vmap", "dot_jit_vs_compile"), "this build"] == \
        "faster, 1.500 [1.400, 1.600]"
    assert table.loc[("01_vmap", "dot_jit_vs_compile"), name] == "slower, 0.600 [0.550, 0.650]"
    assert table.loc[("01_vmap", "grads_jit_vs_compile"), name] == ledger.ABSENT
    assert table["flipped"].to_dict() == {
        ("01_vmap", "attention_jit_vs_vmap"): "", ("01_vmap", "dot_jit_vs_compile"): "⇄ flipped",
        ("01_vmap", "dot_jit_vs_vmap"): "", ("01_vmap", "grads_jit_vs_compile"): ""}
    assert ledger.verdicts(found, this).loc[("01_vmap", "dot_jit_vs_vmap"), name] == "withheld"
    html = ledger.styled_claims(found, this).to_html()
    assert html.count("font-weight: bold") == 1 and "⇄ flipped" in html


def test_ratios_keep_three_decimals_below_ten_one_below_a_thousand_none_above(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=(50.0, 40.0, 60.0),
                                      dot_jit_vs_vmap=(1500.0, 900.0, 2000.0)),
                                 dict(versions={"flax": None})))
    table = ledger.claims_table(found, None)
    assert table.iloc[:, 0].tolist() == ["faster, 50.0 [40.0, 60.0]",
                                         "faster, 1500 [900.0, 2000]"]
    assert ledger.provenance_table(found, None)["flax"].tolist() == ["none"]


def test_claims_that_moved_are_matched_where_they_live_now(tmp_path):
    found = committed(tmp_path, ([claim("03_torch_compile", "char_inductor_fp32")], {}))
    this = this_build(tmp_path, [claim("04_gpt_training", "char_inductor_fp32", SLOWER)])
    table = ledger.claims_table(found, this)
    assert list(table.index) == [("04_gpt_training", "char_inductor_fp32")]
    assert table["flipped"].iat[0] == "⇄ flipped"


def test_claims_are_listed_by_chapter_then_id_with_sizes_in_numeric_order(tmp_path):
    this = this_build(tmp_path, rows(dot_compile_vs_vmap_256=TIE, dot_compile_vs_vmap_16=TIE,
                                     dot_compile_vs_vmap_64=TIE) + [claim("00_intro", "tiny_jit")])
    assert [i for _, i in ledger.claims_table([], this).index] == [
        "tiny_jit", "dot_compile_vs_vmap_16", "dot_compile_vs_vmap_64", "dot_compile_vs_vmap_256"]


def test_an_empty_ledger_has_an_empty_table():
    assert ledger.claims_table([], None).empty and ledger.flips([], None).empty


def test_flips_say_what_the_builds_that_disagree_differ_in(tmp_path):
    found = committed(
        tmp_path,
        (rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=OPEN, attention_jit_vs_vmap=FASTER),
         {}),
        (rows(dot_jit_vs_compile=SLOWER, dot_jit_vs_vmap=FASTER, attention_jit_vs_vmap=FASTER),
         dict(date="2026-11-29", versions=NEW)),
        (rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE, attention_jit_vs_vmap=FASTER),
         dict(device=GPU, device_kind="gpu")),
        (rows(attention_jit_vs_vmap=SLOWER), dict(date="2026-11-30")))
    flipped = ledger.flips(found, None)
    assert flipped["between"].to_dict() == {
        ("01_vmap", "attention_jit_vs_vmap"): "builds of one release, device kinds, releases",
        ("01_vmap", "dot_jit_vs_compile"): "device kinds, releases",
        ("01_vmap", "dot_jit_vs_vmap"): "device kinds"}  # withheld in the first: no flip
    assert flipped.loc[("01_vmap", "dot_jit_vs_vmap"), "question"] == \
        "a workload: dot_jit_vs_vmap"
    assert list(flipped.columns) == ["question", *(c.label for c in ledger.columns(found, None)),
                                     "between", "change between releases"]
    # the release pair: 2026-11-29 (NEW) and 2026-11-30, which made only one of these claims
    assert flipped["change between releases"].to_dict() == {
        ("01_vmap", "attention_jit_vs_vmap"): "moved", ("01_vmap", "dot_jit_vs_compile"): "—",
        ("01_vmap", "dot_jit_vs_vmap"): "—"}
    cpu_and_gpu = [b for b in found if b.build["versions"]["torch"] == OLD["torch"]][:2]
    assert ledger.release_pair(cpu_and_gpu, None) is None
    assert "change between releases" not in ledger.flips(cpu_and_gpu, None).columns


# ---- what the release changed ---------------------------------------------------------------

def test_the_release_pair_is_the_newest_cpu_build_and_the_newest_on_another_release(tmp_path):
    assert ledger.release_pair([], None) is None
    gpu = committed(tmp_path / "g", (rows(dot_jit_vs_compile=FASTER),
                                     dict(device=GPU, device_kind="gpu")))
    assert ledger.release_pair(gpu, None) is None
    found = committed(tmp_path,
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-20")),
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-25",
                                                             device="Intel Xeon (2 cores)")),
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-26", scale="medium")),
                      (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-30", versions=NEW)))
    old, new = ledger.release_pair(found, None)
    # the older release on the newest build's CPU, though another CPU ran it later
    assert (old.build["date"], new.build["date"]) == ("2026-11-20", "2026-11-30")
    this = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER))  # 2026-12-01, installed pins
    old, new = ledger.release_pair(found, this)
    assert (old.build["date"], new.label) == ("2026-11-30", "this build")
    one_day = committed(tmp_path / "d", (rows(dot_jit_vs_compile=FASTER),
                                         dict(build_id="20261128T090000Z-b", versions=NEW)),
                        (rows(dot_jit_vs_compile=FASTER), dict(build_id="20261128T080000Z-a")))
    old, new = ledger.release_pair(one_day, None)  # on one date, the later build is the new
    assert (old.build["build_id"], new.build["build_id"]) == ("20261128T080000Z-a",
                                                              "20261128T090000Z-b")
    same = committed(tmp_path / "s", (rows(dot_jit_vs_compile=FASTER), {}),
                     (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-30")))
    assert ledger.release_pair(same, None) is None  # one release, twice


def test_release_changes_decide_the_ratio_of_ratios_against_the_wider_band(tmp_path):
    wide = [claim("01_vmap", claim_id, TIE, band=0.05)
            for claim_id in ("attention_jit_vs_vmap", "attention_jit_vs_compile")]
    for row in wide:
        row["decision_band"] = 0.2  # a noisy side widened these claims' bands in the old build
    found = committed(
        tmp_path,
        (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=TIE,
              dot_vmap_vs_batched=TIE) + wide, {}),
        (rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=SLOWER, grads_jit_vs_compile=TIE,
              dot_vmap_vs_batched=OPEN, attention_jit_vs_vmap=(1.15, 1.12, 1.18),
              attention_jit_vs_compile=(1.3, 1.25, 1.35), attention_vmap_vs_batched=TIE),
         dict(date="2026-11-30", versions=NEW)))
    old, new = ledger.release_pair(found, None)
    changes = ledger.release_changes(old, new)
    assert changes["change"].to_dict() == {
        ("01_vmap", "dot_jit_vs_compile"): "moved", ("01_vmap", "dot_jit_vs_vmap"): "moved",
        ("01_vmap", "grads_jit_vs_compile"): "steady",
        ("01_vmap", "dot_vmap_vs_batched"): "undecided",
        # inside the widened ±20% but not the unwidened ±5%: a noisy side widens only what
        # a move must clear, so this is not steady; it would move against ±5%
        ("01_vmap", "attention_jit_vs_vmap"): "undecided",
        ("01_vmap", "attention_jit_vs_compile"): "moved"}  # clears even ±20%
    moved = changes.loc[("01_vmap", "dot_jit_vs_compile")]
    assert moved["reading"] == "the candidate gained against its baseline"
    low = 1.5 * math.exp(-math.hypot(math.log(1.5 / 1.4), math.log(1.01)))
    high = 1.5 * math.exp(math.hypot(math.log(1.6 / 1.5), -math.log(0.99)))
    assert moved[["ratio", "low", "high"]].tolist() == pytest.approx([1.5, low, high])
    assert (moved["old"], moved["new"]) == ("tie, 1.000 [0.990, 1.010]",
                                            "faster, 1.500 [1.400, 1.600]")
    assert changes.loc[("01_vmap", "dot_jit_vs_vmap"), "reading"] == \
        "the candidate lost against its baseline"
    noisy = changes.loc[("01_vmap", "attention_jit_vs_vmap")]
    assert (noisy["band"], noisy["decision band"], noisy["verdict"]) == (0.05, 0.2, "withheld")
    assert changes.loc[("01_vmap", "grads_jit_vs_compile"), "decision band"] == 0.05
    shown = ledger.release_table(found, None)["new / old [95% interval]"]
    assert shown[("01_vmap", "attention_jit_vs_vmap")].endswith("; band ±5.0% (±20.0% to move)")
    assert shown[("01_vmap", "grads_jit_vs_compile")].endswith("; band ±5.0%")


def test_a_claim_saved_without_a_decision_band_is_decided_against_its_tie_band(tmp_path):
    saved = claim("01_vmap", "dot_jit_vs_compile", TIE, band=0.7)
    saved["decision_band"] = ""
    old, new = (ledger.columns(committed(tmp_path / name, ([row], changes)), None)[0]
                for name, row, changes in (("old", saved, {}), ("new", claim(
                    "01_vmap", "dot_jit_vs_compile", FASTER), dict(versions=NEW))))
    changes = ledger.release_changes(old, new)
    assert changes["band"].iat[0] == 0.7 and changes["change"].iat[0] == "steady"
    assert changes["decision band"].iat[0] == 0.7


def test_a_release_is_never_compared_across_device_kinds(tmp_path):
    cpu, gpu = ledger.columns(committed(tmp_path, (rows(dot_jit_vs_compile=TIE), {}),
                                        (rows(dot_jit_vs_compile=TIE),
                                         dict(device=GPU, device_kind="gpu"))), None)
    with pytest.raises(ValueError, match="one kind of device"):
        ledger.release_changes(cpu, gpu)


def test_the_release_table_and_sentence_name_the_moved_claims(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE,
                                      grads_jit_vs_compile=TIE), {}))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=FASTER,
                                     grads_jit_vs_compile=OPEN))
    table = ledger.release_table(found, this)
    old = f"{found[0].name} (torch 2.13.0, jax 0.10.2)"
    new = f"this build (torch {env.versions()['torch']}, jax {env.versions()['jax']})"
    assert list(table.columns) == ["question", old, new, "new / old [95% interval]", "change",
                                   "reading"]
    assert list(table["change"]) == ["moved", "undecided", "steady"]  # moved first
    assert table["question"].iat[0] == "a workload: dot_jit_vs_vmap"
    assert table["new / old [95% interval]"].iat[0] == "1.500 [1.399, 1.601]; band ±5.0%"
    moved = ledger.release_table(found, this, changes=("moved",))
    assert [i for _, i in moved.index] == ["dot_jit_vs_vmap"]
    rest = ledger.release_table(found, this, changes=("undecided", "steady"))
    assert [i for _, i in rest.index] == ["grads_jit_vs_compile", "dot_jit_vs_compile"]
    assert list(rest.columns) == list(table.columns)
    pair = ledger.release_pair(found, this)
    assert ledger.release_sentence(found, this) == (
        f"From {old} to {new}, both on the CPU at small scale (they differ in "
        f"{ledger.differences(*pair)}), 1 of the 3 claims both made moved beyond the claim's "
        "band, 1 held steady and 1 stayed undecided; moved: in 1 the candidate gained against "
        "its baseline (dot_jit_vs_vmap). Over all 3 shared claims the median new/old is "
        "1.050: a ratio cannot tell a candidate that sped up from a baseline that slowed "
        "down. No two builds of one release are committed yet, so what a rebuild alone moves "
        "is not measured here.")
    lost = this_build(tmp_path / "l", rows(dot_jit_vs_compile=SLOWER, dot_jit_vs_vmap=FASTER,
                                           grads_jit_vs_compile=SLOWER))
    assert "; moved: in 1 the candidate gained against its baseline (dot_jit_vs_vmap), in 2 " \
           "the candidate lost against its baseline (dot_jit_vs_compile, " \
           "grads_jit_vs_compile)." in ledger.release_sentence(found, lost)


def test_the_release_sentence_names_what_the_builds_differ_in_and_the_rebuild_control(tmp_path):
    claims_rows = rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=TIE)
    released = (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=FASTER, grads_jit_vs_compile=OPEN),
                dict(date="2026-11-30", versions=NEW | {"numpy": "3.0"}, commit="fed987"))
    rebuilt = (claims_rows, dict(date="2026-11-28", python="3.13.2", commit="def456"))
    first = (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=SLOWER, grads_jit_vs_compile=TIE),
             dict(date="2026-11-27"))
    said = ("From 2026-11-28_cpu-2core_torch-2.13.0_jax-0.10.2 (torch 2.13.0, jax 0.10.2) to "
            "2026-11-30_cpu-2core_torch-2.99.0_jax-0.99.0 (torch 2.99.0, jax 0.99.0), both on "
            "the CPU at small scale (they differ in torch 2.13.0 -> 2.99.0; jax 0.10.2 -> "
            "0.99.0; numpy 1.0 -> 3.0; Python 3.13.2 -> 3.13.1; commit def456 -> fed987), 1 of "
            "the 3 claims both made moved beyond the claim's band, 1 held steady and 1 stayed "
            "undecided; moved: in 1 the candidate gained against its baseline "
            "(dot_jit_vs_vmap). Over all 3 shared claims the median new/old is 1.050: a ratio "
            "cannot tell a candidate that sped up from a baseline that slowed down.")
    found = committed(tmp_path / "two", rebuilt, released)
    assert ledger.rebuild_pair(found, None) is None
    assert ledger.release_sentence(found, None) == said + (
        " No two builds of one release are committed yet, so what a rebuild alone moves is "
        "not measured here.")
    found = committed(tmp_path / "three", first, rebuilt, released)
    assert ledger.release_sentence(found, None) == said + (
        " Against each of the 2 builds of the old release, 1 moved every time "
        "(dot_jit_vs_vmap) and 0 against only some of them."
        " Between two builds of one release (2026-11-27_cpu-2core_torch-2.13.0_jax-0.10.2 "
        "(torch 2.13.0, jax 0.10.2) and 2026-11-28_cpu-2core_torch-2.13.0_jax-0.10.2 (torch "
        "2.13.0, jax 0.10.2): Python 3.13.1 -> 3.13.2; commit abc123 -> def456), 1 of the 3 "
        "claims both made moved beyond the claim's band, 2 held steady and 0 stayed "
        "undecided: a release's moves count only beyond what a rebuild alone moves.")


def test_differences_name_every_version_then_python_commit_device_and_scale(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=TIE), {}),
                      (rows(dot_jit_vs_compile=TIE), dict(
                          date="2026-11-29", build_id="another", python="3.14.0",
                          commit="def456", device="Intel Xeon (2 cores)", scale="medium",
                          versions=NEW | {"jaxlib": "0.99.0", "triton": None})))
    old, new = ledger.columns(found, None)
    assert ledger.differences(old, new) == (
        "torch 2.13.0 -> 2.99.0; jax 0.10.2 -> 0.99.0; jaxlib 1.0 -> 0.99.0; triton 1.0 -> "
        "None; Python 3.13.1 -> 3.14.0; commit abc123 -> def456; device AMD EPYC 7B13 (2 "
        "cores) -> Intel Xeon (2 cores); scale small -> medium")
    assert ledger.differences(new, old).startswith("torch 2.99.0 -> 2.13.0; ")
    # the date, the build id, the claims: not what a build's facts differ in
    same = committed(tmp_path / "s", (rows(dot_jit_vs_compile=TIE), {}),
                     (rows(dot_jit_vs_vmap=FASTER), dict(date="2026-11-30", build_id="later")))
    assert ledger.differences(*ledger.columns(same, None)) == "nothing recorded"


def test_the_rebuild_pair_is_the_newest_two_cpu_builds_of_one_release_at_one_scale(tmp_path):
    assert ledger.rebuild_pair([], None) is None
    spec = (rows(dot_jit_vs_compile=TIE), {})
    found = committed(tmp_path, spec,
                      (spec[0], dict(date="2026-11-29")),
                      (spec[0], dict(date="2026-11-30", versions=NEW)),
                      (spec[0], dict(date="2026-12-02", scale="medium")),  # another scale
                      (spec[0], dict(date="2026-12-03", device=GPU, device_kind="gpu")))
    first, second = ledger.rebuild_pair(found, None)
    assert (first.build["date"], second.build["date"]) == ("2026-11-28", "2026-11-29")
    newer = committed(tmp_path / "n", spec, (spec[0], dict(date="2026-11-29")),
                      (spec[0], dict(date="2026-12-01")))
    assert ledger.rebuild_pair(newer, None)[1].build["date"] == "2026-12-01"
    assert ledger.rebuild_pair(found[2:], None) is None  # one build of each release and scale
    this = this_build(tmp_path, rows(dot_jit_vs_compile=TIE))  # the installed torch and jax
    assert [c.label for c in ledger.rebuild_pair(found, this)] == [b.name for b in found[:2]]
    mine = committed(tmp_path / "m", (spec[0], dict(versions={"torch": TORCH, "jax": JAX})))
    first, second = ledger.rebuild_pair(mine, this)
    assert (first.label, second.label) == (mine[0].name, "this build")
    # pages re-run after this build's bundle was written: two columns, one build, no control
    rerun = committed(tmp_path / "r", (rows(dot_jit_vs_compile=FASTER), dict(
        versions={"torch": TORCH, "jax": JAX}, build_id="20261201T100000Z-new",
        date="2026-12-01")))
    assert len(ledger.columns(rerun, this)) == 1 and ledger.rebuild_pair(rerun, this) is None


def test_the_release_sentence_when_nothing_moved_or_nothing_is_shared(tmp_path):
    found = committed(tmp_path, (rows(dot_jit_vs_compile=TIE), {}))
    this = this_build(tmp_path, rows(dot_jit_vs_compile=TIE))
    assert "), 0 of the 1 claim both made moved beyond the claim's band, 1 held steady and 0 " \
           "stayed undecided. Over all 1 shared claim the median new/old is 1.000" in \
        ledger.release_sentence(found, this)
    other = this_build(tmp_path / "o", rows(dot_jit_vs_vmap=TIE))
    assert ledger.release_sentence(found, other).endswith(
        "share no claim, so nothing can be said about what the release changed.")


def test_without_two_cpu_releases_the_release_section_says_why(tmp_path):
    expected = ("Comparing releases needs two CPU builds at one scale on different torch or jax "
                "versions; this ledger has no CPU builds.")
    assert ledger.release_sentence([], None) == expected
    assert ledger.release_table([], None).iat[0, 0] == expected
    this = this_build(tmp_path, rows(dot_jit_vs_compile=TIE))
    assert ledger.release_sentence([], this).endswith(
        f"this ledger has 1 CPU build (this build (torch {env.versions()['torch']}, jax "
        f"{env.versions()['jax']})).")


# ---- what this build found ----------------------------------------------------------------

def test_the_found_sentence_with_no_build_and_no_bundle(tmp_path):
    assert ledger.found_sentence([], None) == (
        "This build has saved no claims yet, so it has no column here; no bundles are "
        "committed under book/data/builds/.")
    found = committed(tmp_path, (rows(dot_jit_vs_compile=TIE), {}))
    assert ledger.found_sentence(found, None).endswith("1 bundle is committed under "
                                                       "book/data/builds/.")


def test_the_found_sentence_when_this_build_stands_alone(tmp_path):
    this = this_build(tmp_path, rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE))
    assert ledger.found_sentence([], this) == (
        "This build saved 2 claims, and no bundle is committed under book/data/builds/ yet: "
        "they stand alone until another build's bundle is added (below).")
    own = committed(tmp_path, (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE),
                               dict(build_id="20261201T100000Z-new", date="2026-12-01")))
    assert "the only committed bundle is this build's own" in ledger.found_sentence(own, this)
    rerun = this_build(tmp_path / "r", rows(dot_jit_vs_compile=TIE))  # its pages re-run since
    assert "the only committed bundle is this build's own" in ledger.found_sentence(own, rerun)
    later = this_build(tmp_path / "l", rows(dot_jit_vs_compile=TIE), build_id="20261202T1Z-b")
    assert ledger.found_sentence(own, later) == (
        "1 bundle is committed. Of this build's 1 claim, 1 was also made by another build: 1 "
        "reached the same verdict in every build that decided it, 0 flipped, and 0 were "
        "decided by fewer than two builds.")


def test_the_found_sentence_counts_claims_that_held_flipped_or_stayed_open(tmp_path):
    mine = rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=TIE,
                attention_jit_vs_vmap=TIE)
    found = committed(
        tmp_path,
        (rows(dot_jit_vs_compile=SLOWER, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=OPEN),
         dict(versions=NEW)),
        (mine, dict(build_id="20261201T100000Z-new", date="2026-12-01")))
    this = this_build(tmp_path, mine)
    # this build is the last column, the older bundle the first: its own is named from its own
    assert [c.label for c in ledger.columns(found, this)] == [found[0].name, "this build"]
    assert ledger.found_sentence(found, this) == (
        f"2 bundles are committed, this build's own among them ({found[1].name}). Of this "
        "build's 4 claims, 3 were also made by another build: 1 reached the same verdict in "
        "every build that decided it, 1 flipped (dot_jit_vs_compile), and 1 was decided by "
        "fewer than two builds.")


def test_the_found_sentence_names_five_flips_and_counts_the_rest(tmp_path):
    ids = ["dot_jit_vs_compile", "dot_jit_vs_vmap", "dot_vmap_vs_batched", "attention_jit_vs_vmap",
           "attention_jit_vs_compile", "attention_vmap_vs_batched"]
    found = committed(tmp_path, (rows(**dict.fromkeys(ids, SLOWER)), {}))
    this = this_build(tmp_path, rows(**dict.fromkeys(ids, FASTER)))
    assert ledger.found_sentence(found, this).endswith(
        "0 reached the same verdict in every build that decided them, 6 flipped ("
        + ", ".join(sorted(ids)[:5]) + " and 1 more), and 0 were decided by fewer than two "
        "builds.")


# ---- the page -----------------------------------------------------------------------------

def page_cells():
    return [c for c in jupytext.read(PAGE).cells if c.cell_type == "code"]


def run_page(book: Path, monkeypatch) -> dict:
    """Run the page's code cells in a book at `book`, as the build would; returns what it
    glued and the value of each shown cell."""
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    (book / "_toc.yml").write_text("root: book/intro\n")
    monkeypatch.chdir(book)
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(book / "_build" / "results"))
    shell = InteractiveShell.instance()
    shell.display_pub = CapturingDisplayPublisher()
    try:
        namespace, shown = {}, []
        for cell in page_cells():
            *body, last = ast.parse(cell.source).body
            exec(compile(ast.Module(body, []), "<cell>", "exec"), namespace)
            value = (eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                     if isinstance(last, ast.Expr) else None)
            if not isinstance(last, ast.Expr):
                exec(compile(ast.Module([last], []), "<cell>", "exec"), namespace)
            shown.append(value)
        glued = {o["metadata"]["scrapbook"]["name"]: o["data"] for o in shell.display_pub.outputs}
    finally:
        InteractiveShell.clear_instance()
        pd.reset_option("display.max_colwidth")
    return {"glued": {k: next(iter(v.values())) for k, v in glued.items()}, "shown": shown}


@pytest.mark.parametrize("bundle_count", [0, 1, 2])
def test_the_page_builds_with_no_one_or_two_bundles_and_says_so(tmp_path, monkeypatch,
                                                                bundle_count):
    builds = tmp_path / "book" / "data" / "builds"
    for i in range(bundle_count):
        hand_bundle(builds, rows(dot_jit_vs_compile=TIE), date=f"2026-11-2{i}",
                    versions=NEW if i else {}, build_id=f"an earlier build {i}")
    make_results(tmp_path / "_build" / "results", rows(dot_jit_vs_compile=FASTER))
    ran = run_page(tmp_path, monkeypatch)
    found = ran["glued"]["ledger_found"]
    if bundle_count == 0:
        assert "no bundle is committed under book/data/builds/ yet" in found
    else:
        assert f"{bundle_count} bundle" in found and "1 flipped (dot_jit_vs_compile)" in found
    assert ("moved" in ran["glued"]["release_found"]) == (bundle_count > 0)
    # the release sections' cells sit between the release pair's and the claims' tables
    provenance_table, moved, rest = ran["shown"][1:4]
    flipped, claims_styled = ran["shown"][-2:]
    assert len(provenance_table) == bundle_count + 1
    if bundle_count == 0:  # no pair: each release table is the one row saying why
        assert moved.equals(rest) and moved.iat[0, 0].startswith("Comparing releases needs")
    else:
        assert list(moved["change"]) == ["moved"] and rest.empty
    assert len(claims_styled.data) == 1
    assert len(flipped) == (bundle_count > 0)


def test_the_page_fails_on_a_malformed_bundle(tmp_path, monkeypatch):
    folder = hand_bundle(tmp_path / "book" / "data" / "builds", rows(dot_jit_vs_compile=TIE))
    (folder / "provenance.csv").unlink()
    with pytest.raises(BundleError, match=f"book/data/builds/{folder.name}/provenance.csv: file "
                                          "missing"):
        run_page(tmp_path, monkeypatch)


def test_the_page_re_executes_every_build_and_keeps_its_cells_short():
    assert jupytext.read(PAGE).metadata["mystnb"] == {"execution_mode": "force"}
    cells = page_cells()
    assert [c.metadata.get("tags") for c in cells][0] == ["remove-cell"]  # the one set-up cell
    # every other cell shows its output (some folded away), none is removed
    assert all(set(c.metadata.get("tags", [])) <= {"hide-input", "hide-output"}
               for c in cells[1:])
    assert statistics.median(len(c.source.splitlines()) for c in cells) < 10
    text = PAGE.read_text()
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        "## The builds", "## What changed from the old release to the new",
        "## Releases over time", "## Claim by claim", "## Add your build"]


def test_the_page_sits_after_reproduce_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    about = next(p for p in toc["parts"] if p["caption"] == "About this book")["chapters"]
    files = [c["file"] for c in about]
    assert files.index("book/ledger") == files.index("book/reproduce") + 1


# ---- the registry of claim ids --------------------------------------------------------------

SPELLED_OUT = re.compile(r"""(?:compare|claim)\(\s*f?["']([A-Za-z0-9_{}]+)["']""")
# Ids a loop hands to `compare(claim_id, ...)`: chapter 3's (label, id) and (id, baseline,
# candidate) tuples.
LOOP_FED = re.compile(r'\("[^"]+", "(tiny_\w+)"\)|\("(mlp_\w+)", "[^"]+", "[^"]+"\)')


def spelled_out_ids():
    """Every claim id the pages and helpers spell out in a `compare(` or `claim(` call (or
    feed one from a loop), each f-string field filled with every value its code can give
    it, and the ids the helpers' own tables and the claim map name."""
    from deepdive.book import plans
    from deepdive.chapters import gpt_training, vit_training, vmap

    gpts = {w.key for scale in env.SCALES for w in plans.sizes("04_gpt_training", scale).workloads}
    fields = {"w": set(vmap.WORKLOADS), "b": {"16"}, "batch": {"32"}, "n": {"4"},
              "framework": {"torch", "jax"}, "p": {"fp32", "bf16"},
              "part": {"forward", "backward"}, "prefix": {"", "defaults_"}}
    ids = set()
    for path in [*sorted((ROOT / "notebooks").glob("*.md")),
                 *sorted((ROOT / "src" / "deepdive" / "chapters").glob("*.py"))]:
        text = path.read_text()
        spelled = set(SPELLED_OUT.findall(text)) | {a or b for a, b in LOOP_FED.findall(text)}
        named = {i for i in spelled if "{" not in i}
        own = fields | {  # {key} is a GPT's in gpt_training.py, a route's on the XLA page
            "key": {"xla_lazy", "xla_compile", "torchax"} if "vit_xla" in path.name else gpts,
            "name": named}  # jit_xla.fusion_claims: f"{prefix}{name}"
        ids |= named
        for template in spelled - named:
            filled = {template}
            for field, values in own.items():
                filled = {f.replace(f"{{{field}}}", v) for f in filled for v in values}
            assert not any("{" in f for f in filled), f"no values for a field of {template!r}"
            ids |= filled
    ids |= {claim_id for claim_id, *_ in vmap.GRAD_CLAIMS}
    ids |= {gpt_training.benchmark_claim_id(k, m, p) for k in gpts
            for m in gpt_training.BENCHMARK_SLUGS for p in ("fp32", "bf16")}
    ids |= {vit_training.bf16_claim_id(m) for m in (
        "torch eager, SDPA", "torch.compile, SDPA", "jax.jit split/merge",
        "jax.jit split/merge, dot_product_attention")}
    ids |= {i.replace("{n}", "8") for item in evidence.EVIDENCE
            if isinstance(item, evidence.FromClaim) for i in item.claim_ids}
    ids |= {i for pair in claim_map.MOVED.items() for _, i in pair}
    # the release sweeps' reduced set names its claims in tables (deepdive.releases)
    for path in sorted((ROOT / "src" / "deepdive" / "releases").glob("*.py")):
        ids |= set(re.findall(r'"(release_\w*[a-z0-9])"', path.read_text()))
    return ids


def test_the_registry_knows_every_claim_id_the_book_spells_out():
    ids = spelled_out_ids()
    assert len(ids) > 90  # the spelling-out found the pages' claims
    assert claim_ids.unknown(sorted(ids)) == []


@pytest.mark.book
def test_every_claim_of_the_built_book_is_in_the_registry():
    built = ROOT / "_build" / "results" / "claims.csv"
    if not built.exists():
        pytest.skip("no _build/results/claims.csv: build the book first (make book)")
    saved = pd.read_csv(built)
    followed = [claim_map.current(c, i)[1] for c, i in zip(saved["chapter"], saved["claim_id"],
                                                             strict=True)]
    assert claim_ids.unknown(followed) == [], (
        "claims.csv holds ids deepdive.book.claim_ids.CLAIM_IDS does not know: add patterns")


def test_the_committed_bundles_are_valid():
    """What the page checks when the book builds, checked here without building it."""
    for found in bundles.load_all(ROOT / "book" / "data" / "builds", current=claim_map.current):
        assert json.loads((found.folder / "build.json").read_text()) == found.build



def test_an_alias_meets_the_same_claim_saved_under_its_own_id_in_another_build(tmp_path):
    """One build saved a comparison under two ids (the second an alias: PyTorch's best step
    was its eager one), another under each id: the ledger lines both up by id."""
    merged = claim("04_gpt_training", "char_bf16_jax_vs_torch", FASTER)
    merged["aliases"] = "char_bf16_jax_vs_eager"
    found = committed(tmp_path, ([merged], {}), ([
        claim("04_gpt_training", "char_bf16_jax_vs_torch", FASTER),
        claim("04_gpt_training", "char_bf16_jax_vs_eager", TIE)], dict(date="2026-11-30")))
    table = ledger.verdicts(found, None)
    assert table.loc[("04_gpt_training", "char_bf16_jax_vs_eager")].tolist() == ["faster", "tie"]
    assert table.loc[("04_gpt_training", "char_bf16_jax_vs_torch")].tolist() == ["faster"] * 2


def test_the_release_summary_counts_moves_beside_the_rebuild_control(tmp_path):
    old = (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=TIE), {})
    new = (rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=SLOWER, grads_jit_vs_compile=TIE),
           dict(date="2026-11-30", versions=NEW))
    assert ledger.release_summary(committed(tmp_path / "a", old, new), None) == (
        "From torch 2.13.0 and jax 0.10.2 to torch 2.99.0 and jax 0.99.0 (CPU, small scale), "
        "2 of 3 shared claims moved (in 1 the candidate gained against its baseline, in 1 the "
        "candidate lost against its baseline); no rebuild of one release is committed to "
        "compare that with.")
    again = (old[0], dict(date="2026-11-29"))
    assert ledger.release_summary(committed(tmp_path / "b", old, again, new), None).endswith(
        "; two builds of one release moved 0 against each other.")
    assert ledger.release_summary([], None).startswith("Comparing releases needs two CPU")
