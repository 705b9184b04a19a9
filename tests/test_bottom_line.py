"""deepdive.chapters.bottom_line: the guide by situation, and the slides' verdicts beside it, every
cell built from the guide and the dated sources, one sentence each."""

import re
from pathlib import Path

import pandas as pd
import pytest
from test_evidence import results_for

from deepdive.chapters import bottom_line, evidence, guide

DATA = Path(__file__).resolve().parents[1] / "book" / "data"
ANCHORS = pd.read_csv(DATA / "published_anchors.csv")
ECOSYSTEM = pd.read_csv(DATA / "ecosystem.csv")
UNMEASURED = pd.DataFrame({"PyTorch": ["transformers 5 ships its models for PyTorch only"]},
                          index=["pretrained models with their training code"])


def advice_for(scale="small", override=None):
    return guide.guide_table(evidence.evidence_table(results_for(scale, override=override)))


def sentences(text):
    return len(re.findall(r"[.!?](\s|$)", text.strip()))


def test_the_tally_counts_each_side_ties_and_the_rest():
    rows = pd.DataFrame({"favours": ["JAX", "JAX", "PyTorch", "even", "JAX; PyTorch", ""]})

    assert bottom_line.tally(rows) == ("of 6 rows that compare the frameworks, 2 favoured JAX, "
                                       "1 PyTorch, 1 was a tie, 1 depended on the case and 1 "
                                       "was withheld or not measured")
    assert bottom_line.tally(rows.iloc[:0]) == "no row that compares the frameworks"


def test_the_cpu_tally_tells_training_steps_from_the_other_workloads():
    rows = pd.DataFrame({"if you need": ["training a ViT", "training a GPT", "vmap, compiled"],
                         "favours": ["PyTorch", "PyTorch", "JAX"]})

    assert bottom_line._by_kind(rows) == (
        "for training a model, of 2 rows that compare the frameworks, 0 favoured JAX and 2 "
        "PyTorch; for the other workloads, of 1 row that compares the frameworks, 1 favoured "
        "JAX and 0 PyTorch")


def test_a_cpu_build_says_it_measured_nothing_on_a_gpu():
    table = bottom_line.bottom_line(advice_for("small"), ANCHORS, ECOSYSTEM)

    assert list(table.index) == list(bottom_line.SITUATIONS)
    gpu = table.loc["GPU training"]
    assert gpu["this build measured"].startswith("Nothing on a GPU")
    anchors = gpu["the published anchors and sources say"]
    assert "0.321 s a step in PyTorch against 0.386 s in JAX" in anchors
    assert "no device synchronisation" in anchors
    assert table.loc["CPU-only", "this build measured"].startswith("On AMD EPYC (2 cores)")


def test_a_gpu_build_tallies_its_gpu_rows():
    table = bottom_line.bottom_line(advice_for("full"), ANCHORS, ECOSYSTEM)

    assert table.loc["GPU training", "this build measured"] == (
        "On NVIDIA A100-SXM4-80GB, of 7 rows that compare the frameworks, 3 favoured JAX and 4 "
        "PyTorch (the guide below).")
    assert table.loc["CPU-only", "this build measured"] == "Nothing on a CPU in this build."


def test_the_tally_follows_the_verdicts():
    before = bottom_line.bottom_line(advice_for(), ANCHORS, ECOSYSTEM)
    after = bottom_line.bottom_line(advice_for(override={
        "tiny_compile_vs_jit": (0.5, 0.45, 0.55, False)}), ANCHORS, ECOSYSTEM)

    assert before.loc["CPU-only", "this build measured"] != \
        after.loc["CPU-only", "this build measured"]


def test_serving_reads_the_dated_ecosystem_row():
    assert bottom_line.serving_facts(ECOSYSTEM).endswith("(the projects' documentation, read "
                                                         "2026-11-22).")
    assert bottom_line.serving_facts(ECOSYSTEM.iloc[:0]).startswith("No serving facts")


@pytest.mark.parametrize("scale", ["small", "full"])
def test_every_cell_of_the_slides_table_is_one_sentence(scale):
    table = bottom_line.slides_verdicts(advice_for(scale), UNMEASURED)

    assert len(table) == 5
    for verdict, says in table["this build says"].items():
        assert sentences(says) == 1, (verdict, says)


def test_a_build_without_evidence_says_it_measured_nothing():
    """Chapter 6 run alone, before any chapter saved claims (a fresh Colab runtime)."""
    table = bottom_line.bottom_line(guide.guide_table(evidence.evidence_table({})),
                                    ANCHORS, ECOSYSTEM)

    assert (table["this build measured"] == "Nothing: no chapter's evidence was found (the "
            "guide below).").sum() == 2  # GPU training and CPU-only; nothing claims a device
