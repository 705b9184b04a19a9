"""Chapter 2 (jit and XLA): its workloads, the experiments it runs in fresh processes, and
its readings (the code that turns its measured verdicts into sentences, tables and figures).

The page ({ref}`ch-jit`) shows the technique and calls these; everything here takes its
inputs as arguments (timings, verdicts, counts), so each reading is tested on small fake
inputs in `tests/test_chapters_jit_xla.py`. torch and jax are imported inside the functions
that need them: a child process pins its CPU threads before either starts.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import resource
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from deepdive.book.claims import PHRASES, describe
from deepdive.core import allocator
from deepdive.core.equality import matches
from deepdive.core.timing import Timing, compare

__all__ = [
    "COLORS", "KEPT", "DEFAULTS", "MADE_TWICE", "HEADLINE_CANDIDATES", "NO_SAVING",
    "TimingLog", "TypedCommands", "chain", "chain_variants", "chain_checks", "longest_variants",
    "longest_checks", "copy_variants", "jit_new_function", "compile_new_function", "new_pages",
    "as_record", "from_record", "fresh_process", "child", "xla_pool_threads", "thp_mode",
    "llc_size", "op_counts", "gelu_reading", "chain_scope", "fusion_claims", "pages_table",
    "shown_columns", "pages_reading", "fusion_reading", "flipped_reading",
    "defaults_pages_reading", "numpy_reading", "defaults_drop", "listed", "said",
    "one_vs_chain_reading", "k1_reading", "eager_gap_reading", "two_figures",
    "break_even_label", "pays_after", "stage_table", "regime_finding", "times_as_long",
    "new_function_reading", "direct_test", "cache_off_reading", "values_ms", "widened_bands",
    "xla_gpu_autotune_level", "xla_revision_note", "jax_log", "no_cache_used", "dynamo_graphs",
    "whole_stream", "bucket", "padded_stream", "plot_fusion", "plot_allocators",
    "plot_dispatch", "plot_compile_costs", "save_records",
]

KEPT = "freed memory kept"
DEFAULTS = "glibc defaults"
COLORS = {"NumPy": "tab:gray", "PyTorch eager": "tab:blue", "JAX op by op": "tab:orange",
          "jax.jit": "tab:green", "torch.compile": "tab:purple"}
OWNED, FRESH = "PyTorch copy into owned memory", "PyTorch copy into fresh memory"
# The comparisons made under both allocator settings (each has a `defaults_` twin), and how
# the allocator section names them.
MADE_TWICE = {"fusion_jit": "jax.jit against JAX op by op",
              "fusion_compile": "torch.compile against PyTorch eager",
              "fusion_compile_vs_jit": "torch.compile against jax.jit",
              "fusion_eager_torch_vs_jax": "PyTorch eager against JAX op by op",
              "fusion_eager_torch_vs_numpy": "PyTorch eager against NumPy",
              "jit_one_vs_chain": "jax.jit of one op against its whole chain",
              "compile_one_vs_chain": "torch.compile of one op against its whole chain",
              "copy_fresh_vs_owned": "a fresh copy against an owned one",
              "fusion_jit_k1": "jax.jit against op by op at k = 1"}
# Headline candidates: in the box only where the allocator setting left the verdict alone.
HEADLINE_CANDIDATES = {"fusion_jit": "jax.jit against op by op on the large chain",
                       "fusion_compile_vs_jit": "torch.compile against jax.jit on the large chain",
                       "new_function_jit": "a new jitted function called once against op by op"}
NO_SAVING = "no measurable saving (tie)"
# New arrays each variant returns per call, and passes over memory it makes (chain of k).
_EAGER = ("NumPy", "PyTorch eager", "JAX op by op")


# --- the workloads ------------------------------------------------------------------------

def chain(x, k):
    """k cheap elementwise operations, alternating multiply and add (NumPy, torch or JAX)."""
    for i in range(k):
        x = x * 1.0001 if i % 2 == 0 else x + 0.5
    return x


def chain_variants(host: np.ndarray, k: int, device: str) -> dict[str, Callable]:
    """The five ways to run a chain of k ops on `host` data, each a zero-argument call:
    NumPy, PyTorch eager, JAX op by op, jax.jit and torch.compile (static shapes both)."""
    import jax
    import jax.numpy as jnp
    import torch

    on_torch, on_jax = torch.from_numpy(host).to(device), jnp.asarray(host)
    torch._dynamo.reset()  # one fresh static-shape graph, never a stale cache entry
    jitted = jax.jit(chain, static_argnums=1)
    compiled_chain = torch.compile(chain, dynamic=False)
    return {
        "NumPy": lambda: chain(host, k),
        "PyTorch eager": lambda: chain(on_torch, k),
        "JAX op by op": lambda: chain(on_jax, k),
        "jax.jit": lambda: jitted(on_jax, k),
        "torch.compile": lambda: compiled_chain(on_torch, k),
    }


def chain_checks(variants, host: np.ndarray, k: int) -> dict[str, Callable]:
    """Each variant's check: the chain computed by NumPy in float64."""
    reference = chain(host.astype(np.float64), k)
    return {v: matches(reference) for v in variants}


