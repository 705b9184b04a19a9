"""deepdive.chapters.jit_xla: chapter 2's readings, each branch on small fake claims and
timings, and its workloads on tiny arrays."""

import io
import math

import numpy as np
import pandas as pd
import pytest

from deepdive.book.claims import Claim
from deepdive.chapters import jit_xla
from deepdive.core.timing import Timing

NUMBERS = {"faster": (2.0, 1.9, 2.1), "slower": (0.5, 0.45, 0.55), "tie": (1.0, 0.99, 1.01),
           "withheld": (1.02, 1.0, 1.05)}


def claim(verdict, claim_id="c", ratio=None):
    """A claim whose numbers give `verdict` under a ±3% band, as the one rule rereads it."""
    r, low, high = NUMBERS[verdict]
    return Claim("02_jit_xla", claim_id, "q", ratio or r, low, high, verdict, "why", False, 15,
                 "cpu", "small", 0.03, 0.03, 0.03, "", "a", "b", False)


def timing(label, seconds, first_call=0.0, samples=(1.0, 1.0, 1.0)):
    return Timing(label, np.asarray(samples) * seconds, 1, first_call)


def verdicts(**by_id):
    return lambda claim_id: by_id[claim_id]


# --- workloads ------------------------------------------------------------------------------

def test_chain_alternates_multiply_and_add():
    x = np.ones(3)
    assert np.allclose(jit_xla.chain(x, 1), 1.0001)
    assert np.allclose(jit_xla.chain(x, 2), 1.5001)
    assert jit_xla.chain(x, 0) is x


def test_every_chain_variant_passes_its_own_check():
    host = np.arange(8, dtype=np.float32)
    calls = jit_xla.longest_variants(host, 4, "cpu")
    checks = jit_xla.longest_checks(calls, host, 4)
    assert set(checks) == set(calls)
    for name, call in calls.items():
        checks[name](call())
    with pytest.raises(AssertionError):
        checks["jax.jit, one op"](calls["jax.jit"]())  # four ops are not one


def test_the_copies_and_a_new_function_compute_what_they_say():
    import jax.numpy as jnp
    import torch

    host = np.arange(4, dtype=np.float32)
    for call in jit_xla.copy_variants(host, "cpu").values():
        assert np.array_equal(call().numpy(), host)
    expected = jit_xla.chain(host.astype(np.float64), 3)
    assert np.allclose(jit_xla.jit_new_function(jnp.asarray(host), 3), expected)
    assert np.allclose(jit_xla.compile_new_function(torch.from_numpy(host), 3).numpy(), expected)


def test_new_pages_counts_nothing_for_a_call_that_allocates_nothing():
    kept = np.zeros(16)
    assert jit_xla.new_pages(lambda: kept, array_pages=1.0) == pytest.approx(0.0, abs=0.5)


def test_timings_survive_the_trip_through_a_child_process_record():
    record = jit_xla.as_record({"a": Timing("a", np.array([1.0, 2.0]), 4, 0.5, 2)})
    back = jit_xla.from_record(record, session=-3)["a"]
    assert (list(back.samples), back.calls_per_block, back.first_call, back.recompiles,
            back.session) == ([1.0, 2.0], 4, 0.5, 2, -3)


def test_the_timing_log_keeps_where_each_timing_was_made():
    log = jit_xla.TimingLog()
    timings = log.compare("here", {"a": lambda: np.ones(2)}, {"a": lambda out: None})
    log.keep("there", {"b": timing("b", 1.0, samples=(1.0, 1.0, 5.0, 9.0))})
    assert [t.label for t in log.timings()] == ["a", "b"] and "a" in timings
    assert "there: b" in log.noisy() and len(log.noisy()) <= 2


def test_an_unknown_child_task_fails_loudly():
    with pytest.raises(RuntimeError, match="unknown task"):
        jit_xla.fresh_process("no such task")


# --- the machine ----------------------------------------------------------------------------

