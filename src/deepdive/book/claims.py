"""Every comparative claim of the book, in one file: `_build/results/claims.csv`.

A chapter decides each comparison with `deepdive.core.verdict` and records it here; its prose
then glues the verdicts back **from the file** (`glue_claims`), recomputing each verdict
from the saved ratio, interval and band, so the words on the page can only say what the
numbers in the file say. Each row also says why its verdict reads as it does (`reason`:
an interval outside or inside the band, one straddling it, or a decided verdict with a
noisy side), the build's band (`build_band`, one per build: `deepdive.book.calibration`) and
the band the rule applied (`tie_band`, widened by an A/A control or a noisy side, as
`widened_by` says). The choosing chapter reads the same file; the methodology page
explains the rule.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from deepdive.book import provenance
from deepdive.book.results import glue as glue_value
from deepdive.core import env
from deepdive.core.env import results_dir
from deepdive.core.timing import Timing
from deepdive.core.verdict import (
    BY_CONTROL,
    DECIDED,
    TieBand,
    classify,
    decide,
    reason,
    straddles,
    widen,
)

__all__ = ["COLUMNS", "EMULATED", "EMULATED_REASON", "FILE_NAME", "OPTIONAL_COLUMNS",
           "PHRASE_FORMS", "Claim", "Claims", "cite", "claims_path", "emulated", "glue_claims",
           "glue_noise", "load_claims", "verdict_parts", "reread_reason", "reread_verdict",
           "verdict_phrase"]

FILE_NAME = "claims.csv"
COLUMNS = ("chapter", "claim_id", "question", "ratio", "low", "high", "verdict", "reason",
           "noisy", "n", "device", "scale", "tie_band", "decision_band", "build_band",
           "widened_by", "baseline", "candidate", "headline", "aliases", "baseline_code",
           "candidate_code", "bf16", "baseline_among", "candidate_among", "baseline_median",
           "candidate_median")
# Columns a saved file may lack: bundles of builds from before they existed.
OPTIONAL_COLUMNS = ("aliases", "baseline_code", "candidate_code", "bf16", "baseline_among",
                    "candidate_among", "baseline_median", "candidate_median")
# A claim with a bf16 side on a device that emulates bf16 (`env.bf16_native`) times the
# emulation, not the framework: it is saved, labelled, and never decided.
EMULATED = "emulated"
EMULATED_REASON = "bf16 is emulated on this device: no speed verdict"
_BF16 = re.compile(r"\bbf16\b", re.IGNORECASE)


@dataclass(frozen=True)
class Claim:
    chapter: str
    claim_id: str
    question: str
    ratio: float
    low: float
    high: float
    verdict: str
    reason: str
    noisy: bool
    n: int
    device: str
    scale: str
    tie_band: float
    decision_band: float
    build_band: float
    widened_by: str
    baseline: str
    candidate: str
    headline: bool
    aliases: str = ""  # other ids of the page for this same comparison, ";"-separated
    # Where each side's timed code was written (`Timing.code`, ";"-joined): the site's
    # tests check that it is the page or the package's shared layers.
    baseline_code: str = ""
    candidate_code: str = ""
    bf16: str = ""  # "native" or EMULATED where a side computes in bf16, else ""
    # The labels a side was the fastest of (`Claims.compare`'s `among`), ";"-joined: a
    # cross-framework claim compares each side's fastest checked variant, and says so.
    baseline_among: str = ""
    candidate_among: str = ""
    # Each side's median (s): the ledger reads which side's time moved between builds.
    baseline_median: float = float("nan")
    candidate_median: float = float("nan")


def claims_path() -> Path:
    return results_dir() / FILE_NAME


class Claims:
    """The claims of one chapter, decided against the build's tie band; `save()` merges
    them into claims.csv, replacing whatever that chapter saved before."""

    def __init__(self, chapter: str, band: TieBand | None = None, device: str | None = None,
                 versions: dict | None = None, bf16_native: bool | None = None):
        """`band` is the build's tie band for the device the timings ran on, by default
        read from the build's calibration (`deepdive.book.calibration.tie_band`). `device`
        labels where the timings ran; by default `env.device_label()` (the GPU when there
        is one): pass `env.cpu_label()` for work that ran on the CPU anyway. `versions`
        names the torch and jax that ran, where this process's are not all of them
        (`deepdive.book.provenance.stamp`). `bf16_native` says whether that device computes
        bf16 in hardware (by default `env.bf16_native`, asked when a bf16 claim comes)."""
        if not chapter or not isinstance(chapter, str):
            raise ValueError(f"chapter must be a non-empty name such as '01_vmap', got {chapter!r}")
        if band is None:
            from deepdive.book import calibration

            on_cpu = device is not None and env.is_cpu_label(device)
            band = calibration.tie_band("cpu" if on_cpu or env.gpu_name() is None else "cuda")
        if not isinstance(band, TieBand):
            raise TypeError(f"band must be a deepdive.core.verdict.TieBand, got {band!r}")
        self.chapter, self.band, self.versions = chapter, band, versions
        self.claims: dict[str, Claim] = {}
        # One measurement, one claim: a second id for a pair already claimed is an alias.
        self.aliases: dict[str, str] = {}
        self._pairs: dict[tuple, str] = {}
        self._device, self._scale = device or env.device_label(), env.scale()
        self._bf16_native = bf16_native

    def compare(self, claim_id: str, question: str, baseline: Timing, candidate: Timing,
                headline: bool = False, control: Timing | None = None,
                band: TieBand | None = None, among: tuple | None = None) -> Claim:
        """Decide `candidate` against `baseline` (interleaved timings) and record it.

        `question` names both sides and the scope (workload, size), e.g. "dot products,
        batch 1024: jax.jit(vmap) against JAX's Python loop". `headline` puts the claim
        in the chapter's "What this build found" box. `control` is a separately built copy
        of the baseline timed in the same rounds (an A/A pair): when its interval reaches
        further from 1 than the build's band, that reach is this claim's band, since
        a workload can spread more than the small ones the band was measured on. `band`
        replaces the build's band for this claim (one widened by an A/A pair of another
        workload timed in the same rounds, `verdict.widen`); it may not be narrower. A
        noisy side widens the band further (`deepdive.core.verdict.decide`).

        `among` = (baseline's rivals, candidate's rivals), each a mapping of label to Timing:
        each side must be the fastest checked variant (lowest median) of its rivals, as a
        cross-framework claim compares each framework at its best; they are saved with the
        claim. A claim with a bf16 side (its question or a label names bf16) on a device
        that emulates bf16 is saved withheld, whatever its interval (`EMULATED_REASON`).
        """
        if not claim_id.isidentifier():
            raise ValueError(f"claim_id must be a Python identifier (it names glue keys), "
                             f"got {claim_id!r}")
        if claim_id in self.claims or claim_id in self.aliases:
            raise ValueError(f"claim {claim_id!r} is already recorded in {self.chapter}")
        pair = (baseline.session, baseline.label, candidate.label)
        if pair in self._pairs:  # the same comparison: one claim, and this id reads it
            existing = self._pairs[pair]
            self.aliases[claim_id] = existing
            names = [a for a in self.claims[existing].aliases.split(";") if a] + [claim_id]
            saved = self.claims[existing]
            rivals = [_fastest_of(side, of) for side, of in zip((baseline, candidate), among or (
                {}, {}), strict=True)]  # a best-of question asked of a named pair
            self.claims[existing] = replace(
                saved, aliases=";".join(names), headline=saved.headline or headline,
                baseline_among=rivals[0] or saved.baseline_among,
                candidate_among=rivals[1] or saved.candidate_among)
            return self.claims[existing]
        if band is not None and (not isinstance(band, TieBand) or band.width < self.band.width):
            raise ValueError(f"band must be a TieBand at least as wide as the build's "
                             f"(±{self.band.width:.3f}), got {band!r}")
        given = band or self.band
        band = given if control is None else widen(given, baseline, control)
        v = decide(baseline, candidate, band)
        rivals = [_fastest_of(side, of) for side, of in zip((baseline, candidate), among or (
            {}, {}), strict=True)]
        bf16 = self._bf16(question, baseline, candidate)
        if bf16 == EMULATED:
            v = replace(v, verdict="withheld")
        widened_by = [BY_CONTROL] if band.width > self.band.width else []
        widened_by += [v.widened_by] if v.widened_by else []
        claim = Claim(self.chapter, claim_id, question, v.ratio, v.low, v.high, v.verdict,
                      v.reason, v.noisy, v.n, self._device, self._scale, v.band,
                      v.decision_band, self.band.width, " and ".join(widened_by),
                      v.baseline, v.candidate, headline, "", ";".join(baseline.code),
                      ";".join(candidate.code), bf16, *rivals, baseline.median,
                      candidate.median)
        if bf16 == EMULATED:
            claim = replace(claim, reason=EMULATED_REASON)
        self.claims[claim_id] = claim
        self._pairs[pair] = claim_id
        return claim

    def compare_best(self, claim_id: str, where: str, timings, torch_labels, jax_labels,
                     headline: bool = False, band: TieBand | None = None) -> Claim:
        """Each framework's fastest checked variant of one computation against the other's:
        of `timings` (label -> Timing, one compare call), the lowest median among
        `torch_labels` and among `jax_labels` (`verdict.best_of`), JAX's as the candidate.
        The question names both, after `where` (the workload and scope), and the claim
        saves the labels each side was the fastest of."""
        from deepdive.core.verdict import best_of

        sides = {"torch": list(torch_labels), "jax": list(jax_labels)}
        fastest = {fw: best_of(timings, labels) for fw, labels in sides.items()}
        among = tuple({label: timings[label] for label in sides[fw]} for fw in sides)
        return self.compare(claim_id, f"{where}: JAX's fastest ({fastest['jax']}) against "
                            f"PyTorch's fastest ({fastest['torch']})", timings[fastest["torch"]],
                            timings[fastest["jax"]], headline=headline, band=band, among=among)

    def _bf16(self, question: str, *sides: Timing) -> str:
        """"native" or EMULATED where the question or a side's label names bf16, else ""."""
        if not any(_BF16.search(text) for text in (question, *(t.label for t in sides))):
            return ""
        if self._bf16_native is None:
            self._bf16_native = env.bf16_native("cpu" if env.is_cpu_label(self._device)
                                                else "cuda")
        return "native" if self._bf16_native else EMULATED

    def mark_headline(self, *claim_ids: str) -> None:
        """Put recorded claims in the chapter's box after the fact: for a headline that
        must first pass a check made later on the page (chapter 2: no verdict the
        allocator regime flips)."""
        unknown = set(claim_ids) - set(self.claims) - set(self.aliases)
        if unknown:
            raise KeyError(f"no claims {sorted(unknown)} recorded in {self.chapter}")
        for claim_id in claim_ids:
            saved = self.aliases.get(claim_id, claim_id)  # an alias marks the claim it reads
            self.claims[saved] = replace(self.claims[saved], headline=True)

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
        rows = [f for f in frames if not f.empty]
        # A chapter with no claims, and none saved by another: the file keeps its header.
        merged = pd.concat(rows, ignore_index=True) if rows else self.frame()
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        merged.reindex(columns=COLUMNS).to_csv(temporary, index=False)
        temporary.replace(path)  # atomic: a reader never sees half a file
        provenance.stamp(self.chapter, self._device, self.versions)
        return path


