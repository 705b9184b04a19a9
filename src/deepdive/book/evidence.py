"""The evidence the intro's summary and chapter 7's guide read: every saved claim that
compares PyTorch with JAX, by the need it informs, with its verdict in the book's one form
(`deepdive.book.claims.verdict_phrase`, recomputed from the saved numbers, as on the chapter
that measured it) and its scope (workload and size, device, scale).

Only comparisons of the two frameworks are evidence here: a claim that pits two variants of
one framework, or simulated devices against one, cannot decide a choice of framework, and
stays in its chapter. Claims are read by id; an id holding "{n}" (a batch size, which changes
with the scale) names every saved claim it matches. A chapter that saved nothing reads
MISSING, never a stale number; a claim made only on some builds (compiled bf16 on a GPU, the
PyTorch/XLA page when its side environment ran) reads "not measured". Claims an older build
saved under another chapter or id are read where they live now (`load_all`'s `current`, the
pages' map of moved claims: `deepdive.chapters.claim_map.current`).
The one untimed row, the state each device holds under sharding, comes from the distributed
chapter's exact byte counts. `DEEPDIVE_EVIDENCE` points chapter 7 at another build's files
(`evidence_dir`), and `which_build` says which build measured each chapter.

Shared by the intro and chapter 7 (which glues `which_build`'s stamps for the Reproduce page),
and the extension that publishes the evidence with the site (`EVIDENCE_FILES`).
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

__all__ = ["ACROSS", "CHAPTERS", "COLUMNS", "DEPENDS", "EVIDENCE", "EVIDENCE_FILES", "HERE_ONLY",
           "FRAMEWORK_NAMES", "MISSING", "NOT_MEASURED", "ONE_WAY", "PADDING_ALLOWANCE",
           "PUBLISHED", "FromClaim", "Moves", "ShardedMemory", "across_machines", "data_dir",
           "evidence_dir", "evidence_table", "fetch", "follow_moves", "is_gpu", "largest_model",
           "load_all", "machine", "measured_in", "parameters", "published_results",
           "resolve_claim_ids", "shared", "short_labels", "torch_versions", "which_build"]

CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "04_gpt_training", "05_vit_training",
            "05_vit_xla", "06_distributed")
MISSING = "MISSING"
NOT_MEASURED = "not measured"
# Every timed row's ratio one way, PyTorch's time over JAX's with its 95% interval: the
# figure's axis, never a verdict (those are the phrases).
ONE_WAY = ("torch_over_jax", "torch_over_jax_low", "torch_over_jax_high")
COLUMNS = ("if you need", "workload and size", "verdict", "favours", "device", "scale",
           "chapter", "claim", "question", *ONE_WAY, "band")
# Sharded state may exceed 1/n of the whole by padding (FSDP2 pads a dimension that n does
# not divide) and by small replicated pieces; beyond this share of 1/n it is not "divided".
PADDING_ALLOWANCE = 0.05
FRAMEWORK_NAMES = {"torch": "PyTorch", "jax": "JAX"}
# What a build saves for chapter 7, and what the published site carries under results/.
EVIDENCE_FILES = ("claims.csv", "provenance.csv", *(f"{c}.csv" for c in CHAPTERS))
PUBLISHED = "published"  # DEEPDIVE_EVIDENCE=published: the site's own results/ folder


@dataclass(frozen=True)
class FromClaim:
    """Claims of one chapter that inform one need. `favours` maps the verdict of a claim's
    candidate against its baseline ("faster", "slower") to the framework it favours.
    `optional`: a pattern may match nothing (a claim made only on some builds), and the row
    then reads "not measured", with `absent` saying why; `skippable`: the chapter may save
    no claims at all (the PyTorch/XLA page without its side environment). `part` names the
    group's scope where no claim does (an absent group, a missing chapter)."""

    key: str
    need: str
    chapter: str
    claim_ids: tuple[str, ...]
    favours: dict = field(hash=False)
    part: str = ""
    optional: bool = False
    absent: str = ""
    skippable: bool = False
    # Each side's fastest checked variant of the computation (claims.csv's *_among columns
    # say of which); False for a row whose need names one mode ("op by op") or one framework.
    best: bool = True


@dataclass(frozen=True)
class ShardedMemory:
    """The state (parameters + optimizer) the fullest device holds under each framework's
    sharding, over one process's, at the largest device count both ran: exact byte counts
    from the distributed chapter's records."""

    key: str
    need: str
    chapter: str
    sharded: dict = field(hash=False)  # framework -> the sharded strategy's variant name
    single: dict = field(hash=False)  # framework -> the one-process variant name


