"""Chapter 3 (torch.compile from the inside) writes its code on the page; no package module
holds it. These check that the page shows every compile it times, with its options and the
checks made before timing, that it still makes every claim the committed build made, and
that the helpers it defines behave as the page says, run on small real compiles."""

import ast
import csv
import logging
import re
from pathlib import Path

import jupytext
import numpy as np
import pytest
import torch

from deepdive.book import claim_ids
from deepdive.core.timing import Timing

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "notebooks" / "03_torch_compile.md"
BUILD_CLAIMS = ROOT / "book" / "data" / "builds" / \
    "2026-11-28_intel-xeon-2core_torch-2.15.0_jax-0.12.0.1" / "claims.csv"
HIDDEN = {"remove-cell", "remove-input", "hide-cell", "hide-input"}
MODULE = ROOT / "src" / "deepdive" / "chapters" / "torch_compile.py"  # removed: the page holds it
GPU_CLAIMS = ("mlp_autotune", "mlp_autotune_graphs", "mlp_reduce_overhead")
MODES = {"reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}
# Inductor's call() returns a tuple; the page times the tensor in it, which needs no walk
TIMED_CALL = '"Inductor\'s call() alone": lambda: generated_call([x16])[0]'
# Column names of the page's tables
SO_FAR, LOGGED = "graphs compiled so far", "what PyTorch logged"
SAVED_KIB, SAME_KERNELS = "new memory saved (KiB)", "same kernels as inductor"


def cells():
    """(source, tags) of every code cell of the page."""
    return [(c.source, set(c.metadata.get("tags", [])))
            for c in jupytext.read(PAGE).cells if c.cell_type == "code"]


def shown_calls() -> list[ast.Call]:
    return [node for source, tags in cells() if not tags & HIDDEN
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]


def keywords(call: ast.Call) -> dict:
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords
            if isinstance(k.value, ast.Constant)}


@pytest.fixture(scope="module")
def page():
    """A namespace holding the page's imports and its top-level definitions (functions,
    classes, and the constant tuples they read: VIEW_OPS, DYNAMO_PARTS, ...), without
    running its experiments."""
    namespace, definitions = {}, []
    for source, _ in cells():
        lines = source.splitlines()
        for node in ast.parse(source).body:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            text = "\n".join(lines[first - 1:node.end_lineno])
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(text, namespace)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) or (
                    isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id.isupper() and isinstance(node.value, ast.Tuple)):
                definitions.append(text)
    for text in definitions:
        exec(text, namespace)
    namespace["INDUCTOR_CACHE"] = Path("/nonexistent/inductor-cache")
    return namespace


def sine(x):
    return torch.sin(x) * 2


def timing(label, samples, session=1):
    return Timing(label, np.asarray(samples, dtype=float), 1, 0.0, session=session)


# --- the page shows what it times -------------------------------------------------------------

def test_no_package_module_holds_the_pages_code():
    assert not MODULE.exists()
    imports = [node.module for source, _ in cells() for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.ImportFrom) and node.module]
    assert not [m for m in imports if m.startswith("deepdive.chapters")]


def test_every_backend_and_mode_is_compiled_in_a_shown_cell():
    compiles = [keywords(c) for c in shown_calls() if ast.unparse(c.func) == "torch.compile"]
    backends = {k["backend"] for k in compiles if isinstance(k.get("backend"), str)}
    modes = {k["mode"] for k in compiles if "mode" in k}
    assert {"eager", "aot_eager", "inductor", "cudagraphs"} <= backends
    assert modes == MODES
    assert {"dynamic": False} in [{k: v for k, v in c.items() if k == "dynamic"}
                                  for c in compiles]


def test_both_timings_are_shown_and_check_every_variant_before_timing():
    compares = [c for c in shown_calls() if ast.unparse(c.func) == "compare"]
    assert len(compares) == 2  # the tiny function's pieces, the MLP block's choices
    assert all("check" in {k.arg for k in c.keywords} for c in compares)


def test_the_inductor_call_is_timed_with_its_tensor_taken_out_of_the_tuple():
    """A tensor needs no readiness walk (sync.pace): a 3 µs call stays clear of its cost."""
    shown = "\n".join(source for source, tags in cells() if not tags & HIDDEN)
    assert TIMED_CALL in shown


def test_fullgraph_is_shown_failing_on_the_graph_break():
    failing = [source for source, tags in cells() if "raises-exception" in tags]
    assert len(failing) == 1 and "fullgraph=True" in failing[0]


