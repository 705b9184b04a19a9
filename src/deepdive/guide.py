"""Chapter 6's recommendations, computed from the evidence of this build.

Each `Advice` names the evidence rows it rests on (`deepdive.evidence` keys) and what to
recommend for each side a verdict can favour. A recommendation holds only as far as its
evidence: one inconclusive row makes it "inconclusive on this build", rows that favour
different sides make it depend on the workload, and every recommendation carries the
scope it was measured at (workload and size, device, scale), with a warning when that
device is a CPU, whose results say nothing about GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from deepdive.env import is_cpu_label
from deepdive.evidence import INCONCLUSIVE, MISSING, NOT_MEASURED

CPU_WARNING = "a CPU result: it says nothing about GPUs (see the published anchors)"


@dataclass(frozen=True)
class Advice:
    need: str
    keys: tuple[str, ...]
    says: dict = field(hash=False)  # favoured side ("JAX", "even", ...) -> recommendation
    chapter: str = ""


def _frameworks(jax: str, torch: str) -> dict:
    return {"JAX": jax, "PyTorch": torch, "even": "either: a tie on this build"}


ADVICE = (
    Advice("per-example code, vectorised and compiled",
           ("vmap_attention_compiled", "vmap_dot_compiled"),
           _frameworks("JAX: jax.jit(vmap)", "PyTorch: torch.compile(vmap)"), "01_vmap"),
    Advice("vmap in place of a Python loop over examples, JAX", ("vmap_vs_loop_jax",),
           {"vmap": "jax.vmap", "loop": "the loop", "even": "either: a tie on this build"},
           "01_vmap"),
    Advice("vmap in place of a Python loop over examples, PyTorch", ("vmap_vs_loop_torch",),
           {"vmap": "torch.func.vmap", "loop": "the loop",
            "even": "either: a tie on this build"}, "01_vmap"),
    Advice("many tiny operations per step, compiled", ("tiny_compiled",),
           _frameworks("JAX under jax.jit", "PyTorch under torch.compile"), "02_jit_xla"),
    Advice("many tiny operations per step, op by op (eager)", ("tiny_eager",),
           _frameworks("JAX op by op", "PyTorch eager"), "02_jit_xla"),
    Advice("a long elementwise chain on large arrays, compiled",
           ("fusion_kept", "fusion_glibc"),
           _frameworks("JAX under jax.jit", "PyTorch under torch.compile"), "02_jit_xla"),
    Advice("torch.compile for a GPT training step", ("gpt_char_inductor", "gpt_vocab_inductor"),
           {"torch.compile": "compile it", "eager": "stay eager",
            "even": "no gain measured here: compile where your own device shows one"},
           "03_torch_compile"),
    Advice("a ViT training step, compiled, fp32, each framework's attention API",
           ("vit_fp32",),
           _frameworks("JAX: jax.jit + dot_product_attention", "PyTorch: torch.compile + SDPA"),
           "04_vit_training"),
    Advice("a ViT training step, compiled, bf16 mixed precision", ("vit_bf16",),
           _frameworks("JAX: jax.jit + dot_product_attention", "PyTorch: torch.compile + SDPA"),
           "04_vit_training"),
    Advice("Flax NNX with the least per-step overhead", ("nnx_split",),
           {"split/merge": "jax.jit on nnx.split state", "nnx.jit": "nnx.jit",
            "even": "nnx.jit (the simpler one; a tie on this build)"}, "04_vit_training"),
    Advice("one step spread over several devices (JAX data parallel)", ("data_parallel",),
           {"data parallel": "data parallel: it paid on these devices",
            "one device": "one device: on these devices splitting cost more than it saved",
            "even": "no gain on these devices"}, "05_distributed"),
    Advice("a model whose state does not fit one device", ("fsdp_memory",),
           {"either framework": "shard it (PyTorch FSDP2 or JAX FSDP): both divide the "
                                "state by the device count",
            "PyTorch": "PyTorch FSDP2: only it divided the state here",
            "JAX": "JAX FSDP: only it divided the state here",
            "neither": "neither framework divided the state here"}, "05_distributed"),
    Advice("what FSDP costs in step time against data parallel (JAX)", ("fsdp_time",),
           {"FSDP": "FSDP cost no time here", "data parallel":
            "FSDP cost time here: shard when memory needs it, not by default",
            "even": "FSDP cost no measurable time (a tie)"}, "05_distributed"),
)


def scope_of(question: str) -> str:
    """The scope part of a claim's question ("<workload, size, device>: <comparison>")."""
    return question.split(": ", 1)[0]


def recommend(advice: Advice, table: pd.DataFrame) -> dict:
    """One guide row: the recommendation this build's evidence supports, why, and where
    that evidence was measured."""
    unknown = set(advice.keys) - set(table["key"])
    if unknown:
        raise KeyError(f"advice {advice.need!r} rests on evidence the table lacks: "
                       f"{sorted(unknown)}; known keys are {sorted(table['key'])}")
    rows = table.set_index("key").loc[list(advice.keys)]
    measured = rows[rows["favours"] != NOT_MEASURED]
    sides = list(dict.fromkeys(measured["favours"]))
    if measured.empty:
        suggestion = NOT_MEASURED
    elif MISSING in sides:
        suggestion = f"no evidence in this build: run {advice.chapter} first"
    elif INCONCLUSIVE in sides:
        suggestion = f"{INCONCLUSIVE}: measure your own workload"
    elif len(sides) == 1:
        if sides[0] not in advice.says:
            raise KeyError(f"advice {advice.need!r} has nothing to say for {sides[0]!r}; it "
                           f"knows {sorted(advice.says)}")
        suggestion = advice.says[sides[0]]
    else:
        suggestion = "depends on the workload on this build: " + "; ".join(
            f"{scope_of(row.question)}: {advice.says.get(row.favours, row.favours)}"
            for row in measured.itertuples())
    return {"if you need": advice.need, "this build suggests": suggestion,
            "evidence": "; ".join(rows["result"]), "measured at": _scope(measured),
            "chapter": advice.chapter}


def _scope(rows: pd.DataFrame) -> str:
    if rows.empty or (rows["device"] == "").all():
        return ""
    workloads = " | ".join(dict.fromkeys(scope_of(q) for q in rows["question"]))
    devices = list(dict.fromkeys(d for d in rows["device"] if d))
    scales = ", ".join(dict.fromkeys(s for s in rows["scale"] if s))
    text = f"{workloads}; on {', '.join(devices)}, {scales} scale"
    return f"{text}; {CPU_WARNING}" if any(is_cpu_label(d) for d in devices) else text


def guide_table(table: pd.DataFrame, advice=ADVICE) -> pd.DataFrame:
    """Every advice row, computed from `table` (deepdive.evidence.evidence_table)."""
    return pd.DataFrame([recommend(a, table) for a in advice])
