"""deepdive.chapters.evidence and deepdive.chapters.guide read this build's claims: change
them, and the evidence and the guide change; results shaped like every scale build a guide."""

import math
from pathlib import Path

import pandas as pd
import pytest

from deepdive.book import plans
from deepdive.book.claims import COLUMNS as CLAIM_COLUMNS
from deepdive.book.results import COLUMNS as RECORD_COLUMNS
from deepdive.chapters import evidence, guide


# What each scale's build looks like: its device label, and the sizes that name claims,
# read from the chapters' own sizes (deepdive.book.plans); medium runs on one GPU, so its JAX
# devices are simulated on the CPU and PyTorch's ranks run there too.
def build_shape(scale, device, devices, bf16):
    return {"device": device, "devices": devices, "bf16": bf16,
            "gpt": tuple(w.name for w in plans.sizes("04_gpt_training", scale).workloads),
            "vit_batches": plans.sizes("05_vit_training", scale).batch_sizes,
            "torch_worlds": plans.sizes("06_distributed", scale).worlds}


SCALES = {"small": build_shape("small", "AMD EPYC (2 cores)", (2, 4, 8), False),
          "medium": build_shape("medium", "Tesla T4", (2, 4, 8), True),
          "full": build_shape("full", "NVIDIA A100-SXM4-80GB", (2, 4, 8), True)}


def claim_ids(shape):
    """(chapter, claim id, scope) of the cross-framework claims each chapter makes, by the
    chapters' own id rules: batch sizes vary with the scale, the guide's ids do not."""
    c1 = [("01_vmap", f"{kind}_jit_vs_compile", f"{kind}, batch {batch}")
          for kind, batch in (("dot", 256), ("attention", 256), ("grads", 32))]
    c2 = [("02_jit_xla", name, "tiny arrays") for name in
          ("tiny_compile_vs_jit", "tiny_eager_torch_vs_jax")]
    c2 += [("02_jit_xla", "fusion_compile_vs_jit", "chain of 8 ops, freed memory kept")]
    c4 = [("05_vit_training", f"{name}_b{batch}", f"ViT training step, batch {batch}")
          for batch in shape["vit_batches"] for name in ("best_jax_vs_torch", "fused_jax_vs_torch")]
    if shape["bf16"]:
        c4.append(("05_vit_training", "bf16_best_jax_vs_torch", "ViT step, bf16"))
    c4 += [("05_vit_xla", f"{route}_vs_jax", "ViT training step, batch 32, CPU")
           for route in ("xla_lazy", "xla_compile", "torchax")]
    # The GPT page compares each framework's best bf16 step only where bf16 is native (the
    # build shapes here say which).
    c4 += [("04_gpt_training", f"{key}_{precision}_jax_vs_torch", f"GPT training step, {name}")
           for key, name in zip(("char", "vocab"), shape["gpt"], strict=True)
           for precision in (("fp32", "bf16") if shape["bf16"] else ("fp32",))]
    return c1 + c2 + c4


def claim_row(chapter, claim_id, scope, shape, scale, ratio=(2.0, 1.9, 2.1), noisy=False,
              band=0.05):
    row = dict.fromkeys(CLAIM_COLUMNS, "")
    row.update(chapter=chapter, claim_id=claim_id, question=f"{scope}: {claim_id}",
               ratio=ratio[0], low=ratio[1], high=ratio[2], verdict="stale", reason="stale",
               noisy=noisy, n=15, device=shape["device"], scale=scale, tie_band=band,
               decision_band=band, build_band=band, baseline="base", candidate="cand",
               headline=False)
    return row


def memory_records(shape, scale, divided=True):
    rows = [("memory_per_device", "torch", "single", 1, "state", 1000.0, "KiB"),
            ("memory_per_device", "jax", "one device", 1, "state", 1000.0, "KiB")]
    for n in shape["torch_worlds"]:
        rows.append(("memory_per_device", "torch", "fsdp2", n, "state",
                     1000.0 / n + 1 if divided else 1000.0, "KiB"))
    for n in shape["devices"]:
        rows.append(("memory_per_device", "jax", "FSDP, shard_map", n, "state", 1000.0 / n,
                     "KiB"))
    return pd.DataFrame([dict(zip(RECORD_COLUMNS, ("06_distributed", *row, shape["device"],
                                                   scale), strict=True)) for row in rows])


