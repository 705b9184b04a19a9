"""deepdive.chapters.vmap: chapter 1's workloads, variants, measurements' helpers and the
readings that write its sentences, each branch on small fake inputs."""

import ast
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

from deepdive.chapters import vmap as ch
from deepdive.core.timing import Timing

matplotlib.use("Agg")

SIZES = SimpleNamespace(batch_sizes=(2, 8), dot_dim=4, seq_len=3, head_dim=2, grad_batch=3,
                        grad_features=4, grad_hidden=5, run_lengths=(2, 4))
VARIANTS = ["PyTorch loop", "torch.func.vmap", "PyTorch batched ops", "torch.compile(vmap)",
            "JAX loop", "JAX loop of jax.jit(f)", "JAX .at[].set loop", "jax.vmap",
            "jax.jit(vmap)", "jax.jit(.at[].set fori_loop)"]


def timing(median, first_call=None, label="t", spread=0.0, recompiles=0, harness_s=0.0):
    samples = median * (1 + spread * np.linspace(-1, 1, 15))
    return Timing(label, samples, calls_per_block=1,
                  first_call=2 * median if first_call is None else first_call,
                  recompiles=recompiles, harness_s=harness_s)


def fake_sweep(median=None, noisy=()):
    """Every variant at every batch: median(workload, batch, variant) seconds."""
    median = median or (lambda w, b, v: 1e-3 * (1 + VARIANTS.index(v)))
    return {(w, b): {v: timing(median(w, b, v), spread=0.5 if (w, b, v) in noisy else 0.0)
                     for v in VARIANTS}
            for w in ch.WORKLOADS for b in SIZES.batch_sizes}


class Recorder:
    def __init__(self):
        self.seen = {}

    def compare(self, claim_id, question, baseline, candidate, headline=False):
        assert claim_id not in self.seen
        self.seen[claim_id] = (question, baseline, candidate, headline)


# --- set-up --------------------------------------------------------------------------------

def test_scope_on_a_cpu_counts_threads_and_on_a_gpu_names_it():
    assert ch.scope("cpu", 1) == ("1 intra-op thread per framework", "CPU, 1 thread")
    assert ch.scope("cpu", 4) == ("4 intra-op threads per framework", "CPU, 4 threads")
    assert ch.scope("cuda", 1, gpu_name=lambda: "NVIDIA H100")[1] == "NVIDIA H100"


def test_framework_of_a_label():
    assert [ch.framework(v) for v in ("PyTorch loop", "torch.func.vmap", "jax.vmap",
                                      "JAX loop")] == ["torch", "torch", "jax", "jax"]


# --- workloads and variants ------------------------------------------------------------------

def test_inputs_have_each_workloads_shape_and_repeat_per_batch():
    dot, attention = ch.make_inputs("dot", 8, SIZES), ch.make_inputs("attention", 2, SIZES)
    assert [a.shape for a in dot] == [(8, 4)] * 2
    assert [a.shape for a in attention] == [(2, 3, 2)] * 3
    assert dot[0].dtype == np.float32
    np.testing.assert_array_equal(ch.make_inputs("dot", 8, SIZES)[0], dot[0])


def test_every_variant_of_both_frameworks_matches_the_float64_reference():
    for workload in ch.WORKLOADS:
        arrays = ch.make_inputs(workload, 2, SIZES)
        reference = ch.WORKLOADS[workload]["reference"](*(a.astype(np.float64) for a in arrays))
        variants = {**ch.torch_variants(workload, arrays, "cpu"),
                    **ch.jax_variants(workload, arrays)}
        assert list(variants) == VARIANTS
        for label, fn in variants.items():
            if label != "torch.compile(vmap)":  # compiling is the page's job, not a unit test's
                np.testing.assert_allclose(np.asarray(fn()), reference, rtol=1e-4, atol=1e-5,
                                           err_msg=label)