def _fastest_of(side: Timing, rivals) -> str:
    """The ";"-joined labels `side` was the fastest of; fails where a rival was faster."""
    if not rivals:
        return ""
    timed = {label: t for label, t in rivals.items() if isinstance(t, Timing)}
    if side.label not in timed or timed[side.label] is not side:
        raise ValueError(f"{side.label!r} is not among its rivals {sorted(rivals)}")
    faster = [label for label, t in timed.items() if t.median < side.median]
    if faster:
        raise ValueError(f"{side.label!r} is not its side's fastest checked variant: "
                         f"{faster} took less time (pick it with verdict.best_of)")
    return ";".join(rivals)


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


def _bands(row) -> tuple[TieBand, TieBand]:
    """A saved row's tie band and decision band (rows saved before decision bands existed,
    another build's published evidence, have the one band)."""
    tie = TieBand(float(row["tie_band"]))
    wide = row.get("decision_band") if hasattr(row, "get") else None
    return tie, (TieBand(float(wide)) if wide is not None and wide == wide else tie)


def emulated(row) -> bool:
    """Whether a saved row has a side in bf16 on a device that emulates it: its `bf16`
    column says so, or, in a file saved before that column, its question or a side's label
    says "(emulated)" as the GPT and ViT chapters labelled such steps."""
    value = row.get("bf16") if hasattr(row, "get") else None
    if isinstance(value, str) and value in ("native", EMULATED):
        return value == EMULATED
    named = " ".join(str(row.get(k, "")) for k in ("question", "baseline", "candidate"))
    return bool(_BF16.search(named)) and "(emulated)" in named


