"""How steady timings are on this machine: the experiments behind the timing protocol,
re-run on every build by the methodology page. `probes` times the book's workloads per CPU
set-up (behind `deepdive.core.env.CPU_BUILD_THREADS` and the one core of a CPU build);
`aa_under_load` checks that the verdict rule decides almost no A/A pair on a deliberately
loaded machine.

Each probe is a fresh Python process (XLA fixes its thread pool at start-up) on `cores`
cores with `threads` compute threads per framework, timing workloads of the book
interleaved: a PyTorch and a JAX matmul and attention batch, and two per-call workloads in
each framework (a tiny op and a batch of dot products), where what a call costs around its
arithmetic decides. `python -m deepdive.chapters.stability CORES THREADS` prints one probe as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

__all__ = ["BOTH_CORES", "BUILD", "LONG_BLOCKS", "ONE_XLA_THREAD", "OWN_CORE", "PER_CALL", "SETUPS",
           "WORKLOADS", "aa_probe", "aa_reading", "aa_under_load", "aa_workloads", "findings",
           "loaded_machine", "probe", "probes", "setup_label"]

WORKLOADS = ("torch 256x256 matmul", "torch vmap attention", "jax.jit 256x256 matmul",
             "jax.jit vmap attention")
PER_CALL = ("torch tiny op", "torch vmap dot products", "jax.jit tiny op",
            "jax.jit vmap dot products")
# (cores, compute threads per framework, block length in ms): the CPU build's choice, both
# cores computing, one compute thread with a second core free for JAX's dispatch and
# Python, and the build's choice with blocks three times as long as the timer's.
SETUPS = ((1, 1, 10), (2, 2, 10), (2, 1, 10), (1, 1, 30))
# XLA runs its CPU work on one thread with these flags, whatever its CPU affinity allows.
ONE_XLA_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def probe(cores: int, threads: int, block_ms: int = 10,
          timeout_s: float = 300) -> dict[str, dict[str, float]]:
    """Median and IQR/median of each workload, timed in a fresh process on `cores` cores
    with `threads` compute threads per framework, in blocks of at least `block_ms` ms."""
    for name, value in (("cores", cores), ("threads", threads), ("block_ms", block_ms)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if threads > cores:
        raise ValueError(f"threads ({threads}) cannot exceed cores ({cores})")
    done = subprocess.run([sys.executable, "-m", "deepdive.chapters.stability", str(cores),
                           str(threads), str(block_ms)],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"the {cores}-core, {threads}-thread probe failed:\n"
                           f"{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def probes(setups=SETUPS, repeats: int = 2):
    """Alternate probes of each (cores, threads, block ms) set-up `repeats` times, on the
    machines with that many cores; a tidy frame, one row per probe and workload."""
    import pandas as pd

    rows = []
    for repeat in range(repeats):
        for cores, threads, block_ms in (s for s in setups if s[0] <= os.cpu_count()):
            for workload, reading in probe(cores, threads, block_ms).items():
                rows.append({"cores": cores, "threads": threads, "block (ms)": block_ms,
                             "probe": repeat + 1, "workload": workload, **reading})
    return pd.DataFrame(rows)


def setup_label(cores: int, threads: int, block_ms: int) -> str:
    """'1 core, 1 thread', with the block length where it is not the timer's."""
    from deepdive.core.timing import MIN_BLOCK_S

    label = f"{cores} core{'s' if cores > 1 else ''}, {threads} thread{'s' if threads > 1 else ''}"
    return label if block_ms == round(MIN_BLOCK_S * 1000) else f"{label}, {block_ms} ms blocks"


BUILD, BOTH_CORES, OWN_CORE, LONG_BLOCKS = (setup_label(*s) for s in SETUPS)