def test_the_hand_worked_gradients_match_autograd_and_the_check_catches_a_wrong_one():
    import torch

    params, x, y = ch.grad_inputs(SIZES)
    expected = ch.grad_reference(params, x, y)
    assert expected["w1"].shape == (3, 4, 5) and expected["b2"].shape == (3,)
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    hidden = torch.tanh(torch.tensor(x[1]) @ leaves["w1"] + leaves["b1"])
    ((hidden @ leaves["w2"] + leaves["b2"] - y[1]) ** 2).backward()
    for name, leaf in leaves.items():
        np.testing.assert_allclose(leaf.grad.numpy(), expected[name][1], rtol=1e-10)
    check = ch.grads_check(expected)
    check(expected)
    with pytest.raises(AssertionError, match="b1"):
        check({**expected, "b1": expected["b1"] + 1e-3})


def test_every_gradient_variant_but_the_compiled_one_gives_the_reference():
    import jax.numpy as jnp
    import torch

    def loss_torch(p, x, y):
        return (torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - y) ** 2

    def loss_jax(p, x, y):
        return (jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - y) ** 2

    params, x, y = ch.grad_inputs(SIZES)
    check = ch.grads_check(ch.grad_reference(params, x, y))
    variants = ch.grad_variants(loss_torch, loss_jax, params, x, y, "cpu")
    assert set(variants) == {v for claim in ch.GRAD_CLAIMS for v in claim[1:3]}
    for label, fn in variants.items():
        if label != "torch.compile(vmap(grad))":
            check(fn())


def test_the_fori_loop_of_writes_equals_vmap():
    import jax
    import jax.numpy as jnp

    args = [jnp.asarray(a) for a in ch.make_inputs("attention", 2, SIZES)]
    np.testing.assert_allclose(ch.fori_writes(ch.attention_jax, *args),
                               jax.vmap(ch.attention_jax)(*args), rtol=1e-6)


# --- claims: ids stay stable -----------------------------------------------------------------

def test_the_gradient_claims_keep_their_ids_and_scope():
    claims, timings = Recorder(), {v: timing(1e-3, label=v) for c in ch.GRAD_CLAIMS
                                   for v in c[1:3]}
    ch.register_grad_claims(claims, timings, SIZES, "CPU, 1 thread")
    assert set(claims.seen) == {"grads_torch_vmap_vs_loop", "grads_jax_vmap_vs_loop",
                                "grads_jit_vs_jit_loop", "grads_compile_vs_vmap",
                                "grads_jax_vs_torch_eager", "grads_jit_vs_compile"}
    question, baseline, candidate, headline = claims.seen["grads_jit_vs_compile"]
    assert question == ("per-example gradients, batch 3, 4->5->1 MLP, CPU, 1 thread: "
                        "jax.jit(vmap(grad)) against torch.compile(vmap(grad))")
    assert (baseline.label, candidate.label, headline) == ("torch.compile(vmap(grad))",
                                                           "jax.jit(vmap(grad))", True)


def test_the_sweep_claims_keep_their_ids_scope_and_headlines():
    claims = Recorder()
    ch.register_sweep_claims(claims, fake_sweep(), SIZES, "CPU, 1 thread")
    expected = {f"{w}_{c}" for w in ("dot", "attention")
                for c in ("torch_vmap_vs_loop", "jax_vmap_vs_loop", "jit_vmap_vs_jit_loop",
                          "vmap_vs_batched", "compile_vs_batched", "jit_vs_compile",
                          "jit_vs_vmap", "compile_vs_vmap_2", "compile_vs_vmap_8",
                          "fori_vs_vmap_2", "fori_vs_vmap_8")}
    expected |= {"attention_at_set_vs_loop_2", "attention_at_set_vs_loop_8"}
    assert set(claims.seen) == expected
    assert claims.seen["attention_jit_vs_compile"][0] == (
        "attention (T=3, d=2), batch 8, CPU, 1 thread: jax.jit(vmap) against torch.compile(vmap)")
    assert claims.seen["dot_fori_vs_vmap_2"][0].startswith("dot (d=4), batch 2, ")
    headlines = {c for c, seen in claims.seen.items() if seen[3]}
    assert headlines == {"attention_torch_vmap_vs_loop", "attention_jax_vmap_vs_loop",
                         "attention_jit_vs_compile"}


