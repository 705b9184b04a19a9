"""The ledger page's "Releases over time": what every measured jax and torch release did to the
book's reduced set of claims, read back from `book/data/releases/`.

`make releases` runs each jax release with torch held at the book's pin (the *jax sweep*)
and each torch release with jax held (the *torch sweep*), each in a throwaway environment,
and commits one bundle per run that finished (`deepdive.book.bundles`' format, its
build.json naming its `sweep` and `release`) beside `runs.csv`, one row per attempt. The
held point (the book's own pins) is one run, in the jax sweep's rows; the torch sweep
places it at its torch version. `load` reads and validates all of it; `points`, `changes`
and `correctness` lay it out per release; `plot_family` draws a family of claims across
both sweeps; the sentence builders read the outputs for the page's prose. Between two
consecutive releases of a sweep each shared claim's ratio of ratios is decided by the
ledger's rule (`deepdive.chapters.ledger.release_changes`), never re-implemented here.
Nothing here imports torch or jax.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pandas as pd
from packaging.version import InvalidVersion, Version

from deepdive.book import bundles as bundle_files
from deepdive.book import claims, results
from deepdive.book.bundles import Bundle, BundleError
from deepdive.chapters.ledger import Column, release_changes
from deepdive.core import env
from deepdive.releases.matrix import CONTROL_FOLDER, RUN_COLUMNS, STATUSES, SWEEPS, releases_dir

__all__ = ["BOOK_CLAIM", "CHAPTER", "FAMILIES", "FORI_CLAIM", "FRAMEWORKS", "ISSUE_39103",
           "KNOWN_ISSUES", "PLAIN", "RUNS_FILE", "History", "Point", "changes", "control_changes",
           "control_reach", "control_table", "correctness", "direction", "drift", "drift_text",
           "framework_of", "headline_sentence", "load", "moves_sentence",
           "plot_family", "plot_fori", "points", "regressions", "replicated", "runs_sentence",
           "runs_table", "side_everywhere", "summary_sentence", "upgrade_notes",
           "wrong_result_sentence"]

RUNS_FILE = "runs.csv"
CHAPTER = "releases"  # the chapter of every release bundle's claims and records
FAMILIES: dict[str, tuple[str, ...]] = {
    "vmap (chapter 1)": ("release_dot_jit_vmap_vs_torch_vmap",
                         "release_attention_jit_vmap_vs_torch_vmap", "release_dot_fori_vs_vmap"),
    "jit and fusion (chapter 2)": ("release_chain_jit_vs_eager", "release_chain_compile_vs_eager",
                                   "release_chain_jit_vs_compile"),
    "GPT training step (chapter 4)": ("release_gpt_jax_vs_torch_eager",
                                      "release_gpt_jax_vs_compile"),
    "probes": ("release_fori_write_40k_vs_4x10k",),
}
FORI_CLAIM = "release_fori_write_40k_vs_4x10k"
ISSUE_39103 = "jax-ml/jax#39103"  # the records' experiment, and the issue it reproduces
_FORI_EXPERIMENT = "fori_loop write"
_JIT_COLUMN = "#39103 jit equals eager"
_FORI_SLOWDOWN = ("jax-ml/jax#40101: since jaxlib 0.11.1 a small dynamic_update_slice in "
                  "fori_loop/scan costs the whole buffer per iteration on the CPU")
# (package, release, claim id or "correctness") -> the upstream reference a row is annotated with
KNOWN_ISSUES: dict[tuple[str, str, str], str] = {
    ("jax", "0.10.2", "correctness"): ISSUE_39103,
    ("jax", "0.11.1", FORI_CLAIM): _FORI_SLOWDOWN,
}
# each claim as the page's prose names it
PLAIN = {"release_dot_jit_vmap_vs_torch_vmap": "dot products, jax.jit(vmap) against "
                                               "torch.func.vmap",
         "release_attention_jit_vmap_vs_torch_vmap": "per-example attention, jax.jit(vmap) "
                                                     "against torch.func.vmap",
         "release_dot_fori_vs_vmap": "dot products, a jitted .at[].set fori_loop against "
                                     "jax.jit(vmap)",
         "release_chain_jit_vs_eager": "the elementwise chain, jax.jit against op by op",
         "release_chain_compile_vs_eager": "the elementwise chain, torch.compile against eager",
         "release_chain_jit_vs_compile": "the elementwise chain, jax.jit against torch.compile",
         "release_gpt_jax_vs_torch_eager": "the GPT step, jax.jit against PyTorch eager",
         "release_gpt_jax_vs_compile": "the GPT step, jax.jit against torch.compile",
         FORI_CLAIM: "the jitted fori_loop write x.at[i].set(x[i-1]*0.5+1.0)"}
_WORKLOAD_PLAIN = {"dot": "dot products (chapter 1)", "attention": "per-example attention "
                   "(chapter 1)", "chain": "the elementwise chain (chapter 2)",
                   "gpt": "the GPT step (chapter 4)"}
# the book's own claim that is the same measurement (chapter 1's small sizes)
BOOK_CLAIM = {"release_dot_fori_vs_vmap": "dot_fori_vs_vmap_256"}
FRAMEWORKS = {"jax": "JAX", "torch": "PyTorch"}  # the framework each sweep moves
_OTHER = {"jax": "torch", "torch": "jax"}
_EMPTY = ("No release bundles are committed under book/data/releases/ yet: `make releases` "
          "runs every jax and torch release in a throwaway environment and commits one bundle "
          "per release there, with runs.csv naming every attempt (the README says how).")


@dataclass(frozen=True, eq=False)  # holds DataFrames: no == between points
class Point:
    """One release of one sweep: its runs.csv row (the held point's is the jax sweep's) and
    its bundle, None where the attempt wrote none."""

    sweep: str
    release: str
    run: dict
    bundle: Bundle | None

    @property
    def measured(self) -> bool:
        return self.bundle is not None


@dataclass(frozen=True, eq=False)
class History:
    """The committed release runs (`load`): runs.csv as read, and per sweep each release's
    latest attempt, oldest release first; `held` names per sweep the other package's
    version it held ("" where no run of the sweep installed it)."""

    root: Path
    runs: pd.DataFrame
    sweeps: dict[str, tuple[Point, ...]]
    held: dict[str, str]
    control: Point | None = None  # a second run of the held point (`CONTROL_FOLDER`)

    @property
    def empty(self) -> bool:
        return not any(p.measured for points_ in self.sweeps.values() for p in points_)


# ---- reading and validating ---------------------------------------------------------------

def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(env.book_root()))
    except ValueError:
        return str(path)


def _public(version: str) -> str:
    """A version without its local label: torch's CPU wheels are "2.15.0+cpu"."""
    return str(version).split("+")[0]


