"""Data-parallel training with torch.distributed: DDP and FSDP2 (`fully_shard`), chapter 6.

The same `train` runs in processes spawned from a notebook (`spawn`) and under torchrun:

    torchrun --nnodes=2 --nproc-per-node=8 -m deepdive.models.torch_distributed --strategy fsdp2

Where each rank runs is decided by `placement`, a pure function of the counts (unit-tested
for that command): NCCL on the GPU of the rank's LOCAL_RANK when CUDA is there, gloo on the
CPU only without CUDA or when asked for (`device="cpu"`), and a clear error when a node has
fewer GPUs than ranks. The one-process reference runs on the same kind of device.

Each rank trains a small MLP on its slice of one global batch per step and writes what it
saw (the losses and full parameters after the first `check_steps` steps, the memory it
holds after them, its local shard shapes, its step times if it timed any) to `out_dir`,
so the caller can check N processes against one over several steps: one step cannot tell
SGD with momentum from SGD without it (the first momentum buffer is the gradient itself).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["CHECK_STEPS", "COLLECTIVE_NAMES", "DEVICES", "SGD", "SPAWN_ATTEMPTS", "STRATEGIES",
           "TIMED_STEPS", "Placement", "device_label", "finished", "global_batch", "local_bytes",
           "main", "make_model", "placement", "rank_slice", "read_records", "shard_rows", "spawn",
           "spawn_each", "torch_shards", "train", "train_step", "wrap"]

STRATEGIES = ("single", "ddp", "fsdp2")
SGD = dict(lr=0.05, momentum=0.9)  # SGD: Adam's sign-like first step would amplify rounding
CHECK_STEPS = 6  # steps compared against one process: momentum shows from the second on
TIMED_STEPS = 20  # steps timed after the checked ones, one sample each (0: time none)
# A run whose rank dies by a signal before every record is written runs once more
SPAWN_ATTEMPTS = 2
DEVICES = ("cuda", "cpu")  # what `device=` accepts; None: CUDA wherever it is available


def make_model(width: int, depth: int, n_in: int = 64, n_out: int = 10, seed: int = 0):
    """The chapter's MLP, identically initialised in every process."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers, size = [], n_in
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.GELU()]
        size = width
    layers.append(nn.Linear(size, n_out))
    return nn.Sequential(*layers)


def global_batch(batch_size: int, step: int, n_in: int = 64, n_out: int = 10):
    """Batch number `step` of the run: the same in every process, so ranks can slice it."""
    import torch

    generator = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(batch_size, n_in, generator=generator),
            torch.randint(0, n_out, (batch_size,), generator=generator))