def results_for(scale="small", skip=(), override=None, divided=True):
    """Results as evidence.load_all returns them, shaped like a build at `scale`;
    `override` maps claim ids to (ratio, low, high, noisy)."""
    shape, override = SCALES[scale], override or {}
    rows = []
    for chapter, claim_id, scope in claim_ids(shape):
        if chapter in skip:
            continue
        ratio, low, high, noisy = override.get(claim_id, (2.0, 1.9, 2.1, False))
        rows.append(claim_row(chapter, claim_id, scope, shape, scale, (ratio, low, high),
                              noisy))
    found = {chapter: None for chapter in evidence.CHAPTERS}
    found["claims"] = pd.DataFrame(rows) if rows else None
    if "06_distributed" not in skip:
        found["06_distributed"] = memory_records(shape, scale, divided)
    return found


def noisy_override(claim_id, numbers):
    """Results with one claim's numbers replaced and its decision band widened: a noisy
    side, as `deepdive.core.verdict.decide` saves it."""
    found = results_for()
    claims = found["claims"]
    where = claims["claim_id"] == claim_id
    claims.loc[where, ["ratio", "low", "high"]] = numbers[:3]
    claims.loc[where, ["noisy", "decision_band"]] = [True, numbers[3]]
    return found


def row(table, key):
    return table.set_index("key").loc[key]


def suggests(table, need_start):
    return advice(table, need_start)["this build suggests"]


def advice(table, need_start):
    rows = guide.guide_table(table)
    return rows[rows["if you need"].str.startswith(need_start)].iloc[0]


@pytest.mark.parametrize("scale", SCALES)
def test_results_shaped_like_every_scale_build_a_scoped_guide(scale):
    table = evidence.evidence_table(results_for(scale))
    rows = guide.guide_table(table)

    assert not (table["favours"] == evidence.MISSING).any()
    assert len(rows) == len(guide.ADVICE)
    measured = rows[rows["measured at"] != ""]
    assert len(measured) == len(rows)  # a row's fp32 part is measured at every scale
    assert measured["measured at"].str.contains(SCALES[scale]["device"], regex=False).all()
    assert measured["measured at"].str.contains(f"{scale} scale").all()
    timed = measured["if you need"].isin([a.need for a in guide.ADVICE if a.timed])
    on_cpu = measured["measured at"].str.contains(guide.CPU_WARNING, regex=False)
    assert on_cpu[timed].all() if scale == "small" else not on_cpu.any()
    assert not on_cpu[~timed].any()  # exact byte counts hold on any device


def test_scale_dependent_names_are_read_from_the_claims_not_assumed():
    full = evidence.evidence_table(results_for("full"))

    assert "shakespeare-char 10.65M" in row(full, "char_fp32_jax_vs_torch")["question"]
    assert "GPT-2 124M" in row(full, "vocab_fp32_jax_vs_torch")["question"]
    groups = full.groupby("group")["key"].apply(list)
    assert groups["vit_fp32"] == [f"best_jax_vs_torch_b{b}" for b in (32, 64, 128, 256)]
    medium = evidence.evidence_table(results_for("medium")).groupby("group")["key"].apply(list)
    assert medium["vit_fp32"] == ["best_jax_vs_torch_b16", "best_jax_vs_torch_b32"]


def test_the_verdict_is_recomputed_from_the_numbers_not_the_files_word():
    faster = evidence.evidence_table(results_for())
    slower = evidence.evidence_table(results_for(
        override={"attention_jit_vs_compile": (0.5, 0.4, 0.6, False)}))
    tie = evidence.evidence_table(results_for(
        override={"attention_jit_vs_compile": (1.0, 0.99, 1.01, False)}))

    assert row(faster, "attention_jit_vs_compile")["favours"] == "JAX"
    assert row(slower, "attention_jit_vs_compile")["favours"] == "PyTorch"
    assert row(tie, "attention_jit_vs_compile")["favours"] == "even"
    assert row(faster, "attention_jit_vs_compile")["verdict"] == "faster"  # file said "stale"
    assert "2.000x [1.900, 2.100]" in row(faster, "attention_jit_vs_compile")["result"]
    assert "tie band [0.952, 1.050]" in row(faster, "attention_jit_vs_compile")["result"]


