"""Which run of the book measured each chapter's results.

`make book` names every build (`DEEPDIVE_BUILD_ID`: its UTC start time and commit), and
each chapter stamps the results it saves with that name, its commit, time, device,
framework versions and the allocator regime its timings ran under (`deepdive.core.allocator`),
in `_build/results/provenance.csv`. A chapter served from the execution cache keeps the stamp
of the build that ran it. The Reproduce page lists the stamps, the choosing chapter shows the ones
its evidence came from, and the site's tests check that the two agree.
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
from pathlib import Path

from deepdive.core import env
from deepdive.core.env import results_dir

__all__ = ["COLUMNS", "FILE_NAME", "OUTSIDE_BUILD", "UNCOMMITTED", "build_id", "commit", "load",
           "path", "stamp"]

FILE_NAME = "provenance.csv"
COLUMNS = ("chapter", "build_id", "commit", "executed_at", "device", "scale", "torch", "jax",
           "allocator")
OUTSIDE_BUILD = "none (run outside make book)"
UNCOMMITTED = "+uncommitted"  # marks a commit whose tracked files had changed


def build_id() -> str:
    """This build's name, set by `make book`; a notebook run by hand has none."""
    return os.environ.get("DEEPDIVE_BUILD_ID") or OUTSIDE_BUILD


def commit() -> str:
    """The commit, marked "+uncommitted" when tracked files differ from it."""
    found = env.git_commit()
    if found is None:
        return "unknown"
    try:
        changes = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return found
    return f"{found}{UNCOMMITTED}" if changes.stdout.strip() else found


def path() -> Path:
    return results_dir() / FILE_NAME


def stamp(chapter: str, device: str | None = None, versions: dict | None = None) -> Path:
    """Record that `chapter` saved results now, in this build; replaces its older stamp.
    `device` is where its results were measured (default `env.device_label()`);
    `versions` names the torch and jax that ran, where this process's are not all of them
    (the PyTorch/XLA page's routes run torch 2.9 in a worker)."""
    import pandas as pd

    from deepdive.core import allocator

    if not chapter or not isinstance(chapter, str):
        raise ValueError(f"chapter must be a non-empty name such as '01_vmap', got {chapter!r}")
    unknown = set(versions or {}) - {"torch", "jax"}
    if unknown:
        raise ValueError(f"versions names torch and jax only, got {sorted(unknown)}")
    installed = env.versions()
    named = {name: (versions or {}).get(name) or installed.get(name) or "none"
             for name in ("torch", "jax")}
    row = {"chapter": chapter, "build_id": build_id(), "commit": commit(),
           "executed_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
           "device": device or env.device_label(), "scale": env.scale(), **named,
           "allocator": allocator.describe()}
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = load()
    frames = [pd.DataFrame([row], columns=COLUMNS)]
    if kept is not None:
        frames.insert(0, kept[kept["chapter"] != chapter])
    merged = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    merged.sort_values("chapter").to_csv(temporary, index=False)
    temporary.replace(target)  # atomic: a reader never sees half a file
    return target


def load(folder: Path | None = None):
    """The stamps in `folder` (this build's results by default) as a DataFrame, or None
    before any chapter saved results."""
    import pandas as pd

    file = Path(folder) / FILE_NAME if folder is not None else path()
    return pd.read_csv(file, dtype=str) if file.exists() else None
