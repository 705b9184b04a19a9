"""Chapter 3's helpers and readings (deepdive.chapters.torch_compile): small real compiles
with counting backends, fake timings and claims for the sentences."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import torch
from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table

from deepdive.chapters import torch_compile as tc
from deepdive.core.timing import Timing


def timing(label, samples, session=1):
    return Timing(label, np.asarray(samples, dtype=float), 1, 0.0, session=session)


@dataclass
class FakeClaim:
    verdict: str
    low: float
    high: float
    tie_band: float = 0.05


def sine(x):
    return torch.sin(x) * 2


# --- set-up ---------------------------------------------------------------------------------

def test_scope_device_names_threads_or_the_gpu():
    assert tc.scope_device("cpu", 1) == "CPU, 1 thread"
    assert tc.scope_device("cpu", 4) == "CPU, 4 threads"
    assert tc.scope_device("cuda", 1, "NVIDIA H100") == "NVIDIA H100"
    assert tc.scope_device("cpu", 1, cpu_name="Xeon (1 of 2 cores)") == \
        "Xeon (1 of 2 cores), 1 PyTorch thread"
    assert tc.scope_device("cpu", 2, cpu_name="Xeon") == "Xeon, 2 PyTorch threads"


def test_timing_record_keeps_and_records_every_timing():
    added = []

    class Records:
        def add_timing(self, *args):
            added.append(args)

    record = tc.TimingRecord(Records())
    timings = {"a": timing("a", [1.0, 2.0]), "b": timing("b", [3.0, 4.0])}
    assert record.keep(timings, "exp", "16 floats") is timings
    assert record.timings == list(timings.values())
    assert [a[:4] for a in added] == [("exp", "torch", "a", "16 floats"),
                                      ("exp", "torch", "b", "16 floats")]


def test_torch_log_messages_collects_and_restores_handlers():
    logger = __import__("logging").getLogger("torch._dynamo")
    before = list(logger.handlers), logger.propagate
    with tc.torch_log_messages() as messages:
        logger.warning("a message")
        logger.warning("   ")  # blank: dropped
    assert messages == ["a message"]
    assert (list(logger.handlers), logger.propagate) == before


def test_own_copy_has_its_own_code_object():
    copy = tc.own_copy(sine)
    assert copy.__code__ is not sine.__code__ and copy.__name__ == "sine"
    torch.testing.assert_close(copy(torch.ones(3)), sine(torch.ones(3)))


# --- Dynamo -------------------------------------------------------------------------------

def test_guard_summary_counts_kinds_and_names_tensor_inputs():
    guards = ["Create Function: TENSOR_MATCH\nL['x'] ...", "Create Function: TENSOR_MATCH\nL['w1']",
              "Create Function: GLOBAL_STATE\n", "no kind here"]
    kinds, tensors = tc.guard_summary(guards)
    assert kinds == {"TENSOR_MATCH": 2, "GLOBAL_STATE": 1}
    assert tensors == ["x", "w1"]


def test_guard_summary_on_a_real_explain():
    explained = torch._dynamo.explain(tc.own_copy(sine))(torch.ones(3))
    kinds, tensors = tc.guard_summary(explained.out_guards)
    assert "x" in tensors and kinds.get("TENSOR_MATCH", 0) >= 1


def test_recompile_reasons_and_summarise_log():
    logged = ["Recompiling function f\n  triggered by:\n - tensor 'x' size mismatch",
              "other\nsecond line\nthird"]
    assert tc.recompile_reasons(logged) == logged[:1]
    assert tc.summarise_log(logged[0]) == "recompiling: tensor 'x' size mismatch"
    assert tc.summarise_log("Recompiling f\nno reason") == "recompiling: ?"
    assert tc.summarise_log(logged[1]) == "other second line"


def test_graph_counter_counts_graphs_and_runs():
    counter = tc.GraphCounter()
    compiled = torch.compile(tc.own_copy(sine), backend=counter, dynamic=False)
    compiled(torch.ones(2))
    compiled(torch.ones(2))
    compiled(torch.ones(3))
    assert len(counter.graphs) == 2 and counter.runs == 3


def test_limit_table_and_its_readings():
    counter = tc.GraphCounter()
    limited = torch.compile(tc.own_copy(sine), backend=counter, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2):
        table = tc.limit_table(limited, sine, [1, 2, 3, 4, 1], counter)
    assert list(table["graphs compiled so far"]) == [1, 2, 2, 2, 2]
    assert list(table["ran"]) == ["compiled graph"] * 2 + ["eagerly"] * 2 + ["compiled graph"]
    readings = tc.limit_readings(table)
    assert readings["limit_hit_call"] == 3
    assert readings["limit_eager_calls"] == 1 and readings["limit_cached_calls"] == 1
    assert readings["limit_eager_log"] == "none of them logged anything"


def test_limit_readings_branches_on_fake_tables():
    table = pd.DataFrame({"ran": ["compiled graph", "eagerly", "eagerly"],
                          "what PyTorch logged": ["-", "hit config.recompile_limit", "again"]},
                         index=pd.Index([1, 2, 3], name="call"))
    assert tc.limit_readings(table)["limit_eager_log"] == "1 of them logged a message"
    with pytest.raises(ValueError, match="no call hit the recompile limit"):
        tc.limit_readings(table.assign(**{"what PyTorch logged": "-"}))


def test_graphs_for_calls_with_contexts_and_options():
    sizes = [torch.ones(n) for n in (1, 2, 3, 4)]
    assert len(tc.graphs_for_calls(sine, sizes)) == 2  # automatic dynamic shapes
    assert len(tc.graphs_for_calls(sine, sizes, dynamic=False)) == 4
    x = torch.ones(4, requires_grad=True)
    assert len(tc.graphs_for_calls(sine, [x, x], [None, torch.no_grad])) == 2


def test_placeholder_values_names_inputs():
    graphs = tc.graphs_for_calls(sine, [torch.ones(2), torch.ones(3)])
    values = tc.placeholder_values(graphs[-1])
    assert any("s" in v for v in values)  # a symbolic size


def test_fix_rows_counts_graphs_breaks_and_nans():
    def where(x, w):
        y = x @ w
        peak = y.abs().max()
        return torch.tanh(torch.where(peak > 10, y / peak, y))

    def original(x, w):
        y = x @ w
        if y.abs().max() > 10:
            y = y / y.abs().max()
        return torch.tanh(y)

    rows = tc.fix_rows((where,), original, torch.randn(4, 8), torch.randn(8, 3))
    assert rows.loc["where", "graphs"] == 1 and rows.loc["where", "graph breaks"] == 0
    assert rows.loc["where", "NaN gradient entries at peak = 0"] == rows.loc["where", "of"] == 24


def test_guarded_nans_text():
    assert tc.guarded_nans_text({"a": 0, "b": 0}) == "none"
    assert tc.guarded_nans_text({"a": 0, "b": 3}) == "0 (a) and 3 (b)"


# --- the cost of a call -----------------------------------------------------------------

def test_dynamo_pieces_and_guards_pass():
    compiled = torch.compile(tc.own_copy(sine), backend="eager")
    x = torch.ones(4)
    compiled(x)
    pieces = tc.dynamo_pieces(compiled, {"x": x})
    assert pieces.guards.check({"x": x}) is True
    torch.testing.assert_close(pieces.compiled_fn(x)[0], sine(x))
    assert any(n.startswith("__compiled_fn") for n in pieces.names)
    with pytest.raises(AssertionError, match="guard check failed"):
        tc.dynamo_pieces(compiled, {"x": torch.ones(4, dtype=torch.float64)})
    tc.guards_pass(True)
    with pytest.raises(AssertionError):
        tc.guards_pass(False)


def cosine(x):  # its own: automatic dynamic shapes remember sizes by code location
    return torch.cos(x) + 1


def test_call_pieces_opens_an_inductor_call():
    keeper = tc.InductorKeepingGraph()
    compiled = torch.compile(tc.own_copy(cosine), backend=keeper)
    x = torch.ones(8)
    torch.testing.assert_close(compiled(x), cosine(x))
    pieces = tc.call_pieces(compiled, keeper, cosine, x)
    torch.testing.assert_close(pieces.generated_call([x])[0], cosine(x))
    pieces.kernel(x, pieces.kernel_out)
    torch.testing.assert_close(pieces.kernel_out, cosine(x))
    with pytest.raises(ValueError):  # one graph kept, one kernel: nothing else to open
        tc.call_pieces(compiled, tc.InductorKeepingGraph(), cosine, x)


US = {"backend=inductor": 10.0, "__compiled_fn alone": 6.0, "guard check alone": 0.5,
      "Inductor's call() alone": 4.0, "its C++ kernel alone": 0.2, "PyTorch op by op": 3.0}


def test_call_split_table_and_timings_frame():
    parts = tc.call_split_table(US)
    assert parts.loc["Dynamo's side: frame evaluation, guards, rewritten bytecode",
                     "µs (median)"] == 4.0
    assert parts.loc["  of which the wrappers", "µs (median)"] == 2.0
    assert parts["share of the call (%)"].iloc[0] == 100
    frame = tc.timings_frame({"a": timing("a", [1e-6, 2e-6, 3e-6])})
    assert frame.loc["a", "median (µs)"] == pytest.approx(2.0) and frame.loc["a", "noisy"]


def test_profile_component_sorts_every_kind():
    assert tc.profile_component("/cache/ab/x.py", "call", "/cache") == \
        "Inductor's generated call()"
    assert tc.profile_component("torch/_functorch/x.py", "f") == "AOTAutograd runtime wrappers"
    assert tc.profile_component("x.py", "runtime_wrapper") == "AOTAutograd runtime wrappers"
    assert tc.profile_component("torch/_inductor/output_code.py", "f") == \
        "Inductor's OutputCode wrapper"
    assert tc.profile_component("torch/_dynamo/eval_frame.py", "f").startswith("Dynamo")
    assert tc.profile_component("site/torch/__init__.py", "f").startswith("Dynamo")
    assert tc.profile_component("nb.py", "tiny", traced="tiny").startswith("the function's")
    assert tc.profile_component("nb.py", "tiny") == "other"


def test_profile_shares_add_to_100():
    shares = tc.profile_shares(tc.own_copy(sine), torch.ones(2), 50, traced="sine")
    assert shares.sum() == pytest.approx(100)
    assert list(shares) == sorted(shares, reverse=True)


def test_profile_agreement_warns_only_beyond_the_tolerance():
    assert tc.profile_agreement(40, 42, 20, 21) == \
        "the two attributions differ by 2.0 and 1.0 percentage points"
    assert "read the profile's shares with care" in tc.profile_agreement(40, 60, 20, 21)


def test_call_cost_readings():
    split = pd.Series({tc.DYNAMO_PARTS[0]: 30.0, tc.DYNAMO_PARTS[1]: 10.0,
                       tc.WRAPPER_PARTS[0]: 15.0, "other": 45.0})
    readings = tc.call_cost_readings(US, split)
    assert readings["tiny_dynamo_us"] == 4.0 and readings["tiny_dynamo_pct"] == 40.0
    assert readings["tiny_overhead_us"] == 6.0 and readings["tiny_wrappers_pct"] == 20.0
    assert readings["profile_dynamo_pct"] == 40.0 and readings["profile_output_code_pct"] == 0
    assert readings["profile_agreement"].endswith("0.0 and 5.0 percentage points")


# --- AOTAutograd ------------------------------------------------------------------------

def test_capture_graphs_ops_and_in_place():
    def step(average, x):
        average.mul_(0.5)
        return average + x

    average = torch.ones(3)
    graphs, out = tc.capture_graphs(step, average, torch.ones(3),
                                    keep_inference_input_mutations=True)
    torch.testing.assert_close(out, torch.full((3,), 1.5))
    torch.testing.assert_close(average, torch.full((3,), 0.5))
    assert set(graphs) == {"dynamo", "forward"}
    assert tc.in_place_ops(tc.ops_in(graphs["dynamo"])) == ["mul_"]
    assert tc.in_place_ops(tc.ops_in(graphs["forward"])) == ["aten.copy_.default"]
    assert tc.in_place_ops(["aten.add.Tensor", "add"]) == []


def test_decomposition_tables_and_the_fallback_sentence():
    add, mul, sub = torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.sub.Tensor
    add_, prims = torch.ops.aten.add_.Tensor, torch.ops.prims.convert_element_type.default
    counts, frame, fallbacks = tc.compare_decomposition_tables(
        {add: 0, add_: 0, prims: 0}, {add: 0, mul: 0, sub: 0},
        lowerings={mul: 0, sub: 0}, fallbacks={sub: 0})
    assert tc.functional_overloads({add: 0, add_: 0}) == {add}
    assert counts["decomp_inductor_all"] == 3 and counts["decomp_inductor"] == 2
    assert counts["decomp_both"] == 1 and counts["decomp_core_only"] == 2
    assert counts["decomp_core_only_lowered"] == 1 and counts["decomp_prims"] == 1
    assert fallbacks == ["aten.sub.Tensor"]
    assert frame.loc["aten.sub.Tensor", "how Inductor runs it"] == "fallback: the ATen kernel"
    assert frame.loc["aten.mul.Tensor", "how Inductor runs it"] == "its own lowering"
    _, unknown, _ = tc.compare_decomposition_tables({}, {mul: 0}, lowerings={}, fallbacks={})
    assert unknown.loc["aten.mul.Tensor", "how Inductor runs it"] == "?"
    assert tc.fallback_sentence([], 2, 2) == "it runs none of them as an ATen kernel"
    assert tc.fallback_sentence(["a.b"], 1, 2) == \
        "the other one, `a.b`, it runs as the ATen kernel, a library call"
    assert tc.fallback_sentence(["a.b", "c.d"], 1, 3) == \
        "2 of them (`a.b`, `c.d`) it runs as ATen kernels, library calls"


def test_decomposed_ops_and_saved_for_backward():
    def loss(x, w):
        return (x @ w).softmax(dim=-1).sum()

    x, w = torch.randn(4, 3), torch.randn(3, 3, requires_grad=True)
    plain, out = tc.capture_graphs(loss, x, w)
    out.backward()  # AOTAutograd compiles the backward graph at its first call
    decomposed, out = tc.capture_graphs(loss, x, w, decompositions=select_decomp_table())
    out.backward()
    changed = tc.decomposed_ops(plain, decomposed)
    assert "aten._softmax.default" in changed["decomposed_away"]
    assert changed["decomposed_into"]

    def gate(x, w):
        y = x @ w
        return (y.sin() * torch.sigmoid(y)).cos().sum()

    x, w = torch.randn(64, 32), torch.randn(32, 32)
    saved = tc.saved_for_backward(gate, default_partition, x, w)
    fewer = tc.saved_for_backward(gate, min_cut_rematerialization_partition, x, w)
    assert saved["new memory saved (KiB)"] > fewer["new memory saved (KiB)"] > 0
    assert fewer["backward ops"] > saved["backward ops"] > 0


# --- Inductor's code ----------------------------------------------------------------------

WRAPPER = """# AOT ID: 1
cpp_fused_add_gelu_0 = async_compile.cpp('''
kernel A
''')
def call(args):
    buf0 = empty()
    extern_kernels.mm(a, b, out=buf0)
    extern_kernels.addmm(c, d, e, out=buf1)
    cpp_fused_add_gelu_0(buf0, buf1)
