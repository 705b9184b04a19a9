"""Which releases `make releases` measures, what each installs, and the runs' ledger file.

Two sweeps, one package moving at a time: every jax release since the book's old pins with
torch held at the book's pin, and every torch release since them with jax held at the
book's pin. The held point (the book's own pins) is one run that belongs to both sweeps.
Each release installs the flax that supports it (flax 0.12.9 and later need jax 0.11.1;
flax 0.12.8 is the newest for jax 0.10.2 and 0.11.0) and the book's optax; what else it
needs pip resolves. Pure data and decisions: nothing here installs or imports a framework.
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from deepdive.core import env

__all__ = ["CONTROL_FOLDER", "HELD", "JAX_FLAX", "OPTAX", "RUN_COLUMNS", "STATUSES", "SWEEPS",
           "TORCH_RELEASES", "Release", "Run", "held_point", "read_runs", "releases",
           "releases_dir", "select", "write_run"]

SWEEPS = ("jax", "torch")
# jax release -> the newest flax that supports it (flax's Requires-Dist, read 2026-11-28)
JAX_FLAX = {"0.10.2": "0.12.8", "0.11.0": "0.12.8", "0.11.1": "0.12.12", "0.11.2": "0.12.12",
            "0.12.0": "0.12.12", "0.12.0.1": "0.12.12"}
TORCH_RELEASES = ("2.13.0", "2.14.1", "2.15.0")  # the newest patch of each minor release
OPTAX = "0.2.8"  # needs jax 0.5.3 or later: every release here
HELD = {"jax": "0.12.0.1", "torch": "2.15.0"}  # the book's pins: the other sweep holds these
STATUSES = ("ok", "install failed", "run failed")
# A second run of the held point, after the sweeps, with its own runs.csv and bundle in this
# subfolder: the rebuild control (what moves between two runs of the same releases)
CONTROL_FOLDER = "control"
RUN_COLUMNS = ("sweep", "release", "python", "torch", "jax", "jaxlib", "flax", "optax",
               "status", "error", "failed_workloads", "install_s", "run_s", "bundle", "date")


@dataclass(frozen=True)
class Release:
    """One run: the swept package at `version`, the other held at the book's pin."""

    sweep: str
    version: str

    def __post_init__(self):
        if self.sweep not in SWEEPS:
            raise ValueError(f"sweep must be one of {SWEEPS}, got {self.sweep!r}")
        known = JAX_FLAX if self.sweep == "jax" else TORCH_RELEASES
        if self.version not in known:
            raise ValueError(f"{self.sweep} {self.version!r} is not in the matrix; accepted: "
                             f"{', '.join(known)} (add a release to deepdive.releases.matrix)")

    @property
    def jax(self) -> str:
        return self.version if self.sweep == "jax" else HELD["jax"]

    @property
    def torch(self) -> str:
        return self.version if self.sweep == "torch" else HELD["torch"]

    @property
    def requirements(self) -> tuple[str, ...]:
        """What pip installs into the release's environment, exactly pinned."""
        return (f"torch=={self.torch}", f"jax=={self.jax}", f"jaxlib=={self.jax}",
                f"flax=={JAX_FLAX[self.jax]}", f"optax=={OPTAX}")

    @property
    def name(self) -> str:
        return f"{self.sweep} {self.version}"


def held_point() -> Release:
    """The run at the book's own pins, in jax's sweep (the control repeats it)."""
    return Release("jax", HELD["jax"])


def releases() -> list[Release]:
    """Every run, jax's sweep first: the held point once, in jax's sweep."""
    runs = [Release("jax", v) for v in JAX_FLAX]
    return runs + [Release("torch", v) for v in TORCH_RELEASES if v != HELD["torch"]]


def select(wanted: list[str] | None) -> list[Release]:
    """The runs named by `wanted` ("jax==0.11.1", "torch==2.14.1", "jax" for a whole sweep),
    all of them when none is named; an unknown name is refused, listing what is accepted."""
    every = releases()
    if not wanted:
        return every
    chosen = []
    for item in wanted:
        sweep, _, version = item.partition("==")
        found = [r for r in every if r.sweep == sweep and (not version or r.version == version)]
        if not found:
            raise ValueError(f"no release run {item!r}; accepted: jax, torch, "
                             + ", ".join(f"{r.sweep}=={r.version}" for r in every))
        chosen += [r for r in found if r not in chosen]
    return chosen


@dataclass(frozen=True)
class Run:
    """One row of runs.csv: what a release's run installed, how it ended, how long it took."""

    sweep: str
    release: str
    python: str = ""
    torch: str = ""
    jax: str = ""
    jaxlib: str = ""
    flax: str = ""
    optax: str = ""
    status: str = "ok"
    error: str = ""
    failed_workloads: str = ""
    install_s: float = 0.0
    run_s: float = 0.0
    bundle: str = ""
    date: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


assert tuple(f.name for f in fields(Run)) == RUN_COLUMNS


def releases_dir() -> Path:
    """Where release bundles and runs.csv are committed: `book/data/releases/`."""
    return env.book_root() / "book" / "data" / "releases"


def read_runs(path: Path) -> list[dict]:
    """runs.csv's rows as dicts (none where the file does not exist yet)."""
    if not Path(path).is_file():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def write_run(path: Path, run: Run) -> Path:
    """Put `run` into runs.csv, replacing the row of the same sweep and release, rows kept
    in the matrix's order (unknown releases last). The bundle of the row replaced goes with
    it where the new run wrote another (a later day's) or none: every bundle beside
    runs.csv is one row's, which the ledger page checks."""
    path = Path(path)
    kept = read_runs(path)
    for old in kept:
        superseded = old["bundle"] and old["bundle"] != run.bundle
        if (old["sweep"], old["release"]) == (run.sweep, run.release) and superseded:
            shutil.rmtree(path.parent / old["bundle"], ignore_errors=True)
    rows = [r for r in kept if (r["sweep"], r["release"]) != (run.sweep, run.release)]
    rows.append({k: str(v) for k, v in asdict(run).items()})
    order = {(r.sweep, r.version): i for i, r in enumerate(releases())}
    rows.sort(key=lambda r: order.get((r["sweep"], r["release"]), len(order)))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RUN_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    temporary.replace(path)
    return path
