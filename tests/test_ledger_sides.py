"""The ledger across CPUs (issue 37): a pair of builds that changes the CPU says so in its
headline, a rebuild keeps the CPU model and its cores, and a moved claim names the side whose
median changed, read from each build's result files, or attributes the move to neither."""

from pathlib import Path

import pandas as pd
from test_bundles import claim, record
from test_ledger import FASTER, ID, NEW, TIE, XEON, builds, rows

from deepdive.book import bundles
from deepdive.chapters import ledger

ROOT = Path(__file__).resolve().parents[1]
EPYC_KIND = "AMD EPYC 7B13"  # test_bundles' CPU, whose label has no "(R)" to drop
MUCH_FASTER = (5.0, 4.8, 5.2)


def medians(build, **times):
    """Write `build`'s 01_vmap result file: each variant's median step time in seconds, as
    `deepdive.book.results` saves it."""
    folder = build.results
    rows_ = [{**record("01_vmap"), "experiment": "step", "variant": label, "size": size,
              "value": seconds} for label, (size, seconds) in times.items()]
    pd.DataFrame(rows_).to_csv(folder / "01_vmap.csv", index=False)


def test_a_pair_that_changes_the_cpu_says_so_in_its_headline(tmp_path):
    spec = rows(dot_jit_vs_compile=TIE)
    xeon, other_xeon, epyc = builds(tmp_path, (spec, dict(device=XEON, date="2026-11-27")),
                                    (spec, dict(device=XEON)), (spec, dict(date="2026-11-29")))
    table = ledger.pairs([xeon, other_xeon, epyc]).set_index(["old", "new"])
    assert table.at[(xeon.label, other_xeon.label), "headline"] == \
        f"{xeon.label} → {other_xeon.label}"
    assert table.at[(other_xeon.label, epyc.label), "headline"] == (
        f"{other_xeon.label} → {epyc.label}, on another CPU: Intel Xeon → {EPYC_KIND}")
    # the bundles' names carry the CPU's kind too; "this build" does not
    kinds = ("intel-xeon-2core", "amd-epyc-7b13-2core")  # each bundle named by its CPU
    assert kinds[0] in xeon.label and kinds[1] in epyc.label


def test_a_rebuild_keeps_the_cpu_models_cores(tmp_path):
    spec = rows(dot_jit_vs_compile=TIE)
    two, four = builds(tmp_path, (spec, dict(device=XEON, date="2026-11-27")),
                       (spec, dict(device=XEON, cores=4)))
    (pair,) = ledger.pairs([two, four]).to_dict("records")
    assert pair["kind"] == "device change"


def test_a_move_names_the_side_whose_median_changed(tmp_path):
    """The cold read: "the candidate gained against its baseline" where PyTorch's bf16 step,
    the baseline, went from 139 to 648 ms."""
    old, new = builds(tmp_path, (rows(dot_jit_vs_compile=FASTER), {}),
                      (rows(dot_jit_vs_compile=MUCH_FASTER), dict(versions=NEW)))
    medians(old, base=("16", 0.139), cand=("16", 0.0927))
    medians(new, base=("16", 0.648), cand=("16", 0.095))
    found = ledger.changes(old, new).droplevel("chapter")
    assert found.at[ID, "change"] == "moved"
    assert found.at[ID, "time changed"] == "base: 139 → 648 ms"
    assert found.loc[ID, list(ledger.SIDE_COLUMNS)].tolist() == [0.139, 0.648, 0.0927, 0.095]


def test_both_sides_are_named_where_both_moved_and_sizes_are_told_apart(tmp_path):
    asked = claim("01_vmap", ID, FASTER)
    asked["question"] = "dot products, batch 256: cand against base"
    moved = dict(asked, ratio=MUCH_FASTER[0], low=MUCH_FASTER[1], high=MUCH_FASTER[2])
    old, new = builds(tmp_path, ([asked], {}), ([moved], dict(versions=NEW)))
    # the same variants at a size the question does not name: not theirs
    medians(old, base=("256", 0.3), cand=("256", 0.2))
    medians(new, base=("256", 0.6), cand=("256", 0.12))
    for build in (old, new):
        extra = pd.read_csv(build.results / "01_vmap.csv")
        pd.concat([extra, extra.assign(size="16", value=1.0)]).to_csv(
            build.results / "01_vmap.csv", index=False)
    found = ledger.changes(old, new).droplevel("chapter")
    both = "base: 300 → 600 ms; cand: 200 → 120 ms"  # each side named with its move
    assert found.at[ID, "time changed"] == both


def test_a_side_not_found_leaves_the_move_unattributed(tmp_path):
    old, new = builds(tmp_path, (rows(dot_jit_vs_compile=FASTER), {}),
                      (rows(dot_jit_vs_compile=MUCH_FASTER), dict(versions=NEW)))
    medians(old, base=("16", 0.139), cand=("16", 0.0927))
    medians(new, base=("16", 0.648))  # the candidate's row is missing
    found = ledger.changes(old, new).droplevel("chapter")
    assert found.at[ID, "time changed"] == ledger.NOT_FOUND
    assert found.loc[ID, ["candidate old", "candidate new"]].isna().tolist() == [False, True]


def test_the_committed_bundles_compare_two_cpus_and_say_so():
    found = ledger.builds(ROOT / "book" / "data" / "builds", ROOT / "no results")
    table = ledger.pairs(found)
    kinds = {bundles.bundle_name(b.build).split("_")[1] for b in found}
    assert kinds == {"intel-xeon-2core", "amd-epyc-2core"}
    kind_of = {b.label: bundles.bundle_name(b.build).split("_")[1] for b in found}
    across = table[[kind_of[old] != kind_of[new]
                    for old, new in zip(table["old"], table["new"], strict=True)]]
    assert len(across) and across["headline"].str.contains("on another CPU: ").all()
    assert set(across["kind"]) == {"device change"}
    assert set(table.loc[table["kind"] == "rebuild", "device"]) == {"="}


def test_an_older_build_without_saved_medians_reads_its_own_result_files(tmp_path):
    """A newer build saves each side's median with its claims; set beside an older build
    that did not, the older build's medians come from its own result files, never from the
    newer build's columns."""
    newer = [dict(row, baseline_median=0.648, candidate_median=0.095)
             for row in rows(dot_jit_vs_compile=MUCH_FASTER)]
    old, new = builds(tmp_path, (rows(dot_jit_vs_compile=FASTER), {}),
                      (newer, dict(versions=NEW)))
    medians(old, base=("16", 0.139), cand=("16", 0.0927))
    found = ledger.changes(old, new).droplevel("chapter")
    assert found.loc[ID, list(ledger.SIDE_COLUMNS)].tolist() == [0.139, 0.648, 0.0927, 0.095]