JAX_CANDIDATE = {"faster": "JAX", "slower": "PyTorch"}
TORCH_CANDIDATE = {"faster": "PyTorch", "slower": "JAX"}
# The PyTorch/XLA routes against PyTorch eager, their own baseline: not evidence for JAX.
ROUTE_CANDIDATE = {"faster": "the XLA route", "slower": "PyTorch eager"}
VIT = "training a ViT, each framework's fastest checked step of those timed"
GPT = "training a GPT, each framework's fastest checked step of those timed"
EVIDENCE = (
    FromClaim("vmap", "per-example code (vmap, or batched by hand)", "01_vmap",
              ("dot_best_jax_vs_torch", "attention_best_jax_vs_torch",
               "grads_best_jax_vs_torch"), JAX_CANDIDATE),
    FromClaim("tiny", "many tiny operations per step (default compile modes)", "02_jit_xla",
              ("tiny_best_jax_vs_torch",), JAX_CANDIDATE),
    FromClaim("tiny_eager", "many tiny operations per step, op by op", "02_jit_xla",
              ("tiny_eager_torch_vs_jax",), TORCH_CANDIDATE, best=False),
    FromClaim("fusion", "a long elementwise chain on large arrays", "02_jit_xla",
              ("fusion_best_jax_vs_torch",), JAX_CANDIDATE),
    FromClaim("vit_fp32", VIT, "05_vit_training", ("best_jax_vs_torch_b{n}",), JAX_CANDIDATE,
              part="fp32 strict"),
    FromClaim("vit_bf16", VIT, "05_vit_training", ("bf16_best_jax_vs_torch",), JAX_CANDIDATE,
              part="bf16 mixed", optional=True, absent="compiled bf16 on a GPU only"),
    FromClaim("xla_route", "PyTorch code through XLA, against PyTorch eager (same torch)",
              "05_vit_xla", ("xla_lazy_vs_eager", "xla_compile_vs_eager", "torchax_vs_eager"),
              ROUTE_CANDIDATE, part="PyTorch/XLA and torchax routes", optional=True,
              skippable=True, absent="side environment skipped", best=False),
    FromClaim("lm_fp32", GPT, "04_gpt_training",
              ("char_fp32_jax_vs_torch", "vocab_fp32_jax_vs_torch"), JAX_CANDIDATE,
              part="fp32 strict"),
    FromClaim("lm_bf16", GPT, "04_gpt_training",
              ("char_bf16_jax_vs_torch", "vocab_bf16_jax_vs_torch"), JAX_CANDIDATE,
              part="bf16 mixed", optional=True,
              absent="bf16 verdicts need a device with native bf16"),
    ShardedMemory("fsdp_memory", "parameters and optimizer state sharded across devices",
                  "06_distributed", sharded={"torch": "fsdp2", "jax": "FSDP, shard_map"},
                  single={"torch": "single", "jax": "one device"}),
)


def data_dir() -> Path:
    """The dated files shipped with the book (`book/data/`): under the book's root found
    from the working directory, else beside this package's source tree (a kernel started
    elsewhere, as nbconvert does with a copied notebook)."""
    from deepdive.core.env import book_root

    for root in (book_root(), Path(__file__).resolve().parents[3]):
        if (root / "book" / "data").is_dir():
            return root / "book" / "data"
    raise FileNotFoundError(f"no book/data under {book_root()} or beside {__file__}")


def evidence_dir(results: Path, environ=os.environ) -> tuple[Path, str | None]:
    """Where chapter 7 reads its evidence: this build's `results`, or with DEEPDIVE_EVIDENCE
    set (a folder, an address, or "published"), another build's files fetched beside it.
    Returns the folder and the source (None for this build's own)."""
    source = environ.get("DEEPDIVE_EVIDENCE")
    if not source:
        return Path(results), None
    if source == PUBLISHED:
        from deepdive.core.env import book_root

        source = published_results(book_root())
    source = source.rstrip("/") + "/"
    return fetch(source, Path(results).parent / "evidence-read"), source


