"""Chapter 3 (torch.compile from the inside): the helpers that open up each stage of a
compiled call, and the readings that turn the page's measurements into its sentences and
tables.

The page shows the technique (a function, `torch.compile` with a backend, what it prints);
this module holds what would otherwise crowd it: counting backends, the capture of
AOTAutograd's graphs, the pieces of one compiled call timed alone, the grouping of a
profile, the comparison of the backends' generated code, and the sentences the page glues.
"""

from __future__ import annotations

import contextlib
import cProfile
import difflib
import logging
import pstats
import re
import time
import types
import unittest.mock
from collections import Counter
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CHOICE_LOG", "CallPieces", "DYNAMO_PARTS", "GraphCounter", "InductorKeepingGraph",
    "TABLE_CAPTION", "TimingRecord", "VIEW_OPS", "WRAPPER_PARTS", "box_numbers",
    "call_cost_readings", "call_pieces", "call_split_table", "capture_graphs", "choice_table",
    "claims_table_markdown", "compare_decomposition_tables", "decomposed_ops", "difference_us",
    "dynamo_pieces", "extra_text", "fallback_sentence", "fix_rows", "functional_overloads",
    "graphs_for_calls", "guard_summary", "guards_pass", "guarded_nans_text", "in_place_ops",
    "inductor_output_code", "kernel_excerpt", "kernel_names", "kernel_sources",
    "library_calls", "limit_readings", "limit_table", "mlp_readings", "mlp_split_note",
    "mlp_tie_note", "mlp_tie_short", "modes_sentence", "ops_in", "own_copy",
    "placeholder_values", "plot_mlp_calls", "profile_agreement", "profile_component",
    "profile_shares", "recompile_reasons", "saved_for_backward", "scope_device",
    "summarise_log", "summary_calls", "timings_frame", "torch_log_messages",
    "widest_band_text", "wrapper_difference", "wrapper_lines",
]


# --- Set-up -----------------------------------------------------------------------------

def scope_device(device: str, threads: int, gpu_name: str = "", cpu_name: str = "") -> str:
    """The device named in every claim's question, 'CPU, 1 thread' or the GPU's name; with
    `cpu_name`, the CPU as the prose names it: '<cpu_name>, 1 PyTorch thread'."""
    if device != "cpu":
        return gpu_name
    noun = "thread" if threads == 1 else "threads"
    return f"{cpu_name}, {threads} PyTorch {noun}" if cpu_name else f"CPU, {threads} {noun}"


class TimingRecord:
    """Every timing of the chapter: kept for its noise record (`claims.glue_noise`) and
    written to its results file (`Results.add_timing`)."""

    def __init__(self, records, framework: str = "torch"):
        self.records, self.framework, self.timings = records, framework, []

    def keep(self, timings: dict, experiment: str, size: str) -> dict:
        """Record the timings of one `compare` call; returns them unchanged."""
        for label, timing in timings.items():
            self.timings.append(timing)
            self.records.add_timing(experiment, self.framework, label, size, timing)
        return timings


class _KeepMessages(logging.Handler):
    def __init__(self, messages: list):
        super().__init__()
        self.messages = messages

    def emit(self, record):
        text = record.getMessage().strip()
        if text and not record.name.startswith("torch.__trace"):  # structured-trace records
            self.messages.append(text)