# --- readings --------------------------------------------------------------------------------

def test_compiled_gradient_readings():
    timings = {"torch.compile(vmap(grad))": timing(50e-6, first_call=1.5, harness_s=0.0),
               "jax.jit(vmap(grad))": timing(20e-6, first_call=0.25, harness_s=0.3e-6)}
    out = ch.compiled_grad_readings(timings)
    assert out["grads_medians_us"] == ("torch.compile(vmap(grad)) 50 µs and "
                                       "jax.jit(vmap(grad)) 20 µs")
    assert out["grads_first_calls"].endswith("jax.jit(vmap(grad)) 0.25 s")
    assert out["grads_harness_us"].endswith("jax.jit(vmap(grad)) 0.30 µs")


def test_recompiled_lists_only_timings_that_recompiled():
    sweep = fake_sweep()
    assert ch.recompiled(sweep) == {}
    sweep["dot", 2]["jax.vmap"] = timing(1e-3, recompiles=2)
    assert ch.recompiled(sweep) == {("dot", 2, "jax.vmap"): 2}


def test_dot_growth_reads_fixed_cost_or_arithmetic():
    flat = ch.dot_growth_readings(fake_sweep(lambda w, b, v: 1e-3 * (1 - b / 100)),
                                  SIZES.batch_sizes)  # 0.94x while the work grew 4x
    assert (flat["smallest_batch"], flat["largest_batch"], flat["batch_ratio"]) == (2, 8, 4)
    assert flat["dot_growth"].startswith("jax.jit(vmap) 0.94x")
    assert flat["dot_reading"].startswith("At this width most of a call's time is its fixed")
    grows = ch.dot_growth_readings(fake_sweep(lambda w, b, v: 1e-3 * b), SIZES.batch_sizes)
    assert grows["dot_reading"].startswith("Their times grew with the work")


def test_faults_table_and_readings_with_and_without_faulting_variants():
    sweep = fake_sweep(noisy={("attention", 8, "jax.vmap")})
    variants = {"jax.vmap": None, "JAX loop": None}
    quiet = ch.faults_table(variants, sweep["attention", 8], count=lambda fn: 3.0)
    assert quiet.loc["jax.vmap"].tolist() == [3.0, True]
    out = ch.faults_readings(quiet, sweep)
    assert out["faulting_variants"] == "none" and out["faults_reading"].startswith("so no variant")
    assert out["noisy_timings"] == "attention at batch 8: jax.vmap"
    faulty = ch.faults_table(variants, sweep["attention", 8], count=lambda fn: 250.0)
    out = ch.faults_readings(faulty, fake_sweep())
    assert out["faulting_variants"] == "jax.vmap (250), JAX loop (250)"
    assert out["faults_reading"].startswith("so the allocator regime did not")
    assert out["noisy_timings"] == "none"


def test_first_calls_and_break_even():
    sweep = fake_sweep()
    first = ch.first_calls_table(sweep, 8)
    assert len(first) == 2 * len(VARIANTS)
    assert ch.first_call_readings(first)["jax_jit_first_ms"] == pytest.approx(18.0)
    table = ch.break_even_table(sweep, 8)
    assert list(table.compiled) == ["torch.compile(vmap)", "jax.jit(vmap)"] * 2
    # torch.compile(vmap) is slower than torch.func.vmap here: it never pays
    assert np.isinf(table["break-even calls"].iloc[0])
    assert ch.shown_break_evens(table)["break-even calls"].iloc[0] == "never"


