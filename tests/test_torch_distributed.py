"""deepdive.torch_distributed: N real processes (gloo) train like one."""

import numpy as np
import pytest

from deepdive import torch_distributed as td

SMALL = dict(width=32, depth=2, batch_size=8, steps=2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("distributed"))
    return {strategy: td.spawn(strategy, world, out, **SMALL)
            for strategy, world in (("single", 1), ("ddp", 2), ("fsdp2", 2))}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_processes_take_the_same_step_as_one(runs, strategy):
    reference, records = runs["single"][0], runs[strategy]

    assert [r["rank"] for r in records] == [0, 1]
    assert records[0]["loss"] == pytest.approx(reference["loss"], rel=1e-6)
    for name, value in reference["params"].items():
        np.testing.assert_allclose(records[0]["params"][name], value, rtol=1e-5, atol=1e-7)
    moved = sum(np.abs(v - td.make_model(32, 2).state_dict()[k].numpy()).max()
                for k, v in reference["params"].items())
    assert moved > 0  # the step changed the weights, so equality means something


def test_fsdp2_holds_half_the_parameters_per_rank_and_ddp_all(runs):
    full = runs["single"][0]["param_bytes"]

    assert all(r["param_bytes"] == full for r in runs["ddp"])
    assert sum(r["param_bytes"] for r in runs["fsdp2"]) == full
    assert all(r["param_bytes"] < full for r in runs["fsdp2"])
    assert all(r["optimizer_bytes"] == r["param_bytes"] for r in runs["fsdp2"])  # momentum


def test_every_rank_timed_the_same_number_of_steps(runs):
    assert {len(r["step_s_samples"]) for r in runs["ddp"]} == {SMALL["steps"]}


@pytest.mark.parametrize(("args", "message"), [
    (("zero", 2), "strategy must be one of"),
    (("ddp", 0), "world size must be an integer >= 1"),
    (("single", 2), "runs one process"),
    (("ddp", 3), "must split evenly over 3 ranks"),
])
def test_bad_runs_are_refused_before_any_process_starts(tmp_path, args, message):
    with pytest.raises(ValueError, match=message):
        td.spawn(*args, str(tmp_path))