@contextlib.contextmanager
def torch_log_messages():
    """Collect what PyTorch logs inside the block (a list of messages), instead of printing
    it to stderr; the loggers' handlers are restored afterwards."""
    messages: list[str] = []
    names = ["torch", *(n for n in logging.root.manager.loggerDict if n.startswith("torch."))]
    loggers = [logging.getLogger(name) for name in names]
    saved = [(lg, lg.handlers, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.handlers, lg.propagate = [_KeepMessages(messages)], False
    try:
        yield messages
    finally:
        for lg, handlers, propagate in saved:
            lg.handlers, lg.propagate = handlers, propagate


def own_copy(fn):
    """The same function under a new code object, hence with its own Dynamo cache: variants
    compiled from one function would otherwise share a cache, and each call would check the
    guards of the other variants' entries first."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


# --- Dynamo: guards and recompiles ------------------------------------------------------

def guard_summary(guards) -> tuple[dict[str, int], list[str]]:
    """Dynamo's guards (`explain(...).out_guards`, or their text) as counts by kind, and the
    input names that carry a TENSOR_MATCH guard."""
    texts = [str(g) for g in guards]
    kinds = Counter(t.split("Create Function: ")[1].split("\n")[0] for t in texts
                    if "Create Function: " in t)
    tensors = [m[1] for t in texts if "TENSOR_MATCH" in t
               for m in [re.search(r"L\['(\w+)'\]", t)] if m]
    return dict(kinds.most_common()), tensors


def recompile_reasons(messages: list[str]) -> list[str]:
    """The recompilation messages among what PyTorch logged."""
    return [m for m in messages if m.startswith("Recompiling")]


class GraphCounter:
    """A Dynamo backend that keeps each graph it is given (`graphs`) and counts each run of
    a compiled graph (`runs`); the graphs run as Dynamo captured them."""

    def __init__(self):
        self.graphs, self.runs = [], 0

    def __call__(self, graph_module, example_inputs):
        self.graphs.append(graph_module)

        def run_graph(*args):
            self.runs += 1
            return graph_module.forward(*args)

        return run_graph


def summarise_log(message: str) -> str:
    """One line for a logged message: a recompilation's failed guard, else its first two
    lines."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if lines and lines[0].startswith("Recompiling"):
        reason = next((line for line in lines if line.startswith("- ")), "- ?")
        return "recompiling: " + reason[2:]
    return " ".join(lines[:2])


def limit_table(compiled, reference, sizes, counter: GraphCounter):
    """Call `compiled` on a vector of each size in turn, with Dynamo's recompilation log on,
    checking every output against `reference`: per call, the graphs compiled so far, whether
    a compiled graph ran, and what PyTorch logged."""
    import pandas as pd
    import torch

    rows = []
    torch._logging.set_logs(recompiles=True)
    try:
        with torch_log_messages() as logged:
            for call, n in enumerate(sizes, start=1):
                seen, runs_before, x = len(logged), counter.runs, torch.randn(n)
                torch.testing.assert_close(compiled(x), reference(x))
                rows.append({"call": call, "input shape": f"({n},)",
                             "graphs compiled so far": len(counter.graphs),
                             "ran": "compiled graph" if counter.runs > runs_before else "eagerly",
                             "what PyTorch logged": " / ".join(map(summarise_log, logged[seen:]))
                             or "-"})
    finally:
        torch._logging.set_logs(recompiles=False)
    return pd.DataFrame(rows).set_index("call")


def limit_readings(table) -> dict:
    """What the recompile-limit table says: the call that hit the limit, the later calls
    that ran eagerly and whether they logged, the later calls served by cached graphs."""
    hits = table.index[table["what PyTorch logged"].str.contains("recompile_limit")]
    if len(hits) == 0:
        raise ValueError("no call hit the recompile limit: the demonstration did not show it")
    hit = int(hits[0])
    after = table.loc[hit + 1:]
    eager = after[after["ran"] == "eagerly"]
    logging_calls = int((eager["what PyTorch logged"] != "-").sum())
    return {"limit_hit_call": hit, "limit_eager_calls": len(eager),
            "limit_eager_log": "none of them logged anything" if logging_calls == 0
            else f"{logging_calls} of them logged a message",
            "limit_cached_calls": int((after["ran"] == "compiled graph").sum())}


def graphs_for_calls(fn, inputs, contexts=None, **options) -> list:
    """The graphs Dynamo hands a counting backend when a fresh compile of `fn` (its own
    cache) is called on each of `inputs`, call i inside `contexts[i]()` where given."""
    counter = GraphCounter()
    compiled = __import__("torch").compile(own_copy(fn), backend=counter, **options)
    for i, x in enumerate(inputs):
        context = contexts[i] if contexts and contexts[i] else contextlib.nullcontext
        with context():
            compiled(x)
    return counter.graphs


def placeholder_values(graph_module) -> list[str]:
    """What each input of a captured graph is: its example value (a tensor with symbolic
    sizes, or a SymInt) or its name."""
    return [str(n.meta.get("example_value", n.target)) for n in graph_module.graph.nodes
            if n.op == "placeholder"]


def fix_rows(fixes, original, x, w):
    """Each version of a branchy function checked against `original`, with its graph count,
    graph breaks, and the NaN entries of its gradient at weights of zero (peak = 0)."""
    import pandas as pd
    import torch

    rows = []
    for fix in fixes:
        torch.testing.assert_close(fix(x, w), original(x, w))
        found = torch._dynamo.explain(fix)(x, w)
        w_zero = torch.zeros_like(w, requires_grad=True)  # y = 0 everywhere, so peak = 0
        fix(x, w_zero).sum().backward()
        rows.append({"version": fix.__name__, "graphs": found.graph_count,
                     "graph breaks": found.graph_break_count,
                     "NaN gradient entries at peak = 0": int(w_zero.grad.isnan().sum()),
                     "of": w_zero.grad.numel()})
    return pd.DataFrame(rows).set_index("version")


def guarded_nans_text(nans: dict[str, int]) -> str:
    """'none' when no guarded version gave a NaN gradient entry, else the counts by name."""
    if all(n == 0 for n in nans.values()):
        return "none"
    return " and ".join(f"{n} ({name})" for name, n in nans.items())


# --- What a compiled call costs ---------------------------------------------------------

class InductorKeepingGraph:
    """`backend="inductor"` (`compile_fx`) with a hook that keeps each compiled graph, so
    its generated `call()` and kernels can be called alone."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph_module, example_inputs):
        from torch._inductor import config
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner(gm, inputs, **options):
            compiled = compile_fx_inner(gm, inputs, **options)
            self.graphs.append(compiled)
            return compiled

        # No FX-graph cache: a hit would return the cached graph without calling `inner`.
        with config.patch(fx_graph_cache=False):
            return compile_fx(graph_module, example_inputs, inner_compile=inner)


@dataclass
class CallPieces:
    """The parts of one compiled call that can be called alone: Dynamo's guard check (the
    C++ guard manager of the cache entry) on the call's locals, `__compiled_fn_…` (what the
    rewritten bytecode calls), and, for Inductor, its generated `call()` and its kernel."""

    names: tuple
    guards: object
    frame_locals: dict
    compiled_fn: object
    generated_call: object = None
    kernel: object = None
    kernel_out: object = None


def dynamo_pieces(compiled, frame_locals: dict) -> CallPieces:
    """The guard check and `__compiled_fn_…` of a function compiled once (one cache entry);
    checks that the guards pass on `frame_locals`."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    original = getattr(compiled, "_torchdynamo_orig_callable", compiled)
    (entry,) = _debug_get_cache_entry_list(original.__code__)
    guards = entry.guard_manager.root
    if not guards.check(frame_locals):
        raise AssertionError("the guard check failed on the given arguments")
    name = next(n for n in entry.code.co_names if n.startswith("__compiled_fn"))
    return CallPieces(entry.code.co_names, guards, frame_locals, original.__globals__[name])


