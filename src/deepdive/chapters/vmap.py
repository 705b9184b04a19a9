"""Chapter 1's workloads and variants as the release sweep runs them
(`deepdive.releases.workloads`, in each jax or torch release's own environment).

The page (notebooks/01_vmap.md) writes and times its own. Every function here is a saved
copy of the page's function of the same name, in d2l's manner (`#@save`), and
tests/test_chapters_vmap.py fails when a copy and the page differ by one character; so
the release sweep times what the page shows. Nothing here writes prose.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.func import vmap

__all__ = ["JAX_39103_ROWS", "PER_EXAMPLE", "SAVED", "JitCheck", "at_set_loop",
           "attention_jax", "attention_reference", "attention_torch", "attention_torch_batched",
           "dot_jax", "dot_reference", "dot_torch", "dot_torch_batched", "example_shapes",
           "fori_writes", "framework", "jax_variants", "jit_and_eager", "jit_matches_eager",
           "make_inputs", "torch_variants"]

# jax-ml/jax#39103: jax 0.10.2 returned wrong values under jit on the CPU from 32,769 rows.
JAX_39103_ROWS = 32_769


def dot_torch(x, y):
    """One example: two (d,) vectors -> a scalar."""
    return torch.dot(x, y)


def dot_jax(x, y):
    """One example: two (d,) vectors -> a scalar."""
    return jnp.dot(x, y)


def attention_torch(q, k, v):
    """One example: (T, d) query, key and value -> (T, d)."""
    scores = q @ k.T / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def attention_jax(q, k, v):
    """One example: (T, d) query, key and value -> (T, d)."""
    scores = q @ k.T / q.shape[-1] ** 0.5
    return jax.nn.softmax(scores, axis=-1) @ v


def dot_torch_batched(x, y):  # the whole batch by hand: one einsum
    return torch.einsum("bd,bd->b", x, y)


def attention_torch_batched(q, k, v):  # the whole batch by hand: batched matmuls
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def dot_reference(x, y):  # float64 NumPy, batched
    return np.einsum("bd,bd->b", x, y)


def attention_reference(q, k, v):  # float64 NumPy, batched, a numerically safe softmax
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def make_inputs(batch, example_shapes):
    rng = np.random.default_rng(batch)  # the same fp32 arrays for both frameworks
    return [rng.standard_normal((batch, *shape), dtype=np.float32) for shape in example_shapes]


def torch_variants(f, f_batched, arrays, device):
    args = [torch.from_numpy(a).to(device) for a in arrays]
    vmapped = vmap(f)
    # One static-shape graph per batch size, as jax.jit makes, and no graph break allowed.
    compiled = torch.compile(vmapped, dynamic=False, fullgraph=True)
    return {
        "PyTorch loop": lambda: torch.stack([f(*ex) for ex in zip(*args, strict=True)]),
        "torch.func.vmap": lambda: vmapped(*args),
        "PyTorch batched ops": lambda: f_batched(*args),
        "torch.compile(vmap)": lambda: compiled(*args),
    }


def at_set_loop(f, shape, *args):  # eager: every write is an op that builds a new array
    out = jnp.zeros(shape)
    for i, example in enumerate(zip(*args, strict=True)):
        out = out.at[i].set(f(*example))
    return out


def fori_writes(f, *args):  # to be jitted: XLA then writes into one buffer, in place
    def body(i, out):
        return out.at[i].set(f(*(a[i] for a in args)))

    out = jnp.zeros(jax.eval_shape(jax.vmap(f), *args).shape)
    return jax.lax.fori_loop(0, len(args[0]), body, out)


def jax_variants(f, arrays):
    args = [jnp.asarray(a) for a in arrays]
    shape = jax.eval_shape(jax.vmap(f), *args).shape  # once, not in every timed call
    one_jitted, vmapped, jitted = jax.jit(f), jax.vmap(f), jax.jit(jax.vmap(f))
    fori_jitted = jax.jit(functools.partial(fori_writes, f))
    return {
        "JAX loop": lambda: jnp.stack([f(*ex) for ex in zip(*args, strict=True)]),
        "JAX loop of jit(f)": lambda: jnp.stack([one_jitted(*ex)
                                                 for ex in zip(*args, strict=True)]),
        "JAX .at[].set loop": lambda: at_set_loop(f, shape, *args),
        "jax.vmap": lambda: vmapped(*args),
        "jax.jit(vmap)": lambda: jitted(*args),
        "jax.jit(fori_loop)": lambda: fori_jitted(*args),
    }


def jit_and_eager(x, m):
    """jax-ml/jax#39103's pattern, run eagerly and jitted: each row's squared norm of m @ row."""
    def squared_norms(x):
        return jax.vmap(lambda row: jnp.sum((m @ row) ** 2))(x)

    return np.asarray(squared_norms(x)), np.asarray(jax.jit(squared_norms)(x))


# What the release sweep needs beyond the page's functions: which are which, and the shapes.
SAVED = ("dot_torch", "dot_jax", "attention_torch", "attention_jax", "dot_torch_batched",
         "attention_torch_batched", "dot_reference", "attention_reference", "make_inputs",
         "torch_variants", "at_set_loop", "fori_writes", "jax_variants", "jit_and_eager")
PER_EXAMPLE = {  # workload: (torch, jax, torch by hand, float64 reference)
    "dot": (dot_torch, dot_jax, dot_torch_batched, dot_reference),
    "attention": (attention_torch, attention_jax, attention_torch_batched, attention_reference),
}


def example_shapes(workload: str, sizes) -> list[tuple[int, ...]]:
    """One example's argument shapes at a scale's sizes (`deepdive.book.plans.sizes`)."""
    one = {"dot": (sizes.dot_dim,), "attention": (sizes.seq_len, sizes.head_dim)}[workload]
    return [one] * (2 if workload == "dot" else 3)


def framework(variant: str) -> str:
    """"torch" for a PyTorch variant's label, "jax" for any other."""
    return "torch" if variant.startswith(("PyTorch", "torch")) else "jax"


@dataclass(frozen=True)
class JitCheck:
    """jax-ml/jax#39103's check on `rows` rows (i, 0, 0) with m the 3x3 identity: row i
    gives i**2 rounded to float32, the same rounding eager and jitted."""

    rows: int
    eager_last: float
    jit_last: float
    mismatches: int

    @property
    def matches(self) -> bool:
        return self.mismatches == 0


def jit_matches_eager(rows: int = JAX_39103_ROWS) -> JitCheck:
    """The page's check (`jit_and_eager`) on this process's jax, at `rows` rows."""
    if rows < 1:
        raise ValueError(f"rows must be a positive count, got {rows}")
    i = jnp.arange(rows, dtype=jnp.float32)
    x = jnp.stack([i, jnp.zeros_like(i), jnp.zeros_like(i)], axis=1)
    eager, jitted = jit_and_eager(x, jnp.eye(3, dtype=jnp.float32))
    return JitCheck(rows, float(eager[-1]), float(jitted[-1]), int((eager != jitted).sum()))
