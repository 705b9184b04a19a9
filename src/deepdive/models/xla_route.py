"""Chapter 5's third route, PyTorch/XLA (and torchax), driven from the chapter's process.

torch_xla 2.9, its newest release, requires torch 2.9, older than the book's pinned torch.
So the route runs in a second environment built from `requirements-xla.txt` (`make xla-env`;
the book's build makes it unless `DEEPDIVE_SKIP_XLA=1`) and in a worker process
(`deepdive.models.xla_worker`) started with that environment's interpreter. This module decides
whether the route runs in this build and on which device (pure functions, tested), saves
the model and batch for the worker, talks to it, and plugs its steps into
`deepdive.core.timing.compare` so they are timed in the same interleaved rounds as the
chapter's own. Chapter `05_vit_xla` explains it.

Imports only the standard library, numpy and `deepdive.core.timing` (numpy at import) at module
level: the worker imports the variant names from here.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepdive.core.timing import Runner

__all__ = ["COMPILED", "DEFAULT_PYTHON", "EAGER", "ENABLE", "JAX_TWIN", "LAZY", "PARITY_VARIANTS",
           "PYTHON_VAR", "REPO", "REQUEST_TIMEOUT_S", "REQUIREMENTS", "SCALE", "SKIP_VAR",
           "TORCHAX", "VARIANTS", "Remote", "Status", "Worker", "pins", "route_device",
           "save_inputs", "side_python", "stale", "status", "status_for"]

EAGER = "torch 2.9 eager"
LAZY = "PyTorch/XLA lazy tensors"
COMPILED = "PyTorch/XLA torch.compile, openxla backend"
TORCHAX = "torchax jax.jit"
# The chapter's JAX step, run in the worker too: the same step in two processes shows what
# crossing processes alone does to a comparison (an A/A control).
JAX_TWIN = "JAX jax.jit (Flax NNX twin), in the worker"
PARITY_VARIANTS = (EAGER, LAZY, COMPILED, TORCHAX)  # checked against the book's torch eager
VARIANTS = (*PARITY_VARIANTS, JAX_TWIN)

REPO = Path(__file__).resolve().parents[3]
REQUIREMENTS = REPO / "requirements-xla.txt"
DEFAULT_PYTHON = REPO / ".venv-xla" / "bin" / "python"
SKIP_VAR = "DEEPDIVE_SKIP_XLA"  # "1": do not build or run the side environment
PYTHON_VAR = "DEEPDIVE_XLA_PYTHON"  # another interpreter with requirements-xla.txt's pins
ENABLE = "make xla-env"
REQUEST_TIMEOUT_S = 900.0  # one request: a first step compiles; nothing takes minutes


@dataclass(frozen=True)
class Status:
    """Whether the route runs in this build, and the sentence the page shows when not."""

    run: bool
    reason: str = ""


def status_for(skip: str | None, python: Path, python_exists: bool, ci: bool) -> Status:
    """Run the route, or say why not (plain text: the page glues it). Under CI a route that
    cannot run fails the build: the side environment is part of every build there."""
    skip_value = (skip or "").strip()
    if skip_value not in ("", "0", "1"):
        raise ValueError(f"{SKIP_VAR}={skip!r} is not understood; accepted: 1 (skip the "
                         "PyTorch/XLA route), 0 or unset (run it)")
    if skip_value == "1":
        status = Status(False, f"not run in this build: {SKIP_VAR}=1 skipped the side "
                               "environment (torch 2.9 with torch_xla, several GB); to run it, "
                               f"unset {SKIP_VAR}, run {ENABLE}, then rebuild")
    elif not python_exists:
        status = Status(False, f"not run in this build: no interpreter at {python} (the side "
                               f"environment for torch_xla); {ENABLE} builds it (or set "
                               f"{PYTHON_VAR} to one with requirements-xla.txt's pins), then "
                               "rebuild")
    else:
        return Status(True)
    if ci:
        raise RuntimeError(f"CI=true and the PyTorch/XLA route is {status.reason}")
    return status


def status(environ=os.environ) -> Status:
    """`status_for` this process's environment."""
    python = side_python(environ)
    return status_for(environ.get(SKIP_VAR), python, python.is_file(),
                  environ.get("CI", "").lower() == "true")


def side_python(environ=os.environ) -> Path:
    """The side environment's interpreter: ``DEEPDIVE_XLA_PYTHON``, else `.venv-xla`'s."""
    chosen = environ.get(PYTHON_VAR, "").strip()
    return Path(chosen) if chosen else DEFAULT_PYTHON


def pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """Exact pins (name -> version) of a requirements file; names normalised (_ and -)."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;#]+)", line)
        if match:
            found[_normal(match[1])] = match[3]
    return found


def stale(installed: dict[str, str | None], pinned: dict[str, str]) -> list[str]:
    """Every pinned package whose installed version is not its pin (a local build tag such
    as +cu128 is ignored), or that is missing."""
    have_by_name = {_normal(name): version for name, version in installed.items()}
    wrong = []
    for name, want in pinned.items():
        have = have_by_name.get(_normal(name))
        if (have or "").split("+")[0] != want:
            wrong.append(f"{name} {have or 'missing'} (pinned {want})")
    return wrong


def route_device(gpu_present: bool) -> str:
    """The device the route runs on: the CPU, whether or not a GPU is present. torch_xla
    2.9 ships no XLA:CUDA (deprecated in release 2.8, then removed: pytorch/xla#9540,
    #9598, #9597), so on a GPU machine the whole page, its PyTorch and JAX baselines
    included, runs on the CPU too (chapter `05_vit_xla` says so in its prose)."""
    return "CPU"


# The route runs on the CPU at every scale (route_device), so at chapter 5's small sizes.
SCALE = "small"


def save_inputs(folder: Path, hf_model, images: np.ndarray, labels: np.ndarray) -> Path:
    """The HF config, the weights (safetensors) and the batch, for the worker to load."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf_model.config.to_json_file(folder / "config.json")
    save_file({k: v.detach().cpu().contiguous() for k, v in hf_model.state_dict().items()},
              folder / "weights.safetensors")
    np.savez(folder / "batch.npz", images=np.asarray(images, np.float32),
             labels=np.asarray(labels, np.int64))
    return folder


class Worker:
    """The worker process. It is started, its versions are checked against
    requirements-xla.txt before it imports anything heavy, then its session starts;
    `request` sends one request and returns its result."""

    def __init__(self, python: Path, folder: Path, threads: int, pinned: dict | None = None,
                 timeout_s: float = REQUEST_TIMEOUT_S):
        self.folder, self.timeout_s = Path(folder), timeout_s
        self.log = self.folder / "worker.log"
        src = str(REPO / "src")
        environ = dict(os.environ, PJRT_DEVICE="CPU", TF_CPP_MIN_LOG_LEVEL="2",
                       PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get(
                           "PYTHONPATH")])))
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [str(python), "-m", "deepdive.models.xla_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, env=environ, cwd=self.folder)
        try:
            pinned = pins() if pinned is None else pinned
            wrong = stale(self.request("versions", names=sorted(pinned)), pinned)
            if wrong:
                raise RuntimeError(f"the side environment at {python} does not hold "
                                   f"requirements-xla.txt's pins: {'; '.join(wrong)}; run "
                                   f"`{ENABLE}`, then rebuild")
            self.request("start", folder=str(self.folder), threads=threads)
        except BaseException:
            self.close()
            raise

    def request(self, op: str, **args):
        if self.process.poll() is not None:
            raise RuntimeError(self._stopped(op))
        self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout_s)
        if not ready:
            self.close()
            raise TimeoutError(f"the PyTorch/XLA worker did not answer {op!r} within "
                               f"{self.timeout_s:.0f} s and was stopped; its log: {self.log}")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(self._stopped(op))
        try:
            reply = json.loads(line)
        except json.JSONDecodeError as error:
            raise RuntimeError(f"the PyTorch/XLA worker answered {op!r} with something other "
                               f"than JSON ({error}): {line[:200]!r}; its log: {self.log}") \
                from None
        if "error" in reply:
            raise RuntimeError(f"the PyTorch/XLA worker failed in {op!r} (log: {self.log}):\n"
                               f"{reply['error']}")
        return reply["ok"]

    def close(self) -> None:
        """Let the worker finish (stdin closed); kill it if it does not within a minute."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def _stopped(self, op: str) -> str:
        try:  # its output closed: it is exiting, or a child kept the pipe
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.close()
            code = self.process.poll()
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
        return (f"the PyTorch/XLA worker stopped during {op!r} (exit code {code}); its log "
                f"({self.log}) ends:\n{tail}")


class Remote:
    """A worker variant as a `deepdive.core.timing.compare` entry (a `timing.TimedElsewhere`):
    its blocks run in the worker, between the chapter's own variants' blocks, and the
    worker's clock times them (a request's own round trip is not part of a sample).
    `check`, if given, is called with the first two steps' report (their losses among it)
    before any block is timed, and raises when they are wrong."""

    def __init__(self, worker: Worker, variant: str, check=None):
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; accepted: {', '.join(VARIANTS)}")
        self.worker, self.variant, self.check = worker, variant, check
        self.first_steps: dict | None = None

    def runner(self, label: str, session: int) -> Runner:
        return _RemoteRunner(self, label, session)


class _RemoteRunner(Runner):
    """A `deepdive.core.timing.Runner` whose calls run in the worker: `prepare` and `time_block`
    are requests, and the worker's clock times each block."""

    def __init__(self, remote: Remote, label: str, session: int):
        super().__init__(label, session)
        self.remote = remote

    def prepare(self, warmup: int, min_block_s: float, min_calls_per_block: int) -> None:
        steps = self.remote.worker.request(
            "prepare", variant=self.remote.variant, warmup=warmup, min_block_s=min_block_s,
            min_calls_per_block=min_calls_per_block, session=self.session)
        if self.remote.check is not None:
            self.remote.check(steps)
        self.remote.first_steps = steps
        self.first_call, self.calls_per_block = steps["first_step_s"], steps["calls_per_block"]
        self.harness_s = steps["harness_s"]  # the worker's samples already exclude it

    def time_block(self) -> None:
        block = self.remote.worker.request("time_block", variant=self.remote.variant)
        self.samples.append(block["sample_s"])
        self.recompiles += block["recompiles"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()
