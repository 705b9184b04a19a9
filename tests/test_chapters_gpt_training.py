"""Chapter 4's own code, as its page writes it: the PyTorch and JAX training steps, their
first-step check, the parts of a step, the claims and the anatomy's tables, executed from
`notebooks/04_gpt_training.md` on a tiny GPT (the executed page is the test that the chapter
runs at its own sizes)."""

import ast
import copy
import re
from pathlib import Path

import jax
import jupytext
import numpy as np
import pandas as pd
import pytest
import torch
from flax import nnx

from deepdive.book import plan, plans
from deepdive.book.claims import Claims
from deepdive.core.timing import Timing
from deepdive.core.verdict import TieBand
from deepdive.models import gpt, gpt_jax, parity

PAGE = Path(__file__).resolve().parents[1] / "notebooks" / "04_gpt_training.md"
CPU = plan.cpu_target("a test CPU", 1, 8 * 2**30)
TINY = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11)


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
                name = node.name
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
            else:
                continue
            if name in names:
                exec(compile(ast.Module([node], []), f"<{name}>", "exec"), namespace)
                found.add(name)
    assert found == set(names), f"not on the page: {set(names) - found}"
    return namespace


STEPS = ("nanogpt_adamw", "ADAMWS", "gpt_twin", "gpt_torch_step", "gpt_jax_step",
         "TORCH_MODES", "DPA", "JAX_MODES", "build_gpt_step")
CHECK = ("clipped_gradients", "as_nnx", "gpt_first_step_references", "applied", "proven_update",
         "TOLERANCE", "PARAMETERS", "MOMENTS", "check_gpt_first_step")


@pytest.fixture(scope="module")
def page():
    return page_code(*STEPS, *CHECK, "torch_gpt_parts", "jax_gpt_parts", "check_gpt_parts",
                     "compiled_dots", "layout_ops", DEVICE="cpu", LR=gpt_jax.TRAINING["lr"],
                     ADAMW="fused")  # the page times the three and steps with the fastest


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    reference = gpt.GPT(TINY)
    rng = np.random.default_rng(0)
    batches = [tuple(rng.integers(0, TINY.vocab_size, (4, TINY.block_size)) for _ in "xy")
               for _ in range(3)]
    return reference, batches


def losses(step, n=3):
    return np.array([float(step()) for _ in range(n)])


def test_both_steps_train_as_the_proven_optimizers_do(page, tiny):
    reference, batches = tiny
    with parity.strict_fp32():
        torch_step = page["gpt_torch_step"](reference, batches, None, bf16=False)
        jax_step = page["gpt_jax_step"](reference, batches, bf16=False, attention="eager")
        torch_losses, jax_losses = losses(torch_step), losses(jax_step)
        model = copy.deepcopy(reference)  # the parity proof's PyTorch optimizer, same settings
        proven = gpt_jax.ClippedAdamW(model.parameters(), **gpt_jax.TRAINING)
        for idx, targets in batches:
            proven.zero_grad()
            model(torch.from_numpy(idx), torch.from_numpy(targets)).backward()
            proven.step()
    np.testing.assert_allclose(jax_losses, torch_losses, rtol=1e-5)
    for (name, p), q in zip(torch_step.model.named_parameters(), model.parameters(),
                            strict=True):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=1e-6,
                                   err_msg=name)
    twin = gpt_jax.torch_arrays_as_nnx((n, p.detach().numpy()) for n, p in
                                       model.named_parameters())
    for path, value in nnx.to_flat_state(jax_step.state[0]):
        np.testing.assert_allclose(np.asarray(value), twin[path], atol=1e-5, err_msg=str(path))


def test_every_mode_builds_a_step_and_aot_eager_matches_eager(page, tiny):
    reference, batches = tiny
    assert set(plans.gpt_twin_modes(CPU)) <= {(m, p) for m in [*page["TORCH_MODES"],
                                                               *page["JAX_MODES"]]
                                               for p in ("fp32", "bf16")}
    torch._dynamo.reset()
    eager = losses(page["build_gpt_step"](reference, batches, "torch eager", "fp32"))
    compiled = losses(page["build_gpt_step"](reference, batches, "torch.compile aot_eager",
                                             "fp32"))
    flat = losses(page["build_gpt_step"](reference, batches, "jax.jit, tokens flattened",
                                         "fp32"))
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    np.testing.assert_allclose(flat, eager, rtol=1e-4)


