"""Colab's first cell: add only what Colab lacks, keep its GPU builds, pick the scale.

It runs from the freshly cloned book before a chapter imports torch or JAX, so it uses the
standard library only (and the `packaging` that pip carries). The decisions are pure
functions, tested without Colab; `set_up` does the installing and reports what it did.

A preinstalled package is kept when it meets the book's minimum (`pyproject.toml`'s
dependencies: the oldest versions every chapter was run with); a missing or older one gets
the build's exact pin (`requirements-runtime.txt`). Packages that must move together move
together: JAX, jaxlib and Flax (Flax's pin needs the pinned JAX), and torch with the Triton
it pairs with. JAX keeps Colab's GPU plugin flavour (`jax[cuda12]`), so a replaced JAX
stays on the GPU.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # a bare interpreter: pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

# Replaced as one: Flax's pin requires the pinned JAX, and Triton must match its torch.
FAMILIES = ({"jax", "jaxlib", "flax"}, {"torch", "triton"})
JAX_PLUGIN = re.compile(r"^jax-(cuda\d+)-plugin$")
RUNTIME_FILE = "requirements-runtime.txt"


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def minimums(book: Path) -> dict[str, Requirement]:
    """The oldest versions the chapters run with, from `pyproject.toml`."""
    project = tomllib.loads((Path(book) / "pyproject.toml").read_text())["project"]
    return {canonical(r.name): r for r in map(Requirement, project["dependencies"])}


def pins(book: Path) -> dict[str, Requirement]:
    """The build's exact pins of what chapters import, from `requirements-runtime.txt`."""
    found = {}
    for line in (Path(book) / RUNTIME_FILE).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):  # -e . is the book itself: on sys.path instead
            requirement = Requirement(line)
            found[canonical(requirement.name)] = requirement
    return found


def installed_versions() -> dict[str, str]:
    """Every installed distribution's version, by canonical name."""
    return {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
            if d.metadata["Name"]}


def jax_gpu_flavour(installed: Mapping[str, str]) -> str | None:
    """`cuda12` where Colab's JAX GPU plugin is installed, so a new JAX gets the same kind."""
    flavours = sorted(m.group(1) for name in installed if (m := JAX_PLUGIN.match(name)))
    return flavours[-1] if flavours else None


@dataclass(frozen=True)
class Decision:
    """What the first cell keeps and installs, and why."""

    kept: dict[str, str] = field(default_factory=dict)  # name -> installed version
    install: list[str] = field(default_factory=list)  # pip requirement strings
    replaced: dict[str, str] = field(default_factory=dict)  # name -> version it replaces

    def summary(self, minimum: Mapping[str, Requirement]) -> str:
        kept = ", ".join(f"{n} {v} (needs {minimum[n].specifier})" for n, v in self.kept.items())
        lines = [f"Kept from this runtime: {kept or 'nothing'}."]
        if self.install:
            lines.append("Installing: " + " ".join(self.install) + ".")
        if self.replaced:
            lines.append("Replacing: " + ", ".join(f"{n} {v}" for n, v in self.replaced.items())
                         + " (older than the book's minimum, or moving with one that is).")
        return "\n".join(lines)


def decide(installed: Mapping[str, str], minimum: Mapping[str, Requirement],
           pinned: Mapping[str, Requirement]) -> Decision:
    """Keep what meets its minimum; install the pin of the rest, with its whole family.

    Every name in `minimum` must have a pin: the two files describe the same packages.
    """
    unpinned = sorted(set(minimum) - set(pinned))
    if unpinned:
        raise ValueError(f"{RUNTIME_FILE} has no pin for {unpinned}; every dependency in "
                         "pyproject.toml needs one")
    lacking = {name for name, requirement in minimum.items()
               if name not in installed
               or not requirement.specifier.contains(Version(installed[name]), prereleases=True)}
    for family in FAMILIES:
        if lacking & family:
            lacking |= family & set(minimum)
    flavour = jax_gpu_flavour(installed)
    install = []
    for name in sorted(lacking):
        requirement = pinned[name]
        if name == "jax" and flavour:  # keep JAX on Colab's GPU: jax[cuda12], not jax[cpu]
            install.append(f"jax[{flavour}]{requirement.specifier}")
        else:
            install.append(str(requirement))
    return Decision(kept={n: installed[n] for n in minimum if n not in lacking},
                    install=install,
                    replaced={n: installed[n] for n in sorted(lacking) if n in installed})


def imported_among(replaced: Iterable[str], modules: Iterable[str],
                   distributions_of: Mapping[str, list[str]]) -> list[str]:
    """The replaced distributions whose modules this process has already imported.

    `distributions_of` maps a top-level module to its distributions, as
    `importlib.metadata.packages_distributions()` does.
    """
    replaced = {canonical(name) for name in replaced}
    tops = {module.partition(".")[0] for module in modules}
    return sorted({canonical(dist) for top in tops for dist in distributions_of.get(top, ())
                   if canonical(dist) in replaced})


class SetUpError(RuntimeError):
    """The book could not be set up; the message names the address and how to change it."""


def _address_hint(repo: str) -> str:
    return (f"The book was cloned from {repo}. To use another copy, set its address "
            "before this cell (%env DEEPDIVE_REPO=https://github.com/<you>/<fork>, or a "
            "file:// path) and restart the runtime.")


def install(requirements: list[str], repo: str) -> None:
    """pip install, failing loudly (a notebook's %pip never raises)."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", *requirements]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise SetUpError(f"pip could not install {' '.join(requirements)}:\n{tail}\n"
                         + _address_hint(repo))


def pick_scale(book: Path) -> str:
    """`deepdive.env.scale()` in a fresh process (this one must not import torch yet:
    chapters pin threads first); its error, such as JAX on the CPU beside a GPU, is raised."""
    environment = dict(os.environ, PYTHONPATH=str(Path(book) / "src"))
    done = subprocess.run([sys.executable, "-c", "from deepdive import env; print(env.scale())"],
                          capture_output=True, text=True, env=environment)
    if done.returncode:
        raise SetUpError("the scale could not be chosen:\n"
                         + "\n".join(done.stderr.strip().splitlines()[-3:]))
    return done.stdout.strip().splitlines()[-1]


def restart_runtime() -> None:
    """Colab restarts a kernel that exits; the reader runs the cells again from the top."""
    os.kill(os.getpid(), 9)


def set_up(book: str | Path, repo: str) -> str:
    """Install what this runtime lacks, point workers at the helpers, choose the scale.

    Returns the scale (also set as DEEPDIVE_SCALE for this kernel and its subprocesses).
    """
    book = Path(book)
    minimum = minimums(book)
    decision = decide(installed_versions(), minimum, pins(book))
    print(decision.summary(minimum))
    if decision.install:
        install(decision.install, repo)
    # Worker processes (chapter 5) import the helpers from the clone, like this kernel.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(book / "src"), os.environ.get("PYTHONPATH")) if p)
    os.chdir(book / "notebooks")  # results land in the clone's _build/results
    stale = imported_among(decision.replaced, list(sys.modules),
                           importlib.metadata.packages_distributions())
    if stale:
        print(f"Restarting the runtime: {', '.join(stale)} had been imported before this "
              "cell replaced it. When it is back, run this cell again, then the rest.")
        sys.stdout.flush()
        restart_runtime()
    scale = os.environ["DEEPDIVE_SCALE"] = pick_scale(book)
    print(f"Scale: {scale} (DEEPDIVE_SCALE). The book's helpers: {book / 'src'}.")
    return scale
