"""Chapter 1 (vmap): the workloads and variants it times, the measurements it makes
around them, its figures, and the readings that turn its timings and verdicts into the
page's sentences and tables.

The page shows the technique (`torch.func.vmap`, `jax.vmap`, `vmap(grad)`) and calls these
for the rest. `sizes` arguments are a chapter's sizes from `deepdive.book.plans.sizes("01_vmap",
scale)`; `sweep` is `{(workload, batch): {variant: Timing}}`; `verdict_of` maps claim ids to
the verdict read back from claims.csv.
"""

from __future__ import annotations

import functools
import inspect
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from deepdive.core import env
from deepdive.core.timing import Timing

__all__ = [
    "ATTENTION_CALLS", "GRAD_CLAIMS", "JAX_39103", "PRECISION", "STYLE", "WORKLOADS",
    "JitCheck", "at_set_readings", "jit_check_reading", "jit_matches_eager",
    "attention_jax", "attention_reference", "attention_torch", "attention_torch_batched",
    "batched_reading", "break_even_table", "break_even_text", "by_batch", "compiled_grad_readings",
    "dispatch_readings", "dispatch_table", "dot_growth_readings", "dot_jax", "dot_reference",
    "dot_torch", "dot_torch_batched", "faults_per_call", "faults_readings", "faults_table",
    "first_call_readings", "first_calls_table", "fori_writes", "framework", "glue_all",
    "grad_inputs", "grad_reference", "grad_variants", "grads_check", "grads_reading",
    "host_peak_readings", "host_peaks", "jax_variants", "kernel_readings", "loop_reading",
    "make_inputs", "peak_setup", "per_call_times", "plan_readings", "plot_dispatch",
    "plot_first_calls", "plot_grads", "plot_rss", "plot_sweep", "recompiled",
    "register_grad_claims", "register_sweep_claims", "rss_readings", "save_records", "scope",
    "shown_break_evens", "summary_readings", "time_sweep", "torch_variants", "xla_plan_table",
]

PRECISION = "fp32, highest matmul precision (no TF32), hand-written attention"


def scope(device: str, cpu_threads: int, gpu_name: Callable[[], str | None] = env.gpu_name
          ) -> tuple[str, str]:
    """(threads, scope): the threads per framework for captions, and the device part of
    every claim's scope ("CPU, 1 thread" on a CPU, the GPU's name on a GPU)."""
    plural = "s" if cpu_threads > 1 else ""
    threads = f"{cpu_threads} intra-op thread{plural} per framework"
    return threads, (f"CPU, {cpu_threads} thread{plural}" if device == "cpu" else gpu_name())


def framework(variant: str) -> str:
    """"torch" for a PyTorch variant's label, "jax" for any other."""
    return "torch" if variant.startswith(("PyTorch", "torch")) else "jax"


# --- jit must equal eager: an upstream bug's pattern, at a size that triggers it -------------

JAX_39103 = "jax-ml/jax#39103"
JAX_39103_URL = "https://github.com/jax-ml/jax/issues/39103"
# The float32 size: its wrong results appear from 32,769 rows on the CPU.
JAX_39103_ROWS = 32_769


@dataclass(frozen=True)
class JitCheck:
    """One run of a jitted function against the same function eager (chapter 1)."""

    pattern: str
    rows: int
    jax: str
    backend: str
    eager_last: float
    jit_last: float
    mismatches: int

    @property
    def matches(self) -> bool:
        return self.mismatches == 0

    @property
    def known_bug(self) -> str | None:
        """The upstream issue a mismatch of this pattern is (None when jit matched)."""
        return None if self.matches else JAX_39103

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"jax": [self.jax], "backend": [self.backend], "rows": [self.rows],
                             "eager, last row": [f"{self.eager_last:,.0f}"],
                             "jax.jit, last row": [f"{self.jit_last:,.0f}"],
                             "rows that differ": [self.mismatches],
                             "upstream bug": [self.known_bug or "none: jit equals eager"]})


def jit_matches_eager(rows: int = JAX_39103_ROWS) -> JitCheck:
    """Chapter 1: `jax.jit(jax.vmap(row -> sum((m @ row) ** 2)))` against the same function
    eager, on `rows` float32 rows `(i, 0, 0)` with `m` the 3x3 identity: every output is
    `i**2` rounded to float32 (exact up to i = 4096), the same rounding eager and jitted, so
    the two must agree exactly. jax 0.10.2
    returned wrong values under jit on the CPU from 32,769 rows (jax-ml/jax#39103). Returns
    the comparison; a mismatch is that known upstream bug, which the page reports."""
    import jax
    import jax.numpy as jnp

    if rows < 1:
        raise ValueError(f"rows must be a positive count, got {rows}")
    i = jnp.arange(rows, dtype=jnp.float32)
    x = jnp.stack((i, jnp.zeros_like(i), jnp.zeros_like(i)), axis=1)
    m = jnp.eye(3, dtype=jnp.float32)

    def squared_norms(x):
        return jax.vmap(lambda row: jnp.sum((m @ row) ** 2))(x)

    eager = np.asarray(squared_norms(x))
    jitted = np.asarray(jax.jit(squared_norms)(x))
    return JitCheck("jax.jit(jax.vmap(lambda row: jnp.sum((m @ row) ** 2)))", rows,
                    jax.__version__, jax.default_backend(), float(eager[-1]),
                    float(jitted[-1]), int((eager != jitted).sum()))


def jit_check_reading(check: JitCheck) -> str:
    """The sentence the page glues for the check: it passed, or which upstream bug failed it."""
    where = f"jax {check.jax} on the {check.backend.upper()}, {check.rows:,} rows"
    if check.matches:
        return (f"With {where}, jax.jit returned exactly what eager execution did, row for "
                f"row: this build's JAX does not show {JAX_39103}'s wrong result.")
    return (f"With {where}, jax.jit returned {check.jit_last:,.0f} for the last row where "
            f"eager execution returned {check.eager_last:,.0f} ({check.mismatches:,} "
            f"{'row differs' if check.mismatches == 1 else 'rows differ'}): this build's JAX "
            f"has the known upstream bug {JAX_39103} ({JAX_39103_URL}), so treat its jitted "
            "vmapped reductions at this size with suspicion.")