def test_the_first_step_check_passes_each_framework_and_names_a_wrong_step(page, tiny):
    reference, batches = tiny
    with parity.strict_fp32():
        refs = page["gpt_first_step_references"](reference, batches[0])
        start = page["as_nnx"](reference)
        for step in (page["gpt_torch_step"](reference, batches, None, bf16=False),
                     page["gpt_jax_step"](reference, batches, bf16=False,
                                          attention="dot_product_attention")):
            row = page["check_gpt_first_step"]("v", step, float(step()), "fp32", refs, start)
            errors = [value for column, value in row.items() if column.startswith("gradient")]
            assert len(errors) == 2 and max(errors) < 1e-4
            moments = row["moments vs proven"]
            assert moments < page["MOMENTS"] / 10
        wrong = page["gpt_torch_step"](reference, batches, None, bf16=False)
        with torch.no_grad():
            wrong.model.blocks[0].mlp.up.weight.mul_(1.01)  # one matrix off by 1%
        with pytest.raises(AssertionError, match="'variant': 'wrong'"):
            page["check_gpt_first_step"]("wrong", wrong, float(wrong()), "fp32", refs, start)


@pytest.mark.parametrize("setting", [dict(weight_decay=0.1), dict(lr=1.1e-3),
                                     dict(betas=(0.9, 0.99)), dict(eps=1e-6)])
def test_a_step_whose_optimizer_differs_from_the_proven_one_fails_its_update_check(
        page, tiny, setting):
    reference, batches = tiny
    with parity.strict_fp32():
        refs = page["gpt_first_step_references"](reference, batches[0])
        step = page["gpt_torch_step"](reference, batches, None, bf16=False)
        groups = step.optimizer.param_groups  # decay on the gains, or another lr, beta, eps
        for group in groups[-1:] if "weight_decay" in setting else groups:
            group.update(setting)
        loss = float(step())  # the loss and the gradient are right; the update is not
        with pytest.raises(AssertionError, match="proven"):
            page["check_gpt_first_step"]("wrong", step, loss, "fp32", refs,
                                         page["as_nnx"](reference))


def test_a_jax_step_with_another_learning_rate_fails_its_update_check(page, tiny):
    reference, batches = tiny
    other = page_code("gpt_twin", "gpt_jax_step", DEVICE="cpu", LR=2e-3)
    with parity.strict_fp32():
        refs = page["gpt_first_step_references"](reference, batches[0])
        step = other["gpt_jax_step"](reference, batches, bf16=False, attention="eager")
        loss = float(step())
        with pytest.raises(AssertionError, match="proven"):
            page["check_gpt_first_step"]("wrong", step, loss, "fp32", refs,
                                         page["as_nnx"](reference))


def test_a_bf16_step_passes_as_bf16_and_an_fp32_step_cannot_pass_for_one(page, tiny):
    reference, batches = tiny
    refs = page["gpt_first_step_references"](reference, batches[0])
    start = page["as_nnx"](reference)
    for build in (lambda bf16: page["gpt_torch_step"](reference, batches, None, bf16=bf16),
                  lambda bf16: page["gpt_jax_step"](reference, batches, bf16=bf16,
                                                    attention="dot_product_attention")):
        bf16 = build(True)
        row = page["check_gpt_first_step"]("bf16", bf16, float(bf16()), "bf16", refs, start)
        errors = [value for column, value in row.items() if column.startswith("gradient")]
        assert min(errors) >= 1e-4  # bf16 arithmetic ran
        fp32 = build(False)
        with pytest.raises(AssertionError):
            page["check_gpt_first_step"]("fp32 as bf16", fp32, float(fp32()), "bf16", refs,
                                         start)


def test_clipping_scales_only_a_gradient_longer_than_the_limit(page):
    clipped = page["clipped_gradients"]
    assert np.allclose(np.linalg.norm(clipped({"a": np.array([3.0, 4.0])})["a"]), 1.0)
    assert np.allclose(clipped({"a": np.array([0.3, 0.4])})["a"], [0.3, 0.4])
    assert np.allclose(clipped({"a": np.zeros(2)})["a"], 0)