def test_the_machine_readers_fall_back_where_linux_files_are_missing(tmp_path):
    assert jit_xla.xla_pool_threads(tmp_path / "none") is None
    tasks = tmp_path / "task"
    for i, name in enumerate(["tf_XLAEigen", "python", "tf_XLAEigen"]):
        (tasks / str(i)).mkdir(parents=True)
        (tasks / str(i) / "comm").write_text(name + "\n")
    (tasks / "3").mkdir()  # a thread that ended: no comm file
    assert jit_xla.xla_pool_threads(tasks) == 2
    assert jit_xla.thp_mode(tmp_path / "none") == "unknown"
    (tmp_path / "thp").write_text("always [madvise] never\n")
    assert jit_xla.thp_mode(tmp_path / "thp") == "madvise"
    assert jit_xla.llc_size(tmp_path / "none") == "an amount this system does not report"
    (tmp_path / "llc").write_text("32768K\n")
    assert jit_xla.llc_size(tmp_path / "llc") == "32 MiB"
    (tmp_path / "llc").write_text("512K\n")
    assert jit_xla.llc_size(tmp_path / "llc") == "512 KiB"


# --- readings -------------------------------------------------------------------------------

def test_op_counts_and_lists_read_as_prose():
    assert jit_xla.op_counts(["mul", "add", "mul"]) == "2 mul, 1 add"
    assert jit_xla.listed(["a"]) == "a"
    assert jit_xla.listed(["a", "b", "c"]) == "a, b and c"
    assert jit_xla.values_ms([3.21, 11.2]) == "3.2 and 11.2 ms"


def test_the_gelu_reading_follows_the_kernels():
    assert "not fused into the GEMM" in jit_xla.gelu_reading(["custom", "loop"])
    assert "differently" in jit_xla.gelu_reading(["loop"])


def fusion_timings():
    t = {name: timing(name, s) for name, s in (
        ("NumPy", 8.0), ("PyTorch eager", 8.0), ("JAX op by op", 8.0), ("jax.jit", 1.0),
        ("torch.compile", 1.0), ("jax.jit, second build", 1.0),
        ("torch.compile, second build", 1.0), ("jax.jit, one op", 1.0),
        ("torch.compile, one op", 1.0))}
    t["torch.compile"] = timing("torch.compile", 1.0, first_call=5.0)
    copies = {jit_xla.OWNED: timing(jit_xla.OWNED, 1.0), jit_xla.FRESH: timing(jit_xla.FRESH, 2.0)}
    return t, copies


def test_pages_table_counts_passes_and_new_arrays():
    t, copies = fusion_timings()
    pages = {v: 0.0 for v in {**t, **copies}}
    table = jit_xla.pages_table(t, pages, copies, longest=8)
    assert "jax.jit, second build" not in table.index
    assert table.loc["PyTorch eager", "x owned copies"] == pytest.approx(1.0)  # 8 s / 8 passes
    assert table.loc["jax.jit", "x fresh copies"] == pytest.approx(0.5)
    assert math.isnan(table.loc[jit_xla.OWNED, "x fresh copies"])
    assert jit_xla.shown_columns(table, ["x fresh copies"]).loc[jit_xla.OWNED].item() == "none"


def test_pages_reading_says_none_or_the_most():
    assert jit_xla.pages_reading(0.001).startswith("no variant of PyTorch or JAX faulted in new")
    assert "more than 0.20" in jit_xla.pages_reading(0.2)


@pytest.mark.parametrize(("fused", "multiples", "expected"), [
    ({"faster"}, {"jax.jit": 1.0, "torch.compile": 1.1, "PyTorch eager": 1.0,
                  "JAX op by op": 0.9}, "memory traffic"),
    ({"faster"}, {"jax.jit": 3.0, "torch.compile": 1.1, "PyTorch eager": 1.0,
                  "JAX op by op": 0.9}, "by more or less"),
    ({"faster", "withheld"}, {"jax.jit": 1.0, "torch.compile": 1.0, "PyTorch eager": 1.0,
                              "JAX op by op": 1.0}, "withheld a verdict"),
    ({"faster", "tie"}, {"jax.jit": 1.0, "torch.compile": 1.0, "PyTorch eager": 1.0,
                         "JAX op by op": 1.0}, "did not find fusion paying"),
])
def test_fusion_reading_by_verdicts(fused, multiples, expected):
    assert expected in jit_xla.fusion_reading(fused, multiples)


