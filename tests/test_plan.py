"""deepdive.book.plan and deepdive.book.plans: every chapter's plan at every scale, for the GPUs a
reader has or rents, built and checked on a machine without any GPU."""

import math
from pathlib import Path

import jax
import pytest
import torch
import yaml

from deepdive.book import plan, plans
from deepdive.core import flops
from deepdive.models.gpt import GPT, GPTConfig

GIB = 2**30
# Memory as torch reports it (total_memory): Colab's T4, an L4, the A100s, an H100 SXM.
GPUS = {
    "T4": plan.gpu_target("Tesla T4", 15_828_320_256),
    "L4": plan.gpu_target("NVIDIA L4", 23_612_293_120),
    "A100 40GB": plan.gpu_target("NVIDIA A100-SXM4-40GB", 42_405_855_232),
    "A100 80GB": plan.gpu_target("NVIDIA A100-SXM4-80GB", 85_100_000_000),
    "H100": plan.gpu_target("NVIDIA H100 80GB HBM3", 85_520_809_984),
}
HOST = plan.cpu_target("a 16-core host", 16, 128 * GIB)
BUILD_CPU = plan.cpu_target("the 2-core build machine", 1, 24 * GIB)  # one thread per framework
FULL_GPUS = ("A100 80GB", "H100")


# Medium on every GPU a reader has or rents; full on an 80 GB data-centre GPU.
FITS = [("medium", gpu) for gpu in GPUS] + [("full", gpu) for gpu in FULL_GPUS]


@pytest.mark.parametrize("chapter", plans.CHAPTERS)
@pytest.mark.parametrize(("scale", "gpu"), FITS)
def test_every_chapters_plan_fits_its_budgets(chapter, scale, gpu):
    built = plans.plan(chapter, scale, GPUS[gpu], HOST)

    print(built.summary())
    assert built.check() is built
    budget = built.budget_s
    assert budget is None or built.seconds() <= budget
    assert max(built.cell_seconds().values()) <= plan.CELL_HEADROOM * plan.CELL_TIMEOUT_S
    assert built.memory() <= plan.MEMORY_HEADROOM * GPUS[gpu].memory


@pytest.mark.parametrize("chapter", plans.CHAPTERS)
def test_every_chapter_fits_the_cpu_build_at_small(chapter):
    built = plans.plan(chapter, "small", BUILD_CPU)

    print(built.summary())
    assert built.check().seconds() <= built.budget_s


@pytest.mark.parametrize("gpu", ["T4", "L4"])
def test_full_on_a_readers_gpu_is_refused_naming_medium(gpu):
    """The seeds' ViT-B/16 at batch 32 alone needs more than a T4 or an L4 holds."""
    with pytest.raises(plan.PlanDoesNotFit, match="DEEPDIVE_SCALE=medium"):
        plans.plan("05_vit_training", "full", GPUS[gpu], HOST).check()


def test_a_40gb_a100_runs_full_except_the_gpt_2_and_vit_b_16_training_benchmarks():
    """The GPT chapter keeps fifteen GPT-2 configurations with their AdamW state beside
    batch-12 activations; the ViT chapter keeps sixteen ViT-B/16 configurations at the seed's
    batch: both
    need more than a 40 GB A100, and their plans say so before a cell runs, naming medium."""
    a100 = GPUS["A100 40GB"]
    for chapter in ("01_vmap", "02_jit_xla", "06_distributed"):
        plans.plan(chapter, "full", a100, HOST).check()
    with pytest.raises(plan.PlanDoesNotFit, match=r"GPT-2 124M.*GiB.*DEEPDIVE_SCALE=medium"):
        plans.plan("04_gpt_training", "full", a100, HOST).check()
    with pytest.raises(plan.PlanDoesNotFit, match=r"batch 32' needs.*DEEPDIVE_SCALE=medium"):
        plans.plan("05_vit_training", "full", a100, HOST).check()


def test_an_oversized_plan_is_refused_with_the_smaller_scale_or_a_plain_no():
    slow = plan.Work("slow", (plan.Call(flops=1e15),))
    with pytest.raises(plan.PlanDoesNotFit, match="over the medium budget of 10 min.*"
                                                  "DEEPDIVE_SCALE=small"):
        plan.Plan("ch", "medium", GPUS["T4"], (slow,)).check()
    with pytest.raises(plan.PlanDoesNotFit, match="cannot run on this device"):
        plan.Plan("ch", "small", BUILD_CPU, (slow,)).check()
    with pytest.raises(plan.PlanDoesNotFit, match="cell 'slow'.*cell timeout"):
        plan.Plan("ch", "full", GPUS["T4"], (slow,)).check()


def test_memory_counts_required_work_and_a_point_that_will_run_out_costs_its_compile_only():
    t4 = GPUS["T4"]
    fits = plan.Work("fits", (plan.Call(flops=1e9),), memory=GIB)
    too_big = plan.Work("too big", (plan.Call(flops=1e12),), memory=100 * GIB, compile_s=5.0,
                        may_oom=True)
    built = plan.Plan("ch", "medium", t4, (fits, too_big))

    assert built.memory() == GIB
    assert too_big.runs_out(t4) and too_big.seconds(t4) == 5.0
    assert built.table().loc["too big", "runs out"] == "expected"
    with pytest.raises(plan.PlanDoesNotFit, match="'needed' needs 100.0 GiB"):
        plan.Plan("ch", "medium", t4, (plan.Work("needed", (plan.Call(),),
                                                 memory=100 * GIB),)).check()