def test_the_page_makes_every_claim_the_committed_build_made_and_its_gpu_claims():
    text = PAGE.read_text()
    with BUILD_CLAIMS.open() as f:
        built = {row["claim_id"] for row in csv.DictReader(f)
                 if row["chapter"] == "03_torch_compile"}
    assert len(built) == 6
    for claim_id in sorted(built | set(GPU_CLAIMS)):
        assert f'"{claim_id}"' in text, claim_id
    assert claim_ids.unknown(sorted(built | set(GPU_CLAIMS))) == []


def test_every_section_the_page_points_to_is_a_label_of_the_page():
    """The box's and the summary's pointers ({ref}`compile-...`) land on this page."""
    text = PAGE.read_text()
    labels = set(re.findall(r"^\((compile-[\w-]+)\)=$", text, re.M))
    pointed = set(re.findall(r"\{ref\}`(compile-[\w-]+)`", text))
    assert len(pointed) >= 4 and pointed <= labels


def test_the_plan_and_environment_print_in_a_folded_output_after_the_set_up():
    setup, plan = [(source, tags) for source, tags in cells()
                   if "PLAN" in source and "plans.plan" in source or "PLAN.summary" in source]
    assert "hide-cell" in setup[1] and ".check()" in setup[0] and "PLAN.summary" not in setup[0]
    assert plan[1] == {"hide-output"} and "env.describe()" in plan[0]


# --- the page's helpers -------------------------------------------------------------------------

def test_own_copy_gives_a_function_its_own_dynamo_cache(page):
    copy = page["own_copy"](sine)
    assert copy.__code__ is not sine.__code__ and copy.__name__ == "sine"
    first, second = page["GraphCounter"](), page["GraphCounter"]()
    torch.compile(copy, backend=first)(torch.ones(3))
    torch.compile(page["own_copy"](sine), backend=second)(torch.ones(3))
    assert len(first.graphs) == len(second.graphs) == 1  # neither reused the other's entry


def test_torch_log_messages_keeps_messages_and_restores_the_handlers(page):
    logger = logging.getLogger("torch._dynamo")
    before = list(logger.handlers), logger.propagate
    with page["torch_log_messages"]() as messages:
        logger.warning("kept")
        logger.warning("   ")  # blank: dropped
    assert messages == ["kept"]
    assert (list(logger.handlers), logger.propagate) == before


def test_call_sizes_shows_the_limit_then_eager_calls_then_cached_graphs(page):
    counter = page["GraphCounter"]()
    limited = torch.compile(page["own_copy"](sine), backend=counter, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2):
        table = page["call_sizes"](limited, sine, [1, 2, 3, 4, 1], counter)
    assert list(table[SO_FAR]) == [1, 2, 2, 2, 2]
    assert list(table["ran"]) == ["compiled graph"] * 2 + ["eagerly"] * 2 + ["compiled graph"]
    assert table.loc[3, LOGGED].count("recompile_limit") == 1
    assert counter.runs == 3


def test_graphs_for_calls_counts_each_trigger_with_a_fresh_cache(page):
    count = page["graphs_for_calls"]
    sizes = [torch.ones(n) for n in (1, 2, 3, 4)]
    assert len(count(sine, sizes)) == 2  # automatic dynamic shapes: one symbolic graph
    assert len(count(sine, sizes, dynamic=False)) == 4
    x = torch.ones(4, requires_grad=True)
    assert len(count(sine, [x, x], [None, torch.no_grad])) == 2
    assert len(count(sine, [x, x])) == 1


def test_dynamo_pieces_are_the_guard_check_and_the_compiled_graph(page):
    compiled = torch.compile(page["own_copy"](sine), backend="eager")
    x = torch.ones(4)
    compiled(x)
    guards, compiled_fn, names = page["dynamo_pieces"](compiled)
    assert guards.check({"x": x}) is True
    assert guards.check({"x": torch.ones(4, dtype=torch.float64)}) is False
    torch.testing.assert_close(compiled_fn(x)[0], sine(x))
    assert any(n.startswith("__compiled_fn") for n in names)


def cosine(x):  # its own: automatic dynamic shapes remember sizes by code location
    return torch.cos(x) + 1


def test_inductor_keeping_keeps_the_graph_whose_call_and_kernel_run_alone(page):
    import inspect

    kept = []
    compiled = torch.compile(page["own_copy"](cosine), backend=page["inductor_keeping"](kept))
    x = torch.ones(8)
    torch.testing.assert_close(compiled(x), cosine(x))
    (graph,) = kept
    torch.testing.assert_close(graph.current_callable([x])[0], cosine(x))
    module = vars(inspect.getmodule(graph.current_callable))
    assert [name for name in module if "cpp_fused" in name]