def guards_pass(passed) -> None:
    """A `compare` check for a timed guard check: it must pass on the timed arguments."""
    if passed is not True:
        raise AssertionError(f"the guard check failed on the timed arguments ({passed!r})")


def call_pieces(compiled, kept: InductorKeepingGraph, reference, x) -> CallPieces:
    """`dynamo_pieces` of a one-input function compiled through `InductorKeepingGraph`,
    plus Inductor's generated `call()` and its one C++ kernel; each checked against
    `reference(x)` before it is returned."""
    import sys

    import torch

    pieces = dynamo_pieces(compiled, {"x": x})
    expected = reference(x)
    torch.testing.assert_close(pieces.compiled_fn(x)[0], expected)
    (graph,) = kept.graphs
    generated = graph.current_callable
    module = sys.modules[type(generated.__self__).__module__]
    (kernel_name,) = [name for name in vars(module) if name.startswith("cpp_fused")]
    kernel, out = getattr(module, kernel_name), torch.empty_like(x)
    kernel(x, out)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(generated([x])[0], expected)
    pieces.generated_call, pieces.kernel, pieces.kernel_out = generated, kernel, out
    return pieces


def call_split_table(us: dict[str, float]):
    """The whole Inductor call split into what was timed alone and the differences between
    them, in µs and as shares of the call. `us` holds medians in µs under the labels
    'backend=inductor', '__compiled_fn alone', 'guard check alone', "Inductor's call()
    alone" and 'its C++ kernel alone'."""
    import pandas as pd

    whole, alone = us["backend=inductor"], us["__compiled_fn alone"]
    call_us = us["Inductor's call() alone"]
    parts = pd.DataFrame([
        ("whole call, backend=inductor", "timed", whole),
        ("Dynamo's side: frame evaluation, guards, rewritten bytecode",
         "whole − __compiled_fn", whole - alone),
        ("  of which the guard check (C++ guard manager)", "timed alone",
         us["guard check alone"]),
        ("__compiled_fn: AOTAutograd's and Inductor's wrappers, then call()", "timed alone",
         alone),
        ("  of which the wrappers", "__compiled_fn − call()", alone - call_us),
        ("  of which Inductor's generated call()", "timed alone", call_us),
        ("    of which its C++ kernel", "timed alone", us["its C++ kernel alone"]),
    ], columns=["part of one call", "how", "µs (median)"]).set_index("part of one call")
    parts["share of the call (%)"] = 100 * parts["µs (median)"] / whole
    return parts


def timings_frame(timings: dict):
    """Median and IQR in µs, and the noisy flag, of each timing."""
    import pandas as pd

    return pd.DataFrame({"median (µs)": {k: t.median * 1e6 for k, t in timings.items()},
                         "IQR (µs)": {k: t.iqr * 1e6 for k, t in timings.items()},
                         "noisy": {k: t.noisy for k, t in timings.items()}})


DYNAMO_PARTS = ("Dynamo's eval-frame wrapper (and the C++ guard check)",
                "the function's frame (Dynamo's rewritten bytecode)")
WRAPPER_PARTS = ("AOTAutograd runtime wrappers", "Inductor's OutputCode wrapper")


