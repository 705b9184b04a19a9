"""Dated bundles of a build's evidence, committed under `book/data/builds/`: the ledger page
sets every committed bundle beside this build, claim by claim.

A bundle is one folder, `<date>_<device>_torch-<version>_jax-<version>` (for example
`2026-11-28_intel-xeon-2core_torch-2.13.0_jax-0.10.2`, named by the day the build started and
the CPU's kind, `deepdive.book.machines.cpu_kind`, so that two CPUs on one day get two), holding
the build's `claims.csv` and `provenance.csv`, its chapters' result files under `results/`,
and `build.json`: the date, build id, commit, device, cores, Python, framework versions,
scale, tie band, allocator regime and free-text notes. `python -m deepdive.book.bundles
write` (`make bundle`) writes this build's; it refuses evidence that is not one build's
(chapters that disagree on device, scale, torch or jax) and a folder over `MAX_BYTES`.
`load` and `load_all` read bundles back and validate them: a malformed one raises
`BundleError`, naming the file and the field, and so fails the book's build. Nothing here
imports torch or jax.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import json
import math
import platform
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepdive.book import claim_ids, claims, provenance, results
from deepdive.book.machines import cpu_kind
from deepdive.core import env

__all__ = ["BUILD_FIELDS", "BUILD_FILE", "MAX_BYTES", "RESULTS_FOLDER", "TWO_BANDS",
           "VERSION_NAMES", "Bundle", "BundleError", "builds_dir", "bundle_name", "claim_columns",
           "describe_build", "load", "load_all", "main", "write"]

BUILD_FILE = "build.json"
RESULTS_FOLDER = "results"
MAX_BYTES = 5_000_000  # a bundle is committed: a few hundred kB is usual, 5 MB is a mistake
VERSION_NAMES = ("torch", "jax", "jaxlib", "flax", "optax", "transformers", "triton", "numpy")
# build.json's fields and the type each must have (versions: a dict of VERSION_NAMES)
BUILD_FIELDS = {"date": str, "build_id": str, "commit": str, "device": str, "device_kind": str,
                "cores": int, "python": str, "versions": dict, "scale": str,
                "tie_band": float, "allocator": str, "notes": str}
DEVICE_KINDS = ("cpu", "gpu")
_KIND_WORDS = {str: "text", int: "a whole number", float: "a number", dict: "a JSON object"}
_CPU_LABEL = re.compile(r"^(?P<model>.*) \((?:(?P<used>\d+) of )?(?P<total>\d+) cores?\)$")


class BundleError(ValueError):
    """A bundle that cannot be written or read: the message names the file and the field."""


@dataclass(frozen=True)
class Bundle:
    """One committed build's evidence, read and validated (`load`)."""

    name: str
    folder: Path
    build: dict
    claims: object  # pandas DataFrame: claims.csv as saved
    provenance: object  # pandas DataFrame: provenance.csv as saved


def builds_dir() -> Path:
    """Where bundles are committed: `book/data/builds/` at the book's root."""
    return env.book_root() / "book" / "data" / "builds"


def claim_columns() -> tuple[str, ...]:
    """The claims.csv columns a bundle must have: all of them but those files saved before
    they existed lack (`claims.OPTIONAL_COLUMNS`)."""
    return tuple(c for c in claims.COLUMNS if c not in claims.OPTIONAL_COLUMNS)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-.")


_BUILD_START = re.compile(r"^(\d{4})(\d{2})(\d{2})T\d{6}Z")  # make's DEEPDIVE_BUILD_ID


def bundle_name(build: dict) -> str:
    """The folder name of a bundle from its build.json: the day the build started (from its
    build id, which `make` names by its UTC start; else its date), device (a CPU's kind and
    cores, "intel-xeon-2core"; a GPU's name), torch and jax. Two builds of one release on
    one machine started on one day share a name: `write` refuses the second unless told to
    replace the first."""
    # without a local version label: torch's CPU wheels are "2.13.0+cpu"
    torch, jax = (_slug(build["versions"][name].split("+")[0]) for name in ("torch", "jax"))
    device = (f"{_slug(cpu_kind(build['device']))}-{build['cores']}core"
              if build["device_kind"] == "cpu" else f"gpu-{_slug(build['device'])}")
    started = _BUILD_START.match(str(build["build_id"]))
    day = "-".join(started.groups()) if started else build["date"]
    return f"{day}_{device}_torch-{torch}_jax-{jax}"


# ---- this build ---------------------------------------------------------------------------