"""


def test_kernel_names_library_calls_and_excerpt():
    assert tc.kernel_names(WRAPPER) == ["cpp_fused_add_gelu_0"]
    assert tc.library_calls(WRAPPER) == ["extern_kernels.addmm", "extern_kernels.mm"]
    assert len(tc.library_calls(WRAPPER, matmuls_only=True)) == 2
    assert tc.kernel_excerpt(WRAPPER, "cpp_fused_add_gelu_0", cpu=True) == \
        "cpp_fused_add_gelu_0 = async_compile.cpp('''\nkernel A"
    assert tc.kernel_excerpt(WRAPPER, "cpp_fused_add_gelu_0", cpu=False, lines=4).endswith(
        "def call(args):")


def test_wrapper_comparison():
    assert tc.kernel_sources(WRAPPER) == ["\nkernel A\n"]
    assert "# AOT ID: 1" not in tc.wrapper_lines(WRAPPER)
    assert tc.wrapper_difference(WRAPPER, WRAPPER) == "no difference"
    fewer = WRAPPER.replace("    buf0 = empty()\n", "")
    assert tc.wrapper_difference(fewer, WRAPPER) == "1 fewer buf0 line"
    more = WRAPPER + "    buf2 = empty()\n    buf3 = empty()\n    (x)\n"
    assert tc.wrapper_difference(more, WRAPPER) == \
        "1 more buf2 line, 1 more buf3 line, 1 more other line"


def test_inductor_output_code_collects_what_is_saved():
    from torch._inductor.graph import GraphLowering

    with tc.inductor_output_code() as codes:
        GraphLowering.save_output_code("some code")
    assert codes == ["some code"]


def test_choice_table_without_generated_code():
    x = torch.ones(4)
    fns = {"op by op": sine, "inductor": torch.compile(tc.own_copy(sine), backend="eager")}
    table, codes = tc.choice_table(fns, (x,), lambda out: torch.testing.assert_close(out, sine(x)))
    assert set(codes.values()) == {""}
    assert list(table["same kernels as inductor"]) == ["", ""]
    assert list(table["what PyTorch logged"]) == ["-", "-"]
    with pytest.raises(AssertionError):
        tc.choice_table({"inductor": sine}, (x,), lambda out: torch.testing.assert_close(out, x))


# --- readings -----------------------------------------------------------------------------

def test_difference_us_and_extra_text():
    a, b = timing("a", [3e-6] * 7), timing("b", [1e-6] * 7)
    assert tc.difference_us(a, b) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0))
    with pytest.raises(ValueError, match="same rounds"):
        tc.difference_us(a, timing("c", [1e-6] * 7, session=2))
    assert tc.extra_text(2.0, 1.0, 3.0) == "2.0 µs more (95% interval +1.0 to +3.0 µs)"
    assert tc.extra_text(-2.0, -3.0, -1.0) == "2.0 µs less (95% interval -3.0 to -1.0 µs)"


def test_mlp_split_note_both_branches():
    assert tc.mlp_split_note((4.0, 3, 5), (3.0, 2.5, 3.5), 0.3, 2.0).startswith(
        "Most of the extra cost lies in Dynamo's side")
    assert "(10% of it)" in tc.mlp_split_note((4.0, 3, 5), (3.0, 2.5, 3.5), 0.3, 2.0)
    for extra, side, guard, tiny in (((-1.0, -2, 0), (3.0, 2.5, 3.5), 0.3, 2.0),
                                     ((4.0, 3, 5), (1.0, 0.5, 1.5), 0.3, 0.1),
                                     ((4.0, 3, 5), (3.0, 2.5, 3.5), 2.0, 2.0),
                                     ((4.0, 3, 5), (3.0, 2.5, 3.5), 0.3, 2.6)):
        assert tc.mlp_split_note(extra, side, guard, tiny).startswith("Which part")


def test_mlp_tie_notes_for_each_side_of_one():
    assert tc.mlp_tie_note(FakeClaim("faster", 1.2, 1.3), 0.02) == ""
    assert tc.mlp_tie_short(FakeClaim("slower", 0.7, 0.8)) == ""
    below = FakeClaim("tie", 0.96, 0.98)
    assert "wholly below 1 (by its ends, an Inductor call took 2% to 4% more" in \
        tc.mlp_tie_note(below, 0.02)
    assert tc.mlp_tie_note(below, 0.02).endswith("reached ±2.0%.")
    assert "wholly above 1 (by its ends, an Inductor call took 2% to 4% less" in \
        tc.mlp_tie_note(FakeClaim("tie", 1.02, 1.04), 0.02)
    assert "the interval includes 1" in tc.mlp_tie_note(FakeClaim("tie", 0.98, 1.02), 0.02)
    assert tc.mlp_tie_short(below).endswith("lies wholly below 1")
    assert tc.mlp_tie_short(FakeClaim("tie", 1.01, 1.02)).endswith("wholly above 1")
    assert tc.mlp_tie_short(FakeClaim("tie", 0.99, 1.02)).endswith("on both sides of 1")


def test_mlp_readings_from_fake_timings():
    rounds = 9
    modes = {"PyTorch op by op": timing("p", [10e-6] * rounds),
             "PyTorch op by op, A/A copy": timing("c", [10e-6] * rounds),
             "inductor": timing("i", [8e-6] * rounds),
             "backend=eager": timing("e", [14e-6] * rounds),
             "backend=eager: __compiled_fn alone": timing("f", [11e-6] * rounds),
             "backend=eager: guard check alone": timing("g", [0.5e-6] * rounds)}
    tiny = {"backend=eager": timing("te", [5e-6] * rounds),
            "PyTorch op by op": timing("tp", [2e-6] * rounds)}
    readings = tc.mlp_readings(modes, tiny, FakeClaim("faster", 1.2, 1.3), 1.0)
    assert readings["mlp_plain_us"] == pytest.approx(10) and readings["mlp_tie_note"] == ""
    assert readings["mlp_eager_extra"].startswith("4.0 µs more")
    assert readings["tiny_eager_extra"].startswith("3.0 µs more")
    assert readings["mlp_dynamo_side"].startswith("3.0 µs")
    assert readings["mlp_graph_call_extra"].startswith("1.0 µs more")
    assert readings["mlp_split_note"].startswith("Most of")


def test_plot_mlp_calls_captions_what_a_cpu_skips():
    rounds = [1e-6, 2e-6, 3e-6]
    timings = {"a": timing("a", rounds), "b": timing("b", rounds)}
    cpu = tc.plot_mlp_calls(timings, ["a", "b"], cpu=True)
    gpu = tc.plot_mlp_calls(timings, ["a"], cpu=False)
    assert cpu.axes[0].get_title().endswith("per backend")
    assert gpu.axes[0].get_title().endswith("and mode")
    texts = " ".join(t.get_text() for t in cpu.texts)
    assert "not timed on a CPU" in texts


def test_modes_sentence_on_a_gpu_and_a_cpu():
    glued = {f"{k}{s}": f"<{k}{s}>" for k in ("mlp_autotune", "mlp_autotune_graphs",
                                             "mlp_reduce_overhead") for s in ("", "_ratio")}
    gpu = tc.modes_sentence(glued, None, cuda=True)
    assert "was <mlp_autotune> default Inductor (<mlp_autotune_ratio>)" in gpu
    modes = pd.DataFrame({
        "same kernels as inductor": [True, True, False, ""],
        "wrapper code against inductor": ["2 more x lines", "2 more x lines", "1 fewer y line",
                                          ""],
        "what PyTorch logged": ["-", "-", "-", "skipping cudagraphs due to cpu device"]},
        index=["mode=reduce-overhead", "mode=max-autotune-no-cudagraphs", "mode=max-autotune",
               "backend=cudagraphs"])
    cpu = tc.modes_sentence({}, modes, cuda=False)
    assert cpu.startswith("On this CPU, 2 of the 3 Inductor modes generated exactly")
    assert "`reduce-overhead` and `max-autotune-no-cudagraphs`: 2 more x lines" in cpu
    assert "`skipping cudagraphs due to cpu device`" in cpu
    none = tc.modes_sentence({}, modes.assign(**{"same kernels as inductor": False}), cuda=False)
    assert "0 of the 3" in none and "none compared" in none


def test_widest_band_text():
    assert tc.widest_band_text([0.03, 0.05], 0.03) == "up to ±5.0% here"
    assert tc.widest_band_text([0.03], 0.03) == "none reached further than the build's band here"


def test_box_numbers_and_summary_calls():
    box = tc.box_numbers(10.0, 6.0, 40.0, 0.25, 3.21, 8, 2)
    assert "took 10.0 µs, of which 6.0 µs" in box
    assert "before the graph runs, 40% of the whole call)" in box
    assert "took 3.2 s" in box and "compiled 2 graphs" in box and "8 with dynamic=False" in box
    glued = {"tiny_inductor": "slower than", "tiny_inductor_ratio": "0.5x",
             "mlp_inductor": "tied with", "mlp_inductor_ratio": "1.0x"}
    plain = tc.summary_calls(glued, 6.0, 40.0, "")
    assert "Inductor was slower than PyTorch op by op (0.5x)" in plain
    assert plain.endswith("it was tied with it (1.0x).")
    assert tc.summary_calls(glued, 6.0, 40.0, "a tie").endswith("(1.0x, a tie).")


def test_claims_table_markdown_escapes_and_numbers_rows():
    table = pd.DataFrame({"verdict": ["faster"], "band": ["±3.0%"]},
                         index=pd.Index(["a *b* | c"], name="question"))
    text = tc.claims_table_markdown(table)
    lines = text.splitlines()
    assert lines[0].startswith("```{list-table} Every comparison of this chapter")
    assert ":name: tbl-compile-verdict" in lines
    assert "* - question" in lines and "  - verdict" in lines
    assert "* - a \\*b\\* \\| c" in lines
    assert lines[-1] == "```"