def call_cost_readings(us: dict[str, float], profile_split) -> dict:
    """The glue values of the tiny function's split (`us`: medians in µs under the labels
    of `call_split_table`, and 'PyTorch op by op') and of its profile (`profile_split`:
    percent by `profile_component`), with how far the two attributions agree."""
    whole, alone = us["backend=inductor"], us["__compiled_fn alone"]
    call_us = us["Inductor's call() alone"]
    profile_dynamo = float(sum(profile_split.get(k, 0.0) for k in DYNAMO_PARTS))
    profile_wrappers = float(sum(profile_split.get(k, 0.0) for k in WRAPPER_PARTS))
    readings = {
        "tiny_plain_us": us["PyTorch op by op"], "tiny_inductor_us": whole,
        "tiny_alone_us": alone, "tiny_dynamo_us": whole - alone,
        "tiny_dynamo_pct": 100 * (whole - alone) / whole,
        "tiny_guard_us": us["guard check alone"], "tiny_call_us": call_us,
        "tiny_kernel_us": us["its C++ kernel alone"], "tiny_wrappers_us": alone - call_us,
        "tiny_overhead_us": whole - call_us,  # what torch.compile adds around call()
        "tiny_wrappers_pct": 100 * (alone - call_us) / whole,
        "profile_dynamo_pct": profile_dynamo, "profile_wrappers_pct": profile_wrappers,
        "profile_aot_pct": float(profile_split.get(WRAPPER_PARTS[0], 0.0)),
        "profile_output_code_pct": float(profile_split.get(WRAPPER_PARTS[1], 0.0))}
    readings["profile_agreement"] = profile_agreement(
        profile_dynamo, readings["tiny_dynamo_pct"], profile_wrappers,
        readings["tiny_wrappers_pct"])
    return readings


def profile_component(filename: str, function: str, generated_dir: str = "",
                      traced: str = "") -> str:
    """Which part of a compiled call a profiled Python function belongs to: Inductor's
    generated code (under `generated_dir`), AOTAutograd's runtime wrappers, Inductor's
    OutputCode wrapper, Dynamo (which absorbs the C++ guard check), the traced function's
    own (rewritten) frame, or other."""
    if generated_dir and generated_dir in filename:
        return "Inductor's generated call()"
    if "_functorch" in filename or "runtime_wrapper" in function:
        return "AOTAutograd runtime wrappers"
    if "_inductor" in filename:
        return "Inductor's OutputCode wrapper"
    if "_dynamo" in filename or filename.endswith(
            ("torch/_compile.py", "torch/__init__.py", "torch/compiler/__init__.py")):
        return "Dynamo's eval-frame wrapper (and the C++ guard check)"
    if traced and function == traced:
        return "the function's frame (Dynamo's rewritten bytecode)"
    return "other"


def profile_shares(fn, x, calls: int, generated_dir: str = "", traced: str = ""):
    """Profile `calls` calls of `fn(x)` with cProfile and group each function's own time by
    `profile_component`, a C built-in charged to the Python function that called it most:
    the share of profiled time per component, in percent, largest first."""
    import pandas as pd

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn(x)
    profiler.disable()
    shares: dict[str, float] = {}
    for (filename, _, function), (_, _, own, _, callers) in pstats.Stats(profiler).stats.items():
        if filename == "~" and callers:
            filename, _, function = max(callers.items(), key=lambda kv: kv[1][2])[0]
        part = profile_component(filename, function, generated_dir, traced)
        shares[part] = shares.get(part, 0.0) + own
    return (100 * pd.Series(shares) / sum(shares.values())).sort_values(ascending=False)


def profile_agreement(profile_dynamo_pct: float, measured_dynamo_pct: float,
                      profile_wrappers_pct: float, measured_wrappers_pct: float,
                      tolerance: float = 10.0) -> str:
    """How far cProfile's shares lie from the shares timed directly, with a warning when
    either gap exceeds `tolerance` percentage points."""
    gaps = (abs(profile_dynamo_pct - measured_dynamo_pct),
            abs(profile_wrappers_pct - measured_wrappers_pct))
    text = "the two attributions differ by {:.1f} and {:.1f} percentage points".format(*gaps)
    if max(gaps) <= tolerance:
        return text
    return text + (", more than cProfile's own per-call cost would explain; read the "
                   "profile's shares with care")


# --- AOTAutograd --------------------------------------------------------------------------

def capture_graphs(fn, *args, **aot_options):
    """Compile `fn` (its own cache) with a backend that keeps Dynamo's graph and
    AOTAutograd's forward and backward graphs, run it once on `args`, and return
    (graphs by name, output)."""
    import torch
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    graphs = {}

    def compiler_for(name):
        def compiler(graph_module, example_inputs):
            graphs[name] = graph_module
            return make_boxed_func(graph_module.forward)

        return compiler

    def backend(graph_module, example_inputs):
        graphs["dynamo"] = graph_module
        return aot_module_simplified(graph_module, example_inputs,
                                     fw_compiler=compiler_for("forward"),
                                     bw_compiler=compiler_for("backward"), **aot_options)

    return graphs, torch.compile(own_copy(fn), backend=backend)(*args)


def ops_in(graph_module) -> list[str]:
    """The operators a graph calls, in order, as text."""
    return [str(node.target) for node in graph_module.graph.nodes
            if node.op in ("call_function", "call_method")]


def in_place_ops(ops: list[str]) -> list[str]:
    """The in-place operators among `ops`: a trailing underscore on the operator's name
    ('aten.add_.Tensor', 'mul_')."""
    return [op for op in ops if op.split(".")[-2 if op.startswith("aten.") else -1].endswith("_")]