def _machine(label: str) -> tuple:
    """What makes two device labels the same device: a GPU's name; a CPU's model and core
    count (a chapter that pinned its threads names fewer cores *of* the same count)."""
    found = _CPU_LABEL.match(str(label))
    return ("gpu", str(label)) if found is None else ("cpu", found["model"], found["total"])


def _names(version: str, value: str) -> bool:
    """Whether a stamp's version names the release `value`, with or without its local label:
    the PyTorch/XLA page stamps both torches that ran, as "2.9.0 (routes, in the worker);
    2.13.0 (this page)" where the other pages stamp "2.13.0+cpu"."""
    release = re.escape(value.split("+")[0])
    return version == value or re.search(rf"(?<![\w.+]){release}(?:\+[\w.]+)?(?![\w.+])",
                                         str(version)) is not None


def _disagreements(stamps) -> tuple[dict, list[str]]:
    """The build's device, scale, torch and jax from its chapters' stamps, and a sentence
    for each of them the chapters disagree on (none for one build's evidence)."""
    facts, problems = {}, []

    def chapters_of(values) -> str:
        return ", ".join(stamps.loc[values, "chapter"])

    labels = stamps["device"].astype(str)
    gpus = labels[[_machine(d)[0] == "gpu" for d in labels]]
    cpus = labels[[_machine(d)[0] == "cpu" for d in labels]]
    # On a GPU build some chapters run on its CPU anyway (the PyTorch/XLA page, simulated
    # devices): one GPU and one CPU make one machine; two of either do not.
    facts["device"] = (gpus.mode().iat[0] if len(gpus) else cpus.mode().iat[0])
    for group in (gpus, cpus):
        machines = {_machine(d) for d in group}
        if len(machines) > 1:
            named = "; ".join(f"{d} ({chapters_of(group.index[group == d])})"
                              for d in dict.fromkeys(group))
            problems.append(f"{provenance.FILE_NAME}: chapters disagree on device: {named}")
    for field in ("scale", "torch", "jax"):
        values = stamps[field].astype(str)
        facts[field] = values.mode().iat[0]
        differ = values[[not _names(v, facts[field]) for v in values]]
        if len(differ):
            others = "; ".join(f"{v} ({chapters_of(differ.index[differ == v])})"
                               for v in dict.fromkeys(differ))
            agree = chapters_of(values.index[~values.index.isin(differ.index)])
            problems.append(f"{provenance.FILE_NAME}: chapters disagree on {field}: "
                            f"{facts[field]} ({agree}) against {others}")
    return facts, problems


def _read_evidence(folder: Path):
    """claims.csv and provenance.csv of a results folder, refused where either is missing."""
    import pandas as pd

    for name in (claims.FILE_NAME, provenance.FILE_NAME):
        if not (folder / name).exists():
            raise BundleError(f"{_shown(folder / name)}: file missing: build the book first "
                              "(make book), then write its bundle")
    return pd.read_csv(folder / claims.FILE_NAME), provenance.load(folder)


def describe_build(folder: Path | None = None, notes: str = "", strict: bool = True) -> dict:
    """build.json for the build whose results are in `folder` (this build's by default).

    Device, scale, torch and jax come from the chapters' stamps (provenance.csv); `strict`
    refuses stamps that disagree on any of them, naming the chapters (a bundle is one
    build's evidence), else each disagreement is written into `notes` (the ledger page
    shows this build so, where cached chapters kept an older build's stamps). The date,
    build id and commit are those of the chapter that ran last; the tie band is claims.csv's
    `build_band` on the build's device; the other versions and the Python are this
    environment's (`write` checks it is the build's)."""
    folder = Path(folder) if folder is not None else env.results_dir()
    saved, stamps = _read_evidence(folder)
    for name, frame in ((claims.FILE_NAME, saved), (provenance.FILE_NAME, stamps)):
        if frame.empty:
            raise BundleError(f"{_shown(folder / name)}: no rows: no chapter saved its "
                              "evidence in this build")
    facts, problems = _disagreements(stamps)
    kind = "cpu" if env.is_cpu_label(facts["device"]) else "gpu"
    band, calibrations = _build_band(saved, kind)
    problems += [calibrations] if calibrations else []
    if problems and strict:
        raise BundleError(f"{_shown(folder)}: " + "; ".join(problems) + ". A bundle is one "
                          "build's evidence: rebuild those chapters in one build (make clean; "
                          "make book)")
    last = stamps.sort_values("executed_at").iloc[-1]
    installed: dict[str, str] = {}
    # The first of a name on sys.path, as `import` finds it: a release's throwaway environment
    # (deepdive.releases) lays its own packages over the book's
    for d in importlib.metadata.distributions():  # triton: not in env.versions()
        installed.setdefault((d.metadata["Name"] or "").lower(), d.version)
    versions = {name: installed.get(name) for name in VERSION_NAMES}
    versions |= {"torch": facts["torch"], "jax": facts["jax"]}
    return {"date": str(last["executed_at"])[:10], "build_id": str(last["build_id"]),
            "commit": str(last["commit"]), "device": facts["device"], "device_kind": kind,
            "cores": env.available_cores(), "python": platform.python_version(),
            "versions": versions,
            "scale": facts["scale"], "tie_band": band,
            "allocator": "; ".join(dict.fromkeys(stamps["allocator"].astype(str))),
            "notes": "; ".join(filter(None, [notes, *problems]))}


