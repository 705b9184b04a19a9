"""The reduced set of the book's comparisons that every jax and torch release runs, inside
that release's throwaway environment (`deepdive.releases.run`).

It is the book's own code at `small` sizes, each variant checked against its reference
before it is timed, decided by the shared verdict rule against a tie band measured in the
same process: chapter 1's vmap variants (dot products and per-example attention),
chapter 2's chain of elementwise ops (op by op, jit, compile), chapter 4's GPT training
step (PyTorch eager and Inductor against JAX's jitted step, fp32), and two probes known
to move between jax releases: jax-ml/jax#39103's pattern (`jit` must equal eager, 32,769
rows) and a `fori_loop` that writes one element per iteration from the previous one
(`x.at[i].set(x[i - 1] * 0.5 + 1.0)`; a data dependence, so XLA cannot drop the loop).

A workload that fails (an import, a check, a crash of its own) is recorded by name with
its error and the others go on; a wrong result of a probe is a result, not a failure.
`python -m deepdive.releases.workloads` runs them all into `env.results_dir()` and prints
the failures as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import numpy as np

from deepdive.book import plans
from deepdive.book.claims import Claims
from deepdive.book.results import Results
from deepdive.core import allocator, env
from deepdive.core.equality import matches
from deepdive.core.timing import compare
from deepdive.core.verdict import measure_tie_band

__all__ = ["CHAPTER", "FORI_ITERATIONS", "JAX_39103_ROWS", "WORKLOADS", "attention_vmap", "chain",
           "chosen", "dot_vmap", "fori_closed_form", "fori_write", "gpt_step",
           "jit_39103", "main", "one_line", "run"]

CHAPTER = "releases"
SCALE = "small"  # every release runs the same sizes: the sweep compares releases, not scales
# 32,769: the size at which jax 0.10.2 is wrong (chapter 1's; a test keeps them equal). The
# chapter's code (`deepdive.chapters.vmap`) imports the frameworks, so it is imported only
# once `run` has pinned the threads, which must happen before JAX starts.
JAX_39103_ROWS = 32_769
FORI_ITERATIONS = (10_000, 20_000, 40_000)


def one_line(error: BaseException) -> str:
    """An error as one line: its type and the first line of its message."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}"[:300]


def _vmap_pair(workload: str, claim_ids: dict[str, tuple[str, str]], claims: Claims,
               records: Results) -> None:
    from deepdive.chapters import vmap

    sizes = plans.sizes("01_vmap", SCALE)
    batch = sizes.batch_sizes[-1]
    f_torch, f_jax, f_batched, reference = vmap.PER_EXAMPLE[workload]
    arrays = vmap.make_inputs(batch, vmap.example_shapes(workload, sizes))
    reference = reference(*(a.astype(np.float64) for a in arrays))
    every = {**vmap.torch_variants(f_torch, f_batched, arrays, "cpu"),
             **vmap.jax_variants(f_jax, arrays)}
    names = dict.fromkeys(side for pair in claim_ids.values() for side in pair)
    check = matches(reference, rtol=1e-4, atol=1e-4)
    timings = compare({n: every[n] for n in names}, check=dict.fromkeys(names, check))
    for claim_id, (baseline, candidate) in claim_ids.items():
        claims.compare(claim_id, f"{workload}, batch {batch}, fp32, CPU: {candidate} against "
                       f"{baseline}", timings[baseline], timings[candidate])
    for name, timing in timings.items():
        records.add_timing(f"vmap {workload}", vmap.framework(name), name, batch, timing)


def dot_vmap(claims: Claims, records: Results) -> None:
    """Chapter 1's dot products at its largest small batch: jax.jit(vmap) against
    torch.func.vmap, and the jitted `.at[].set` fori_loop against jax.jit(vmap)."""
    _vmap_pair("dot", {
        "release_dot_jit_vmap_vs_torch_vmap": ("torch.func.vmap", "jax.jit(vmap)"),
        "release_dot_fori_vs_vmap": ("jax.jit(vmap)", "jax.jit(fori_loop)"),
    }, claims, records)


