"""The PyTorch/XLA page's own code, as the page writes it: the check that the worker runs as the
page's process does, the first-steps loss check handed to each route, and the mode table's
rows, executed from `notebooks/05_vit_xla.md` on made-up reports (the worker itself is
tested in tests/test_xla_route.py; the executed page is the test that the routes run)."""

import ast
import math
import re
from pathlib import Path
from types import SimpleNamespace

import jupytext
import numpy as np
import pytest

from deepdive.models import xla_route

PAGE = Path(__file__).resolve().parents[1] / "notebooks" / "05_vit_xla.md"
VIT_PAGE = PAGE.with_name("05_vit_training.md")
BOOK = "2.99.0"  # a made-up version of the book's torch: nothing here may type the real one


def page_code(*names, page=PAGE, **given):
    """The page's top-level definitions and assignments of `names` (in page order), after
    its set-up imports, in one namespace seeded with `given`; cells run by another
    interpreter (`%%script`) are not Python of this process and are skipped. `given` comes
    after the imports, so it may stand in for a module."""
    namespace = {}
    cells = [ast.parse(c.source) for c in jupytext.read(page).cells
             if c.cell_type == "code" and not c.source.startswith("%%")]
    imports = [n for n in cells[0].body if isinstance(n, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(imports, []), "<set-up>", "exec"), namespace)
    namespace |= given
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
                exec(compile(ast.Module([node], []), "<page>", "exec"), namespace)
                found |= defined & set(names)
    assert found == set(names), f"not on the page: {set(names) - found}"
    return namespace


LIBRARIES = ("jax", "jaxlib", "flax", "optax", "transformers")
FLAGS = "--xla_cpu_enable_fast_math=false"  # what torch_xla sets, and the page too
HERE = {"torch threads": 1, "CPU affinity": [3], "jax matmul precision": "highest",
        "XLA_FLAGS": FLAGS, "versions": {"torch": BOOK, **dict.fromkeys(LIBRARIES, "1.0")}}


def hello(**changes):
    report = {"torch threads": 1, "CPU affinity": [3], "torch_xla matmul precision": "highest",
              "PJRT_DEVICE": "CPU", "torch matmul precision": "highest",
              "jax matmul precision": "highest", "XLA_FLAGS": FLAGS,
              "torch_xla's _has_cuda_support binding present": False,
              "versions": {"torch": "2.9.0", **dict.fromkeys(LIBRARIES, "1.0")}}
    return report | changes


@pytest.fixture(scope="module")
def page():
    return page_code("SAME_LIBRARIES", "assert_runs_as_here", "check_losses", "versions_of",
                     "mode_row", "BOOK_TORCH", "TORCH_HERE", torch=SimpleNamespace(
                         __version__=f"{BOOK}+cpu"))


def test_the_page_checks_the_libraries_both_processes_run(page):
    assert tuple(page["SAME_LIBRARIES"]) == LIBRARIES
    assert page["TORCH_HERE"] == f"torch {BOOK} eager"  # the book's torch, its build tag dropped


def test_a_worker_that_runs_as_this_process_passes(page):
    page["assert_runs_as_here"](hello(), HERE)