def test_break_even_text_follows_the_verdict():
    table = pd.DataFrame([{"workload": "attention", "compiled": "torch.compile(vmap)",
                           "break-even calls": 1234.0},
                          {"workload": "attention", "compiled": "jax.jit(vmap)",
                           "break-even calls": 56.0}])
    verdicts = {"attention_compile_vs_vmap_8": "faster", "attention_jit_vs_vmap": "tie"}
    assert ch.break_even_text(verdicts, table, "attention", "torch", 8) == "after about 1,200 calls"
    assert ch.break_even_text(verdicts, table, "attention", "jax", 8) == (
        "never on this build (no saving per call: tie)")


def test_dispatch_table_and_its_readings():
    def timer(truth):
        def run(fn, iterations, sync):
            return np.full(iterations, 1.0 if sync else truth)
        return run

    early = ch.dispatch_table({"jax.jit(vmap)": lambda: np.zeros(1),
                               "torch.func.vmap": lambda: np.zeros(1)}, [2, 4], timer(0.01))
    assert early.loc[0, "unsynced median / true"] == pytest.approx(0.01)
    assert early.loc[0, "calls returning early (per run)"] == 2
    out = ch.dispatch_readings(early, [2, 4])
    assert out["short_reading"] == "a reading of dispatch, not of work"
    assert out["long_reading"].startswith("the queue never filled")
    assert (out["run_shortest"], out["run_longest"]) == (2, 4)
    honest = ch.dispatch_table({"jax.jit(vmap)": lambda: np.zeros(1),
                                "torch.func.vmap": lambda: np.zeros(1)}, [2, 4], timer(0.9))
    out = ch.dispatch_readings(honest, [2, 4])
    assert out["short_reading"].startswith("already near the truth")
    assert out["long_reading"].startswith("once the queue is full")
    assert out["torch_unsynced_lo"] == out["torch_unsynced_hi"] == pytest.approx(0.9)


def test_per_call_times_and_faults_per_call_run_a_plain_function():
    assert ch.per_call_times(lambda: np.ones(3), 4, sync=True).shape == (4,)
    assert ch.faults_per_call(lambda: np.ones(3), calls=2) >= 0


def test_rss_readings():
    rss = {"torch.func.vmap": np.array([4.0, 0.0, 0.0]), "jax.jit(vmap)": np.array([0.0, 1.0, 2.0])}
    out = ch.rss_readings(rss, 16, 0.5)
    assert (out["rss_first_torch"], out["rss_nonzero_torch"], out["rss_nonzero_jax"],
            out["rss_calls"], out["rss_batch"]) == (4.0, 1, 2, 3, 16)


def test_plan_readings_with_and_without_library_fusions():
    plan = pd.DataFrame({"temp (MiB)": [1.0, 0.0], "scores (MiB, analytic)": [1.0, 4.0]},
                        index=[2, 8])
    custom, loop = SimpleNamespace(kind="custom"), SimpleNamespace(kind="loop")
    out = ch.plan_readings(plan, {2: [loop, custom], 8: [custom]})
    assert (out["scores_stored_batches"], out["library_batches"]) == ("2", "8")
    assert out["plan_reading"].startswith("There the whole attention runs inside library")
    out = ch.plan_readings(plan.assign(**{"temp (MiB)": [0.5, 0.5]}), {2: [loop], 8: [loop]})
    assert out["scores_stored_batches"] == out["library_batches"] == "no batch size"
    assert out["plan_reading"].startswith("No batch size ran")


def test_the_xla_plan_and_kernels_of_a_tiny_attention():
    plan, kernels = ch.xla_plan_table(SIZES)
    assert list(plan.index) == [2, 8] and set(kernels) == {2, 8}
    assert plan.loc[8, "output (MiB)"] == pytest.approx(8 * 3 * 2 * 4 / 2**20)
    out = ch.kernel_readings([np.ones((2, 4), np.float32)] * 2)
    assert set(out) == {"dot_vmap_kernels", "dot_fori_kernels"} and all(out.values())


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_fresh_process_setup_is_valid_python_with_the_workloads_source(framework):
    call = {"torch": "vmap(attention_torch)(*args)", "jax": "jitted(*args)"}[framework]
    setup = ch.peak_setup(framework, call, SIZES, 1, "cpu")
    ast.parse(setup)
    assert f"def attention_{framework}(q, k, v):" in setup and f"block({call})" in setup
    assert "(8, 3, 2)" in setup and ("jitted = jax.jit" in setup) == (framework == "jax")