def test_capture_graphs_functionalizes_and_saved_for_backward_reads_the_partitions(page):
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    def step(average, x):
        average.mul_(0.5)
        return average + x

    average = torch.ones(3)
    graphs, out = page["capture_graphs"](step, average, torch.ones(3),
                                         keep_inference_input_mutations=True)
    torch.testing.assert_close(out, torch.full((3,), 1.5))
    torch.testing.assert_close(average, torch.full((3,), 0.5))  # written back, as in eager
    assert set(graphs) == {"dynamo", "forward"}
    in_place, ops_in = page["in_place"], page["ops_in"]
    assert in_place(ops_in(graphs["dynamo"])) == ["mul_"]
    assert in_place(ops_in(graphs["forward"])) == [str(torch.ops.aten.copy_.default)]

    def gate(x, w):
        y = x @ w
        return (y.sin() * torch.sigmoid(y)).cos().sum()

    x, w = torch.randn(64, 32), torch.randn(32, 32)
    saved = {}
    for partition in (default_partition, min_cut_rematerialization_partition):
        weight = torch.nn.Parameter(w.clone())
        graphs, loss = page["capture_graphs"](gate, x, weight, partition_fn=partition)
        loss.backward()
        torch.testing.assert_close(weight.grad, torch.func.grad(gate, argnums=1)(x, w))
        saved[partition] = page["saved_for_backward"](graphs)
    default, mincut = saved[default_partition], saved[min_cut_rematerialization_partition]
    assert default[SAVED_KIB] > mincut[SAVED_KIB] > 0
    assert mincut["backward ops"] > default["backward ops"] > 0


KERNEL, MM, ADDMM = "cpp_fused_add_gelu_0", "extern_kernels.mm", "extern_kernels.addmm"
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


def test_the_wrapper_readers_find_kernels_library_calls_and_differences(page):
    assert page["kernel_names"](WRAPPER) == [KERNEL]
    assert page["library_calls"](WRAPPER) == [ADDMM, MM]
    assert len(page["library_calls"](WRAPPER, matmuls_only=True)) == 2
    assert page["kernel_excerpt"](WRAPPER, KERNEL, cpu=True).splitlines()[-1] == "kernel A"
    assert page["wrapper_difference"](WRAPPER, WRAPPER) == "none"
    fewer = WRAPPER.replace("    buf0 = empty()\n", "")
    assert page["wrapper_difference"](fewer, WRAPPER) == "-1 buf0"
    more = WRAPPER + "    buf2 = empty()\n    (x)\n"
    assert page["wrapper_difference"](more, WRAPPER) == "+1 buf2, +1 other"


def test_first_calls_checks_each_choice_and_compares_only_generated_code(page):
    x = torch.ones(4)
    fns = {"plain": sine, "inductor": torch.compile(page["own_copy"](sine), backend="eager")}
    table = page["first_calls"](fns, (x,), lambda out: torch.testing.assert_close(out, sine(x)))
    assert list(table.index) == ["plain", "inductor"]
    assert list(table["generated kernels"]) == [0, 0]
    assert list(table[SAME_KERNELS]) == ["", ""]  # nothing generated: blank
    with pytest.raises(AssertionError):
        page["first_calls"]({"inductor": sine}, (x,),
                            lambda out: torch.testing.assert_close(out, x))


def test_paired_differences_need_timings_of_one_compare_call(page):
    a, b = timing("a", [3e-6] * 7), timing("b", [1e-6] * 7)
    median, low, high = page["paired_difference_us"](a, b)
    assert median == pytest.approx(2.0) and low == pytest.approx(2.0) == high
    with pytest.raises(AssertionError):
        page["paired_difference_us"](a, timing("c", [1e-6] * 7, session=2))


# (file, function) of a profiled frame -> which part of the call it is, by the page's names
FRAMES = {("/nonexistent/inductor-cache/ab/x.py", "call"): "generated",
          ("torch/_functorch/x.py", "f"): "aot", ("x.py", "runtime_wrapper"): "aot",
          ("torch/_inductor/output_code.py", "f"): "output_code",
          ("torch/_dynamo/eval_frame.py", "f"): "dynamo",
          ("site/torch/__init__.py", "f"): "dynamo",
          ("nb.py", "tiny_sine"): "frame", ("nb.py", "g"): "other"}


def test_profile_part_sorts_every_kind_of_frame(page):
    dynamo, frame = page["DYNAMO_PARTS"]
    aot, output_code = page["WRAPPER_PARTS"]
    names = {"dynamo": dynamo, "frame": frame, "aot": aot, "output_code": output_code,
             "other": "other", "generated": "Inductor's generated call()"}
    found = {where: page["profile_part"](*where) for where in FRAMES}
    assert found == {where: names[kind] for where, kind in FRAMES.items()}
