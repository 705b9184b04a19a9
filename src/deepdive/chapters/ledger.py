"""The ledger page's evidence as frames (`book/ledger.md` lays them out): every committed build
beside this one, and the release sweeps of `make releases`.

A build is a bundle under `book/data/builds/` (`deepdive.book.bundles`, validated as it is
read) or "this build" (the claims and stamps in `_build/results`); a bundle of this build's
own measurements shows once, as this build. Moved claims are followed to where they live now
(`claim_map`); an alias (another id a page gave the same measurement) gets a row of its own,
marked `alias_of`, only where its build saved none under that id, so a comparison meets
itself across builds and still counts once. Verdicts are recomputed with the book's rule.
A ratio of ratios cannot say which side's time changed; each build's result files can, where
a side's median is found in them (`side_medians`).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
from packaging.version import Version

from deepdive.book import bundles, claims, provenance
from deepdive.book.machines import cpu_kind, machine
from deepdive.chapters import claim_map
from deepdive.core import env
from deepdive.core.verdict import TieBand, classify

__all__ = ["CHANGES", "CONTROL_FOLDER", "KEY", "NOT_FOUND", "PAIR_KINDS", "RELEASES",
           "SIDE_COLUMNS", "THIS_BUILD", "Build", "builds", "changes", "differences", "headline",
           "pairs", "ratio_of_ratios", "releases", "side_medians", "sweeps", "this_build",
           "verdicts"]

THIS_BUILD = "this build"
KEY = ["chapter", "claim_id"]
# A ratio of ratios decided by the rule, as a change between two builds.
CHANGES = {"faster": "moved", "slower": "moved", "tie": "steady", "withheld": "undecided"}
# What a pair of builds changed, by what they share: a rebuild keeps the device model and its
# cores, the exact torch and jax (local tag included: "2.13.0+cpu" is another wheel than
# "2.13.0") and the book's commit; a code change keeps all but the commit; then the pins, then
# the device.
PAIR_KINDS = ("rebuild", "code change", "pins change", "device change")
# Where `make releases` commits (`deepdive.releases.matrix`, a layer above this one).
RELEASES, CONTROL_FOLDER = Path("book", "data", "releases"), "control"
_CORES = re.compile(r"\s*\((?:\d+ of )?\d+ cores?\)$")  # "(1 of 2 cores)": pinned, not a model
# A move's side whose median was not found in its build's result files: the ratio moved,
# and which side's time did is not said.
NOT_FOUND = "not found: the ratio's move is not attributed"
SIDE_COLUMNS = ("baseline old", "baseline new", "candidate old", "candidate new")  # seconds


@dataclass(frozen=True, eq=False)  # holds a DataFrame: no == between builds
class Build:
    """One build: its label, build.json, claims, its pages' build ids, its bundle folder and
    the folder of its pages' result files (`<chapter>.csv`)."""

    label: str
    build: dict
    claims: pd.DataFrame
    build_ids: frozenset = frozenset()
    folder: Path | None = None
    results: Path | None = None

    @property
    def device(self) -> str:
        """The CPU model or GPU, without the cores a page pinned."""
        return _CORES.sub("", self.build["device"])

    @property
    def pins(self) -> tuple[str, str]:
        """torch and jax, without a local label ("2.13.0+cpu" is 2.13.0)."""
        return tuple(_public(self.build["versions"][name]) for name in ("torch", "jax"))


def _public(version) -> str:
    return str(version).split("+")[0]


def _claims(saved: pd.DataFrame) -> pd.DataFrame:
    keys = list(zip(saved["chapter"], saved["claim_id"], strict=True))
    homes = [claim_map.current(*key) for key in keys]
    # saved_in: the chapter whose result files hold the claim's sides in its own build
    frame = saved.assign(saved_in=saved["chapter"], chapter=[c for c, _ in homes],
                         claim_id=[i for _, i in homes], alias_of="",
                         _moved=[h != k for h, k in zip(homes, keys, strict=True)])
    # a claim saved under its new home wins over an older copy moved there
    frame = frame.sort_values("_moved", kind="stable").drop_duplicates(KEY).drop(columns="_moved")
    own = set(zip(frame["chapter"], frame["claim_id"], strict=True))
    named = [{**row, "claim_id": alias, "alias_of": row["claim_id"]}
             for row in frame.to_dict("records")
             for alias in str(row.get("aliases", "")).split(";")
             if alias not in ("", "nan") and (row["chapter"], alias) not in own]
    return pd.concat([frame, pd.DataFrame(named, columns=frame.columns)], ignore_index=True)