def test_flipped_reading_names_what_the_allocator_changed():
    same = {c: "faster" for c in jit_xla.MADE_TWICE}
    assert jit_xla.flipped_reading(verdicts(**same, **{f"defaults_{c}": "faster"
                                                         for c in same})) == (0, "none")
    flipped = {f"defaults_{c}": "faster" for c in same} | {"defaults_fusion_jit": "tie"}
    count, text = jit_xla.flipped_reading(verdicts(**same, **flipped))
    assert count == 1 and text.startswith("jax.jit against JAX op by op: faster with memory kept,")


def test_defaults_pages_reading_all_fresh_or_some_kept():
    all_fresh = {"PyTorch eager": 8.0, "JAX op by op": 8.0, "jax.jit": 1.0, "torch.compile": 1.0,
                 jit_xla.FRESH: 1.0}
    assert jit_xla.defaults_pages_reading(all_fresh, 8).startswith("every output")
    assert jit_xla.defaults_pages_reading({**all_fresh, "jax.jit": 0.0}, 8).startswith("4 of the 5")


def test_numpy_reading_credits_huge_pages_only_when_they_could_apply():
    assert "huge page granted" in jit_xla.numpy_reading(0.1, 8, True, "madvise")
    assert "did not visibly reduce" in jit_xla.numpy_reading(0.1, 8, True, "never")
    assert "did not visibly reduce" in jit_xla.numpy_reading(8.0, 8, True, "always")
    assert "did not visibly reduce" in jit_xla.numpy_reading(0.1, 8, False, "always")


def test_defaults_drop_lists_both_medians():
    t, _ = fusion_timings()
    assert "PyTorch eager 8000.0 ms with glibc's defaults, 8000.0 ms with memory kept" in \
        jit_xla.defaults_drop(t, t)


def test_said_reads_a_claim_for_its_candidate():
    assert jit_xla.said(claim("tie"), "jax.jit").startswith("tied with jax.jit (1.000x [0.990,")


def one_vs_chain(jit, jit_d, comp, comp_d, kinds=(["loop"], ["loop"])):
    return jit_xla.one_vs_chain_reading(
        verdicts(jit_one_vs_chain=jit, defaults_jit_one_vs_chain=jit_d,
                 compile_one_vs_chain=comp, defaults_compile_one_vs_chain=comp_d),
        *kinds, ("1 loop fusion", "2 loop fusions"))


def test_one_vs_chain_reading_one_verdict_for_all_four():
    assert one_vs_chain("tie", "tie", "tie", "tie") == (
        "For both compilers under both settings the two tied, as the one-pass model predicts.")


def test_one_vs_chain_reading_mixed_verdicts_and_kernels():
    text = one_vs_chain("slower", "faster", "tie", "withheld")
    assert "Contrary to the one-pass model" in text and "jax.jit with freed memory kept." in text
    assert "by more than the one-pass model allows" in text
    assert "For torch.compile with freed memory kept the two tied" in text
    assert "withheld a verdict" in text and "single XLA loop fusion" in text
    other = one_vs_chain("slower", "slower", "slower", "tie", (["loop"], ["loop", "loop"]))
    assert "one operation runs 1 loop fusion, the chain 2 loop fusions" in other


def test_k1_and_eager_gap_readings_explain_a_gap_only_when_it_is_decided():
    tie, faster, slower = claim("tie"), claim("faster"), claim("slower")
    assert jit_xla.k1_reading(tie, faster, 1.0, 10.0).startswith("With glibc's defaults")
    assert jit_xla.k1_reading(faster, faster, 1.0, 10.0).startswith("With glibc's defaults")
    gap = jit_xla.k1_reading(faster, slower, 1.0, 10.0)
    assert "about 100 times the whole cost" in gap and "not explain the gap" in gap
    assert jit_xla.eager_gap_reading(claim("withheld"), faster, 1.0, 10.0).startswith("With")
    assert "so that gap is not dispatch" in jit_xla.eager_gap_reading(slower, slower, 2.0, 10.0)


