"""The evidence behind chapter 6's guide, computed from the other chapters' saved results.

Every claim the guide makes about speed or memory is a `Claim`: a question, the chapter
that measured it, and a function that reads that chapter's records (`deepdive.results`)
and returns a number and which framework it favours. Nothing here holds a measured
value; a chapter whose results are missing shows up as MISSING, never as a stale number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "04_vit_training", "05_distributed")
TIE_BAND = 0.10  # a ratio within 10% of 1 is called even: this machine's runs move that much


@dataclass(frozen=True)
class Claim:
    topic: str
    chapter: str
    question: str
    measure: Callable[[pd.DataFrame], float]
    meaning: str  # what the number is, e.g. "PyTorch time / JAX time"
    favours: Callable[[float], str]


def ratio_favours(above: str, below: str) -> Callable[[float], str]:
    """For a ratio: `above` when clearly over 1, `below` when clearly under, else even."""

    def verdict(value: float) -> str:
        if value > 1 + TIE_BAND:
            return above
        if value < 1 / (1 + TIE_BAND):
            return below
        return "even"

    return verdict


def value(frame: pd.DataFrame, *, experiment: str, variant: str, metric: str = "median",
          size=None) -> float:
    """One saved value; `size=None` takes the largest size the chapter measured."""
    rows = frame[(frame["experiment"] == experiment) & (frame["variant"] == variant)
                 & (frame["metric"] == metric)]
    if rows.empty:
        raise KeyError(f"no {metric!r} for {experiment!r}/{variant!r} in {frame['chapter'].iat[0]}")
    sizes = pd.to_numeric(rows["size"], errors="coerce")
    if size is None:
        pick = rows[sizes == sizes.max()] if sizes.notna().any() else rows
    else:
        pick = rows[rows["size"].astype(str) == str(size)]
    if pick.empty:
        raise KeyError(f"no size {size!r} for {experiment!r}/{variant!r}")
    return float(pick["value"].iloc[0])


def _fastest(frame, experiment, framework, batch, precision="fp32", feed="synthetic"):
    rows = frame[(frame["experiment"] == experiment) & (frame["framework"] == framework)
                 & (frame["metric"] == "median") & (frame["size"].astype(str) == str(batch))
                 & frame["variant"].str.endswith(f" {precision} {feed}")]
    return float(rows["value"].min())


def _vit_head_to_head(frame):
    return _fastest(frame, "sweep", "torch", 32) / _fastest(frame, "sweep", "jax", 32)


def _fsdp_share(frame):
    rows = frame[(frame["experiment"] == "memory_per_device")]
    full = rows[rows["variant"] == "single"]["value"].iloc[0]
    sharded = rows[rows["variant"] == "fsdp2"]
    return float(sharded.loc[pd.to_numeric(sharded["size"]).idxmax(), "value"] / full)


def _torch_ddp_overhead(frame):
    return (value(frame, experiment="step_time", variant="ddp", metric="step median (ms)",
                  size=2)
            / value(frame, experiment="step_time", variant="single",
                    metric="step median (ms)", size=1))


CLAIMS = (
    Claim("vectorization", "01_vmap", "Compiled vmap on attention: which runs faster?",
          lambda f: value(f, experiment="attention", variant="torch.compile(vmap)")
          / value(f, experiment="attention", variant="jax.jit(vmap)"),
          "torch.compile(vmap) time / jax.jit(vmap) time, largest batch",
          ratio_favours("JAX", "PyTorch")),
    Claim("vectorization", "01_vmap", "vmap against a Python loop (JAX, attention)",
          lambda f: value(f, experiment="attention", variant="JAX loop")
          / value(f, experiment="attention", variant="jax.jit(vmap)"),
          "loop time / jax.jit(vmap) time, largest batch", ratio_favours("vmap", "loop")),
    Claim("overhead", "02_jit_xla", "Many tiny ops: PyTorch eager against jax.jit",
          lambda f: value(f, experiment="dispatch_tiny", variant="PyTorch eager")
          / value(f, experiment="dispatch_tiny", variant="jax.jit"),
          "PyTorch eager time / jax.jit time, 16 ops", ratio_favours("JAX", "PyTorch")),
    Claim("compilation", "02_jit_xla", "Fusing an elementwise chain: torch.compile vs jax.jit",
          lambda f: value(f, experiment="fusion_chain", variant="torch.compile")
          / value(f, experiment="fusion_chain", variant="jax.jit"),
          "torch.compile time / jax.jit time, longest chain", ratio_favours("JAX", "PyTorch")),
    Claim("compilation", "03_torch_compile", "torch.compile on a GPT training step (fp32)",
          lambda f: value(f, experiment="gpt_training", variant="eager fp32",
                          metric="step median (ms)", size="char-small")
          / value(f, experiment="gpt_training", variant="inductor fp32",
                  metric="step median (ms)", size="char-small"),
          "eager step / inductor step, Shakespeare-char model",
          ratio_favours("torch.compile", "eager")),
    Claim("training", "04_vit_training", "ViT training step, fastest mode of each (fp32)",
          _vit_head_to_head, "fastest PyTorch step / fastest JAX step, batch 32",
          ratio_favours("JAX", "PyTorch")),
    Claim("training", "04_vit_training", "nnx.jit against the split/merge jax.jit step",
          lambda f: value(f, experiment="sweep", variant="nnx.jit fp32 synthetic",
                          size=8)
          / value(f, experiment="sweep", variant="jax.jit split/merge fp32 synthetic",
                  size=8),
          "nnx.jit step / split-merge step, smallest batch",
          ratio_favours("split/merge", "nnx.jit")),
    Claim("scaling", "05_distributed", "FSDP2: memory per rank against one process",
          _fsdp_share, "params + optimizer state per rank / single process, most ranks",
          lambda share: "sharding" if share < 0.75 else "even"),
    Claim("scaling", "05_distributed", "DDP on 2 ranks against 1 process, same global batch",
          _torch_ddp_overhead, "DDP x2 step / single-process step (shared CPU cores)",
          ratio_favours("1 process", "DDP")),
)


def load_all(directory: Path) -> dict[str, pd.DataFrame | None]:
    """Each chapter's saved records, or None where the chapter has not saved any."""
    return {chapter: pd.read_csv(directory / f"{chapter}.csv")
            if (directory / f"{chapter}.csv").exists() else None for chapter in CHAPTERS}


def evidence_table(results: dict[str, pd.DataFrame | None]) -> pd.DataFrame:
    """One row per claim: the measured number, what it means, whom it favours, and where
    it came from (device and scale of that chapter's build), or MISSING."""
    rows = []
    for claim in CLAIMS:
        frame = results.get(claim.chapter)
        row = {"topic": claim.topic, "question": claim.question, "chapter": claim.chapter,
               "meaning": claim.meaning}
        if frame is None or frame.empty:
            row.update(value=float("nan"), favours="MISSING",
                       measured_on=f"MISSING: no results from {claim.chapter}; build it first")
        else:
            number = claim.measure(frame)
            row.update(value=number, favours=claim.favours(number),
                       measured_on=f"{frame['device'].iat[0]}, scale={frame['scale'].iat[0]}")
        rows.append(row)
    return pd.DataFrame(rows)