def train(strategy: str, rank: int, world: int, out_dir: str, *, width: int = 256,
          depth: int = 3, batch_size: int = 64, steps: int = TIMED_STEPS,
          check_steps: int = CHECK_STEPS, sgd: dict | None = None,
          device: str | None = None) -> None:
    """One rank's run: wrap the model per `strategy`, train `check_steps` steps and record
    the parameters, then time `steps` more (one sample each; `steps=0` times none, where
    the timings would mean nothing, as on devices simulated on one CPU), and write the
    record.
    `sgd` overrides the optimizer's options (the tests drop the momentum on one side).
    `device` is "cuda", "cpu" or None (CUDA where available), as in `placement`; the
    record says where the rank ran, and in what fp32 precision (strict, set here: this is
    a fresh process, and the notebook's settings do not reach it)."""
    import torch
    import torch.distributed as dist

    from deepdive.core.env import cpu_label
    from deepdive.core.sync import block
    from deepdive.models.parity import strict_fp32

    _check(strategy, world, batch_size, device)
    if not isinstance(check_steps, int) or check_steps < 1:
        raise ValueError(f"check_steps must be an integer >= 1, got {check_steps!r}")
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    place, device = _bind(world, rank, device)
    own_group = strategy != "single" and not dist.is_initialized()  # else the caller's
    if own_group:
        dist.init_process_group(place.backend, rank=rank, world_size=world)
    precision = strict_fp32(jax=False).settings  # a torch-only rank: JAX left alone
    torch.set_num_threads(1)  # the ranks share this machine's cores
    if strategy == "fsdp2":  # this worker's own process; the warning is about in-place ops
        import warnings  # on the model's output, and the loss reads it out of place

        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
    model = wrap(make_model(width, depth).to(device), strategy, world, device)
    optimizer = torch.optim.SGD(model.parameters(), **(SGD if sgd is None else sgd))
    counter = iter(range(10**9))

    def step():  # the same global batch in every rank, each training on its own rows
        images, labels = global_batch(batch_size, next(counter))
        x, y = (rank_slice(t, rank, world).to(device) for t in (images, labels))
        return train_step(model, optimizer, x, y)

    start = time.perf_counter()
    local_losses = [block(step())]
    first_call = time.perf_counter() - start
    local_losses += [step() for _ in range(check_steps - 2)]
    counted = {}
    if check_steps > 1:  # the last checked step, past DDP's bucket rebuild: a steady one
        with _counting_collectives() as counted:
            local_losses.append(step())
    losses = [_all_ranks_mean(loss, strategy) for loss in local_losses]
    params = _full_parameters(model)
    memory = local_bytes(model, optimizer)  # after the steps: momentum buffers exist
    shapes = {name.removeprefix("module."): list(_local(p).shape)
              for name, p in model.named_parameters()}
    # A fixed count, one step per sample: every rank must run the same number of steps,
    # or the collectives inside them wait forever (no autorange here).
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        block(step())
        samples.append(time.perf_counter() - start)
    if strategy != "single":
        dist.barrier()
    if own_group:
        dist.destroy_process_group()
    if rank == 0:
        np.savez(Path(out_dir) / f"{strategy}-params.npz", **params)
    gpu = None if place.cuda_index is None else torch.cuda.get_device_name(place.cuda_index)
    record = {"strategy": strategy, "rank": rank, "world": world, "losses": losses,
              "check_steps": check_steps, "local_shapes": shapes,
              "collectives": counted,
              "backend": "none" if strategy == "single" else place.backend,
              "device": place.device, "local_rank": _local_rank(rank),
              "device_label": device_label(place, gpu_name=gpu, cpu_label=cpu_label()),
              "precision": precision,
              "first_call_s": first_call,
              "step_s_median": float(np.median(samples)) if samples else None,
              "step_s_samples": samples, **memory}
    (Path(out_dir) / f"{strategy}-rank{rank}.json").write_text(json.dumps(record))


def spawn(strategy: str, world: int, out_dir: str, **options) -> list[dict]:
    """Run `train` in `world` fresh processes (torch.multiprocessing) and read their records."""
    return spawn_each((strategy,), world, out_dir, **options)[strategy]


def spawn_each(strategies, world: int, out_dir: str, **options) -> dict[str, list[dict]]:
    """Run `train` for each strategy in turn, in the same `world` fresh processes and
    process group (starting processes costs more than these small runs), and read the
    records of each. Every strategy builds its own model and optimizer from scratch."""
    import torch.multiprocessing as mp

    strategies = tuple(strategies)
    if not strategies:
        raise ValueError("no strategies to run")
    for strategy in strategies:
        _check(strategy, world, options.get("batch_size", 64), options.get("device"))
    # Every rank is on this machine: refuse a placement that cannot work (CUDA asked for
    # and absent, fewer GPUs than ranks) before any process starts.
    placement(world, **_cuda_counts(), local_rank=0, local_world=world,
              device=options.get("device"))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    for attempt in range(1, SPAWN_ATTEMPTS + 1):
        for stale in _record_paths(strategies, out_dir):  # a failed attempt's, never read
            stale.unlink()
        os.environ["MASTER_PORT"] = str(_free_port())
        try:
            mp.spawn(_spawned, args=(strategies, world, out_dir, options), nprocs=world,
                     join=True)
            break
        except mp.ProcessExitedException as error:
            # A rank killed by a signal (Gloo's threads can abort a process on its way out:
            # "terminate called without an active exception") is the runtime's failure, not
            # the run's; a rank that raised is the run's, and its traceback is the error.
            if error.signal_name is None:
                raise
            if finished(strategies, world, out_dir):
                warnings.warn(f"{error} after every rank had written its records: kept them",
                              stacklevel=2)
                break
            if attempt == SPAWN_ATTEMPTS:
                raise
            warnings.warn(f"{error} before every rank had written its records: running the "
                          f"{world} processes again (attempt {attempt + 1} of {SPAWN_ATTEMPTS})",
                          stacklevel=2)
    return {strategy: read_records(strategy, out_dir) for strategy in strategies}