# --- the two workloads, per example, and their float64 references ---------------------

def dot_torch(x, y):
    """One example: two (d,) vectors -> a scalar."""
    import torch

    return torch.dot(x, y)


def dot_jax(x, y):
    """One example: two (d,) vectors -> a scalar."""
    import jax.numpy as jnp

    return jnp.dot(x, y)


def attention_torch(q, k, v):
    """One example: (T, d) query, key and value -> (T, d)."""
    import torch

    scores = q @ k.T / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def attention_jax(q, k, v):
    """One example: (T, d) query, key and value -> (T, d)."""
    import jax

    scores = q @ k.T / q.shape[-1] ** 0.5
    return jax.nn.softmax(scores, axis=-1) @ v


def dot_torch_batched(x, y):
    """The dots of a batch by hand: `einsum`."""
    import torch

    return torch.einsum("bd,bd->b", x, y)


def attention_torch_batched(q, k, v):
    """Attention over a batch by hand: batched matmuls."""
    import torch

    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def dot_reference(x, y):
    """The batch's dot products in NumPy."""
    return np.einsum("bd,bd->b", x, y)


def attention_reference(q, k, v):
    """The batch's attention in NumPy."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


WORKLOADS = {
    "dot": dict(torch=dot_torch, jax=dot_jax, torch_batched=dot_torch_batched,
                reference=dot_reference, shape=lambda s, b: (b, s.dot_dim), n_args=2),
    "attention": dict(torch=attention_torch, jax=attention_jax,
                      torch_batched=attention_torch_batched, reference=attention_reference,
                      shape=lambda s, b: (b, s.seq_len, s.head_dim), n_args=3),
}


def make_inputs(workload: str, batch: int, sizes) -> list[np.ndarray]:
    """fp32 NumPy inputs for one batch, the same for both frameworks."""
    spec = WORKLOADS[workload]
    rng = np.random.default_rng(batch)
    return [rng.standard_normal(spec["shape"](sizes, batch), dtype=np.float32)
            for _ in range(spec["n_args"])]


# --- the variants ----------------------------------------------------------------------

def torch_variants(workload: str, arrays, device: str) -> dict[str, Callable]:
    """A loop, `torch.func.vmap`, the hand-batched ops and `torch.compile(vmap)` (one
    static-shape graph, no breaks)."""
    import torch
    from torch.func import vmap

    spec = WORKLOADS[workload]
    f, batched = spec["torch"], spec["torch_batched"]
    args = [torch.from_numpy(a).to(device) for a in arrays]
    vmapped = vmap(f)
    compiled = torch.compile(vmapped, dynamic=False, fullgraph=True)
    return {
        "PyTorch loop": lambda: torch.stack([f(*ex) for ex in zip(*args, strict=True)]),
        "torch.func.vmap": lambda: vmapped(*args),
        "PyTorch batched ops": lambda: batched(*args),
        "torch.compile(vmap)": lambda: compiled(*args),
    }


def fori_writes(f, *args):
    """A `lax.fori_loop` writing f of each example into a preallocated output."""
    import jax
    import jax.numpy as jnp

    out_shape = jax.eval_shape(jax.vmap(f), *args)

    def body(i, out):
        return out.at[i].set(f(*(a[i] for a in args)))

    return jax.lax.fori_loop(0, len(args[0]), body, jnp.zeros(out_shape.shape, out_shape.dtype))


def jax_variants(workload: str, arrays) -> dict[str, Callable]:
    """An eager loop, a loop of the jitted function, the eager `.at[].set` loop,
    `jax.vmap`, `jax.jit(vmap)` and a jitted `fori_loop` of `.at[].set` writes."""
    import jax
    import jax.numpy as jnp

    f = WORKLOADS[workload]["jax"]
    args = [jnp.asarray(a) for a in arrays]
    out_shape = jax.eval_shape(jax.vmap(f), *args)

    def at_set_loop(*args):
        out = jnp.zeros(out_shape.shape, out_shape.dtype)
        for i, example in enumerate(zip(*args, strict=True)):
            out = out.at[i].set(f(*example))
        return out

    one_jitted, vmapped, jitted = jax.jit(f), jax.vmap(f), jax.jit(jax.vmap(f))
    at_set_jitted = jax.jit(functools.partial(fori_writes, f))
    return {
        "JAX loop": lambda: jnp.stack([f(*ex) for ex in zip(*args, strict=True)]),
        "JAX loop of jax.jit(f)": lambda: jnp.stack([one_jitted(*ex)
                                                     for ex in zip(*args, strict=True)]),
        "JAX .at[].set loop": lambda: at_set_loop(*args),
        "jax.vmap": lambda: vmapped(*args),
        "jax.jit(vmap)": lambda: jitted(*args),
        "jax.jit(.at[].set fori_loop)": lambda: at_set_jitted(*args),
    }


# --- per-example gradients -------------------------------------------------------------

def grad_inputs(sizes, seed: int = 7):
    """(params, x, y) in float64 NumPy for the two-layer MLP of the gradients section."""
    f, h = sizes.grad_features, sizes.grad_hidden
    rng = np.random.default_rng(seed)
    params = {"w1": rng.standard_normal((f, h)) / np.sqrt(f), "b1": rng.standard_normal(h) * 0.1,
              "w2": rng.standard_normal(h) / np.sqrt(h), "b2": np.array(0.1)}
    return params, rng.standard_normal((sizes.grad_batch, f)), rng.standard_normal(sizes.grad_batch)


def grad_reference(params, x, y) -> dict[str, np.ndarray]:
    """Every example's gradient of the squared error, worked out by hand, batched."""
    hidden = np.tanh(x @ params["w1"] + params["b1"])                  # (B, H)
    residual = hidden @ params["w2"] + params["b2"] - y                # (B,)
    d_hidden = 2 * residual[:, None] * params["w2"] * (1 - hidden**2)  # (B, H)
    return {"w1": np.einsum("bi,bh->bih", x, d_hidden), "b1": d_hidden,
            "w2": 2 * residual[:, None] * hidden, "b2": 2 * residual}


