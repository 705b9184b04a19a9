"""`make releases`: every release of the matrix in a throwaway environment, one bundle each.

For each release (`deepdive.releases.matrix`): a fresh virtual environment on the book's
Python, laid over the book's own environment (a `.pth` line adds the book's site-packages
after the release's own, so `import` finds the release's torch, jax, jaxlib, flax and
optax first and everything else once, from the book's), pip installs the release's
requirements (from pip's cache where it has them), `deepdive.releases.workloads` runs the
reduced set, and the bundle is written by the release's own interpreter (it refuses a
build whose torch or jax is not the one installed). The environment is removed after,
whatever happened. Each run's outcome, with its error where it failed to install or run,
goes into `runs.csv` beside the bundles: a failure is recorded, never skipped. Where the
held point (the book's own pins) ran, it runs once more at the end into `control/`: the
rebuild control, what two runs of the same releases move on this machine.

Not part of `make book` or `make test`: the committed bundles are the evidence, and the
ledger page reads them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepdive.releases import matrix
from deepdive.releases.matrix import Release, Run

__all__ = ["INSTALL_TIMEOUT_S", "RUN_TIMEOUT_S", "Environment", "install", "main", "measure",
           "run_release", "sweep", "tail"]

INSTALL_TIMEOUT_S = 1200  # a torch release downloads a few GB where pip's cache lacks it
RUN_TIMEOUT_S = 900  # the reduced set takes a few minutes on 2 cores
VERSION_NAMES = ("torch", "jax", "jaxlib", "flax", "optax")


def tail(text: str, lines: int = 3) -> str:
    """The last non-empty lines of a tool's output, joined: where pip and Python say why."""
    kept = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-600:]


@dataclass(frozen=True)
class Environment:
    """A release's throwaway environment: its interpreter and its installed versions."""

    folder: Path
    python: Path
    versions: dict


def _book_site() -> str:
    return sysconfig.get_paths()["purelib"]


def install(release: Release, folder: Path, book_site: str | None = None) -> Environment:
    """Create the release's environment in `folder`, laid over the book's, and pip install
    its requirements; raises RuntimeError with pip's last words when pip fails."""
    folder = Path(folder)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True)
    # after the release's own site-packages: its packages are found first, the rest here
    Path(site.stdout.strip(), "_deepdive_book_env.pth").write_text(
        f"import site; site.addsitedir({(book_site or _book_site())!r})\n")
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *release.requirements],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(release.requirements)} failed: "
                           f"{tail(done.stderr or done.stdout)}")
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m, json; print("
                            f"json.dumps({{n: m.version(n) for n in {VERSION_NAMES!r}}}))"],
                           check=True, capture_output=True, text=True)
    versions = json.loads(found.stdout)
    if (versions["torch"].split("+")[0], versions["jax"]) != (release.torch, release.jax):
        raise RuntimeError(f"the environment imports torch {versions['torch']} and jax "
                           f"{versions['jax']}, not the release's {release.torch} and "
                           f"{release.jax}")
    return Environment(folder, python, versions)