def published_results(book: Path) -> str:
    """The address of the evidence published with the site: `html.baseurl` + `results/`."""
    config = (Path(book) / "_config.yml").read_text()
    found = re.search(r"^\s+baseurl:\s*(\S+)\s*$", config, re.MULTILINE)
    if not found:
        raise ValueError(f"{Path(book) / '_config.yml'} names no html.baseurl to read from")
    return found.group(1).rstrip("/") + "/results/"


def fetch(source: str, into: Path) -> Path:
    """Copy the evidence another build saved into `into`, and return it. `source` is a
    folder, or an address (https://, file://) of one such as the published site's
    `results/`. Every file of EVIDENCE_FILES must be there: a partial copy would pass off
    missing chapters as this build's."""
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in EVIDENCE_FILES:
        try:
            if "://" in source:
                with urllib.request.urlopen(source.rstrip("/") + "/" + name, timeout=30) as r:
                    (into / name).write_bytes(r.read())
            else:
                shutil.copyfile(Path(source) / name, into / name)
        except (OSError, ValueError) as error:  # URLError and HTTPError are OSErrors
            missing.append(f"{name} ({error})")
    if missing:
        raise FileNotFoundError(f"could not read the saved evidence from {source}: "
                                + "; ".join(missing) + ". DEEPDIVE_EVIDENCE takes a folder, "
                                "an address of one, or 'published' (the site's results/).")
    return into


Moves = Callable[[str, str], tuple[str, str]]  # (chapter, claim id) -> where it lives now


def load_all(directory: Path, current: Moves) -> dict[str, pd.DataFrame | None]:
    """Each chapter's saved records, or None where the chapter has not saved any; under
    "claims", claims.csv with moved claims followed (`follow_moves`), or None."""
    directory = Path(directory)
    found = {chapter: pd.read_csv(directory / f"{chapter}.csv")
             if (directory / f"{chapter}.csv").exists() else None for chapter in CHAPTERS}
    claims = directory / "claims.csv"
    found["claims"] = follow_moves(pd.read_csv(claims), current) if claims.exists() else None
    return found


def follow_moves(claims: pd.DataFrame, current: Moves) -> pd.DataFrame:
    """claims.csv with every claim an older build saved under another chapter or id moved
    to where `current` says it lives now; a claim this build saved under its new home wins
    over the moved copy of the same claim."""
    moved = claims.copy()
    homes = [current(c, i) for c, i in zip(claims["chapter"], claims["claim_id"], strict=True)]
    moved["chapter"] = [chapter for chapter, _ in homes]
    moved["claim_id"] = [claim_id for _, claim_id in homes]
    was_moved = (moved["chapter"] != claims["chapter"]) | (moved["claim_id"] != claims["claim_id"])
    order = moved.assign(_moved=was_moved).sort_values("_moved", kind="stable")
    kept = order.drop_duplicates(["chapter", "claim_id"]).drop(columns="_moved")
    return kept.sort_index()


def resolve_claim_ids(pattern: str, ids) -> list[str]:
    """The id itself if saved; for a pattern with "{n}", every saved id it matches, in
    increasing n."""
    if "{n}" not in pattern:
        return [pattern] if pattern in set(ids) else []
    head, tail = (re.escape(part) for part in pattern.split("{n}"))
    counts = {int(m.group(1)): i for i in ids if (m := re.fullmatch(f"{head}(\\d+){tail}", i))}
    return [counts[n] for n in sorted(counts)]


def evidence_table(found: dict[str, pd.DataFrame | None]) -> pd.DataFrame:
    """One row per claim of EVIDENCE this build saved (COLUMNS), in EVIDENCE's order, or one
    row per group where its chapter saved nothing (MISSING) or the build did not make it
    (not measured). `found` is what `load_all` returns."""
    rows = []
    for item in EVIDENCE:
        if isinstance(item, FromClaim):
            rows += _from_claims(item, found.get("claims"))
        else:
            rows.append(_from_memory(item, found.get(item.chapter)))
    return pd.DataFrame(rows, columns=COLUMNS)


DEPENDS = "depends on the CPU"
NO_VERDICT_HERE = "no verdict on this machine"  # the others' verdicts, for context only
HERE_ONLY = "measured here only"  # no committed build of these pins made the claim
REBUILDS_DIFFER = "differs between builds on this CPU"  # run to run, or commit to commit
ACROSS = "across CPUs"  # the column `across_machines` adds


