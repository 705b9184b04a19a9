"""deepdive.models.torch_distributed: N real processes (gloo) train like one, over several steps."""

import json
from pathlib import Path

import numpy as np
import pytest

from deepdive.core.equality import assert_same_parameters
from deepdive.models import torch_distributed as td

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


def test_a_run_that_times_no_steps_still_checks_its_steps(runs, tmp_path):
    """Chapter 5 times nothing on simulated devices: steps=0 records no timings, and the
    checked steps are the same as a timed run's."""
    untimed = td.spawn("single", 1, str(tmp_path), **{**SMALL, "steps": 0})[0]

    assert untimed["step_s_median"] is None and untimed["step_s_samples"] == []
    np.testing.assert_allclose(untimed["losses"], runs["single"][0]["losses"], rtol=1e-6)
    assert_same_parameters(untimed["params"], runs["single"][0]["params"], **TOLERANCE)


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


# torchrun --nnodes=2 --nproc-per-node=8 on 8-GPU nodes: world 16, 8 ranks and GPUs a node
MULTI_NODE = dict(local_world=8, cuda_available=True, cuda_count=8)


@pytest.mark.parametrize(("world", "counts", "expected"), [
    # Each rank on its node's GPU LOCAL_RANK, not its global rank (rank 11 has no cuda:11).
    (16, dict(rank=11, local_rank=3, **MULTI_NODE), ("nccl", 3)),
    (16, dict(rank=8, local_rank=0, **MULTI_NODE), ("nccl", 0)),
    (16, dict(rank=7, local_rank=7, **MULTI_NODE), ("nccl", 7)),
    # One node of 8 GPUs, under torchrun or spawned: the rank is the local rank.
    (8, dict(rank=5, local_rank=5, local_world=8, cuda_available=True, cuda_count=8),
     ("nccl", 5)),
    (8, dict(rank=5, cuda_available=True, cuda_count=8), ("nccl", 5)),
    (2, dict(rank=1, cuda_available=True, cuda_count=8), ("nccl", 1)),  # spare GPUs idle
    (2, dict(rank=1, cuda_available=True, cuda_count=2), ("nccl", 1)),
    # One process: on the GPU wherever the distributed runs are, as their reference.
    (1, dict(cuda_available=True, cuda_count=1), ("nccl", 0)),
    (1, dict(cuda_available=True, cuda_count=8), ("nccl", 0)),
    # gloo only without CUDA, whatever the world...
    (1, dict(cuda_available=False, cuda_count=0), ("gloo", None)),
    (2, dict(rank=1, cuda_available=False, cuda_count=0), ("gloo", None)),
    (8, dict(rank=7, cuda_available=False, cuda_count=0), ("gloo", None)),
    (16, dict(rank=11, local_rank=3, local_world=8, cuda_available=False, cuda_count=0),
     ("gloo", None)),
    (2, dict(rank=1, cuda_available=True, cuda_count=0), ("gloo", None)),  # no GPU visible
    # ...or when the CPU is asked for, GPUs or not.
    (16, dict(rank=11, local_rank=3, device="cpu", **MULTI_NODE), ("gloo", None)),
    (4, dict(rank=3, device="cpu", cuda_available=True, cuda_count=1), ("gloo", None)),
    (1, dict(device="cpu", cuda_available=True, cuda_count=8), ("gloo", None)),
    (2, dict(rank=1, device="cuda", cuda_available=True, cuda_count=8), ("nccl", 1)),
])
def test_placement_uses_the_node_local_ranks(world, counts, expected):
    place = td.placement(world, **counts)

    assert place == expected
    assert place.device == ("cpu" if expected[1] is None else f"cuda:{expected[1]}")


@pytest.mark.parametrize(("world", "counts", "message"), [
    # A node with fewer GPUs than ranks is refused, not silently moved to gloo on the CPU.
    (16, dict(rank=3, local_rank=3, local_world=8, cuda_available=True, cuda_count=4),
     r"8 ranks on this node need a GPU each for NCCL, but it has 4 .*at most 4 ranks per "
     r"node \(torchrun --nproc-per-node=4.*device='cpu'"),
    (2, dict(rank=0, cuda_available=True, cuda_count=1),
     r"2 ranks on this node need a GPU each for NCCL, but it has 1 .*device='cpu'"),
    (8, dict(rank=7, device="cuda", cuda_available=True, cuda_count=4),
     "8 ranks on this node need a GPU each"),
    (2, dict(device="cuda", cuda_available=False, cuda_count=0),
     r"device='cuda' was asked for but CUDA is not available.*accepted: device='cpu'"),
    (2, dict(device="tpu", cuda_available=False, cuda_count=0),
     r"device must be one of \('cuda', 'cpu'\) or None"),
    (16, dict(rank=16, cuda_available=False, cuda_count=0), r"rank must be .* in 0\.\.15"),
    (16, dict(rank=11, local_rank=8, local_world=8, cuda_available=True, cuda_count=8),
     r"local rank \(LOCAL_RANK\) must be an integer in 0\.\.7"),
    (16, dict(local_world=17, cuda_available=True, cuda_count=8),
     r"local world size .* must be an integer in 1\.\.16"),
    (0, dict(cuda_available=False, cuda_count=0), "world size must be an integer >= 1"),
])
def test_placement_refuses_what_cannot_run_and_says_what_is_accepted(world, counts, message):
    with pytest.raises(ValueError, match=message):
        td.placement(world, **counts)