def longest_variants(host: np.ndarray, k: int, device: str) -> dict[str, Callable]:
    """The longest chain's five variants, plus a compiled one-op chain per framework (one
    pass over the array, like the fused chain) and a separately built second copy of each
    compiled chain (the A/A controls). The extra sides read a second copy of the input."""
    import jax
    import jax.numpy as jnp
    import torch

    variants = chain_variants(host, k, device)
    on_torch, on_jax = torch.from_numpy(host).to(device), jnp.asarray(host)
    jit_again = jax.jit(lambda v, n: chain(v, n), static_argnums=1)  # its own trace, compile
    compile_again = torch.compile(lambda v, n: chain(v, n), dynamic=False)  # its own graph
    jit_one = jax.jit(chain, static_argnums=1)
    compile_one = torch.compile(chain, dynamic=False)
    variants.update({
        "jax.jit, second build": lambda: jit_again(on_jax, k),
        "torch.compile, second build": lambda: compile_again(on_torch, k),
        "jax.jit, one op": lambda: jit_one(on_jax, 1),
        "torch.compile, one op": lambda: compile_one(on_torch, 1),
    })
    return variants


def longest_checks(variants, host: np.ndarray, k: int) -> dict[str, Callable]:
    """`chain_checks`, with the one-op sides checked against one operation."""
    checks = chain_checks(variants, host, k)
    for name in ("jax.jit, one op", "torch.compile, one op"):
        if name in checks:
            checks[name] = matches(chain(host.astype(np.float64), 1))
    return checks


def copy_variants(host: np.ndarray, device: str) -> dict[str, Callable]:
    """Two plain PyTorch copies of the array: into memory it owns, and into a new tensor."""
    import torch

    on_torch = torch.from_numpy(host).to(device)
    copy_target = torch.empty_like(on_torch)
    return {OWNED: lambda: copy_target.copy_(on_torch), FRESH: lambda: on_torch.clone()}


def jit_new_function(v, k: int):
    """Trace, lower, compile and run a chain of k: a new function, so no cache hits."""
    import jax

    return jax.jit(lambda u: chain(u, k))(v)


def compile_new_function(x_torch, k: int):
    """Dynamo, AOTAutograd and Inductor's code generation for a chain of k, then a call; the
    FX graph cache is off (so is AOTAutograd's, behind it)."""
    import torch
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False):
        return torch.compile(lambda v: chain(v, k), dynamic=False)(x_torch)


def new_pages(fn: Callable, array_pages: float, calls: int = 5, warmup: int = 3) -> float:
    """Minor page faults per call, in arrays' worth of pages, after `warmup` untimed calls.
    Each output is dropped once the next returns, as in compare()."""
    from deepdive.core.sync import block

    out = block(fn())
    for _ in range(warmup - 1):
        previous, out = out, block(fn())
        del previous
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        previous, out = out, block(fn())
        del previous
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls / array_pages


class TimingLog:
    """`compare()` that keeps every timing with where it was made: the page's noise record."""

    def __init__(self):
        self.timed: list[tuple[str, Timing]] = []

    def compare(self, where: str, variants, check, **options) -> dict[str, Timing]:
        """compare() the variants, each output checked before any timing; keep the timings."""
        timings = compare(variants, check=check, **options)
        self.keep(where, timings)
        return timings

    def keep(self, where: str, timings: Mapping[str, Timing]) -> None:
        """Add timings made elsewhere (a child process) to the record."""
        self.timed.extend((where, t) for t in timings.values())

    def timings(self) -> list[Timing]:
        return [t for _, t in self.timed]

    def noisy(self) -> list[str]:
        """'where: variant' for every timing whose IQR stayed above 10% of its median."""
        return [f"{where}: {t.label}" for where, t in self.timed if t.noisy]


# --- fresh processes ------------------------------------------------------------------------

def as_record(timings: Mapping[str, Timing]) -> dict:
    """A compare() result as JSON-ready dicts, to hand timings back from a child process."""
    return {label: {"samples": np.asarray(t.samples).tolist(),
                    "calls_per_block": t.calls_per_block, "first_call": t.first_call,
                    "recompiles": t.recompiles}
            for label, t in timings.items()}


def from_record(record: dict, session: int) -> dict[str, Timing]:
    """Timings handed back by a child process; they keep their pairing (one compare() call
    there); a negative `session` marks them as made in a child."""
    return {label: Timing(label, np.asarray(r["samples"]), r["calls_per_block"],
                          r["first_call"], r["recompiles"], session)
            for label, r in record.items()}


