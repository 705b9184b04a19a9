"""Chapter 5's own code, as its page writes it: the PyTorch and JAX training steps, the feeds,
the first-step check and the labels of what a first step compiled, executed from
`notebooks/05_vit_training.md` on a one-layer ViT (the executed page is the test that the
chapter runs at its own sizes)."""

import ast
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import jax.numpy as jnp
import jupytext
import numpy as np
import psutil
import pytest
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification

from deepdive.book import claim_ids
from deepdive.core.timing import OutOfMemory, Timing, compare
from deepdive.models import parity, vit

PAGE = Path(__file__).resolve().parents[1] / "notebooks" / "05_vit_training.md"
TINY = ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1,
                 num_attention_heads=2, intermediate_size=32, num_labels=3)


def page_code(*names, **given):
    """The page's set-up imports, then its top-level definitions and assignments of `names`
    (in page order), executed in one namespace seeded with `given`."""
    namespace = dict(given)
    cells = [ast.parse(c.source) for c in jupytext.read(PAGE).cells if c.cell_type == "code"]
    imports = [n for n in cells[0].body if isinstance(n, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(imports, []), "<set-up>", "exec"), namespace)
    found = set()
    for tree in cells:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined = {node.name}
            elif isinstance(node, ast.Assign):  # to a name, or a tuple of names
                target = node.targets[0]
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                defined = {n.id for n in elements if isinstance(n, ast.Name)}
            else:
                continue
            if defined & set(names):
                exec(compile(ast.Module([node], []), f"<{sorted(defined)[0]}>", "exec"),
                     namespace)
                found |= defined & set(names)
    assert found == set(names), f"not on the page: {set(names) - found}"
    return namespace


STEPS = ("Precision", "PRECISIONS", "lr", "OPTIMIZERS", "torch_vit_step", "vit_loss",
         "vit_train_update", "nnx_jit_form", "split_merge_form", "jax_vit_step", "COMPILE",
         "MODES")
FEEDS = ("image", "synthetic_feed", "RandomImages", "FEEDS", "numpy_collate", "framework_of",
         "loader_feed")
CHECK = ("GRADIENT_FLOOR", "MOMENTS", "ADAMW_TOLERANCE", "PROVEN", "CHECKS", "dynamo_counts",
         "DYNAMO", "vit_references", "reference_adamw_step", "first_step_values",
         "worst_in_tolerances", "sgd_update_in_fp32", "vit_compile_kind",
         "check_vit_first_step", "build_vit")
MEMORY = ("MEMORY", "PLAN_SHARE_FLOOR", "read_memory")


@pytest.fixture(scope="module")
def page():
    torch.manual_seed(0)
    reference = ViTForImageClassification(TINY)
    reference.set_attn_implementation("eager")
    model = vit.ViTForImageClassification(TINY, attention="eager", rngs=nnx.Rngs(0))
    vit.port_hf_weights(reference, model)
    namespace = page_code(*STEPS, *FEEDS, *CHECK, *MEMORY, DEVICE="cpu", BF16_NATIVE=False,
                          CONFIG=TINY, reference=reference, model=model)
    namespace["FEEDS"]["DataLoader"] = namespace["loader_feed"]  # as the seed's cell adds it
    return namespace


def timed(step, **options):
    """The step timed as the page times it: `compare` runs its check on the first loss."""
    return compare({step.label: step.run}, check={step.label: step.check}, blocks=2,
                   max_blocks=2, min_block_s=0.0, **options)[step.label]


