"""Every comparative claim of the book, in one file: `_build/results/claims.csv`.

A chapter decides each comparison with `deepdive.verdict` and records it here; its prose
then glues the verdicts back **from the file** (`glue_claims`), recomputing each verdict
from the saved ratio, interval, noise flag and tie band, so the words on the page can
only say what the numbers in the file say. Chapter 6 reads the same file. Chapter 1
introduces it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from deepdive import env, provenance
from deepdive.results import glue as glue_value
from deepdive.results import results_dir
from deepdive.timing import Timing
from deepdive.verdict import TieBand, classify, decide, widen

FILE_NAME = "claims.csv"
COLUMNS = ("chapter", "claim_id", "question", "ratio", "low", "high", "verdict", "noisy",
           "n", "device", "scale", "tie_band", "baseline", "candidate", "headline")
# How a verdict reads in "<candidate> was ___ <baseline>".
PHRASES = {"faster": "faster than", "slower": "slower than", "tie": "tied with",
           "inconclusive": "inconclusive on this build against"}


@dataclass(frozen=True)
class Claim:
    chapter: str
    claim_id: str
    question: str
    ratio: float
    low: float
    high: float
    verdict: str
    noisy: bool
    n: int
    device: str
    scale: str
    tie_band: float
    baseline: str
    candidate: str
    headline: bool


def claims_path() -> Path:
    return results_dir() / FILE_NAME


class Claims:
    """The claims of one chapter, decided against one tie band; `save()` merges them into
    claims.csv, replacing whatever that chapter saved before."""

    def __init__(self, chapter: str, band: TieBand, device: str | None = None):
        """`device` labels where the timings ran; by default `env.device_label()` (the GPU
        when there is one): pass `env.cpu_label()` for work that ran on the CPU anyway."""
        if not chapter or not isinstance(chapter, str):
            raise ValueError(f"chapter must be a non-empty name such as '01_vmap', got {chapter!r}")
        if not isinstance(band, TieBand):
            raise TypeError(f"band must be a deepdive.verdict.TieBand, got {band!r}")
        self.chapter, self.band = chapter, band
        self.claims: dict[str, Claim] = {}
        self._device, self._scale = device or env.device_label(), env.scale()

    def compare(self, claim_id: str, question: str, baseline: Timing, candidate: Timing,
                headline: bool = False, control: Timing | None = None,
                band: TieBand | None = None) -> Claim:
        """Decide `candidate` against `baseline` (interleaved timings) and record it.

        `question` names both sides and the scope (workload, size), e.g. "dot products,
        batch 1024: jax.jit(vmap) against JAX's Python loop". `headline` puts the claim
        in the chapter's "What this build found" box. `control` is a separately built copy
        of the baseline timed in the same rounds (an A/A pair): when its interval reaches
        further from 1 than the chapter's band, that reach is this claim's band, since
        a workload can spread more than the small ones the band was measured on. `band`
        replaces the chapter's band for this claim (one widened by an A/A pair of another
        workload timed in the same rounds, `verdict.widen`); it may not be narrower.
        """
        if not claim_id.isidentifier():
            raise ValueError(f"claim_id must be a Python identifier (it names glue keys), "
                             f"got {claim_id!r}")
        if claim_id in self.claims:
            raise ValueError(f"claim {claim_id!r} is already recorded in {self.chapter}")
        if band is not None and (not isinstance(band, TieBand) or band.width < self.band.width):
            raise ValueError(f"band must be a TieBand at least as wide as the chapter's "
                             f"(±{self.band.width:.3f}), got {band!r}")
        band = band or self.band
        band = band if control is None else widen(band, baseline, control)
        v = decide(baseline, candidate, band)
        claim = Claim(self.chapter, claim_id, question, v.ratio, v.low, v.high, v.verdict,
                      v.noisy, v.n, self._device, self._scale, band.width, v.baseline,
                      v.candidate, headline)
        self.claims[claim_id] = claim
        return claim

    def frame(self):
        import pandas as pd

        return pd.DataFrame([asdict(c) for c in self.claims.values()], columns=COLUMNS)

    def save(self) -> Path:
        """Merge into claims.csv: this chapter's rows replaced, other chapters' kept."""
        import pandas as pd

        path = claims_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        frames = [self.frame()]
        if path.exists():
            kept = pd.read_csv(path)
            frames.insert(0, kept[kept["chapter"] != self.chapter])
        merged = pd.concat([f for f in frames if not f.empty], ignore_index=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        merged.reindex(columns=COLUMNS).to_csv(temporary, index=False)
        temporary.replace(path)  # atomic: a reader never sees half a file
        provenance.stamp(self.chapter, self._device)
        return path


def load_claims(chapter: str | None = None):
    """claims.csv as a DataFrame (one chapter's rows, or all); a clear error when absent."""
    import pandas as pd

    path = claims_path()
    if not path.exists():
        raise FileNotFoundError(f"no claims at {path}: build the chapters first (make book) "
                                "or run their notebooks")
    frame = pd.read_csv(path)
    if chapter is not None:
        frame = frame[frame["chapter"] == chapter].reset_index(drop=True)
        if frame.empty:
            raise KeyError(f"claims.csv holds no claims of chapter {chapter!r}: run it first")
    return frame


def reread_verdict(row) -> str:
    """The verdict for a saved row, recomputed from its numbers with the one rule."""
    return classify(float(row["ratio"]), float(row["low"]), float(row["high"]),
                    _as_bool(row["noisy"]), TieBand(float(row["tie_band"])))


def describe(row) -> str:
    """'1.021x [1.012, 1.043]' (speed-up of candidate over baseline, 95% interval), and
    a note when a side was noisy. Three decimals below 10x, so an interval shown against
    a band of a few percent shows where its ends lie; one decimal up to 1000x; none above."""
    ratio, low, high = (_ratio_text(float(row[k])) for k in ("ratio", "low", "high"))
    text = f"{ratio}x [{low}, {high}]"
    return text + ", noisy" if _as_bool(row["noisy"]) else text


def _ratio_text(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def glue_noise(timings, glue: Callable[[str, object], None] = glue_value) -> dict:
    """Glue a chapter's noise record for its box: `timing_count`, `noisy_count` (IQR above
    10% of the median after all rounds), `set_count` (compare calls, each a set of
    variants timed in the same rounds) and `extended_sets` (sets that ran more than the
    standard rounds: when any variant of a set is noisy, all of them get more rounds, so
    that they stay paired). Returns what it glued."""
    from deepdive.timing import BLOCKS

    sessions = {t.session: t.n for t in timings}
    counts = {"timing_count": len(timings),
              "noisy_count": sum(t.noisy for t in timings),
              "set_count": len(sessions),
              "extended_sets": sum(n > BLOCKS for n in sessions.values()),
              "extended_count": sum(t.n > BLOCKS for t in timings)}
    for key, value in counts.items():
        glue(key, value)
    return counts


def glue_claims(chapter: str, glue: Callable[[str, object], None] = glue_value) -> dict:
    """Read `chapter`'s claims back from claims.csv and glue them for the prose.

    For each claim: `<id>` the phrase ("faster than", "tied with", ...), `<id>_verdict`
    the bare verdict, `<id>_ratio` its numbers. For the chapter: `claims_found`, the
    headline claims as Markdown bullets for its "What this build found" box (paste with
    the `glue:md` directive), `claims_all` every claim as a table, `tie_band_pct` the
    chapter's band in percent (the narrowest of its claims': controls only widen). Returns
    what it glued, by key.
    """
    import pandas as pd
    from IPython.display import Markdown

    frame = load_claims(chapter)
    glued: dict[str, object] = {}

    def put(key, value):
        glue(key, value)
        glued[key] = value

    rows, bullets = [], []
    for _, row in frame.iterrows():
        verdict = reread_verdict(row)
        put(row["claim_id"], PHRASES[verdict])
        put(f"{row['claim_id']}_verdict", verdict)
        put(f"{row['claim_id']}_ratio", describe(row))
        rows.append({"question": row["question"], "verdict": verdict,
                     "speed-up [95% interval]": describe(row)})
        if _as_bool(row["headline"]):
            bullets.append(f"- {row['question']}: **{verdict}**, {describe(row)}")
    put("claims_found", Markdown("\n".join(bullets) or "- (no headline claims)"))
    put("claims_all", pd.DataFrame(rows).set_index("question"))
    # The chapter's own band: a claim with an A/A control may have widened only its own.
    band = TieBand(float(frame["tie_band"].min()))
    put("tie_band_pct", 100 * band.width)
    put("tie_band_range", f"[{band.low:.3f}, {band.high:.3f}]")
    return glued


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)