def attention_vmap(claims: Claims, records: Results) -> None:
    """Chapter 1's per-example attention: jax.jit(vmap) against torch.func.vmap."""
    _vmap_pair("attention", {
        "release_attention_jit_vmap_vs_torch_vmap": ("torch.func.vmap", "jax.jit(vmap)"),
    }, claims, records)


def _chain(x, k):
    """Chapter 2's chain, as its page writes it: k elementwise ops, multiply and add in turn."""
    for i in range(k):
        x = x * 1.0001 if i % 2 == 0 else x + 0.5
    return x


def chain(claims: Claims, records: Results) -> None:
    """Chapter 2's longest chain of elementwise ops: op by op, jax.jit and torch.compile
    (static shapes both), each against NumPy's float64 chain."""
    import jax
    import jax.numpy as jnp
    import torch

    sizes = plans.sizes("02_jit_xla", SCALE)
    k = sizes.chain_lengths[-1]
    host = np.random.default_rng(0).standard_normal(sizes.fusion_elements, dtype=np.float32)
    on_torch, on_jax = torch.from_numpy(host), jnp.asarray(host)
    torch._dynamo.reset()  # one fresh graph, never a stale cache entry
    jitted, compiled = jax.jit(_chain, static_argnums=1), torch.compile(_chain, dynamic=False)
    every = {"PyTorch eager": lambda: _chain(on_torch, k),
             "JAX op by op": lambda: _chain(on_jax, k),
             "jax.jit": lambda: jitted(on_jax, k), "torch.compile": lambda: compiled(on_torch, k)}
    check = matches(_chain(host.astype(np.float64), k))
    timings = compare(every, check=dict.fromkeys(every, check))
    scope = f"chain of {k} elementwise ops on {sizes.fusion_elements:,} fp32 values, CPU"
    for claim_id, baseline, candidate in (
            ("release_chain_jit_vs_eager", "JAX op by op", "jax.jit"),
            ("release_chain_compile_vs_eager", "PyTorch eager", "torch.compile"),
            ("release_chain_jit_vs_compile", "torch.compile", "jax.jit")):
        claims.compare(claim_id, f"{scope}: {candidate} against {baseline}",
                       timings[baseline], timings[candidate])
    for name, timing in timings.items():
        framework = "NumPy" if name == "NumPy" else ("JAX" if "JAX" in name or "jax" in name
                                                     else "PyTorch")
        records.add_timing("chain", framework, name, k, timing)


def _gpt_steps(reference, batches) -> dict[str, Callable]:
    """Chapter 4's fp32 training step as its page writes it, from `reference`'s weights with
    nanoGPT's clipped AdamW (`deepdive.models.gpt_jax`): PyTorch eager, torch.compile with
    Inductor (static shapes), and one jax.jit program on the NNX twin's split state, donated."""
    import copy
    import functools
    import itertools

    import jax
    import optax
    import torch
    from flax import nnx

    from deepdive.models import gpt_jax

    def torch_step(compiled: bool) -> Callable:
        model = copy.deepcopy(reference)
        optimizer = gpt_jax.ClippedAdamW(model.parameters(), **gpt_jax.TRAINING)
        forward = torch.compile(model, dynamic=False) if compiled else model
        cycle = itertools.cycle([tuple(torch.from_numpy(a) for a in b) for b in batches])

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = forward(*next(cycle))
            loss.backward()
            optimizer.step()  # clip_grad_norm_, then AdamW
            return loss.detach()

        return step

    twin = gpt_jax.GPT(reference.cfg, attention="dot_product_attention", rngs=nnx.Rngs(0))
    gpt_jax.port_torch_weights(reference, twin)
    graphdef, params = nnx.split(twin)
    optimizer = gpt_jax.nanogpt_adamw(**gpt_jax.TRAINING)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train(params, opt_state, idx, targets):
        loss, grads = jax.value_and_grad(lambda p: nnx.merge(graphdef, p)(idx, targets))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    cycle = itertools.cycle([tuple(jax.device_put(a) for a in b) for b in batches])
    state = [params, optimizer.init(params)]

    def jax_step():
        state[0], state[1], loss = train(*state, *next(cycle))
        return loss

    return {"torch eager": torch_step(False), "torch.compile": torch_step(True),
            "jax.jit": jax_step}


