"""deepdive.torch_distributed: N real processes (gloo) train like one, over several steps."""

import numpy as np
import pytest

from deepdive import torch_distributed as td
from deepdive.equality import assert_same_parameters

SMALL = dict(width=32, depth=2, batch_size=8, steps=2, check_steps=3)
TOLERANCE = dict(rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("distributed"))
    # DDP then FSDP2 in the same two processes, as the chapter runs them.
    return {"single": td.spawn("single", 1, out, **SMALL),
            **td.spawn_each(("ddp", "fsdp2"), 2, out, **SMALL)}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_processes_take_the_same_steps_as_one(runs, strategy):
    reference, records = runs["single"][0], runs[strategy]

    assert [r["rank"] for r in records] == [0, 1]
    assert len(records[0]["losses"]) == SMALL["check_steps"]
    np.testing.assert_allclose(records[0]["losses"], reference["losses"], rtol=1e-6)
    assert_same_parameters(records[0]["params"], reference["params"], **TOLERANCE)
    moved = sum(np.abs(v - td.make_model(32, 2).state_dict()[k].numpy()).max()
                for k, v in reference["params"].items())
    assert moved > 0  # the steps changed the weights, so equality means something


def test_a_rank_group_without_momentum_fails_the_check(runs, tmp_path):
    """The chapter's multi-step check catches DDP run with SGD momentum dropped."""
    options = {**SMALL, "sgd": {**td.SGD, "momentum": 0.0}}
    no_momentum = td.spawn("ddp", 2, str(tmp_path), **options)[0]

    with pytest.raises(AssertionError, match="parameter"):
        assert_same_parameters(no_momentum["params"], runs["single"][0]["params"], **TOLERANCE)


def test_fsdp2_holds_half_the_parameters_per_rank_and_ddp_all(runs):
    full = runs["single"][0]["param_bytes"]

    assert all(r["param_bytes"] == full for r in runs["ddp"])
    assert sum(r["param_bytes"] for r in runs["fsdp2"]) == full
    assert all(r["param_bytes"] < full for r in runs["fsdp2"])
    assert all(r["optimizer_bytes"] == r["param_bytes"] for r in runs["fsdp2"])  # momentum


def test_fsdp2_records_each_ranks_shard_shapes(runs):
    shapes = [r["local_shapes"]["4.weight"] for r in runs["fsdp2"]]  # the (10, 32) output

    assert shapes == [[5, 32], [5, 32]]  # dim 0 split over the ranks
    assert runs["single"][0]["local_shapes"]["4.weight"] == [10, 32]


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
    with pytest.raises(ValueError, match=message):
        td.spawn_each(("ddp", args[0]) if args[0] != "ddp" else (args[0],), *args[1:],
                      str(tmp_path))


def test_spawn_each_needs_a_strategy(tmp_path):
    with pytest.raises(ValueError, match="no strategies"):
        td.spawn_each((), 2, str(tmp_path))


def test_the_collectives_of_one_step_are_counted(runs):
    assert runs["single"][0]["collectives"] == {}
    assert runs["ddp"][0]["collectives"].get("all-reduce", 0) >= 1  # gradient buckets
    fsdp2 = runs["fsdp2"][0]["collectives"]
    assert fsdp2["reduce-scatter"] == 3  # one per sharded layer (three Linear layers)
    assert fsdp2["all-gather"] >= 3  # before each layer's forward, again before backward


@pytest.mark.parametrize(("counts", "expected"), [
    # torchrun --nnodes=2 --nproc-per-node=8 on 8-GPU nodes: NCCL, device = LOCAL_RANK
    (dict(world=16, rank=11, local_rank=3, local_world=8, cuda_available=True, cuda_count=8),
     ("nccl", 3)),
    # spawned on one machine with enough GPUs: the rank is the local rank
    (dict(world=4, rank=2, cuda_available=True, cuda_count=4), ("nccl", 2)),
    # fewer GPUs than this node's ranks, or no CUDA: gloo on the CPU
    (dict(world=16, rank=3, local_rank=3, local_world=8, cuda_available=True, cuda_count=4),
     ("gloo", None)),
    (dict(world=2, rank=1, cuda_available=False, cuda_count=0), ("gloo", None)),
])
def test_placement_uses_the_node_local_ranks(counts, expected):
    world = counts.pop("world")
    assert td.placement(world, **counts) == expected


@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp2"])
def test_parameter_storage_is_at_least_the_logical_bytes(runs, strategy):
    for record in runs[strategy]:
        assert record["param_storage_bytes"] >= record["param_bytes"] > 0