def test_a_noisy_side_widens_the_band_a_decision_must_clear():
    clear = evidence.evidence_table(noisy_override("tiny_compile_vs_jit", (2.0, 1.9, 2.1, 0.5)))
    assert ("band [0.667, 1.500], widened from [0.952, 1.050] by a noisy side"
            in row(clear, "tiny_compile_vs_jit")["result"])
    reached = evidence.evidence_table(noisy_override("tiny_compile_vs_jit",
                                                     (2.0, 1.9, 2.1, 1.0)))

    assert row(clear, "tiny_compile_vs_jit")["favours"] == "PyTorch"
    assert "noisy, size uncertain" in row(clear, "tiny_compile_vs_jit")["result"]
    assert row(reached, "tiny_compile_vs_jit")["favours"] == evidence.WITHHELD


def test_an_interval_across_the_band_withholds_its_recommendation():
    table = evidence.evidence_table(results_for(
        override={"tiny_compile_vs_jit": (1.05, 0.9, 1.2, False)}))

    assert row(table, "tiny_compile_vs_jit")["favours"] == evidence.WITHHELD
    assert suggests(table, "many tiny operations per step, compiled").startswith(
        "withheld on this build")


def test_a_row_with_undecided_cases_says_how_many_decided_and_which_did_not():
    table = evidence.evidence_table(results_for(
        override={"vocab_fp32_jax_vs_torch": (1.05, 0.9, 1.2, False)}))

    row_ = advice(table, "training a language model")
    assert row_["this build suggests"].startswith(
        "On this build's CPU: JAX's best jax.jit step (decided in 1 of 2 cases; withheld on "
        "this build for gpt-v1024-0.54M).")
    assert row_["status"] == "partly decided"


def test_a_row_whose_scope_is_partly_unmeasured_is_partly_decided_and_names_the_part():
    small = evidence.evidence_table(results_for("small"))

    row_ = advice(small, "training a language model")
    assert row_["status"] == "partly decided"
    assert "Not measured in this build: bf16 mixed (the evidence says why)." in row_[
        "this build suggests"]
    full = advice(evidence.evidence_table(results_for("full")), "training a language model")
    assert full["status"] == "decided" and "Not measured" not in full["this build suggests"]


def test_decided_claims_give_the_advice_for_their_side():
    table = evidence.evidence_table(results_for(override={
        "best_jax_vs_torch_b8": (0.5, 0.48, 0.52, False)}))

    assert suggests(table, "training a ViT").startswith(
        "On this build's CPU: depends on the case: batch 8: PyTorch's best step; batch 32: "
        "JAX's best jax.jit step.")
    assert suggests(evidence.evidence_table(results_for("medium")), "many tiny operations per "
                    "step, compiled") == "On this build's Tesla T4: PyTorch under torch.compile."


def test_a_missing_chapter_is_reported_not_guessed():
    table = evidence.evidence_table(results_for(skip=("05_vit_training", "06_distributed")))

    missing = table[table["chapter"].isin(["05_vit_training", "06_distributed"])]
    expected = sum(e.chapter in ("05_vit_training", "06_distributed") for e in evidence.EVIDENCE)
    assert len(missing) == expected >= 3 and (missing["favours"] == evidence.MISSING).all()
    assert missing["ratio"].map(math.isnan).all()
    assert (table.loc[~table.index.isin(missing.index), "favours"] != evidence.MISSING).all()
    assert suggests(table, "training a ViT").startswith(
        "no evidence in this build: run 05_vit_training")
    assert advice(table, "parameters and optimizer state")["measured at"] == ""


def test_no_claims_file_at_all_leaves_every_timed_row_missing():
    table = evidence.evidence_table(results_for(skip=evidence.CHAPTERS))

    assert (table["favours"] == evidence.MISSING).all()