def test_a_call_is_bound_by_flops_bytes_or_dispatches_whichever_is_slowest():
    t4 = GPUS["T4"]
    share = plan.EFFICIENCY["cuda"]

    assert plan.Call(flops=8.1e12).seconds(t4, HOST) == pytest.approx(1 / share)
    assert plan.Call(traffic=320e9).seconds(t4, HOST) == pytest.approx(1 / share)
    assert plan.Call(dispatches=1000).seconds(t4, HOST) == pytest.approx(1000 * plan.DISPATCH_S)
    # a T4 has no bf16 tensor cores: bf16 work is planned at its fp32 rate
    assert plan.Call(flops=8.1e12, dtype="bf16").seconds(t4, HOST) == pytest.approx(1 / share)
    host_call = plan.Call(flops=HOST.peak("fp32"), host=True)
    assert host_call.seconds(t4, HOST) == pytest.approx(1 / plan.EFFICIENCY["cpu"])


def test_a_gpu_outside_the_tables_is_planned_with_measured_figures_never_a_crash():
    measured = flops.Peak(90e12, "fp32", "measured on this machine: best fp32 torch.mm rate")
    target = plan.gpu_target("NVIDIA RTX 6000 Ada Generation", 48 * GIB,
                             measure_peak=lambda dtype: measured,
                             measure_bandwidth=lambda: 900e9)

    assert target.peak("fp32") == 90e12 and target.bandwidth == 900e9
    assert "measured" in target.source
    with pytest.raises(ValueError, match="no datasheet bandwidth.*known: T4"):
        plan.gpu_target("NVIDIA RTX 6000 Ada Generation", 48 * GIB)


def test_compile_seconds_grow_with_depth_and_refuse_unknown_compilers():
    assert plan.compile_seconds("torch.compile", "cuda", 12) > \
        plan.compile_seconds("torch.compile", "cuda", 2)
    with pytest.raises(ValueError, match="accepted: jax.jit, aot_eager"):
        plan.compile_seconds("tvm", "cuda")
    with pytest.raises(ValueError, match="device must be one of cpu, cuda"):
        plan.compile_seconds("jax.jit", "tpu")


def test_the_plans_cell_timeout_is_the_books():
    config = yaml.safe_load((Path(__file__).parents[1] / "_config.yml").read_text())

    assert plan.CELL_TIMEOUT_S == config["execute"]["timeout"]


def test_sizes_refuse_an_unknown_chapter_or_scale():
    with pytest.raises(KeyError, match="known: 01_vmap"):
        plans.sizes("07_tpu", "small")
    with pytest.raises(ValueError, match="not one of small, medium, full"):
        plans.sizes("01_vmap", "huge")


@pytest.mark.parametrize("scale", ["small", "medium", "full"])
def test_gpt_parameter_counts_match_the_model_built_on_the_meta_device(scale):
    for w in plans.sizes("04_gpt_training", scale).workloads:
        with torch.device("meta"):
            model = GPT(GPTConfig(*w.config))
        assert w.parameters == model.num_parameters(), w.name


@pytest.mark.parametrize("scale", ["small", "medium", "full"])
def test_vit_parameter_counts_match_the_model_built_on_the_meta_device(scale):
    from transformers import ViTConfig, ViTForImageClassification

    sizes = plans.sizes("05_vit_training", scale)
    with torch.device("meta"):
        model = ViTForImageClassification(ViTConfig(**sizes.config))
    assert sizes.parameters == sum(p.numel() for p in model.parameters())
    assert sizes.ref_batch in sizes.batch_sizes  # the seed's batch is swept at every scale


def test_full_sizes_are_the_seeds():
    vit = plans.sizes("05_vit_training", "full")
    gpts = {w.key: w for w in plans.sizes("04_gpt_training", "full").workloads}

    assert (vit.image_size, vit.patch_size, vit.hidden_size, vit.num_hidden_layers) == \
        (224, 16, 768, 12)  # ViT-Base/16
    assert round(gpts["vocab"].parameters / 1e6) == 124  # GPT-2 124M
    assert gpts["char"].config == (6, 6, 384, 256, 65)  # nanoGPT's Shakespeare-char


@pytest.mark.parametrize("scale", ["medium", "full"])
def test_the_nnx_twin_at_every_gpu_scale_has_the_planned_parameters_without_allocating(scale):
    """`nnx.eval_shape` builds the JAX ViT as abstract shapes: ViT-B/16 is checked without
    allocating its 86M parameters."""
    from flax import nnx
    from transformers import ViTConfig

    from deepdive.models import vit

    sizes = plans.sizes("05_vit_training", scale)
    abstract = nnx.eval_shape(lambda: vit.ViTForImageClassification(
        ViTConfig(**sizes.config), rngs=nnx.Rngs(0)))
    leaves = jax.tree.leaves(nnx.state(abstract, nnx.Param))

    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
    assert sum(math.prod(leaf.shape) for leaf in leaves) == sizes.parameters