def test_break_even_counts_read_as_prose():
    assert jit_xla.two_figures(0.0934) == "0.093" and jit_xla.two_figures(math.inf) == "never"
    assert jit_xla.break_even_label(3.0, 1, True, "tie") == jit_xla.NO_SAVING
    assert jit_xla.break_even_label(3.0, 1, False, "tie") == "3"
    assert jit_xla.break_even_label(3.0, 2, True, "faster") == "3"
    assert jit_xla.pays_after(0.0934) == "after 0.093 calls"
    assert jit_xla.pays_after(math.inf).startswith("at no point")


def test_stage_table_divides_compile_cost_by_time_saved():
    from deepdive.core.compilation import CompileStages

    runs = {4: [CompileStages(0.001, 0.002, 0.007)] * 3}
    fusion = {4: {"JAX op by op": timing("e", 0.004), "jax.jit": timing("j", 0.002),
                  "PyTorch eager": timing("p", 0.004),
                  "torch.compile": timing("c", 0.002, first_call=1.002)}}
    row = jit_xla.stage_table(runs, fusion).loc[4]
    assert row["jax.jit compile (ms)"] == pytest.approx(7.0)
    assert row["jax.jit break-even calls"] == pytest.approx(5.0)
    assert row["torch.compile break-even calls"] == pytest.approx(500.0)


def test_regime_finding_keeps_only_steady_headlines():
    steady = {c: "faster" for c in jit_xla.HEADLINE_CANDIDATES}
    both = {**steady, **{f"defaults_{c}": "faster" for c in steady}}
    kept, text = jit_xla.regime_finding(verdicts(**both))
    assert kept == list(steady) and text.endswith("none changed with the allocator.")
    kept, text = jit_xla.regime_finding(verdicts(**{**both, "defaults_fusion_jit": "tie"}))
    assert "fusion_jit" not in kept and "2 kept their verdict there and stand" in text
    assert text.startswith("3 of this box")
    assert "so it stays" in text
    moved = {**both, "defaults_fusion_jit": "tie", "defaults_new_function_jit": "slower"}
    kept, text = jit_xla.regime_finding(verdicts(**moved))
    assert kept == ["fusion_compile_vs_jit"] and "1 kept its verdict there and stands" in text
    assert "so they stay" in text


def test_times_as_long_reads_the_ratio_the_long_way():
    assert jit_xla.times_as_long(1.5, "eager", "jit") == "eager took 1.50 times as long"
    assert jit_xla.times_as_long(0.5, "eager", "jit") == "jit took 2.00 times as long"


@pytest.mark.parametrize(("kept", "default", "expected"), [
    ("tie", "tie", "did not change"), ("slower", "faster", "depended on the allocator"),
    ("tie", "faster", "depended on the allocator"), ("faster", "slower", "changed the verdict")])
def test_new_function_reading(kept, default, expected):
    assert expected in jit_xla.new_function_reading(kept, default, 8)


def test_direct_test_agrees_disagrees_or_says_nothing():
    assert " agrees:" in jit_xla.direct_test(claim("faster"), 0.5, "It")
    assert "disagrees" in jit_xla.direct_test(claim("faster"), 2.0, "It")
    assert " agrees:" in jit_xla.direct_test(claim("slower"), 2.0, "It")
    assert "neither confirms" in jit_xla.direct_test(claim("tie"), 0.5, "It")


def test_cache_off_reading():
    assert "Neither later setting" in jit_xla.cache_off_reading([1, 2, 3])
    assert "changed what was written" in jit_xla.cache_off_reading([1, 1, 1])


def test_widened_bands_names_sides_setting_and_cause():
    saved = pd.DataFrame({"question": ["chain of 8 ops, freed memory kept: a against b", "q: x"],
                          "decision_band": [0.081, 0.03], "widened_by": ["A/A control", None]})
    assert jit_xla.widened_bands(saved) == "a against b, freed memory kept: ±8.1% (by A/A control)"
    assert jit_xla.widened_bands(saved.iloc[1:]) == "none"


def test_xla_flag_readers():
    text = "--xla_gpu_autotune_level=4 ... 0 = off; 4 = with+check+init"
    assert jit_xla.xla_gpu_autotune_level(text) == "4 (with+check+init)"
    assert jit_xla.xla_gpu_autotune_level("--xla_gpu_autotune_level=7") == "7"
    with pytest.raises(ValueError, match="autotune"):
        jit_xla.xla_gpu_autotune_level("nothing")
    assert "newer than" in jit_xla.xla_revision_note("xla_cpu_experimental_ynn_fusion_type")
    assert jit_xla.xla_revision_note("") == "Its defaults may differ from that revision's."


