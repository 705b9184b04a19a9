"""deepdive.evidence reads the chapters' saved results: change them and the guide changes."""

import math

import pandas as pd
import pytest

from deepdive import evidence
from deepdive.results import COLUMNS


def rows(chapter, entries):
    return [dict(zip(COLUMNS, (chapter, *entry, "test CPU", "small"), strict=True))
            for entry in entries]


CLAIM_COLUMNS = ("chapter", "claim_id", "question", "ratio", "low", "high", "verdict",
                 "noisy", "n", "device", "scale", "tie_band", "baseline", "candidate",
                 "headline")


def claim(chapter, claim_id, ratio, low, high, noisy=False, band=0.03):
    return dict(zip(CLAIM_COLUMNS, (chapter, claim_id, f"q {claim_id}", ratio, low, high,
                                    "stale", noisy, 15, "test CPU", "small", band, "base",
                                    "cand", False), strict=True))


def fake_results(directory, *, vmap_ratio=(2.0, 1.9, 2.1), skip=(), noisy_vmap=False):
    """Minimal result files in the chapters' own formats, with chosen values."""
    claims = [claim("01_vmap", "attention_jit_vs_compile", *vmap_ratio, noisy=noisy_vmap),
              claim("01_vmap", "attention_jax_vmap_vs_loop", 30.0, 29.0, 31.0),
              claim("02_jit_xla", "tiny_compile_vs_jit", 0.25, 0.24, 0.26),
              claim("02_jit_xla", "kept_fusion_compile_vs_jit", 1.0, 0.99, 1.01),
              claim("03_torch_compile", "char_inductor_fp32", 1.5, 1.4, 1.6),
              claim("04_vit_training", "fused_jax_vs_torch_b32", 0.5, 0.48, 0.52),
              claim("04_vit_training", "split_vs_nnx_b32", 2.0, 1.9, 2.1)]
    claims = [c for c in claims if c["chapter"] not in skip]
    if claims:
        pd.DataFrame(claims).to_csv(directory / "claims.csv", index=False)
    files = {
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


def test_every_row_is_computed_from_the_files(tmp_path):
    table = evidence.evidence_table(fake_results(tmp_path))

    assert by_question(table, "Compiled vmap")["value"] == pytest.approx(2.0)
    assert by_question(table, "vmap against")["value"] == pytest.approx(30.0)
    assert by_question(table, "Many tiny ops")["value"] == pytest.approx(0.25)
    assert by_question(table, "torch.compile on a GPT")["value"] == pytest.approx(1.5)
    assert by_question(table, "ViT training")["value"] == pytest.approx(0.5)
    assert by_question(table, "nnx.jit")["value"] == pytest.approx(2.0)
    assert by_question(table, "FSDP2")["value"] == pytest.approx(0.25)
    assert by_question(table, "DDP")["value"] == pytest.approx(3.0)
    assert (table["measured_on"] == "test CPU, scale=small").all()


def test_chapters_with_claims_give_the_verdict_the_rule_gives_not_the_files_word(tmp_path):
    faster_jax = evidence.evidence_table(fake_results(tmp_path, vmap_ratio=(2.0, 1.9, 2.1)))
    faster_torch = evidence.evidence_table(fake_results(tmp_path, vmap_ratio=(0.5, 0.4, 0.6)))
    tie = evidence.evidence_table(fake_results(tmp_path, vmap_ratio=(1.0, 0.99, 1.01)))
    straddles = evidence.evidence_table(fake_results(tmp_path, vmap_ratio=(1.05, 0.9, 1.2)))
    noisy = evidence.evidence_table(fake_results(tmp_path, noisy_vmap=True))

    assert by_question(faster_jax, "Compiled vmap")["favours"] == "JAX"
    assert by_question(faster_torch, "Compiled vmap")["favours"] == "PyTorch"
    assert by_question(tie, "Compiled vmap")["favours"] == "even"
    assert by_question(straddles, "Compiled vmap")["favours"] == "inconclusive on this build"
    assert by_question(noisy, "Compiled vmap")["favours"] == "inconclusive on this build"
    assert by_question(faster_torch, "Many tiny ops")["favours"] == "JAX"  # 0.25x: slower
    assert by_question(faster_jax, "ViT training")["favours"] == "PyTorch"  # 0.5x: slower
    assert by_question(faster_jax, "nnx.jit")["favours"] == "split/merge"


def test_chapters_without_claims_yet_apply_a_band_to_their_records(tmp_path):
    table = evidence.evidence_table(fake_results(tmp_path))

    assert by_question(table, "DDP")["favours"] == "1 process"


def test_a_missing_chapter_is_reported_not_guessed(tmp_path):
    table = evidence.evidence_table(fake_results(tmp_path, skip=("04_vit_training",
                                                                 "03_torch_compile")))

    for chapter, count in (("04_vit_training", 2), ("03_torch_compile", 1)):
        missing = table[table["chapter"] == chapter]
        assert len(missing) == count and (missing["favours"] == "MISSING").all()
        assert missing["value"].map(math.isnan).all()
        assert missing["measured_on"].str.contains(f"from {chapter}").all()
    assert (~table["chapter"].isin(["04_vit_training", "03_torch_compile"])
            <= (table["favours"] != "MISSING")).all()


def test_a_result_file_without_the_needed_row_is_a_clear_error(tmp_path):
    results = fake_results(tmp_path)
    distributed = results["05_distributed"]
    results["05_distributed"] = distributed[distributed["variant"] != "ddp"]

    with pytest.raises(KeyError, match="step_time.*ddp"):
        evidence.evidence_table(results)
