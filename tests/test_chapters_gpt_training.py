"""deepdive.chapters.gpt_training: chapter 4's checks, tables and sentences, on small fake
inputs (claims, timings, gradients), every branch."""

import math

import numpy as np
import pandas as pd
import pytest

from deepdive.book import plan, plans
from deepdive.book.claims import Claims
from deepdive.chapters import gpt_training as gt
from deepdive.core.timing import Timing
from deepdive.core.verdict import TieBand

FP32, BF16 = gt.gpt_precisions(True)["fp32"], gt.gpt_precisions(True)["bf16"]
CPU = plan.cpu_target("a test CPU", 1, 8 * 2**30)


def timing(label, median, session=7, n=15, spread=0.001):
    samples = median * (1 + spread * np.sin(np.arange(n)))
    return Timing(label, samples, 1, 10 * median, session=session)


def references(loss=2.0, grad=1.0):
    return {side: {"loss": loss, "gradients": {("w",): np.full(4, grad), ("b",): np.ones(2)}}
            for side in ("PyTorch", "JAX")}


def test_modes_name_their_framework_and_the_benchmarks_claim_ids():
    assert gt.gpt_framework("torch.compile aot_eager") == "torch"
    assert gt.gpt_framework("jax.jit, tokens flattened") == "jax"
    assert gt.benchmark_claim_id("char", "torch.compile", "fp32") == "char_inductor_fp32"
    assert gt.benchmark_claim_id("vocab", "torch.compile reduce-overhead", "bf16") == \
        "vocab_inductor_reduce_overhead_bf16"
    assert set(gt.BENCHMARK_SLUGS) < set(gt.TORCH_MODES)


def test_precisions_say_when_bf16_is_emulated():
    assert gt.gpt_precisions(True)["bf16"].name == "bf16 mixed"
    assert gt.gpt_precisions(False)["bf16"].name == "bf16 mixed (emulated)"
    assert not FP32.bf16 and BF16.bf16


def test_the_first_step_check_passes_within_tolerance_and_names_a_failure():
    grads = {("w",): np.full(4, 1.0 + 1e-6), ("b",): np.ones(2)}
    row = gt.check_gpt_first_step("m", "torch eager · fp32", grads, 2.0, FP32, references())
    assert row["passed"] and row["loss vs JAX"] == 0 and row["worst tensor vs PyTorch"] == "w"
    far = {("w",): np.full(4, 1.1), ("b",): np.ones(2)}
    with pytest.raises(AssertionError, match="torch eager · fp32 on m disagrees"):
        gt.check_gpt_first_step("m", "torch eager · fp32", far, 2.0, FP32, references())
    with pytest.raises(AssertionError):  # the loss alone out of tolerance
        gt.check_gpt_first_step("m", "x", grads, 2.1, FP32, references())


def test_a_bf16_step_must_differ_from_fp32_by_more_than_rounding():
    bf16_like = {("w",): np.full(4, 1.01), ("b",): np.ones(2)}
    row = gt.check_gpt_first_step("m", "jax.jit · bf16", bf16_like, 2.001, BF16, references())
    assert row["passed"] and "bf16 ran" in row["tolerance (loss, gradient)"]
    exact = {("w",): np.full(4, 1.0), ("b",): np.ones(2)}
    with pytest.raises(AssertionError, match="disagrees"):
        gt.check_gpt_first_step("m", "jax.jit · bf16", exact, 2.0, BF16, references())


def test_compile_kinds_tell_the_first_inductor_compile_from_the_others():
    started = []
    assert gt.gpt_compile_kind("jax.jit", started) == "new XLA program"
    assert gt.gpt_compile_kind("torch eager", started) == "none (eager)"
    assert gt.gpt_compile_kind("torch.compile aot_eager", started).startswith("aot_eager")
    assert started == []
    assert gt.gpt_compile_kind("torch.compile", started).startswith("cold")
    assert gt.gpt_compile_kind("torch.compile", started) == "Inductor already warm"