def gpt_step(claims: Claims, records: Results) -> None:
    """Chapter 4's small character GPT, one fp32 training step (AdamW, clipped): PyTorch
    eager and torch.compile against JAX's jitted step, each variant's first three losses
    checked against a fresh eager PyTorch step's (a wrong gradient or update moves them)."""
    import torch

    from deepdive.models import data, gpt

    w = plans.sizes("04_gpt_training", SCALE).workloads[0]
    torch.manual_seed(0)
    reference = gpt.GPT(gpt.GPTConfig(*w.config))
    corpus = data.shakespeare_chars(env.book_root() / "_build" / "data")
    tokens = corpus.tokens if w.vocab_size == corpus.vocab_size else (
        np.random.default_rng(0).integers(0, w.vocab_size, 200_000))
    stream = data.batches(tokens, w.batch_size, w.block_size, seed=1)
    batches = [next(stream) for _ in range(8)]
    torch._dynamo.reset()
    expected = [float(loss) for loss in _take(_gpt_steps(reference, batches)["torch eager"])]
    steps = _gpt_steps(reference, batches)
    for name, step in steps.items():
        losses = [float(loss) for loss in _take(step)]
        if not np.allclose(losses, expected, rtol=1e-4, atol=0):
            raise AssertionError(f"GPT step {name}: first losses {losses}, fp32 PyTorch "
                                 f"eager's {expected}")
    timings = compare(steps)
    scope = f"GPT {w.name} training step, batch {w.batch_size}x{w.block_size}, fp32, CPU"
    for claim_id, baseline in (("release_gpt_jax_vs_torch_eager", "torch eager"),
                               ("release_gpt_jax_vs_compile", "torch.compile")):
        claims.compare(claim_id, f"{scope}: jax.jit against {baseline}", timings[baseline],
                       timings["jax.jit"])
    for name, timing in timings.items():
        records.add_timing("GPT step", "JAX" if name.startswith("jax") else "PyTorch", name,
                           f"{w.batch_size}x{w.block_size}", timing)


def _take(step: Callable, n: int = 3) -> list:
    """The losses of `step`'s next `n` calls."""
    return [step() for _ in range(n)]


def fori_closed_form(n: int) -> np.ndarray:
    """What the write loop leaves from zeros: x[0] = 0, x[i] = 2 - 2 ** (1 - i)."""
    i = np.arange(n, dtype=np.float64)
    return np.where(i == 0, 0.0, 2.0 - np.exp2(1.0 - i))


def _fori_loop(n: int) -> Callable:
    import jax
    import jax.numpy as jnp

    def body(i, x):
        return x.at[i].set(x[i - 1] * 0.5 + 1.0)

    run = jax.jit(lambda x: jax.lax.fori_loop(1, n, body, x))
    start = jnp.zeros(n, jnp.float32)
    return lambda: run(start)