def grads_check(expected: Mapping[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5):
    """A `compare` check: every named gradient within fp32's tolerance of float64's."""
    from deepdive.core.equality import as_numpy

    def check(out) -> None:
        for name, want in expected.items():
            np.testing.assert_allclose(as_numpy(out[name]), want, rtol=rtol, atol=atol,
                                       err_msg=name)

    return check


def grad_variants(loss_torch, loss_jax, params, x, y, device: str) -> dict[str, Callable]:
    """The seven ways to per-example gradients, eager and compiled, in both frameworks."""
    import jax
    import jax.numpy as jnp
    import torch
    from torch.func import grad, vmap

    t_params = {k: torch.tensor(v, dtype=torch.float32, device=device) for k, v in params.items()}
    t_x, t_y = (torch.tensor(a, dtype=torch.float32, device=device) for a in (x, y))
    j_params = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in params.items()}
    j_x, j_y = jnp.asarray(x, dtype=jnp.float32), jnp.asarray(y, dtype=jnp.float32)

    def torch_backward_loop():
        leaves = {k: v.detach().requires_grad_() for k, v in t_params.items()}
        per_example = {k: [] for k in leaves}
        for x_i, y_i in zip(t_x, t_y, strict=True):
            loss_torch(leaves, x_i, y_i).backward()
            for k, leaf in leaves.items():
                per_example[k].append(leaf.grad.clone())
                leaf.grad = None
        return {k: torch.stack(v) for k, v in per_example.items()}

    def jax_loop(grad_one):
        per_example = [grad_one(j_params, x_i, y_i) for x_i, y_i in zip(j_x, j_y, strict=True)]
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *per_example)

    torch_vmap_grad = vmap(grad(loss_torch), in_dims=(None, 0, 0))
    compiled = torch.compile(torch_vmap_grad, dynamic=False, fullgraph=True)
    grad_one, jit_grad_one = jax.grad(loss_jax), jax.jit(jax.grad(loss_jax))
    jax_vmap_grad = jax.vmap(jax.grad(loss_jax), in_axes=(None, 0, 0))
    jit_vmap_grad = jax.jit(jax_vmap_grad)
    return {
        "PyTorch loop of backward()": torch_backward_loop,
        "torch.func vmap(grad)": lambda: torch_vmap_grad(t_params, t_x, t_y),
        "torch.compile(vmap(grad))": lambda: compiled(t_params, t_x, t_y),
        "JAX loop of jax.grad": lambda: jax_loop(grad_one),
        "JAX loop of jax.jit(grad)": lambda: jax_loop(jit_grad_one),
        "jax.vmap(grad)": lambda: jax_vmap_grad(j_params, j_x, j_y),
        "jax.jit(vmap(grad))": lambda: jit_vmap_grad(j_params, j_x, j_y),
    }


# (claim id, baseline, candidate, headline)
GRAD_CLAIMS = (
    ("grads_torch_vmap_vs_loop", "PyTorch loop of backward()", "torch.func vmap(grad)", True),
    ("grads_jax_vmap_vs_loop", "JAX loop of jax.grad", "jax.vmap(grad)", False),
    ("grads_jit_vs_jit_loop", "JAX loop of jax.jit(grad)", "jax.jit(vmap(grad))", False),
    ("grads_compile_vs_vmap", "torch.func vmap(grad)", "torch.compile(vmap(grad))", False),
    ("grads_jax_vs_torch_eager", "torch.func vmap(grad)", "jax.vmap(grad)", False),
    ("grads_jit_vs_compile", "torch.compile(vmap(grad))", "jax.jit(vmap(grad))", True),
)


def register_grad_claims(claims, timings: Mapping[str, Timing], sizes, device_scope: str) -> None:
    """The gradients section's six claims, each scoped to its batch, model and device."""
    where = (f"per-example gradients, batch {sizes.grad_batch}, {sizes.grad_features}->"
             f"{sizes.grad_hidden}->1 MLP, {device_scope}")
    for claim_id, baseline, candidate, headline in GRAD_CLAIMS:
        claims.compare(claim_id, f"{where}: {candidate} against {baseline}",
                       timings[baseline], timings[candidate], headline=headline)


def compiled_grad_readings(timings: Mapping[str, Timing]) -> dict[str, str]:
    """Medians, first calls and harness costs of the two compiled `vmap(grad)`s."""
    pair = {v: timings[v] for v in ("torch.compile(vmap(grad))", "jax.jit(vmap(grad))")}
    return {
        "grads_medians_us": " and ".join(f"{v} {t.median * 1e6:.0f} µs" for v, t in pair.items()),
        "grads_first_calls": " and ".join(f"{v} {t.first_call:.2f} s" for v, t in pair.items()),
        "grads_harness_us": " and ".join(f"{v} {t.harness_s * 1e6:.2f} µs"
                                         for v, t in pair.items()),
    }


# --- the sweep -------------------------------------------------------------------------