def _record_paths(strategies, out_dir: str) -> list[Path]:
    return [p for s in strategies for p in (*Path(out_dir).glob(f"{s}-rank*.json"),
                                            Path(out_dir) / f"{s}-params.npz") if p.exists()]


def finished(strategies, world: int, out_dir: str) -> bool:
    """Whether every rank of `world` wrote its record for every strategy, and rank 0 the
    parameters: the run's results are whole whatever happened to its processes after."""
    folder = Path(out_dir)
    return all((folder / f"{s}-params.npz").is_file()
               and all((folder / f"{s}-rank{r}.json").is_file() for r in range(world))
               for s in strategies)


def read_records(strategy: str, out_dir: str) -> list[dict]:
    """The per-rank records a run wrote, rank order, with rank 0's parameters attached."""
    paths = sorted(Path(out_dir).glob(f"{strategy}-rank*.json"),
                   key=lambda p: int(p.stem.split("rank")[1]))
    records = [json.loads(p.read_text()) for p in paths]
    with np.load(Path(out_dir) / f"{strategy}-params.npz") as params:
        records[0]["params"] = dict(params)
    return records


def _spawned(rank, strategies, world, out_dir, options):
    import torch.distributed as dist

    # What torchrun would set: every spawned rank is on this one node.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world))
    group = world > 1 or any(s != "single" for s in strategies)
    if group:  # one process group for every strategy of this run, on this rank's device
        place, _ = _bind(world, rank, options.get("device"))
        dist.init_process_group(place.backend, rank=rank, world_size=world)
    try:
        for strategy in strategies:
            train(strategy, rank, world, out_dir, **options)
    finally:
        if group:
            dist.destroy_process_group()


def train_step(model, optimizer, x, y):
    """One rank's training step on its slice of the global batch. Under DDP and FSDP2 the
    communication happens inside `backward()`, so the step reads as a one-device step."""
    import torch.nn.functional as F

    loss = F.cross_entropy(model(x), y)  # the mean over this rank's slice
    loss.backward()  # DDP: all-reduce of gradient buckets; FSDP2: gathers, reduce-scatters
    optimizer.step()  # FSDP2: each rank updates its own shard only
    optimizer.zero_grad(set_to_none=False)  # keep gradients allocated, as in training
    return loss.detach()


def shard_rows(rank: int, world: int, port: int, array: np.ndarray) -> list:
    """One process's part of `array` under DTensor's `Shard(0)` on a gloo mesh: the rank
    function of chapter 6's first example (`torch_shards`)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{port}")
    try:
        mesh = init_device_mesh("cpu", (world,))
        return distribute_tensor(torch.as_tensor(array), mesh, [Shard(0)]).to_local().tolist()
    finally:
        dist.destroy_process_group()


def torch_shards(array, world: int) -> list[list]:
    """What each of `world` processes holds of `array` sharded by rows (`shard_rows`), in
    rank order. The processes fork from one server that imported torch once, so the
    example stays quick."""
    import multiprocessing

    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world must be an integer >= 1, got {world!r}")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch"])
    port = _free_port()
    with context.Pool(world) as pool:  # every task waits for all ranks: one per process
        return pool.starmap(shard_rows, [(r, world, port, np.asarray(array))
                                         for r in range(world)], chunksize=1)


def rank_slice(tensor, rank: int, world: int):
    """Rank `rank`'s rows of a global batch split evenly over `world` ranks, in rank order."""
    if len(tensor) % world:
        raise ValueError(f"{len(tensor)} rows do not split evenly over {world} ranks")
    local = len(tensor) // world
    return tensor[rank * local:(rank + 1) * local]