def findings(probes, chosen_threads: int, tolerance: float) -> dict:
    """What the methodology page reads from `probes` (a `probes()` frame): the median
    IQR/median per set-up, the compute workloads' one-thread over two-thread medians, JAX's
    and PyTorch's per-call medians with a core to spare over the build's, and one sentence
    per choice saying whether this build's probes agree with it. A JAX workload counts as
    faster with a core of its own only beyond `tolerance` (the build's tie band): a single
    probe moves that much between runs."""
    labelled = probes.assign(**{"set-up": [setup_label(c, t, b) for c, t, b in zip(
        probes["cores"], probes["threads"], probes["block (ms)"], strict=True)]})
    table = labelled.pivot_table(index="workload", columns="set-up", values="median_s") * 1e6
    spread = labelled.groupby("set-up")["iqr_fraction"].median()
    compute = table.loc[list(WORKLOADS)]
    threads = compute[BUILD] / compute[BOTH_CORES]
    own_core = table.loc[list(PER_CALL), OWN_CORE] / table.loc[list(PER_CALL), BUILD]
    jax_side = own_core[[w for w in own_core.index if w.startswith("jax")]]
    steadier = 1 if spread[BUILD] <= spread[BOTH_CORES] else 2
    return {
        "table": table, "iqr_one": 100 * spread[BUILD], "iqr_two": 100 * spread[BOTH_CORES],
        "iqr_long": 100 * spread[LONG_BLOCKS],
        "ratio_lo": threads.min(), "ratio_hi": threads.max(),
        "own_core_jax": " and ".join(f"{v:.2f}" for v in jax_side),
        "own_core_torch": " and ".join(
            f"{v:.2f}" for w, v in own_core.items() if w.startswith("torch")),
        "threads_agreement": (
            "This build's probes agree with that choice." if steadier == chosen_threads else
            "This build's probes do not agree with that choice: on this machine two threads "
            "gave the tighter spread, so the chapters' noise flags deserve extra attention."),
        "one_core_agreement": (
            "This build's probes agree: JAX's per-call work was not faster with a core of its "
            f"own, beyond this build's tie band (±{100 * tolerance:.1f}%)."
            if (jax_side >= 1 / (1 + tolerance)).all() else
            "This build's probes disagree for some JAX workload, which took less time with a "
            f"core of its own, beyond this build's tie band (±{100 * tolerance:.1f}%): on "
            "this machine the one-core choice charges JAX for sharing its core, and its "
            "per-call claims carry that cost."),
        "block_agreement": (
            "This build's probes agree: the longer blocks were no steadier." if
            spread[BUILD] <= spread[LONG_BLOCKS] * 1.25 else
            "This build's probes do not agree: here the longer blocks were steadier, so the "
            "chapters' noise flags deserve extra attention."),
    }


def aa_probe(copies: int = 3, timeout_s: float = 600):
    """`aa_under_load` in a fresh process set up as a page is (threads, allocator regime,
    fp32 precision), against the build's tie band (`deepdive.book.calibration`); one row per
    A/A pair."""
    import pandas as pd

    done = subprocess.run([sys.executable, "-m", "deepdive.chapters.stability", "aa", str(copies)],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"the A/A probe failed:\n{done.stderr[-2000:]}")
    return pd.DataFrame(json.loads(done.stdout.strip().splitlines()[-1]))


def _aa(copies: int) -> list[dict]:
    from deepdive.book import calibration
    from deepdive.core import allocator, env
    from deepdive.models import parity

    env.pin_cpu_threads()
    allocator.keep_freed_memory()
    import torch

    torch.set_num_threads(env.compute_threads())
    parity.strict_fp32()  # the book's one switch, as every page's set-up
    return aa_under_load(calibration.tie_band("cpu"), copies=copies).to_dict("records")


