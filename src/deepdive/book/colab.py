"""Colab's first cell: add only what Colab lacks, keep its GPU builds, pick the scale.

It runs from the freshly cloned book before a chapter imports torch or JAX, so it uses the
standard library only (and the `packaging` that pip carries) and imports on every Python that
Colab offers (3.11 and newer, past runtime versions included), so that a Python older than
`pyproject.toml`'s requires-python is refused with a message. The decisions are pure
functions, tested without Colab; `set_up` does the installing and reports what it did.

A preinstalled package is kept when it meets the book's minimum (`pyproject.toml`'s
dependencies: the oldest versions every chapter was run with); a missing or older one gets
the build's exact pin (`requirements-runtime.txt`). What must move together does: JAX with
jaxlib (and pip brings the GPU plugin of the same version), a replaced torch with its
Triton. A replaced JAX keeps Colab's GPU plugin flavour (`jax[cuda12]`), so it stays on the
GPU; a missing Triton beside a kept torch is the version that torch declares, else the pin.
What pip moves beyond the request, as what it installs requires (JAX's GPU plugin and
PJRT library), is reported after the install, with pip's conflict notes.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ADDRESS_HINT", "JAX_PLUGIN", "MOVES_WITH", "PIP_CONFLICT", "RUNTIME_FILE",
           "PackageChoice", "SetUpError", "canonical", "check_clone", "check_python",
           "choose_packages", "imported_among", "install", "installed_versions", "jax_gpu_flavour",
           "minimums", "moved_beyond", "pick_scale", "pins", "required_python", "restart_runtime",
           "set_up", "torch_declared_triton"]

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
except ImportError:  # a bare interpreter: pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.version import Version

# What a replaced package brings with it: jaxlib must equal JAX's version, and a torch
# build pairs with one Triton. (Flax's pin needs JAX 0.11.1 or newer, which any JAX at the
# book's minimum is, so Flax moves alone.)
MOVES_WITH = {"jax": {"jaxlib"}, "jaxlib": {"jax"}, "torch": {"triton"}}
JAX_PLUGIN = re.compile(r"^jax-(cuda\d+)-plugin$")
RUNTIME_FILE = "requirements-runtime.txt"


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _project(book: Path) -> dict:
    return tomllib.loads((Path(book) / "pyproject.toml").read_text())["project"]


def minimums(book: Path) -> dict[str, Requirement]:
    """The oldest versions the chapters run with, from `pyproject.toml`."""
    return {canonical(r.name): r for r in map(Requirement, _project(book)["dependencies"])}


def required_python(book: Path) -> SpecifierSet:
    """The Pythons the book's pins install on: `pyproject.toml`'s requires-python."""
    return SpecifierSet(_project(book)["requires-python"])


def check_python(book: Path, version: str | None = None) -> None:
    """Refuse a Python the pins cannot install on, before pip tries and fails halfway.

    `version` is this interpreter's (`platform.python_version()`) unless given.
    """
    version = version or platform.python_version()
    accepted = required_python(book)
    if not accepted.contains(version, prereleases=True):
        raise SetUpError(f"this runtime runs Python {version}, and the book needs Python "
                         f"{accepted} (pyproject.toml's requires-python: the pinned JAX, Flax "
                         "and NumPy require it). In Colab, choose the latest runtime version "
                         "(Runtime > Change runtime type; a notebook pinned to an older runtime "
                         "version gets its older Python), then run this cell again.")


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
    found = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"]:  # the first copy on the path is the one imports use
            found.setdefault(canonical(dist.metadata["Name"]), dist.version)
    return found


def torch_declared_triton() -> str | None:
    """The Triton version the installed torch requires (CUDA builds do; CPU builds don't)."""
    try:
        requirements = importlib.metadata.requires("torch") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requirements:
        requirement = Requirement(line)
        if canonical(requirement.name) != "triton":
            continue
        if requirement.marker is None or requirement.marker.evaluate():
            versions = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            return versions[0] if versions else None
    return None


def jax_gpu_flavour(installed: Mapping[str, str]) -> str | None:
    """`cuda12` where Colab's JAX GPU plugin is installed, so a new JAX gets the same kind."""
    flavours = sorted(m.group(1) for name in installed if (m := JAX_PLUGIN.match(name)))
    return flavours[-1] if flavours else None


@dataclass(frozen=True)
class PackageChoice:
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


class SetUpError(RuntimeError):
    """The book could not be set up; the message says what to do."""


def choose_packages(installed: Mapping[str, str], minimum: Mapping[str, Requirement],
           pinned: Mapping[str, Requirement], torch_triton: str | None = None) -> PackageChoice:
    """Keep what meets its minimum; install the pin of the rest, and what it moves with.

    Every name in `minimum` must have a pin: the two files describe the same packages.
    `torch_triton` is the Triton the installed torch declares (`torch_declared_triton`).
    """
    unpinned = sorted(set(minimum) - set(pinned))
    if unpinned:
        raise ValueError(f"{RUNTIME_FILE} has no pin for {unpinned}; every dependency in "
                         "pyproject.toml needs one")
    if "libtpu" in installed:
        raise SetUpError("this is a TPU runtime; the book compares PyTorch and JAX on a GPU or "
                         "a CPU. Choose one: Runtime > Change runtime type.")
    lacking = {name for name, requirement in minimum.items()
               if name not in installed
               or not requirement.specifier.contains(Version(installed[name]), prereleases=True)}
    lacking |= {partner for name in set(lacking) for partner in MOVES_WITH.get(name, ())
                if partner in minimum}
    flavour = jax_gpu_flavour(installed)
    install = []
    for name in sorted(lacking):
        requirement = pinned[name]
        if name == "jax" and flavour:  # keep JAX on Colab's GPU: jax[cuda12], not jax[cpu]
            install.append(f"jax[{flavour}]{requirement.specifier}")
        elif name == "triton" and "torch" not in lacking and torch_triton:
            install.append(f"triton=={torch_triton}")  # the one the kept torch was built with
        else:
            install.append(str(requirement))
    return PackageChoice(kept={n: installed[n] for n in minimum if n not in lacking},
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


# How to point the first cell at another copy of the book, said with every set-up error.
ADDRESS_HINT = ("The book was cloned from {repo} into {book}. To use another copy, delete that "
                "folder, set the address (%env DEEPDIVE_REPO=https://github.com/<you>/<fork>, or "
                "a file:// path) and run this cell again.")
# pip's note of a preinstalled package left without what it declares.
PIP_CONFLICT = re.compile(r" requires .+, but you have .+ which is incompatible")


def _address_hint(repo: str, book: Path) -> str:
    return ADDRESS_HINT.format(repo=repo, book=book)


def check_clone(book: Path, repo: str) -> None:
    """Refuse a folder that is not a clone of `repo` (an older address, a stray folder)."""
    origin = subprocess.run(["git", "-C", str(book), "remote", "get-url", "origin"],
                            capture_output=True, text=True)
    if origin.returncode or origin.stdout.strip() != repo:
        found = origin.stdout.strip() or "no git clone"
        raise SetUpError(f"{book} holds {found}, not a clone of {repo}. "
                         + _address_hint(repo, book))


def install(requirements: list[str], repo: str, book: Path) -> list[str]:
    """pip install, failing loudly (a notebook's %pip never raises).

    Returns pip's conflict notes: preinstalled packages that declare other versions of what
    pip installed ("numba 0.61.2 requires numpy<2.3,>=1.24, but you have numpy 2.5.5 ...").
    """
    command = [sys.executable, "-m", "pip", "install", "--quiet", *requirements]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise SetUpError(f"pip could not install {' '.join(requirements)}:\n{tail}\n"
                         + _address_hint(repo, book))
    importlib.invalidate_caches()
    return [line.strip() for line in f"{done.stdout}\n{done.stderr}".splitlines()
            if PIP_CONFLICT.search(line)]


def moved_beyond(requested: Iterable[str], before: Mapping[str, str],
                 after: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """What pip changed that was not asked for, as name -> (version before, after)."""
    asked = {canonical(Requirement(r).name) for r in requested}
    return {n: (before.get(n), after.get(n)) for n in sorted(before.keys() | after.keys())
            if before.get(n) != after.get(n) and n not in asked}


def pick_scale(book: Path) -> str:
    """`deepdive.core.env.scale()` in a fresh process (this one must not import torch yet:
    chapters pin threads first), after JAX has started its backend there, so a GPU plugin
    that fails to load counts; its error, such as JAX on the CPU beside a GPU, is raised."""
    paths = [str(Path(book) / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    probe = "import jax; jax.devices(); from deepdive.core import env; print(env.scale())"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=environment)
    if done.returncode:
        raise SetUpError("the scale could not be chosen:\n"
                         + "\n".join(done.stderr.strip().splitlines()[-3:]))
    return done.stdout.strip().splitlines()[-1]


def restart_runtime() -> None:
    """Colab restarts a kernel that exits; the reader runs the cells again from the top."""
    time.sleep(1)  # let the message reach the notebook first
    os.kill(os.getpid(), 9)


def set_up(book: str | Path, repo: str) -> str:
    """Install what this runtime lacks, point workers at the helpers, choose the scale.

    Returns the scale (also set as DEEPDIVE_SCALE for this kernel and its subprocesses).
    """
    book = Path(book)
    check_clone(book, repo)
    check_python(book)
    minimum = minimums(book)
    before = installed_versions()
    choice = choose_packages(before, minimum, pins(book), torch_declared_triton())
    print(choice.summary(minimum))
    changed = []
    if choice.install:
        conflicts = install(choice.install, repo, book)
        after = installed_versions()  # pip may move more than it was asked to (plugins)
        changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
        if moved := moved_beyond(choice.install, before, after):
            print("pip also moved, as what it installed requires: "
                  + ", ".join(f"{n} {old or 'none'} -> {new or 'removed'}"
                              for n, (old, new) in moved.items()) + ".")
        if conflicts:
            print("pip notes that preinstalled packages declare other versions:\n  "
                  + "\n  ".join(conflicts))
    # Worker processes (the distributed chapter) import the helpers from the clone, like
    # this kernel.
    src = str(book / "src")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if src not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [src, *paths]))
    os.chdir(book / "notebooks")  # results land in the clone's _build/results
    stale = imported_among(changed, list(sys.modules),
                           importlib.metadata.packages_distributions())
    if stale:
        print(f"Restarting the runtime: {', '.join(stale)} had been imported before this "
              "cell replaced it. When it is back, run this cell again, then the rest.")
        sys.stdout.flush()
        restart_runtime()
        return "restarting"
    scale = os.environ["DEEPDIVE_SCALE"] = pick_scale(book)
    print(f"Scale: {scale} (DEEPDIVE_SCALE). The book's helpers: {src}.")
    return scale