TWO_BANDS = "their claims were decided against two calibrations"


def _build_band(saved, kind: str) -> tuple[float, str]:
    """claims.csv's build band on the build's device (the CPU's band is another one on a GPU
    build: its chapters that ran on the CPU anyway were decided against it), and a sentence
    where its chapters were decided against more than one calibration."""
    on_device = saved[[env.is_cpu_label(d) == (kind == "cpu") for d in saved["device"]]]
    rows = on_device if len(on_device) else saved
    rounded = rows["build_band"].astype(float).round(12)
    bands = sorted(set(rounded))
    named = "; ".join(f"{b} ({', '.join(dict.fromkeys(rows['chapter'][rounded == b]))})"
                      for b in bands)
    if len(bands) == 1:
        return bands[-1], ""
    return bands[-1], f"{claims.FILE_NAME}: chapters disagree on build_band: {named}; {TWO_BANDS}"


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def write(results_folder: Path | None = None, into: Path | None = None, notes: str = "",
          replace: bool = False, fields: dict[str, str] | None = None) -> Path:
    """Write the build in `results_folder` (this build's `_build/results` by default) as a
    bundle under `into` (`builds_dir()`), and return its folder (`make bundle`; the ledger
    page's "Add your build"). Refuses (`BundleError`, saying what and why) evidence that is
    missing or not one build's, a claim id the registry does not know, an environment whose
    torch or jax is not the build's, a bundle over `MAX_BYTES`, and an existing folder of
    the same name unless `replace`. `fields` adds text fields to build.json (a release
    sweep's `sweep` and `release`); they may not replace one of `BUILD_FIELDS`. The bundle
    is validated (`load`) before it takes its place."""
    import pandas as pd

    source = Path(results_folder) if results_folder is not None else env.results_dir()
    build = describe_build(source, notes=notes)
    clashing = sorted(set(fields or {}) & set(BUILD_FIELDS))
    if clashing:
        raise BundleError(f"fields may not replace build.json's own {clashing}")
    build |= {str(k): str(v) for k, v in (fields or {}).items()}
    # named here, in the build's own file, rather than in the bundle being written
    _check_claims(pd.read_csv(source / claims.FILE_NAME), _shown(source / claims.FILE_NAME),
                  claim_ids.CLAIM_IDS, None)
    installed = env.versions()
    for name in ("torch", "jax"):
        if installed.get(name) != build["versions"][name]:
            raise BundleError(f"this environment has {name} {installed.get(name)}, but the "
                              f"build in {_shown(source)} ran {build['versions'][name]}: write "
                              "its bundle with the environment that built it")
    # each page that stamped the build and saved records (`<chapter>.csv`, as
    # `deepdive.book.results.Results` saves them); caches and calibration stay behind
    stamped = sorted(provenance.load(source)["chapter"])
    files = [claims.FILE_NAME, provenance.FILE_NAME,
             *(f"{RESULTS_FOLDER}/{c}.csv" for c in stamped if (source / f"{c}.csv").is_file())]
    text = json.dumps(build, indent=2) + "\n"
    size = len(text.encode()) + sum((source / Path(f).name).stat().st_size for f in files)
    if size > MAX_BYTES:
        raise BundleError(f"the bundle of {_shown(source)} would hold {size / 1e6:.1f} MB, over "
                          f"the {MAX_BYTES / 1e6:.0f} MB a committed bundle may: "
                          + ", ".join(f"{f} {(source / Path(f).name).stat().st_size / 1e6:.1f} MB"
                                      for f in files))
    root = Path(into) if into is not None else builds_dir()
    target = root / bundle_name(build)
    if target.exists() and not replace:
        raise BundleError(f"{_shown(target)} exists: pass --replace to write over it")
    staging = root / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / RESULTS_FOLDER).mkdir(parents=True)
    try:
        for name in files:
            shutil.copyfile(source / Path(name).name, staging / name)
        (staging / BUILD_FILE).write_text(text)
        load(staging, name=target.name)  # a bundle the book could not read is never written
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