def _run(cores: int, threads: int, block_ms: int) -> dict[str, dict[str, float]]:
    from deepdive.core import allocator, env

    os.sched_setaffinity(0, sorted(range(os.cpu_count()))[:cores])  # a probe picks its cores
    if threads < cores:  # XLA would size its pool from the cores: hold it to one thread
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {ONE_XLA_THREAD}"
    env.pin_cpu_threads(threads if threads == cores else cores)
    allocator.keep_freed_memory()  # as every page times
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from torch.func import vmap

    from deepdive.core.timing import BLOCKS, compare

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((256, 256), dtype=np.float32)
    batch = rng.standard_normal((64, 64, 32), dtype=np.float32)
    dots = rng.standard_normal((1024, 64), dtype=np.float32)

    def attention_torch(q, k, v):
        return torch.softmax(q @ k.T / q.shape[-1] ** 0.5, dim=-1) @ v

    def attention_jax(q, k, v):
        return jax.nn.softmax(q @ k.T / q.shape[-1] ** 0.5, axis=-1) @ v

    tm, tb, td, tt = (torch.from_numpy(a) for a in (matrix, batch, dots, dots[0, :16]))
    jm, jb, jd, jt = (jnp.asarray(a) for a in (matrix, batch, dots, dots[0, :16]))
    torch_attention, torch_dots = vmap(attention_torch), vmap(torch.dot)
    jax_matmul = jax.jit(lambda a: jnp.tanh(a @ a))
    jax_attention = jax.jit(jax.vmap(attention_jax))
    jax_dots = jax.jit(jax.vmap(jnp.dot))
    jax_tiny = jax.jit(lambda v: jnp.sin(v * 1.0001 + 0.5))
    calls = dict(zip(WORKLOADS + PER_CALL, (
        lambda: torch.tanh(tm @ tm), lambda: torch_attention(tb, tb, tb),
        lambda: jax_matmul(jm), lambda: jax_attention(jb, jb, jb),
        lambda: torch.sin(tt * 1.0001 + 0.5), lambda: torch_dots(td, td),
        lambda: jax_tiny(jt), lambda: jax_dots(jd, jd)), strict=True))
    # Rounds as every chapter times them, without the adaptive extension: the raw spread.
    timings = compare(calls, max_blocks=BLOCKS, min_block_s=block_ms / 1000)
    return {name: {"median_s": t.median, "iqr_fraction": t.iqr / t.median}
            for name, t in timings.items()}




# A bursty load: CPU and memory traffic in random bursts of 5-50 ms with pauses as long, so
# that it hits some blocks of a round and not others (a steady load would slow every block
# alike, and the paired ratios would cancel it).
_LOAD = """
import os, sys, time
import numpy as np
os.sched_setaffinity(0, {{{core}}})
rng = np.random.default_rng({core})
a = np.ones(2**21, dtype=np.float32)  # 8 MiB, past the caches
b = np.empty_like(a)
while True:
    stop = time.perf_counter() + rng.uniform(0.005, 0.05)
    while time.perf_counter() < stop:
        np.copyto(b, a)
    time.sleep(rng.uniform(0.005, 0.05))
"""