def test_host_peak_readings_split_at_the_unfused_size():
    peaks = pd.Series({"jax.jit(vmap)": 1.0, "torch.func.vmap": 9.0})
    out = ch.host_peak_readings(peaks, output_mib=1.0, scores_mib=2.0)
    assert out["unfused_mib"] == 5.0
    assert (out["peaks_above"], out["peaks_below"]) == ("torch.func.vmap (9.0 MiB)",
                                                        "jax.jit(vmap) (1.0 MiB)")
    out = ch.host_peak_readings(peaks * 0, output_mib=1.0, scores_mib=2.0)
    assert out["peaks_above"] == "none"
    out = ch.host_peak_readings(peaks * 100, output_mib=1.0, scores_mib=2.0)
    assert out["peaks_below"] == "none"


def test_by_batch_groups_the_verdicts():
    verdicts = {"p_2": "faster", "p_8": "tie", "p_32": "faster"}
    assert ch.by_batch(verdicts, "p", [2, 8, 32]) == "faster at batch 2, 32; tie at batch 8"


def test_at_set_readings_grow_or_not():
    def median(extra):
        return lambda w, b, v: 1e-3 + (extra(b) * b if v == "JAX .at[].set loop" else 0)

    flat = ch.at_set_readings(fake_sweep(median(lambda b: 1e-6)), [2, 8], SIZES)
    assert flat["at_set_per_write"] == "1 µs at batch 2, 1 µs at batch 8"
    assert flat["at_set_output_kib"] == "0 KiB at 2, 0 KiB at 8"
    assert flat["at_set_reading"].startswith("The extra time per write hardly changed")
    grew = ch.at_set_readings(fake_sweep(median(lambda b: b * 1e-6)), [2, 8], SIZES)
    assert grew["at_set_reading"].startswith("The extra time per write grew with the output")
    some = ch.at_set_readings(fake_sweep(median(lambda b: (1 + b / 16) * 1e-6)), [2, 8], SIZES)
    assert some["at_set_reading"].startswith("The extra time per write grew 1.33-fold while "
                                             "the output grew 4-fold: a fixed cost")


def test_the_verdict_chosen_sentences():
    faster = {"grads_torch_vmap_vs_loop": "faster", "dot_vmap_vs_batched": "tie",
              "attention_vmap_vs_batched": "slower", "dot_torch_vmap_vs_loop": "faster",
              "attention_torch_vmap_vs_loop": "tie", "dot_jax_vmap_vs_loop": "withheld",
              "attention_jax_vmap_vs_loop": "faster"}
    assert ch.grads_reading(faster).startswith("A loop pays a backward pass")
    assert ch.grads_reading({**faster, "grads_torch_vmap_vs_loop": "tie"}).startswith(
        "At this size the loop")
    assert ch.batched_reading(faster).startswith("vmap's own work per call remains")
    assert ch.batched_reading({**faster, "attention_vmap_vs_batched": "faster"}).startswith(
        "On this build it cost nothing")
    assert ch.loop_reading(faster) == ("Eager vmap against the eager loop, PyTorch: faster for "
                                       "dot, tie for attention; JAX: withheld for dot, faster "
                                       "for attention.")


