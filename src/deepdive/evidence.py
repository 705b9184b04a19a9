"""The evidence behind chapter 6's guide, computed from the other chapters' saved results.

Where a chapter decides its comparisons with the verdict rule (chapters 1 to 4), the
guide takes the verdict from `_build/results/claims.csv`: a `FromClaim` names the claim
and which framework each verdict favours, so the guide can never say more than the
chapter did. The other chapters' rows are `Claim`s: a question, the chapter that measured
it, and a function that reads that chapter's records (`deepdive.results`) and returns a
number and which framework it favours. Nothing here holds a measured value; a chapter
whose results are missing shows up as MISSING, never as a stale number.
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


@dataclass(frozen=True)
class FromClaim:
    """A guide row read from claims.csv: `favours` maps a verdict (the candidate against
    the baseline) to what it favours; a tie is "even" and an inconclusive claim says so."""

    topic: str
    chapter: str
    question: str
    claim_id: str
    favours: dict


def _jax_if_faster() -> dict:
    return {"faster": "JAX", "slower": "PyTorch"}


def _torch_if_faster() -> dict:
    return {"faster": "PyTorch", "slower": "JAX"}


CLAIMS = (
    FromClaim("vectorization", "01_vmap", "Compiled vmap on attention: which runs faster?",
              "attention_jit_vs_compile", _jax_if_faster()),
    FromClaim("vectorization", "01_vmap", "vmap against a Python loop (JAX, attention, eager)",
              "attention_jax_vmap_vs_loop", {"faster": "vmap", "slower": "loop"}),
    FromClaim("overhead", "02_jit_xla", "Many tiny ops, compiled: torch.compile against jax.jit",
              "tiny_compile_vs_jit", _torch_if_faster()),
    FromClaim("compilation", "02_jit_xla",
              "Fusing an elementwise chain: torch.compile vs jax.jit (freed memory kept)",
              "kept_fusion_compile_vs_jit", _torch_if_faster()),
    FromClaim("compilation", "03_torch_compile", "torch.compile on a GPT training step (fp32)",
              "char_inductor_fp32", {"faster": "torch.compile", "slower": "eager"}),
    FromClaim("training", "04_vit_training",
              "ViT training step, compiled, each framework's attention API (fp32)",
              "fused_jax_vs_torch_b32", _jax_if_faster()),
    FromClaim("training", "04_vit_training", "nnx.jit against the split/merge jax.jit step",
              "split_vs_nnx_b32", {"faster": "split/merge", "slower": "nnx.jit"}),
    Claim("scaling", "05_distributed", "FSDP2: memory per rank against one process",
          _fsdp_share, "params + optimizer state per rank / single process, most ranks",
          lambda share: "sharding" if share < 0.75 else "even"),
    Claim("scaling", "05_distributed", "DDP on 2 ranks against 1 process, same global batch",
          _torch_ddp_overhead, "DDP x2 step / single-process step (shared CPU cores)",
          ratio_favours("1 process", "DDP")),
)


def load_all(directory: Path) -> dict[str, pd.DataFrame | None]:
    """Each chapter's saved records, or None where the chapter has not saved any; under
    "claims", claims.csv (or None)."""
    found = {chapter: pd.read_csv(directory / f"{chapter}.csv")
             if (directory / f"{chapter}.csv").exists() else None for chapter in CHAPTERS}
    claims = directory / "claims.csv"
    found["claims"] = pd.read_csv(claims) if claims.exists() else None
    return found


def evidence_table(results: dict[str, pd.DataFrame | None]) -> pd.DataFrame:
    """One row per claim: the measured number, what it means, whom it favours, and where
    it came from (device and scale of that chapter's build), or MISSING."""
    rows = []
    for claim in CLAIMS:
        row = {"topic": claim.topic, "question": claim.question, "chapter": claim.chapter}
        if isinstance(claim, FromClaim):
            row.update(_from_claims(claim, results.get("claims")))
        else:
            row.update(_from_records(claim, results.get(claim.chapter)))
        rows.append(row)
    return pd.DataFrame(rows)


def _missing(chapter: str, what: str) -> dict:
    return {"value": float("nan"), "favours": "MISSING",
            "measured_on": f"MISSING: no {what} from {chapter}; build it first"}


def _from_claims(claim: FromClaim, claims: pd.DataFrame | None) -> dict:
    from deepdive.claims import reread_verdict

    rows = None if claims is None else claims[(claims["chapter"] == claim.chapter)
                                              & (claims["claim_id"] == claim.claim_id)]
    if rows is None or rows.empty:
        return {"meaning": f"claim {claim.claim_id}", **_missing(claim.chapter, "claim")}
    saved = rows.iloc[0]
    verdict = reread_verdict(saved)
    favours = claim.favours.get(verdict, "even" if verdict == "tie"
                                else "inconclusive on this build")
    return {"meaning": f"{saved['baseline']} time / {saved['candidate']} time ({verdict}, "
                       f"95% interval [{saved['low']:.3f}, {saved['high']:.3f}])",
            "value": float(saved["ratio"]), "favours": favours,
            "measured_on": f"{saved['device']}, scale={saved['scale']}"}


def _from_records(claim: Claim, frame: pd.DataFrame | None) -> dict:
    if frame is None or frame.empty:
        return {"meaning": claim.meaning, **_missing(claim.chapter, "results")}
    number = claim.measure(frame)
    return {"meaning": claim.meaning, "value": number, "favours": claim.favours(number),
            "measured_on": f"{frame['device'].iat[0]}, scale={frame['scale'].iat[0]}"}