def wrap(model, strategy: str, world: int, device):
    """The chapter's MLP (an `nn.Sequential`) wrapped for `strategy`: DDP replicas, FSDP2
    shards with each `nn.Linear` its own unit and the root last, or as is. The FSDP2 loop
    walks a Sequential's layers; a transformer is wrapped block by block instead."""
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=None if device.type == "cpu" else
                                       [device.index])
    if strategy == "fsdp2":
        from torch import nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        if not isinstance(model, nn.Sequential):  # the loop below walks a Sequential only
            raise TypeError(f"wrap shards an nn.Sequential layer by layer, got "
                            f"{type(model).__name__}: call fully_shard on its blocks, then on it")
        mesh = init_device_mesh(device.type, (world,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)  # each layer's parameters gathered on use
        fully_shard(model, mesh=mesh)
    return model


def _full_parameters(model) -> dict[str, np.ndarray]:
    """Every parameter, whole: FSDP2 shards are gathered (a collective, so all ranks call)."""
    full = {}
    for name, param in model.named_parameters():
        tensor = param.full_tensor() if hasattr(param, "full_tensor") else param
        # A copy: on a CPU .numpy() shares memory, and training goes on after this.
        full[name.removeprefix("module.")] = tensor.detach().cpu().numpy().copy()
    return full


def local_bytes(model, optimizer) -> dict[str, int]:
    """Bytes this rank holds for parameters, gradients and optimizer state: each tensor's
    local part (an FSDP2 DTensor's shard), and the parameters' storage as allocated."""

    def size(tensor):
        tensor = _local(tensor)
        return tensor.numel() * tensor.element_size()

    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if hasattr(v, "numel")]
    storages = {}  # what the parameters' local storage allocates, each storage once: an
    for p in params:  # FSDP2 shard can be a view into a padded buffer, larger than its numel
        storage = _local(p).untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return {"param_bytes": sum(size(p) for p in params),
            "param_storage_bytes": sum(storages.values()),
            "grad_bytes": sum(size(p.grad) for p in params if p.grad is not None),
            "optimizer_bytes": sum(size(v) for v in state)}


COLLECTIVE_NAMES = {"allreduce_": "all-reduce", "allgather_": "all-gather",
                    "_allgather_base_": "all-gather", "allgather_into_tensor_coalesced_":
                    "all-gather", "reduce_scatter_": "reduce-scatter",
                    "_reduce_scatter_base_": "reduce-scatter",
                    "reduce_scatter_tensor_coalesced_": "reduce-scatter",
                    "broadcast_": "broadcast", "alltoall_": "all-to-all",
                    "alltoall_base_": "all-to-all"}


@contextmanager
def _counting_collectives():
    """Count the torch.distributed collectives run inside, named as in XLA's HLO: yields a
    dict filled on exit. `CommDebugMode` sees every c10d operation that goes through the
    dispatcher, DDP's bucketed all-reduce and FSDP2's gathers and reduce-scatters included."""
    import warnings

    from torch.distributed.tensor.debug import CommDebugMode

    counts: dict[str, int] = {}
    with warnings.catch_warnings(), CommDebugMode() as mode:
        # Its module hooks make autograd warn that no input requires a gradient: true, harmless.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        yield counts
    for op, count in mode.get_comm_counts().items():
        name = COLLECTIVE_NAMES.get(str(op).split(".")[-1], str(op).split(".")[-1])
        counts[name] = counts.get(name, 0) + count