def across_machines(table: pd.DataFrame, claims: pd.DataFrame | None, folders,
                    follow: Moves) -> pd.DataFrame:
    """`table` (`evidence_table`) with the column ACROSS: for each measured row, whether its
    verdict holds on every machine the committed bundles (`folders`) ran it on with this
    build's torch and jax (`deepdive.book.agreement`): "same on N machines", HERE_ONLY,
    DEPENDS followed by each machine's verdict named by the side it favours (and then the
    row favours DEPENDS, not a framework), or, where this build withheld its verdict,
    NO_VERDICT_HERE followed by the same. Advice (the
    intro's, the guide's) rests only on rows that do not read DEPENDS."""
    from deepdive.book.agreement import agreement

    table = table.copy()
    table[ACROSS] = ""
    sides = {item.need: item.favours for item in EVIDENCE if isinstance(item, FromClaim)}
    if claims is None or claims.empty:
        return table
    found = agreement(claims, list(folders), follow=follow).set_index(["chapter", "claim_id"])
    for i, row in table.iterrows():
        key = (row["chapter"], row["claim"])
        if key not in found.index:
            continue
        seen = found.loc[key]
        n = int(seen["machines"])
        each = _by_winner(seen["verdicts"], sides.get(row["if you need"], {}))
        # builds on one CPU that disagree (each named by its bundle) say nothing of the CPU
        table.at[i, ACROSS] = (f"{REBUILDS_DIFFER}: {each}" if not bool(seen["agreed"])
                               and "[" in each else
                               HERE_ONLY if n == 1 else
                               f"same on {n} machines" if bool(seen["agreed"]) else
                               f"{NO_VERDICT_HERE}: {each}" if row["favours"] == "no verdict"
                               else f"{DEPENDS}: {each}")
        if table.at[i, ACROSS].startswith(DEPENDS):  # no side to favour: no advice
            table.at[i, "favours"] = DEPENDS
    return table


def _by_winner(verdicts: str, favours: dict) -> str:
    """"Intel Xeon (2 cores): faster; ..." with each verdict named by the side it favours
    ("Intel Xeon (2 cores): PyTorch; AMD EPYC (2 cores): tie")."""
    names = {**favours, "tie": "tie", "withheld": "no verdict"}
    return re.sub(r": (faster|slower|tie|withheld)(?=;|$)",
                  lambda m: f": {names.get(m.group(1), m.group(1))}", verdicts)


def _unread(item, status: str, why: str = "") -> dict:
    """A row that holds no measurement: MISSING or not measured, and why."""
    return {"if you need": item.need, "workload and size": getattr(item, "part", ""),
            "verdict": f"{status} ({why})" if why else status, "favours": status,
            "device": "", "scale": "", "chapter": item.chapter,
            "claim": ", ".join(getattr(item, "claim_ids", ())), "question": ""}


def _from_claims(item: FromClaim, claims: pd.DataFrame | None) -> list[dict]:
    mine = None if claims is None else claims[claims["chapter"] == item.chapter]
    if mine is not None and mine.empty and item.skippable:
        return [_unread(item, NOT_MEASURED, item.absent)]
    if mine is None or mine.empty:
        return [_unread(item, MISSING)]
    ids, saved = [], _saved_ids(mine)
    for pattern in item.claim_ids:
        matched = [saved[i] for i in resolve_claim_ids(pattern, saved)]
        if not matched and not item.optional:
            raise KeyError(f"{item.chapter} saved claims but none matching {pattern!r}; its "
                           f"ids are {sorted(mine['claim_id'])}")
        ids += matched
    ids = list(dict.fromkeys(ids))  # two names of one claim: one row
    if not ids:
        return [_unread(item, NOT_MEASURED, item.absent)]
    by_id = mine.set_index("claim_id")
    return [_claim_row(item, claim_id, by_id.loc[claim_id]) for claim_id in ids]


def _saved_ids(claims: pd.DataFrame) -> dict[str, str]:
    """Every id a chapter's claims answer to, its aliases included, -> the saved row's id."""
    found = {saved: saved for saved in claims["claim_id"]}
    if "aliases" in claims:
        for saved, named in zip(claims["claim_id"], claims["aliases"], strict=True):
            found |= {alias: saved for alias in str(named).split(";") if alias and alias != "nan"}
    return found


