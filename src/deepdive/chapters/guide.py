"""The choosing chapter's recommendations, computed from the evidence of this build.

Each `Advice` names the evidence groups it rests on (`deepdive.chapters.evidence` keys) and what to
recommend for each side a verdict can favour. Only comparisons of PyTorch with JAX are
advice here: a row that cannot decide between the frameworks (one framework's variants,
simulated devices) stays in its chapter. A recommendation holds only as far as its
evidence: where no claim decided, it is "withheld on this build"; where some did and the
rest did not, it says on how many cases it rests and which were withheld; where decided
claims favour different sides, it depends on the case, and says which; where part of its
scope was not measured in this build (bf16 without a compiled PyTorch step, say), it is
"partly decided" and names the part. Every recommendation names the device it was
measured on, and the scope (workload and size, device, scale) comes with it, with a
warning when that device is a CPU, whose results say nothing about GPUs. Every ratio is
stated one way, PyTorch's time over JAX's (above 1: JAX took less time). Each cell is a
sentence or two: the whole comparison of every claim is in the evidence table.
`bottom_line` sums the guide up by situation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from deepdive.chapters.evidence import MISSING, NOT_MEASURED, WITHHELD
from deepdive.core.env import is_cpu_label

__all__ = ["ADVICE", "CPU_WARNING", "RATIO", "STATUSES", "Advice", "case_labels", "guide_table",
           "recommend", "scope_of"]

CPU_WARNING = "a CPU result, no GPU evidence"
# The one direction every ratio of the guide is stated in.
RATIO = "PyTorch time / JAX time"


@dataclass(frozen=True)
class Advice:
    need: str
    keys: tuple[str, ...]
    says: dict = field(hash=False)  # favoured side ("JAX", "even", ...) -> recommendation
    chapter: str = ""
    # Show each claim's whole question (what ran on each side), not only its scope.
    detail: bool = False
    # Timed rows carry the CPU warning on a CPU; exact byte counts hold on any device.
    timed: bool = True
    # What each evidence group covers ("fp32 strict", "bf16 mixed"), to name a part of the
    # row's scope that this build did not measure.
    parts: dict = field(default_factory=dict, hash=False)


def _frameworks(jax: str, torch: str) -> dict:
    return {"JAX": jax, "PyTorch": torch, "even": "a tie: either"}


ADVICE = (
    Advice("per-example code (vmap), compiled", ("vmap_compiled",),
           _frameworks("JAX: jax.jit of the vmapped function",
                       "PyTorch: torch.compile of the vmapped function"), "01_vmap"),
    Advice("many tiny operations per step, compiled", ("tiny_compiled",),
           _frameworks("JAX under jax.jit", "PyTorch under torch.compile"), "02_jit_xla"),
    Advice("many tiny operations per step, op by op (eager)", ("tiny_eager",),
           _frameworks("JAX op by op", "PyTorch eager"), "02_jit_xla"),
    Advice("a long elementwise chain on large arrays, compiled", ("fusion",),
           _frameworks("JAX under jax.jit", "PyTorch under torch.compile"), "02_jit_xla"),
    Advice("training a ViT, each framework's best checked step, fp32 strict and bf16 mixed",
           ("vit_fp32", "vit_bf16"),
           _frameworks("JAX's best jax.jit step", "PyTorch's best step"), "05_vit_training",
           detail=True, parts={"vit_fp32": "fp32 strict", "vit_bf16": "bf16 mixed"}),
    Advice("training a language model (a nanoGPT-style GPT), each framework's best checked "
           "step, fp32 strict and bf16 mixed", ("lm_fp32", "lm_bf16"),
           _frameworks("JAX's best jax.jit step", "PyTorch's best step"), "04_gpt_training",
           detail=True, parts={"lm_fp32": "fp32 strict", "lm_bf16": "bf16 mixed"}),
    Advice("PyTorch code through XLA (PyTorch/XLA lazy or openxla, torchax; torch 2.9) "
           "against JAX on the same model", ("xla_route",),
           _frameworks("JAX: jax.jit on a Flax model",
                       "the PyTorch model through XLA (see which route)"),
           "05_vit_xla", detail=True),
    Advice("parameters and optimizer state sharded across devices", ("fsdp_memory",),
           {"either framework": "PyTorch FSDP2 and JAX FSDP each held about 1/n of the "
                                "state on each of n devices (persistent state only)",
            "PyTorch": "PyTorch FSDP2: only it held about 1/n per device",
            "JAX": "JAX FSDP: only it held about 1/n per device",
            "neither": "neither framework held about 1/n per device"}, "06_distributed",
           timed=False),
)


def scope_of(question: str) -> str:
    """The scope part of a claim's question ("<workload, size, device>: <comparison>")."""
    return question.split(": ", 1)[0]


def case_labels(questions) -> list[str]:
    """What tells the cases of one advice apart: the parts of their scopes that not all of
    them share ("batch 8" and "batch 32"), else the compared pair."""
    scopes = [scope_of(q).split(", ") for q in questions]
    shared = set.intersection(*(set(parts) for parts in scopes)) if scopes else set()
    labels = [", ".join(p for p in parts if p not in shared) for parts in scopes]
    if len(set(labels)) < len(labels) or not all(labels):
        labels = [q.split(": ", 1)[-1] for q in questions]
    return labels


STATUSES = ("decided", "depends on the case", "partly decided",
            "partly decided, depends on the case", "withheld", "not measured", "missing")


