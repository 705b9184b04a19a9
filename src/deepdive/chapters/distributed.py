"""The distributed-training chapter (`ch-distributed`): the JAX layouts of the chapter's MLP
training step, the tables the page shows, the checks it asserts and the sentences it glues.

The page shows the technique (the `shard_map` steps, the PyTorch worker's `wrap`); this
module holds the machinery around it: placing state and batches on a mesh, compiling and
training each layout, reading the collectives and bytes per device into tables, and turning
those numbers (or, on real GPUs, the claims) into the page's sentences. Nothing here imports
torch or jax at import time: `before_jax` must run before JAX starts.
"""

from __future__ import annotations

import os
import re
import socket
import sys

import numpy as np

from deepdive.core import env

__all__ = ["DEVICE_FLAG", "FRAMEWORK_KEY", "FSDP_READING", "SINGLE", "Layouts",
           "assert_check_catches", "before_jax", "both_ran", "by_torch_name", "bytes_by_device",
           "check_counts", "check_fsdp_collectives", "claim_layouts", "claims_found_simulated",
           "collective_glue", "collectives_table", "constraints_reading", "equality_rows",
           "first_axes", "found_reading", "fsdp_peak_reading", "fullest_share", "gap_one_step",
           "gap_over_worst", "is_strict", "jax_batch", "jax_params", "loss_fn", "memory_table",
           "output_split_reading", "padded", "peak_table", "plot_memory", "plot_memory_plan",
           "plot_step_times", "proofs_table", "record", "scope_sentence", "sgd", "shard_table",
           "spelled", "step_time_reading", "step_time_table", "summary_caption", "timing_status",
           "torch_shards", "train_step", "with_device_count"]

DEVICE_FLAG = "--xla_force_host_platform_device_count"
FRAMEWORK_KEY = {"PyTorch": "torch", "JAX": "jax"}  # as the other chapters save them
SINGLE = {"JAX": "one device", "PyTorch": "single"}  # each framework's one-device reference
# What FSDP's verdict against data parallelism means, by verdict (real GPUs only).
FSDP_READING = {
    "faster": "on these GPUs its gathers, reduce-scatters and an update of one shard per device "
              "cost less than one all-reduce plus the whole update repeated on every device; "
              "which of these parts saves the time is not measured here.",
    "slower": "its gathers and reduce-scatters cost more than data parallelism's one "
              "all-reduce on these GPUs, the price of holding a fraction of the state.",
    "tie": "its extra collectives cost no measurable time on these GPUs.",
    "withheld": "this build cannot tell whether its extra collectives cost time."}


# Before JAX starts ----------------------------------------------------------------------