def test_clipping_scales_only_a_gradient_longer_than_the_limit():
    long = gt.clipped({"a": np.array([3.0, 4.0])})
    assert np.allclose(np.linalg.norm(long["a"]), 1.0)
    short = gt.clipped({"a": np.array([0.3, 0.4])})
    assert np.allclose(short["a"], [0.3, 0.4])
    assert np.allclose(gt.clipped({"a": np.zeros(2)})["a"], 0)


def test_flop_sentences_follow_what_was_counted():
    assert "weight matmuls only" in gt.flop_counter_sentence(True)
    assert "as well as the matmuls" in gt.flop_counter_sentence(False)
    assert "blocks of up to 512" in gt.mask_note("cpu", 128)
    assert "long sequences" in gt.mask_note("cpu", 1024)
    assert "long sequences" in gt.mask_note("cuda", 128)
    table = pd.DataFrame({"formula 6N + 12LHQT": [100.0], "  of which attention (12LHQT)": [10.0],
                          "FlopCounterMode": [90.0], "6 x matmul parameters x tokens": [90.0],
                          "FlopCounterMode, CPU attention formula added": [102.5],
                          "  of which attention ": [12.5]}, index=pd.Index(["m"], name="model"))
    numbers = gt.flop_numbers(table)
    assert numbers["flop_matmuls_only"] is True
    assert numbers["flop_with_attention_ratio"] == "1.025 for m"
    assert numbers["flop_counter_attention_ratio"] == "1.250"
    assert numbers["flop_attention_share"] == "10.0% for m"


def test_the_autocast_sentence_explains_the_usual_pattern_and_lists_any_other():
    bf16, fp32 = {"bfloat16"}, {"float32"}
    seen = {"the matmuls": bf16, "the attention kernel (SDPA)": bf16, "GELU": bf16,
            "LayerNorm": fp32, "the loss (log-softmax and NLL)": fp32}
    inputs = {"GELU": bf16, "LayerNorm": fp32}
    assert gt.autocast_sentence(seen, inputs).startswith("Under autocast the matmuls")
    odd = dict(seen, GELU=fp32)
    text = gt.autocast_sentence(odd, inputs)
    assert "the matmuls, the attention kernel (SDPA) ran in bf16" in text
    assert "GELU, LayerNorm" in text
    assert "none of the watched operators" in gt.autocast_sentence({}, {})


def test_the_slides_table_and_what_it_says_about_their_headline():
    anchor, slides = gt.slides_anchor()
    assert anchor.loc[("GPT-2 124M", "eager"), "ms per micro-step (seed)"] == \
        pytest.approx(3107.334 / 40)
    gap = (anchor["MFU % implied by nanoGPT's formula"] - anchor["MFU % (seed)"]).abs().max()
    assert gap < 1.0  # the 40-micro-step reading reproduces their MFU column
    assert gt.slides_sentence(slides).startswith("Their headline figures, 16.25% and 27.2%, do not")
    agreeing = slides.copy()
    agreeing["eager / inductor − 1 (%)"] = agreeing["the slides' stated speed-up (%)"]
    assert "agree with one reading" in gt.slides_sentence(agreeing)
    assert gt.slides_size_ratio() == pytest.approx(11.57, abs=0.05)


class FakeClaim:
    def __init__(self, ratio, low, high):
        self.ratio, self.low, self.high = ratio, low, high


def anatomy_frames(library=5.0, jitter=0.0, inductor_gain=1.0):
    rounds = np.arange(12)
    eager = pd.DataFrame({"step": 20.0 + jitter * rounds, "library calls": library,
                          "compiled region outside the library calls": 10.0 + 0 * rounds,
                          "uncompiled: clipping, AdamW, zero_grad": 5.0 + 0 * rounds})
    inductor = eager.copy()
    inductor["compiled region outside the library calls"] -= inductor_gain
    inductor["step"] -= inductor_gain
    return eager, inductor


