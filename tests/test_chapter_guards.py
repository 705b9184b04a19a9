"""The chapters' GPU paths, read from their sources: the settings that a GPU build needs and a
CPU build never exercises (issue 14's bugs), each placed where it takes effect."""

import re
from pathlib import Path

import jupytext
import pytest

from deepdive.book import plans

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CHAPTERS = sorted(p.stem for p in NOTEBOOKS.glob("0*.md"))
BOTH_FRAMEWORKS = [c for c in CHAPTERS
                   if "import torch" in (NOTEBOOKS / f"{c}.md").read_text()
                   and "import jax" in (NOTEBOOKS / f"{c}.md").read_text()]


def code(chapter):
    """The chapter's code cells, joined in order, with their line offsets lost."""
    return "\n".join(c.source for c in jupytext.read(NOTEBOOKS / f"{chapter}.md").cells
                     if c.cell_type == "code")


def first(pattern, source):
    match = re.search(pattern, source, re.MULTILINE)
    return match.start() if match else None


@pytest.mark.parametrize("chapter", BOTH_FRAMEWORKS)
def test_jax_is_told_to_share_the_gpu_before_it_is_imported(chapter):
    source = code(chapter)
    shared = first(r"let_jax_share_the_gpu\(\)|XLA_PYTHON_CLIENT_PREALLOCATE", source)
    imported = first(r"^import jax\b", source)

    assert shared is not None, f"{chapter} lets JAX reserve 75% of a GPU beside PyTorch"
    assert imported is None or shared < imported, f"{chapter} sets it after `import jax`"


@pytest.mark.parametrize("chapter", [c for c in BOTH_FRAMEWORKS if c in plans.CHAPTERS
                                     and c != "06_distributed"])
def test_a_chapter_timing_both_frameworks_checks_they_share_a_device(chapter):
    assert "env.require_same_device()" in code(chapter)


def test_the_distributed_chapter_checks_its_ranks_ran_on_jaxs_kind_of_device():
    assert re.search(r"assert ran_on == \{TORCH_DEVICE\}", code("06_distributed"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_strict_fp32_turns_tf32_off_in_cudnn_too(chapter):
    source = code(chapter)
    if 'set_float32_matmul_precision("highest")' in source and "cudnn" not in source:
        pytest.fail(f"{chapter}: matmul precision 'highest' leaves cuDNN's TF32 on")


@pytest.mark.parametrize("chapter", plans.CHAPTERS)
def test_every_chapter_takes_its_sizes_from_the_plans_and_checks_its_plan_first(chapter):
    source = code(chapter)
    planned = first(rf'plans\.plan\("{chapter}", SCALE, .*\n?.*\)\.check\(\)', source)
    measured = first(r"\b(compare|measure|measure_tie_band|spawn|spawn_each)\(", source)

    assert "by_scale(" not in source, "sizes live in deepdive.book.plans, where tests check them"
    if plans.sizes(chapter, "small") is not None:  # chapter 3: fixed tiny shapes, no sizes
        assert f'plans.sizes("{chapter}"' in source
    assert planned is not None and measured is not None and planned < measured


def test_the_gpt_benchmark_keeps_losses_and_marks_steps_with_the_tested_helpers():
    # The benchmark moved from chapter 3 to the GPT chapter, whose page writes its steps.
    source = code("04_gpt_training")

    assert "keep_loss(loss)" in source and "uses_cuda_graphs(options)" in source
    assert not re.search(r"losses\.append\(loss\.detach\(\)\)", source)