def test_the_parts_of_a_step_agree_with_the_references_and_a_wrong_part_fails(page, tiny):
    reference, batches = tiny
    first = type("W", (), {"key": "k"})
    check = page_code("check_gpt_parts", "clipped_gradients", "TOLERANCE",
                      REFERENCES={"k": reference}, first=first)["check_gpt_parts"]
    with parity.strict_fp32():
        torch_forward, torch_backward = page["torch_gpt_parts"](reference, batches[0])
        jax_forward, jax_backward, both = page["jax_gpt_parts"](
            page["gpt_twin"](reference, attention="dot_product_attention"), batches[0])
        refs = page["gpt_first_step_references"](reference, batches[0])
        check({"PyTorch eager · forward": torch_forward, "PyTorch eager · backward": torch_backward,
               "jax.jit · forward": jax_forward, "jax.jit · backward": jax_backward,
               "jax.jit · forward and backward, one program": both}, refs)
        np.testing.assert_allclose(float(both()), refs["JAX"][0], rtol=1e-6)
        with pytest.raises(AssertionError, match="jax.jit · backward"):
            check({"jax.jit · backward": lambda: jax.tree.map(lambda g: -g, jax_backward())},
                  refs)
    for part in (jax_forward, jax_backward):  # two parsers of one compiled program agree
        counts = page["layout_ops"](part.hlo())
        assert counts["dot"] == len(page["compiled_dots"](part.hlo())) > 0


def test_the_compiled_dots_of_a_bf16_step_take_bf16_values_and_an_fp32_steps_do_not(page, tiny):
    reference, batches = tiny
    for bf16 in (True, False):
        step = page["gpt_jax_step"](reference, batches, bf16=bf16,
                                    attention="dot_product_attention")
        dots = page["compiled_dots"](step.train.lower(*step.state, *batches[0]).compile()
                                     .as_text())
        rounded = dots["operands"].str.contains("bf16") | (dots["algorithm"]
                                                            == "dot_bf16_bf16_f32")
        assert set(dots["pass"]) == {"forward", "backward"}
        assert rounded.all() if bf16 else not rounded.any()


def timing(label, median, session=3, n=15, spread=0.001):
    return Timing(label, median * (1 + spread * np.sin(np.arange(n))), 1, 10 * median,
                  session=session)


def claims_for(target, bf16_native):
    configs = plans.gpt_twin_modes(target)
    speed = {"torch eager": 0.02, "torch eager A/A copy": 0.02, "torch.compile": 0.01,
             "torch.compile aot_eager": 0.02, "torch.compile cudagraphs": 0.012,
             "torch.compile reduce-overhead": 0.011, "jax.jit": 0.015,
             "jax.jit, tokens flattened": 0.012}
    t = {f"{m} · {p}": timing(f"{m} · {p}", speed[m] * (0.8 if p == "bf16" else 1))
         for m, p in configs}
    claims = Claims("04_gpt_training", TieBand(0.03), device="test CPU",
                    bf16_native=bf16_native)
    decide = page_code("decide_gpt_claims", "BENCHMARK_SLUGS", "DPA", "JAX_MODES",
                       CLAIMS=claims, TIE_BAND=TieBand(0.03), CONFIGS=configs,
                       BF16_NATIVE=bf16_native,
                       PRECISIONS={"fp32": "fp32 strict", "bf16": "bf16 mixed"})
    band = decide["decide_gpt_claims"]("k", "GPT training step, GPT k (1M parameters)", t)
    return claims, band


# The ids the choosing chapter, the intro and the ledger read (with "k" for a GPT's key).
WHOLE_STEP_IDS = {
    "k_fp32_jax_vs_torch", "k_fp32_jax_vs_eager", "k_aot_eager_fp32", "k_inductor_fp32",
    "k_bf16_jax_vs_torch", "k_bf16_jax_vs_eager", "k_aot_eager_bf16", "k_inductor_bf16",
    "k_fp32_flat_vs_3d", "k_bf16_eager", "k_jax_bf16_vs_fp32"}
GPU_ONLY_IDS = {"k_cudagraphs_fp32", "k_inductor_reduce_overhead_bf16"}
NATIVE_BF16_IDS = {"k_aot_eager_bf16", "k_inductor_bf16", "k_bf16_eager", "k_jax_bf16_vs_fp32",
                   "k_bf16_jax_vs_torch", "k_bf16_jax_vs_eager"}
BEST_FP32 = ("jax.jit, tokens flattened", "torch.compile")  # with these made-up timings