def test_the_anatomy_tables_give_shares_bounds_and_paired_changes():
    frames = {"m": anatomy_frames()}
    parts, bounds = gt.anatomy_tables(frames, {"m": FakeClaim(1.05, 1.02, 1.08)})
    assert bounds.loc["m", "library share (%)"] == 25
    assert bounds.loc["m", "bound, model compiled"] == 2
    assert bounds.loc["m", "way to the bound, high (%)"] == pytest.approx(8)
    outside = parts.loc[("m", "compiled region outside the library calls")]
    assert outside["eager − inductor (ms)"] == 1 and outside["low"] == 1
    text = gt.anatomy_reading(parts, bounds, frames)
    assert "exclude 0 for 1 of the 1 models" in text and not text.startswith("The rounds")


def test_the_anatomy_reading_says_when_nothing_moved_and_when_rounds_were_noisy():
    quiet = {"m": anatomy_frames(inductor_gain=0.0)}
    parts, bounds = gt.anatomy_tables(quiet, {"m": FakeClaim(1.0, 0.98, 1.02)})
    assert "excludes 0 for none of the models" in gt.anatomy_reading(parts, bounds, quiet)
    noisy = {"m": anatomy_frames(jitter=1.0)}
    parts, bounds = gt.anatomy_tables(noisy, {"m": FakeClaim(1.0, 0.98, 1.02)})
    text = gt.anatomy_reading(parts, bounds, noisy)
    assert text.startswith("The rounds were noisy (m, eager step") and "concluded" in text
    median, low, high = gt.paired_change([3, 3, 3], [1, 1, 1])
    assert median == 2 and low <= 2 <= high


def test_the_data_and_size_sentences_cover_each_case():
    assert gt.corpus_sentence(1000, 65, "cached").startswith("The character model reads")
    assert "could not be downloaded" in gt.corpus_sentence(1000, 65, "synthetic")
    assert gt.loss_note(["a"], False).startswith("a reads random token ids")
    assert gt.loss_note(["a", "b"], True).startswith("Every model")
    assert "cannot test" in gt.size_note(1.1, 11.6)
    assert gt.size_note(10.0, 11.6).endswith("as the slides' do.")
    assert "only weakly" in gt.size_note(4.0, 11.6)


def test_break_even_only_where_the_compiled_step_was_faster():
    assert gt.break_even_text(None, "faster", 10.0) == ""
    assert gt.break_even_text({}, "faster", 1234.0) == "1,200"
    assert gt.break_even_text({}, "tie", 1234.0) == "— (tie)"
    assert gt.break_even_text({}, "faster", math.inf) == "— (faster)"
    assert gt.break_even_text({}, None, 5.0) == "— (no claim)"
    results = pd.DataFrame([
        {"key": "k", "mode": "torch eager", "precision": "fp32", "timing": timing("e", 0.02),
         "compile (s)": 0.0},
        {"key": "k", "mode": "torch.compile", "precision": "fp32",
         "timing": timing("c", 0.01), "compile (s)": 10.0},
        {"key": "k", "mode": "jax.jit", "precision": "fp32", "timing": timing("j", 0.01),
         "compile (s)": 1.0}])
    column = gt.break_even_column(results, {"k_inductor_fp32": "faster"})
    assert column[0] == "" and column[2] == ""
    assert column[1] == "1,000"


def test_compile_seconds_and_the_summary_reading():
    assert gt.seconds_text([1.23]) == "1.2 s"
    assert gt.seconds_text([1.0, 3.0]) == "1.0 to 3.0 s"
    glued = {"k_fp32_jax_vs_torch": "faster than", "k_fp32_jax_vs_torch_ratio": "1.2x",
             "k_inductor_fp32": "tied with", "k_inductor_fp32_ratio": "1.0x"}
    best = {("k", "fp32"): {"jax": "jax.jit", "torch": "torch.compile"}}
    precisions = {"fp32": FP32, "bf16": BF16}
    text = gt.summary_reading(glued, best, [("k", "GPT k")], precisions,
                              {"jax": [1.0], "cold": [20.0], "warm": [10.0, 12.0]})
    assert "In fp32 strict, JAX's best step against PyTorch's best: jax.jit was faster than " \
           "torch.compile on GPT k (1.2x)." in text
    assert "Inductor's step was tied with eager on GPT k (1.0x)" in text
    assert "bf16 mixed" not in text
    assert "and 10.0 to 12.0 s for the others" in text
    alone = gt.summary_reading({}, {}, [("k", "GPT k")], precisions,
                               {"jax": [1.0], "cold": [20.0], "warm": []})
    assert "for the others" not in alone and alone.startswith("Compiling took 1.0 s")