@pytest.mark.parametrize("device", [None, "cpu", "cuda"])
@pytest.mark.parametrize(("cuda_available", "cuda_count"), [(False, 0), (True, 1), (True, 8)])
def test_the_one_process_reference_runs_on_the_distributed_runs_device(
        device, cuda_available, cuda_count):
    counts = dict(cuda_available=cuda_available, cuda_count=cuda_count, device=device)
    try:
        distributed = td.placement(max(cuda_count, 2), **counts)
    except ValueError:  # nothing runs there, so there is nothing to match
        return
    one = td.placement(1, **counts)

    assert one.device.split(":")[0] == distributed.device.split(":")[0]


def test_a_rank_binds_the_gpu_of_its_local_rank(monkeypatch):
    """The process-side glue: torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE, torch's counts,
    and `torch.cuda.set_device` on the local rank (a CPU machine, CUDA faked)."""
    import torch

    bound = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", bound.append)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")

    place, device = td._bind(16, 11)

    assert place == ("nccl", 3) and device == torch.device("cuda", 3) and bound == [3]
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    bound.clear()
    assert td._bind(1, 0)[1] == torch.device("cuda", 0) and bound == [0]  # the reference
    assert td._bind(2, 1, "cpu")[1] == torch.device("cpu") and bound == [0]


def test_a_label_names_the_cpu_for_work_placed_on_it_even_beside_a_gpu():
    cpu, gpu = td.Placement("gloo", None), td.Placement("nccl", 2)

    assert td.device_label(cpu, gpu_name="NVIDIA H100", cpu_label="EPYC (8 cores)") == \
        "EPYC (8 cores)"
    assert td.device_label(gpu, gpu_name="NVIDIA H100", cpu_label="EPYC (8 cores)") == \
        "NVIDIA H100"
    with pytest.raises(ValueError, match="needs the GPU's name"):
        td.device_label(gpu, gpu_name=None, cpu_label="EPYC (8 cores)")


@pytest.mark.skipif(td._cuda_counts()["cuda_available"], reason="needs a machine without CUDA")
def test_asking_for_cuda_without_it_is_refused_before_any_process_starts(tmp_path):
    with pytest.raises(ValueError, match="CUDA is not available"):
        td.spawn("ddp", 2, str(tmp_path), device="cuda")
    with pytest.raises(ValueError, match="device must be one of"):
        td.spawn("ddp", 2, str(tmp_path), device="gpu")


@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp2"])
def test_every_record_says_where_and_in_what_precision_its_rank_ran(runs, strategy):
    from deepdive.core.env import cpu_label, is_cpu_label

    on_cpu = not td._cuda_counts()["cuda_available"]
    for record in runs[strategy]:
        assert record["local_rank"] == record["rank"]  # spawned: one node
        if on_cpu:
            assert record["device"] == "cpu"
            assert record["device_label"] == cpu_label() and is_cpu_label(record["device_label"])
            assert record["backend"] == ("none" if strategy == "single" else "gloo")
        # Strict fp32 in the worker itself: a spawned process starts from torch's defaults,
        # where cuDNN may use TF32.
        assert record["precision"] == {"float32_matmul_precision": "highest",
                                       "cuda.matmul.allow_tf32": False,
                                       "cudnn.allow_tf32": False}


@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp2"])
def test_parameter_storage_is_at_least_the_logical_bytes(runs, strategy):
    for record in runs[strategy]:
        assert record["param_storage_bytes"] >= record["param_bytes"] > 0


def _write_records(folder, strategy, world):
    np.savez(folder / f"{strategy}-params.npz", w=np.zeros(2))
    for rank in range(world):
        (folder / f"{strategy}-rank{rank}.json").write_text(json.dumps({"rank": rank}))


def test_a_run_is_finished_only_with_every_ranks_record_and_the_parameters(tmp_path):
    assert not td.finished(("ddp",), 2, str(tmp_path))
    _write_records(tmp_path, "ddp", 2)
    assert td.finished(("ddp",), 2, str(tmp_path))
    assert not td.finished(("ddp", "fsdp2"), 2, str(tmp_path))
    (tmp_path / "ddp-rank1.json").unlink()
    assert not td.finished(("ddp",), 2, str(tmp_path))