def fresh_process(task: str, *args, regime: str = allocator.KEPT, timeout: int = 300):
    """Run `child(task, *args)` in a new Python process under an allocator `regime`, with
    this package on its path; return the JSON it prints last."""
    helpers = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([helpers, os.environ.get("PYTHONPATH", "")])
    base = {**os.environ, "PYTHONPATH": path}
    script = "import sys\nfrom deepdive.chapters import jit_xla\njit_xla.child(*sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", script, task, *map(str, args)],
                          env=allocator.child_env(regime, base), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode:
        raise RuntimeError(f"child {task!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(task: str, *args: str) -> None:
    """A child process's work, printed as one JSON line: `defaults` (the allocator section's
    comparisons), `cache_off` (what JAX's cache settings do), `jax_cache` (compile stages
    with a persistent cache folder), `inductor_cache` (first calls with a warm Inductor
    cache). CPU threads are pinned before torch or jax starts."""
    from deepdive.core import env

    threads = env.pin_cpu_threads()
    tasks = {"defaults": _defaults, "cache_off": _cache_off, "jax_cache": _jax_cache,
             "inductor_cache": _inductor_cache}
    if task not in tasks:
        raise ValueError(f"unknown task {task!r}: one of {sorted(tasks)}")
    print(json.dumps(tasks[task](threads, *args)))


def _strict(threads: int) -> None:
    import jax
    import torch

    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision("highest")
    jax.config.update("jax_default_matmul_precision", "highest")


def _defaults(threads, device, longest, elements) -> dict:
    import jax
    import jax.numpy as jnp

    _strict(threads)
    longest, elements = int(longest), int(elements)
    x_host = np.random.default_rng(2).standard_normal(elements, dtype=np.float32)
    array_pages = x_host.nbytes / resource.getpagesize()
    calls = longest_variants(x_host, longest, device)
    fusion = compare(calls, check=longest_checks(calls, x_host, longest))
    copy_calls = copy_variants(x_host, device)
    copies = compare(copy_calls, check={v: matches(x_host) for v in copy_calls})
    pages = {v: new_pages(fn, array_pages) for v, fn in {**calls, **copy_calls}.items()}
    x_jax = jnp.asarray(x_host)
    jitted = jax.jit(chain, static_argnums=1)
    one_calls = {"JAX op by op": lambda: chain(x_jax, 1), "jax.jit": lambda: jitted(x_jax, 1)}
    one = compare(one_calls, check=chain_checks(one_calls, x_host, 1))
    once_calls = {"JAX op by op, one call": lambda: chain(x_jax, longest),
                  "jax.jit, new function + one call": lambda: jit_new_function(x_jax, longest)}
    once = compare(once_calls, check=chain_checks(once_calls, x_host, longest))
    return {"fusion": as_record(fusion), "copies": as_record(copies), "pages": pages,
            "one": as_record(one), "once": as_record(once), "allocator": allocator.describe()}


def _cache_off(threads, folder) -> dict:
    import jax
    import jax.numpy as jnp

    inputs = [jnp.ones(n) for n in (3, 5, 7)]  # made first: later steps compile only the lambdas
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_compilation_cache_dir", folder)
    steps = {}
    jax.jit(lambda v: v * 2)(inputs[0]).block_until_ready()
    steps["cache dir set, one compile"] = sorted(os.listdir(folder))
    jax.config.update("jax_compilation_cache_dir", None)
    jax.jit(lambda v: v * 5 + 1)(inputs[1]).block_until_ready()
    steps["dir set back to None, one more compile"] = sorted(os.listdir(folder))
    jax.config.update("jax_enable_compilation_cache", False)
    jax.jit(lambda v: v * 7 - 1)(inputs[2]).block_until_ready()
    steps["jax_enable_compilation_cache=False, one more compile"] = sorted(os.listdir(folder))
    return steps


def _jax_cache(threads, folder, longest, elements) -> dict:
    import jax

    from deepdive.core import compilation

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **_: hits.append(event) if event.endswith("/cache_hits") else None)
    x = jax.ShapeDtypeStruct((int(elements),), "float32")
    stages, _ = compilation.jax_compile_stages(chain, x, int(longest), static_argnums=1)
    return {"trace": stages.trace, "lower": stages.lower, "compile": stages.compile,
            "cache hits": len(hits)}


def _inductor_cache(threads, device, longest, elements) -> dict:
    import time

    import torch
    from torch._dynamo.utils import counters

    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision("highest")

    def first_call(fn, *args):
        start = time.perf_counter()
        fn(*args)
        return time.perf_counter() - start

    setup = first_call(torch.compile(lambda v: v + 1, dynamic=False),
                       torch.ones(16, device=device))
    chain_s = first_call(torch.compile(chain, dynamic=False),
                         torch.ones(int(elements), device=device), int(longest))
    return {"setup": setup, "chain": chain_s, **counters["inductor"]}


# --- the machine ------------------------------------------------------------------------

def xla_pool_threads(tasks: Path = Path("/proc/self/task")) -> int | None:
    """Threads in XLA's CPU compute pool (Linux names them tf_XLAEigen); None elsewhere."""
    if not tasks.is_dir():
        return None
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that ended while we looked
            pass
    return names.count("tf_XLAEigen")


def thp_mode(path: Path = Path("/sys/kernel/mm/transparent_hugepage/enabled")) -> str:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), or 'unknown'."""
    found = re.search(r"\[(\w+)\]", path.read_text()) if path.exists() else None
    return found.group(1) if found else "unknown"


def llc_size(path: Path = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")) -> str:
    """The last-level cache's size as the kernel reports it, for the prose."""
    if not path.exists():
        return "an amount this system does not report"
    kib = int(path.read_text().strip().rstrip("K"))
    return f"{kib / 1024:g} MiB" if kib >= 1024 else f"{kib} KiB"


# --- readings: the pipeline ----------------------------------------------------------------

def op_counts(names) -> str:
    """'6 multiply, 4 constant, ...' from a list of operation names, most frequent first."""
    return ", ".join(f"{n} {name}" for name, n in Counter(names).most_common())


def gelu_reading(kinds: list[str]) -> str:
    """Whether XLA fused the GELU into the GEMM, read from the kernels' kinds."""
    if kinds == ["custom", "loop"]:
        return ("The GELU was not fused into the GEMM on this CPU: the matmul is one kernel "
                "and the GELU's elementwise operations, fused together, a second.")
    return "On this backend the kernels split the work differently; the table lists them."


# --- readings: fusion and the allocator ------------------------------------------------------

def chain_scope(longest: int, mib: float, setting: str) -> str:
    return f"chain of {longest} elementwise ops on {mib:.0f} MiB fp32, {setting}"