def reread_verdict(row) -> str:
    """The verdict for a saved row, recomputed from its numbers and bands with the one rule;
    withheld where a side is emulated bf16."""
    if emulated(row):
        return "withheld"
    return classify(float(row["ratio"]), float(row["low"]), float(row["high"]), *_bands(row))


def reread_reason(row) -> str:
    """Why a saved row's verdict reads as it does, recomputed like its verdict."""
    if emulated(row):
        return EMULATED_REASON
    return reason(reread_verdict(row), _as_bool(row["noisy"]),
                  straddles(float(row["low"]), float(row["high"]), _bands(row)[0]))


def verdict_phrase(row) -> str:
    """The book's one way to say a verdict, the same on every page: the side that took less
    time, its speed-up over the other (at least 1) with the 95% interval, and the band the
    verdict was decided against. Recomputed from the saved numbers (`reread_verdict`):

    - decided: "jax.jit 2.55x faster than torch.compile [2.49, 2.66], band ±8.6%"
    - tie: "jax.jit 1.021x [0.987, 1.043] against torch eager: tie within ±8.6%"
    - withheld: "jax.jit 1.101x [1.020, 1.190] against torch eager: no verdict, the
      interval crosses the band ±8.6%"
    - emulated bf16: "jax.jit · bf16 9.35x [8.90, 9.80] against torch.compile · bf16: no
      verdict, bf16 emulated on this device"

    The band is the one the interval was read against: for a decided verdict the decision
    band (the build's, widened by an A/A control or a noisy side), for a tie the tie band,
    for a withheld one the band whose edge the interval crosses.
    """
    ratio, low, high = (float(row[k]) for k in ("ratio", "low", "high"))
    fast, slow = str(row["candidate"]), str(row["baseline"])
    if ratio < 1:  # the baseline took less time: say it from its side
        fast, slow, ratio, low, high = slow, fast, 1 / ratio, 1 / high, 1 / low
    verdict, (tie, wide) = reread_verdict(row), _bands(row)
    numbers = f"{_digits(ratio)}x [{_digits(low)}, {_digits(high)}]"
    if emulated(row):
        return f"{fast} {numbers} against {slow}: no verdict, bf16 emulated on this device"
    if verdict in DECIDED:
        return f"{fast} {_digits(ratio)}x faster than {slow} [{_digits(low)}, " \
               f"{_digits(high)}], band {_percent(wide)}"
    if verdict == "tie":
        return f"{fast} {numbers} against {slow}: tie within {_percent(tie)}"
    crossed = tie if straddles(low, high, tie) else wide
    return f"{fast} {numbers} against {slow}: no verdict, the interval crosses the band " \
           f"{_percent(crossed)}"


