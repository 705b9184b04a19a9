"""Chapter 6's recommendations, computed from the evidence of this build.

Each `Advice` names the evidence groups it rests on (`deepdive.evidence` keys) and what to
recommend for each side a verdict can favour. A recommendation holds only as far as its
evidence: where no claim decided, it is "inconclusive on this build"; where some did and
the rest did not, it says on how many cases it rests and which were inconclusive; where
decided claims favour different sides, it depends on the case, and says which. Every
recommendation names the device it was measured on, and the scope (workload and size,
device, scale) comes with it, with a warning when that device is a CPU, whose results say
nothing about GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from deepdive.env import is_cpu_label
from deepdive.evidence import INCONCLUSIVE, MISSING, NOT_MEASURED

CPU_WARNING = "a CPU result: it says nothing about GPUs (see the published anchors)"
SIMULATED = "simulated devices share one CPU's cores: this measures overhead, not scaling"


@dataclass(frozen=True)
class Advice:
    need: str
    keys: tuple[str, ...]
    says: dict = field(hash=False)  # favoured side ("JAX", "even", ...) -> recommendation
    chapter: str = ""
    # A scope that contains the key gets the caveat (e.g. simulated devices).
    caveats: dict = field(default_factory=dict, hash=False)
    # Show each claim's whole question (what ran on each side), not only its scope.
    detail: bool = False
    # Caveats (keys of `caveats`) that apply only when the decided cases disagree.
    caveats_if_split: tuple = ()
    # Timed rows carry the CPU warning on a CPU; exact byte counts hold on any device.
    timed: bool = True


def _frameworks(jax: str, torch: str) -> dict:
    return {"JAX": jax, "PyTorch": torch, "even": "a tie: either"}


_SIMULATED = {"simulated": SIMULATED}
ALLOCATOR = ("the cases differ by the host allocator's setting, not by workload: see "
             "chapter 2 for what the setting changes")
ADVICE = (
    Advice("per-example code (vmap), compiled", ("vmap_compiled",),
           _frameworks("JAX: jax.jit of the vmapped function",
                       "PyTorch: torch.compile of the vmapped function"), "01_vmap"),
    Advice("vmap in place of a Python loop over examples, JAX", ("vmap_vs_loop_jax",),
           {"vmap": "jax.vmap", "loop": "the loop", "even": "a tie: either"}, "01_vmap"),
    Advice("vmap in place of a Python loop over examples, PyTorch", ("vmap_vs_loop_torch",),
           {"vmap": "torch.func.vmap", "loop": "the loop", "even": "a tie: either"},
           "01_vmap"),
    Advice("many tiny operations per step, compiled", ("tiny_compiled",),
           _frameworks("JAX under jax.jit", "PyTorch under torch.compile"), "02_jit_xla"),
    Advice("many tiny operations per step, op by op (eager)", ("tiny_eager",),
           _frameworks("JAX op by op", "PyTorch eager"), "02_jit_xla"),
    Advice("a long elementwise chain on large arrays, compiled", ("fusion",),
           _frameworks("JAX under jax.jit", "PyTorch under torch.compile"), "02_jit_xla",
           {"freed memory kept": ALLOCATOR}, caveats_if_split=("freed memory kept",)),
    Advice("torch.compile for a GPT training step", ("gpt_inductor",),
           {"torch.compile": "compile it", "eager": "stay eager",
            "even": "a tie: no gain beyond the tie band; compile where your own device "
                    "shows one"},
           "03_torch_compile"),
    Advice("a ViT training step, compiled, fp32, each framework's attention API",
           ("vit_fp32",),
           _frameworks("JAX: jax.jit + dot_product_attention", "PyTorch: torch.compile + SDPA"),
           "04_vit_training", detail=True),
    Advice("a ViT training step, compiled, bf16 mixed precision", ("vit_bf16",),
           _frameworks("JAX: jax.jit + dot_product_attention", "PyTorch: torch.compile + SDPA"),
           "04_vit_training", detail=True),
    Advice("training a language model (a nanoGPT-style GPT), each framework's compiled "
           "step, fp32 and bf16 mixed", ("lm_fp32", "lm_bf16"),
           _frameworks("JAX: jax.jit of the whole step + dot_product_attention",
                       "PyTorch: torch.compile + SDPA"), "04_gpt_training", detail=True),
    Advice("a JAX language model's linear layers (jax.jit step): Flax's dot over (batch, "
           "time, features) or tokens flattened to (tokens, features)", ("lm_flatten",),
           {"flattened": "flatten the tokens, as PyTorch's F.linear does",
            "Flax's form": "keep nnx.Linear's dot over all leading axes",
            "even": "a tie: either"}, "04_gpt_training"),
    Advice("PyTorch code through XLA (PyTorch/XLA lazy or openxla, torchax; torch 2.9) "
           "against JAX on the same model", ("xla_route",),
           _frameworks("JAX: jax.jit on a Flax model",
                       "the PyTorch model through XLA (see which route)"),
           "04_vit_xla", detail=True),
    Advice("a PyTorch training step through XLA (PyTorch/XLA, torchax) against eager PyTorch, "
           "same torch 2.9", ("xla_vs_eager",),
           {"through XLA": "run it through XLA", "eager": "stay eager",
            "even": "a tie: no gain beyond the tie band"}, "04_vit_xla", detail=True),
    Advice("Flax NNX with the least per-step overhead", ("nnx_split",),
           {"split/merge": "jax.jit on nnx.split state", "nnx.jit": "nnx.jit",
            "even": "nnx.jit (the simpler one; a tie)"}, "04_vit_training"),
    Advice("one step spread over several devices (JAX data parallel)", ("data_parallel",),
           {"data parallel": "data parallel: it paid",
            "one device": "one device: splitting cost more than it saved",
            "even": "no gain and no loss"}, "05_distributed", _SIMULATED),
    Advice("parameters and optimizer state sharded across devices", ("fsdp_memory",),
           {"either framework": "PyTorch FSDP2 and JAX FSDP each held about 1/n of them "
                                "on each of n devices (the evidence gives n and the "
                                "shares; persistent state only: not peak memory, "
                                "gradients or activations)",
            "PyTorch": "PyTorch FSDP2: only it held about 1/n per device",
            "JAX": "JAX FSDP: only it held about 1/n per device",
            "neither": "neither framework held about 1/n per device"}, "05_distributed",
           timed=False),
    Advice("what FSDP costs in step time against data parallel (JAX)", ("fsdp_time",),
           {"FSDP": "FSDP cost no time: it ran faster than data parallel",
            "data parallel": "FSDP cost time: shard when memory needs it, not by default",
            "even": "a tie: no cost beyond the tie band"}, "05_distributed", _SIMULATED),
)


def scope_of(question: str) -> str:
    """The scope part of a claim's question ("<workload, size, device>: <comparison>")."""
    return question.split(": ", 1)[0]


