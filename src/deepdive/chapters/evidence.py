"""The evidence behind the choosing chapter's guide, read from this build's saved results.

Only comparisons between the two frameworks are evidence here: a claim that pits two
variants of one framework (vmap against a loop, Inductor against eager) or simulated
devices against one (the distributed chapter's timings) cannot decide a choice of
framework, and stays in its chapter. Each cross-framework claim compares the best variant
each side checked, and its question names them. Every timed row is a claim in
`_build/results/claims.csv`, named by a stable id, so the guide says what the verdict rule
said (faster, slower, tie, or withheld on this build), recomputed from the saved ratio,
interval and band. Its scope comes with it: the claim's question names the workload and
its size, the file the device and the scale. The one untimed row, the memory each device
holds under sharding, is read from the distributed chapter's byte counts, which are exact.
Nothing here holds a measured value, and nothing depends on a size that changes with the
scale: where a claim id holds a size (`best_jax_vs_torch_b{n}`), every size this build
saved is read. A chapter that saved nothing shows up as MISSING, never as a stale number.
Claims an older build saved under another chapter or id are read where they live now
(`deepdive.chapters.claim_map`). Every timed row also carries its ratio one way, PyTorch's
time over JAX's (`torch_over_jax`, with its interval): above 1, JAX took less time.
"""

from __future__ import annotations

import re
import shutil
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

__all__ = ["CHAPTERS", "EVIDENCE", "EVIDENCE_FILES", "FRAMEWORK_NAMES", "HOW_TO_GET", "MISSING",
           "NOT_MEASURED", "ONE_WAY", "PADDING_ALLOWANCE", "PUBLISHED", "WITHHELD", "FromClaim",
           "ShardedMemory", "evidence_table", "fetch", "follow_moves", "load_all",
           "other_build_note", "published_results", "resolve_claim_ids"]

CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "04_gpt_training", "05_vit_training",
            "05_vit_xla", "06_distributed")
MISSING = "MISSING"
# Every timed row's ratio, one way: PyTorch's time over JAX's, with its 95% interval.
ONE_WAY = ("torch_over_jax", "torch_over_jax_low", "torch_over_jax_high")
NOT_MEASURED = "not measured in this build"
WITHHELD = "withheld on this build"
# Sharded state may exceed 1/n of the whole by padding (FSDP2 pads a dimension that n does
# not divide) and by small replicated pieces; beyond this share of 1/n it is not "divided".
PADDING_ALLOWANCE = 0.05


@dataclass(frozen=True)
class FromClaim:
    """A group of evidence rows read from claims.csv, one per claim its patterns name. A
    pattern holding "{n}" (a batch size, which changes with the scale) names every saved
    claim it matches. `favours` maps the verdict of a claim's candidate against its
    baseline ("faster", "slower") to what that verdict favours; a tie favours neither
    ("even"). `absent` is what an `optional` group says where no claim matches (claims
    made only on some builds, e.g. compiled bf16 only on a GPU, or none at all from a
    chapter that can be skipped, the PyTorch/XLA page); a required pattern without a
    match is an error."""

    key: str
    topic: str
    chapter: str
    claim_ids: tuple[str, ...]
    favours: dict = field(hash=False)
    optional: bool = False
    absent: str = ""
    skippable: bool = False  # the chapter may save no claims at all (then `absent`)


@dataclass(frozen=True)
class ShardedMemory:
    """The evidence row for memory under sharding, from the distributed chapter's byte
    counts: the state (parameters + optimizer) the fullest device holds, over one
    process's, per framework, at the largest device count both frameworks ran."""

    key: str
    topic: str
    chapter: str
    sharded: dict = field(hash=False)  # framework -> the sharded strategy's variant name
    single: dict = field(hash=False)  # framework -> the one-process variant name


def _jax_if_faster() -> dict:
    return {"faster": "JAX", "slower": "PyTorch"}


def _torch_if_faster() -> dict:
    return {"faster": "PyTorch", "slower": "JAX"}


WORKLOADS_1 = ("dot", "attention", "grads")  # the vmap chapter's three workloads
_XLA_SKIPPED = ("the PyTorch/XLA page did not run its route in this build (its side "
                "environment was skipped or missing)")