def _local(tensor):
    """This rank's part of a tensor: the local shard of an FSDP2 DTensor, else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _all_ranks_mean(loss, strategy) -> float:
    if strategy == "single":
        return loss.item()
    import torch.distributed as dist

    total = loss.clone()
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()


class Placement(NamedTuple):
    """Where one rank runs: its process-group backend and its CUDA device index (None: the
    CPU). Compares equal to the tuple ``(backend, cuda_index)``."""

    backend: str
    cuda_index: int | None

    @property
    def device(self) -> str:
        """The torch device: "cuda:3", or "cpu"."""
        return "cpu" if self.cuda_index is None else f"cuda:{self.cuda_index}"


def placement(world: int, *, cuda_available: bool, cuda_count: int,
              local_rank: int | None = None, local_world: int | None = None,
              rank: int = 0, device: str | None = None) -> Placement:
    """The backend and CUDA device index (None: CPU) for one rank, from counts alone.

    `device="cuda"`, or None where CUDA is available: NCCL, and the device is the rank on
    this node (torchrun's LOCAL_RANK), not the global rank; the node needs a GPU for each
    of its ranks (LOCAL_WORLD_SIZE), not for the whole world, which spans nodes. A node
    with fewer GPUs is an error, not a silent fall-back to the CPU. `device="cpu"`, or None
    without CUDA: gloo on the CPU. Spawned on one machine (no LOCAL_* variables), the
    node's ranks are the world and the local rank is the rank. One process (world 1) is
    placed as any rank is, so the reference runs on the distributed runs' device."""
    if device is not None and device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES} or None (CUDA where available), "
                         f"got {device!r}")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world size must be an integer >= 1, got {world!r}")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"rank must be an integer in 0..{world - 1} (world size {world}), "
                         f"got {rank!r}")
    local_world = world if local_world is None else local_world
    local_rank = rank if local_rank is None else local_rank
    if not isinstance(local_world, int) or not 1 <= local_world <= world:
        raise ValueError(f"local world size (LOCAL_WORLD_SIZE, the ranks on this node) must "
                         f"be an integer in 1..{world} (world size {world}), "
                         f"got {local_world!r}")
    if not isinstance(local_rank, int) or not 0 <= local_rank < local_world:
        raise ValueError(f"local rank (LOCAL_RANK) must be an integer in 0..{local_world - 1}"
                         f" ({local_world} ranks on this node), got {local_rank!r}")
    if not isinstance(cuda_count, int) or cuda_count < 0:
        raise ValueError(f"cuda_count must be an integer >= 0, got {cuda_count!r}")
    has_cuda = bool(cuda_available) and cuda_count > 0
    if device == "cpu" or (device is None and not has_cuda):
        return Placement("gloo", None)
    if not has_cuda:
        raise ValueError("device='cuda' was asked for but CUDA is not available here "
                         f"(torch.cuda.is_available() is {bool(cuda_available)}, "
                         f"{cuda_count} GPUs); accepted: device='cpu' (gloo), or None "
                         "(CUDA where available)")
    if cuda_count < local_world:
        raise ValueError(
            f"{local_world} ranks on this node need a GPU each for NCCL, but it has "
            f"{cuda_count} (torch.cuda.device_count()); accepted: at most {cuda_count} "
            f"ranks per node (torchrun --nproc-per-node={cuda_count}, or a world size of at "
            f"most {cuda_count} when spawned), or device='cpu' to run every rank on the CPU "
            "with gloo")
    return Placement("nccl", local_rank)


def device_label(place: Placement, *, gpu_name: str | None, cpu_label: str) -> str:
    """What a record names as the device its rank ran on: the GPU for a CUDA placement, the
    CPU (`env.cpu_label()`) for a CPU one, even on a machine that has a GPU."""
    if place.cuda_index is None:
        return cpu_label
    if not gpu_name:
        raise ValueError(f"a rank placed on {place.device} needs the GPU's name, got "
                         f"{gpu_name!r}")
    return gpu_name


def _cuda_counts() -> dict:
    import torch

    available = torch.cuda.is_available()
    return {"cuda_available": available,
            "cuda_count": torch.cuda.device_count() if available else 0}


def _local_rank(rank: int) -> int:
    return int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else rank


def _bind(world: int, rank: int, device: str | None = None):
    """This process's `Placement`, from torch's CUDA counts and torchrun's LOCAL_RANK and
    LOCAL_WORLD_SIZE, and its torch device, made the current CUDA device when it is one."""
    import torch

    env = os.environ
    place = placement(world, **_cuda_counts(), rank=rank, device=device,
                      local_rank=int(env["LOCAL_RANK"]) if "LOCAL_RANK" in env else None,
                      local_world=(int(env["LOCAL_WORLD_SIZE"]) if "LOCAL_WORLD_SIZE" in env
                                   else None))
    if place.cuda_index is not None:
        torch.cuda.set_device(place.cuda_index)
    return place, torch.device(place.device)


def _check(strategy: str, world: int, batch_size: int, device: str | None = None) -> None:
    if device is not None and device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES} or None (CUDA where available), "
                         f"got {device!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world size must be an integer >= 1, got {world!r}")
    if strategy == "single" and world != 1:
        raise ValueError(f"strategy 'single' runs one process, got world size {world}")
    if batch_size % world:
        raise ValueError(f"batch_size {batch_size} must split evenly over {world} ranks")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    """Entry point under torchrun, which sets RANK and WORLD_SIZE for every process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=STRATEGIES[1:], default="ddp")
    parser.add_argument("--out-dir", default="_build/distributed")
    parser.add_argument("--steps", type=int, default=TIMED_STEPS)
    parser.add_argument("--device", choices=DEVICES, default=None,
                        help="default: CUDA where available (NCCL), else the CPU (gloo)")
    args = parser.parse_args()
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    train(args.strategy, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.out_dir,
          steps=args.steps, device=args.device)
    print(f"rank {os.environ['RANK']} done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