def time_sweep(sizes, device: str, progress=env.progress):
    """Every variant of both workloads at every batch size, one `compare` per point, each
    checked against the float64 reference first. Returns (sweep, calls): the timings, and
    the variants' callables (for the page-fault count). Each point starts from an empty
    Dynamo cache and must compile a graph."""
    import torch
    from torch._dynamo.utils import counters

    from deepdive.core.equality import matches
    from deepdive.core.timing import compare

    sweep, calls = {}, {}
    points = [(w, b) for w in WORKLOADS for b in sizes.batch_sizes]
    for workload, batch in progress(points, "sweep"):
        arrays = make_inputs(workload, batch, sizes)
        reference = WORKLOADS[workload]["reference"](*(a.astype(np.float64) for a in arrays))
        torch._dynamo.reset()  # a fresh compile per point, never a stale cache entry
        graphs_before = counters["stats"]["unique_graphs"]
        variants = {**torch_variants(workload, arrays, device), **jax_variants(workload, arrays)}
        calls[workload, batch] = variants
        check = matches(reference, rtol=1e-4, atol=1e-4)
        sweep[workload, batch] = compare(variants, check=dict.fromkeys(variants, check))
        assert counters["stats"]["unique_graphs"] > graphs_before, (
            f"torch.compile(vmap) compiled no graph for {workload} at batch {batch}: "
            "it ran eagerly")
    return sweep, calls


def recompiled(sweep) -> dict:
    """{(workload, batch, variant): recompiles} for every timing that recompiled."""
    return {(w, b, v): t.recompiles for (w, b), ts in sweep.items() for v, t in ts.items()
            if t.recompiles}


def register_sweep_claims(claims, sweep, sizes, device_scope: str) -> None:
    """The sweep's claims: seven per workload at the largest batch, and three questions
    whose answer may change with the size at every batch."""
    shapes = {"dot": f"d={sizes.dot_dim}", "attention": f"T={sizes.seq_len}, d={sizes.head_dim}"}
    largest = sizes.batch_sizes[-1]

    def claim(claim_id, workload, batch, baseline, candidate, headline=False):
        claims.compare(claim_id, f"{workload} ({shapes[workload]}), batch {batch}, "
                       f"{device_scope}: {candidate} against {baseline}",
                       sweep[workload, batch][baseline], sweep[workload, batch][candidate],
                       headline=headline)

    for w in WORKLOADS:
        head = w == "attention"
        claim(f"{w}_torch_vmap_vs_loop", w, largest, "PyTorch loop", "torch.func.vmap", head)
        claim(f"{w}_jax_vmap_vs_loop", w, largest, "JAX loop", "jax.vmap", head)
        claim(f"{w}_jit_vmap_vs_jit_loop", w, largest, "JAX loop of jax.jit(f)", "jax.jit(vmap)")
        claim(f"{w}_vmap_vs_batched", w, largest, "PyTorch batched ops", "torch.func.vmap")
        claim(f"{w}_compile_vs_batched", w, largest, "PyTorch batched ops", "torch.compile(vmap)")
        claim(f"{w}_jit_vs_compile", w, largest, "torch.compile(vmap)", "jax.jit(vmap)", head)
        claim(f"{w}_jit_vs_vmap", w, largest, "jax.vmap", "jax.jit(vmap)")
        for b in sizes.batch_sizes:
            claim(f"{w}_compile_vs_vmap_{b}", w, b, "torch.func.vmap", "torch.compile(vmap)")
            claim(f"{w}_fori_vs_vmap_{b}", w, b, "jax.jit(vmap)", "jax.jit(.at[].set fori_loop)")
    for b in sizes.batch_sizes:
        claim(f"attention_at_set_vs_loop_{b}", "attention", b, "JAX loop", "JAX .at[].set loop")


def dot_growth_readings(sweep, batch_sizes: Sequence[int]) -> dict[str, object]:
    """How the vectorized dot variants' times grew from the smallest batch to the largest,
    and whether that reads as fixed cost per call or as arithmetic."""
    smallest, largest = batch_sizes[0], batch_sizes[-1]
    growth = {v: sweep["dot", largest][v].median / sweep["dot", smallest][v].median
              for v in ("jax.jit(vmap)", "torch.compile(vmap)", "torch.func.vmap",
                        "PyTorch batched ops")}
    ratio = largest // smallest
    return {
        "smallest_batch": smallest, "largest_batch": largest, "batch_ratio": ratio,
        "dot_growth": ", ".join(f"{v} {g:.2f}x" for v, g in growth.items()),
        "dot_reading": "At this width most of a call's time is its fixed cost, not arithmetic, "
                       "so the dot claims below compare per-call costs"
                       if max(growth.values()) < ratio / 4 else
                       "Their times grew with the work, so the dot claims below include the "
                       "arithmetic",
    }


# --- page faults, first calls, break-even ------------------------------------------------

def faults_per_call(fn: Callable[[], object], calls: int = 5) -> float:
    """Minor page faults of the whole process per call of `fn`, after a warm-up call."""
    from deepdive.core.sync import block

    block(fn())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        block(fn())
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def faults_table(variants: Mapping[str, Callable], timings: Mapping[str, Timing],
                 count: Callable[[Callable], float] = faults_per_call) -> pd.DataFrame:
    """Page faults per call of each variant, beside whether its sweep timing was noisy."""
    return pd.DataFrame([{"variant": v, "page faults per call": count(fn),
                          "noisy in the sweep": timings[v].noisy}
                         for v, fn in variants.items()]).set_index("variant")


def faults_readings(faults: pd.DataFrame, sweep, threshold: float = 100) -> dict[str, str]:
    """Which variants faulted in `threshold` pages or more per call, and the noisy timings."""
    noisy = [f"{w} at batch {b}: {v}" for (w, b), ts in sweep.items()
             for v, t in ts.items() if t.noisy]
    faulting = faults[faults["page faults per call"] >= threshold]["page faults per call"]
    return {
        "noisy_timings": "; ".join(noisy) or "none",
        "faulting_variants": ", ".join(f"{v} ({n:.0f})" for v, n in faulting.items()) or "none",
        "faults_reading": "so no variant's steady state paid for fresh pages, and the allocator "
                          "regime held" if faulting.empty else
                          "so the allocator regime did not keep every variant's memory on this "
                          "build, and those variants' timings include fresh pages",
    }