def functional_overloads(table) -> set:
    """The operator overloads of a decomposition table that mutate no argument."""
    import torch

    return {op for op in table if isinstance(op, torch._ops.OpOverload)
            and not op._schema.is_mutable}


def compare_decomposition_tables(inductor_table, core_table, lowerings=None,
                                 fallbacks=None) -> tuple[dict, object, list[str]]:
    """Inductor's decomposition table against core ATen's: counts for the prose, the
    table of functional overloads that only core ATen decomposes with how Inductor runs
    each (its own lowering, or a fallback to the ATen kernel), and the fallbacks' names."""
    import pandas as pd

    if lowerings is None or fallbacks is None:
        from torch._inductor import lowering

        lowerings, fallbacks = lowering.lowerings, lowering.fallbacks
    inductor_ops, core_ops = functional_overloads(inductor_table), functional_overloads(core_table)
    only_core = sorted(core_ops - inductor_ops, key=str)
    fallback_ops = {op for op in only_core if op in fallbacks}
    lowered = [op for op in only_core if op in lowerings and op not in fallback_ops]
    counts = {"decomp_inductor_all": len(inductor_table), "decomp_core_all": len(core_table),
              "decomp_inductor": len(inductor_ops), "decomp_core": len(core_ops),
              "decomp_both": len(inductor_ops & core_ops),
              "decomp_inductor_only": len(inductor_ops - core_ops),
              "decomp_core_only": len(only_core), "decomp_core_only_lowered": len(lowered),
              "decomp_prims": sum(getattr(op, "namespace", "") == "prims"
                                  for op in inductor_table)}
    frame = pd.DataFrame({
        "core ATen decomposes, Inductor keeps whole": [str(op) for op in only_core],
        "how Inductor runs it": ["fallback: the ATen kernel" if op in fallback_ops
                                 else "its own lowering" if op in lowerings else "?"
                                 for op in only_core]}).set_index(
        "core ATen decomposes, Inductor keeps whole")
    return counts, frame, [str(op) for op in sorted(fallback_ops, key=str)]


def fallback_sentence(fallback_names: list[str], lowered: int, only_core: int) -> str:
    """How Inductor runs the core-ATen-only operators it does not lower itself (Markdown)."""
    if not fallback_names:
        return "it runs none of them as an ATen kernel"
    names = [f"`{name}`" for name in fallback_names]
    if len(names) == 1 and lowered + 1 == only_core:
        return f"the other one, {names[0]}, it runs as the ATen kernel, a library call"
    return f"{len(names)} of them ({', '.join(names)}) it runs as ATen kernels, library calls"


def decomposed_ops(plain: dict, decomposed: dict) -> dict[str, list[str]]:
    """The forward operators a decomposition table replaced, what they became, and the prims
    operators in the decomposed forward and backward graphs."""
    before, after = set(ops_in(plain["forward"])), set(ops_in(decomposed["forward"]))
    everything = ops_in(decomposed["forward"]) + ops_in(decomposed["backward"])
    return {"decomposed_away": sorted(before - after), "decomposed_into": sorted(after - before),
            "prims_used": sorted({op for op in everything if op.startswith("prims.")})}


VIEW_OPS = ("aten.t.", "aten.detach.", "aten.view.", "aten.expand.", "aten.transpose.")


def saved_for_backward(fn, partition_fn, x, w) -> dict:
    """Compile the scalar `fn(x, w)` with `partition_fn`, check its gradient in `w` against
    `torch.func.grad`, and say what its forward saves for the backward: the tensors, the
    new memory (views of inputs excluded), and the operations in each graph."""
    import torch

    w = w.detach().clone().requires_grad_(True)
    graphs, loss = capture_graphs(fn, x, w, partition_fn=partition_fn)
    loss.backward()
    torch.testing.assert_close(w.grad, torch.func.grad(fn, argnums=1)(x, w.detach()))
    forward_nodes = {n.name: n for n in graphs["forward"].graph.nodes}
    saved = [n for n in graphs["backward"].graph.nodes
             if n.op == "placeholder" and not n.name.startswith("tangents")]
    new = [n for n in saved if forward_nodes[n.name].op != "placeholder"
           and not str(forward_nodes[n.name].target).startswith(VIEW_OPS)]
    return {"tensors saved": ", ".join(n.name for n in saved),
            "new memory saved (KiB)": sum(n.meta["val"].numel() * n.meta["val"].element_size()
                                          for n in new) / 2**10,
            "forward ops": len(ops_in(graphs["forward"])),
            "backward ops": len(ops_in(graphs["backward"]))}


# --- Inductor's code, backends and modes ------------------------------------------------

_KERNEL = re.compile(r"\b(?:cpp|triton)_\w*fused_\w+")


def kernel_names(code: str) -> list[str]:
    """The generated kernels a wrapper calls, by name (each lists the operations it fuses)."""
    return sorted(set(_KERNEL.findall(code)))


