"""The PyTorch/XLA route's decisions (pure, with no side environment), its worker protocol,
its place in `compare`, and, where the side environment exists (always under CI), the
worker itself: it loads the saved weights and matches the book's torch eager, and a broken
weight fails the parity check."""

import copy
import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from deepdive.core import timing
from deepdive.models import parity, xla_route, xla_worker

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path("/nonexistent/python")


def test_the_route_runs_when_the_side_interpreter_exists():
    assert xla_route.status_for(None, PYTHON, True, ci=False) == xla_route.Status(True)
    assert xla_route.status_for("0", PYTHON, True, ci=True).run


def test_skipping_says_why_and_the_one_command_that_enables_it():
    status = xla_route.status_for("1", PYTHON, True, ci=False)
    assert not status.run
    assert f"{xla_route.SKIP_VAR}=1" in status.reason and xla_route.ENABLE in status.reason
    assert "`" not in status.reason  # glued as plain text, where backticks would show


def test_a_missing_interpreter_names_the_path_and_the_fix():
    status = xla_route.status_for(None, PYTHON, False, ci=False)
    assert not status.run and str(PYTHON) in status.reason and xla_route.ENABLE in status.reason


@pytest.mark.parametrize(("skip", "exists"), [("1", True), (None, False)])
def test_under_ci_a_route_that_cannot_run_fails(skip, exists):
    with pytest.raises(RuntimeError, match="CI=true"):
        xla_route.status_for(skip, PYTHON, exists, ci=True)


def test_an_unknown_skip_value_is_refused_with_the_accepted_ones():
    with pytest.raises(ValueError, match="accepted: 1"):
        xla_route.status_for("yes", PYTHON, True, ci=False)