def test_a_claim_made_only_on_some_builds_reads_not_measured_where_absent():
    small = evidence.evidence_table(results_for("small"))

    assert row(small, "vit_bf16")["favours"] == evidence.NOT_MEASURED
    assert row(small, "lm_bf16")["favours"] == evidence.NOT_MEASURED
    full = evidence.evidence_table(results_for("full"))
    assert row(full, "bf16_best_jax_vs_torch")["favours"] == "JAX"


def test_a_chapter_without_a_required_claim_is_a_clear_error():
    results = results_for()
    claims = results["claims"]
    results["claims"] = claims[~claims["claim_id"].str.startswith("best_jax_vs_torch")]

    with pytest.raises(KeyError, match="best_jax_vs_torch_b"):
        evidence.evidence_table(results)


def test_memory_compares_both_frameworks_at_their_largest_common_device_count():
    table = evidence.evidence_table(results_for("small"))
    memory = row(table, "fsdp_memory")

    assert memory["devices"] == 4  # PyTorch ran 2 and 4 ranks, JAX 2, 4 and 8 devices
    assert memory["favours"] == "either framework"
    assert "0.251" in memory["result"] and "0.250" in memory["result"]


def test_the_memory_row_names_the_model_chapter_5_saved():
    results = results_for("small")
    model = ("06_distributed", "model", "both", "MLP training step, 1,000 parameters", "-",
             "parameters", 1000.0, "count", SCALES["small"]["device"], "small")
    results["06_distributed"] = pd.concat([results["06_distributed"], pd.DataFrame(
        [dict(zip(RECORD_COLUMNS, model, strict=True))])], ignore_index=True)

    memory = row(evidence.evidence_table(results), "fsdp_memory")
    assert memory["question"].startswith("MLP training step, 1,000 parameters: ")


def test_memory_names_the_framework_that_divided_the_state():
    table = evidence.evidence_table(results_for("full", divided=False))

    assert row(table, "fsdp_memory")["favours"] == "JAX"
    assert suggests(table, "parameters and optimizer state").startswith(
        "On this build's NVIDIA A100-SXM4-80GB: JAX FSDP")


@pytest.mark.parametrize(("pattern", "ids", "expected"), [
    ("fused_jax_vs_torch_b{n}", ["fused_jax_vs_torch_b2", "fused_jax_vs_torch_b16",
                                 "fused_jax_vs_torch_b4"],
     ["fused_jax_vs_torch_b2", "fused_jax_vs_torch_b4", "fused_jax_vs_torch_b16"]),
    ("best_jax_vs_torch_b{n}", ["fused_jax_vs_torch_b2"], []),
    ("split_vs_nnx_b32", ["split_vs_nnx_b32"], ["split_vs_nnx_b32"]),
    ("split_vs_nnx_b32", ["split_vs_nnx_b8"], []),
])
def test_a_pattern_with_a_size_names_every_saved_claim_it_matches(pattern, ids, expected):
    assert evidence.resolve_claim_ids(pattern, ids) == expected


def test_every_row_has_exactly_one_status():
    table = evidence.evidence_table(results_for(override={
        "best_jax_vs_torch_b8": (0.5, 0.45, 0.55, False),
        "tiny_compile_vs_jit": (1.05, 0.9, 1.2, False)}))
    statuses = guide.guide_table(table).set_index("if you need")["status"]

    assert set(statuses) <= set(guide.STATUSES)
    assert statuses["training a ViT, each framework's best checked step, fp32 strict and "
                    "bf16 mixed"] == "partly decided, depends on the case"
    assert statuses["many tiny operations per step, compiled"] == "withheld"
    assert statuses["many tiny operations per step, op by op (eager)"] == "decided"


def test_a_detailed_row_shows_what_ran_on_each_side():
    table = evidence.evidence_table(results_for())

    assert "cand against base" in advice(table, "training a ViT")[
        "measured at"]  # the fixture's candidate and baseline
    assert "cand against base" not in advice(table, "many tiny operations per step, "
                                                    "compiled")["measured at"]


@pytest.mark.parametrize(("questions", "labels"), [
    (["dot, batch 256, CPU: a", "attention, batch 256, CPU: a", "grads, batch 32, CPU: a"],
     ["dot, batch 256", "attention, batch 256", "grads, batch 32"]),
    (["ViT, batch 8, CPU: x", "ViT, batch 32, CPU: x"], ["batch 8", "batch 32"]),
    (["same scope: jit", "same scope: compile"], ["jit", "compile"]),
])
def test_cases_are_told_apart_by_what_differs_in_their_scope(questions, labels):
    assert guide.case_labels(questions) == labels