def kernel_readings(batch_args) -> dict[str, str]:
    """The kernels of the jitted vmapped dot program and of its `fori_loop` twin."""
    import jax

    from deepdive.core.compilation import describe_kernels, entry_kernels

    def kernels(fn):
        return describe_kernels(entry_kernels(jax.jit(fn).lower(*batch_args).compile().as_text()))

    return {"dot_vmap_kernels": kernels(jax.vmap(dot_jax)),
            "dot_fori_kernels": kernels(functools.partial(fori_writes, dot_jax))}


def first_calls_table(sweep, largest: int) -> pd.DataFrame:
    """Each variant's first call against its steady median, at the largest batch."""
    return pd.DataFrame([
        {"workload": w, "variant": v, "first call (ms)": t.first_call * 1e3,
         "steady median (ms)": t.median * 1e3, "first / steady": t.first_call / t.median}
        for w in WORKLOADS for v, t in sweep[w, largest].items()])


def first_call_readings(first_calls: pd.DataFrame) -> dict[str, float]:
    """The compiled attention variants' first calls, in ms."""
    first = first_calls.set_index(["workload", "variant"])["first call (ms)"]
    return {"torch_compile_first_ms": first["attention", "torch.compile(vmap)"],
            "jax_jit_first_ms": first["attention", "jax.jit(vmap)"]}


def break_even_table(sweep, largest: int) -> pd.DataFrame:
    """Calls for each compile to pay for itself at the largest batch
    (`deepdive.core.compilation.break_even_calls`)."""
    from deepdive.core.compilation import break_even_calls

    rows = []
    for w in WORKLOADS:
        for eager, compiled in (("torch.func.vmap", "torch.compile(vmap)"),
                                ("jax.vmap", "jax.jit(vmap)")):
            t_eager, t_compiled = sweep[w, largest][eager], sweep[w, largest][compiled]
            compile_s = max(t_compiled.first_call - t_compiled.median, 0.0)
            rows.append({"workload": w, "compiled": compiled, "against": eager,
                         "compile (ms)": compile_s * 1e3,
                         "saved per call (µs)": (t_eager.median - t_compiled.median) * 1e6,
                         "break-even calls": break_even_calls(compile_s, t_eager.median,
                                                              t_compiled.median)})
    return pd.DataFrame(rows)


def shown_break_evens(break_evens: pd.DataFrame) -> pd.DataFrame:
    """The break-even table as shown: "never" for an infinite count, two figures else."""
    calls = break_evens["break-even calls"].map(
        lambda n: "never" if np.isinf(n) else f"{n:.2g}")
    return break_evens.assign(**{"break-even calls": calls}).round(2)


def break_even_text(verdict_of: Mapping[str, str], break_evens: pd.DataFrame, workload: str,
                    framework: str, largest: int) -> str:
    """Calls for a compile to pay, only where the compiled variant was decided faster."""
    claim_id = (f"{workload}_compile_vs_vmap_{largest}" if framework == "torch"
                else f"{workload}_jit_vs_vmap")
    rows = break_evens[(break_evens.workload == workload)
                       & break_evens.compiled.str.startswith(framework)]
    if verdict_of[claim_id] != "faster":
        return f"never on this build (no saving per call: {verdict_of[claim_id]})"
    calls = float(f"{rows.iloc[0]['break-even calls']:.2g}")  # two significant figures
    return f"after about {calls:,.0f} calls"


# --- dispatch-only timing ----------------------------------------------------------------

def per_call_times(fn: Callable[[], object], iterations: int, sync: bool) -> np.ndarray:
    """The seed's method: perf_counter around each call; `sync` adds the missing block."""
    from deepdive.core.sync import block

    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        out = fn()
        if sync:
            block(out)
        times.append(time.perf_counter() - start)
    block(out)  # drain the queue before the next measurement (outside the clock)
    return np.array(times)


def dispatch_table(candidates: Mapping[str, Callable], run_lengths: Sequence[int],
                   timer: Callable = per_call_times) -> pd.DataFrame:
    """Unsynced readings against the synced median, for runs of several lengths, each run
    once unsynced and once synced, in both orders (compiled beforehand)."""
    from deepdive.core.sync import block

    rows = []
    for variant, fn in candidates.items():
        block(fn())  # compile outside the clock
        for length in run_lengths:
            runs = {False: [], True: []}
            for order in ((False, True), (True, False)):
                for sync in order:
                    runs[sync].append(timer(fn, length, sync))
            unsynced, truth = np.concatenate(runs[False]), np.median(np.concatenate(runs[True]))
            rows.append({"variant": variant, "run length": length,
                         "unsynced median / true": np.median(unsynced) / truth,
                         "unsynced mean / true": unsynced.mean() / truth,
                         "calls returning early (per run)": (unsynced < 0.1 * truth).sum() / 2})
    return pd.DataFrame(rows)


def dispatch_readings(dispatch: pd.DataFrame, run_lengths: Sequence[int]) -> dict[str, object]:
    """What an unsynced timer read for `jax.jit(vmap)` in the shortest and longest runs,
    and the spread of PyTorch's."""
    jit = dispatch[dispatch.variant == "jax.jit(vmap)"].set_index("run length")
    torch_ratios = dispatch[dispatch.variant == "torch.func.vmap"]["unsynced median / true"]
    shortest, longest = run_lengths[0], run_lengths[-1]
    short_is_dispatch = jit.loc[shortest, "unsynced median / true"] < 0.5
    queue_filled = jit.loc[longest, "calls returning early (per run)"] < 0.9 * longest
    return {
        "run_shortest": shortest, "run_longest": longest,
        "unsynced_median_short": jit.loc[shortest, "unsynced median / true"],
        "unsynced_median_long": jit.loc[longest, "unsynced median / true"],
        "unsynced_mean_short": jit.loc[shortest, "unsynced mean / true"],
        "unsynced_mean_long": jit.loc[longest, "unsynced mean / true"],
        "early_calls_long": jit.loc[longest, "calls returning early (per run)"],
        "torch_unsynced_lo": torch_ratios.min(), "torch_unsynced_hi": torch_ratios.max(),
        "short_reading": "a reading of dispatch, not of work" if short_is_dispatch else
                         "already near the truth: on this build even short runs wait for "
                         "their work",
        "long_reading": "once the queue is full, each call waits for an earlier one, and the "
                        "reading drifts back towards the truth" if queue_filled else
                        "the queue never filled in runs this long, so the reading stayed one "
                        "of dispatch",
    }