def test_device_notes_name_the_threads_or_the_gpu():
    assert gt.adamw_text("cuda", False) == "its fused kernel"
    assert gt.adamw_text("cpu", True).startswith("multi-tensor")
    assert gt.adamw_text("cpu", False).startswith("one eager update")
    assert "2 threads each" in gt.backend_note("cpu", 2)
    assert "1 thread each" in gt.backend_note("cpu", 1)
    assert "this GPU's backends" in gt.backend_note("cuda", 1)
    assert "1 thread each" in gt.scope_note("cpu", 1)
    assert gt.scope_note("cuda", 1).startswith("They describe this GPU")


def configs_and_timings(target, session=3):
    configs = plans.gpt_twin_modes(target)
    speed = {"torch eager": 0.02, "torch eager A/A copy": 0.02, "torch.compile": 0.01,
             "torch.compile aot_eager": 0.02, "jax.jit": 0.015,
             "jax.jit, tokens flattened": 0.012}
    t = {f"{m} · {p}": timing(f"{m} · {p}", speed[m] * (0.8 if p == "bf16" else 1), session)
         for m, p in configs}
    return configs, t


def test_every_whole_step_claim_is_made_once_with_the_benchmarks_ids():
    configs, t = configs_and_timings(CPU)
    claims = Claims("04_gpt_training", TieBand(0.03), device="test CPU")
    precisions = {"fp32": FP32, "bf16": BF16}
    band, best = gt.decide_gpt_claims(claims, "k", "GPT k", t, configs, precisions,
                                      TieBand(0.03), bf16_native=True)
    assert band.width == pytest.approx(0.03, abs=0.01)
    assert best["fp32"] == {"torch": "torch.compile", "jax": "jax.jit, tokens flattened"}
    assert best["bf16"]["torch"] == "torch.compile"
    assert set(claims.claims) == {
        "k_fp32_jax_vs_torch", "k_fp32_jax_vs_eager", "k_aot_eager_fp32", "k_inductor_fp32",
        "k_bf16_jax_vs_torch", "k_bf16_jax_vs_eager", "k_aot_eager_bf16", "k_inductor_bf16",
        "k_fp32_flat_vs_3d", "k_bf16_eager", "k_jax_bf16_vs_fp32"}
    assert claims.claims["k_inductor_fp32"].verdict == "faster"
    assert claims.claims["k_inductor_fp32"].headline
    table = gt.aa_table({"k": t}, {"k": "GPT k"}, TieBand(0.03), {"k": band})
    assert list(table.index) == [("GPT k", "fp32"), ("GPT k", "bf16")]


def test_emulated_bf16_and_a_gpu_without_it_make_no_bf16_verdicts():
    configs, t = configs_and_timings(CPU)
    claims = Claims("04_gpt_training", TieBand(0.03), device="test CPU")
    gt.decide_gpt_claims(claims, "k", "GPT k", t, configs, {"fp32": FP32, "bf16": BF16},
                         TieBand(0.03), bf16_native=False)
    assert "k_inductor_bf16" not in claims.claims and "k_bf16_eager" not in claims.claims
    assert "k_bf16_jax_vs_eager" in claims.claims  # mode for mode, labelled emulated
    t4 = plan.gpu_target("Tesla T4", 15_828_320_256)
    modes = plans.gpt_twin_modes(t4)
    assert ("jax.jit", "bf16") not in modes and ("torch.compile", "bf16") not in modes
    assert ("torch.compile cudagraphs", "bf16") in modes