@pytest.mark.parametrize("changes", [
    {"torch threads": 2}, {"CPU affinity": [4]}, {"PJRT_DEVICE": "CUDA"},
    {"torch_xla matmul precision": "high"}, {"torch matmul precision": "high"},
    {"jax matmul precision": "default"}, {"XLA_FLAGS": None},
    {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"},
    {"torch_xla's _has_cuda_support binding present": True},
    {"versions": {"torch": "2.9.0", **dict.fromkeys(LIBRARIES, "1.0"), "flax": "2"}}])
def test_a_worker_that_runs_otherwise_stops_the_page(page, changes):
    with pytest.raises(AssertionError):
        page["assert_runs_as_here"](hello(**changes), HERE)


def test_the_loss_check_records_both_kinds_of_report_and_refuses_a_wrong_one(page):
    page |= {"REFERENCE_LOSSES": [1.0, 0.9], "STEP_CHECKS": {}}
    page["check_losses"](xla_route.LAZY)({"losses": [1.0, 0.9 + 1e-6], "first_step_s": 1.0})
    page["check_losses"]("here")([1.0, 0.9])
    assert page["STEP_CHECKS"] == {xla_route.LAZY: [1.0, 0.9 + 1e-6], "here": [1.0, 0.9]}
    with pytest.raises(AssertionError, match=xla_route.TORCHAX):
        page["check_losses"](xla_route.TORCHAX)({"losses": [1.0, 0.8]})
    assert page["STEP_CHECKS"][xla_route.TORCHAX] == [1.0, 0.8]  # kept for the loss table


SIDE = {"torch": "2.9.0", "torch_xla": "2.9.0", "torchax": "0.0.7", "jax": "0.7.0"}
JAX_HERE = "JAX jax.jit (Flax NNX twin)"


def test_each_route_names_the_versions_it_ran(page):
    page |= {"SIDE": SIDE, "JAX_HERE": JAX_HERE, "jax": SimpleNamespace(__version__="0.8.0")}
    versions = page["versions_of"]
    assert versions(JAX_HERE) == "jax 0.8.0"
    assert versions(xla_route.JAX_TWIN) == "jax 0.7.0"
    assert versions(page["TORCH_HERE"]) == f"torch {BOOK}+cpu"
    assert versions(xla_route.EAGER) == "torch 2.9.0"
    side = {name: f"{name} {version}" for name, version in SIDE.items()}
    assert versions(xla_route.LAZY) == versions(xla_route.COMPILED) == \
        f"{side['torch']}, {side['torch_xla']}"
    assert versions(xla_route.TORCHAX) == f"{side['torch']}, {side['torchax']}, {side['jax']}"


FIRST = {"first_step_s": 1.5, "second_step_s": 0.25, "xla_first_step": 2, "xla_second_step": 1,
         "dynamo_first_step": 1, "dynamo_second_step": 0, "xla_sizing": 0, "dynamo_sizing": 1}
TIMING = SimpleNamespace(first_call=1.5, median=0.01, iqr=0.001, recompiles=0, n=15,
                         calls_per_block=2)


# the mode table's columns
STEPS_1_2, SIZING, SECOND, STEADY = ("compiled in steps 1 + 2", "compiled while sizing",
                                     "second step (s)", "steady step (ms)")


def test_the_mode_table_rows_of_worker_and_local_routes(page):
    here = page["TORCH_HERE"]
    page |= {"SIDE": SIDE, "JAX_HERE": JAX_HERE, "BATCH": 32,
             "jax": SimpleNamespace(__version__="0.8.0"),
             "REMOTES": {xla_route.LAZY: SimpleNamespace(first_steps=FIRST)},
             "PARITY": {xla_route.LAZY: 1e-6, JAX_HERE: 2e-7}}
    worker, local = (page["mode_row"](route, TIMING) for route in (xla_route.LAZY, JAX_HERE))
    assert re.findall(r"\d+", worker[STEPS_1_2]) == ["2", "1", "1", "0"]  # XLA, then Dynamo
    assert worker[SIZING] == 1 and worker[SECOND] == 0.25
    parity_column = f"max |grad difference| vs {here}"  # against the book's torch eager
    assert worker[parity_column] == 1e-6
    assert worker["images/s"] == pytest.approx(3200) and worker[STEADY] == 10
    assert local[STEPS_1_2].startswith("n/a")
    assert math.isnan(local[SECOND]) and np.isnan(local[SIZING])


def test_the_jax_step_both_processes_run_is_the_vit_chapters_program():
    """`vit.split_merge_step`, which this page times in both processes, lowers to the same
    StableHLO program as the ViT chapter's `split_merge_form` with the chapter's AdamW."""
    import jax
    import jax.numpy as jnp
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    from deepdive.models import parity, vit

    config = ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=3)
    torch.manual_seed(0)
    reference = ViTForImageClassification(config)
    chapter = page_code("Precision", "PRECISIONS", "lr", "OPTIMIZERS", "vit_loss",
                        "vit_train_update", "split_merge_form", "jax_vit_step", page=VIT_PAGE,
                        DEVICE="cpu", BF16_NATIVE=False, CONFIG=config, reference=reference)
    images, labels = np.zeros((2, 16, 16, 3), np.float32), np.arange(2)
    ours = vit.split_merge_step(reference, images, labels, parity.optax_adamw(parity.ADAMW))
    theirs = chapter["jax_vit_step"](chapter["split_merge_form"])
    with parity.strict_fp32(), jax.default_matmul_precision("highest"):
        programs = [step.jitted.lower(*step.state(), jnp.asarray(images),
                                      jnp.asarray(labels)).as_text() for step in (ours, theirs)]
    assert programs[0] == programs[1]
