"""The methodology page's CPU set-up probe, as a worker process (XLA sizes its thread pool when
its backend starts): the book's workloads timed on CORES cores with THREADS compute threads
per framework, in blocks of at least BLOCK_MS. `python -m deepdive.chapters.stability CORES
THREADS BLOCK_MS` prints each workload's median, IQR/median and the seconds its timed blocks
took, as JSON.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["ONE_XLA_THREAD", "run"]

# XLA runs its CPU work on one thread with these flags, whatever its CPU affinity allows.
ONE_XLA_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def run(cores: int, threads: int, block_ms: int) -> dict[str, dict[str, float]]:
    """Set this process up (cores, threads, the book's allocator regime) and time a PyTorch
    and a JAX matmul and attention batch, a tiny op and vmapped dot products, interleaved,
    without extra rounds for noisy ones: the raw spread is what the probe measures."""
    if not 1 <= threads <= cores <= os.cpu_count() or block_ms < 1:
        raise ValueError(f"a probe needs 1 <= threads <= cores <= {os.cpu_count()} and a "
                         f"block of at least 1 ms, got {cores}, {threads}, {block_ms}")
    from deepdive.core import allocator, env

    os.sched_setaffinity(0, sorted(range(os.cpu_count()))[:cores])
    if threads < cores:  # XLA would size its pool from the cores: hold it to one thread
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {ONE_XLA_THREAD}"
    env.pin_cpu_threads(threads if threads == cores else cores)
    allocator.keep_freed_memory()
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
    calls = {"torch 256x256 matmul": lambda: torch.tanh(tm @ tm),
             "torch vmap attention": lambda: torch_attention(tb, tb, tb),
             "jax.jit 256x256 matmul": lambda: jax_matmul(jm),
             "jax.jit vmap attention": lambda: jax_attention(jb, jb, jb),
             "torch tiny op": lambda: torch.sin(tt * 1.0001 + 0.5),
             "torch vmap dot products": lambda: torch_dots(td, td),
             "jax.jit tiny op": lambda: jax_tiny(jt),
             "jax.jit vmap dot products": lambda: jax_dots(jd, jd)}
    timings = compare(calls, max_blocks=BLOCKS, min_block_s=block_ms / 1000)
    # timed_s: what the blocks cost in wall time, the price of a longer block
    return {name: {"median_s": t.median, "iqr_fraction": t.iqr / t.median,
                   "timed_s": float(t.samples.sum()) * t.calls_per_block}
            for name, t in timings.items()}


if __name__ == "__main__":
    print(json.dumps(run(*(int(arg) for arg in sys.argv[1:4]))))