def case_labels(questions) -> list[str]:
    """What tells the cases of one advice apart: the parts of their scopes that not all of
    them share ("batch 8" and "batch 32"), else the compared pair."""
    scopes = [[part.strip() for part in scope_of(q).split(",")] for q in questions]
    shared = set.intersection(*(set(parts) for parts in scopes)) if scopes else set()
    labels = [", ".join(p for p in parts if p not in shared) for parts in scopes]
    if len(set(labels)) < len(labels) or not all(labels):
        labels = [q.split(": ", 1)[-1] for q in questions]
    return labels


STATUSES = ("decided", "depends on the case", "partly decided",
            "partly decided, depends on the case", "inconclusive", "not measured", "missing")


def recommend(advice: Advice, table: pd.DataFrame) -> dict:
    """One guide row: the recommendation this build's evidence supports, its status (one
    of STATUSES), why, and where that evidence was measured."""
    unknown = set(advice.keys) - set(table["group"])
    if unknown:
        raise KeyError(f"advice {advice.need!r} rests on evidence the table lacks: "
                       f"{sorted(unknown)}; known groups are {sorted(set(table['group']))}")
    rows = table[table["group"].isin(advice.keys)]
    measured = rows[rows["favours"] != NOT_MEASURED]
    if measured.empty:
        status, suggestion = "not measured", "; ".join(rows["result"]) or NOT_MEASURED
    elif (measured["favours"] == MISSING).any():
        status = "missing"
        suggestion = f"no evidence in this build: run {advice.chapter} first"
    else:
        status, suggestion = _decide(advice, measured)
    return {"if you need": advice.need, "this build suggests": suggestion, "status": status,
            "evidence": "; ".join(rows["result"]), "measured at": _scope(advice, measured),
            "chapter": advice.chapter}


def _decide(advice: Advice, rows: pd.DataFrame) -> tuple[str, str]:
    labels = dict(zip(rows.index, case_labels(rows["question"]), strict=True))
    decided = rows[rows["favours"] != INCONCLUSIVE]
    undecided = [labels[i] for i in rows.index if i not in decided.index]
    sides = list(dict.fromkeys(decided["favours"]))
    for side in sides:
        if side not in advice.says:
            raise KeyError(f"advice {advice.need!r} has nothing to say for {side!r}; it "
                           f"knows {sorted(advice.says)}")
    caveats = "".join(f" ({c})" for key, c in advice.caveats.items()
                      if any(key in scope_of(q) for q in rows["question"])
                      and (key not in advice.caveats_if_split or len(sides) > 1))
    if decided.empty:
        return "inconclusive", f"{INCONCLUSIVE}: measure your own workload{caveats}"
    if len(sides) == 1:
        status, text = "decided", advice.says[sides[0]]
    else:
        status = "depends on the case"
        text = "depends on the case: " + "; ".join(
            f"{labels[i]}: {advice.says[row.favours]}" for i, row in decided.iterrows())
    if undecided:
        status = "partly decided" if len(sides) == 1 else "partly decided, depends on the case"
        text += (f" (decided in {len(decided)} of {len(rows)} cases; {INCONCLUSIVE} for "
                 f"{'; '.join(undecided)})")
    devices = list(dict.fromkeys(rows["device"]))
    where = ("this build's CPU" if all(is_cpu_label(d) for d in devices)
             else f"this build's {', '.join(devices)}")
    return status, f"On {where}: {text}{caveats}"


def _scope(advice: Advice, rows: pd.DataFrame) -> str:
    if rows.empty or (rows["device"] == "").all():
        return ""
    workloads = " | ".join(dict.fromkeys(q if advice.detail else scope_of(q)
                                         for q in rows["question"]))
    devices = list(dict.fromkeys(d for d in rows["device"] if d))
    scales = ", ".join(dict.fromkeys(s for s in rows["scale"] if s))
    text = f"{workloads}; on {', '.join(devices)}, {scales} scale"
    cpu = advice.timed and any(is_cpu_label(d) for d in devices)
    return f"{text}; {CPU_WARNING}" if cpu else text


def guide_table(table: pd.DataFrame, advice=ADVICE) -> pd.DataFrame:
    """Every advice row, computed from `table` (deepdive.evidence.evidence_table)."""
    return pd.DataFrame([recommend(a, table) for a in advice])