def test_summary_readings_glue_every_key_the_summary_reads():
    verdicts = {f"{w}_{c}": "tie" for w in ("dot", "attention")
                for c in ("torch_vmap_vs_loop", "jax_vmap_vs_loop", "vmap_vs_batched",
                          "jit_vs_vmap", "compile_vs_vmap_2", "compile_vs_vmap_8",
                          "fori_vs_vmap_2", "fori_vs_vmap_8")}
    verdicts |= {"attention_at_set_vs_loop_2": "slower", "attention_at_set_vs_loop_8": "slower",
                 "grads_torch_vmap_vs_loop": "faster"}
    sweep = fake_sweep()
    out = ch.summary_readings(verdicts, sweep, ch.break_even_table(sweep, 8), SIZES)
    assert out["attention_at_set_vs_loop_by_batch"] == "slower at batch 2, 8"
    assert out["break_even_dot_jax"] == "never on this build (no saving per call: tie)"
    assert {"at_set_reading", "grads_reading", "loop_reading", "batched_reading"} <= set(out)
    glued = {}
    ch.glue_all(out, glue=glued.__setitem__)
    assert glued == out


def test_the_figures_draw_from_fake_timings():
    import matplotlib.pyplot as plt

    sweep = fake_sweep()
    grads = {v: timing(1e-3, label=v) for c in ch.GRAD_CLAIMS for v in c[1:3]}
    dispatch = pd.DataFrame([{"variant": v, "run length": n, "unsynced median / true": 0.5,
                              "unsynced mean / true": 0.6}
                             for v in ("jax.jit(vmap)", "torch.func.vmap") for n in (2, 4)])
    rss = {"torch.func.vmap": np.zeros(3), "jax.jit(vmap)": np.ones(3)}
    for fig in (ch.plot_grads(grads, 3, "c"), ch.plot_sweep(sweep, [2, 8], "c"),
                ch.plot_first_calls(ch.first_calls_table(sweep, 8), sweep, 8, "c"),
                ch.plot_dispatch(dispatch, [2, 4], 8, "c"), ch.plot_rss(rss, 16, 0.5, "c")):
        assert fig.axes
        plt.close(fig)


def test_save_records_writes_every_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path))
    sweep = fake_sweep()
    grads = {v: timing(1e-3, label=v) for c in ch.GRAD_CLAIMS for v in c[1:3]}
    dispatch = pd.DataFrame([{"variant": "jax.jit(vmap)", "run length": 2,
                              "unsynced median / true": 0.5, "unsynced mean / true": 0.6}])
    plan = pd.DataFrame({"argument (MiB)": [1.0], "output (MiB)": [1.0], "temp (MiB)": [0.0]},
                        index=[8])
    records, path = ch.save_records(sweep, grads, 3, pd.Series({"jax.vmap": 2.0}), 8,
                                    dispatch, plan)
    assert path.exists()
    assert len(records.records) >= 2 * 2 * len(VARIANTS) + len(grads) + 1 + 2 + 3


def test_jit_matches_eager_on_this_jax_at_the_issues_size():
    check = ch.jit_matches_eager()  # jax-ml/jax#39103's size: wrong on jax 0.10.2's CPU
    assert check.rows == ch.JAX_39103_ROWS and check.eager_last == 32_768.0 ** 2
    assert check.matches and check.known_bug is None, check
    assert "does not show jax-ml/jax#39103" in ch.jit_check_reading(check)
    assert check.table()["rows that differ"].iat[0] == 0


def test_a_mismatch_is_reported_as_the_known_upstream_bug():
    wrong = ch.JitCheck("pattern", 32_769, "0.10.2", "cpu", 1073741824.0, 1065369600.0, 1)
    assert not wrong.matches and wrong.known_bug == ch.JAX_39103
    said = ch.jit_check_reading(wrong)
    assert "1,065,369,600" in said and "1,073,741,824" in said and "1 row differs" in said
    assert ("known upstream bug jax-ml/jax#39103 (https://github.com/jax-ml/jax/issues/39103)"
            in said)
    assert wrong.table()["jax.jit, last row"].iat[0] == "1,065,369,600"
    assert wrong.table()["upstream bug"].iat[0] == ch.JAX_39103
    with pytest.raises(ValueError, match="rows must be a positive count"):
        ch.jit_matches_eager(0)