def this_build(results: Path | None = None) -> Build | None:
    """This build, from the claims and stamps in `results` (`_build/results` by default), or
    None; stamps that disagree (cached pages of an older build) are written into its notes."""
    folder = Path(results) if results is not None else env.results_dir()
    if not all((folder / f).exists() for f in (claims.FILE_NAME, provenance.FILE_NAME)):
        return None
    saved = pd.read_csv(folder / claims.FILE_NAME)
    if saved.empty:
        return None
    stamps = provenance.load(folder)
    return Build(THIS_BUILD, bundles.describe_build(folder, strict=False), _claims(saved),
                 frozenset(stamps["build_id"].astype(str)), results=folder)


def _one_build(a: Build, b: Build) -> bool:
    """Whether two builds share a page's build id (cached pages keep theirs in later builds)."""
    return bool((a.build_ids or {a.build["build_id"]}) & (b.build_ids or {b.build["build_id"]})
                - {provenance.OUTSIDE_BUILD})


def builds(root: Path | None = None, results: Path | None = None) -> list[Build]:
    """The ledger's builds, oldest first: the committed bundles (CPU, then GPU, each by date
    and build id), then this build. A bundle of this build's own measurements shows once, as
    this build, its folder named; pages re-run since keep their new numbers."""
    found = [Build(b.name, b.build, _claims(b.claims),
                   frozenset(b.provenance["build_id"].astype(str)), b.folder,
                   b.folder / bundles.RESULTS_FOLDER)
             for b in bundles.load_all(root, current=claim_map.current)]
    this = this_build(results)
    if this is not None:
        same = [b for b in found if _one_build(b, this)]
        if same:
            found.remove(same[-1])
            this = replace(this, folder=same[-1].folder)
    found.sort(key=lambda b: (b.build["device_kind"] != "cpu", b.build["date"],
                              b.build["build_id"]))
    return found + ([this] if this is not None else [])


def verdicts(found: list[Build]) -> pd.DataFrame:
    """One row per claim and build: question, verdict (recomputed), the book's one verdict
    phrase, and the id an alias copies."""
    rows = [{"build": b.label, "chapter": row["chapter"], "claim_id": row["claim_id"],
             "alias_of": row["alias_of"], "question": row["question"],
             "verdict": claims.reread_verdict(row), "phrase": claims.verdict_phrase(row)}
            for b in found for row in b.claims.to_dict("records")]
    return pd.DataFrame(rows, columns=["build", *KEY, "alias_of", "question", "verdict",
                                       "phrase"])


def ratio_of_ratios(was, now) -> tuple[float, float, float]:
    """New over old for one claim of two builds, with a 95% interval: the builds' rounds are
    independent, so in log space the distances from each median to its interval's ends add
    in quadrature. It covers each build's sampling, not what a rebuild moves (`pairs`)."""
    r_old, lo_old, hi_old = (math.log(float(was[k])) for k in ("ratio", "low", "high"))
    r_new, lo_new, hi_new = (math.log(float(now[k])) for k in ("ratio", "low", "high"))
    centre = r_new - r_old
    below = math.hypot(r_new - lo_new, hi_old - r_old)
    above = math.hypot(hi_new - r_new, r_old - lo_old)
    return math.exp(centre), math.exp(centre - below), math.exp(centre + above)


def _decision_band(row) -> float:
    wide = row.get("decision_band")
    return float(row["tie_band"]) if wide is None or wide != wide or wide == "" else float(wide)


def _medians(build: Build) -> pd.DataFrame:
    """Every median step time (seconds) in a build's result files; none where it kept none."""
    files = sorted(build.results.glob("*.csv")) if build.results is not None else []
    frames = [pd.read_csv(f, dtype={"size": str}) for f in files]
    found = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["chapter", "variant", "size", "metric", "value", "unit"])
    found = found[(found["metric"] == "median") & (found["unit"] == "s")]
    return found.assign(variant=found["variant"].map(_spaced))


def _spaced(label) -> str:
    """A variant's label as its result row writes it: "torch.compile · bf16" is saved as
    "torch.compile bf16"."""
    return " ".join(str(label).replace("·", " ").split())


def _median(medians: pd.DataFrame, chapter: str, label: str, question: str) -> float | None:
    """The median of the one result row of `chapter` whose variant is `label` (or, where none
    is, begins with it: a page may add what ran, "torch 2.9 eager (torch 2.9.0)"); where
    several rows have it, the one whose size, then experiment, the claim's question names;
    None where no one row is found."""
    label, rows = _spaced(label), medians[medians["chapter"] == chapter]
    exact = rows[rows["variant"] == label]
    rows = exact if len(exact) else rows[rows["variant"].str.startswith(f"{label} ")]
    for column in ("size", "experiment"):
        if len(rows) > 1:
            rows = rows[[re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w.-])", question)
                         is not None for word in rows[column].astype(str)]]
    return float(rows["value"].iat[0]) if len(rows) == 1 else None