def library_calls(code: str, matmuls_only: bool = False) -> list[str]:
    """The library calls (`extern_kernels.*`) in a wrapper; with `matmuls_only`, every
    mm/addmm/bmm call, repeated as often as it occurs."""
    if matmuls_only:
        return re.findall(r"extern_kernels\.(?:mm|addmm|bmm)\(", code)
    return sorted(set(re.findall(r"extern_kernels\.\w+", code)))


def kernel_excerpt(code: str, name: str, cpu: bool, lines: int = 36) -> str:
    """The first `lines` lines of the wrapper from kernel `name` on (on a CPU, up to the end
    of its C++ source)."""
    excerpt = code[code.index(name):]
    if cpu:
        excerpt = excerpt.split("\n''')")[0]
    return "\n".join(excerpt.splitlines()[:lines])


@contextlib.contextmanager
def inductor_output_code():
    """Collect the wrapper code Inductor writes inside the block (as run_and_get_code does,
    without its torch._dynamo.reset(), which would drop other compiled code)."""
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with unittest.mock.patch.object(GraphLowering, "save_output_code", codes.append):
        yield codes


def kernel_sources(code: str) -> list[str]:
    """The kernels' source texts in a wrapper, sorted."""
    return sorted(re.findall(r"'''(.*?)'''", code, flags=re.S))


def wrapper_lines(code: str) -> list[str]:
    """A wrapper's lines with kernel sources elided and AOT ids dropped."""
    code = re.sub(r"'''.*?'''", "'''…'''", code, flags=re.S)
    return [line.strip() for line in code.splitlines()
            if line.strip() and not line.startswith("# AOT ID")]


def wrapper_difference(code: str, reference: str) -> str:
    """How `code`'s wrapper differs from `reference`'s, by first word of each changed line:
    '2 fewer buf1 lines, 1 more other line', or 'no difference'."""
    changed = Counter((line[0], re.split(r"\W", line[2:])[0]) for line in
                      difflib.ndiff(wrapper_lines(reference), wrapper_lines(code))
                      if line[:2] in ("- ", "+ "))
    return ", ".join(f"{n} {'fewer' if sign == '-' else 'more'} {word or 'other'} "
                     f"line{'s' if n > 1 else ''}"
                     for (sign, word), n in changed.items()) or "no difference"


CHOICE_LOG = re.compile(r"skip|cudagraph|autotun", re.IGNORECASE)


def choice_table(fns: dict, args: tuple, check, reference_choice: str = "inductor"):
    """Call each choice's function once on `args` (its first call, compiling, timed), check
    its output, keep what PyTorch logged about skipped steps, CUDA graphs or autotuning,
    and compare its generated code with `reference_choice`'s: returns the table and the
    wrapper code of each choice (empty where nothing was generated)."""
    import pandas as pd
    import torch

    codes, rows = {}, []
    # No FX-graph cache: every Inductor choice lowers its graph (and shows its code);
    # compiled kernels that did not change still come from Inductor's kernel cache.
    with torch._inductor.config.patch(fx_graph_cache=False):
        for label, fn in fns.items():
            with torch_log_messages() as logged, inductor_output_code() as code:
                start = time.perf_counter()
                out = fn(*args)
                first_call = time.perf_counter() - start
            check(out)
            notes = sorted({m.split(". Found from")[0].splitlines()[0] for m in logged
                            if CHOICE_LOG.search(m)})
            codes[label] = "".join(code)
            rows.append({"choice": label, "first call (s)": first_call,
                         "generated kernels": len(kernel_names(codes[label])),
                         "library matmuls": len(library_calls(codes[label], matmuls_only=True)),
                         "what PyTorch logged": "; ".join(notes) or "-"})
    table = pd.DataFrame(rows).set_index("choice")
    reference = codes[reference_choice]
    table["same kernels as inductor"] = [
        "" if not codes[c] else kernel_sources(codes[c]) == kernel_sources(reference)
        for c in table.index]
    table["wrapper code against inductor"] = [
        "" if not codes[c] else wrapper_difference(codes[c], reference) for c in table.index]
    return table, codes


# --- Readings: the sentences the page glues -----------------------------------------------

def difference_us(a, b) -> tuple[float, float, float]:
    """(median, low, high) of the per-round differences a − b of two timings of one
    `compare` call, in µs per call (95% interval of the median)."""
    from deepdive.core.timing import interleaved, median_interval

    if not interleaved(a, b):
        raise ValueError(f"{a.label!r} and {b.label!r} were not timed in the same rounds")
    d = 1e6 * (a.samples - b.samples)
    return (float(np.median(d)), *median_interval(d))


def extra_text(median: float, low: float, high: float) -> str:
    """'2.1 µs more (95% interval +1.0 to +3.0 µs)', or 'less' for a negative median."""
    word = "more" if median >= 0 else "less"
    return f"{abs(median):.1f} µs {word} (95% interval {low:+.1f} to {high:+.1f} µs)"