# ---- reading and validating ---------------------------------------------------------------

def _shown(path: Path) -> str:
    """A path as the reader knows it: from the book's root where it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(env.book_root()))
    except ValueError:
        return str(path)


def _read_csv(path: Path, required, where: str):
    import pandas as pd

    if not path.is_file():
        raise BundleError(f"{where}: file missing")
    try:
        frame = pd.read_csv(path)
    except (ValueError, OSError) as error:  # pandas' EmptyDataError and ParserError
        raise BundleError(f"{where}: not a readable CSV ({error})") from error
    for column in required:
        if column not in frame.columns:
            raise BundleError(f"{where}: missing column {column!r}")
    return frame


def _check_build(build, where: str, name: str | None) -> None:
    if not isinstance(build, dict):
        raise BundleError(f"{where}: not a JSON object")
    for field, kind in BUILD_FIELDS.items():
        if field not in build:
            raise BundleError(f"{where}: missing field {field!r}")
        value = build[field]
        fits = (isinstance(value, int | float) and not isinstance(value, bool) if kind is float
                else isinstance(value, kind) and not isinstance(value, bool))
        if not fits:
            raise BundleError(f"{where}: field {field!r} must be {_KIND_WORDS[kind]}, got "
                              f"{value!r}")
    for name_ in VERSION_NAMES:
        if name_ not in build["versions"]:
            raise BundleError(f"{where}: missing field 'versions.{name_}'")
    for name_ in ("torch", "jax"):
        if not isinstance(build["versions"][name_], str):
            raise BundleError(f"{where}: field 'versions.{name_}' must name a version")
    try:
        _dt.date.fromisoformat(build["date"])
    except ValueError as error:
        raise BundleError(f"{where}: field 'date' must be YYYY-MM-DD, got "
                          f"{build['date']!r}") from error
    checks = {"device_kind": build["device_kind"] in DEVICE_KINDS,
              "scale": build["scale"] in env.SCALES, "cores": build["cores"] >= 1,
              "tie_band": 0 <= build["tie_band"] < 10}
    for field, fine in checks.items():
        if not fine:
            raise BundleError(f"{where}: field {field!r} has an impossible value "
                              f"{build[field]!r}")
    if name != bundle_name(build):
        raise BundleError(f"{where}: the folder's name {name!r} does not match its fields "
                          f"(date, device, cores, torch, jax): expected {bundle_name(build)!r}")


def _check_claims(frame, where: str, patterns, current) -> None:
    if frame.empty:
        raise BundleError(f"{where}: no claims")
    for row, (chapter, claim_id) in enumerate(zip(frame["chapter"], frame["claim_id"],
                                                  strict=True), start=1):
        followed = current(str(chapter), str(claim_id))[1] if current else str(claim_id)
        if not claim_ids.known(followed, patterns):
            raise BundleError(f"{where}: unknown claim id {claim_id!r} (row {row}); a new "
                              "claim's id needs a pattern in deepdive.book.claim_ids.CLAIM_IDS")
    seen: dict[tuple, int] = {}
    for row, key in enumerate(zip(frame["chapter"], frame["claim_id"], strict=True), start=1):
        if key in seen:
            raise BundleError(f"{where}: claim id {key[1]!r} of {key[0]} twice (rows "
                              f"{seen[key]} and {row})")
        seen[key] = row
    for row, (_, saved) in enumerate(frame.iterrows(), start=1):
        numbers = {}
        for column in ("ratio", "low", "high", "tie_band", "build_band"):
            try:
                numbers[column] = float(saved[column])
            except (TypeError, ValueError):
                numbers[column] = math.nan
            least = 0 if column.endswith("band") else 1e-300  # a ratio is positive
            if not (math.isfinite(numbers[column]) and numbers[column] >= least):
                raise BundleError(f"{where}: column {column!r} must be a positive number, got "
                                  f"{saved[column]!r} (row {row})")
        if not numbers["low"] <= numbers["ratio"] <= numbers["high"]:
            raise BundleError(f"{where}: the interval [low, high] must hold the ratio (row {row})")
        wide = saved["decision_band"]  # empty in rows saved before decision bands existed
        if wide == wide and not float(wide) >= numbers["tie_band"]:
            raise BundleError(f"{where}: column 'decision_band' may not be narrower than "
                              f"'tie_band' (row {row})")


def load(folder: Path, patterns=claim_ids.CLAIM_IDS,
         current: Callable[[str, str], tuple[str, str]] | None = None,
         name: str | None = None) -> Bundle:
    """Read and validate the bundle in `folder` (the ledger page reads every committed one);
    raises `BundleError` naming the file and the field: a missing file (claims.csv,
    provenance.csv, build.json), a missing column or field, no claims, a claim id no
    pattern of `patterns` knows (after `current`, the chapters' map of moved claims, where
    given), a number the verdict rule cannot read, or a folder name that does not match
    build.json. `name` is the folder's name to check (default: its own)."""
    folder = Path(folder)
    name = folder.name if name is None else name
    if not folder.is_dir():
        raise BundleError(f"{_shown(folder)}: not a bundle folder")
    where = f"{_shown(folder)}/{BUILD_FILE}"
    if not (folder / BUILD_FILE).is_file():
        raise BundleError(f"{where}: file missing")
    try:
        build = json.loads((folder / BUILD_FILE).read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise BundleError(f"{where}: not valid JSON ({error})") from error
    _check_build(build, where, name)
    saved = _read_csv(folder / claims.FILE_NAME, claim_columns(),
                      f"{_shown(folder)}/{claims.FILE_NAME}")
    _check_claims(saved, f"{_shown(folder)}/{claims.FILE_NAME}", patterns, current)
    stamps = _read_csv(folder / provenance.FILE_NAME, provenance.COLUMNS,
                       f"{_shown(folder)}/{provenance.FILE_NAME}")
    for file in sorted((folder / RESULTS_FOLDER).glob("*")):
        _read_csv(file, tuple(c for c in results.COLUMNS if c not in results.OPTIONAL_COLUMNS),
                  f"{_shown(folder)}/{RESULTS_FOLDER}/{file.name}")
    return Bundle(name, folder, build, saved, stamps)


def load_all(root: Path | None = None, patterns=claim_ids.CLAIM_IDS,
             current: Callable[[str, str], tuple[str, str]] | None = None) -> list[Bundle]:
    """Every bundle under `root` (`builds_dir()` by default), validated, oldest first; none
    where the folder does not exist. Hidden folders (a write in progress) are skipped."""
    root = Path(root) if root is not None else builds_dir()
    if not root.is_dir():
        return []
    found = [load(folder, patterns, current) for folder in sorted(root.iterdir())
             if folder.is_dir() and not folder.name.startswith(".")]
    return sorted(found, key=lambda b: (b.build["date"], b.name))


def main(argv: list[str] | None = None) -> int:
    """`python -m deepdive.book.bundles write [--results DIR] [--into DIR] [--notes TEXT]
    [--replace] [--field KEY=VALUE ...]` writes this build's bundle; `check [--into DIR]`
    validates the committed ones. Prints what it did, or why it refused (exit status 1)."""
    parser = argparse.ArgumentParser(prog="python -m deepdive.book.bundles",
                                     description="Write or check bundles of a build's evidence.")
    commands = parser.add_subparsers(dest="command", required=True)
    writing = commands.add_parser("write", help="write this build's bundle")
    writing.add_argument("--results", type=Path, help="the build's results (default: "
                         "_build/results)")
    writing.add_argument("--into", type=Path, help="where bundles live (default: "
                         "book/data/builds)")
    writing.add_argument("--notes", default="", help="free text kept in build.json")
    writing.add_argument("--replace", action="store_true",
                         help="write over a bundle of the same name")
    writing.add_argument("--field", action="append", default=[], metavar="KEY=VALUE",
                         help="a text field added to build.json (repeatable)")
    checking = commands.add_parser("check", help="validate every committed bundle")
    checking.add_argument("--into", type=Path, help="where bundles live")
    options = parser.parse_args(argv)
    try:
        if options.command == "write":
            bad = [f for f in options.field if "=" not in f]
            if bad:
                raise BundleError(f"--field takes KEY=VALUE, got {bad}")
            target = write(options.results, options.into, options.notes, options.replace,
                           dict(f.split("=", 1) for f in options.field))
            print(f"wrote {_shown(target)} ({_folder_bytes(target) / 1e3:.1f} kB)")
        else:
            found = load_all(options.into)
            print(f"{len(found)} bundle{'s' * (len(found) != 1)} valid: "
                  + (", ".join(b.name for b in found) or "none committed"))
    except BundleError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