def side_medians(build: Build, claim: dict, medians: pd.DataFrame | None = None) -> dict:
    """{"baseline": seconds, "candidate": seconds} of a claim's two sides in `build`: saved
    with the claim (`baseline_median`, `candidate_median`), else read from the build's
    result files (None for a side not found there: its label is no result row's variant, or
    names several sizes the question does not tell apart)."""
    # claims.csv keeps each side's median since issue 37; an older build's row, merged with
    # a newer one's, may carry the newer build's columns, so ask the build's own file
    saved = {side: claim.get(f"{side}_median") for side in ("baseline", "candidate")}
    if "baseline_median" in build.claims.columns and all(
            isinstance(t, float) and t == t for t in saved.values()):
        return saved
    medians = _medians(build) if medians is None else medians
    chapter = str(claim.get("saved_in") or claim["chapter"])
    return {side: _median(medians, chapter, str(claim[side]), str(claim["question"]))
            for side in ("baseline", "candidate")}


def _time_changed(was: dict, now: dict, times: dict, band: float) -> str:
    """The sides whose median moved beyond `band` between two builds, each as "label old →
    new ms"; NOT_FOUND where a side's median is missing in either build."""
    if any(t is None for pair in times.values() for t in pair):
        return NOT_FOUND
    moved = [f"{now[side]}: {old * 1e3:.3g} → {new * 1e3:.3g} ms"
             for side, (old, new) in times.items()
             if not 1 / (1 + band) <= new / old <= 1 + band]
    return "; ".join(moved) or "both sides, each within the band"


def changes(old: Build, new: Build) -> pd.DataFrame:
    """Each claim both builds made: both verdict phrases, new over old (`ratio_of_ratios`)
    decided by the rule against the wider of the two tie bands, and for a move against the
    wider of their decision bands (a noisy side widens what a move must clear, never what
    "steady" may span): `CHANGES`. Each side's median in both builds (`side_medians`,
    seconds; NaN where not found) and `time changed`: the sides whose median moved beyond
    the decision band, or `NOT_FOUND`. One measurement both builds saved under two ids
    counts once. Refuses builds on two kinds of device."""
    if old.build["device_kind"] != new.build["device_kind"]:
        raise ValueError(f"two builds are compared on one kind of device, not {old.label} "
                         f"and {new.label}")
    both = old.claims.merge(new.claims, on=KEY, suffixes=("_old", "_new"))
    both = both[(both["alias_of_old"] == "") | (both["alias_of_new"] == "")]
    medians = {b.label: _medians(b) for b in (old, new)}
    rows = []
    for pair in both.to_dict("records"):
        was, now = ({k.removesuffix(s): v for k, v in pair.items() if not k.endswith(o)}
                    for s, o in (("_old", "_new"), ("_new", "_old")))
        ratio, low, high = ratio_of_ratios(was, now)
        tie = max(float(was["tie_band"]), float(now["tie_band"]))
        wide = max(tie, _decision_band(was), _decision_band(now))
        verdict = classify(ratio, low, high, TieBand(tie), TieBand(wide))
        sides = [side_medians(b, row, medians[b.label]) for b, row in ((old, was), (new, now))]
        times = {side: (sides[0][side], sides[1][side]) for side in ("baseline", "candidate")}
        rows.append({"chapter": pair["chapter"], "claim_id": pair["claim_id"],
                     "question": now["question"], "old": claims.verdict_phrase(was),
                     "new": claims.verdict_phrase(now), "new / old": ratio, "low": low,
                     "high": high, "band": tie, "decision band": wide,
                     "change": CHANGES[verdict],
                     **{f"{side} {when}": math.nan if t is None else t for side in times
                        for when, t in zip(("old", "new"), times[side], strict=True)},
                     "time changed": _time_changed(was, now, times, wide)})
    return pd.DataFrame(rows, columns=[*KEY, "question", "old", "new", "new / old", "low",
                                       "high", "band", "decision band", "change",
                                       *SIDE_COLUMNS, "time changed"]).set_index(KEY)


def differences(old: Build, new: Build) -> dict[str, tuple]:
    """{field: (old, new)} for each build.json fact two builds differ in but the date and
    build id: the device model, cores, scale, Python, commit, each version as installed
    (a local tag kept: torch's CPU wheel "2.13.0+cpu" is not PyPI's "2.13.0")."""
    was, now = ({"device": b.device, **{k: b.build[k] for k in ("cores", "scale", "python",
                                                                  "commit")},
                 **{n: str(b.build["versions"].get(n)) for n in bundles.VERSION_NAMES}}
                for b in (old, new))
    return {field: (was[field], now[field]) for field in was if was[field] != now[field]}