EVIDENCE = (
    FromClaim("vmap_compiled", "vectorization", "01_vmap",
              tuple(f"{w}_jit_vs_compile" for w in WORKLOADS_1), _jax_if_faster()),
    FromClaim("tiny_compiled", "overhead", "02_jit_xla", ("tiny_compile_vs_jit",),
              _torch_if_faster()),
    FromClaim("tiny_eager", "overhead", "02_jit_xla", ("tiny_eager_torch_vs_jax",),
              _torch_if_faster()),
    FromClaim("fusion", "compilation", "02_jit_xla", ("fusion_compile_vs_jit",),
              _torch_if_faster()),
    FromClaim("vit_fp32", "training", "05_vit_training", ("best_jax_vs_torch_b{n}",),
              _jax_if_faster()),
    FromClaim("vit_bf16", "training", "05_vit_training", ("bf16_best_jax_vs_torch",),
              _jax_if_faster(), optional=True,
              absent="no claim of each framework's best bf16 step in this build: the ViT "
                     "page runs torch.compile in bf16 on a GPU only, and its bf16 timings without "
                     "torch.compile stay in the chapter"),
    FromClaim("xla_route", "training", "05_vit_xla",
              ("xla_lazy_vs_jax", "xla_compile_vs_jax", "torchax_vs_jax"),
              _torch_if_faster(), optional=True, skippable=True, absent=_XLA_SKIPPED),
    FromClaim("lm_fp32", "training", "04_gpt_training",
              ("char_fp32_jax_vs_torch", "vocab_fp32_jax_vs_torch"), _jax_if_faster()),
    FromClaim("lm_bf16", "training", "04_gpt_training",
              ("char_bf16_jax_vs_torch", "vocab_bf16_jax_vs_torch"), _jax_if_faster(),
              optional=True,
              absent="no claim of each framework's best bf16 step in this build: the GPT "
                     "page runs torch.compile in bf16 only on a GPU with native bf16, and its bf16 "
                     "comparison of jax.jit with PyTorch eager, without torch.compile, stays "
                     "in the chapter"),
    ShardedMemory("fsdp_memory", "scaling", "06_distributed",
                  sharded={"torch": "fsdp2", "jax": "FSDP, shard_map"},
                  single={"torch": "single", "jax": "one device"}),
)
FRAMEWORK_NAMES = {"torch": "PyTorch", "jax": "JAX"}
# What a build saves for the choosing chapter, and what the published site carries under results/.
EVIDENCE_FILES = ("claims.csv", "provenance.csv", *(f"{c}.csv" for c in CHAPTERS))
PUBLISHED = "published"  # DEEPDIVE_EVIDENCE=published: the site's own results/ folder
HOW_TO_GET = ("To read the evidence published with the site, add a cell after the first one "
              "with `%env DEEPDIVE_EVIDENCE=published` and run the page again from the top "
              "(in Colab: Runtime, Run all). To measure your own, build the book (`make book`) "
              "or run every chapter before this one (with the PyTorch/XLA page) in the same "
              "copy of the book first; in Colab each notebook opened from the site gets its "
              "own runtime, so run them from this one: "
              "`!cd /content/book/notebooks && for n in 0[1-6]_*.ipynb; do jupyter nbconvert "
              "--to notebook --execute --inplace $n; done`.")


def other_build_note(source: str) -> str:
    """The warning the choosing chapter shows above evidence it read from another build."""
    return (f"> **Read from another build.** The evidence and the guide below are the files "
            f"another build saved, fetched from {source}, not measurements of this run: "
            "wherever they say \"this build\", read \"the build that saved them\", named "
            "with its machine in the provenance table.")


def published_results(book: Path) -> str:
    """The address of the evidence published with the site: `html.baseurl` + `results/`."""
    config = (Path(book) / "_config.yml").read_text()
    found = re.search(r"^\s+baseurl:\s*(\S+)\s*$", config, re.MULTILINE)
    if not found:
        raise ValueError(f"{Path(book) / '_config.yml'} names no html.baseurl to read from")
    return found.group(1).rstrip("/") + "/results/"


def fetch(source: str, into: Path) -> Path:
    """Copy the evidence another build saved into `into`, and return it.

    `source` is a folder, or an address (https://, file://) of one such as the published
    site's `results/`. Every file of EVIDENCE_FILES must be there: a partial copy would
    pass off missing chapters as this build's.
    """
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