def fusion_claims(claims, prefix: str, scope: str, copy_scope: str, t, copy_t) -> None:
    """Record the claims of one timing of the longest chain (`t`) and of the plain copies
    (`copy_t`, their own compare() call) under one allocator setting; `prefix` is '' or
    'defaults_'."""
    def claim(name, question, baseline, candidate, control=None):
        claims.compare(f"{prefix}{name}", f"{scope}: {question}", t[baseline], t[candidate],
                       control=None if control is None else t[control])

    claim("fusion_jit", "jax.jit against JAX op by op", "JAX op by op", "jax.jit")
    claim("fusion_compile", "torch.compile against PyTorch eager", "PyTorch eager",
          "torch.compile")
    claim("fusion_compile_vs_jit", "torch.compile against jax.jit", "jax.jit", "torch.compile",
          control="jax.jit, second build")
    claim("fusion_eager_torch_vs_jax", "PyTorch eager against JAX op by op", "JAX op by op",
          "PyTorch eager")
    claim("fusion_eager_torch_vs_numpy", "PyTorch eager against NumPy", "NumPy",
          "PyTorch eager")
    claim("jit_one_vs_chain", "jax.jit of one op against jax.jit of the whole chain",
          "jax.jit", "jax.jit, one op", control="jax.jit, second build")
    claim("compile_one_vs_chain",
          "torch.compile of one op against torch.compile of the whole chain",
          "torch.compile", "torch.compile, one op", control="torch.compile, second build")
    claims.compare(f"{prefix}copy_fresh_vs_owned", f"{copy_scope}: PyTorch copy into fresh "
                   "memory against a copy into owned memory", copy_t[OWNED], copy_t[FRESH])


def _outputs(variant: str, longest: int) -> int:
    if variant in _EAGER:
        return longest
    return 0 if variant == OWNED else 1


def pages_table(timings, pages, copy_timings, longest: int):
    """One row per variant shown (the A/A second builds left out): its median, new arrays
    returned, new pages per call and its time in plain copies (owned: per pass; fresh: per
    new array)."""
    import pandas as pd

    every = {**timings, **copy_timings}
    owned, fresh = copy_timings[OWNED].median, copy_timings[FRESH].median
    rows = []
    for v in every:
        if "second build" in v:
            continue
        outputs = _outputs(v, longest)
        passes = longest if v in _EAGER else 1
        rows.append({"variant": v, "median (ms)": every[v].median * 1e3,
                     "new arrays returned": outputs, "new pages per call (arrays)": pages[v],
                     "x fresh copies": every[v].median / (fresh * outputs) if outputs else np.nan,
                     "x owned copies": every[v].median / (owned * passes)})
    return pd.DataFrame(rows).set_index("variant")


def shown_columns(table, columns):
    """The columns the prose uses, rounded; 'none' where a copy returns no new array."""
    return table[columns].round(2).astype(object).where(table[columns].notna(), "none")


def pages_reading(pages_max: float) -> str:
    if pages_max < 0.005:
        return "no variant of PyTorch or JAX faulted in new pages"
    return (f"no variant of PyTorch or JAX faulted in more than {pages_max:.2f} arrays' "
            "worth of new pages per call")


def fusion_reading(fused: set[str], multiples: Mapping[str, float]) -> str:
    """What the two fusion verdicts (`fused`: jax.jit's and torch.compile's) say fusion
    saves, set against the plain-copy multiples (`multiples`, per variant)."""
    one_pass_each = (max(multiples["jax.jit"], multiples["torch.compile"]) < 1.5
                     and min(multiples["PyTorch eager"], multiples["JAX op by op"]) > 0.5)
    if fused == {"faster"} and one_pass_each:
        return ("Fusion paid in both frameworks, and what it saves here is memory traffic: "
                "one pass over the array instead of one per operation, as the plain-copy "
                "multiples show.")
    if fused == {"faster"}:
        return ("Fusion paid in both frameworks, by more or less than the passes over "
                "memory it saves; the multiples above say how much.")
    if "withheld" in fused and fused <= {"faster", "withheld"}:
        return ("The rule withheld a verdict on fusion in at least one framework (as "
                "marked), so the multiples above are descriptive only on this build.")
    return "The rule did not find fusion paying in both frameworks on this build."


def flipped_reading(verdict_of: Callable[[str], str]) -> tuple[int, str]:
    """How many of `MADE_TWICE` changed verdict with the allocator, and which."""
    flipped = [c for c in MADE_TWICE if verdict_of(c) != verdict_of(f"defaults_{c}")]
    text = "; ".join(f"{MADE_TWICE[c]}: {verdict_of(c)} with memory kept, "
                     f"{verdict_of(f'defaults_{c}')} with glibc's defaults" for c in flipped)
    return len(flipped), text or "none"


def defaults_pages_reading(pages: Mapping[str, float], longest: int) -> str:
    """Whether every new array under glibc's defaults came with fresh pages."""
    names = ("PyTorch eager", "JAX op by op", "jax.jit", "torch.compile", FRESH)
    fresh = [v for v in names if abs(pages[v] / _outputs(v, longest) - 1) < 0.1]
    if len(fresh) == len(names):
        return ("every output of PyTorch and JAX, eager or compiled, faulted in one array's "
                "worth of new pages: memory a call frees is not kept for the next call, so "
                "each output is mapped and zeroed afresh")
    return (f"{len(fresh)} of the {len(names)} variants that return new arrays faulted in one "
            "array's worth of new pages per output; the others kept part of their freed memory")