def test_the_breakdowns_claims_and_table():
    labels = ["PyTorch eager · forward", "PyTorch eager · backward", "jax.jit · forward",
              "jax.jit · backward", "jax.jit, tokens flattened · forward",
              "jax.jit, tokens flattened · backward",
              "jax.jit, tokens flattened · forward and backward, one program",
              "jax.jit, tokens flattened · forward and backward, two programs"]
    times = {label: timing(label, 0.01 + 0.001 * i, session=5) for i, label in enumerate(labels)}
    claims = Claims("04_gpt_training", TieBand(0.03), device="test CPU")
    gt.decide_part_claims(claims, "k", "GPT k", times)
    assert len(claims.claims) == 5 and "k_fp32_one_vs_two_programs" in claims.claims
    steps = {f"{m} · fp32": timing(m, 0.05) for m in ("torch eager", "jax.jit",
                                                      "jax.jit, tokens flattened")}
    table = gt.parts_table(times, steps)
    assert table.loc["PyTorch eager", "forward + backward (sum)"] == pytest.approx(21, rel=1e-3)
    assert table.loc["jax.jit", "whole step (benchmark's rounds)"] == pytest.approx(50, rel=1e-3)


def test_the_parts_check_fails_a_part_outside_tolerance():
    refs = {side: {"loss": r["loss"], "gradients": gt.clipped(r["gradients"])}
            for side, r in references().items()}  # the references are clipped, as the parts

    def forward():
        return 2.0

    def backward():
        return None

    backward.gradients = lambda: {("w",): np.full(4, 1.0), ("b",): np.ones(2)}
    gt.check_parts({"a · forward": forward, "a · backward": backward,
                    "a · forward and backward, two programs": forward}, refs, FP32)
    with pytest.raises(AssertionError, match="a · forward disagrees"):
        gt.check_parts({"a · forward": lambda: 2.5}, refs, FP32)
    backward.gradients = lambda: {("w",): np.full(4, 2.0), ("b",): np.ones(2)}
    with pytest.raises(AssertionError, match="a · backward disagrees"):
        gt.check_parts({"a · backward": backward}, refs, FP32)


def test_parity_numbers_read_the_largest_differences():
    index = pd.MultiIndex.from_tuples(
        [("m", "eager", "logits"), ("m", "eager", "gradients"),
         ("m", "eager", "AdamW, identical gradients"), ("m", "eager", "loss curve")],
        names=["model", "JAX twin", "quantity"])
    table = pd.DataFrame({"max |PyTorch - JAX|": [1e-6, 2e-6, 3e-6, 4e-6]}, index=index)
    numbers = gt.parity_numbers(table)
    assert numbers["parity_logits"] == 1e-6 and numbers["parity_grads"] == 2e-6
    assert numbers["parity_trajectory"] == 3e-6 and numbers["parity_loss_curve"] == 4e-6


def test_the_merged_plan_times_each_configuration_once_and_fits_the_cpu_build():
    modes = plans.gpt_twin_modes(CPU)
    assert len(modes) == len(set(modes)) == 11
    built = plans.plan("04_gpt_training", "small", plan.cpu_target("build", 1, 24 * 2**30))
    assert built.check().seconds() <= built.budget_s
    assert "03_torch_compile" not in {w.name for w in built.works}


def test_the_benchmarks_claims_moved_with_their_ids_and_the_duplicate_maps_to_the_survivor():
    from deepdive.chapters import claim_map

    assert claim_map.current("03_torch_compile", "char_inductor_fp32") == \
        ("04_gpt_training", "char_inductor_fp32")
    assert claim_map.current("03_torch_compile", "vocab_bf16_eager") == \
        ("04_gpt_training", "vocab_bf16_eager")
    assert claim_map.current("04_gpt_training", "char_fp32_reduce_overhead_vs_eager") == \
        ("04_gpt_training", "char_inductor_reduce_overhead_fp32")
    assert claim_map.current("03_torch_compile", "mlp_inductor") == \
        ("03_torch_compile", "mlp_inductor")  # chapter 3's internals stay