# --- memory ----------------------------------------------------------------------------

def rss_readings(rss: Mapping[str, np.ndarray], batch: int, output_mib: float) -> dict:
    """The seed's RSS deltas: first call and how many calls moved RSS, per framework."""
    out = {"rss_batch": batch, "rss_output_mib": output_mib}
    for variant, key in (("torch.func.vmap", "torch"), ("jax.jit(vmap)", "jax")):
        out[f"rss_first_{key}"] = rss[variant][0]
        out[f"rss_nonzero_{key}"] = int(np.sum(np.abs(rss[variant]) > 1e-9))
    out["rss_calls"] = len(rss["torch.func.vmap"])
    return out


def xla_plan_table(sizes) -> tuple[pd.DataFrame, dict]:
    """XLA's static memory plan of `jax.jit(vmap(attention))` at every batch, beside the
    analytic score tensor and the kernels it launches; and those kernels by batch."""
    import jax
    import jax.numpy as jnp

    from deepdive.core import memory
    from deepdive.core.compilation import describe_kernels, entry_kernels

    rows, kernels_at = [], {}
    for batch in sizes.batch_sizes:
        args = [jnp.asarray(a) for a in make_inputs("attention", batch, sizes)]
        jitted = jax.jit(jax.vmap(attention_jax))
        planned = memory.xla_memory_plan(jitted, *args)
        kernels_at[batch] = entry_kernels(jitted.lower(*args).compile().as_text())
        rows.append({"batch": batch,
                     **{f"{k} (MiB)": planned[k] / 2**20 for k in ("argument", "output", "temp")},
                     "scores (MiB, analytic)": batch * sizes.seq_len ** 2 * 4 / 2**20,
                     "kernels": describe_kernels(kernels_at[batch])})
    return pd.DataFrame(rows).set_index("batch"), kernels_at


def plan_readings(xla_plan: pd.DataFrame, kernels_at: Mapping[int, list]) -> dict[str, str]:
    """Batches whose temporaries are exactly the scores, batches run as library fusions only."""
    stored = [b for b in xla_plan.index if np.isclose(xla_plan.loc[b, "temp (MiB)"],
                                                      xla_plan.loc[b, "scores (MiB, analytic)"])]
    library = [b for b in xla_plan.index if all(k.kind == "custom" for k in kernels_at[b])]
    return {
        "scores_stored_batches": ", ".join(map(str, stored)) or "no batch size",
        "library_batches": ", ".join(map(str, library)) or "no batch size",
        "plan_reading": "There the whole attention runs inside library fusions (YNNPACK's "
                        "__ynn_fusion): XLA hands the subgraph over, and whatever scratch memory "
                        "the library uses for the scores is outside XLA's buffer plan, so a temp "
                        "of zero says nothing about whether the scores are ever stored"
                        if library else
                        "No batch size ran the attention as one library call on this build",
    }


# The one call each fresh process measures, per variant: (framework, call).
ATTENTION_CALLS = {
    "torch.func.vmap": ("torch", "vmap(attention_torch)(*args)"),
    "PyTorch loop": ("torch", "torch.stack([attention_torch(q, k, v) for q, k, v in zip(*args)])"),
    "jax.vmap": ("jax", "jax.vmap(attention_jax)(*args)"),
    "jax.jit(vmap)": ("jax", "jitted(*args)"),
}


def peak_setup(framework: str, call: str, sizes, cpu_threads: int, device: str) -> str:
    """The fresh process's set-up: inputs at the largest batch, the workload's own source,
    one warm-up call (compiles, starts libraries, fills pools), then a trim."""
    fn = attention_torch if framework == "torch" else attention_jax
    source = inspect.getsource(fn).replace(f"    import {framework}\n\n", "")
    shape = (sizes.batch_sizes[-1], sizes.seq_len, sizes.head_dim)
    return "\n".join([
        "import ctypes, gc", "import numpy as np", "from deepdive.core.sync import block",
        f"import torch\nfrom torch.func import vmap\ntorch.set_num_threads({cpu_threads})"
        if framework == "torch" else "import jax\nimport jax.numpy as jnp",
        source, "rng = np.random.default_rng(0)",
        f"arrays = [rng.standard_normal({shape}, dtype=np.float32) for _ in range(3)]",
        f"args = [torch.from_numpy(a).to('{device}') for a in arrays]" if framework == "torch"
        else "args = [jnp.asarray(a) for a in arrays]",
        "jitted = jax.jit(jax.vmap(attention_jax))" if framework == "jax" else "",
        f"block({call})", "gc.collect()", "ctypes.CDLL('libc.so.6').malloc_trim(0)",
    ])


def host_peaks(sizes, cpu_threads: int, device: str) -> pd.Series:
    """Peak extra host RSS of one warm attention call at the largest batch, each variant in
    a fresh process (`deepdive.core.memory.host_peak_rss`)."""
    from deepdive.core import memory

    return pd.Series({
        variant: memory.host_peak_rss(run=f"block({call})", setup=peak_setup(
            fw, call, sizes, cpu_threads, device)).mib
        for variant, (fw, call) in ATTENTION_CALLS.items()},
        name="peak extra host RSS of a warm call (MiB)")


def host_peak_readings(peaks: pd.Series, output_mib: float, scores_mib: float) -> dict:
    """The peaks above and at-or-below an unfused computation's three live buffers."""
    unfused = 2 * scores_mib + output_mib
    above, below = peaks[peaks > unfused], peaks[peaks <= unfused]
    return {"output_mib": output_mib, "scores_mib": scores_mib, "unfused_mib": unfused,
            "peaks_above": ", ".join(f"{v} ({m:.1f} MiB)" for v, m in above.items()) or "none",
            "peaks_below": ", ".join(f"{v} ({m:.1f} MiB)" for v, m in below.items()) or "none"}