def mlp_split_note(extra: tuple, side: tuple, guard_us: float, tiny_dynamo_us: float) -> str:
    """What the split of the MLP block's `backend="eager"` call says, from the paired extra
    cost over op by op (`extra`), Dynamo's side (`side`, both (median, low, high) in µs),
    the guard check alone and the tiny function's Dynamo side: that most of the extra lies
    in Dynamo's side, little of it the guard check, only when all of that holds."""
    if (extra[0] > 0 and side[0] > 0.5 * extra[0] and guard_us < 0.5 * side[0]
            and side[1] > tiny_dynamo_us):
        return ("Most of the extra cost lies in Dynamo's side, and little of that is the guard "
                f"check ({100 * guard_us / side[0]:.0f}% of it); what else in Dynamo's side "
                "costs more on this block than on the tiny function is not measured here.")
    return ("Which part makes the extra cost differ between this block and the tiny function "
            "is not measured here.")


def mlp_tie_note(claim, aa_reach: float) -> str:
    """For a tied Inductor-against-op-by-op claim: where its interval lies against 1, and
    the reach of the A/A copy; empty for any other verdict."""
    if claim.verdict != "tie":
        return ""
    more = sorted(100 * (1 / v - 1) for v in (claim.low, claim.high))
    where = (f"the interval lies wholly below 1 (by its ends, an Inductor call took "
             f"{more[0]:.0f}% to {more[1]:.0f}% more time than an op-by-op call)"
             if claim.high < 1 else
             f"the interval lies wholly above 1 (by its ends, an Inductor call took "
             f"{-more[1]:.0f}% to {-more[0]:.0f}% less time than an op-by-op call)"
             if claim.low > 1 else "the interval includes 1")
    return (f"A tie here means that the interval lay within the claim's "
            f"±{100 * claim.tie_band:.1f}% band, not equal times: {where}; the A/A copy of op "
            f"by op, timed in the same rounds, reached ±{100 * aa_reach:.1f}%.")


def modes_sentence(glued: dict, modes, cuda: bool, cuda_graph_choices=(
        "mode=reduce-overhead", "mode=max-autotune-no-cudagraphs", "mode=max-autotune")) -> str:
    """The modes' reading (Markdown): on a GPU, their three glued verdicts; on a CPU, how
    many generated default Inductor's kernels, how their wrappers differ, and what
    `backend=cudagraphs` logged."""
    if cuda:
        return (f"Autotuning alone (`max-autotune-no-cudagraphs`) was {glued['mlp_autotune']} "
                f"default Inductor ({glued['mlp_autotune_ratio']}); adding CUDA graphs "
                f"(`max-autotune`) was {glued['mlp_autotune_graphs']} autotuning alone "
                f"({glued['mlp_autotune_graphs_ratio']}); `reduce-overhead` was "
                f"{glued['mlp_reduce_overhead']} default Inductor "
                f"({glued['mlp_reduce_overhead_ratio']}).")
    same = [c for c in cuda_graph_choices if modes.loc[c, "same kernels as inductor"]]
    groups: dict[str, list[str]] = {}
    for c in same:
        groups.setdefault(modes.loc[c, "wrapper code against inductor"], []).append(
            f"`{c.removeprefix('mode=')}`")
    wrappers = "; ".join(f"{' and '.join(g)}: {d}" for d, g in groups.items()) or "none compared"
    return (f"On this CPU, {len(same)} of the {len(cuda_graph_choices)} Inductor modes generated "
            f"exactly default Inductor's kernels; their wrapper code against default "
            f"Inductor's: {wrappers}. A CPU has no CUDA graphs to record, so these modes are "
            "not timed here and carry no claims; `backend=cudagraphs` logged "
            f"`{modes.loc['backend=cudagraphs', 'what PyTorch logged']}` (sic, PyTorch's "
            "message) and ran AOTAutograd's graphs as `aot_eager` does. A GPU build times "
            "them and decides their claims.")


def mlp_readings(mode_timings: dict, tiny_timings: dict, claim, tiny_dynamo_us: float) -> dict:
    """The glue values of the MLP block's split: medians, the paired extra cost of a
    `backend="eager"` call over op by op (here and on the tiny function), Dynamo's side,
    the guard check, the `GraphModule` call, and the notes that read them (`claim` is the
    decided `mlp_inductor` claim)."""
    from deepdive.core.timing import speedup
    from deepdive.core.verdict import reach

    plain, eager = mode_timings["PyTorch op by op"], mode_timings["backend=eager"]
    alone = mode_timings["backend=eager: __compiled_fn alone"]
    guard = mode_timings["backend=eager: guard check alone"]
    extra, side = difference_us(eager, plain), difference_us(eager, alone)
    aa_reach = reach(speedup(plain, mode_timings["PyTorch op by op, A/A copy"]))
    return {"mlp_plain_us": plain.median * 1e6,
            "mlp_inductor_us": mode_timings["inductor"].median * 1e6,
            "mlp_eager_extra": extra_text(*extra),
            "tiny_eager_extra": extra_text(*difference_us(tiny_timings["backend=eager"],
                                                          tiny_timings["PyTorch op by op"])),
            "mlp_dynamo_side": f"{side[0]:.1f} µs (95% interval {side[1]:.1f} to "
                               f"{side[2]:.1f} µs)",
            "mlp_guard_us": guard.median * 1e6,
            "mlp_graph_call_extra": extra_text(*difference_us(alone, plain)),
            "mlp_split_note": mlp_split_note(extra, side, guard.median * 1e6, tiny_dynamo_us),
            "mlp_tie_note": mlp_tie_note(claim, aa_reach)}