def _fake_spawn(monkeypatch, outcomes):
    """torch.multiprocessing.spawn replaced: each call takes the next outcome, writing the
    records or not, then dying by a signal, raising in a rank, or returning."""
    import torch.multiprocessing as mp

    calls = []

    def spawn(fn, args, nprocs, join):
        strategies, world, out_dir, _ = args
        writes, ends = outcomes[len(calls)]
        calls.append(ends)
        if writes:
            for s in strategies:
                _write_records(Path(out_dir), s, world)
        if ends == "signal":
            raise mp.ProcessExitedException("process 1 terminated with signal SIGABRT",
                                            error_index=1, error_pid=1, exit_code=-6,
                                            signal_name="SIGABRT")
        if ends == "exit":
            raise mp.ProcessExitedException("process 1 terminated with exit code 1",
                                            error_index=1, error_pid=1, exit_code=1)

    monkeypatch.setattr(mp, "spawn", spawn)
    return calls


OPTIONS = dict(width=8, depth=1, batch_size=8, check_steps=2, steps=0, device="cpu")


def test_a_rank_killed_after_writing_its_records_keeps_them(monkeypatch, tmp_path):
    calls = _fake_spawn(monkeypatch, [(True, "signal")])
    with pytest.warns(UserWarning, match="kept them"):
        runs = td.spawn_each(("ddp",), 2, str(tmp_path), **OPTIONS)
    assert calls == ["signal"] and [r["rank"] for r in runs["ddp"]] == [0, 1]


def test_a_rank_killed_before_its_records_runs_once_more_then_fails(monkeypatch, tmp_path):
    calls = _fake_spawn(monkeypatch, [(False, "signal"), (True, "ok")])
    with pytest.warns(UserWarning, match="attempt 2 of 2"):
        td.spawn_each(("ddp",), 2, str(tmp_path), **OPTIONS)
    assert calls == ["signal", "ok"]
    _fake_spawn(monkeypatch, [(False, "signal"), (False, "signal")])
    with pytest.warns(UserWarning), pytest.raises(Exception, match="SIGABRT"):
        td.spawn_each(("ddp",), 2, str(tmp_path / "again"), **OPTIONS)


def test_a_rank_that_exits_with_an_error_is_not_run_again(monkeypatch, tmp_path):
    calls = _fake_spawn(monkeypatch, [(True, "exit")])
    with pytest.raises(Exception, match="exit code 1"):
        td.spawn_each(("ddp",), 2, str(tmp_path), **OPTIONS)
    assert calls == ["exit"]


# What chapter 6 shows of the ranks' code: the step, the bytes a rank counts, the row shards.

def test_a_rank_step_is_one_sgd_step_on_its_slice():
    import torch
    import torch.nn.functional as F

    model, reference = td.make_model(8, 1), td.make_model(8, 1)
    x, y = td.global_batch(4, 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = td.train_step(model, optimizer, x, y)

    expected = F.cross_entropy(reference(x), y)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item())
    assert not loss.requires_grad
    for name, param in model.named_parameters():
        before = dict(reference.named_parameters())[name]
        torch.testing.assert_close(param, before - 0.1 * before.grad)
        assert param.grad is not None and not param.grad.any()  # zeroed, kept allocated


def test_the_ranks_slices_tile_the_global_batch_in_rank_order():
    import torch

    images, labels = td.global_batch(12, 0)
    for batch in (images, labels):
        parts = [td.rank_slice(batch, rank, 4) for rank in range(4)]
        assert [len(p) for p in parts] == [3] * 4
        torch.testing.assert_close(torch.cat(parts), batch)
    with pytest.raises(ValueError, match="evenly"):
        td.rank_slice(images, 0, 5)


def test_fsdp2_wrapping_walks_a_sequential_only():
    import torch
    from torch import nn

    layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    with pytest.raises(TypeError, match="Sequential"):  # refused before any process group
        td.wrap(encoder, "fsdp2", 1, torch.device("cpu"))
    model = td.make_model(8, 1)
    assert td.wrap(model, "single", 1, torch.device("cpu")) is model


def test_a_rank_counts_its_parameters_gradients_and_momentum():
    import torch

    model = td.make_model(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), **td.SGD)
    n_bytes = 4 * sum(p.numel() for p in model.parameters())
    fresh = td.local_bytes(model, optimizer)
    assert fresh == dict(param_bytes=n_bytes, param_storage_bytes=n_bytes, grad_bytes=0,
                         optimizer_bytes=0)
    td.train_step(model, optimizer, *td.global_batch(4, 0))
    stepped = td.local_bytes(model, optimizer)
    assert stepped["grad_bytes"] == stepped["optimizer_bytes"] == n_bytes  # momentum buffers


def test_each_rank_holds_its_rows():
    rows = np.arange(8.0).reshape(4, 2)
    assert td.torch_shards(rows, world=2) == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]
    assert td.torch_shards(np.arange(3.0), world=2) == [[0.0, 1.0], [2.0]]  # as torch.chunk


@pytest.mark.parametrize("world", [0, -1, 2.0, True])
def test_row_shards_need_a_world(world):
    with pytest.raises(ValueError, match="world must be an integer"):
        td.torch_shards(np.zeros(2), world=world)