def load_all(directory: Path) -> dict[str, pd.DataFrame | None]:
    """Each chapter's saved records, or None where the chapter has not saved any; under
    "claims", claims.csv (or None)."""
    found = {chapter: pd.read_csv(directory / f"{chapter}.csv")
             if (directory / f"{chapter}.csv").exists() else None for chapter in CHAPTERS}
    claims = directory / "claims.csv"
    found["claims"] = follow_moves(pd.read_csv(claims)) if claims.exists() else None
    return found


def follow_moves(claims: pd.DataFrame) -> pd.DataFrame:
    """claims.csv with every claim an older build saved under another chapter or id moved
    to where it lives now (`deepdive.chapters.claim_map`); a claim this build saved under
    its new home wins over the moved copy of the same claim."""
    from deepdive.chapters.claim_map import current

    moved = claims.copy()
    homes = [current(c, i) for c, i in zip(claims["chapter"], claims["claim_id"], strict=True)]
    moved["chapter"] = [chapter for chapter, _ in homes]
    moved["claim_id"] = [claim_id for _, claim_id in homes]
    was_moved = (moved["chapter"] != claims["chapter"]) | (moved["claim_id"] != claims["claim_id"])
    order = moved.assign(_moved=was_moved).sort_values("_moved", kind="stable")
    kept = order.drop_duplicates(["chapter", "claim_id"]).drop(columns="_moved")
    return kept.sort_index()


def evidence_table(results: dict[str, pd.DataFrame | None]) -> pd.DataFrame:
    """One row per piece of evidence: its question (with the workload's scope), the verdict
    and what it favours, the numbers behind it, and the device and scale it was measured
    on; or MISSING where its chapter saved nothing."""
    rows = []
    for item in EVIDENCE:
        found = (_from_claims(item, results.get("claims")) if isinstance(item, FromClaim)
                 else [_from_memory(item, results.get(item.chapter))])
        for row in found:
            rows.append({"key": row.pop("key", item.key), "group": item.key,
                         "topic": item.topic, "chapter": item.chapter, **row})
    return pd.DataFrame(rows)


def _empty(status: str, question: str, why: str) -> dict:
    nan = float("nan")  # every column a claim row has, so a build without claims still tabulates
    return {"question": question, "verdict": status, "favours": status, "result": why,
            "ratio": nan, "low": nan, "high": nan, "tie_band": nan, "decision_band": nan,
            "candidate": "", "baseline": "", "device": "", "scale": "",
            **dict.fromkeys(ONE_WAY, nan)}


def resolve_claim_ids(pattern: str, ids) -> list[str]:
    """The id itself if saved; for a pattern with "{n}", every saved id it matches, in
    increasing n."""
    if "{n}" not in pattern:
        return [pattern] if pattern in set(ids) else []
    head, tail = (re.escape(part) for part in pattern.split("{n}"))
    counts = {int(m.group(1)): i for i in ids if (m := re.fullmatch(f"{head}(\\d+){tail}", i))}
    return [counts[n] for n in sorted(counts)]


def _from_claims(item: FromClaim, claims: pd.DataFrame | None) -> list[dict]:
    chapter_rows = None if claims is None else claims[claims["chapter"] == item.chapter]
    if chapter_rows is not None and chapter_rows.empty and item.skippable:
        return [_empty(NOT_MEASURED, f"{item.key}: no claim in this build", item.absent)]
    if chapter_rows is None or chapter_rows.empty:
        return [_empty(MISSING, f"claims {', '.join(item.claim_ids)}",
                       f"{MISSING}: no claims from {item.chapter}; build it first")]
    found = []
    for pattern in item.claim_ids:
        ids = resolve_claim_ids(pattern, chapter_rows["claim_id"])
        if not ids and not item.optional:
            raise KeyError(f"{item.chapter} saved claims but none matching {pattern!r}; its "
                           f"ids are {sorted(chapter_rows['claim_id'])}")
        found += ids
    if not found:
        return [_empty(NOT_MEASURED, f"{item.key}: no claim in this build", item.absent)]
    return [_claim_row(item, chapter_rows[chapter_rows["claim_id"] == claim_id].iloc[0])
            for claim_id in found]


