"""The dated facts chapter 6 shows beside this build's evidence: every row names a source
the bibliography holds and the page cites, with its hardware, software or date."""

import datetime as dt
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "data"
BIB_KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text(),
                          re.MULTILINE))
CHAPTER = (ROOT / "notebooks" / "07_choosing.md").read_text()
CITED = {key.strip() for group in re.findall(r"\{cite\}`([^`]+)`", CHAPTER)
         for key in group.split(",")}


def read(name):
    return pd.read_csv(DATA / name, dtype=str, keep_default_na=False)


def test_every_key_the_chapter_cites_is_in_the_bibliography():
    assert CITED <= BIB_KEYS, CITED - BIB_KEYS


def test_every_anchor_is_labelled_with_hardware_software_and_a_cited_source():
    anchors = read("published_anchors.csv")

    assert list(anchors.columns) == ["source_key", "date", "hardware", "software",
                                     "workload", "framework", "variant", "metric", "value",
                                     "unit", "note"]
    assert set(anchors["source_key"]) <= BIB_KEYS & CITED
    assert (anchors[["date", "hardware", "software", "workload"]] != "").all().all()
    year = r"\b20\d\d\b"
    assert anchors["date"].str.contains(year).all()
    numeric = anchors[anchors["metric"] != "qualitative"]
    assert pd.to_numeric(numeric["value"]).notna().all() and (numeric["unit"] != "").all()
    assert (anchors.loc[anchors["metric"] == "qualitative", "note"] != "").all()


def test_the_issues_anchors_are_all_there():
    anchors = read("published_anchors.csv")
    gpus = anchors.groupby("source_key")["hardware"].agg(" ".join)

    slides = "seed-pytorch2-slides"
    assert "A100" in gpus[slides]  # the slides' nanoGPT table and MFU
    assert {"ms per iteration (mean)", "MFU % (mean)"} <= set(
        anchors.loc[anchors["source_key"] == "seed-pytorch2-slides", "metric"])
    algoperf = anchors[anchors["source_key"] == "algoperf-pr892"]
    assert {"JAX", "PyTorch"} <= set(algoperf["framework"]) and "A100" in gpus["algoperf-pr892"]
    assert "L4" in gpus["seed-xla-jax"] and "A100" in gpus["seed-xla-jax"]


def test_downloads_are_one_dated_snapshot_ranked_by_its_counts():
    downloads = read("pypi_downloads.csv")

    assert downloads["snapshot_date"].nunique() == 1
    dt.date.fromisoformat(downloads["snapshot_date"].iat[0])
    assert set(downloads["source_key"]) <= BIB_KEYS & CITED
    ranked = downloads.assign(n=downloads["downloads_30d"].astype(int),
                              rank=downloads["rank"].astype(int)).sort_values("rank")
    assert ranked["n"].is_monotonic_decreasing
    assert {"torch", "jax", "flax", "transformers"} <= set(downloads["package"])


def test_every_ecosystem_row_has_sources_the_page_cites_and_a_date():
    ecosystem = read("ecosystem.csv")

    assert list(ecosystem.columns) == ["job", "pytorch", "jax", "source_keys", "checked"]
    for _, row in ecosystem.iterrows():
        keys = {k.strip() for k in row["source_keys"].split(";")}
        assert keys and keys <= BIB_KEYS & CITED, (row["job"], keys - (BIB_KEYS & CITED))
        dt.date.fromisoformat(row["checked"])
    for job in ("training loop", "checkpointing", "serving", "mobile", "pretrained"):
        assert ecosystem["job"].str.contains(job).any(), job


@pytest.mark.parametrize("name", ["published_anchors.csv", "pypi_downloads.csv",
                                  "ecosystem.csv"])
def test_the_chapter_reads_the_shipped_file(name):
    assert f'"{name}"' in CHAPTER
