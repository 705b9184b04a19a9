"""How steady timings are on this machine for a given CPU thread count: the experiment
behind `deepdive.env.CPU_BUILD_THREADS`, re-run on every build by the methodology page.

Each probe is a fresh Python process (XLA fixes its thread pool at start-up) that pins
both frameworks to `threads` cores and times four workloads of the book, a PyTorch and a
JAX matmul and attention batch, interleaved. `python -m deepdive.stability N` prints the
result of one probe as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys

WORKLOADS = ("torch 256x256 matmul", "torch vmap attention", "jax.jit 256x256 matmul",
             "jax.jit vmap attention")


def probe(threads: int, timeout_s: float = 300) -> dict[str, dict[str, float]]:
    """Median and IQR/median of each workload, timed in a fresh process on `threads` cores."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    done = subprocess.run([sys.executable, "-m", "deepdive.stability", str(threads)],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"the {threads}-thread probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def probes(thread_counts=(1, 2), repeats: int = 2):
    """Alternate probes of each thread count `repeats` times; a tidy frame, one row each."""
    import pandas as pd

    rows = []
    for repeat in range(repeats):
        for threads in thread_counts:
            for workload, reading in probe(threads).items():
                rows.append({"threads": threads, "probe": repeat + 1, "workload": workload,
                             **reading})
    return pd.DataFrame(rows)


def _run(threads: int) -> dict[str, dict[str, float]]:
    from deepdive import env

    env.pin_cpu_threads(threads)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from torch.func import vmap

    from deepdive.timing import BLOCKS, compare

    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((256, 256), dtype=np.float32)
    batch = rng.standard_normal((64, 64, 32), dtype=np.float32)

    def attention_torch(q, k, v):
        return torch.softmax(q @ k.T / q.shape[-1] ** 0.5, dim=-1) @ v

    def attention_jax(q, k, v):
        return jax.nn.softmax(q @ k.T / q.shape[-1] ** 0.5, axis=-1) @ v

    tm, tb = torch.from_numpy(matrix), torch.from_numpy(batch)
    jm, jb = jnp.asarray(matrix), jnp.asarray(batch)
    torch_attention = vmap(attention_torch)
    jax_matmul = jax.jit(lambda a: jnp.tanh(a @ a))
    jax_attention = jax.jit(jax.vmap(attention_jax))
    calls = dict(zip(WORKLOADS, (lambda: torch.tanh(tm @ tm), lambda: torch_attention(tb, tb, tb),
                                 lambda: jax_matmul(jm), lambda: jax_attention(jb, jb, jb)),
                     strict=True))
    # Blocks as every chapter times them, without the adaptive extension: the raw spread.
    timings = compare(calls, max_blocks=BLOCKS)
    return {name: {"median_s": t.median, "iqr_fraction": t.iqr / t.median}
            for name, t in timings.items()}


if __name__ == "__main__":
    print(json.dumps(_run(int(sys.argv[1]))))