def plot_mlp_calls(timings: dict, labels: list[str], cpu: bool):
    """One call of the MLP block per backend (and mode), medians with IQR whiskers."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.4))
    plots.bar_timings(ax, labels, [timings[label] for label in labels], unit="µs", color="C0")
    ax.invert_yaxis()
    ax.set(title="one call of the MLP block, per backend" + ("" if cpu else " and mode"),
           xlabel="µs per call (median, IQR whiskers)")
    skipped = ("; not timed on a CPU: the CUDA-graph modes (no CUDA graphs to record; same "
               "kernels as inductor) and backend=cudagraphs (skipped on a CPU)") if cpu else ""
    plots.caption(fig, plots.build_note("fp32 strict", extra="MLP block, 256x64 input" + skipped))
    return fig


def widest_band_text(bands, build_band: float) -> str:
    """Whether any claim's band reached further than the build's, and how far."""
    widest = max(bands)
    if widest > build_band:
        return f"up to ±{100 * widest:.1f}% here"
    return "none reached further than the build's band here"


def box_numbers(whole_us: float, overhead_us: float, dynamo_pct: float, kernel_us: float,
                compile_s: float, shape_graphs: int, auto_graphs: int) -> str:
    """The numbers of the chapter's findings box: the tiny function's call and its parts,
    the MLP block's first compile, and the graphs the default dynamic shapes saved."""
    return (f"A compiled call of a three-operation function on 16 floats took {whole_us:.1f} µs, "
            f"of which {overhead_us:.1f} µs was what torch.compile adds around Inductor's "
            f"generated code (Dynamo's side of it alone, before the graph runs, {dynamo_pct:.0f}% "
            "of the whole call) and "
            f"{kernel_us:.2f} µs the fused kernel; compiling a 256x64 MLP block with Inductor "
            f"took {compile_s:.1f} s. Eight input sizes compiled {auto_graphs} graphs with the "
            f"default dynamic shapes and {shape_graphs} with dynamic=False.")


def summary_calls(glued: dict, overhead_us: float, dynamo_pct: float, tie_note: str) -> str:
    """The closing section's per-call reading, from the glued claims."""
    tie = f", {tie_note}" if tie_note else ""
    return (f"On a tiny function (one input, three operations on 16 floats), what "
            f"torch.compile adds around Inductor's generated call() came to {overhead_us:.1f} µs "
            f"per call, Dynamo's side alone {dynamo_pct:.0f}% of the whole call, and Inductor "
            f"was {glued['tiny_inductor']} PyTorch op by op ({glued['tiny_inductor_ratio']}); "
            f"on the 256x64 MLP block it was {glued['mlp_inductor']} it "
            f"({glued['mlp_inductor_ratio']}{tie}).")


def mlp_tie_short(claim) -> str:
    """The short form of `mlp_tie_note` for the closing section; empty unless a tie."""
    if claim.verdict != "tie":
        return ""
    where = ("wholly below 1" if claim.high < 1 else "wholly above 1" if claim.low > 1
             else "on both sides of 1")
    return (f"a tie within ±{100 * claim.tie_band:.1f}% but not equal times: the interval "
            f"lies {where}")


def _cell(text) -> str:
    """One table cell as MyST text: Markdown's special characters escaped."""
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", str(text))


TABLE_CAPTION = (
    "Every comparison of this chapter, read as \"the first-named side against the second\": "
    "its speed-up (above 1: the first-named took less time), with the 95% interval of the "
    "paired per-round ratio, the verdict of the one rule, and the tie band that decided it "
    "(the build's, or the reach of the claim's own A/A control where that is wider). Device "
    "and sizes are in each question, device and scale in the figure's caption.")


def claims_table_markdown(table, caption: str = TABLE_CAPTION,
                          name: str = "tbl-compile-verdict") -> str:
    """A claims table (`glue_claims(...)['claims_all']`: questions as its index) as a MyST
    list-table, so the page numbers it as a table; the question column is its stub."""
    lines = [f"```{{list-table}} {caption}", f":name: {name}", ":header-rows: 1",
             ":stub-columns: 1", ""]
    for row in [["question", *table.columns],
                *([question, *values] for question, values in
                  zip(table.index, table.itertuples(index=False), strict=True))]:
        lines += [f"{'* -' if i == 0 else '  -'} {_cell(value)}" for i, value in enumerate(row)]
    return "\n".join([*lines, "```"])