@pytest.mark.parametrize("mode", ["torch eager, eager attn", "torch eager, SDPA", "nnx.jit",
                                  "jax.jit split/merge",
                                  "jax.jit split/merge, dot_product_attention"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_every_mode_passes_its_first_step_check_inside_compare(page, mode, optimizer):
    step = page["build_vit"](mode, "fp32", 2, optimizer=optimizer)
    timing = timed(step)
    assert isinstance(timing, Timing) and timing.n == 2 and timing.first_call > 0
    row = page["CHECKS"][-1]
    assert row["variant"] == step.label and row["passed"]
    quantity = "gradients" if optimizer == "adamw" else "SGD update"
    assert row[f"{quantity} vs PyTorch"] < 1e-4 and row[f"{quantity} vs JAX"] < 1e-4
    assert (optimizer == "sgd") == step.label.endswith(" · SGD · synthetic")


def test_a_wrong_learning_rate_fails_the_check_before_any_timing(page):
    step = page["build_vit"]("torch eager, eager attn", "fp32", 2, optimizer="sgd")
    for group in step.optimizer.param_groups:
        group["lr"] *= 2  # the update the check reads is now twice the reference's
    with pytest.raises(AssertionError, match="disagrees with the fp32 references"):
        timed(step)
    assert not page["CHECKS"][-1]["passed"]


ADAMW_STEP = [f"AdamW step vs {name} (x tolerance)" for name in ("torch.optim.AdamW",
                                                                  "optax.adamw")]


@pytest.mark.parametrize("mode", ["torch eager, eager attn", "nnx.jit", "jax.jit split/merge"])
def test_the_first_adamw_step_matches_both_reference_optimizers(page, mode):
    timed(page["build_vit"](mode, "fp32", 2))
    row = page["CHECKS"][-1]
    assert row["passed"] and all(0 <= row[column] <= 1 for column in ADAMW_STEP)


@pytest.mark.parametrize("setting, wrong", [("lr", 2e-3), ("b1", 0.8), ("b2", 0.99),
                                            ("weight_decay", 0.5), ("eps", 1e-3)])
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_wrong_adamw_setting_in_the_timed_optimizer_fails_the_check(page, setting, wrong,
                                                                      framework):
    """The gradient check alone cannot see b2, eps, the decay or the learning rate (and a b1
    unpacked wrongly on the page would cancel out of it): the first step's parameters and
    moments against parity's reference optimizers do."""
    hyper = dict(parity.ADAMW, **{setting: wrong})
    saved = page["OPTIMIZERS"]["adamw"]
    page["OPTIMIZERS"]["adamw"] = (
        partial(torch.optim.AdamW, lr=hyper["lr"], betas=(hyper["b1"], hyper["b2"]),
                eps=hyper["eps"], weight_decay=hyper["weight_decay"]),
        parity.optax_adamw(hyper))
    try:
        mode = "torch eager, SDPA" if framework == "torch" else "jax.jit split/merge"
        with pytest.raises(AssertionError, match="disagrees with the fp32 references"):
            timed(page["build_vit"](mode, "fp32", 2))
    finally:
        page["OPTIMIZERS"]["adamw"] = saved
    assert not page["CHECKS"][-1]["passed"]


SPLIT, NNX_JIT, PLAN, PLAIN = ("jax.jit split/merge · fp32", "nnx.jit · fp32", "XLA plan (MiB)",
                               "host_call_peak, plain (MiB)")


def test_every_jax_reading_on_a_cpu_is_set_beside_xlas_plan(page):
    steps = [page["build_vit"](mode, "fp32", 3) for mode in ("torch eager, SDPA", "nnx.jit",
                                                              "jax.jit split/merge")]
    timings = compare({step.label: step.run for step in steps}, blocks=2, max_blocks=2,
                      min_block_s=0.0)
    page["read_memory"](3, steps, timings)
    rows = {row["variant"]: row for row in page["MEMORY_CHECKS"] if row["batch"] == 3}
    assert set(rows) == {NNX_JIT, SPLIT}  # the JAX steps only
    assert rows[SPLIT][PLAN] > 0  # and nnx.jit compiles the same program: the same plan
    assert rows[NNX_JIT][PLAN] == pytest.approx(rows[SPLIT][PLAN])
    assert PLAIN in rows[SPLIT] and PLAIN not in rows[NNX_JIT]
    assert {label for label, batch in page["MEMORY"] if batch == 3} == set(timings)


def test_a_jax_reading_under_half_its_plan_is_dropped_and_emulated_bf16_has_no_mfu(page):
    split, nnx_jit, eager = SPLIT, NNX_JIT, "torch eager, SDPA · bf16"
    peak = {"peak FLOP/s": 1e12, "source": "made up"}
    namespace = page_code("summarize", "PLAN_SHARE_FLOOR", PRECISIONS=page["PRECISIONS"],
                          BF16_NATIVE=False, framework_of=page["framework_of"],
                          PEAKS={"fp32": peak, "bf16": peak}, FLOPS_PER_IMAGE=1e6,
                          COMPILES=dict.fromkeys([(split, 8), (nnx_jit, 8), (eager, 8)], "-"),
                          MEMORY={(split, 8): 43.0, (nnx_jit, 8): 0.4, (eager, 8): 5.0},
                          MEMORY_PLAN={(split, 8): 42.6, (nnx_jit, 8): 42.6})
    timing = SimpleNamespace(median=0.01, iqr=0.001, first_call=1.0, recompiles=0)
    rows = {label: namespace["summarize"]("sweep", label, 8, timing)
            for label in (split, nnx_jit, eager)}
    reading = "memory (MiB)"
    assert rows[split][reading] == 43.0 and rows[nnx_jit][PLAN] == 42.6
    assert np.isnan(rows[nnx_jit][reading])  # 0.4 of a 42.6 MiB plan: dropped
    assert rows[eager][reading] == 5.0 and np.isnan(rows[eager][PLAN])
    assert np.isnan(rows[eager]["MFU (%)"]) and rows[split]["MFU (%)"] > 0


def test_a_wrong_loss_fails_the_check(page):
    step = page["build_vit"]("jax.jit split/merge", "fp32", 2)
    loss = float(step.run())
    with pytest.raises(AssertionError, match="disagrees"):
        step.check(loss * 1.01)


def test_bf16_steps_pass_their_own_tolerance_and_are_outside_fp32s(page):
    for mode in ("torch eager, SDPA", "jax.jit split/merge"):
        timed(page["build_vit"](mode, "bf16", 2))
        row = page["CHECKS"][-1]
        worst = max(row[f"gradients vs {side}"] for side in ("PyTorch", "JAX"))
        assert row["passed"] and worst > page["PRECISIONS"]["fp32"].gradient_rtol


def test_the_twins_step_computes_in_bf16_and_keeps_fp32_parameters(page):
    step = page["jax_vit_step"](page["split_merge_form"], precision="bf16")
    model, _ = step.objects()
    assert model.classifier.dtype == jnp.bfloat16
    params = nnx.to_flat_state(nnx.state(model, nnx.Param))
    assert {v[...].dtype for _, v in params} == {np.dtype("float32")}


def test_both_feeds_serve_the_same_first_batch_in_each_frameworks_layout(page):
    for framework in ("torch", "jax"):
        synthetic = next(page["synthetic_feed"](framework, 3))
        loader = next(page["loader_feed"](framework, 3))
        np.testing.assert_array_equal(np.asarray(synthetic[0]), np.asarray(loader[0]))
        np.testing.assert_array_equal(np.asarray(synthetic[1]), np.asarray(loader[1]))
    nchw, nhwc = (next(page["synthetic_feed"](f, 1))[0] for f in ("torch", "jax"))
    assert nchw.shape == (1, 3, 16, 16) and nhwc.shape == (1, 16, 16, 3)


def test_a_batch_too_large_for_the_machine_is_recorded_as_out_of_memory(page):
    too_many = 4 * psutil.virtual_memory().total // (3 * 16 * 16 * 4)  # as the page's OOM_BATCH
    for mode in ("torch eager, SDPA", "jax.jit split/merge"):
        step = page["build_vit"](mode, "fp32", too_many)  # nothing is allocated yet
        assert isinstance(timed(step, record_oom=True), OutOfMemory)


COMPILED_MODES = ("torch.compile, SDPA", "torch.compile, eager attn")
XLA_STARTED, INDUCTOR_WARM = "(XLA already started)", "(Inductor already warm)"


def test_compile_labels_follow_dynamos_counters(page, monkeypatch):
    from torch._dynamo.utils import counters

    kind, dynamo = page["vit_compile_kind"], page["DYNAMO"]
    for group, name in (("stats", "unique_graphs"), ("inductor", "fxgraph_cache_hit")):
        monkeypatch.setitem(counters[group], name, counters[group][name])  # restored after
    saved, dynamo[:] = list(dynamo), [*page["dynamo_counts"](), False]
    eager, compiled, also_compiled = "torch eager, SDPA", *COMPILED_MODES
    try:
        labels = [kind(eager), kind("nnx.jit")]
        counters["stats"]["unique_graphs"] += 1
        labels.append(kind(compiled))
        counters["stats"]["unique_graphs"] += 1
        labels += [kind(also_compiled), kind(compiled)]
        counters["stats"]["unique_graphs"] += 1
        counters["inductor"]["fxgraph_cache_hit"] += 1
        labels.append(kind(compiled))
        assert [label.split()[0].strip(":") for label in labels] == [
            "none", "new", "cold", "new", "reused", "cache"]
        assert labels[1].endswith(XLA_STARTED) and labels[3].endswith(INDUCTOR_WARM)
    finally:
        dynamo[:] = saved


def test_the_bf16_claim_ids_are_in_the_registry_and_name_the_pages_modes(page):
    assign = next(node for cell in jupytext.read(PAGE).cells if cell.cell_type == "code"
                  for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                  and getattr(node.targets[0], "id", None) == "BF16_IDS")
    ids = ast.literal_eval(assign.value)
    assert claim_ids.unknown(ids.values()) == [] and set(ids) <= set(page["MODES"])