# --- the summary -------------------------------------------------------------------------

def by_batch(verdict_of: Mapping[str, str], prefix: str, batch_sizes: Sequence[int]) -> str:
    """'faster at batch 16, 64; tie at batch 256' from the claims `<prefix>_<batch>`."""
    grouped: dict[str, list[str]] = {}
    for b in batch_sizes:
        grouped.setdefault(verdict_of[f"{prefix}_{b}"], []).append(str(b))
    return "; ".join(f"{v} at batch {', '.join(bs)}" for v, bs in grouped.items())


def at_set_readings(sweep, batch_sizes: Sequence[int], sizes) -> dict[str, str]:
    """The extra time per `.at[].set` write over the plain JAX loop, and whether it grew."""
    per_write = {b: (sweep["attention", b]["JAX .at[].set loop"].median
                     - sweep["attention", b]["JAX loop"].median) / b * 1e6 for b in batch_sizes}
    growth = per_write[batch_sizes[-1]] / per_write[batch_sizes[0]]
    if growth > 2:
        reading = ("The extra time per write grew with the output, as copying the whole "
                   "output on every write makes it")
    elif growth > 1.25:
        reading = (f"The extra time per write grew {growth:.2f}-fold while the output grew "
                   f"{batch_sizes[-1] // batch_sizes[0]}-fold: a fixed cost per write dominates "
                   "at these sizes, and the copy of the whole output adds the rest")
    else:
        reading = ("The extra time per write hardly changed while the output grew: at these "
                   "sizes a write costs mostly its own dispatch, and the copying does not "
                   "show yet")
    return {
        "at_set_per_write": ", ".join(f"{us:.0f} µs at batch {b}" for b, us in per_write.items()),
        "at_set_output_kib": ", ".join(f"{b * sizes.seq_len * sizes.head_dim * 4 / 1024:.0f} KiB "
                                       f"at {b}" for b in batch_sizes),
        "at_set_reading": reading,
    }


def grads_reading(verdict_of: Mapping[str, str]) -> str:
    """Why `vmap(grad)` beat the loop of backward passes, or that it did not."""
    if verdict_of["grads_torch_vmap_vs_loop"] == "faster":
        return ("A loop pays a backward pass, with its Python and dispatch, per example; "
                "vmap(grad) pays one for the batch.")
    return "At this size the loop of backward passes kept up with vmap(grad) on this build."


def loop_reading(verdict_of: Mapping[str, str]) -> str:
    """Eager vmap against the eager loop, per framework and workload."""
    def vectorizing(fw):
        return ", ".join(f"{verdict_of[f'{w}_{fw}_vmap_vs_loop']} for {w}" for w in WORKLOADS)

    return (f"Eager vmap against the eager loop, PyTorch: {vectorizing('torch')}; "
            f"JAX: {vectorizing('jax')}.")


def batched_reading(verdict_of: Mapping[str, str]) -> str:
    """What `torch.func.vmap` adds over hand-batched code, where it was decided slower."""
    if "slower" in {verdict_of["dot_vmap_vs_batched"], verdict_of["attention_vmap_vs_batched"]}:
        return ("vmap's own work per call remains: functorch's Python wrapper (flattening the "
                "arguments, checking in_dims, entering a vmap level) and dispatching each "
                "operator's batching rule, around the same batched kernels (bmm here) that the "
                "hand-written code calls.")
    return "On this build it cost nothing measurable over the hand-written code."


def summary_readings(verdict_of: Mapping[str, str], sweep, break_evens: pd.DataFrame,
                     sizes) -> dict[str, str]:
    """Every glued sentence of the summary, chosen by the verdicts read back."""
    batches = sizes.batch_sizes
    out = {f"{p}_by_batch": by_batch(verdict_of, p, batches)
           for p in ("dot_compile_vs_vmap", "attention_compile_vs_vmap", "dot_fori_vs_vmap",
                     "attention_fori_vs_vmap", "attention_at_set_vs_loop")}
    for w in WORKLOADS:
        for fw in ("torch", "jax"):
            out[f"break_even_{w}_{fw}"] = break_even_text(verdict_of, break_evens, w, fw,
                                                          batches[-1])
    return {**out, **at_set_readings(sweep, batches, sizes),
            "grads_reading": grads_reading(verdict_of), "loop_reading": loop_reading(verdict_of),
            "batched_reading": batched_reading(verdict_of)}


def glue_all(values: Mapping[str, object], glue: Callable[[str, object], None] | None = None
             ) -> None:
    """Glue every value under its key (`deepdive.book.results.glue` unless told)."""
    if glue is None:
        from deepdive.book.results import glue
    for key, value in values.items():
        glue(key, value)


# --- figures -------------------------------------------------------------------------------

STYLE = {
    "PyTorch loop": dict(color="tab:blue", linestyle=":"),
    "torch.func.vmap": dict(color="tab:blue"),
    "PyTorch batched ops": dict(color="tab:cyan"),
    "torch.compile(vmap)": dict(color="tab:purple"),
    "JAX loop": dict(color="tab:orange", linestyle=":"),
    "JAX loop of jax.jit(f)": dict(color="tab:brown", linestyle=":"),
    "JAX .at[].set loop": dict(color="tab:red", linestyle=":"),
    "jax.vmap": dict(color="tab:orange"),
    "jax.jit(vmap)": dict(color="tab:green"),
    "jax.jit(.at[].set fori_loop)": dict(color="tab:olive"),
}