_NUMBERS = r"(?P<ratio>[\d.]+)x \[(?P<low>[\d.]+), (?P<high>[\d.]+)\]"
# The one form, each verdict's shape (`verdict_phrase` writes them; the site's tests read
# every glued verdict with `verdict_parts`).
PHRASE_FORMS = {
    "decided": re.compile(r"(?P<fast>.+?) (?P<ratio>[\d.]+)x faster than (?P<slow>.+) "
                          r"\[(?P<low>[\d.]+), (?P<high>[\d.]+)\], band ±(?P<band>[\d.]+)%"),
    "tie": re.compile(rf"(?P<fast>.+?) {_NUMBERS} against (?P<slow>.+): tie within "
                      r"±(?P<band>[\d.]+)%"),
    "withheld": re.compile(rf"(?P<fast>.+?) {_NUMBERS} against (?P<slow>.+): no verdict, the "
                           r"interval crosses the band ±(?P<band>[\d.]+)%"),
    "emulated": re.compile(rf"(?P<fast>.+?) {_NUMBERS} against (?P<slow>.+): no verdict, bf16 "
                           r"emulated on this device"),
}


def verdict_parts(text: str) -> dict:
    """Read a phrase of `verdict_phrase` back: {"form", "fast", "slow", "ratio", "low",
    "high", "band"} (numbers as floats, the band as a fraction, None for emulated bf16).
    Raises ValueError for text in no form of the book's."""
    for form, pattern in PHRASE_FORMS.items():
        found = pattern.fullmatch(text)
        if found:
            parts = found.groupdict()
            numbers = {k: float(parts.pop(k)) for k in ("ratio", "low", "high")}
            band = parts.pop("band", None)  # an emulated bf16 claim is read against none
            return {"form": form, **parts, **numbers,
                    "band": None if band is None else float(band) / 100}
    raise ValueError(f"not a verdict in the book's one form: {text!r}")