def test_where_inductor_refuses_bf16_the_chapters_plan_and_run_without_its_bf16_rows():
    """A T4 (compute capability 7.5) has no native bf16: Inductor raises SkipFrame there,
    so the GPT chapter's bf16 runs drop Inductor's two modes (and JAX's bf16, which lacks its
    dot there) and the ViT chapter's bf16 rows drop torch.compile (its TF32 row stays); an L4
    keeps them all, and so does a CPU."""
    t4, l4 = GPUS["T4"], GPUS["L4"]

    assert not t4.inductor_bf16 and l4.inductor_bf16 and BUILD_CPU.inductor_bf16
    def bf16_modes(target):
        return [m for m, p in plans.gpt_twin_modes(target) if p == "bf16"]

    assert bf16_modes(t4) == ["torch eager"]  # emulated: the plain step only, no JAX dot
    assert len(bf16_modes(l4)) == 7 and len(plans.gpt_twin_modes(l4)) == 15
    assert len(bf16_modes(BUILD_CPU)) == 5  # no CUDA graphs on a CPU
    t4_rows = plans.vit_modes(t4, 32, 32)
    assert ("torch.compile, SDPA", "bf16") not in t4_rows
    assert not any(p == "tf32" for _, p in t4_rows)  # Turing has no TF32 either
    assert ("torch.compile, SDPA", "tf32") in plans.vit_modes(l4, 32, 32)
    assert ("torch.compile, SDPA", "bf16") in plans.vit_modes(l4, 32, 32)
    assert len(plans.vit_modes(BUILD_CPU, 32, 32)) == 9 and len(plans.vit_modes(l4, 32, 32)) == 16
    # on a CPU, dot_product_attention is the written-out math: bf16 is timed once there
    assert ("jax.jit split/merge, dot_product_attention", "bf16") not in plans.vit_modes(
        BUILD_CPU, 32, 32)
    assert plan.gpu_target("Some GPU", 8 * GIB, measure_peak=lambda d: flops.Peak(1e12, d, "m"),
                           measure_bandwidth=lambda: 1e11, bf16_native=False).inductor_bf16 is False


def test_where_bf16_is_emulated_only_each_frameworks_plain_bf16_step_is_timed():
    """No bf16 claim is decided there, so the compiled modes and the A/A copy (which serve
    verdicts only) are not built: on a CPU, two cold Inductor compiles fewer."""
    emulating = plan.cpu_target("a CPU without AVX512-BF16 or AMX", 1, 24 * GIB,
                                bf16_native=False)
    modes = plans.gpt_twin_modes(emulating)
    assert [m for m, p in modes if p == "bf16"] == ["torch eager", "jax.jit"]
    assert [m for m, p in modes if p == "fp32"] == [m for m, p in plans.gpt_twin_modes(BUILD_CPU)
                                                    if p == "fp32"]
    native = plans.plan("04_gpt_training", "small", BUILD_CPU).seconds()
    assert plans.plan("04_gpt_training", "small", emulating).seconds() < native


def test_the_summary_states_every_assumption_and_what_was_measured():
    gpu = plans.plan("05_vit_training", "medium", GPUS["L4"], HOST).summary()
    cpu = plans.plan("05_vit_training", "small", BUILD_CPU).summary()

    for text in (gpu, cpu):
        for figure in ("of peak FLOP/s", "µs per dispatch", "15 timed blocks", "jax.jit",
                       "torch.compile", "per fresh process", "the rest of the page"):
            assert figure in text, figure
    for said, where in (("assumed, not measured", gpu), ("first-call times in this book's", cpu),
                        ("12 bytes per fp32 parameter", gpu), ("68 bytes per token", gpu)):
        if said not in where:
            pytest.fail(f"the plan's summary does not state {said!r}")


def test_a_known_gpu_missing_a_dtype_runs_it_at_fp32_and_is_not_measured():
    def measure(dtype):
        raise AssertionError("a T4 is in the datasheet table: nothing to measure")

    t4 = plan.gpu_target("Tesla T4", 15 * GIB, measure_peak=measure)
    assert t4.peak("bf16") == t4.peak("fp32") == 8.1e12
    assert "measured" not in t4.source and not t4.inductor_bf16


def test_the_plans_print_for_a_readers_gpu_from_the_command_line(capsys):
    assert plans.main(["T4"]) == 0
    medium = capsys.readouterr().out
    assert plans.main(["A100-40GB", "--scale", "full"]) == 0
    full = capsys.readouterr().out

    t4 = "Tesla T4"
    assert medium.count("-> fits") == len(plans.CHAPTERS) and f"on {t4}" in medium
    # Full scale's GPT-2 (the GPT chapter's benchmark) and ViT-B/16 need an 80 GB GPU.
    assert full.count("-> fits") == 5 and full.count("REFUSED") == 2
    assert "DEEPDIVE_SCALE=medium" in full
    with pytest.raises(SystemExit):
        plans.main(["V100"])
