"""deepdive.book.evidence reads a build's claims for the intro and chapter 7's guide: change
the saved numbers and the verdicts, sides and rows change with them; results shaped like
every scale's build read whole, each row scoped."""

import math
from pathlib import Path

import pandas as pd
import pytest

from deepdive.book import evidence, plans
from deepdive.book.claims import COLUMNS as CLAIM_COLUMNS
from deepdive.book.claims import verdict_parts, verdict_phrase
from deepdive.book.results import COLUMNS as RECORD_COLUMNS
from deepdive.chapters import claim_map


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
    c1 = [("01_vmap", f"{kind}_best_jax_vs_torch", f"{kind}, batch {batch}")
          for kind, batch in (("dot", 256), ("attention", 256), ("grads", 32))]
    c2 = [("02_jit_xla", name, "tiny arrays") for name in
          ("tiny_best_jax_vs_torch", "tiny_eager_torch_vs_jax")]
    c2 += [("02_jit_xla", "fusion_best_jax_vs_torch", "chain of 8 ops, freed memory kept")]
    c4 = [("05_vit_training", f"{name}_b{batch}", f"ViT training step, batch {batch}")
          for batch in shape["vit_batches"] for name in ("best_jax_vs_torch", "fused_jax_vs_torch")]
    if shape["bf16"]:
        c4.append(("05_vit_training", "bf16_best_jax_vs_torch", "ViT step, bf16"))
    c4 += [("05_vit_xla", f"{route}_vs_eager", "ViT training step, batch 32, CPU")
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
    return pd.DataFrame([record("06_distributed", *row, shape["device"], scale) for row in rows])


def record(*values, code=""):
    """A results row as a chapter saves it (`code`: where its timed code was written)."""
    return dict(zip(RECORD_COLUMNS, (*values, code), strict=True))


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


def row(table, claim):
    return table.set_index("claim").loc[claim]


# The columns and claims the tests read, by name.
NEED, SCOPE, ONE_WAY = evidence.COLUMNS[0], evidence.COLUMNS[1], evidence.ONE_WAY[0]
TINY, DOT, ATTENTION, FUSION = ("tiny_eager_torch_vs_jax", "dot_best_jax_vs_torch",
                                "attention_best_jax_vs_torch", "fusion_best_jax_vs_torch")
CHAR, VOCAB = "char_fp32_jax_vs_torch", "vocab_fp32_jax_vs_torch"
VIT_BF16 = "bf16_best_jax_vs_torch"
MEMORY = "memory_per_device"
XLA_ROUTES = next(item.claim_ids for item in evidence.EVIDENCE if item.chapter == "05_vit_xla")
SITE = "https://deepdives.github.io/pytorch-vs-jax/results/"


@pytest.mark.parametrize("scale", SCALES)
def test_results_shaped_like_every_scale_build_read_whole_and_scoped(scale):
    table = evidence.evidence_table(results_for(scale))

    assert list(table.columns) == list(evidence.COLUMNS)
    assert not (table["favours"] == evidence.MISSING).any()
    assert list(dict.fromkeys(table[NEED])) == list(dict.fromkeys(
        item.need for item in evidence.EVIDENCE))  # every need, in the guide's order
    measured = table[table["favours"] != evidence.NOT_MEASURED]
    assert (measured["device"] == SCALES[scale]["device"]).all()
    assert (measured["scale"] == scale).all()
    timed = measured[measured[ONE_WAY].notna()]
    routes = measured["chapter"] == "05_vit_xla"  # PyTorch against PyTorch: no one-way ratio
    assert len(timed) == len(measured) - 1 - routes.sum()  # and not the memory row's bytes
    for phrase in timed["verdict"]:
        verdict_parts(phrase)  # the book's one form, or a ValueError


def test_each_verdict_is_the_phrase_the_chapter_glues_for_its_claim():
    found = results_for(override={TINY: (1.05, 0.9, 1.2, False),
                                  FUSION: (1.0, 0.99, 1.01, False)})
    table = evidence.evidence_table(found).set_index("claim")
    saved = found["claims"].set_index("claim_id")

    for claim_id in saved.index.intersection(table.index):
        assert table.loc[claim_id, "verdict"] == verdict_phrase(saved.loc[claim_id])
        assert table.loc[claim_id, "question"] == saved.loc[claim_id, "question"]
    assert verdict_parts(table.loc[TINY, "verdict"])["form"] == "withheld"
    assert verdict_parts(table.loc[FUSION, "verdict"])["form"] == "tie"


def test_the_scope_is_the_part_of_the_question_before_the_comparison():
    table = evidence.evidence_table(results_for())

    assert (table[SCOPE] + ": " + table["claim"] == table["question"])[
        table[ONE_WAY].notna()].all()  # the fixture's question is "<scope>: <id>"


def test_scale_dependent_names_are_read_from_the_claims_not_assumed():
    full = evidence.evidence_table(results_for("full"))

    assert "shakespeare-char 10.65M" in row(full, CHAR)["question"]
    assert "GPT-2 124M" in row(full, VOCAB)["question"]
    vit = full[full["chapter"] == "05_vit_training"]["claim"].tolist()
    assert vit == [f"best_jax_vs_torch_b{b}" for b in (32, 64, 128, 256)] + [
        VIT_BF16]
    medium = evidence.evidence_table(results_for("medium"))
    assert medium[medium["claim"].str.startswith("best_")]["claim"].tolist() == [
        "best_jax_vs_torch_b16", "best_jax_vs_torch_b32"]


def test_the_verdict_is_recomputed_from_the_numbers_not_the_files_word():
    def favours(numbers):
        table = evidence.evidence_table(results_for(
            override={ATTENTION: (*numbers, False)}))
        return row(table, ATTENTION)["favours"]

    assert favours((2.0, 1.9, 2.1)) == "JAX"  # the file's verdict is "stale" throughout
    assert favours((0.5, 0.4, 0.6)) == "PyTorch"
    assert favours((1.0, 0.99, 1.01)) == "tie"
    assert favours((1.05, 0.9, 1.2)) == "no verdict"


def test_the_favoured_side_follows_which_side_the_candidate_is():
    """The same speed-up favours JAX where JAX is the candidate, PyTorch where PyTorch is."""
    table = evidence.evidence_table(results_for(override={
        DOT: (2.0, 1.5, 2.5, False),  # jax.jit(vmap) the candidate
        TINY: (2.0, 1.5, 2.5, False)}))  # torch.compile the candidate

    assert row(table, DOT)["favours"] == "JAX"
    assert row(table, TINY)["favours"] == "PyTorch"
    assert verdict_parts(row(table, TINY)["verdict"])["fast"] == "cand"


def test_every_ratio_is_pytorch_time_over_jax_time_whichever_side_is_the_candidate():
    table = evidence.evidence_table(results_for(override={
        DOT: (2.0, 1.5, 2.5, False),
        TINY: (2.0, 1.5, 2.5, False)}))

    assert row(table, DOT)[list(evidence.ONE_WAY)].tolist() == [2.0, 1.5, 2.5]
    assert row(table, TINY)[list(evidence.ONE_WAY)].tolist() == [
        0.5, 0.4, pytest.approx(1 / 1.5)]
    assert math.isnan(row(table, MEMORY)[ONE_WAY])


def test_a_noisy_side_widens_the_band_a_decision_must_clear():
    clear = row(evidence.evidence_table(noisy_override(TINY,
                                                       (2.0, 1.9, 2.1, 0.5))),
                TINY)
    reached = row(evidence.evidence_table(noisy_override(TINY,
                                                         (2.0, 1.9, 2.1, 1.0))),
                  TINY)

    assert clear["favours"] == "PyTorch" and clear["band"] == 0.5
    assert verdict_parts(clear["verdict"])["band"] == 0.5  # the widened band, not the build's
    assert reached["favours"] == "no verdict"


def test_a_missing_chapter_is_reported_not_guessed():
    table = evidence.evidence_table(results_for(skip=("05_vit_training", "06_distributed")))

    gone = table[table["chapter"].isin(["05_vit_training", "06_distributed"])]
    expected = sum(e.chapter in ("05_vit_training", "06_distributed") for e in evidence.EVIDENCE)
    assert len(gone) == expected >= 3
    assert (gone["favours"] == evidence.MISSING).all()
    assert (gone["verdict"] == evidence.MISSING).all()
    assert gone[ONE_WAY].isna().all() and (gone["device"].fillna("") == "").all()
    assert (table.loc[~table.index.isin(gone.index), "favours"] != evidence.MISSING).all()


def test_no_claims_file_at_all_leaves_every_row_missing():
    table = evidence.evidence_table(results_for(skip=evidence.CHAPTERS))

    assert (table["favours"] == evidence.MISSING).all()
    assert len(table) == len(evidence.EVIDENCE)  # one row per group, nothing invented


def test_a_claim_made_only_on_some_builds_reads_not_measured_where_absent():
    small = evidence.evidence_table(results_for("small"))
    absent = small[small["favours"] == evidence.NOT_MEASURED]

    assert list(absent[SCOPE]) == ["bf16 mixed", "bf16 mixed"]  # ViT, GPT
    assert set(absent["chapter"]) == {"05_vit_training", "04_gpt_training"}
    assert absent["verdict"].str.startswith(evidence.NOT_MEASURED).all()
    full = evidence.evidence_table(results_for("full"))
    assert row(full, VIT_BF16)["favours"] == "JAX"
    assert evidence.NOT_MEASURED not in set(full["favours"])


def test_a_chapter_without_a_required_claim_is_a_clear_error():
    results = results_for()
    claims = results["claims"]
    results["claims"] = claims[~claims["claim_id"].str.startswith("best_jax_vs_torch")]

    with pytest.raises(KeyError, match="best_jax_vs_torch_b"):
        evidence.evidence_table(results)


def test_memory_compares_both_frameworks_at_their_largest_common_device_count():
    memory = row(evidence.evidence_table(results_for("small")), MEMORY)

    assert memory[SCOPE] == "4 devices"  # PyTorch ran 2 and 4, JAX 2, 4 and 8
    assert memory["favours"] == "either framework"
    assert "0.251" in memory["verdict"] and "0.250" in memory["verdict"]


def test_the_memory_row_names_the_model_chapter_6_saved():
    results = results_for("small")
    model = ("06_distributed", "model", "both", "MLP training step, 1,000 parameters", "-",
             "parameters", 1000.0, "count", SCALES["small"]["device"], "small")
    results["06_distributed"] = pd.concat([results["06_distributed"], pd.DataFrame(
        [record(*model)])], ignore_index=True)

    memory = row(evidence.evidence_table(results), MEMORY)
    assert memory[SCOPE].startswith(model[3])


def test_memory_names_the_framework_that_divided_the_state():
    table = evidence.evidence_table(results_for("full", divided=False))

    assert row(table, MEMORY)["favours"] == "JAX"


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


def test_the_evidence_holds_only_comparisons_of_the_two_frameworks():
    """A claim that cannot decide between PyTorch and JAX (one framework's variants,
    simulated devices' timings) stays in its chapter."""
    for item in evidence.EVIDENCE:
        if item.key == "xla_route":  # PyTorch code through XLA, against its own eager
            assert set(item.favours.values()) == {"the XLA route", "PyTorch eager"}
            assert not item.best and all(i.endswith("_vs_eager") for i in item.claim_ids)
        elif isinstance(item, evidence.FromClaim):
            assert set(item.favours.values()) == {"JAX", "PyTorch"}, item.key
            assert item.chapter in evidence.CHAPTERS and item.claim_ids, item.key
        else:
            assert set(item.sharded) == set(item.single) == {"torch", "jax"}, item.key


def test_a_need_of_several_groups_keeps_them_together():
    needs = [item.need for item in evidence.EVIDENCE]
    for need in set(needs):
        first = needs.index(need)
        assert needs[first:first + needs.count(need)] == [need] * needs.count(need), need


def test_the_published_evidence_lives_under_the_sites_address():
    root = Path(__file__).resolve().parents[1]
    assert evidence.published_results(root) == SITE


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


def test_the_evidence_is_this_builds_unless_another_is_named(tmp_path):
    assert evidence.evidence_dir(tmp_path, environ={}) == (tmp_path, None)
    other = tmp_path / "other"
    other.mkdir()
    for name in evidence.EVIDENCE_FILES:
        (other / name).write_text("x\n")
    folder, source = evidence.evidence_dir(tmp_path / "results",
                                           environ={"DEEPDIVE_EVIDENCE": str(other)})
    assert source == f"{other}/" and (folder / "claims.csv").exists()
    assert folder != tmp_path / "results"  # fetched beside this build's, never into it


def test_a_skipped_pytorch_xla_page_is_not_measured_not_missing():
    """DEEPDIVE_SKIP_XLA=1 builds save no claims from the PyTorch/XLA page: its row says
    so, while the other chapters' rows are read as usual."""
    table = evidence.evidence_table(results_for(skip=("05_vit_xla",)))
    xla = table[table["chapter"] == "05_vit_xla"]
    assert len(xla) == 1 and (xla["favours"] == evidence.NOT_MEASURED).all()
    assert evidence.MISSING not in set(table["favours"])
    ran = evidence.evidence_table(results_for())
    assert set(ran[ran["chapter"] == "05_vit_xla"]["claim"]) == {*XLA_ROUTES}


# --- claims that moved --------------------------------------------------------------------

def test_claims_an_older_build_saved_elsewhere_are_read_where_they_live_now(monkeypatch):
    shape = SCALES["small"]
    monkeypatch.setitem(claim_map.MOVED, ("03_torch_compile", "old_id"),
                        ("04_gpt_training", "new_id"))
    claims = pd.DataFrame([claim_row("03_torch_compile", "old_id", "s", shape, "small"),
                           claim_row("03_torch_compile", "kept", "s", shape, "small")])
    moved = evidence.follow_moves(claims, claim_map.current)
    assert list(zip(moved["chapter"], moved["claim_id"], strict=True)) == [
        ("04_gpt_training", "new_id"), ("03_torch_compile", "kept")]


def test_a_claim_saved_in_its_new_home_wins_over_the_moved_copy(monkeypatch):
    shape = SCALES["small"]
    monkeypatch.setitem(claim_map.MOVED, ("03_torch_compile", "x"), ("04_gpt_training", "x"))
    claims = pd.DataFrame([claim_row("03_torch_compile", "x", "old", shape, "small"),
                           claim_row("04_gpt_training", "x", "new", shape, "small")])
    moved = evidence.follow_moves(claims, claim_map.current)
    assert len(moved) == 1 and moved["question"].iat[0] == "new: x"


def test_load_all_follows_the_map(tmp_path, monkeypatch):
    shape = SCALES["small"]
    monkeypatch.setitem(claim_map.MOVED, ("03_torch_compile", "a"), ("04_gpt_training", "a"))
    pd.DataFrame([claim_row("03_torch_compile", "a", "s", shape, "small")]).to_csv(
        tmp_path / "claims.csv", index=False)
    found = evidence.load_all(tmp_path, claim_map.current)
    assert found["claims"]["chapter"].tolist() == ["04_gpt_training"]
    assert all(found[chapter] is None for chapter in evidence.CHAPTERS)  # saved nothing


def test_the_data_folder_is_found_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no _toc.yml above: found beside the package's source
    assert evidence.data_dir() == Path(__file__).resolve().parents[1] / "book" / "data"


# --- which build measured each chapter -----------------------------------------------------

@pytest.mark.parametrize(("stamp", "source", "this_build"), [
    ({"build_id": "b1", "commit": "c"}, "elsewhere", False),
    ({"build_id": "b1", "commit": "c"}, None, True),
    ({"build_id": "b0", "commit": "c+uncommitted"}, None, False),
    ({"build_id": "b0", "commit": "d"}, None, False),
])
def test_only_a_stamp_of_this_build_id_reads_this_build(stamp, source, this_build):
    assert (evidence.measured_in(stamp, "b1", "c", source) == "this build") == this_build


def test_an_earlier_build_is_told_apart_by_its_commit_and_a_run_outside_a_build_named():
    from deepdive.book.provenance import OUTSIDE_BUILD

    labels = {evidence.measured_in({"build_id": build, "commit": commit}, "b1", "c", None)
              for build, commit in (("b0", "c+uncommitted"), ("b0", "d"), (OUTSIDE_BUILD, "c"))}
    assert len(labels) == 3 and "this build" not in labels


def test_which_build_lists_every_chapter_the_evidence_reads(tmp_path, monkeypatch):
    from deepdive.book import provenance

    monkeypatch.setattr(provenance, "build_id", lambda: "b1")
    monkeypatch.setattr(provenance, "commit", lambda: "c")
    pd.DataFrame([{"chapter": "01_vmap", "build_id": "b1", "commit": "c"}]).to_csv(
        tmp_path / provenance.FILE_NAME, index=False)
    read, stamps = evidence.which_build(tmp_path, None)
    assert list(read["chapter"]) == list(evidence.CHAPTERS)
    by = read.set_index("chapter")["measured in"]
    assert by["01_vmap"] == "this build"
    assert by.drop("01_vmap").str.startswith(evidence.MISSING).all()
    assert list(stamps["chapter"]) == ["01_vmap"]
    empty, none = evidence.which_build(tmp_path / "nothing", None)  # no stamps at all
    assert empty["measured in"].str.startswith(evidence.MISSING).all() and none.empty


# The scope the intro and chapter 7 state before their tables: one machine named once, the
# GPUs among the devices, the largest model, and the torch each kind of row ran.
CPU_MODEL = "EPYC"


def test_a_cpu_row_names_its_machine_with_all_its_cores_a_gpu_as_it_is():
    pinned, whole = f"{CPU_MODEL} (1 of 2 cores)", f"{CPU_MODEL} (2 cores)"
    assert evidence.machine(pinned) == evidence.machine(whole) == whole
    assert evidence.machine("H100") == "H100"
    assert evidence.machine(float("nan")) == evidence.machine(None) == ""
    assert [evidence.is_gpu(d) for d in (pinned, whole, "H100", "", None)] == [
        False, False, True, False, False]


def test_a_value_is_shared_only_when_every_set_entry_agrees():
    assert evidence.shared(["small", "", "small", None]) == "small"
    assert evidence.shared(["small", "medium"]) is None
    assert evidence.shared(["", None]) is None


def test_the_largest_model_is_read_from_the_workloads_parameter_counts():
    counted = "parameters"
    assert evidence.parameters(f"ViT step, 108,106 {counted}, batch 8") == 108_106
    assert evidence.parameters(f"GPT (0.54M {counted}, batch 8x128)") == 540_000
    assert evidence.parameters("dot (d=64)") is None
    rows = pd.DataFrame({SCOPE: ["ViT, 108,106 parameters", "GPT (0.41M parameters)",
                                 "dot (d=64)", "MLP, 150,794 parameters"]})
    assert evidence.largest_model(rows) == "0.41M parameters"
    assert evidence.largest_model(rows.iloc[2:3]) == evidence.MISSING


def test_labels_keep_what_tells_a_needs_rows_apart_and_their_precision():
    model, precision, batches = "ViT step", "fp32 strict", (8, 32)
    rows = pd.DataFrame({SCOPE: [f"{model}, batch {b}, {precision}" for b in batches]
                         + ["bf16"], "question": [f"{model}, batch {b}, {precision}: a vs b"
                                                  for b in batches] + [""]})
    assert evidence.short_labels(rows) == [f"batch {b}, {precision}" for b in batches] + ["bf16"]
    # one workload, several pairs of sides: the sides tell them apart
    routes = ("lazy", "compile")
    same = pd.DataFrame({SCOPE: [model] * 2,
                         "question": [f"{model}: {r} against jit, in the worker" for r in routes]})
    assert evidence.short_labels(same) == [f"{r} against jit" for r in routes]
    alone = rows.iloc[:1]  # a need of one claim keeps its whole workload
    assert evidence.short_labels(alone) == list(alone[SCOPE])


def test_the_torch_of_the_pytorch_xla_routes_is_told_apart_from_the_pages():
    stamps = pd.DataFrame({"torch": ["2.15.0", "2.9.0 (routes, in the worker); 2.15.0 (this page)",
                                     "2.15.0+cu132", None]})
    assert evidence.torch_versions(stamps) == ("2.15.0", "2.9.0")
    assert evidence.torch_versions(stamps.iloc[[0]]) == ("2.15.0", evidence.NOT_MEASURED)