def _percent(band: TieBand) -> str:
    return f"±{100 * band.width:.1f}%"


def _digits(value: float) -> str:
    """Three decimals near 1, where an interval's ends are read against a band of a few
    percent; three significant digits further out."""
    if value < 2:
        return f"{value:.3f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def glue_noise(timings, glue: Callable[[str, object], None] = glue_value) -> dict:
    """Glue a chapter's noise record for its box: `timing_count`, `noisy_count`
    (`Timing.noisy` after all rounds: a median interval reaching beyond 10%), `set_count`
    (compare calls, each a set of variants timed in the same rounds) and `extended_sets`
    (sets that ran more than the standard rounds: when any variant of a set is noisy, all
    of them get more rounds, so that they stay paired). Returns what it glued."""
    from deepdive.core.timing import BLOCKS

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

    For each claim: `<id>` its verdict in the book's one form (`verdict_phrase`) and
    `<id>_verdict` the bare verdict. For the chapter: `claims_found`, the headline claims as
    Markdown bullets for its "What this build found" box (paste with the `glue:md`
    directive), `claims_all` every claim as a table (each with the band it was decided
    against), `tie_band_pct` the build's band in percent, `claims_count`,
    `claims_withheld` and `claims_noisy` (decided or tied with a noisy side). A claim that
    two questions of the page share is glued under each of its ids (`aliases`). Returns
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
        verdict, phrase = reread_verdict(row), verdict_phrase(row)
        put(row["claim_id"], phrase)
        put(f"{row['claim_id']}_verdict", verdict)
        rows.append({"question": row["question"], "verdict": verdict, "result": phrase,
                     "noisy side": "yes" if _as_bool(row["noisy"]) else ""})
        if _as_bool(row["headline"]):
            bullets.append(f"- {row['question']}: {phrase}")
    for claim_id, named in zip(frame["claim_id"], _aliases(frame), strict=True):
        for alias in named:
            for suffix in ("", "_verdict"):
                put(f"{alias}{suffix}", glued[f"{claim_id}{suffix}"])
    put("claims_found", Markdown("\n".join(bullets) or "- (no headline claims)"))
    with pd.option_context("display.max_colwidth", None):  # glue renders it now: whole
        put("claims_all", pd.DataFrame(rows).set_index("question"))  # phrases, no "..."
    band = TieBand(float(frame["build_band"].iat[0]))  # one per build (calibration)
    put("tie_band_pct", 100 * band.width)
    put("tie_band_range", f"[{band.low:.3f}, {band.high:.3f}]")
    verdicts = [row["verdict"] for row in rows]
    put("claims_count", len(rows))
    put("claims_withheld", verdicts.count("withheld"))
    put("claims_noisy", sum(_as_bool(n) and v != "withheld"
                            for n, v in zip(frame["noisy"], verdicts, strict=True)))
    return glued


def cite(chapter: str, claim_id: str, as_key: str | None = None,
         glue: Callable[[str, object], None] = glue_value) -> dict:
    """Glue another chapter's claim for this page's prose, read from claims.csv: a
    comparison two pages make is measured once, by one of them, and cited by the other.
    Glues `<as_key>` (the verdict in the book's one form), `<as_key>_verdict` and
    `<as_key>_question` (default key: `cited_<claim_id>`); returns them. Fails, naming the
    chapter to run, where the cited chapter has not saved the claim."""
    frame = load_claims(chapter)
    by_name = {alias: saved for saved, named in zip(frame["claim_id"], _aliases(frame),
                                                    strict=True) for alias in named}
    by_name |= {saved: saved for saved in frame["claim_id"]}
    if claim_id not in by_name:
        raise KeyError(f"{chapter} saved no claim {claim_id!r}: run {chapter} first")
    row = frame.set_index("claim_id").loc[by_name[claim_id]]
    key = as_key or f"cited_{claim_id}"
    glued = {key: verdict_phrase(row), f"{key}_verdict": reread_verdict(row),
             f"{key}_question": row["question"]}
    for name, value in glued.items():
        glue(name, value)
    return glued


def _aliases(frame) -> list[list[str]]:
    """Each saved row's other ids (files saved before the column existed have none)."""
    if "aliases" not in frame:
        return [[] for _ in range(len(frame))]
    return [[a for a in str(v).split(";") if a and a != "nan"] for v in frame["aliases"]]


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)