def _claim_row(item: FromClaim, claim_id: str, saved) -> dict:
    from deepdive.book.claims import reread_verdict, verdict_phrase

    verdict = reread_verdict(saved)
    favours = {"tie": "tie", "withheld": "no verdict"}.get(verdict) or item.favours[verdict]
    ratio, low, high = (float(saved[k]) for k in ("ratio", "low", "high"))
    # the candidate's speed-up over the baseline, turned so that it reads PyTorch over JAX;
    # none for a row that sets PyTorch against PyTorch (the XLA routes)
    one_way = ((ratio, low, high) if item.favours["faster"] == "JAX" else
               (1 / ratio, 1 / high, 1 / low) if item.favours["faster"] == "PyTorch" else
               (float("nan"),) * 3)
    return {"if you need": item.need, "workload and size": saved["question"].split(": ", 1)[0],
            "verdict": verdict_phrase(saved), "favours": favours, "device": saved["device"],
            "scale": saved["scale"], "chapter": item.chapter, "claim": claim_id,
            "question": saved["question"], **dict(zip(ONE_WAY, one_way, strict=True)),
            "band": _decision_band(saved)}


def _decision_band(saved) -> float:
    """The band a decision had to clear: claims.csv's decision_band, or the tie band where
    an older claims.csv has none."""
    wide = saved.get("decision_band")
    return float(saved["tie_band"]) if wide is None or wide != wide else float(wide)


def _from_memory(item: ShardedMemory, frame: pd.DataFrame | None) -> dict:
    if frame is None or frame.empty:
        return _unread(item, MISSING)
    rows = frame[frame["experiment"] == "memory_per_device"]
    if rows.empty:
        raise KeyError(f"{item.chapter} saved no memory_per_device records")

    def of(framework, variant):
        return rows[(rows["framework"] == framework) & (rows["variant"] == variant)]

    counts = [set(pd.to_numeric(of(fw, variant)["size"])) for fw, variant in item.sharded.items()]
    common = set.intersection(*counts)
    if not common:
        raise KeyError(f"no device count at which every framework ran sharded in "
                       f"{item.chapter}: {dict(zip(item.sharded, counts, strict=True))}")
    n = int(max(common))
    shares = {}
    for framework, variant in item.sharded.items():
        one = of(framework, item.single[framework])
        if one.empty:
            raise KeyError(f"no {item.single[framework]!r} memory record for {framework}")
        sharded = of(framework, variant)
        sharded = sharded[pd.to_numeric(sharded["size"]) == n]
        shares[framework] = float(sharded["value"].iloc[0]) / float(one["value"].iloc[0])
    divided = [FRAMEWORK_NAMES[fw] for fw, share in shares.items()
               if share * n <= 1 + PADDING_ALLOWANCE]
    favours = ("either framework" if len(divided) == len(shares)
               else " and ".join(divided) if divided else "neither")
    model = frame.loc[frame["experiment"] == "model", "variant"]
    held = ", ".join(f"{FRAMEWORK_NAMES[fw]} {item.sharded[fw]} {share:.3f}"
                     for fw, share in shares.items())
    return {"if you need": item.need,
            "workload and size": f"{model.iat[0] + ', ' if len(model) else ''}{n} devices",
            "verdict": f"{held} (1/{n} = {1 / n:.3f})",  # the fullest device over one process
            "favours": favours, "device": frame["device"].iat[0],
            "scale": frame["scale"].iat[0], "chapter": item.chapter,
            "claim": "memory_per_device", "question": "exact byte counts"}


_PINNED = re.compile(r"\((?:\d+ of )?(\d+ cores?)\)$")  # "(1 of 2 cores)": pinned to one of two
_PARAMETERS = re.compile(r"(\d[\d,]*(?:\.\d+)?)(M|B)? parameters")
_TOP_LEVEL_COMMA = re.compile(r", (?![^()]*\))")  # ", " outside parentheses
_PRECISION = re.compile(r"\b(?:fp32|bf16|fp16|tf32)\b", re.IGNORECASE)  # a label keeps these


def machine(device) -> str:
    """The machine behind a row's device label: a CPU label names the cores the run was
    pinned to ("Xeon (1 of 2 cores)"), the machine has all of them ("Xeon (2 cores)"); a
    GPU's name stays as it is. An empty or absent label reads ""."""
    return _PINNED.sub(r"(\1)", device) if isinstance(device, str) else ""


def is_gpu(device) -> bool:
    """Whether a row's device label names a GPU: a measured row whose label is not a CPU's."""
    from deepdive.core.env import is_cpu_label

    return isinstance(device, str) and bool(device) and not is_cpu_label(device)