def _claim_row(item: FromClaim, saved) -> dict:
    from deepdive.book.claims import describe, reread_verdict

    verdict = reread_verdict(saved)
    favours = ("even" if verdict == "tie" else WITHHELD if verdict == "withheld"
               else item.favours[verdict])
    ratio, low, high = (float(saved[k]) for k in ("ratio", "low", "high"))
    # the candidate's speed-up over the baseline; turned so it is always PyTorch over JAX
    jax_candidate = item.favours["faster"] == "JAX"
    one_way = (ratio, low, high) if jax_candidate else (1 / ratio, 1 / high, 1 / low)
    return {"key": saved["claim_id"], "question": saved["question"], "verdict": verdict,
            "favours": favours,
            "result": f"{saved['candidate']} against {saved['baseline']}: {verdict}, "
                      f"{describe(saved)} ({_band_used(saved)})",
            "ratio": float(saved["ratio"]), "low": float(saved["low"]),
            "high": float(saved["high"]), "tie_band": float(saved["tie_band"]),
            "decision_band": _decision_band(saved),
            "candidate": saved["candidate"], "baseline": saved["baseline"],
            "device": saved["device"], "scale": saved["scale"],
            **dict(zip(ONE_WAY, one_way, strict=True))}


def _decision_band(saved) -> float:
    """The band the verdict was decided against: claims.csv's decision_band, or the tie
    band where an older claims.csv has none."""
    tie, used = float(saved["tie_band"]), saved.get("decision_band")
    return tie if used is None or used != used else float(used)  # NaN: an older claims.csv


def _band_used(saved) -> str:
    """The band this claim's verdict was decided against: the build's tie band, or the
    wider one a noisy side set (claims.csv's decision_band), said so."""
    tie, used = float(saved["tie_band"]), _decision_band(saved)
    if used > tie:
        return f"band {_band(used)}, widened from {_band(tie)} by a noisy side"
    return f"tie band {_band(tie)}"


def _band(width: float) -> str:
    """The tie band as the interval of ratios it calls a tie, [1/(1+w), 1+w]."""
    return f"[{1 / (1 + width):.3f}, {1 + width:.3f}]"


def _from_memory(item: ShardedMemory, frame: pd.DataFrame | None) -> dict:
    question = "parameters + optimizer state per device, sharded against one process"
    model = None if frame is None else frame[frame["experiment"] == "model"]
    if model is not None and not model.empty:  # the model's scope, as its chapter recorded it
        question = f"{model['variant'].iat[0]}: {question}"
    if frame is None or frame.empty:
        return _empty(MISSING, question, f"{MISSING}: no results from {item.chapter}; "
                                         "build it first")
    rows = frame[frame["experiment"] == "memory_per_device"]
    if rows.empty:
        raise KeyError(f"{item.chapter} saved no memory_per_device records")
    counts = [set(pd.to_numeric(rows[(rows["framework"] == fw)
                                     & (rows["variant"] == variant)]["size"]))
              for fw, variant in item.sharded.items()]
    common = set.intersection(*counts)
    if not common:
        raise KeyError(f"no device count at which every framework ran sharded in "
                       f"{item.chapter}: {dict(zip(item.sharded, counts, strict=True))}")
    n = int(max(common))
    shares = {}
    for framework, variant in item.sharded.items():
        one = rows[(rows["framework"] == framework) & (rows["variant"] == item.single[framework])]
        if one.empty:
            raise KeyError(f"no {item.single[framework]!r} memory record for {framework}")
        sharded = rows[(rows["framework"] == framework) & (rows["variant"] == variant)
                       & (pd.to_numeric(rows["size"]) == n)]
        shares[framework] = float(sharded["value"].iloc[0]) / float(one["value"].iloc[0])
    divided = [fw for fw, share in shares.items() if share * n <= 1 + PADDING_ALLOWANCE]
    favours = ("either framework" if len(divided) == len(shares)
               else " and ".join(FRAMEWORK_NAMES[fw] for fw in divided) if divided
               else "neither")
    result = ", ".join(f"{FRAMEWORK_NAMES[fw]} {item.sharded[fw]} {share:.3f}"
                       for fw, share in shares.items())
    return {"question": f"{question}, on {n} devices", "verdict": "exact byte counts",
            "favours": favours,
            "result": f"share of one process's bytes on the fullest device: {result} "
                      f"(1/{n} = {1 / n:.3f})",
            "ratio": max(shares.values()), "devices": n,
            "device": frame["device"].iat[0], "scale": frame["scale"].iat[0]}
