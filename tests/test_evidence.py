"""deepdive.evidence reads the chapters' saved results: change them and the guide changes."""

import math

import pandas as pd
import pytest

from deepdive import evidence
from deepdive.results import COLUMNS


def rows(chapter, entries):
    return [dict(zip(COLUMNS, (chapter, *entry, "test CPU", "small"), strict=True))
            for entry in entries]


def fake_results(directory, *, jax_vmap_s=1.0, torch_vmap_s=2.0, skip=()):
    """Minimal result files in the chapters' own format, with chosen values."""
    files = {
        "01_vmap": [("attention", "torch", "torch.compile(vmap)", 1024, "median", torch_vmap_s,
                     "s"),
                    ("attention", "jax", "jax.jit(vmap)", 1024, "median", jax_vmap_s, "s"),
                    ("attention", "jax", "jax.jit(vmap)", 4, "median", 99.0, "s"),
                    ("attention", "jax", "JAX loop", 1024, "median", 30.0, "s")],
        "02_jit_xla": [("dispatch_tiny", "torch", "PyTorch eager", 16, "median", 4.0, "s"),
                       ("dispatch_tiny", "jax", "jax.jit", 16, "median", 1.0, "s"),
                       ("fusion_chain", "torch", "torch.compile", 32, "median", 1.0, "s"),
                       ("fusion_chain", "jax", "jax.jit", 32, "median", 1.05, "s")],
        "03_torch_compile": [("gpt_training", "torch", "eager fp32", "char-small",
                              "step median (ms)", 30.0, "ms"),
                             ("gpt_training", "torch", "inductor fp32", "char-small",
                              "step median (ms)", 20.0, "ms")],
        "04_vit_training": [("sweep", "torch", "torch eager, SDPA fp32 synthetic", 32, "median",
                             0.020, "s"),
                            ("sweep", "torch", "torch.compile, SDPA fp32 synthetic", 32,
                             "median", 0.018, "s"),
                            ("sweep", "jax", "jax.jit split/merge fp32 synthetic", 32, "median",
                             0.036, "s"),
                            ("sweep", "jax", "nnx.jit fp32 synthetic", 8, "median", 0.010, "s"),
                            ("sweep", "jax", "jax.jit split/merge fp32 synthetic", 8, "median",
                             0.005, "s")],
        "05_distributed": [("memory_per_device", "torch", "single", 1, "params", 100.0, "KiB"),
                           ("memory_per_device", "torch", "fsdp2", 2, "params", 50.0, "KiB"),
                           ("memory_per_device", "torch", "fsdp2", 4, "params", 25.0, "KiB"),
                           ("step_time", "torch", "single", 1, "step median (ms)", 1.0, "ms"),
                           ("step_time", "torch", "ddp", 2, "step median (ms)", 3.0, "ms")],
    }
    for chapter, entries in files.items():
        if chapter not in skip:
            pd.DataFrame(rows(chapter, entries)).to_csv(directory / f"{chapter}.csv",
                                                        index=False)
    return evidence.load_all(directory)


def by_question(table, start):
    return table[table["question"].str.startswith(start)].iloc[0]


def test_every_claim_is_computed_from_the_files(tmp_path):
    table = evidence.evidence_table(fake_results(tmp_path))

    assert by_question(table, "Compiled vmap")["value"] == pytest.approx(2.0)
    assert by_question(table, "vmap against")["value"] == pytest.approx(30.0)
    assert by_question(table, "Many tiny ops")["value"] == pytest.approx(4.0)
    assert by_question(table, "torch.compile on a GPT")["value"] == pytest.approx(1.5)
    assert by_question(table, "ViT training")["value"] == pytest.approx(0.018 / 0.036)
    assert by_question(table, "nnx.jit")["value"] == pytest.approx(2.0)
    assert by_question(table, "FSDP2")["value"] == pytest.approx(0.25)
    assert by_question(table, "DDP")["value"] == pytest.approx(3.0)
    assert (table["measured_on"] == "test CPU, scale=small").all()


def test_the_verdict_follows_the_measurement(tmp_path):
    faster_jax = evidence.evidence_table(fake_results(tmp_path, jax_vmap_s=1.0,
                                                      torch_vmap_s=2.0))
    faster_torch = evidence.evidence_table(fake_results(tmp_path, jax_vmap_s=2.0,
                                                        torch_vmap_s=1.0))
    level = evidence.evidence_table(fake_results(tmp_path, jax_vmap_s=1.0, torch_vmap_s=1.05))

    assert by_question(faster_jax, "Compiled vmap")["favours"] == "JAX"
    assert by_question(faster_torch, "Compiled vmap")["favours"] == "PyTorch"
    assert by_question(level, "Compiled vmap")["favours"] == "even"
    assert by_question(level, "Fusing")["favours"] == "even"  # 1/1.05: inside the tie band


def test_a_missing_chapter_is_reported_not_guessed(tmp_path):
    table = evidence.evidence_table(fake_results(tmp_path, skip=("04_vit_training",)))

    missing = table[table["chapter"] == "04_vit_training"]
    assert len(missing) == 2 and (missing["favours"] == "MISSING").all()
    assert missing["value"].map(math.isnan).all()
    assert missing["measured_on"].str.contains("no results from 04_vit_training").all()
    assert (table[table["chapter"] != "04_vit_training"]["favours"] != "MISSING").all()


def test_a_result_file_without_the_needed_row_is_a_clear_error(tmp_path):
    results = fake_results(tmp_path)
    results["02_jit_xla"] = results["02_jit_xla"].iloc[:1]

    with pytest.raises(KeyError, match="dispatch_tiny.*jax.jit"):
        evidence.evidence_table(results)