def with_device_count(flags: str, n: int) -> str:
    """`flags` (XLA_FLAGS) with the host platform's device count set to `n`, once."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"a device count must be an integer >= 1, got {n!r}")
    kept = re.sub(rf"\s*{DEVICE_FLAG}=\S*", "", flags).strip()
    return f"{kept} {DEVICE_FLAG}={n}".strip()


def before_jax(cpu_devices: int) -> int:
    """Make this CPU pose as `cpu_devices` JAX devices (XLA's host device count), let JAX
    share a GPU with PyTorch (`env.let_jax_share_the_gpu`) and give both frameworks every
    core (the ranks run side by side on them; `env.pin_cpu_threads`). All are read when
    JAX's backend starts, so this refuses once `jax` is imported. Returns the thread count."""
    if "jax" in sys.modules:
        raise RuntimeError("before_jax must run before `import jax`: XLA fixes its device list "
                           "when its backend starts; restart the kernel and call it first")
    os.environ["XLA_FLAGS"] = with_device_count(os.environ.get("XLA_FLAGS", ""), cpu_devices)
    env.let_jax_share_the_gpu()
    return env.pin_cpu_threads(env.available_cores())


def _shard_of_rank(rank: int, world: int, port: int, array: np.ndarray) -> list:
    """One PyTorch process's part of `array` under DTensor's `Shard(0)` on a gloo mesh."""
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
    """What each of `world` PyTorch processes holds of `array` sharded by rows
    (`distribute_tensor(x, mesh, [Shard(0)])` on a CPU mesh), in rank order. The processes
    fork from one server that imported torch once, so the example stays quick."""
    import multiprocessing

    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world must be an integer >= 1, got {world!r}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch"])
    with context.Pool(world) as pool:  # every task waits for all ranks: one per process
        return pool.starmap(_shard_of_rank, [(r, world, port, np.asarray(array))
                                             for r in range(world)], chunksize=1)


# The JAX model and its layouts ------------------------------------------------------------

def jax_params(model) -> list[tuple]:
    """The PyTorch MLP's weights as JAX arrays, (w, b) per linear layer, in x @ w layout."""
    import jax.numpy as jnp
    import torch

    return [(jnp.asarray(m.weight.detach().numpy().T), jnp.asarray(m.bias.detach().numpy()))
            for m in model.children() if isinstance(m, torch.nn.Linear)]


def first_axes(params) -> list[tuple[int, int]]:
    """Each array's first-axis length: what is left once padding is cut off."""
    return [(w.shape[0], b.shape[0]) for w, b in params]


def loss_fn(params, x, y):
    """The MLP's mean cross-entropy, GELU exact as PyTorch's."""
    import jax
    import optax

    h = x
    for w, b in params[:-1]:
        h = jax.nn.gelu(h @ w + b, approximate=False)
    w, b = params[-1]
    return optax.softmax_cross_entropy_with_integer_labels(h @ w + b, y).mean()


def sgd(momentum: bool = True):
    """The PyTorch worker's SGD (`torch_distributed.SGD`) in optax, or without momentum."""
    import optax

    from deepdive.models import torch_distributed as td

    return optax.sgd(td.SGD["lr"], momentum=td.SGD["momentum"] if momentum else None)


def padded(array, n: int):
    """`array` with zero rows added so its first axis splits evenly over `n` devices."""
    import jax.numpy as jnp

    rows = -(-array.shape[0] // n) * n
    return jnp.pad(array, [(0, rows - array.shape[0])] + [(0, 0)] * (array.ndim - 1))


def jax_batch(batch_size: int, step: int) -> tuple:
    """Global batch number `step`: the very batch the PyTorch processes slice."""
    import jax.numpy as jnp

    from deepdive.models import torch_distributed as td

    return tuple(jnp.asarray(t.numpy()) for t in td.global_batch(batch_size, step))


def by_torch_name(params, rows) -> dict[str, np.ndarray]:
    """JAX's parameters under PyTorch's names and layout, padding (beyond `rows`) cut off."""
    named = {}
    for i, ((w, b), (w_rows, b_rows)) in enumerate(zip(params, rows, strict=True)):
        named[f"{2 * i}.weight"] = np.asarray(w)[:w_rows].T
        named[f"{2 * i}.bias"] = np.asarray(b)[:b_rows]
    return named


class Layouts:
    """The chapter's JAX training step in every layout, on the first `n` of `devices`.

    "one device" and "data parallel" are plain `jax.jit` of one step (the batch sharded
    over a `data` mesh axis for the second); `steps` adds the page's own layouts, each a
    function of the mesh returning the per-step function. Layouts named in `sharded` keep
    parameters and optimizer state sharded along their first axis (padded to a multiple of
    the device count); the others replicate them. Each compiled step pins its outputs'
    layout, so the state leaves every step as it came in."""

    def __init__(self, devices, params, optimizer, batch_size: int, steps=None, sharded=()):
        self.devices, self.params, self.optimizer = list(devices), params, optimizer
        self.batch_size, self.rows = batch_size, first_axes(params)
        self.builders = {"one device": None, "data parallel": None, **(steps or {})}
        unknown = set(sharded) - set(self.builders)
        if unknown:
            raise ValueError(f"sharded layouts {sorted(unknown)} have no step")
        self.sharded, self._jitted = tuple(sharded), {}

    @property
    def strategies(self) -> tuple[str, ...]:
        return tuple(self.builders)

    def mesh(self, n: int):
        import jax

        return jax.sharding.Mesh(np.array(self.devices[:n]), ("data",),
                                 axis_types=(jax.sharding.AxisType.Auto,))

    def _sharding(self, strategy: str, n: int, spec):
        from jax.sharding import NamedSharding, SingleDeviceSharding

        if strategy == "one device":
            return SingleDeviceSharding(self.devices[0])
        return NamedSharding(self.mesh(n), spec)

    def state_sharding(self, strategy: str, n: int):
        from jax.sharding import PartitionSpec as P

        return self._sharding(strategy, n, P("data") if strategy in self.sharded else P())

    def place(self, strategy: str, n: int):
        """Parameters and optimizer state, laid out for `strategy` on `n` devices."""
        import jax
        import jax.numpy as jnp

        params = jax.tree.map(jnp.copy, self.params)  # fresh: each step donates its state
        if strategy in self.sharded:
            params = jax.tree.map(lambda a: padded(a, n), params)
        return jax.device_put((params, self.optimizer.init(params)),
                              self.state_sharding(strategy, n))

    def place_batch(self, strategy: str, n: int, step: int):
        """Global batch `step`, split over the `data` axis (whole on one device)."""
        import jax
        from jax.sharding import PartitionSpec as P

        return jax.device_put(jax_batch(self.batch_size, step),
                              self._sharding(strategy, n, P("data")))

    def step(self, strategy: str, n: int):
        """The compiled step: the one that is checked is the one that is timed."""
        import functools

        import jax
        from jax.sharding import PartitionSpec as P

        if (strategy, n) not in self._jitted:
            builder = self.builders[strategy]
            function = (functools.partial(train_step, optimizer=self.optimizer)
                        if builder is None else builder(self.mesh(n)))
            state = self.state_sharding(strategy, n)
            self._jitted[strategy, n] = jax.jit(
                function, donate_argnums=(0, 1),
                out_shardings=(state, state, self._sharding(strategy, n, P())))
        return self._jitted[strategy, n]

    def train(self, strategy: str, n: int, steps: int):
        """`steps` steps from the initial weights: (params, optimizer state, losses)."""
        params, opt_state = self.place(strategy, n)
        step, losses = self.step(strategy, n), []
        for i in range(steps):
            params, opt_state, loss = step(params, opt_state, *self.place_batch(strategy, n, i))
            losses.append(float(loss))
        return params, opt_state, losses

    def compiled(self, strategy: str, n: int):
        """The step compiled for `n` devices (one for "one device"), for its HLO and plan."""
        n = 1 if strategy == "one device" else n
        return self.step(strategy, n).lower(*self.place(strategy, n),
                                             *self.place_batch(strategy, n, 0)).compile()

    def variants(self, counts, first_loss: float):
        """Every layout on every device count, ready for one `timing.compare`, with a check
        of each first loss against the one-device run's: (variants, checks)."""
        variants, checks = {}, {}
        for n in [1, *counts]:
            for strategy in ("one device",) if n == 1 else self.strategies[1:]:
                step, state = self.step(strategy, n), list(self.place(strategy, n))
                x_y = self.place_batch(strategy, n, 0)

                def run(step=step, state=state, x_y=x_y):
                    state[0], state[1], loss = step(*state, *x_y)
                    return loss

                label = f"{strategy} x{n}"
                variants[label], checks[label] = run, _first_loss_check(label, first_loss)
        return variants, checks


def train_step(params, opt_state, x, y, optimizer):
    """One SGD step of the MLP: (params, optimizer state, loss)."""
    import jax
    import optax

    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _first_loss_check(label: str, expected: float):
    def check(loss):  # the first step from the initial weights, as in the one-device run
        np.testing.assert_allclose(float(loss), expected, rtol=1e-5, err_msg=label)
    return check


# Checks --------------------------------------------------------------------------------

def is_strict(settings: dict) -> bool:
    """Whether recorded fp32 settings are strict: "highest" matmul precision (both
    frameworks, where recorded) and no TF32 anywhere."""
    precisions = [v for k, v in settings.items() if "precision" in k]
    tf32 = [v for k, v in settings.items() if "tf32" in k]
    if not precisions or not tf32:
        raise ValueError(f"not an fp32 settings record: {settings!r}")
    return all(p == "highest" for p in precisions) and not any(tf32)


def equality_rows(framework: str, runs: dict, reference: dict, steps: int,
                  tolerance: dict) -> list[dict]:
    """Each run's losses and parameters against the one-device reference, asserted
    (`equality.assert_same_parameters` fails on a mismatch): one table row per run.
    `runs` maps (strategy, devices) to {"losses", "params"}; `reference` is the same."""
    from deepdive.core.equality import assert_same_parameters

    rows = []
    for (strategy, devices), run in runs.items():
        what = f"{framework} {strategy} x{devices}"
        np.testing.assert_allclose(run["losses"], reference["losses"], rtol=1e-5, err_msg=what)
        rows.append({"framework": framework, "strategy": strategy, "devices": devices,
                     "steps": steps, "max |param - 1-device param|": assert_same_parameters(
                         run["params"], reference["params"], **tolerance, what=what)})
    return rows


def assert_check_catches(without_momentum: dict, reference: dict, tolerance: dict,
                         steps: int) -> None:
    """The equality check must fail a run without momentum, or `steps` are too few."""
    from deepdive.core.equality import assert_same_parameters

    try:
        assert_same_parameters(without_momentum, reference, **tolerance)
    except AssertionError:
        return
    raise RuntimeError(f"{steps} steps cannot tell momentum from none: check more")


def check_counts(equality) -> str:
    """"JAX on 2, 4 devices; PyTorch on 2, 4 devices": the device counts checked, by framework."""
    return "; ".join(f"{framework} on {', '.join(map(str, sorted(rows['devices'].unique())))} "
                     "devices" for framework, rows in equality.groupby("framework", sort=False))


def gap_one_step(gap: float) -> str:
    """How far a run without momentum is from the reference after one step."""
    return "nothing: bit-identical (0)" if gap == 0 else f"{gap:.1e}, no more than rounding"


def gap_over_worst(gap: float, worst: float) -> str:
    """The momentum-free run's distance as a power of ten of the worst layout's."""
    if worst == 0:
        return "far above"
    power = str(round(np.log10(gap / worst))).translate(str.maketrans("-0123456789",
                                                                      "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"about 10{power} times"


# Collectives and memory ----------------------------------------------------------------

def collective_glue(table) -> dict[str, str]:
    """Each row's collectives spelled out for the prose, keyed by its label:
    "JAX: FSDP, shard_map" -> "coll_jax_fsdp_shard_map"."""
    return {"coll_" + re.sub(r"\W+", "_", label.lower()).strip("_"): spelled(table.loc[label])
            for label in table.index}


def spelled(counts) -> str:
    """Collective counts as words: "2 all-gather, 1 reduce-scatter", or "none"."""
    return ", ".join(f"{count} {op}" for op, count in counts.items() if count) or "none"


def collectives_table(counts: dict[str, dict]):
    """Collectives per step by label ("JAX: FSDP, shard_map"): ops that never ran dropped,
    the three of the chapter always shown."""
    import pandas as pd

    table = pd.DataFrame(counts).T.fillna(0).astype(int)
    table = table.loc[:, (table > 0).any()]
    for column in ("all-reduce", "all-gather", "reduce-scatter"):
        if column not in table:
            table[column] = 0
    return table


def check_fsdp_collectives(table, label: str = "JAX: FSDP, shard_map") -> None:
    """FSDP reduce-scatters its gradients and never reshuffles with all-to-all."""
    fsdp = table.loc[label]
    if not fsdp.get("reduce-scatter", 0) > 0:
        raise AssertionError(f"{label} has no reduce-scatter: not FSDP")
    if fsdp.get("all-to-all", 0):
        raise AssertionError(f"{label} reshuffles with all-to-all")


def constraints_reading(constraints) -> str:
    """What the sharding-constraints program's collectives say about leaving FSDP to XLA."""
    if constraints["reduce-scatter"] == 0:
        return ("Left to the compiler, the same sharded state did not become FSDP on this "
                f"backend: the constraints program runs {spelled(constraints)} and no "
                "reduce-scatter. XLA sums each whole gradient over the devices with an "
                "all-reduce and then keeps each device's slice: the sharded layout alone did "
                "not decide the collectives; writing them with shard_map did.")
    return ("Left to the compiler, the same sharded state became FSDP too on this backend: "
            f"the constraints program runs {spelled(constraints)}.")


def peak_table(executables: dict, n: int):
    """XLA's plan per device for each compiled step (`memory_analysis()`), in KiB."""
    import pandas as pd

    rows = [{"strategy": strategy, "devices": 1 if strategy == "one device" else n,
             "inputs (KiB)": exe.memory_analysis().argument_size_in_bytes / 2**10,
             "temporaries (KiB)": exe.memory_analysis().temp_size_in_bytes / 2**10}
            for strategy, exe in executables.items()]
    return pd.DataFrame(rows).set_index(["strategy", "devices"])


def fsdp_peak_reading(n: int, inputs: float, temporaries: float, whole: float) -> str:
    """What XLA's plan for the FSDP step says, against the whole parameter set (KiB)."""
    start = (f"On {n} devices the FSDP (shard_map) step takes {inputs:.0f} KiB of sharded "
             f"inputs but allocates {temporaries:.0f} KiB of temporaries per device, against "
             f"{whole:.0f} KiB for the whole parameter set: ")
    if temporaries >= whole:
        return start + ("more than the whole weights, as expected from the program above, "
                        "which gathers every weight at the top of the step and keeps the "
                        "gathered weights for the backward pass.")
    return start + "less than the whole weights, so XLA did not keep them all at once here."


def bytes_by_device(tree) -> dict:
    """Bytes of every shard of every array in `tree`, summed per device."""
    import jax

    held: dict = {}
    for leaf in jax.tree.leaves(tree):
        for shard in leaf.addressable_shards:
            held[shard.device] = held.get(shard.device, 0) + shard.data.nbytes
    return held


def memory_table(jax_held: dict, torch_runs: dict):
    """Parameters and optimizer state on the fullest and emptiest device, KiB, per layout.
    `jax_held` maps (strategy, n) to bytes by device; `torch_runs` to the ranks' records."""
    import pandas as pd

    rows = [{"framework": "JAX", "strategy": strategy, "devices": n,
             "largest (KiB)": max(held.values()) / 2**10,
             "smallest (KiB)": min(held.values()) / 2**10}
            for (strategy, n), held in jax_held.items()]
    for (strategy, world), records in torch_runs.items():
        held = [r["param_bytes"] + r["optimizer_bytes"] for r in records]
        rows.append({"framework": "PyTorch", "strategy": strategy, "devices": world,
                     "largest (KiB)": max(held) / 2**10, "smallest (KiB)": min(held) / 2**10})
    return (pd.DataFrame(rows).sort_values(["framework", "devices"], kind="stable")
            .reset_index(drop=True))


def fullest_share(table, framework: str, strategy: str, devices: int | None = None):
    """(devices, the fullest device's share of what the one-device run holds) for
    `strategy`, on `devices` (default: the most it ran on)."""
    ours = table[table["framework"] == framework]
    runs = ours[ours["strategy"] == strategy].sort_values("devices")
    if runs.empty:
        raise KeyError(f"no memory row for {framework} {strategy!r}")
    sharded = runs.iloc[-1] if devices is None else runs[runs["devices"] == devices].iloc[0]
    whole = ours.loc[ours["strategy"] == SINGLE[framework], "largest (KiB)"].iat[0]
    return int(sharded["devices"]), sharded["largest (KiB)"] / whole


def shard_table(torch_records: list[dict], full_shapes: dict, jax_layer, rows: tuple[int, int],
                name: str):
    """How each framework split the output layer: `name` in PyTorch (`full_shapes` from the
    one-process run, each rank's record), (w, b) in JAX with its unpadded `rows`."""
    import pandas as pd

    world = len(torch_records)
    table = [{"framework": "PyTorch", "strategy": "fsdp2", "devices": world,
              "array": f"{key} {tuple(full_shapes[key])}",
              "each device holds": ", ".join(str(tuple(r["local_shapes"][key]))
                                             for r in torch_records)}
             for key in (f"{name}.weight", f"{name}.bias")]
    for label, array, n_rows in zip("wb", jax_layer, rows, strict=True):
        pad = f", padded to {array.shape}" if array.shape[0] != n_rows else ""
        table.append({"framework": "JAX", "strategy": "FSDP, shard_map", "devices": world,
                      "array": f"{label} {(n_rows, *array.shape[1:])}{pad}",
                      "each device holds": ", ".join(str(s.data.shape)
                                                     for s in array.addressable_shards)})
    return pd.DataFrame(table).set_index(["framework", "strategy", "devices"])


def output_split_reading(world: int, n_out: int, width: int, torch_rows: list[int],
                         largest: float, smallest: float, storage: list[int],
                         param_bytes: list[int], jax_bias_rows: int) -> str:
    """How FSDP2 and JAX's FSDP split an output layer of `n_out` rows over `world`."""
    if n_out % world == 0:
        return f"On {world} ranks both frameworks split the output layer evenly."
    text = (f"On {world} ranks FSDP2 splits the ({n_out}, {width}) output weight by rows into "
            f"{', '.join(map(str, torch_rows))} rows ({n_out} does not divide by {world}), so "
            "the logical bytes of its ranks' local shards (the table) are "
            f"{largest:.1f} KiB against {smallest:.1f} KiB. ")
    if len(set(storage)) == 1 and storage[0] > min(param_bytes):
        text += (f"The parameters' storage is padded, though: every rank allocates "
                 f"{storage[0] / 2**10:.1f} KiB for them, the short shard being a view into a "
                 "padded buffer (measured as each buffer's untyped storage). ")
    else:
        text += ("The parameters' storage, counted per buffer, is "
                 + ", ".join(f"{b / 2**10:.1f}" for b in storage) + " KiB by rank. ")
    extra = jax_bias_rows - n_out
    return text + (f"JAX's FSDP here splits the same layer's ({width}, {n_out}) weight (x @ w "
                   f"layout) along its {width} input rows, evenly, and pads the {n_out}-entry "
                   f"bias to {jax_bias_rows}: every device holds the same, {extra} padding "
                   f"entr{'y' if extra == 1 else 'ies'} included.")


# Timings and claims (real GPUs) --------------------------------------------------------

def claim_layouts(claims, timings: dict, counts, scope: str) -> None:
    """The chapter's claims, on each device count: data parallel against one device, FSDP
    (shard_map) against data parallel, hand-written against XLA-inserted data parallelism,
    FSDP by sharding constraints against FSDP by shard_map."""
    one = timings["one device x1"]
    for n in counts:
        top = n == counts[-1]
        dp, fsdp = timings[f"data parallel x{n}"], timings[f"FSDP, shard_map x{n}"]
        claims.compare(f"dp_x{n}_vs_one", f"{scope}: JAX data parallel on {n} devices against "
                       "one device", one, dp, headline=n in (counts[0], counts[-1]))
        claims.compare(f"fsdp_x{n}_vs_dp", f"{scope}, {n} devices: JAX FSDP (shard_map) "
                       "against data parallel", dp, fsdp, headline=top)
        claims.compare(f"dp_shard_map_x{n}_vs_dp", f"{scope}, {n} devices: JAX data parallel "
                       "written with shard_map against XLA-inserted", dp,
                       timings[f"data parallel, shard_map x{n}"])
        claims.compare(f"fsdp_constraints_x{n}_vs_shard_map", f"{scope}, {n} devices: JAX "
                       "FSDP by sharding constraints against FSDP by shard_map", fsdp,
                       timings[f"FSDP, constraints x{n}"], headline=top)


def _time_row(framework: str, label: str, t, claim: str) -> dict:
    strategy, n = label.rsplit(" x", 1)
    return {"framework": framework, "strategy": strategy, "devices": int(n),
            "step median (ms)": t.median * 1e3, "IQR (ms)": t.iqr * 1e3, "rounds": t.n,
            "noisy": t.noisy, "claim": claim}


def step_time_table(timings: dict, torch_runs: dict):
    """JAX's paired timings (claims), then PyTorch's steps as rank 0 timed them in its
    worker (not claims)."""
    import pandas as pd

    from deepdive.core.timing import Timing

    rows = [_time_row("JAX", label, t, "yes") for label, t in timings.items()]
    for (strategy, world), ranks in torch_runs.items():
        worker = Timing(f"{strategy} x{world}", np.asarray(ranks[0]["step_s_samples"]), 1,
                        ranks[0]["first_call_s"])
        rows.append(_time_row("PyTorch", worker.label, worker, "no: timed in the worker"))
    return pd.DataFrame(rows)


def _said(glued: dict, claim_id: str, baseline: str) -> str:
    return f"{glued[claim_id]} {baseline} ({glued[f'{claim_id}_ratio']})"


def step_time_reading(glued: dict | None, counts) -> str:
    """The step-time paragraph: on real GPUs from the claims read back (`glue_claims`);
    without claims (`glued` None), that nothing was timed."""
    if glued is None:
        return ("No step time was measured in this build; the table at the end lists what it "
                "proved instead.")
    few, most = counts[0], counts[-1]
    verdict = glued[f"fsdp_x{most}_vs_dp_verdict"]
    return (f"In JAX, data parallelism on {few} devices was "
            f"{_said(glued, f'dp_x{few}_vs_one', 'one device')}, and on {most} devices it was "
            f"{_said(glued, f'dp_x{most}_vs_one', 'one device')}. On {most} devices, FSDP "
            f"written with shard_map was {_said(glued, f'fsdp_x{most}_vs_dp', 'data parallelism')}"
            f": {FSDP_READING[verdict]} The sharding-constraints version was "
            f"{_said(glued, f'fsdp_constraints_x{most}_vs_shard_map', 'the shard_map one')}, "
            f"and hand-written data parallelism was "
            f"{_said(glued, f'dp_shard_map_x{most}_vs_dp', 'XLA' + chr(39) + 's')}. Every pair "
            "at every device count is in the table at the end.")


def both_ran(memory) -> int:
    """The most devices on which JAX's FSDP (shard_map) and PyTorch's FSDP2 both ran."""
    counts = [set(memory.loc[(memory["framework"] == fw) & (memory["strategy"] == s), "devices"])
              for fw, s in (("JAX", "FSDP, shard_map"), ("PyTorch", "fsdp2"))]
    common = counts[0] & counts[1]
    if not common:
        raise KeyError("no device count at which both frameworks ran FSDP")
    return int(max(common))


def summary_caption(simulated: bool) -> str:
    """The caption of the chapter's closing table."""
    if simulated:
        return ("What this build established on simulated devices, one row per check. Nothing "
                "was timed, so there are no verdicts: on real GPUs this table lists every "
                "comparison of the chapter with its verdict.")
    return ("Every comparison of this chapter, read as \"the first-named variant against the "
            "second\": its speed-up (above 1: the first-named took less time), with the "
            "distribution-free 95% interval of the paired per-round ratios, and the verdict of "
            "the one rule. JAX only; devices as in each question.")


def found_reading(glued: dict | None, noise: dict | None) -> str:
    """The sentence under the findings: the claims' counts on real GPUs (`glued`, `noise`),
    or, with none, what needs real devices."""
    if glued is None:
        return ("What needs real devices: the step time against the device count, whether "
                "communication hides behind compute, and what FSDP costs in time (see \"Step "
                "time against the number of devices\").")
    return (f"Of {glued['claims_count']} claims, {glued['claims_withheld']} were withheld and "
            f"{glued['claims_noisy']} were decided with a noisy side; of "
            f"{noise['timing_count']} timings, {noise['noisy_count']} stayed noisy (IQR above "
            "10% of the median). Only JAX's step times are claims: PyTorch's were timed inside "
            "its worker processes and are shown apart.")


def scope_sentence(model_scope: str, scale: str, simulated: bool, n_devices: int,
                   device_words: str, cpu_threads: int) -> str:
    """What ran where, for the findings box."""
    if simulated:
        return (f"{model_scope}, at {scale} scale. JAX's devices are {n_devices} simulated CPU "
                f"host devices of one machine, all sharing its {cpu_threads} cores (XLA's thread "
                "pool over all of them), and PyTorch's ranks are gloo processes on the same "
                "cores, one thread each.")
    return (f"{model_scope}, at {scale} scale. JAX's devices are {n_devices} {device_words} of "
            "one machine, and PyTorch's ranks are NCCL processes, one per GPU.")


def _why_untimed(n_devices: int, cpu_threads: int) -> str:
    return (f"its {n_devices} devices are simulated on one CPU and share its {cpu_threads} "
            "cores with PyTorch's gloo ranks, so more devices add communication and scheduling "
            "on the same cores and no compute: a step time would measure how those cores are "
            "shared, not how training scales")


def timing_status(simulated: bool, n_devices: int, device_words: str, cpu_threads: int) -> str:
    """Whether this build times the layouts, and why not on simulated devices."""
    if not simulated:
        return f"This build ran on {n_devices} {device_words}: the timings follow."
    return (f"Nothing is timed in this build: {_why_untimed(n_devices, cpu_threads)}. Its "
            "PyTorch ranks timed no steps either (steps=0), and no claim is made. On one "
            "machine with several GPUs the same cells pick the GPUs (JAX's mesh over them, "
            "PyTorch's NCCL ranks) and time them.")


def proofs_table(equality, steps: int, torch_jax_diff: float, gap_all: float, collectives,
                 n: int, shares: dict, plan: tuple[float, float, float]):
    """What a build on simulated devices established, one row per check. `shares` maps
    framework to (strategy, devices, fullest device's share); `plan` is XLA's FSDP plan:
    (inputs, temporaries, whole parameter set), KiB."""
    import pandas as pd

    checks = [(f"{framework} {strategy}, {', '.join(map(str, sorted(rows['devices'])))} "
               f"devices: the same {steps} steps as one device",
               "parameters within the fp32 tolerance; largest difference "
               f"{rows['max |param - 1-device param|'].max():.1e}")
              for (framework, strategy), rows in equality.groupby(["framework", "strategy"],
                                                                   sort=False)]
    checks.append(("JAX one device against PyTorch's single process",
                   f"parameters within the fp32 tolerance; largest difference "
                   f"{torch_jax_diff:.1e}"))
    checks.append((f"a run without momentum, {steps} steps",
                   f"{gap_all:.1e} from the reference: the check fails it"))
    checks += [(f"collectives in one step, {label} on {n} devices", spelled(counts))
               for label, counts in collectives.iterrows() if label != "JAX: one device"]
    checks += [(f"state on the fullest device, {framework} {strategy} on {k} devices",
                f"{share:.3f} of one device's (1/{k} = {1 / k:.3f})")
               for framework, (strategy, k, share) in shares.items()]
    inputs, temporaries, whole = plan
    checks.append((f"XLA's plan per device, FSDP (shard_map) on {n} devices",
                   f"inputs {inputs:.0f} KiB, temporaries {temporaries:.0f} KiB; the whole "
                   f"parameter set {whole:.0f} KiB"))
    return pd.DataFrame(checks, columns=["check", "result"]).set_index("check")


def claims_found_simulated(n_devices: int, cpu_threads: int, counted: str, steps: int,
                           worst: float, gap_all: float, collectives, n: int,
                           shares: dict) -> str:
    """The findings box of a build on simulated devices (Markdown): no claims, what it proved.
    `shares` maps framework to (devices, fullest device's share) at a count both ran."""
    (jax_n, jax_share), (torch_n, torch_share) = shares["JAX"], shares["PyTorch"]
    return "\n".join([
        f"This build made no timing claims: {_why_untimed(n_devices, cpu_threads)}. What it "
        "proved instead:",
        "",
        f"- **The same steps as one device.** Every layout of both frameworks ({counted}) took "
        f"the same {steps} steps as one device: the largest parameter difference was "
        f"{worst:.1e}, within the fp32 tolerance, while a deliberately different run, without "
        f"momentum, ends {gap_all:.1e} away and fails it: the check can catch a real "
        "difference.",
        f"- **The collectives.** On {n} devices, JAX's FSDP program runs "
        f"{spelled(collectives.loc['JAX: FSDP, shard_map'])} and XLA's data parallelism "
        f"{spelled(collectives.loc['JAX: data parallel'])}; PyTorch's ranks called "
        f"{spelled(collectives.loc['PyTorch: fsdp2'])} in one step under FSDP2 and "
        f"{spelled(collectives.loc['PyTorch: ddp'])} under DDP.",
        f"- **Bytes per device.** Sharded, the fullest device holds {jax_share:.3f} of one "
        f"device's parameters and optimizer state under JAX's FSDP (shard_map) on {jax_n} "
        f"devices, and {torch_share:.3f} under PyTorch's FSDP2 on {torch_n} ranks; "
        "replicated layouts hold all of it on every device."])


def record(records, model_scope: str, n_params: int, timing_table, jax_timings: dict,
           memory, equality, collectives, n: int) -> None:
    """Add the chapter's results to `records` (`deepdive.book.results.Results`), as the choosing
    chapter reads them: the model's scope, step times, memory, equality, collectives."""
    records.add("model", "both", model_scope, "-", "parameters", n_params, "count")
    for row in [] if timing_table is None else timing_table.to_dict("records"):
        records.add("step_time", FRAMEWORK_KEY[row["framework"]], row["strategy"],
                    row["devices"], "step median (ms)", row["step median (ms)"], "ms")
    for label, t in jax_timings.items():
        strategy, k = label.rsplit(" x", 1)
        records.add_timing("step_time", "jax", strategy, int(k), t)
    for row in memory.to_dict("records"):
        records.add("memory_per_device", FRAMEWORK_KEY[row["framework"]], row["strategy"],
                    row["devices"], "params + optimizer state", row["largest (KiB)"], "KiB")
    for row in equality.to_dict("records"):
        records.add("equality", FRAMEWORK_KEY[row["framework"]], row["strategy"],
                    row["devices"], "max param diff vs 1 device",
                    row["max |param - 1-device param|"], "abs")
    for label, counts in collectives.iterrows():
        framework, strategy = label.split(": ")
        for op, count in counts.items():
            records.add("collectives", FRAMEWORK_KEY[framework], strategy, n, op, count, "count")


# Figures -------------------------------------------------------------------------------

def _device_axes(ax, counts, values) -> None:
    """Devices 1-2-4-8 on a log-2 axis and a log y axis with plain 1-2-5 ticks."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks([1, *counts], [str(c) for c in (1, *counts)])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    ticks = [m * 10.0**e for e in range(int(np.floor(np.log10(low))),
                                        int(np.ceil(np.log10(high))) + 1)
             for m in (1, 2, 5) if low / 1.5 <= m * 10.0**e <= high * 1.5]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_memory_plan(peaks, whole_kib: float, caption: str):
    """XLA's plan per device for each layout, against the whole parameter set."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(9.5, 3.8))
    at = np.arange(len(peaks))
    ax.barh(at - 0.2, peaks["inputs (KiB)"], height=0.4,
            label="inputs: state and batch shard, per device")
    ax.barh(at + 0.2, peaks["temporaries (KiB)"], height=0.4,
            label="temporaries the step allocates, per device")
    ax.axvline(whole_kib, color="black", linestyle="--", label="the whole parameter set, fp32")
    ax.set_yticks(at, [s if k == 1 else f"{s}, {k} devices" for s, k in peaks.index])
    ax.invert_yaxis()
    ax.set(title="XLA's memory plan for one training step, per device",
           xlabel="KiB per device (compiled.memory_analysis())")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    plots.caption(fig, caption)
    return fig


def plot_memory(memory, counts, caption: str):
    """Parameters and optimizer state on the fullest device, by device count and layout."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for (framework, strategy), rows in memory.groupby(["framework", "strategy"], sort=False):
        jax_side = framework == "JAX"
        if strategy == SINGLE[framework]:
            ax.plot(rows["devices"], rows["largest (KiB)"], marker="s", linestyle="none",
                    color="black", fillstyle="full" if jax_side else "none",
                    markersize=6 if jax_side else 10, label=f"{framework}: {strategy}")
            continue
        ax.plot(rows["devices"], rows["largest (KiB)"], marker="o" if jax_side else "x",
                linestyle="-" if jax_side else "--", markersize=8,
                label=f"{framework}: {strategy}")
    ax.set(title="parameters and optimizer state held per device, after a step",
           xlabel="devices (log scale)", ylabel="KiB on the fullest device (log scale)")
    _device_axes(ax, counts, memory["largest (KiB)"])
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    plots.caption(fig, caption)
    return fig


PANELS = {"JAX": "JAX: paired rounds, the claims",
          "PyTorch": "PyTorch: timed inside its worker processes, not a claim"}


def plot_step_times(table, counts, title: str, caption: str):
    """One framework per panel: PyTorch's worker-timed steps never share an axis with JAX's
    paired rounds."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (framework, panel) in zip(axes, PANELS.items(), strict=True):
        ours = table[table["framework"] == framework]
        for strategy, rows in ours.groupby("strategy", sort=False):
            single = strategy == SINGLE[framework]
            ax.errorbar(rows["devices"], rows["step median (ms)"], yerr=rows["IQR (ms)"] / 2,
                        marker="s" if single else "o", capsize=3,
                        linestyle="none" if single else "-", label=strategy)
        ax.set(title=panel, xlabel="devices or processes (log scale)",
               ylabel="ms per step (median ± IQR/2; log scale)")
        _device_axes(ax, counts, ours["step median (ms)"])
        ax.legend(fontsize=7)
    fig.suptitle(title)
    plots.caption(fig, caption)
    return fig