def _version(text: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion as error:
        raise BundleError(f"{where}: {text!r} is not a version") from error


def _read_runs(file: Path) -> pd.DataFrame:
    where = _shown(file)
    try:
        runs = pd.read_csv(file, dtype=str, keep_default_na=False)
    except (ValueError, OSError) as error:  # pandas' EmptyDataError and ParserError
        raise BundleError(f"{where}: not a readable CSV ({error})") from error
    for column in RUN_COLUMNS:
        if column not in runs.columns:
            raise BundleError(f"{where}: missing column {column!r}")
    for row, run in enumerate(runs.to_dict("records"), start=1):
        for column, accepted in (("sweep", SWEEPS), ("status", STATUSES)):
            if run[column] not in accepted:
                raise BundleError(f"{where}: unknown {column} {run[column]!r} in column "
                                  f"{column!r} (row {row}); accepted: {', '.join(accepted)}")
        _version(run["release"], f"{where}: column 'release' (row {row})")
        for column in ("install_s", "run_s"):
            try:
                float(run[column] or "nan")
            except ValueError as error:
                raise BundleError(f"{where}: column {column!r} must be seconds, got "
                                  f"{run[column]!r} (row {row})") from error
        try:
            _dt.date.fromisoformat(run["date"])
        except ValueError as error:
            raise BundleError(f"{where}: column 'date' must be YYYY-MM-DD, got {run['date']!r} "
                              f"(row {row})") from error
        if run["status"] == "ok" and not run["bundle"]:
            raise BundleError(f"{where}: {run['sweep']} {run['release']} is ok but names no "
                              f"bundle in column 'bundle' (row {row})")
        if run["bundle"] and not (file.parent / run["bundle"]).is_dir():
            raise BundleError(f"{where}: the bundle of {run['sweep']} {run['release']} "
                              f"(row {row}), {_shown(file.parent / run['bundle'])}, is missing")
    for column in ("install_s", "run_s"):
        runs[column] = pd.to_numeric(runs[column].replace("", math.nan))
    return runs


def _held(runs: pd.DataFrame, sweep: str, where: str) -> str:
    """The other package's version every run of `sweep` installed ("" where none did)."""
    other = _OTHER[sweep]
    installed = [_public(v) for v in runs.loc[runs["sweep"] == sweep, other] if v]
    found = sorted(set(installed), key=lambda v: _version(v, f"{where}: column {other!r}"))
    if len(found) > 1:
        raise BundleError(f"{where}: the {sweep} sweep's runs hold more than one {other} "
                          f"({', '.join(found)}): a sweep moves {sweep} alone")
    return found[0] if found else ""


def _checked_bundle(run: dict, found: dict[str, Bundle], where: str) -> Bundle | None:
    if run["status"] != "ok":
        return None
    bundle = found[run["bundle"]]
    shown = f"{_shown(bundle.folder)}/{bundle_files.BUILD_FILE}"
    for field in ("sweep", "release"):
        if field not in bundle.build:
            raise BundleError(f"{shown}: missing field {field!r} (a release bundle names its "
                              "sweep and release)")
        if bundle.build[field] != run[field]:
            raise BundleError(f"{shown}: field {field!r} is {bundle.build[field]!r}, but {where} "
                              f"names it for {run['sweep']} {run['release']}")
    return bundle


def load(root: Path | None = None) -> History:
    """Read and validate the release runs under `root` (`book/data/releases/` by default).

    No runs.csv: an empty history (nothing measured yet). Raises `BundleError`, naming the
    file and the column, field or row: a runs.csv that misses a column, names an unknown
    sweep or status, a release that is not a version, an ok run without its bundle, a
    bundle folder no row names, a bundle whose build.json names another sweep or release,
    a sweep whose runs hold two versions of the other package, and every malformed bundle
    (`deepdive.book.bundles.load_all`). A release attempted twice counts by its last row."""
    root = Path(root) if root is not None else releases_dir()
    file = root / RUNS_FILE
    folders = sorted(f.name for f in root.iterdir() if f.is_dir() and not f.name.startswith(".")
                     and f.name != CONTROL_FOLDER) if root.is_dir() else []
    if not file.is_file():
        if folders:
            raise BundleError(f"{_shown(file)}: file missing, but {_shown(root)} holds "
                              f"bundles ({', '.join(folders)}): runs.csv names each run")
        return History(root, pd.DataFrame(columns=list(RUN_COLUMNS)), {s: () for s in SWEEPS},
                       dict.fromkeys(SWEEPS, ""))
    runs = _read_runs(file)
    where = _shown(file)
    unnamed = sorted(set(folders) - set(runs["bundle"]))
    if unnamed:
        raise BundleError(f"{where}: no row names the bundle {_shown(root / unnamed[0])}"
                          + (f" (and {len(unnamed) - 1} more)" if len(unnamed) > 1 else ""))
    found = {name: bundle_files.load(root / name) for name in folders}  # control/ apart
    latest = {(run["sweep"], run["release"]): run for run in runs.to_dict("records")}
    held = {sweep: _held(runs, sweep, where) for sweep in SWEEPS}
    sweeps = {sweep: [Point(sweep, release, run, _checked_bundle(run, found, where))
                      for (swept, release), run in latest.items() if swept == sweep]
              for sweep in SWEEPS}
    # the held point: the jax sweep's run at the jax the torch sweep holds, at its own torch
    shared = [p for p in sweeps["jax"]
              if held["torch"] and Version(p.release) == Version(held["torch"])]
    torch_of_shared = (_public(shared[0].run["torch"]) or held["jax"]) if shared else ""
    if torch_of_shared and all(Version(p.release) != Version(torch_of_shared)
                               for p in sweeps["torch"]):
        sweeps["torch"].append(Point("torch", torch_of_shared, shared[0].run, shared[0].bundle))
    ordered = {s: tuple(sorted(points_, key=lambda p: Version(p.release)))
               for s, points_ in sweeps.items()}
    return History(root, runs, ordered, held, _control(root, shared[0] if shared else None))


def _control(root: Path, held: Point | None) -> Point | None:
    """The second run of the held point under `root/control` (None where none ran): the
    rebuild control, which must have installed what the held point did."""
    folder = root / CONTROL_FOLDER
    if not (folder / RUNS_FILE).is_file():
        return None
    found = [p for p in load(folder).sweeps["jax"] if p.measured]
    if not found:
        return None
    control = found[-1]
    where = _shown(folder / RUNS_FILE)
    if held is None or not held.measured:
        raise BundleError(f"{where}: a control run, but no measured held point to compare "
                          "it with")
    for package in ("torch", "jax", "jaxlib", "flax", "optax"):
        if _public(control.run[package]) != _public(held.run[package]):
            raise BundleError(f"{where}: the control installed {package} "
                              f"{control.run[package]}, the held point {held.run[package]}: "
                              "a control repeats the held point")
    return control


# ---- per release --------------------------------------------------------------------------

def _family_of(claim_id: str) -> str:
    return next((family for family, ids in FAMILIES.items() if claim_id in ids), "")


def _claim_order(claim_id: str) -> int:
    ids = [i for family in FAMILIES.values() for i in family]
    return ids.index(claim_id) if claim_id in ids else len(ids)


def _claims_of(bundle: Bundle) -> pd.DataFrame:
    saved = bundle.claims
    return saved[saved["chapter"] == CHAPTER].reset_index(drop=True)


def _check_sweep(sweep: str) -> None:
    if sweep not in SWEEPS:
        raise ValueError(f"sweep must be one of {', '.join(SWEEPS)}, got {sweep!r}")


_POINT_COLUMNS = ["release", "claim_id", "family", "ratio", "low", "high", "verdict", "tie_band",
                  "decision_band", "baseline", "candidate", "question"]


def points(history: History, sweep: str) -> pd.DataFrame:
    """One row per (release, claim) of `sweep`, releases oldest first and claims in
    `FAMILIES`' order: the saved ratio (baseline time over candidate time) and 95% interval,
    the verdict re-read by the book's rule, the bands, both sides' labels and the question."""
    _check_sweep(sweep)
    rows = []
    for point in history.sweeps[sweep]:
        if not point.measured:
            continue
        saved = _claims_of(point.bundle)
        order = sorted(range(len(saved)), key=lambda i: _claim_order(saved.at[i, "claim_id"]))
        for _, claim in saved.iloc[order].iterrows():
            rows.append({"release": point.release, "claim_id": claim["claim_id"],
                         "family": _family_of(claim["claim_id"]),
                         **{k: float(claim[k]) for k in ("ratio", "low", "high", "tie_band")},
                         "decision_band": float(claim["decision_band"]),
                         "verdict": claims.reread_verdict(claim),
                         **{k: claim[k] for k in ("baseline", "candidate", "question")}})
    return pd.DataFrame(rows, columns=_POINT_COLUMNS)


def framework_of(label: str) -> str:
    """The framework a variant label belongs to: "PyTorch" for labels that start with
    "PyTorch" or name torch ("torch.func.vmap", "torch eager"), "JAX" for those that start
    with "JAX" or name jax ("jax.jit(vmap)"); a ValueError for a label that names neither."""
    text = str(label)
    if text.startswith("PyTorch") or "torch" in text.lower():
        return "PyTorch"
    if text.startswith("JAX") or "jax" in text.lower():
        return "JAX"
    raise ValueError(f"the variant label {label!r} names neither framework: a release claim's "
                     "labels start with PyTorch or JAX, or name torch or jax")


def direction(sweep: str, claim_id: str, baseline: str, candidate: str, rose: bool) -> str:
    """Which way a claim that moved between two releases of `sweep` went, for the framework
    the sweep moves: "improvement" or "regression" where one side is the swept framework's
    (its candidate gaining is an improvement; its baseline gaining, a regression); "<candidate>
    gained on <baseline>" or "lost to" where both sides are (jit against eager: neither a
    gain nor a loss of the framework), except `FORI_CLAIM`, whose falling ratio is a
    regression of the loop's cost per iteration; "other framework: ..." where neither side
    is, since a release of one framework should not move the other's claim (that is noise,
    or the machine's load).
    `rose`: whether the ratio rose (the candidate gained against its baseline)."""
    _check_sweep(sweep)
    swept = FRAMEWORKS[sweep]
    # its labels ("40,000 iterations") name no framework: both sides are jitted JAX loops
    sides = ("JAX", "JAX") if claim_id == FORI_CLAIM else (framework_of(baseline),
                                                          framework_of(candidate))
    gained = (f"{candidate} gained on {baseline}" if rose else f"{candidate} lost to {baseline}")
    if swept not in sides:
        return f"other framework: {gained}"
    if sides[0] == sides[1]:
        if claim_id == FORI_CLAIM:
            return "improvement" if rose else "regression"
        return gained
    return "improvement" if rose == (sides[1] == swept) else "regression"


def _upstream(sweep: str, releases: tuple[str, ...], claim_id: str) -> str:
    return next((KNOWN_ISSUES[key] for key in ((sweep, r, claim_id) for r in releases)
                 if key in KNOWN_ISSUES), "")


def _column(point: Point) -> Column:
    return Column(f"{point.sweep} {point.release}", point.bundle.build, _claims_of(point.bundle),
                  point.bundle.name)


_SIDES = [f"{side} ms {when}" for side in ("baseline", "candidate") for when in ("from", "to")]
_CHANGE_COLUMNS = ["sweep", "from", "to", "family", "claim_id", "question", "ratio from",
                   "ratio to", "change", "low", "high", "decision", "direction", "upstream",
                   *_SIDES]
# the records' experiment each claim's sides are timed in (the workloads' names)
_EXPERIMENTS = {"release_dot_": "vmap dot", "release_attention_": "vmap attention",
                "release_chain_": "chain", "release_gpt_": "GPT step"}


def changes(history: History) -> pd.DataFrame:
    """Every claim two consecutive measured releases of a sweep both made: both ratios, the
    ratio of ratios (to over from) with its 95% interval and the ledger's decision
    (`deepdive.chapters.ledger.release_changes`: moved, steady or undecided), the
    `direction` of a claim that moved, and the upstream reference `KNOWN_ISSUES` holds for
    either release. A release whose run failed is skipped: its neighbours are compared."""
    rows = []
    for sweep in SWEEPS:
        measured = [p for p in history.sweeps[sweep] if p.measured]
        for old, new in pairwise(measured):
            rows += _pair_changes(sweep, old, new, old.release, new.release)
    found = pd.DataFrame(rows, columns=_CHANGE_COLUMNS)
    reach = control_reach(history)
    # with no control committed nothing discounts a move: each counts, and the page says so
    found["beyond control"] = [
        bool(d == "moved" and (not math.isfinite(reach) or lo > reach or hi < 1 / reach))
        for d, lo, hi in zip(found["decision"], found["low"], found["high"], strict=True)]
    found["swept side, every run"] = [_every_run_text(history, r) for r in
                                      found.to_dict("records")]
    return found


def control_reach(history: History) -> float:
    """The largest factor the rebuild control moved any claim by, either way (NaN where no
    control ran): a release move whose whole interval lies beyond it is clear of what this
    machine does between two runs of the same releases."""
    found = control_changes(history)
    if found.empty:
        return math.nan
    return float(max(max(c, 1 / c) for c in found["change"].astype(float)))


def _runs(history: History) -> list[Point]:
    """Every measured run once: both sweeps' (the held point once) and the control."""
    seen = {}
    for point in [*history.sweeps["jax"], *history.sweeps["torch"], history.control]:
        if point is not None and point.measured:
            seen.setdefault(point.bundle.name + point.bundle.build["build_id"], point)
    return list(seen.values())


def _swept_side(sweep: str, claim_id: str, baseline: str, candidate: str) -> str | None:
    """The side of a claim the sweep's release runs (the candidate where both do)."""
    if claim_id == FORI_CLAIM:
        return candidate
    swept = FRAMEWORKS[sweep]
    return next((label for label in (candidate, baseline) if framework_of(label) == swept),
                None)


def side_everywhere(history: History, sweep: str, release: str, claim_id: str,
                    label: str) -> list[float]:
    """A side's median (ms) in every measured run that installed `release` of the sweep's
    package, the other sweep's and the control's included: the held framework's release
    runs in every run of the other sweep, so its side is measured more than once."""
    found = []
    for point in _runs(history):
        if _public(point.bundle.build["versions"][sweep]) == release:
            value = _side_ms(_records(point.bundle), claim_id, label)
            found += [value] if math.isfinite(value) else []
    return found


def _spread(values: list[float]) -> str:
    if not values:
        return "none recorded"
    low, high = min(values), max(values)
    runs = _count(len(values), "run")
    return f"{low:.3g} ms ({runs})" if len(values) == 1 else f"{low:.3g}–{high:.3g} ms ({runs})"


def _every_run_text(history: History, row: dict) -> str:
    """The swept side's medians in every run of each release, for a claim that moved."""
    if row["decision"] != "moved":
        return ""
    claims_now = _claims_of(next(p for p in history.sweeps[row["sweep"]]
                                 if p.release == row["to"]).bundle).set_index("claim_id")
    label = _swept_side(row["sweep"], row["claim_id"], claims_now.at[row["claim_id"], "baseline"],
                        claims_now.at[row["claim_id"], "candidate"])
    if label is None:
        return ""
    was, now = (side_everywhere(history, row["sweep"], r, row["claim_id"], label)
                for r in (row["from"], row["to"]))
    return f"{label}: {row['from']} {_spread(was)} → {row['to']} {_spread(now)}"


def replicated(history: History, row: dict) -> bool:
    """Whether every run of the newer release put the swept side beyond every run of the
    older one by more than absolute times drifted between two runs of the same releases
    (`drift`), with more than one run on some side (one run each replicates nothing)."""
    claims_now = _claims_of(next(p for p in history.sweeps[row["sweep"]]
                                 if p.release == row["to"]).bundle).set_index("claim_id")
    label = _swept_side(row["sweep"], row["claim_id"], claims_now.at[row["claim_id"], "baseline"],
                        claims_now.at[row["claim_id"], "candidate"])
    if label is None:
        return False
    was, now = (side_everywhere(history, row["sweep"], r, row["claim_id"], label)
                for r in (row["from"], row["to"]))
    if not was or not now or len(was) + len(now) < 3:
        return False
    # absolute times drift between runs of the same releases: the gap must exceed that
    margin = drift(history)
    margin = margin if math.isfinite(margin) else 1.0
    return max(now) * margin < min(was) or min(now) > max(was) * margin


def _side_ms(records: pd.DataFrame, claim_id: str, label: str) -> float:
    """A claim side's median in ms from the bundle's records (NaN where none is recorded:
    the fori claim's four short runs are timed as one variant the records do not keep)."""
    if claim_id == FORI_CLAIM:  # "40,000 iterations": one run of that length
        length = re.fullmatch(r"([\d,]+) iterations", str(label))
        medians = _metric(records, _FORI_EXPERIMENT, "median")
        n = int(length[1].replace(",", "")) if length else None
        return 1e3 * float(medians[n]) if n in medians.index else math.nan
    experiment = next((e for prefix, e in _EXPERIMENTS.items() if claim_id.startswith(prefix)),
                      None)
    if experiment is None:
        return math.nan
    rows = records[(records["experiment"] == experiment) & (records["variant"] == label)
                   & (records["metric"] == "median")]
    return 1e3 * float(rows["value"].iloc[0]) if len(rows) else math.nan


def _pair_changes(sweep: str, old: Point, new: Point, was_label: str, now_label: str,
                  directed: bool = True) -> list[dict]:
    """The change rows of every claim `old` and `new` both made, with each side's median
    then and now (which side moved: a release moves its own framework's side; a side of the
    held framework that moved as much is the machine)."""
    was, now = (_claims_of(p.bundle).set_index("claim_id") for p in (old, new))
    records = {p.release if p is old else "now": _records(p.bundle) for p in (old, new)}
    found = release_changes(_column(old), _column(new))
    rows = []
    for key in sorted(found.index, key=lambda key: _claim_order(key[1])):
        change, claim_id = found.loc[key], key[1]
        moved = change["change"] == "moved"
        try:
            way = direction(sweep, claim_id, now.at[claim_id, "baseline"],
                            now.at[claim_id, "candidate"], change["ratio"] > 1)
        except ValueError as error:
            raise BundleError(f"{_shown(new.bundle.folder)}/{claims.FILE_NAME}: "
                              f"{claim_id}: {error}") from error
        sides = {f"{side} ms {when}": _side_ms(frame, claim_id, table.at[claim_id, side])
                 for side in ("baseline", "candidate")
                 for when, frame, table in (("from", records[old.release], was),
                                            ("to", records["now"], now))}
        rows.append({
            "sweep": sweep, "from": was_label, "to": now_label,
            "family": _family_of(claim_id), "claim_id": claim_id,
            "question": change["question"],
            "ratio from": float(was.at[claim_id, "ratio"]),
            "ratio to": float(now.at[claim_id, "ratio"]),
            "change": change["ratio"], "low": change["low"], "high": change["high"],
            "decision": change["change"],
            "direction": way if moved and directed else "",
            "upstream": _upstream(sweep, (new.release,), claim_id) if directed
            else "", **sides})
    return rows


def control_changes(history: History) -> pd.DataFrame:
    """The rebuild control: every claim of the held point against its second run (same
    releases, same machine, later), decided by the same rule. What moves here moved without
    a release; a release's move of a similar size is no stronger evidence."""
    if history.control is None:
        return pd.DataFrame(columns=_CHANGE_COLUMNS)
    held = next(p for p in history.sweeps["jax"] if p.measured
                and Version(p.release) == Version(history.held["torch"]))
    return pd.DataFrame(_pair_changes("jax", held, history.control, "first run", "second run",
                                      directed=False), columns=_CHANGE_COLUMNS)


def _number(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _why(text: str) -> pd.DataFrame:
    return pd.DataFrame({"releases over time": [text]}, index=[""])


def _nothing(history: History) -> str:
    """Why a table of measured releases is empty."""
    if history.runs.empty:
        return _EMPTY
    return (f"No release run finished, so no release bundle is committed: "
            f"{RUNS_FILE} names {_count(len(history.runs), 'attempt')}, every one failed.")


def regressions(history: History) -> pd.DataFrame:
    """The page's list: every claim that moved between consecutive releases, by sweep and
    release, with both ratios, the change and its interval, the direction and any upstream
    reference; one row saying why where there is none."""
    if history.empty:
        return _why(_nothing(history))
    moved = changes(history)
    moved = moved[moved["decision"] == "moved"]
    if moved.empty:
        return _why("No claim moved beyond its band between consecutive releases of either "
                    "sweep.")
    shown = moved.assign(**{
        "releases": [f"{a} → {b}" for a, b in zip(moved["from"], moved["to"], strict=True)],
        **{f"{side} (ms)": [_ms_pair(a, b) for a, b in zip(
            moved[f"{side} ms from"], moved[f"{side} ms to"], strict=True)]
           for side in ("baseline", "candidate")},
        "ratio from": moved["ratio from"].map(_number), "ratio to": moved["ratio to"].map(_number),
        "to / from [95% interval]": [f"{_number(r)} [{_number(lo)}, {_number(hi)}]" for r, lo, hi
                                     in zip(moved["change"], moved["low"], moved["high"],
                                            strict=True)]})
    control = control_changes(history).set_index("claim_id")
    shown["in the rebuild control"] = [
        "" if c not in control.index else
        f"{control.at[c, 'decision']}, {_number(control.at[c, 'change'])} "
        f"[{_number(control.at[c, 'low'])}, {_number(control.at[c, 'high'])}]"
        for c in shown["claim_id"]]
    shown["direction"] = [d if counted else f"within rerun noise ({d})" for d, counted
                          in zip(shown["direction"], shown["beyond control"], strict=True)]
    shown["further than the control moved any claim"] = (
        shown["beyond control"].map({True: "yes", False: "no"})
        if math.isfinite(control_reach(history)) else "no control committed")
    return shown[["sweep", "releases", "claim_id", "question", "ratio from", "ratio to",
                  "to / from [95% interval]", "further than the control moved any claim",
                  "direction", "baseline (ms)", "candidate (ms)", "swept side, every run",
                  "in the rebuild control", "upstream"]].set_index(["sweep", "releases"])


def _ms_pair(was: float, now: float) -> str:
    """A side's median then and now, in ms ("" where a side's time is not recorded)."""
    if not (math.isfinite(was) and math.isfinite(now)):
        return ""
    shown = (lambda v: f"{v:.3g}")  # noqa: E731
    return f"{shown(was)} → {shown(now)}"


def control_table(history: History) -> pd.DataFrame:
    """The rebuild control for the page: every claim the second run of the held point moved
    against the first, or one row saying none did (or that no control ran)."""
    found = control_changes(history)
    if found.empty:
        return _why("No second run of the held point is committed, so there is no rebuild "
                    "control for these moves." if history.control is None else
                    "The control shares no claim with the held point.")
    moved = found  # every claim: what a rerun moved, and how far its sides' times drifted
    return moved.assign(**{
        "claim": moved["claim_id"].map(lambda c: PLAIN.get(c, c)),
        "ratio from": moved["ratio from"].map(_number), "ratio to": moved["ratio to"].map(_number),
        "to / from [95% interval]": [f"{_number(r)} [{_number(lo)}, {_number(hi)}]" for r, lo, hi
                                     in zip(moved["change"], moved["low"], moved["high"],
                                            strict=True)],
        **{f"{side} (ms)": [_ms_pair(a, b) for a, b in zip(
            moved[f"{side} ms from"], moved[f"{side} ms to"], strict=True)]
           for side in ("baseline", "candidate")}})[
        ["claim_id", "claim", "ratio from", "ratio to", "to / from [95% interval]", "decision",
         "baseline (ms)", "candidate (ms)"]].rename(
        columns={"ratio from": "first run", "ratio to": "second run"}).set_index("claim_id")


def drift_text(history: History) -> str:
    """`drift` for the page's prose: the factor as a percentage, or why there is none."""
    factor = drift(history)
    if not math.isfinite(factor):
        return "an unknown amount (no rebuild control is committed)"
    return f"{100 * (factor - 1):.0f}%"


def drift(history: History) -> float:
    """The largest factor by which one side's median differed between the held point and
    its rerun (NaN where no control ran): how far absolute times drift between two runs of
    the same releases on this machine, which is why only paired ratios are compared."""
    found = control_changes(history)
    factors = [max(a, b) / min(a, b) for side in ("baseline", "candidate")
               for a, b in zip(found[f"{side} ms from"], found[f"{side} ms to"], strict=True)
               if math.isfinite(a) and math.isfinite(b) and min(a, b) > 0]
    return max(factors, default=math.nan)


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def runs_table(history: History) -> pd.DataFrame:
    """runs.csv as the page shows it: one row per attempt by sweep and release (the held
    point once, in the jax sweep), the versions it installed, how it ended (an error's first
    line), the workloads that failed inside an ok run, and its install and run seconds."""
    if history.runs.empty:
        return _why(_EMPTY)
    runs = history.runs.assign(
        _sweep=history.runs["sweep"].map(SWEEPS.index),
        _release=history.runs["release"].map(Version),
        error=history.runs["error"].map(_first_line),
        **{"install (s)": history.runs["install_s"].round(1),
           "run (s)": history.runs["run_s"].round(1)})
    runs = runs.sort_values(["_sweep", "_release"], kind="stable")
    if history.control is not None:  # the rebuild control's own run, last
        control = {**history.control.run, "sweep": "control (held point again)",
                   "error": _first_line(history.control.run["error"])}
        runs = pd.concat([runs, pd.DataFrame([control]).assign(**{
            "install (s)": round(float(control["install_s"]), 1),
            "run (s)": round(float(control["run_s"]), 1)})], ignore_index=True)
    return runs[["sweep", "release", "python", "torch", "jax", "jaxlib", "flax", "optax",
                 "status", "error", "failed_workloads", "install (s)", "run (s)", "date"]
                ].rename(columns={"failed_workloads": "failed workloads"}).set_index(
                    ["sweep", "release"])


# ---- correctness --------------------------------------------------------------------------

def _records(bundle: Bundle) -> pd.DataFrame:
    """The bundle's records of the releases chapter (validated by `bundles.load`); none where
    it saved no file."""
    file = bundle.folder / bundle_files.RESULTS_FOLDER / f"{CHAPTER}.csv"
    if not file.is_file():
        return pd.DataFrame(columns=list(results.COLUMNS))
    records = pd.read_csv(file)
    return records.assign(size=pd.to_numeric(records["size"], errors="coerce"),
                          value=pd.to_numeric(records["value"], errors="coerce"))


def _metric(records: pd.DataFrame, experiment: str, metric: str) -> pd.Series:
    """The values of one metric of one experiment, by size."""
    rows = records[(records["experiment"] == experiment) & (records["metric"] == metric)]
    return pd.Series(rows["value"].to_numpy(), index=rows["size"].to_numpy(), dtype=float)


def _jit_values(records: pd.DataFrame) -> tuple[bool | None, float, float]:
    """jax-ml/jax#39103's reading: whether jit equalled eager (None where not measured), and
    the two results."""
    equal = _metric(records, ISSUE_39103, "jit equals eager")
    jit, eager = (_metric(records, ISSUE_39103, m) for m in ("jit result", "eager result"))
    return (None if equal.empty else bool(equal.iloc[0]),
            jit.iloc[0] if len(jit) else math.nan, eager.iloc[0] if len(eager) else math.nan)


def _jit_reading(records: pd.DataFrame) -> str:
    equal, jit, eager = _jit_values(records)
    if equal is None:
        return "not measured"
    return "yes" if equal else f"no (jit {jit:,.0f}, eager {eager:,.0f})"


def _fori_reading(records: pd.DataFrame) -> str:
    correct = _metric(records, _FORI_EXPERIMENT, "correct")
    if correct.empty:
        return "not measured"
    wrong = [f"{int(n):,}" for n, ok in correct.items() if not ok]
    return f"no (wrong at {', '.join(wrong)} iterations)" if wrong else "yes"


def _fori_sizes(history: History) -> list[int]:
    found = {int(n) for points_ in history.sweeps.values() for p in points_ if p.measured
             for n in _metric(_records(p.bundle), _FORI_EXPERIMENT, "median").index}
    return sorted(found)


def _issue(build: dict) -> str:
    """The upstream reports of a release's wrong result or its write loop's slowdown."""
    return "; ".join(KNOWN_ISSUES[key] for key in (
        (name, _public(build["versions"][name]), claim) for name in SWEEPS
        for claim in ("correctness", FORI_CLAIM)) if key in KNOWN_ISSUES)


def correctness(history: History) -> pd.DataFrame:
    """Per (sweep, release) measured: the torch and jax that ran, whether jit equalled eager
    on jax-ml/jax#39103's pattern (with both values where not), whether the fori_loop write
    was right against its closed form at every length, the write loop's median in ms at each
    length, and the upstream reference for a known wrong result; one row saying why where
    nothing was measured."""
    if history.empty:
        return _why(_nothing(history))
    sizes = _fori_sizes(history)
    rows = []
    for sweep in SWEEPS:
        for point in (p for p in history.sweeps[sweep] if p.measured):
            records, build = _records(point.bundle), point.bundle.build
            medians = _metric(records, _FORI_EXPERIMENT, "median")
            rows.append({"sweep": sweep, "release": point.release,
                         "torch": build["versions"]["torch"], "jax": build["versions"]["jax"],
                         _JIT_COLUMN: _jit_reading(records),
                         "fori write correct": _fori_reading(records),
                         **{f"fori {n:,} (ms)": round(1e3 * medians.get(n, math.nan), 3)
                            for n in sizes},
                         "upstream": _issue(build)})
    return pd.DataFrame(rows).set_index(["sweep", "release"])


# ---- the figure ---------------------------------------------------------------------------

def _caption(history: History, questions) -> str:
    builds = [p.bundle.build for points_ in history.sweeps.values() for p in points_
              if p.measured]
    if not builds:
        return "No release bundle is committed under book/data/releases/ yet (make releases)"
    devices = ", ".join(dict.fromkeys(b["device"] for b in builds))
    scales = ", ".join(dict.fromkeys(b["scale"] for b in builds))
    dates = sorted({b["date"] for b in builds})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    precision = ("fp32" if len(questions) and all("fp32" in str(q) for q in questions)
                 else "precision as each claim states")
    return (f"Built on {devices} · {precision} · scale={scales} · one bundle per release, "
            f"{when} · ratio = baseline time / candidate time, 95% interval · shaded: each "
            "bundle's tie band")


def plot_family(history: History, family: str):
    """One family of claims (`FAMILIES`) across releases: the jax sweep's panel, then the
    torch sweep's, every release attempted on the x-axis in order (a failed one labelled
    with its status), each claim's ratio (baseline time over candidate time) on a log axis
    with its 95% interval, a line at 1 and each bundle's tie band shaded."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from deepdive.book import plots

    if family not in FAMILIES:
        raise ValueError(f"no family {family!r}; accepted: {', '.join(FAMILIES)}")
    ids = FAMILIES[family]
    # one y-axis for both panels: the held point, in both, sits at one height
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    questions, limits = [], []
    for ax, sweep in zip(axes, SWEEPS, strict=True):
        attempted = history.sweeps[sweep]
        held = history.held[sweep]
        ax.set_title(f"{sweep} releases" + (f", {_OTHER[sweep]} {held} held" if held else ""))
        ax.set_xlabel(f"{sweep} release")
        ax.set_ylabel("baseline time / candidate time")
        frame = points(history, sweep)
        frame = frame[frame["claim_id"].isin(ids)]
        questions += list(frame["question"])
        if frame.empty:
            ax.text(0.5, 0.5, f"no {sweep} release measured", transform=ax.transAxes,
                    ha="center", va="center", color="0.4")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        place = {p.release: i for i, p in enumerate(attempted)}
        measured = [(i, float(p.bundle.build["tie_band"])) for i, p in enumerate(attempted)
                    if p.measured]
        for n, (i, band) in enumerate(measured):
            ax.fill_between([i - 0.4, i + 0.4], 1 / (1 + band), 1 + band, color="0.9",
                            label="the bundle's tie band" if n == 0 else None)
        ax.axhline(1.0, color="0.3", linewidth=0.8)
        for k, claim_id in enumerate(ids):
            rows = frame[frame["claim_id"] == claim_id]
            if rows.empty:
                continue
            shift = (k - (len(ids) - 1) / 2) * 0.12
            last = rows.iloc[-1]
            ax.errorbar([place[r] + shift for r in rows["release"]], rows["ratio"],
                        yerr=[rows["ratio"] - rows["low"], rows["high"] - rows["ratio"]],
                        marker="osD^v"[k % 5], capsize=3, markersize=4,
                        label=f"{claim_id.removeprefix('release_')}: {last['candidate']} "
                              f"against {last['baseline']}")
        ax.set_xticks(range(len(attempted)),
                      [p.release if p.measured else f"{p.release}\n({p.run['status']})"
                       for p in attempted])
        ax.set_xlim(-0.6, len(attempted) - 0.4)
        plots.log_axes(ax, x=False)
        # room for the bands and a margin: a steady claim is not drawn as a cliff
        widest = max(float(p.bundle.build["tie_band"]) for p in attempted if p.measured)
        # one y-axis for both panels: the limits hold every point and interval of either
        limits.append((min(frame["low"].min(), 1 / (1 + widest)) / 1.25,
                       max(frame["high"].max(), 1 + widest) * 1.25))
        ax.set_ylim(min(lo for lo, _ in limits), max(hi for _, hi in limits))
        ax.yaxis.set_major_locator(LogLocator(base=2, subs=(1.0, 1.5)))  # a label per ~1.4x
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    drawn = dict(zip(*reversed(axes[0].get_legend_handles_labels()), strict=True))
    drawn |= dict(zip(*reversed(axes[1].get_legend_handles_labels()), strict=True))
    fig.suptitle(family)
    plots.caption(fig, _caption(history, questions))
    if drawn:  # one legend for both panels, between the axes and the caption
        fig.legend(list(drawn.values()), list(drawn), loc="upper center", ncol=2,
                   bbox_to_anchor=(0.5, 0.16))
        fig.subplots_adjust(bottom=0.36, top=0.86)
    return fig


def plot_fori(history: History):
    """The fori_loop write's median (ms, log axis) at each loop length, per release of both
    sweeps: a loop whose cost is linear in its length keeps its lines a constant factor
    apart; a release that makes it quadratic lifts the longer loops more."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, sweep in zip(axes, SWEEPS, strict=True):
        measured = [p for p in history.sweeps[sweep] if p.measured]
        medians = {p.release: _metric(_records(p.bundle), _FORI_EXPERIMENT, "median")
                   for p in measured}
        for k, n in enumerate(_fori_sizes(history)):
            ax.plot(range(len(measured)), [1e3 * medians[p.release].get(n, math.nan)
                                           for p in measured],
                    marker="osD^v"[k % 5], label=f"{n:,} iterations")
        ax.set_xticks(range(len(measured)), [p.release for p in measured])
        held = history.held[sweep]
        ax.set_title(f"{sweep} releases" + (f", {_OTHER[sweep]} {held} held" if held else ""))
        ax.set_xlabel(f"{sweep} release")
        plots.log_axes(ax, x=False)
    axes[0].set_ylabel("median per run of the loop (ms)")
    axes[0].legend(loc="upper left")
    fig.suptitle("the jitted fori_loop write x.at[i].set(x[i-1]*0.5+1.0)")
    plots.caption(fig, _caption(history, ["fp32"]).split(" · ratio")[0]
                  + " · median of each loop length's timed blocks")
    return fig


# ---- sentences ----------------------------------------------------------------------------

def _count(n: int, noun: str) -> str:
    return f"{'no' if n == 0 else n} {noun}{'' if n == 1 else 's'}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _workloads(run: dict) -> list[str]:
    """The names of the workloads that failed inside a run: "<workload>: <error>" items,
    "; "-joined (a piece without ": " continues the error before it)."""
    return [item.split(": ")[0] for item in run["failed_workloads"].split("; ") if ": " in item]


def _sweep_sentence(history: History, sweep: str) -> str:
    attempted = history.sweeps[sweep]
    if not attempted:
        return f"the {sweep} sweep has not run"
    other, held = _OTHER[sweep], history.held[sweep]
    first, last = attempted[0].release, attempted[-1].release
    said = (f"the {sweep} sweep ran {_count(len(attempted), 'release')} "
            f"({first if first == last else f'{first} to {last}'})"
            + (f" with {other} {held} held" if held else ""))
    shared = [p for p in attempted if p.run["sweep"] != sweep]
    if shared:
        said += (f", its {shared[0].release} point the {shared[0].run['sweep']} sweep's "
                 f"{shared[0].run['release']} run (the held point, the book's own pins, shared "
                 "by both sweeps)")
    failed = [p for p in attempted if p.run["status"] != "ok"]
    said += (f"; {len(failed)} failed: " + _and([
        f"{sweep} {p.release} ({p.run['status']}: {_first_line(p.run['error']) or 'no error text'})"
        for p in failed]) if failed else "; none failed")
    lost = [p for p in attempted if p.run["status"] == "ok" and p.run["failed_workloads"]]
    if lost:
        said += ("; " + _count(len(lost), "finished run") + " lost workloads: "
                 + _and([f"{sweep} {p.release} ({', '.join(_workloads(p.run))})" for p in lost]))
    return said


def runs_sentence(history: History) -> str:
    """What ran: per sweep how many releases (first to last) with which version held, which
    failed, with their error's first line, and which finished runs lost workloads; where and
    when the bundles were measured."""
    if history.runs.empty:
        return _EMPTY
    builds = [p.bundle.build for points_ in history.sweeps.values() for p in points_
              if p.measured]
    said = "; ".join(_sweep_sentence(history, s) for s in SWEEPS)
    said = said[0].upper() + said[1:]
    if history.control is not None:
        said += ("; the held point ran once more after both sweeps, the rebuild control (what "
                 "two runs of the same releases differ by)")
    if builds:
        dates = sorted({b["date"] for b in builds})
        devices, scales = (_and(list(dict.fromkeys(b[k] for b in builds)))
                           for k in ("device", "scale"))
        commits = _and([c.replace("+uncommitted", " (with uncommitted changes)")
                        for c in dict.fromkeys(b["commit"] for b in builds)])
        said += (f". Each bundle was measured on {devices} at {scales} scale, "
                 + (f"on {dates[0]}" if len(dates) == 1 else f"from {dates[0]} to {dates[-1]}")
                 + f", by the book's code at commit {commits}")
    return said + "."


def moves_sentence(history: History) -> str:
    """How many claims moved between consecutive releases, how many of those further than
    the rebuild control moved any claim without a release, how many held steady or stayed
    undecided, and how many null tests (changes of claims both of whose sides the sweep
    holds) moved."""
    found = changes(history)
    if found.empty:
        return ("No two consecutive releases of a sweep were both measured, so no change "
                "between releases is decided yet.")
    counts = found["decision"].value_counts()
    moved = found[found["decision"] == "moved"]
    clear, near = moved[moved["beyond control"]], moved[~moved["beyond control"]]

    def named(rows) -> str:
        return _and([f"{PLAIN.get(r['claim_id'], r['claim_id'])} ({r['sweep']} {r['from']} → "
                     f"{r['to']})" for r in rows.to_dict("records")])

    said = (f"Between consecutive releases, {counts.get('moved', 0)} of "
            f"{_count(len(found), 'claim change')} moved beyond the claim's band")
    reach = control_reach(history)
    control = control_changes(history)
    if math.isfinite(reach):
        again = control[control["decision"] == "moved"]["claim_id"].tolist()
        said += (f" (a second run of the held point, the rebuild control, moved {len(again)} of "
                 f"its {len(control)} claims" + (f": {_and([PLAIN.get(c, c) for c in again])}"
                                                 if again else "")
                 + f"; its largest move of any claim was ×{reach:.2f})")
    if math.isfinite(reach) and len(moved):
        said += (f": {len(clear)} further than that" + (f", {named(clear)}" if len(clear) else "")
                 + (f"; {len(near)} no further, {named(near)}" if len(near) else ""))
    elif len(moved):
        said += (f" ({named(moved)}); no rebuild control is committed to say how far a claim "
                 "moves without a release")
    said += (f". {counts.get('steady', 0)} held steady and {counts.get('undecided', 0)} stayed "
             "undecided: for those the sweep can say neither that they held nor that they moved.")
    null = found[[_is_null(history, r) for r in found.to_dict("records")]]
    if len(null):
        said += (f" A sanity check: {len(null)} changes compare one framework with itself while "
                 f"only the other framework's release changed, so none should move; "
                 f"{int((null['decision'] == 'moved').sum())} moved and "
                 f"{int((null['decision'] == 'undecided').sum())} stayed undecided.")
    return said


def _is_null(history: History, row: dict) -> bool:
    """Whether neither side of a change's claim runs the framework its sweep moves."""
    claims_now = _claims_of(next(p for p in history.sweeps[row["sweep"]]
                                 if p.release == row["to"]).bundle).set_index("claim_id")
    if row["claim_id"] == FORI_CLAIM:
        return row["sweep"] != "jax"
    sides = {framework_of(claims_now.at[row["claim_id"], k]) for k in ("baseline", "candidate")}
    return FRAMEWORKS[row["sweep"]] not in sides


def _times(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _side_change(history: History, row: dict) -> tuple[str | None, float, float]:
    """The swept side of a change's claim and its medians (ms) in the two releases' runs."""
    claims_now = _claims_of(next(p for p in history.sweeps[row["sweep"]]
                                 if p.release == row["to"]).bundle).set_index("claim_id")
    base, cand = (claims_now.at[row["claim_id"], k] for k in ("baseline", "candidate"))
    label = _swept_side(row["sweep"], row["claim_id"], base, cand)
    side = "candidate" if label == cand else "baseline"
    return label, row[f"{side} ms from"], row[f"{side} ms to"]


def _how_much(was: float, now: float) -> str:
    factor, way = (now / was, "slower") if now > was else (was / now, "faster")
    return f"{_times(factor)}× {way}"


def _told(moved: list[dict]) -> list[tuple[dict, str | None]]:
    """The clear moves to tell, each with the release that undid it (None where none did);
    a move that undid an earlier clear one is told with it, not again."""
    told = []
    for i, row in enumerate(moved):
        if not row["beyond control"] or any(
                r["to"] == row["from"] and r["claim_id"] == row["claim_id"]
                and r["sweep"] == row["sweep"] and r["beyond control"] for r in moved[:i]):
            continue
        after = next((r for r in moved[i + 1:] if r["sweep"] == row["sweep"]
                      and r["claim_id"] == row["claim_id"] and r["from"] == row["to"]
                      and r["beyond control"] and r["direction"] != row["direction"]), None)
        told.append((row, after["to"] if after else None))
    return told


def _move_note(history: History, row: dict, undone: str | None) -> str:
    """One bullet of the upgrade notes: a release's clear move, the swept side's medians."""
    label, was, now = _side_change(history, row)
    said = (f"- **{row['sweep']} {row['to']}** (against {row['from']}): "
            f"{_PLAIN_MD.get(row['claim_id'], PLAIN.get(row['claim_id'], row['claim_id']))}")
    if label is not None and math.isfinite(was) and math.isfinite(now):
        said += (f": {label} took {_ms(was / 1e3)} on {row['from']} and {_ms(now / 1e3)} on "
                 f"{row['to']}, {_how_much(was, now)}" + _other_lengths(history, row))
    said += (f" (the claim's ratio went {_number(row['ratio from'])} → "
             f"{_number(row['ratio to'])}, ×{_number(row['change'])} "
             f"[{_number(row['low'])}, {_number(row['high'])}])")
    if undone:
        said += f"; {row['sweep']} {undone} undid it"
    if row["upstream"]:
        said += f"; {row['upstream']}"
    if row["claim_id"] in BOOK_CLAIM:
        said += (f"; the same measurement as chapter 1's `{BOOK_CLAIM[row['claim_id']]}`, whose "
                 "verdict flipped between the book's old and new pins")
    return said + "."


_PLAIN_MD = {FORI_CLAIM: "the jitted fori_loop write `x.at[i].set(x[i-1]*0.5+1.0)`",
             "release_dot_fori_vs_vmap": "dot products, a jitted `.at[].set` fori_loop against "
                                         "`jax.jit(vmap)`"}


def _other_lengths(history: History, row: dict) -> str:
    """For the write loop: the same change at its shortest length (a loop whose cost grew
    with the square of its length changed less there)."""
    if row["claim_id"] != FORI_CLAIM:
        return ""
    runs = {p.release: _metric(_records(p.bundle), _FORI_EXPERIMENT, "median")
            for p in history.sweeps[row["sweep"]] if p.measured}
    was, now = runs.get(row["from"]), runs.get(row["to"])
    if was is None or now is None or not len(was) or not len(now):
        return ""
    shortest = min(set(was.index) & set(now.index))
    return (f" at that length, {_how_much(was[shortest], now[shortest])} at {int(shortest):,} "
            "iterations")


def upgrade_notes(history: History) -> str:
    """The section's findings as Markdown bullets, release by release: every move clear of
    the rebuild control (the swept side's medians, the ratio's change, what undid it, the
    upstream report), every release that returned jax-ml/jax#39103's wrong result, and the
    moves no further than the control's, with whether every run replicated them."""
    if history.empty:
        return "- " + _nothing(history)
    found = changes(history)
    moved = found[found["decision"] == "moved"].to_dict("records")
    bullets = [_move_note(history, row, undone) for row, undone in _told(moved)]
    bullets += [f"- {wrong_result_sentence(history)}"]
    near = [r for r in moved if not r["beyond control"]]
    reach = control_reach(history)
    for row in near:
        inner = min(max(row["low"], 1 / row["low"]), max(row["high"], 1 / row["high"]))
        extra = (f"; {row['swept side, every run']}, "
                 + ("apart by more than absolute times drift between two runs of the same "
                    "releases" if replicated(history, row) else "not apart by more than "
                    f"absolute times drift between two runs of the same releases "
                    f"({drift_text(history)})") if row["swept side, every run"] else "")
        bullets.append(
            f"- Not counted: {PLAIN.get(row['claim_id'], row['claim_id'])} changed from "
            f"{row['sweep']} {row['from']} to {row['to']} by ×{_number(row['change'])}, but its "
            f"95% interval [{_number(row['low'])}, {_number(row['high'])}] reaches only "
            f"×{inner:.2f}, inside the ×{reach:.2f} a second run of the same releases moved a "
            f"claim{extra}.")
    if not math.isfinite(reach):
        bullets.append("- No rebuild control is committed: these moves are not set against "
                       "what a second run of the same releases moves.")
    elif not any(r["beyond control"] for r in moved):
        bullets.insert(0, "- No claim moved between consecutive releases further than a "
                       "second run of the same releases moved one.")
    return "\n".join(bullets)


def headline_sentence(history: History) -> str:
    """One sentence for the page's top box: the releases whose moves were clear of the
    rebuild control, and the one that returned a wrong result."""
    if history.empty:
        return _nothing(history)
    found = changes(history)
    parts = []
    for row, undone in _told(found[found["decision"] == "moved"].to_dict("records")):
        label, was, now = _side_change(history, row)
        how = (f" {_how_much(was, now)}" if math.isfinite(was) and math.isfinite(now) else "")
        workload = _WORKLOAD_PLAIN.get(row["claim_id"].split("_")[1], "its workload")
        what = (f"{PLAIN[FORI_CLAIM]} ({label}){how}" if row["claim_id"] == FORI_CLAIM
                else f"{label}{how} on {workload}")
        parts.append(f"{row['sweep']} {row['to']} made {what}"
                     + (f", and {undone} undid it" if undone else ""))
    wrong = _wrong_releases(history)
    parts += [f"jax {v} returned a wrong result under jit ({ISSUE_39103})" for v in wrong]
    for sweep in SWEEPS:
        measured = [p.release for p in history.sweeps[sweep] if p.measured]
        told = found[(found["sweep"] == sweep) & (found["decision"] == "moved")
                     & found["beyond control"]]
        if len(measured) > 1 and told.empty:
            parts.append(f"no {sweep} release from {measured[0]} to {measured[-1]} moved a "
                         "measured claim further than a rerun of the same releases did")
    runs = _runs(history)
    claims_measured = len({c for p in runs for c in _claims_of(p.bundle)["claim_id"]})
    scope = (f"{_count(len(runs), 'run')} on {runs[0].bundle.build['device']}, "
             f"{runs[0].bundle.build['scale']} sizes, {_count(claims_measured, 'claim')}")
    return (f"One release at a time ({scope}): "
            + ("; ".join(parts) if parts else "no release moved a claim further than a rerun "
               "of the same releases did, and none returned a wrong result") + ".")


def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return (f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}") + " ms"


def _wrong_releases(history: History) -> list[str]:
    """The jax versions whose run returned jit != eager on #39103's pattern, oldest first."""
    wrong = {p.bundle.build["versions"]["jax"] for p in _runs(history)
             if _jit_values(_records(p.bundle))[0] is False}
    return sorted(wrong, key=Version)


def wrong_result_sentence(history: History) -> str:
    """Which jax releases returned jax-ml/jax#39103's wrong result (jit not equal to eager,
    whose value is exact), with both values, and which returned eager's: each jax version
    once, however many runs installed it."""
    by_version: dict[str, tuple] = {}
    for point in _runs(history):
        equal, jit, eager = _jit_values(_records(point.bundle))
        if equal is not None:
            by_version.setdefault(point.bundle.build["versions"]["jax"], (equal, jit, eager))
    if not by_version:
        return f"No release measured {ISSUE_39103}'s pattern."
    versions = sorted(by_version, key=Version)
    wrong = [v for v in versions if by_version[v][0] is False]
    right = [v for v in versions if by_version[v][0] is True]
    pattern = (f"{ISSUE_39103}'s pattern, jax.jit(jax.vmap(lambda row: jnp.sum((m @ row) ** 2))) "
               f"over {_fori_rows(history):,} float32 rows on the CPU")
    if not wrong:
        return f"Every jax release measured ({_and(right)}) returned eager's value on {pattern}."
    said = "; ".join(f"jax {v} returned a wrong result under jit on {pattern}: "
                     f"{by_version[v][1]:,.0f} against eager's {by_version[v][2]:,.0f}"
                     for v in wrong)
    return said + (f"; {_and(right)} returned eager's value" if right else "") + "."


def _fori_rows(history: History) -> int:
    """The row count #39103's pattern ran at (the records' size)."""
    for point in _runs(history):
        records = _records(point.bundle)
        rows = records[records["experiment"] == ISSUE_39103]["size"]
        if len(rows):
            return int(rows.iloc[0])
    return 0


def summary_sentence(history: History) -> str:
    """The section's summary for the page: what ran and failed (`runs_sentence`) and what
    moved (`moves_sentence`; the findings are `upgrade_notes`); with nothing committed, how
    to make it."""
    if history.runs.empty:
        return _EMPTY
    return " ".join([runs_sentence(history), moves_sentence(history)])