def test_status_reads_the_environment(tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    assert xla_route.status({xla_route.PYTHON_VAR: str(python)}).run
    assert not xla_route.status({xla_route.PYTHON_VAR: str(tmp_path / "none")}).run
    with pytest.raises(RuntimeError):
        xla_route.status({"DEEPDIVE_XLA_PYTHON": str(python), "DEEPDIVE_SKIP_XLA": "1",
                          "CI": "true"})


def test_the_pins_are_read_from_requirements_xla():
    pins = xla_route.pins()
    assert pins["torch"] == "2.9.0" and pins["torch_xla"] == "2.9.0"
    assert {"torchax", "jax", "transformers"} <= set(pins)


def test_stale_names_each_version_that_differs_and_ignores_local_build_tags():
    pins = {"torch": "2.9.0", "torch_xla": "2.9.0", "torchax": "0.0.13"}
    assert xla_route.stale({"torch": "2.9.0+cu128", "torch_xla": "2.9.0",
                            "torchax": "0.0.13"}, pins) == []
    wrong = xla_route.stale({"torch": "2.13.0", "torch_xla": "2.9.0"}, pins)
    assert wrong == ["torch 2.13.0 (pinned 2.9.0)", "torchax missing (pinned 0.0.13)"]


def test_the_route_runs_on_the_cpu_even_beside_a_gpu():
    assert xla_route.route_device(gpu_present=True) == xla_route.route_device(False) == "CPU"
    assert xla_route.SCALE == "small"


def test_the_worker_answers_errors_as_data_and_only_versions_before_start():
    replies = io.StringIO()
    xla_worker.serve(['{"op": "hello"}\n', '{"op": "explode"}\n', "not json\n",
                      '{"op": "versions", "args": {"names": ["numpy", "no-such-dist"]}}\n'],
                     replies)
    first, second, third, fourth = (json.loads(line) for line in replies.getvalue().splitlines())
    assert "premature" in first["error"] and "accepted: versions, start" in first["error"]
    assert "explode" in second["error"] and "JSONDecodeError" in third["error"]
    assert fourth["ok"] == {"numpy": np.__version__, "no-such-dist": None}


def fake_interpreter(tmp_path, body):
    """A stand-in for the side interpreter: a shell script that ignores its arguments."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_worker_that_dies_is_reported_with_its_exit_code_and_log(tmp_path):
    python = fake_interpreter(tmp_path, "echo 'no torch here' >&2; exit 3")
    with pytest.raises(RuntimeError, match=r"stopped during 'versions' \(exit code 3\)"
                                           r"[\s\S]*no torch here"):
        xla_route.Worker(python, tmp_path, threads=1)


def test_a_worker_that_hangs_is_stopped_after_the_timeout(tmp_path):
    python = fake_interpreter(tmp_path, "exec sleep 30")
    with pytest.raises(TimeoutError, match="did not answer 'versions'"):
        xla_route.Worker(python, tmp_path, threads=1, timeout_s=0.5)


class FakeWorker:
    """Answers `prepare` and `time_block` as the worker does, with known numbers."""

    def __init__(self, losses):
        self.losses, self.requests = losses, []

    def request(self, op, **args):
        self.requests.append(op)
        if op == "prepare":
            return {"first_step_s": 2.0, "second_step_s": 1.0, "losses": self.losses,
                    "calls_per_block": 3, "harness_s": 3e-6}
        return {"sample_s": 0.01 * len(self.requests), "recompiles": 1}


def test_a_remote_variant_checks_its_first_steps_then_reports_the_workers_samples():
    worker = FakeWorker([2.0, 1.9])
    seen = []
    remote = xla_route.Remote(worker, xla_route.LAZY, check=seen.append)
    result = timing.compare({"lazy": remote}, blocks=3, max_blocks=3)["lazy"]
    assert seen[0]["losses"] == [2.0, 1.9] and remote.first_steps is seen[0]
    assert result.first_call == 2.0 and result.calls_per_block == 3 and result.n == 3
    assert result.recompiles == 3 and list(result.samples) == [0.02, 0.03, 0.04]
    assert result.harness_s == pytest.approx(2e-6)  # the worker already subtracted it per call


def test_a_failed_first_steps_check_stops_before_any_block_is_timed():
    worker = FakeWorker([9.0, 9.0])

    def check(report):
        raise AssertionError(f"wrong losses {report['losses']}")

    with pytest.raises(AssertionError, match="wrong losses"):
        timing.compare({"lazy": xla_route.Remote(worker, xla_route.LAZY, check=check)})
    assert "time_block" not in worker.requests


def test_compare_refuses_a_check_for_a_remote_variant():
    with pytest.raises(ValueError, match="timed elsewhere"):
        timing.compare({"lazy": xla_route.Remote(FakeWorker([]), xla_route.LAZY)},
                       check={"lazy": lambda output: None})


class FakeRemote:
    """A remote variant whose samples are known, recording when its blocks ran."""

    def __init__(self, log, seconds):
        self.log, self.seconds = log, seconds

    def runner(self, label, session):
        remote = self

        class Runner(timing.Runner):  # the public protocol a runner timed elsewhere follows
            def prepare(self, *_):
                remote.log.append(("prepare", label))

            def time_block(self):
                remote.log.append(("block", label))
                self.samples.append(remote.seconds)

        return Runner(label, session)


def test_compare_interleaves_a_remote_variant_and_takes_its_own_samples():
    log = []

    def local():
        log.append(("call", "local"))

    result = timing.compare({"local": local, "remote": FakeRemote(log, 0.25)}, blocks=3,
                            max_blocks=3,
                            min_block_s=0.0)
    assert result["remote"].median == 0.25 and result["remote"].n == 3
    blocks = [entry for entry in log if entry[0] == "block"]
    assert len(blocks) == 3
    # Each round has one block of each: the remote's blocks are spread over the rounds.
    positions = [i for i, entry in enumerate(log) if entry == ("block", "remote")]
    assert any(entry == ("call", "local") for entry in log[positions[0]:positions[-1]])


def test_parity_against_a_reference_passes_equal_runs_and_fails_a_transposed_gradient():
    rng = np.random.default_rng(0)
    run = {"logits": rng.standard_normal((4, 3)), "loss": 1.5,
           "gradients": {"a": rng.standard_normal((3, 3)), "b": rng.standard_normal(3)}}
    parity.assert_parity(parity.against_reference(run, copy.deepcopy(run)))
    broken = copy.deepcopy(run)
    broken["gradients"]["a"] = broken["gradients"]["a"].T
    with pytest.raises(AssertionError, match="gradients"):
        parity.assert_parity(parity.against_reference(run, broken))
    del broken["gradients"]["b"]
    with pytest.raises(KeyError, match="same parameters"):
        parity.against_reference(run, broken)


def test_make_builds_the_side_environment_unless_skipped_or_given():
    # Run from `make test`, the child make would inherit the parent's variables.
    environ = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "DEEPDIVE_SKIP_XLA",
                            "DEEPDIVE_XLA_PYTHON")}

    def dry_run(*extra):
        return subprocess.run(["make", "-n", "-W", "requirements-xla.txt", "book", *extra],
                              cwd=ROOT, capture_output=True, text=True, check=True,
                              env=environ).stdout

    assert "pip install --quiet -r requirements-xla.txt" in dry_run("DEEPDIVE_SKIP_XLA=0")
    assert "requirements-xla.txt" not in dry_run("DEEPDIVE_SKIP_XLA=1")
    assert "requirements-xla.txt" not in dry_run("DEEPDIVE_XLA_PYTHON=/usr/bin/python3")


SIDE = xla_route.side_python()
needs_side = pytest.mark.skipif(
    not SIDE.is_file() and os.environ.get("CI") != "true",
    reason=f"no side environment at {SIDE} (`make xla-env`); under CI this fails instead")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A one-layer ViT, saved as the chapter saves its model, and the worker on it."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=8, patch_size=4, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=3)
    torch.manual_seed(1)
    model = ViTForImageClassification(config)
    model.set_attn_implementation("eager")
    rng = np.random.default_rng(1)
    images = rng.standard_normal((2, 3, 8, 8), dtype=np.float32)
    labels = rng.integers(0, 3, 2)
    folder = xla_route.save_inputs(tmp_path_factory.mktemp("xla"), model, images, labels)
    with xla_route.Worker(SIDE, folder, threads=1) as worker:
        yield model, images, labels, folder, worker


@needs_side
def test_the_side_environment_has_its_pins(tiny):
    *_, worker = tiny
    pinned = xla_route.pins()
    assert xla_route.stale(worker.request("versions", names=sorted(pinned)), pinned) == []
    hello = worker.request("hello")
    assert hello["xla device"].startswith("xla") and hello["PJRT_DEVICE"] == "CPU"


@needs_side
def test_a_side_environment_without_the_pins_is_refused_by_name(tmp_path):
    refused = r"torch 2\.9\.0\S* \(pinned 0\.0\.1\)[\s\S]*make xla-env"
    with pytest.raises(RuntimeError, match=refused):
        xla_route.Worker(SIDE, tmp_path, threads=1, pinned={"torch": "0.0.1"})


@needs_side
@pytest.mark.parametrize("variant", xla_route.PARITY_VARIANTS)
def test_the_worker_matches_torch_2_13_eager_on_the_saved_weights(tiny, variant):
    model, images, labels, _, worker = tiny
    reference = xla_worker.torch_gradients(copy.deepcopy(model), images, labels)
    run = xla_worker.load_run(worker.request("gradients", variant=variant)["path"])
    parity.assert_parity(parity.against_reference(reference, run))


@needs_side
def test_a_broken_weight_in_the_worker_fails_the_parity_check(tiny, tmp_path):
    import torch

    model, images, labels, _, _ = tiny
    broken = copy.deepcopy(model)
    query = broken.vit.layers[0].attention.q_proj.weight
    with torch.no_grad():
        query.copy_(query.T.clone())  # square: every shape still fits
    folder = xla_route.save_inputs(tmp_path, broken, images, labels)
    with xla_route.Worker(SIDE, folder, threads=1) as worker:
        run = xla_worker.load_run(worker.request("gradients", variant=xla_route.LAZY)["path"])
    reference = xla_worker.torch_gradients(copy.deepcopy(model), images, labels)
    with pytest.raises(AssertionError):
        parity.assert_parity(parity.against_reference(reference, run))


@needs_side
def test_a_remote_route_is_timed_with_its_first_steps_and_compilations_apart(tiny):
    model, images, labels, folder, _ = tiny
    reference = xla_worker.torch_step(copy.deepcopy(model), images, labels)[0]
    expected = [reference().item(), reference().item()]
    with xla_route.Worker(SIDE, folder, threads=1) as fresh:  # nothing compiled yet
        remote = xla_route.Remote(fresh, xla_route.LAZY)
        # An eager CPU backward first, as in the chapter: the XLA device must exist before
        # autograd's first backward, or XLA's backward finds no queue.
        result = timing.compare({"eager": xla_route.Remote(fresh, xla_route.EAGER),
                                 "lazy": remote}, blocks=2, max_blocks=2,
                                min_block_s=0.0)["lazy"]
        metrics = fresh.request("metrics")
    steps = remote.first_steps
    assert result.n == 2 and result.median > 0 and result.recompiles == 0
    # The optimizer's state appears after step 1, so step 2's graph is new.
    assert steps["xla_first_step"] >= 1 and steps["xla_second_step"] >= 1
    assert steps["first_step_s"] > result.median
    # torch_xla's own counter of compilations that missed its cache agrees with the count.
    compiled = steps["xla_first_step"] + steps["xla_second_step"] + steps["xla_sizing"]
    assert metrics["UncachedCompile"] == compiled
    np.testing.assert_allclose(steps["losses"], expected, **parity.TOLERANCES["loss curve"])