def _kind(differ: dict, old: Build, new: Build) -> str:
    """`PAIR_KINDS`: what the pair changed. A commit marked uncommitted (or unknown) is never
    the same code as another build's: what its working tree held is not recorded."""
    if "device" in differ or "cores" in differ:
        return "device change"
    if "torch" in differ or "jax" in differ:
        return "pins change"
    commits = (old.build["commit"], new.build["commit"])
    known = all(provenance.UNCOMMITTED not in c and c != "unknown" for c in commits)
    return "rebuild" if known and "commit" not in differ else "code change"


def headline(old: Build, new: Build) -> str:
    """A pair of builds as the page heads its rows, "old → new", naming the change of machine
    where there is one ("…, on another CPU: Intel Xeon → AMD EPYC"): a claim can move there
    with no release at all, and a label such as "this build" does not say so."""
    title = f"{old.label} → {new.label}"
    labels = [b.build["device"] for b in (old, new)]
    if machine(labels[0]) == machine(labels[1]):
        return title
    kinds = [cpu_kind(label) for label in labels]
    shown = kinds if kinds[0] != kinds[1] else [machine(label) for label in labels]
    what = "CPU" if old.build["device_kind"] == "cpu" else "GPU"
    return f"{title}, on another {what}: {shown[0]} → {shown[1]}"


def pairs(found: list[Build]) -> pd.DataFrame:
    """Every two builds on one kind of device at one scale, older first: its `headline`,
    device, torch, jax and commit ("=" where they agree), what else differs, what kind of pair
    it is
    (`PAIR_KINDS`: a rebuild keeps all four), and how many claims both made moved, held
    steady or stayed undecided."""
    rows = []
    for old, new in itertools.combinations(found, 2):
        if (old.build["device_kind"], old.build["scale"]) != (new.build["device_kind"],
                                                                new.build["scale"]):
            continue
        differ = differences(old, new)
        counts = changes(old, new)["change"].value_counts()
        shown = {k: "=" if k not in differ else f"{differ[k][0]} → {differ[k][1]}"
                 for k in ("device", "torch", "jax", "commit")}
        rows.append({"old": old.label, "new": new.label, "headline": headline(old, new), **shown,
                     "also differ": "; ".join(f"{k} {a} → {b}" for k, (a, b) in differ.items()
                                              if k not in shown),
                     "kind": _kind(differ, old, new), "claims both made": int(counts.sum()),
                     **{c: int(counts.get(c, 0)) for c in ("moved", "steady", "undecided")}})
    return pd.DataFrame(rows, columns=["old", "new", "headline", "device", "torch", "jax", "commit",
                                       "also differ", "kind", "claims both made", "moved",
                                       "steady", "undecided"])


def releases(root: Path | None = None) -> tuple[pd.DataFrame, dict[str, Build]]:
    """The release sweeps under `root` (`book/data/releases/`): runs.csv, one row per attempt,
    the rebuild control's last (sweep "control"), and each finished run's bundle, validated,
    as a Build labelled "<sweep> <release>" (or "control"); empty where nothing ran."""
    root = Path(root) if root is not None else env.book_root() / RELEASES
    runs, found = [], {}
    for folder, label in ((root, None), (root / CONTROL_FOLDER, "control")):
        if not (folder / "runs.csv").is_file():
            continue
        attempts = pd.read_csv(folder / "runs.csv", dtype=str, keep_default_na=False)
        for run in attempts.to_dict("records"):
            if run["status"] == "ok":
                bundle = bundles.load(folder / run["bundle"])
                if (bundle.build.get("sweep"), bundle.build.get("release")) != (
                        run["sweep"], run["release"]):
                    raise bundles.BundleError(
                        f"{folder / run['bundle']}: build.json names sweep "
                        f"{bundle.build.get('sweep')!r}, release {bundle.build.get('release')!r};"
                        f" runs.csv names {run['sweep']!r}, {run['release']!r}")
                name = label or f"{run['sweep']} {run['release']}"
                found[name] = Build(name, bundle.build, _claims(bundle.claims),
                                    folder=bundle.folder,
                                    results=bundle.folder / bundles.RESULTS_FOLDER)
        runs.append(attempts.assign(sweep=label) if label else attempts)
    return (pd.concat(runs, ignore_index=True) if runs else pd.DataFrame()), found


def sweeps(runs: pd.DataFrame, found: dict[str, Build]) -> dict[str, list[str]]:
    """Each sweep's finished runs in version order: the jax sweep's, and the torch sweep's
    with the held point (the jax sweep's run at the jax the torch sweep holds) at its torch."""
    held = set(runs.loc[runs["sweep"] == "torch", "jax"]) if len(runs) else set()
    order = {"jax": [k for k in found if k.startswith("jax ")],
             "torch": [k for k in found if k.startswith("torch ")
                       or (k.startswith("jax ") and found[k].pins[1] in held)]}
    return {sweep: sorted(labels, key=lambda k: Version(found[k].pins[sweep == "jax"]))
            for sweep, labels in order.items()}