def recommend(advice: Advice, table: pd.DataFrame) -> dict:
    """One guide row: the recommendation this build's evidence supports, its status (one
    of STATUSES), why, and where that evidence was measured."""
    unknown = set(advice.keys) - set(table["group"])
    if unknown:
        raise KeyError(f"advice {advice.need!r} rests on evidence the table lacks: "
                       f"{sorted(unknown)}; known groups are {sorted(set(table['group']))}")
    rows = table[table["group"].isin(advice.keys)]
    measured = rows[rows["favours"] != NOT_MEASURED]
    unmeasured = [key for key in advice.keys
                  if (rows.loc[rows["group"] == key, "favours"] == NOT_MEASURED).all()]
    sides: list[str] = []
    if measured.empty:
        status, suggestion = "not measured", "; ".join(rows["result"]) or NOT_MEASURED
    elif (measured["favours"] == MISSING).any():
        status = "missing"
        suggestion = f"no evidence in this build: run {advice.chapter} first"
    else:
        status, suggestion, sides = _decide(advice, measured)
        if unmeasured and status in ("decided", "depends on the case", "withheld"):
            status = {"decided": "partly decided", "withheld": "withheld",
                      "depends on the case": "partly decided, depends on the case"}[status]
        if unmeasured:
            named = " and ".join(advice.parts.get(key, key) for key in unmeasured)
            suggestion += f" Not measured in this build: {named} (the evidence says why)."
    return {"if you need": advice.need, "this build suggests": suggestion, "status": status,
            "evidence": "; ".join(rows["result"]), "measured at": _scope(advice, measured),
            RATIO: _ratios(measured),
            "chapter": advice.chapter, "favours": "; ".join(sides), "timed": advice.timed,
            "devices": "; ".join(dict.fromkeys(d for d in measured["device"] if d))}


def _decide(advice: Advice, rows: pd.DataFrame) -> tuple[str, str, list[str]]:
    labels = dict(zip(rows.index, case_labels(rows["question"]), strict=True))
    decided = rows[rows["favours"] != WITHHELD]
    undecided = [labels[i] for i in rows.index if i not in decided.index]
    sides = list(dict.fromkeys(decided["favours"]))
    for side in sides:
        if side not in advice.says:
            raise KeyError(f"advice {advice.need!r} has nothing to say for {side!r}; it "
                           f"knows {sorted(advice.says)}")
    if decided.empty:
        return "withheld", f"{WITHHELD}: measure your own workload.", []
    if len(sides) == 1:
        status, text = "decided", advice.says[sides[0]]
    else:
        status = "depends on the case"
        text = "depends on the case: " + "; ".join(
            f"{labels[i]}: {advice.says[row.favours]}" for i, row in decided.iterrows())
    if undecided:
        status = "partly decided" if len(sides) == 1 else "partly decided, depends on the case"
        text += (f" (decided in {len(decided)} of {len(rows)} cases; {WITHHELD} for "
                 f"{'; '.join(undecided)})")
    devices = list(dict.fromkeys(rows["device"]))
    where = ("this build's CPU" if all(is_cpu_label(d) for d in devices)
             else f"this build's {', '.join(devices)}")
    return status, f"On {where}: {text}.", sides


def _scope(advice: Advice, rows: pd.DataFrame) -> str:
    """The row's scope in one line: what its cases share, what tells them apart, the
    variants each side ran where the row compares each side's best, the device and scale."""
    if rows.empty or (rows["device"] == "").all():
        return ""
    scopes = [scope_of(q).split(", ") for q in rows["question"]]
    shared = [p for p in scopes[0] if all(p in other for other in scopes)]
    differ = list(dict.fromkeys(", ".join(p for p in parts if p not in shared) for parts in scopes))
    workload = ", ".join(shared) + (f" ({' | '.join(d for d in differ if d)})"
                                    if any(differ) else "")
    if advice.detail:
        sides = (" | ".join(dict.fromkeys(rows[side])) for side in ("candidate", "baseline"))
        workload += "; {} against {}".format(*sides)
    devices = list(dict.fromkeys(d for d in rows["device"] if d))
    scales = ", ".join(dict.fromkeys(s for s in rows["scale"] if s))
    text = f"{workload}; on {', '.join(devices)}, {scales} scale"
    cpu = advice.timed and any(is_cpu_label(d) for d in devices)
    return f"{text}; {CPU_WARNING}" if cpu else text


def _ratios(rows: pd.DataFrame) -> str:
    """PyTorch time / JAX time of each timed case, with its 95% interval: '1.45 [1.31,
    1.60]', or 'batch 8: 1.01 [0.97, 1.05]; batch 32: ...' for several cases."""
    timed = rows[rows["torch_over_jax"].notna()] if "torch_over_jax" in rows else rows.iloc[:0]
    if timed.empty:
        return ""
    labels = _short_labels(timed) if len(timed) > 1 else [""]
    return "; ".join(f"{label + ': ' if label else ''}{r.torch_over_jax:.2f} "
                     f"[{r.torch_over_jax_low:.2f}, {r.torch_over_jax_high:.2f}]"
                     for label, r in zip(labels, timed.itertuples(), strict=True))


def _short_labels(rows: pd.DataFrame) -> list[str]:
    """case_labels, or where the cases share their scope, what ran on the side that
    differs (the candidate, else the baseline)."""
    labels = case_labels(rows["question"])
    if labels != [q.split(": ", 1)[-1] for q in rows["question"]]:
        return labels
    for side in ("candidate", "baseline"):
        if rows[side].nunique() == len(rows):
            return list(rows[side])
    return labels


def guide_table(table: pd.DataFrame, advice=ADVICE) -> pd.DataFrame:
    """Every advice row, computed from `table` (deepdive.chapters.evidence.evidence_table)."""
    return pd.DataFrame([recommend(a, table) for a in advice])
