"""Chapter 5's own code, as its page writes it: the PyTorch and JAX training steps, the feeds,
the first-step check and the labels of what a first step compiled, executed from
`notebooks/05_vit_training.md` on a one-layer ViT (the executed page is the test that the
chapter runs at its own sizes)."""

import ast
from pathlib import Path

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
from deepdive.models import vit

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
CHECK = ("GRADIENT_FLOOR", "PROVEN", "CHECKS", "dynamo_counts", "DYNAMO", "vit_references",
         "first_step_values", "sgd_update_in_fp32", "vit_compile_kind", "check_vit_first_step",
         "build_vit")


@pytest.fixture(scope="module")
def page():
    torch.manual_seed(0)
    reference = ViTForImageClassification(TINY)
    reference.set_attn_implementation("eager")
    model = vit.ViTForImageClassification(TINY, attention="eager", rngs=nnx.Rngs(0))
    vit.port_hf_weights(reference, model)
    namespace = page_code(*STEPS, *FEEDS, *CHECK, DEVICE="cpu", BF16_NATIVE=False,
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