@contextlib.contextmanager
def loaded_machine():
    """Every core of the machine busy in random bursts while the block runs: one process
    per core, killed on exit."""
    processes = [subprocess.Popen([sys.executable, "-c", _LOAD.format(core=core)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for core in sorted(os.sched_getaffinity(0) | set(range(os.cpu_count())))]
    try:
        time.sleep(0.5)  # the loads start before the first timed block
        yield len(processes)
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


def aa_workloads() -> dict[str, Callable[[], Callable[[], object]]]:
    """Builders of the A/A workloads: each call builds a separate copy (its own inputs
    and, for JAX, its own compilation) of one of the kinds of work the book times: a
    small matmul, an allocating elementwise chain, an MLP training step, a tiny op."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    def torch_matmul():
        a = torch.randn(256, 256)
        return lambda: a @ a

    def jax_matmul():
        a = jnp.asarray(np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32))
        fn = jax.jit(lambda x: x @ x)
        return lambda: fn(a)

    def chain(x):
        for i in range(6):
            x = x * 1.0001 if i % 2 == 0 else x + 0.5
        return x

    def torch_chain():
        x = torch.randn(2**20)
        return lambda: chain(x)

    def jax_chain():
        x = jnp.asarray(np.random.default_rng(0).standard_normal(2**20, dtype=np.float32))
        fn = jax.jit(chain)
        return lambda: fn(x)

    def torch_step():
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                    torch.nn.Linear(128, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.detach()
        return step

    def jax_step():
        rng = np.random.default_rng(0)
        params = [jnp.asarray(rng.standard_normal(s, dtype=np.float32) * 0.1)
                  for s in ((64, 128), (128,), (128, 10), (10,))]
        x = jnp.asarray(rng.standard_normal((64, 64), dtype=np.float32))
        y = jnp.asarray(rng.integers(0, 10, 64))

        def loss(p):
            logits = jax.nn.gelu(x @ p[0] + p[1]) @ p[2] + p[3]
            return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(64), y])

        @jax.jit
        def update(p):
            value, grads = jax.value_and_grad(loss)(p)
            return [w - 1e-3 * g for w, g in zip(p, grads, strict=True)], value

        held = [params]

        def step():
            held[0], value = update(held[0])
            return value
        return step

    def torch_tiny():
        v = torch.ones(16)
        return lambda: torch.sin(v * 1.0001 + 0.5)

    def jax_tiny():
        v = jnp.ones(16)
        fn = jax.jit(lambda x: jnp.sin(x * 1.0001 + 0.5))
        return lambda: fn(v)

    return {"torch 256x256 matmul": torch_matmul, "jax.jit 256x256 matmul": jax_matmul,
            "torch elementwise chain, 4 MiB": torch_chain,
            "jax.jit elementwise chain, 4 MiB": jax_chain,
            "torch MLP training step": torch_step, "jax.jit MLP training step": jax_step,
            "torch tiny op": torch_tiny, "jax.jit tiny op": jax_tiny}


def aa_under_load(band, copies: int = 3, load: bool = True):
    """How often the verdict rule decides an A/A pair (two separately built copies of one
    workload, which should differ by nothing): every pair of `copies` copies of each of
    `aa_workloads`, all timed in one `compare` while the machine is busy in bursts
    (`loaded_machine`), each pair decided against `band` by `deepdive.core.verdict.decide`
    (a noisy side widens it). Returns one row per pair; a decided row is a false
    decision. `tests/test_verdict.py` and the methodology page run it."""
    import itertools

    import pandas as pd

    from deepdive.core.timing import compare
    from deepdive.core.verdict import decide

    if not isinstance(copies, int) or copies < 2:
        raise ValueError(f"copies must be an integer >= 2 (pairs need two), got {copies!r}")
    builders = aa_workloads()
    variants = {f"{name} #{i + 1}": build() for name, build in builders.items()
                for i in range(copies)}
    with loaded_machine() if load else contextlib.nullcontext():
        timings = compare(variants)
    rows = []
    for name in builders:
        for i, j in itertools.combinations(range(1, copies + 1), 2):
            v = decide(timings[f"{name} #{i}"], timings[f"{name} #{j}"], band)
            rows.append({"workload": name, "pair": f"#{i} / #{j}", "ratio": v.ratio,
                         "low": v.low, "high": v.high, "band": v.band, "noisy": v.noisy,
                         "rounds": v.n, "verdict": v.verdict})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    if sys.argv[1] == "aa":
        print(json.dumps(_aa(int(sys.argv[2]))))
    else:
        print(json.dumps(_run(*(int(arg) for arg in sys.argv[1:4]))))


def aa_reading(loaded, band) -> dict:
    """What the methodology page reads from the A/A pairs: under load (`loaded`, an
    `aa_under_load` frame), how many intervals reached across the build's plain band (so no
    widening was needed to withhold them) and their median width; on the quiet machine, the
    calibration's own A/A pairs (`band.evidence`) decided against that band, with their
    median width. A test with wide intervals cannot decide much; the quiet pairs are the
    ones with the pages' precision."""
    import numpy as np

    def decided(rows):
        return sum(r["low"] > band.high or r["high"] < band.low for r in rows)

    def width(rows):
        return 100 * float(np.median([r["high"] / r["low"] - 1 for r in rows]))

    under_load = loaded.to_dict("records")
    quiet = list(band.evidence)
    return {"aa_straddled": sum(r["low"] <= band.high and r["high"] >= band.low
                                and not (r["low"] >= band.low and r["high"] <= band.high)
                                for r in under_load),
            "aa_width_pct": width(under_load),
            "quiet_pairs": len(quiet), "quiet_decided": decided(quiet),
            "quiet_rate_pct": 100 * decided(quiet) / max(len(quiet), 1),
            "quiet_width_pct": width(quiet) if quiet else float("nan")}