def test_every_whole_step_claim_is_made_once_under_the_ids_other_pages_read():
    claims, band = claims_for(CPU, bf16_native=True)
    inductor = claims.claims["k_inductor_fp32"]
    best_of_each = re.search(r"best step \((.+?)\) against PyTorch's best \((.+?)\)",
                             claims.claims["k_fp32_jax_vs_torch"].question).groups()
    assert band.width == pytest.approx(0.03, abs=0.01)
    assert set(claims.claims) == WHOLE_STEP_IDS
    assert inductor.verdict == "faster" and inductor.headline
    assert best_of_each == BEST_FP32  # the guide names both


def test_emulated_bf16_makes_no_bf16_verdicts_and_a_gpu_adds_its_modes():
    claims, _ = claims_for(CPU, bf16_native=False)
    assert set(claims.claims) == WHOLE_STEP_IDS - NATIVE_BF16_IDS  # emulated: no verdict
    l4, _ = claims_for(plan.gpu_target("NVIDIA L4", 23_034_593_280), bf16_native=True)
    assert GPU_ONLY_IDS <= set(l4.claims)
    t4 = plans.gpt_twin_modes(plan.gpu_target("Tesla T4", 15_828_320_256))  # no bf16 arithmetic
    jax_bf16, cuda_graphs_bf16 = ("jax.jit", "bf16"), ("torch.compile cudagraphs", "bf16")
    assert jax_bf16 not in t4 and cuda_graphs_bf16 not in t4 and ("torch eager", "bf16") in t4


class FakeClaim:
    def __init__(self, ratio, low, high):
        self.ratio, self.low, self.high = ratio, low, high


def test_the_anatomy_tables_give_shares_bounds_and_paired_changes():
    rounds = np.arange(12)
    eager = pd.DataFrame({"step": 20.0 + 0 * rounds, "library calls": 5.0 + 0 * rounds,
                          "compiled region outside the library calls": 10.0 + 0 * rounds,
                          "uncompiled: clipping, AdamW, zero_grad": 5.0 + 0 * rounds})
    inductor = eager - [1.0, 0.0, 1.0, 0.0]
    workload = type("W", (), {"key": "k", "name": "m"})
    claims = type("C", (), {"claims": {"k_inductor_fp32": FakeClaim(1.05, 1.02, 1.08)}})
    tables = page_code("anatomy_tables", WORKLOADS=[workload], CLAIMS=claims)
    parts, bounds = tables["anatomy_tables"]({"m": (eager, inductor)})
    share, bound, reached, noisy = (bounds.loc["m", c] for c in (
        "library share (%)", "bound, model compiled", "way to the bound, high (%)",
        "rounds with IQR above 10% of the median"))
    outside = parts.loc[("m", "compiled region outside the library calls")]
    change, low = outside["eager − inductor (ms)"], outside["low"]  # paired by round
    assert (share, bound, noisy) == (25, 2, "none")
    assert reached == pytest.approx(8)  # (1.08 - 1) / (2 - 1): the claim's high end
    assert change == 1 and low == 1


def test_the_merged_plan_times_each_configuration_once_and_fits_the_cpu_build():
    modes = plans.gpt_twin_modes(CPU)
    assert len(modes) == len(set(modes)) == 11
    built = plans.plan("04_gpt_training", "small", plan.cpu_target("build", 1, 24 * 2**30))
    assert built.check().seconds() <= built.budget_s
    assert "03_torch_compile" not in {w.name for w in built.works}


MOVES = {  # (chapter, id) saved by older builds -> where the claim lives now
    ("03_torch_compile", "char_inductor_fp32"): ("04_gpt_training", "char_inductor_fp32"),
    ("03_torch_compile", "vocab_bf16_eager"): ("04_gpt_training", "vocab_bf16_eager"),
    ("04_gpt_training", "char_fp32_reduce_overhead_vs_eager"):
        ("04_gpt_training", "char_inductor_reduce_overhead_fp32"),
    ("03_torch_compile", "mlp_inductor"): ("03_torch_compile", "mlp_inductor"),  # it stays
}


def test_the_benchmarks_claims_moved_with_their_ids_and_the_duplicate_maps_to_the_survivor():
    from deepdive.chapters import claim_map

    assert {old: claim_map.current(*old) for old in MOVES} == MOVES