def measure(environment: Environment, results: Path, build_id: str) -> dict[str, str]:
    """Run the reduced set in the release's environment into `results`; returns its failed
    workloads ({name: error}); raises RuntimeError when the process itself fails."""
    variables = {**os.environ, "DEEPDIVE_RESULTS_DIR": str(results), "DEEPDIVE_SCALE": "small",
                 "DEEPDIVE_BUILD_ID": build_id, "CUDA_VISIBLE_DEVICES": "",
                 "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([str(environment.python), "-m", "deepdive.releases.workloads"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=variables)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0 or not last.startswith("{"):
        raise RuntimeError(f"the reduced set exited with status {done.returncode}: "
                           f"{tail(done.stderr or done.stdout)}")
    return json.loads(last)


def _write_bundle(environment: Environment, results: Path, into: Path, release: Release,
                  notes: str, build_id: str) -> str:
    done = subprocess.run(
        [str(environment.python), "-m", "deepdive.book.bundles", "write", "--results",
         str(results), "--into", str(into), "--notes", notes, "--replace",
         "--field", f"sweep={release.sweep}", "--field", f"release={release.version}"],
        capture_output=True, text=True, env={**os.environ, "DEEPDIVE_BUILD_ID": build_id})
    if done.returncode != 0:
        raise RuntimeError(f"writing the bundle failed: {tail(done.stderr or done.stdout)}")
    return done.stdout.split("wrote ", 1)[1].split(" (")[0].rsplit("/", 1)[-1]


def run_release(release: Release, into: Path, workdir: Path,
                installer: Callable[[Release, Path], Environment] = install,
                runner: Callable[[Environment, Path, str], dict] = measure,
                bundler: Callable[..., str] = _write_bundle,
                now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.UTC)) -> Run:
    """One release: install, run, write its bundle into `into`, record the run in
    `into/runs.csv`, remove the environment. Returns the run's row."""
    started = now()
    build_id = f"{started:%Y%m%dT%H%M%SZ}-release-{release.sweep}-{release.version}"
    folder = Path(workdir) / f"{release.sweep}-{release.version}"
    shutil.rmtree(folder, ignore_errors=True)
    base = dict(sweep=release.sweep, release=release.version, date=f"{started:%Y-%m-%d}",
                python=".".join(map(str, sys.version_info[:3])))
    clock = time.perf_counter()
    try:
        try:
            environment = installer(release, folder / "env")
        except (RuntimeError, OSError, subprocess.SubprocessError) as error:
            row = Run(**base, status="install failed", error=str(error)[:600],
                      install_s=round(time.perf_counter() - clock, 1))
            matrix.write_run(Path(into) / "runs.csv", row)
            return row
        installed = round(time.perf_counter() - clock, 1)
        base |= {k: environment.versions.get(k, "") for k in VERSION_NAMES}
        clock = time.perf_counter()
        results = folder / "results"
        try:
            failed = runner(environment, results, build_id)
            notes = (f"release sweep: {release.sweep} {release.version}, the other framework "
                     f"held at the book's pin; a throwaway environment laid over the book's; "
                     f"the reduced set (deepdive.releases.workloads)"
                     + (f"; failed: {'; '.join(f'{k}: {v}' for k, v in failed.items())}"
                        if failed else ""))
            bundle = bundler(environment, results, Path(into), release, notes, build_id)
        except (RuntimeError, OSError, subprocess.SubprocessError) as error:
            row = Run(**base, status="run failed", error=str(error)[:600], install_s=installed,
                      run_s=round(time.perf_counter() - clock, 1))
            matrix.write_run(Path(into) / "runs.csv", row)
            return row
        row = Run(**base, status="ok",
                  failed_workloads="; ".join(f"{k}: {v}" for k, v in failed.items()),
                  install_s=installed, run_s=round(time.perf_counter() - clock, 1),
                  bundle=bundle)
        matrix.write_run(Path(into) / "runs.csv", row)
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m deepdive.releases.run [jax|torch|jax==0.11.1 ...] [--into DIR]`: run the
    named releases (all by default) one after another and print each outcome."""
    parser = argparse.ArgumentParser(prog="python -m deepdive.releases.run",
                                     description="Measure the reduced set on every release.")
    parser.add_argument("releases", nargs="*", help="jax, torch, jax==VERSION or "
                        "torch==VERSION (default: every release of the matrix)")
    parser.add_argument("--into", type=Path, default=None,
                        help="where bundles and runs.csv go (default: book/data/releases)")
    options = parser.parse_args(argv)
    try:
        chosen = matrix.select(options.releases)
    except ValueError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="deepdive-releases-") as workdir:
        sweep(chosen, options.into or matrix.releases_dir(), Path(workdir))
    return 0


def sweep(chosen: list[Release], into: Path, workdir: Path,
          run_one: Callable[[Release, Path, Path], Run] = run_release) -> list[Run]:
    """Run `chosen` one after another into `into`, printing each outcome; where the held
    point is among them, run it once more at the end into `into/control` (the rebuild
    control: what two runs of the same releases move)."""
    plan = [(release, Path(into)) for release in chosen]
    if matrix.held_point() in chosen:
        plan.append((matrix.held_point(), Path(into) / matrix.CONTROL_FOLDER))
    rows = []
    for release, target in plan:
        name = release.name + (" (control)" if target.name == matrix.CONTROL_FOLDER else "")
        print(f"{name}: installing {' '.join(release.requirements)}", flush=True)
        row = run_one(release, target, workdir)
        said = row.error or row.failed_workloads or f"bundle {row.bundle}"
        print(f"{name}: {row.status} (install {row.install_s:.0f} s, run {row.run_s:.0f} s): "
              f"{said}", flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