def numpy_reading(numpy_pages: float, longest: int, madvise: bool, thp: str) -> str:
    """What NumPy's page faults under glibc's defaults say about transparent huge pages."""
    start = (f"NumPy faulted in {numpy_pages:.2f} arrays' worth of 4 KiB pages for its "
             f"{longest} outputs")
    if madvise and thp in ("always", "madvise") and numpy_pages < 0.5 * longest:
        return (f"{start}: it asks the kernel for transparent huge pages on large arrays (its "
                f"madvise setting is on; the kernel's mode is {thp}), and each huge page "
                "granted maps 2 MiB with one fault instead of 512.")
    return f"{start}; transparent huge pages (kernel mode {thp}) did not visibly reduce that."


def defaults_drop(defaults, kept) -> str:
    """The four PyTorch and JAX medians under both settings, for one sentence."""
    return "; ".join(f"{v} {defaults[v].median * 1e3:.1f} ms with glibc's defaults, "
                     f"{kept[v].median * 1e3:.1f} ms with memory kept"
                     for v in ("PyTorch eager", "JAX op by op", "jax.jit", "torch.compile"))


def listed(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def said(claim, baseline: str) -> str:
    """'tied with jax.jit (1.002x [0.887, 1.018])': a claim's phrase, its baseline's name
    and its numbers, for a sentence whose subject is the candidate."""
    from dataclasses import asdict

    return f"{PHRASES[claim.verdict]} {baseline} ({describe(asdict(claim))})"


def one_vs_chain_reading(verdict_of: Callable[[str], str], kinds_one: list[str],
                         kinds_whole: list[str], described: tuple[str, str]) -> str:
    """One compiled operation against the fused chain, by the four claims' verdicts, set
    against the one-pass model (both should tie). `kinds_*` are the jax.jit executables'
    kernel kinds, `described` their descriptions (one op, whole chain)."""
    ids = {"jax.jit": ("jit_one_vs_chain", "defaults_jit_one_vs_chain"),
           "torch.compile": ("compile_one_vs_chain", "defaults_compile_one_vs_chain")}
    settings = ("with freed memory kept", "with glibc's defaults")
    by_verdict: dict[str, list[str]] = {}
    for name, claim_ids in ids.items():
        verdicts = [verdict_of(claim_id) for claim_id in claim_ids]
        if len(set(verdicts)) == 1:  # the allocator did not change it: say so once
            by_verdict.setdefault(verdicts[0], []).append(f"{name} under both allocator settings")
            continue
        for v, setting in zip(verdicts, settings, strict=True):
            by_verdict.setdefault(v, []).append(f"{name} {setting}")
    if len(by_verdict) == 1:  # one verdict for all four pairs
        by_verdict = {v: ["both compilers under both settings"] for v in by_verdict}
    parts = []
    if "slower" in by_verdict:
        parts.append(f"Contrary to the one-pass model, one operation was {PHRASES['slower']} "
                     f"the whole fused chain for {listed(by_verdict['slower'])}.")
    if "faster" in by_verdict:
        parts.append(f"One operation was {PHRASES['faster']} the whole fused chain for "
                     f"{listed(by_verdict['faster'])}, by more than the one-pass model allows.")
    if "tie" in by_verdict:
        parts.append(f"For {listed(by_verdict['tie'])} the two tied, as the one-pass model "
                     "predicts.")
    if "withheld" in by_verdict:
        parts.append(f"For {listed(by_verdict['withheld'])} the rule withheld a verdict.")
    if by_verdict.keys() & {"slower", "faster"}:
        same_kind = kinds_one == kinds_whole == ["loop"]
        parts.append(("Both jax.jit executables are a single XLA loop fusion, so a different "
                      "kind of kernel does not explain it for jax.jit. " if same_kind else
                      f"The jax.jit executables differ: one operation runs {described[0]}, "
                      f"the chain {described[1]}. ") + "This page does not explain the difference.")
    return " ".join(parts)


def k1_reading(kept, defaults, gap_ms: float, per_op_us: float) -> str:
    """The one-operation pair under both allocator settings (`kept`, `defaults`: the two
    claims); `gap_ms` the difference of medians with memory kept, `per_op_us` one eager JAX
    operation on a tiny array."""
    other = ("With glibc's defaults, in a process of their own, jax.jit was "
             f"{said(defaults, 'JAX op by op')}.")
    if kept.verdict in ("tie", "withheld") or defaults.verdict == kept.verdict:
        return other
    return (f"With freed memory kept the medians differ by {gap_ms:.2f} ms per call, about "
            f"{gap_ms * 1e3 / per_op_us:,.0f} times the whole cost of one JAX operation on a "
            f"tiny array measured in the dispatch section ({per_op_us:.0f} µs), so it is not "
            f"dispatch. {other} This page does not explain the gap.")


def eager_gap_reading(kept, defaults, gap_ms: float, per_op_us: float) -> str:
    """PyTorch eager against JAX op by op on the large chain, under both settings;
    `gap_ms` the difference of medians per operation with memory kept."""
    other = f"With glibc's defaults, PyTorch eager was {said(defaults, 'JAX op by op')}."
    if kept.verdict in ("tie", "withheld"):
        return other
    return (f"The two eager chains' medians differ by {gap_ms:.2f} ms per operation with "
            f"freed memory kept, about {gap_ms * 1e3 / per_op_us:,.0f} times the whole cost of "
            f"one JAX operation on a tiny array ({per_op_us:.0f} µs), so that gap is not "
            f"dispatch. {other} This page does not explain the gap further.")


# --- readings: what compilation costs ------------------------------------------------------

def two_figures(x: float) -> str:
    """A count of calls to two significant figures ('never' when nothing is saved)."""
    return "never" if not np.isfinite(x) else f"{float(f'{x:.2g}'):g}"


def break_even_label(calls: float, k: int, jit_column: bool, k1_verdict: str) -> str:
    """The break-even count as shown; where the k = 1 claim of jax.jit against op by op is a
    tie, no saving per call was measured, so no count is shown."""
    if jit_column and k == 1 and k1_verdict == "tie":
        return NO_SAVING
    return two_figures(calls)


def pays_after(calls: float) -> str:
    """'after 0.093 calls', or 'at no point, ...' when no call saved time."""
    if np.isfinite(calls):
        return f"after {two_figures(calls)} calls"
    return "at no point, since by the medians no call saved time"


def stage_table(stage_runs: Mapping[int, list], fusion: Mapping[int, Mapping[str, Timing]]):
    """Per chain length: jax.jit's median trace, lower and compile (ms), torch.compile's first
    call (s) and each compiler's break-even calls (compile cost over time saved per call)."""
    import pandas as pd

    from deepdive.core import compilation

    rows = []
    for k, runs in stage_runs.items():
        stages = {s: float(np.median([getattr(r, s) for r in runs]))
                  for s in ("trace", "lower", "compile")}
        t = fusion[k]
        compile_cost = t["torch.compile"].first_call - t["torch.compile"].median
        rows.append({"k": k, **{f"jax.jit {s} (ms)": v * 1e3 for s, v in stages.items()},
                     "torch.compile first call (s)": t["torch.compile"].first_call,
                     "jax.jit break-even calls": compilation.break_even_calls(
                         sum(stages.values()), t["JAX op by op"].median, t["jax.jit"].median),
                     "torch.compile break-even calls": compilation.break_even_calls(
                         compile_cost, t["PyTorch eager"].median, t["torch.compile"].median)})
    return pd.DataFrame(rows).set_index("k")


def regime_finding(verdict_of: Callable[[str], str]) -> tuple[list[str], str]:
    """The headline candidates whose verdict the allocator left alone, and the box's
    sentence about it."""
    steady = [c for c in HEADLINE_CANDIDATES if verdict_of(c) == verdict_of(f"defaults_{c}")]
    moved = [HEADLINE_CANDIDATES[c] for c in HEADLINE_CANDIDATES if c not in steady]
    one = len(steady) == 1
    text = (f"{len(HEADLINE_CANDIDATES)} of this box's candidates were also measured under "
            f"glibc's defaults (the allocator section says why that matters): {len(steady)} "
            f"kept {'its' if one else 'their'} verdict there and {'stands' if one else 'stand'} "
            "in this box")
    if moved:
        text += (f"; {len(moved)} changed with the allocator ({' and '.join(moved)}), so "
                 f"{'it stays' if len(moved) == 1 else 'they stay'} in the allocator section.")
    else:
        text += "; none changed with the allocator."
    return steady, text


def times_as_long(ratio: float, baseline: str, candidate: str) -> str:
    """'the jit side took 1.45 times as long': a claim's median ratio, read the long way."""
    if ratio >= 1:
        return f"{baseline} took {ratio:.2f} times as long"
    return f"{candidate} took {1 / ratio:.2f} times as long"


def new_function_reading(kept: str, default: str, longest: int) -> str:
    """What the two new-function verdicts (memory kept, glibc's defaults) say together."""
    if default == kept:
        return "The allocator setting did not change this verdict on this build."
    if default == "faster" and kept in ("slower", "tie"):
        return ("So whether compiling pays on the first call depended on the allocator as "
                f"much as on the compiler: with glibc's defaults the op-by-op call maps "
                f"{longest} fresh arrays, and that cost more than a compile; with memory kept "
                "it did not.")
    return "So on this build the allocator setting changed the verdict."


def direct_test(claim, calls: float, opening: str) -> str:
    """Whether the one-call claim agrees with a break-even count from the steady medians
    (a count below 1 says compile + one call takes less time than one op-by-op call)."""
    from dataclasses import asdict

    if claim.verdict not in ("faster", "slower"):  # a tie or a withheld verdict tests nothing
        agrees = "neither confirms nor contradicts it"
    else:
        agrees = "agrees" if (claim.verdict == "faster") == (calls < 1) else "disagrees"
    return (f"{opening} {agrees}: a new function compiled and run once was "
            f"{PHRASES[claim.verdict]} one op-by-op call ({describe(asdict(claim))})")


# --- readings: caches, logs, flags -----------------------------------------------------------

def cache_off_reading(counts: list[int]) -> str:
    if counts == [1, 2, 3]:
        return ("Neither later setting stopped the writes: each compile added its executable, "
                "because the cache is initialised once per process and keeps the folder it "
                "was given.")
    return "The later settings changed what was written; the counts above show how."


def values_ms(values) -> str:
    """'3.2 and 11.2 ms': every value, in the order measured."""
    return listed([f"{v:.1f}" for v in values]) + " ms"


def widened_bands(saved) -> str:
    """'<sides>, <allocator setting>: ±x% (by what)' for every claim whose band widened."""
    widened = saved[saved["widened_by"].fillna("") != ""]
    return "; ".join(
        f"{q.split(': ')[-1]}, {q.split(': ')[0].split(', ')[-1]}: "
        f"±{100 * band:.1f}% (by {by})"
        for q, band, by in zip(widened["question"], widened["decision_band"],
                               widened["widened_by"], strict=True)) or "none"


def xla_gpu_autotune_level(help_text: str) -> str:
    """XLA's default GPU autotune level and its meaning, from `XLA_FLAGS=--help` output."""
    flag_line = re.search(r"--xla_gpu_autotune_level=(\d+).*", help_text)
    if flag_line is None:
        raise ValueError("XLA's --help lists no --xla_gpu_autotune_level")
    level = int(flag_line.group(1))
    meaning = re.search(rf"\b{level} = ([\w+]+)", flag_line.group(0))
    return f"{level} ({meaning.group(1)})" if meaning else str(level)


def xla_revision_note(help_text: str) -> str:
    if "xla_cpu_experimental_ynn_fusion_type" in help_text:
        return ("The jaxlib used here is newer than that revision: its XLA flags include a "
                "YNNPACK fusion option (xla_cpu_experimental_ynn_fusion_type) that the revision "
                "lacks, so its defaults may differ from the list above.")
    return "Its defaults may differ from that revision's."


def _cache_hits() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    return (counters["inductor"]["fxgraph_cache_hit"],
            counters["aot_autograd"]["autograd_cache_hit"])


@contextmanager
def no_cache_used(inductor_cache: Path):
    """Fail unless the block neither built a new Inductor kernel library under
    `inductor_cache` nor served a compile from the FX graph or AOTAutograd cache."""
    libraries, hits = len(list(inductor_cache.rglob("*.so"))), _cache_hits()
    yield
    if len(list(inductor_cache.rglob("*.so"))) != libraries:
        raise AssertionError("Inductor built a new kernel library")
    if _cache_hits() != hits:
        raise AssertionError("a compile was served from a cache")


@contextmanager
def jax_log():
    """Collect the messages JAX logs inside the block (a list, filled as they come)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect()
    logging.getLogger("jax").addHandler(handler)
    try:
        yield messages
    finally:
        logging.getLogger("jax").removeHandler(handler)


class TypedCommands(io.StringIO):
    """Debugger commands from a string, echoed into `transcript` as if typed."""

    def __init__(self, commands: str, transcript: io.StringIO):
        super().__init__(commands)
        self.transcript = transcript

    def readline(self, *args):
        line = super().readline(*args)
        self.transcript.write(line)
        return line


def dynamo_graphs(dynamic, sizes=(8, 16, 32, 64)) -> int:
    """Graphs Dynamo captured for one small function called on each size in turn."""
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    fn = torch.compile(lambda v: (v * 2).sin().sum(), dynamic=dynamic, backend="eager")
    for n in sizes:
        fn(torch.ones(n))
    return counters["stats"]["unique_graphs"]


# --- the stream of shapes --------------------------------------------------------------------

def bucket(n: int) -> int:
    """The next power of two at or above n."""
    return 1 << int(np.ceil(np.log2(n)))


def padded_stream(stream, pad: bool):
    """Each input with its mask and length, padded to its bucket or kept exact."""
    import jax.numpy as jnp

    ready = []
    for v in stream:
        size = bucket(len(v)) if pad else len(v)
        padded = np.zeros(size, np.float32)
        padded[: len(v)] = v
        ready.append((jnp.asarray(padded), jnp.asarray(np.arange(size) < len(v)),
                      jnp.float32(len(v))))
    return ready


def whole_stream(fn: Callable, inputs) -> Callable[[], list]:
    """A call that clears JAX's caches, then runs `jax.jit(fn)` over every input."""
    import jax

    def run():
        jax.clear_caches()  # every shape of the stream compiles again
        jitted = jax.jit(fn)
        return [jitted(*args) for args in inputs]
    return run


# --- figures ---------------------------------------------------------------------------------

def _log_ticks(axis) -> None:
    import matplotlib.ticker as mticker

    axis.set_major_locator(mticker.LogLocator(subs=(1, 2, 5)))
    axis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(mticker.NullFormatter())


def plot_fusion(fusion, lengths, one_pass_s: float, mib: float, caption: str):
    """Time per call against chain length, per variant, with the plain-copy yardstick."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(8, 5))
    for variant, color in COLORS.items():
        plots.plot_timings(ax, lengths, [fusion[k][variant] for k in lengths], label=variant,
                           color=color)
    ax.plot(lengths, [one_pass_s * k * 1e3 for k in lengths], "k--", linewidth=1,
            label="k plain copies of the array, each into owned memory")
    ax.axhline(one_pass_s * 1e3, color="k", linestyle=":", linewidth=1,
               label="one plain copy of the array, into owned memory")
    plots.log_axes(ax)
    _log_ticks(ax.yaxis)
    ax.set_xticks(lengths, [str(k) for k in lengths], minor=False)
    ax.set_xticks([], minor=True)
    ax.set(title=f"a chain of k elementwise ops on {mib:.0f} MiB, freed memory kept",
           xlabel="operations in the chain (k)", ylabel="time per call (ms, median, IQR bars)")
    ax.legend(fontsize=7, loc="upper left")
    plots.caption(fig, caption)
    fig.subplots_adjust(bottom=0.22)
    return fig


def _dots(ax, rows_by_setting, names, unit: float):
    """One row per variant name: median and IQR whiskers (in seconds / `unit`), a marker per
    setting, offset when there are two."""
    for offset, (label, timings, marker) in zip((-0.15, 0.15), rows_by_setting, strict=False):
        medians = np.array([timings[v].median for v in names]) / unit
        whiskers = [medians - np.array([timings[v].q1 for v in names]) / unit,
                    np.array([timings[v].q3 for v in names]) / unit - medians]
        ax.errorbar(medians, np.arange(len(names)) + offset * (len(rows_by_setting) > 1),
                    xerr=whiskers, fmt=marker, capsize=3, label=label)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    _log_ticks(ax.xaxis)


def plot_allocators(kept, defaults, names, longest: int, mib: float, caption: str):
    """Each variant's median under both allocator settings (two processes, not a verdict)."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(8, 5.2))
    _dots(ax, [(KEPT, kept, "s"), ("glibc defaults", defaults, "o")], names, 1e-3)
    ax.set(title=f"{mib:.0f} MiB array, chain of {longest} ops and plain copies:\n"
                 "memory reused (this page) against new pages for every output (glibc defaults)",
           xlabel="time per call (ms, median, IQR whiskers, log scale)")
    ax.legend(loc="lower right")
    plots.caption(fig, caption)
    fig.subplots_adjust(left=0.32, bottom=0.2)
    return fig


def plot_dispatch(dispatch, k: int, caption: str):
    """Each variant's time per call on tiny arrays: the cost is dispatch."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    _dots(ax, [("", dispatch, "o")], list(dispatch), 1e-6)
    ax.set(title=f"{k} elementwise ops on 16 elements: the cost is dispatch",
           xlabel="time per call (µs, median with IQR whiskers, log scale)")
    plots.caption(fig, caption)
    fig.subplots_adjust(left=0.2, bottom=0.25)
    return fig


def plot_compile_costs(stage_runs, table, labels_by_column, runs: int, caption: str):
    """jax.jit's stages, torch.compile's first call and both break-even counts, by k."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    lengths = list(table.index)
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(12, 4.4))
    for offset, (stage, color) in enumerate(zip(("trace", "lower", "compile", "total"),
                                               ("tab:blue", "tab:orange", "tab:red", "k"),
                                               strict=True)):
        per_k = [np.array([r.total if stage == "total" else getattr(r, stage)
                           for r in stage_runs[k]]) * 1e3 for k in lengths]
        medians = np.array([np.median(r) for r in per_k])
        quartiles = np.array([np.percentile(r, [25, 75]) for r in per_k])
        left.errorbar(np.arange(len(lengths)) + 0.08 * (offset - 1.5), medians,
                      yerr=[medians - quartiles[:, 0], quartiles[:, 1] - medians], fmt="o-",
                      capsize=3, markersize=4, color=color, label=stage)
    left.set_xticks(range(len(lengths)), [str(k) for k in lengths])
    left.set(title=f"jax.jit: compile cost by stage\n(median of {runs} runs, IQR whiskers)",
             xlabel="operations in the chain (k)", ylabel="time (ms)", ylim=(0, None))
    left.legend(ncol=2, loc="center right", fontsize=7)
    first = table["torch.compile first call (s)"]
    middle.plot([str(k) for k in lengths], first, "s", color=COLORS["torch.compile"])
    middle.set(title="torch.compile: first call\n(one run each, Inductor already set up)",
               xlabel="operations in the chain (k)", ylabel="time (s)",
               ylim=(0, 1.15 * first.max()))
    for column, color, marker in (("jax.jit break-even calls", COLORS["jax.jit"], "o"),
                                  ("torch.compile break-even calls", COLORS["torch.compile"], "s")):
        labels = labels_by_column[column]
        missing = [label in ("never", NO_SAVING) for label in labels]
        right.plot(lengths, [np.nan if m else table.loc[k, column]
                             for k, m in zip(lengths, missing, strict=True)],
                   marker=marker, color=color, label=column.replace(" break-even calls", ""))
        for k, label, m in zip(lengths, labels, missing, strict=True):
            if m:  # no count to plot: say why at the axis
                right.annotate(f"{column.split()[0]}: {label}",
                               (k, 0.02 if marker == "o" else 0.09),
                               xycoords=("data", "axes fraction"), xytext=(4, 0),
                               textcoords="offset points", fontsize=7, color=color)
    right.axhline(1, color="k", linestyle=":", linewidth=1, label="one call")
    right.set(title="calls until compiling has paid for itself\n"
                    "(\"never\": no time saved per call)",
              xlabel="operations in the chain (k)", ylabel="compile cost / time saved per call")
    plots.log_axes(right)
    right.set_xticks(lengths, [str(k) for k in lengths], minor=False)
    right.set_xticks([], minor=True)
    _log_ticks(right.yaxis)
    right.legend(loc="center right")
    plots.caption(fig, caption)
    fig.subplots_adjust(wspace=0.4, bottom=0.24, top=0.85)
    return fig