def plot_grads(timings: Mapping[str, Timing], batch: int, caption: str):
    """Bars of the seven per-example-gradient variants."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    plots.bar_timings(ax, list(timings), list(timings.values()), unit="ms",
                      color=["tab:blue"] * 2 + ["tab:purple"] + ["tab:orange"] * 3 + ["tab:green"])
    ax.set_xscale("log")
    ax.set(title=f"{batch} per-example gradients", xlabel="time per call (ms, median, IQR, log)")
    plots.caption(fig, caption)
    return fig


def plot_sweep(sweep, batch_sizes: Sequence[int], caption: str):
    """Time per call against batch size: PyTorch's variants above, JAX's below."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    variants = list(sweep["dot", batch_sizes[0]])
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), sharex=True)
    for row, fw in enumerate(("torch", "jax")):
        for ax, workload in zip(axes[row], WORKLOADS, strict=True):
            for variant in (v for v in variants if framework(v) == fw):
                plots.plot_timings(ax, batch_sizes, [sweep[workload, b][variant]
                                                     for b in batch_sizes],
                                   label=variant, **STYLE[variant])
            plots.log_axes(ax)
            ax.set_xticks(batch_sizes, [str(b) for b in batch_sizes])
            ax.minorticks_off()
            ax.set(title=f"{workload}, {'PyTorch' if fw == 'torch' else 'JAX'}",
                   ylabel="time per call (ms, median, IQR)")
            ax.legend(fontsize=7, loc="upper left")
    for ax in axes[1]:
        ax.set_xlabel("batch size (examples)")
    fig.subplots_adjust(bottom=0.1, hspace=0.25)
    plots.caption(fig, caption)
    return fig


def plot_first_calls(first_calls: pd.DataFrame, sweep, largest: int, caption: str):
    """First call against steady-state median (IQR whiskers) at the largest batch."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    for ax, workload in zip(axes, WORKLOADS, strict=True):
        rows = first_calls[first_calls.workload == workload]
        y = np.arange(len(rows))
        ax.barh(y - 0.2, rows["first call (ms)"], height=0.4, color="tab:red",
                label="first call (with tracing and compiling, where the variant compiles)")
        steady = [sweep[workload, largest][v] for v in rows["variant"]]
        ax.barh(y + 0.2, [t.median * 1e3 for t in steady], height=0.4, color="tab:gray",
                xerr=[[(t.median - t.q1) * 1e3 for t in steady],
                      [(t.q3 - t.median) * 1e3 for t in steady]],
                capsize=2, label="steady-state median (IQR whiskers)")
        ax.set_yticks(y, rows["variant"])
        ax.set_xscale("log")
        ax.set(title=f"{workload}, batch {largest}", xlabel="time (ms, log)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7,
               bbox_to_anchor=(0.5, 0.07))
    fig.subplots_adjust(bottom=0.27, left=0.2)
    plots.caption(fig, caption)
    return fig


def plot_dispatch(dispatch: pd.DataFrame, run_lengths: Sequence[int], largest: int,
                  caption: str):
    """Unsynced median and mean over the synced median, against the run length."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for variant in dict.fromkeys(dispatch.variant):
        rows, color = dispatch[dispatch.variant == variant], STYLE[variant]["color"]
        ax.plot(rows["run length"], rows["unsynced median / true"], marker="x", linestyle="--",
                color=color, label=f"{variant}: unsynced median")
        ax.plot(rows["run length"], rows["unsynced mean / true"], marker="+", linestyle=":",
                color=color, label=f"{variant}: unsynced mean")
    ax.axhline(1, color="0.3", linewidth=0.8, label="the true (synced) median")
    plots.log_axes(ax)
    ax.set_xticks(run_lengths, [str(n) for n in run_lengths])
    ax.minorticks_off()
    ax.set(title=f"attention, batch {largest}: an unsynced timer against the truth",
           xlabel="calls run back to back", ylabel="unsynced reading / synced median")
    ax.legend(fontsize=7)
    plots.caption(fig, caption)
    return fig


def plot_rss(rss: Mapping[str, np.ndarray], batch: int, output_mib: float, caption: str):
    """The seed's psutil RSS delta of each call, beside one output's size."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(7.5, 4))
    for variant, deltas in rss.items():
        ax.plot(np.arange(1, len(deltas) + 1), deltas, marker="o", markersize=3, label=variant,
                color=STYLE[variant]["color"])
    ax.axhline(output_mib, color="0.3", linestyle="--", linewidth=0.8,
               label="size of one output (analytic)")
    ax.set(title=f"psutil RSS delta per call, attention, batch {batch}", xlabel="call number",
           ylabel="RSS after - before (MiB)")
    ax.legend()
    plots.caption(fig, caption)
    return fig


# --- the record ----------------------------------------------------------------------------

def save_records(sweep, grad_timings, grad_batch: int, peaks: pd.Series, largest: int,
                 dispatch: pd.DataFrame, xla_plan: pd.DataFrame, jit_check: JitCheck | None = None):
    """Every measurement of the chapter into `_build/results/01_vmap.csv`; `jit_check` adds
    the jit-against-eager check (rows that differ), so builds on other releases compare."""
    from deepdive.book import results

    records = results.Results("01_vmap")
    if jit_check is not None:
        records.add("jit_matches_eager", "jax", jit_check.pattern, jit_check.rows,
                    "rows_differing", jit_check.mismatches, "count")
    for (workload, batch), timings in sweep.items():
        for variant, timing in timings.items():
            records.add_timing(workload, framework(variant), variant, batch, timing)
    for variant, timing in grad_timings.items():
        records.add_timing("per_example_grads", framework(variant), variant, grad_batch, timing)
    for variant, mib in peaks.items():
        records.add("host_peak_rss", framework(variant), variant, largest, "peak_rss", mib, "MiB")
    for row in dispatch.to_dict("records"):
        for metric in ("unsynced median / true", "unsynced mean / true"):
            records.add("unsynced_timing", framework(row["variant"]), row["variant"],
                        row["run length"], metric, row[metric], "ratio")
    for batch, row in xla_plan.iterrows():
        for column in ("argument (MiB)", "output (MiB)", "temp (MiB)"):
            records.add("xla_memory_plan", "jax", "jax.jit(vmap)", batch, column.split()[0],
                        row[column], "MiB")
    return records, records.save()