def test_jax_log_collects_and_lets_go():
    import logging

    with jit_xla.jax_log() as messages:
        logging.getLogger("jax").warning("hello")
    logging.getLogger("jax").warning("after")
    assert messages == ["hello"]


def test_typed_commands_echo_what_they_feed():
    transcript = io.StringIO()
    typed = jit_xla.TypedCommands("p x\nc\n", transcript)
    assert typed.readline() == "p x\n" and transcript.getvalue() == "p x\n"


def test_dynamo_counts_graphs_per_dynamic_setting():
    assert jit_xla.dynamo_graphs(False, sizes=(2, 3)) == 2
    assert jit_xla.dynamo_graphs(True, sizes=(2, 3)) == 1


def test_the_stream_pads_to_buckets_and_compiles_per_shape():
    assert [jit_xla.bucket(n) for n in (1, 3, 4, 5)] == [1, 4, 4, 8]
    stream = [np.ones(3, np.float32), np.ones(5, np.float32)]
    padded = jit_xla.padded_stream(stream, pad=True)
    assert [len(v) for v, _, _ in padded] == [4, 8] and int(padded[0][1].sum()) == 3
    out = jit_xla.whole_stream(lambda v, mask, n: (v * mask).sum() / n, padded)()
    assert np.allclose(out, [1.0, 1.0])


def test_no_cache_used_fails_on_a_new_kernel_library(tmp_path):
    with jit_xla.no_cache_used(tmp_path):
        pass
    with pytest.raises(AssertionError, match="kernel library"), jit_xla.no_cache_used(tmp_path):
        (tmp_path / "k.so").write_text("")


def test_save_records_writes_timings_compile_costs_and_bandwidth(tmp_path, monkeypatch):
    from deepdive.book.results import Results

    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path))
    table = pd.DataFrame({"jax.jit trace (ms)": [1.0], "jax.jit lower (ms)": [2.0],
                          "jax.jit compile (ms)": [3.0], "torch.compile first call (s)": [1.5]},
                         index=pd.Index([4], name="k"))
    t, copies = fusion_timings()
    records = Results("02_jit_xla")
    jit_xla.save_records(records, {"fusion_chain": {4: t}, "stream": {6: {"exact": t["NumPy"]}}},
                         table, 2.0, 1024, 1.0)
    frame = records.frame()
    assert set(frame["framework"]) == {"numpy", "torch", "jax"}
    total = frame[frame["metric"] == "compile_total"]["value"].item()
    assert total == pytest.approx(0.006)
    assert frame[frame["experiment"] == "plain_copy"]["value"].item() == pytest.approx(2048.0)


def test_figures_draw_without_error():
    import matplotlib

    matplotlib.use("Agg")
    from deepdive.core.compilation import CompileStages

    t, copies = fusion_timings()
    fusion = {1: t, 2: t}
    assert jit_xla.plot_fusion(fusion, [1, 2], 1.0, 32.0, "cap")
    names = ["jax.jit", jit_xla.OWNED]
    assert jit_xla.plot_allocators({**t, **copies}, {**t, **copies}, names, 2, 32.0, "cap")
    assert jit_xla.plot_dispatch({"jax.jit": t["jax.jit"]}, 16, "cap")
    runs = {k: [CompileStages(0.001, 0.002, 0.003)] * 3 for k in (1, 2)}
    table = jit_xla.stage_table(runs, fusion)
    labels = {c: ["never", "2"] for c in ("jax.jit break-even calls",
                                          "torch.compile break-even calls")}
    assert jit_xla.plot_compile_costs(runs, table, labels, 3, "cap")


def test_one_vs_chain_reading_names_a_compiler_once_when_the_allocator_changed_nothing():
    text = one_vs_chain("tie", "tie", "withheld", "withheld")
    assert text.startswith("For jax.jit under both allocator settings the two tied")
    assert "For torch.compile under both allocator settings the rule withheld" in text