# --- the record ------------------------------------------------------------------------------

def _framework(variant: str) -> str:
    return "torch" if "orch" in variant else "numpy" if variant == "NumPy" else "jax"


def save_records(records, timings_by_experiment, stage_rows, inductor_setup_s: float,
                 array_bytes: int, owned_copy_s: float):
    """Add every timing (`{experiment: {size: {variant: Timing}}}`), the compile costs per
    chain length and the copy's bandwidth to `records` (a `Results`), and save it."""
    for experiment, by_size in timings_by_experiment.items():
        for size, timings in by_size.items():
            for variant, timing in timings.items():
                records.add_timing(experiment, _framework(variant), variant, size, timing)
    for k, row in stage_rows.iterrows():
        jit_s = sum(row[f"jax.jit {s} (ms)"] for s in ("trace", "lower", "compile")) / 1e3
        records.add("compile_stages", "jax", "jax.jit", k, "compile_total", jit_s, "s")
        records.add("compile_stages", "torch", "torch.compile", k, "first_call",
                    row["torch.compile first call (s)"], "s")
    records.add("compile_stages", "torch", "inductor set-up", 1, "first_call",
                inductor_setup_s, "s")
    records.add("plain_copy", "torch", "copy into owned memory", array_bytes,
                "read+write bytes per s", 2 * array_bytes / owned_copy_s, "B/s")
    return records.save()