def test_every_advice_rests_on_known_evidence_and_speaks_for_every_side():
    keys = {item.key: item for item in evidence.EVIDENCE}
    for item in guide.ADVICE:
        assert set(item.keys) <= set(keys), item.need
        for key in item.keys:
            sides = ({"either framework", "PyTorch", "JAX", "neither"}
                     if isinstance(keys[key], evidence.ShardedMemory)
                     else {*keys[key].favours.values(), "even"})
            assert sides <= set(item.says), (item.need, sides - set(item.says))


def test_the_guide_holds_only_comparisons_of_the_two_frameworks():
    """A row that cannot decide between PyTorch and JAX (one framework's variants,
    simulated devices' timings) stays in its chapter."""
    for item in evidence.EVIDENCE:
        if isinstance(item, evidence.FromClaim):
            assert set(item.favours.values()) == {"JAX", "PyTorch"}, item.key
        else:
            assert set(item.sharded) == {"torch", "jax"}, item.key


def test_advice_on_unknown_evidence_is_a_clear_error():
    table = evidence.evidence_table(results_for())
    bad = guide.Advice("anything", ("no_such_key",), {}, "01_vmap")

    with pytest.raises(KeyError, match="no_such_key"):
        guide.recommend(bad, table)


def test_the_scope_is_the_part_of_the_question_before_the_comparison():
    assert guide.scope_of("ViT step, batch 32, CPU: torch eager, SDPA: bf16 against fp32") == \
        "ViT step, batch 32, CPU"


def test_disagreeing_and_undecided_cases_together_have_their_own_status():
    table = evidence.evidence_table(results_for(override={
        "grads_jit_vs_compile": (0.5, 0.45, 0.55, False),
        "attention_jit_vs_compile": (1.05, 0.9, 1.2, False)}))

    row_ = advice(table, "per-example code (vmap), compiled")
    assert row_["status"] == "partly decided, depends on the case"
    assert "depends on the case" in row_["this build suggests"]


def test_the_published_evidence_lives_under_the_sites_address():
    root = Path(__file__).resolve().parents[1]
    assert evidence.published_results(root) == "https://deepdives.github.io/pytorch-vs-jax/results/"


@pytest.mark.parametrize("as_address", [False, True], ids=["folder", "file-url"])
def test_fetch_copies_every_evidence_file(tmp_path, as_address):
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in evidence.EVIDENCE_FILES:
        (saved / name).write_text(f"{name}\n")
    source = saved.as_uri() + "/" if as_address else str(saved)

    copied = evidence.fetch(source, tmp_path / "read")

    assert sorted(p.name for p in copied.iterdir()) == sorted(evidence.EVIDENCE_FILES)
    assert (copied / "claims.csv").read_text() == "claims.csv\n"


def test_fetch_refuses_a_partial_copy_naming_what_is_missing(tmp_path):
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "claims.csv").write_text("x\n")

    with pytest.raises(FileNotFoundError, match=r"(?s)from file://.*provenance\.csv.*'published'"):
        evidence.fetch(saved.as_uri(), tmp_path / "read")


def test_a_skipped_pytorch_xla_page_is_not_measured_not_missing():
    """DEEPDIVE_SKIP_XLA=1 builds save no claims from the PyTorch/XLA page: its row says
    why, while the other chapters' rows are read as usual."""
    table = evidence.evidence_table(results_for(skip=("05_vit_xla",)))
    xla = table[table["group"] == "xla_route"]
    assert len(xla) == 1 and (xla["favours"] == evidence.NOT_MEASURED).all()
    assert xla["result"].str.contains("did not run its route").all()
    assert evidence.MISSING not in set(table["favours"])
    ran = evidence.evidence_table(results_for())
    assert set(ran[ran["group"] == "xla_route"]["key"]) == {
        "xla_lazy_vs_jax", "xla_compile_vs_jax", "torchax_vs_jax"}