def fori_write(claims: Claims, records: Results) -> None:
    """The write loop at 10k, 20k and 40k iterations, each checked against its closed form
    (a wrong output is recorded, then raised), and the claim of one 40k run against four 10k
    runs: near 1 while the loop's cost is linear in its length (a little above: the four
    short runs pay four dispatches), near 1/4 where each iteration costs the whole buffer."""
    loops = {n: _fori_loop(n) for n in FORI_ITERATIONS}
    wrong = []
    for n, loop in loops.items():
        right = bool(np.allclose(np.asarray(loop()), fori_closed_form(n), rtol=1e-6, atol=1e-6))
        records.add("fori_loop write", "JAX", "x.at[i].set(x[i-1]*0.5+1.0)", n, "correct",
                    float(right), "flag")
        wrong += [] if right else [n]
    if wrong:
        raise AssertionError(f"the fori_loop write pattern is wrong at {wrong} iterations")
    short, long = FORI_ITERATIONS[0], FORI_ITERATIONS[-1]
    times = long // short
    variants = {f"{n:,} iterations": loops[n] for n in FORI_ITERATIONS}
    variants[f"{times} x {short:,} iterations"] = lambda: tuple(loops[short]()
                                                               for _ in range(times))
    timings = compare(variants)
    claims.compare("release_fori_write_40k_vs_4x10k",
                   f"jitted fori_loop writing x[i] from x[i - 1], fp32, CPU: one {long:,}-"
                   f"iteration run against {times} runs of {short:,}",
                   timings[f"{times} x {short:,} iterations"], timings[f"{long:,} iterations"])
    for n in FORI_ITERATIONS:
        timing = timings[f"{n:,} iterations"]
        records.add_timing("fori_loop write", "JAX", "x.at[i].set(x[i-1]*0.5+1.0)", n, timing)


def jit_39103(claims: Claims, records: Results) -> None:
    """jax-ml/jax#39103's pattern at 32,769 rows: jit against eager, recorded either way."""
    from deepdive.chapters import vmap

    check = vmap.jit_matches_eager(JAX_39103_ROWS)
    variant = "jit(vmap(row -> sum((m @ row)**2)))"
    for metric, value, unit in (("jit equals eager", float(check.matches), "flag"),
                                ("jit result", check.jit_last, "value"),
                                ("eager result", check.eager_last, "value"),
                                ("rows differing", check.mismatches, "count")):
        records.add("jax-ml/jax#39103", "JAX", variant, JAX_39103_ROWS, metric, value, unit)


WORKLOADS: dict[str, Callable[[Claims, Results], None]] = {
    "jax-ml/jax#39103": jit_39103, "fori_loop write": fori_write, "vmap dot": dot_vmap,
    "vmap attention": attention_vmap, "chain": chain, "GPT step": gpt_step}


def run(workloads: dict[str, Callable] | None = None) -> dict[str, str]:
    """Set up as the pages do (pinned threads, the kept allocator regime, strict fp32),
    measure this process's tie band, run every workload and save the claims and records
    into `env.results_dir()`. Returns {workload: error} for those that failed."""
    env.pin_cpu_threads()
    allocator.keep_freed_memory()
    import torch

    from deepdive.models import parity

    torch.set_num_threads(env.compute_threads())
    parity.strict_fp32()
    claims = Claims(CHAPTER, band=measure_tie_band(device="cpu"), device=env.cpu_label())
    records = Results(CHAPTER, device=env.cpu_label())
    failures = {}
    for name, workload in (WORKLOADS if workloads is None else workloads).items():
        print(f"running {name}", flush=True)
        try:
            workload(claims, records)
        except Exception as error:  # recorded by name, and the other workloads go on
            failures[name] = one_line(error)
            print(f"failed {name}: {failures[name]}", flush=True)
    if claims.claims:
        claims.save()
    records.save()
    return failures


def chosen(names: str | None) -> dict[str, Callable]:
    """The workloads named in `names` (comma-separated; `DEEPDIVE_RELEASE_WORKLOADS`), all
    of them when empty; an unknown name is refused, listing the accepted ones."""
    if not names:
        return dict(WORKLOADS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; accepted: {', '.join(WORKLOADS)}")
    return {n: WORKLOADS[n] for n in wanted}


def main() -> int:
    failures = run(chosen(os.environ.get("DEEPDIVE_RELEASE_WORKLOADS")))
    print(json.dumps(failures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