def shared(values) -> str | None:
    """The one value all non-empty `values` share, or None where they differ or none is set."""
    found = {v for v in values if isinstance(v, str) and v}
    return found.pop() if len(found) == 1 else None


def parameters(workload: str) -> float | None:
    """The parameter count a workload names ("108,106 parameters", "0.54M parameters")."""
    found = _PARAMETERS.search(str(workload))
    if not found:
        return None
    count = float(found.group(1).replace(",", ""))
    return count * {"M": 1e6, "B": 1e9}.get(found.group(2), 1)


def largest_model(table: pd.DataFrame) -> str:
    """The largest model a measured row of `evidence_table` names, in the row's own words
    ("0.54M parameters"), or MISSING where no row names a parameter count."""
    named = {text: parameters(text) for text in table[COLUMNS[1]] if parameters(text)}
    if not named:
        return MISSING
    return _PARAMETERS.search(max(named, key=named.get)).group(0)


def short_labels(rows: pd.DataFrame) -> list[str]:
    """What tells apart the rows of `evidence_table` that share a need: each measured row's
    workload without the comma-separated parts all of them share, but for the precision
    ("batch 8, fp32 strict"), or where their workloads are the same, the sides its question
    names without the parts they share. A row alone, or one that holds no measurement,
    keeps its workload."""
    timed = [bool(q) and ": " in q for q in rows["question"].fillna("")]
    scopes = list(rows[COLUMNS[1]].fillna(""))
    sides = [str(q).partition(": ")[2] for q in rows["question"].fillna("")]
    pick = [i for i, t in enumerate(timed) if t]
    texts = [scopes[i] for i in pick]
    if len(set(texts)) < len(texts):  # one workload, several pairs of sides
        texts = [sides[i] for i in pick]
    parts = [_TOP_LEVEL_COMMA.split(text) for text in texts]
    common = set.intersection(*map(set, parts)) if len(parts) > 1 else set()
    common = {part for part in common if not _PRECISION.search(part)}
    labels = list(scopes)
    for i, mine, whole in zip(pick, parts, texts, strict=True):
        labels[i] = ", ".join(p for p in mine if p not in common) or whole
    return labels


def torch_versions(stamps: pd.DataFrame) -> tuple[str, str]:
    """(the torch the pages ran, the torch the PyTorch/XLA routes ran in their worker) from
    the pages' stamps: the XLA page stamps "2.9.0 (routes, in the worker); 2.15.0 (this
    page)". NOT_MEASURED for the routes where no page stamps a worker's version."""
    pages, routes = set(), set()
    for value in stamps["torch"].dropna():
        for part in str(value).split(";"):
            version = part.strip().split(" ")[0].split("+")[0]
            (routes if "worker" in part else pages).add(version)
    return " and ".join(sorted(pages)) or MISSING, " and ".join(sorted(routes)) or NOT_MEASURED


def measured_in(stamp, this_build: str, this_commit: str, source: str | None) -> str:
    """Which build measured a chapter, from its provenance stamp: a short label."""
    from deepdive.book.provenance import OUTSIDE_BUILD, UNCOMMITTED

    if source:
        return "another build (DEEPDIVE_EVIDENCE)"
    if stamp["build_id"] == OUTSIDE_BUILD:
        return "a run outside make book"
    if stamp["build_id"] == this_build:
        return "this build"
    same = stamp["commit"].removesuffix(UNCOMMITTED) == this_commit.removesuffix(UNCOMMITTED)
    return "an earlier build (cached)" if same else "earlier build, other commit (cached)"


def which_build(directory: Path, source: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per chapter the evidence reads, every stamp saved): the build, commit, time,
    machine and versions that measured each, and which build that was ("measured in"); a
    chapter with no stamp reads "MISSING: not run"."""
    from deepdive.book import provenance

    this_build, this_commit = provenance.build_id(), provenance.commit()
    stamps = provenance.load(directory)
    if stamps is None:
        stamps = pd.DataFrame(columns=list(provenance.COLUMNS))
    stamps = stamps.fillna("not recorded (older stamp)")
    stamps["measured in"] = [measured_in(row, this_build, this_commit, source)
                             for _, row in stamps.iterrows()]
    read = pd.DataFrame({"chapter": list(CHAPTERS)}).merge(stamps, how="left")
    read["measured in"] = read["measured in"].astype(object).fillna(f"{MISSING}: not run")
    return read, stamps
