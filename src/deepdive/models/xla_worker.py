"""The PyTorch/XLA and torchax training steps of the ViT chapter's model, in their own environment.

torch_xla's newest release (2.9) needs torch 2.9, not the book's pinned torch, so these
routes run in a second environment (`requirements-xla.txt`, `make xla-env`) and in a
process of their own. Chapter `05_vit_xla` starts this module with that environment's
interpreter (`deepdive.models.xla_route.Worker`). It saves the HF config, the weights and the
batch; this process builds every variant from them (the same weights, never
re-initialised), returns each variant's logits, loss and gradients for the parity check,
and times steps with `deepdive.core.timing`'s own runner, one block per request, so the
chapter interleaves these blocks with its own variants' blocks in the same rounds.

Protocol: one JSON request per line on stdin, one JSON reply per line on the stdout this
process started with. Everything the libraries print goes to stderr instead, so a log
line cannot break a reply. Arrays travel as .npz files in the shared folder.

Only the standard library, numpy, torch 2.9, torch_xla, torchax, jax, optax, flax (which
torchax imports) and transformers are here, with `deepdive.core.timing` and `deepdive.models.parity`
(numpy at import).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from deepdive.core.timing import LocalRunner
from deepdive.models import parity
from deepdive.models.xla_route import (
    COMPILED,
    EAGER,
    JAX_TWIN,
    LAZY,
    PARITY_VARIANTS,
    TORCHAX,
    VARIANTS,
)

__all__ = ["HANDLERS", "KINDS", "ROUTES", "Session", "compilations", "eager_step", "installed",
           "lazy_step", "load_run", "main", "openxla_step", "save_run", "serve", "torch_gradients",
           "torch_step", "torchax_loss", "torchax_step", "twin_step"]


class Session:
    """The model, batch and built variants of one chapter run."""

    def __init__(self, folder: str, threads: int):
        import jax
        import torch
        import torch_xla.backends

        torch.set_num_threads(threads)
        # fp32 strict everywhere, as in the ViT chapter: full-precision matmuls in torch and in JAX
        # (torchax, the Flax twin), by the book's one switch, and in torch_xla's lowering.
        parity.strict_fp32()
        torch_xla.backends.set_mat_mul_precision("highest")
        # Start the XLA device now: PyTorch's autograd engine sizes its per-device queues
        # at its first backward pass, and an eager CPU backward before the device exists
        # would leave XLA's backward without a queue (an internal assert in torch 2.9).
        torch_xla.device()
        jax.devices()  # JAX's backend too, so no route's first step pays for starting it
        self.folder = Path(folder)
        batch = np.load(self.folder / "batch.npz")
        self.images, self.labels = batch["images"], batch["labels"]
        self.steps: dict[str, object] = {}
        self.runners: dict[str, LocalRunner] = {}

    def hello(self) -> dict:
        from importlib.metadata import version

        import jax
        import torch
        import torch_xla

        # Distribution versions: torchax's own __version__ string lags its releases.
        return {"versions": {name: version(name) for name in
                             ("torch", "torch_xla", "torchax", "jax", "jaxlib", "flax",
                              "optax", "transformers")}
                | {"python": sys.version.split()[0]},
                "xla device": str(torch_xla.device()),
                "PJRT_DEVICE": os.environ.get("PJRT_DEVICE"),
                "torch_xla matmul precision": torch_xla.backends.get_mat_mul_precision(),
                # The binding XLA:CUDA builds had (through 2.8), removed with XLA:CUDA.
                "torch_xla's _has_cuda_support binding present": _torch_xla_cuda(),
                "torch build's CUDA": torch.version.cuda or "none (CPU build)",
                "torch matmul precision": torch.get_float32_matmul_precision(),
                "jax matmul precision": str(jax.config.jax_default_matmul_precision),
                "torch threads": torch.get_num_threads(),
                "CPU affinity": sorted(os.sched_getaffinity(0)),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
                "jax devices": [str(d) for d in jax.devices()]}

    def model(self):
        """HF's ViT from the saved config and weights, in fp32, with eager attention math."""
        from safetensors.torch import load_file
        from transformers import ViTConfig, ViTForImageClassification

        config = ViTConfig.from_json_file(self.folder / "config.json")
        model = ViTForImageClassification(config)
        model.set_attn_implementation("eager")
        model.load_state_dict(load_file(self.folder / "weights.safetensors"), strict=True)
        return model.train()

    def gradients(self, variant: str) -> dict:
        """One forward and backward pass of `variant` on the batch; arrays to an .npz."""
        if variant not in PARITY_VARIANTS:
            raise ValueError(f"no gradients for {variant!r}; accepted: "
                             f"{', '.join(PARITY_VARIANTS)}")
        gradients = _torchax_gradients if variant == TORCHAX else functools.partial(
            torch_gradients, variant=variant)
        run = gradients(self.model(), self.images, self.labels)
        path = self.folder / f"gradients {variant}.npz".replace("/", "_")
        save_run(path, run)
        return {"path": str(path)}

    def prepare(self, variant: str, warmup: int, min_block_s: float,
                min_calls_per_block: int, session: int) -> dict:
        """Build `variant`'s step; time its first and second steps (each synced), keep
        their losses for the chapter's check, and count the compilations each triggered;
        then size its blocks as `compare` does."""
        _check_variant(variant)
        step, sync = self._build(variant)
        runner = LocalRunner(variant, step, sync, None, session)
        counts = [compilations()]
        times, losses = [], []
        for _ in range(2):
            times.append(runner.run(1))
            counts.append(compilations())
            losses.append(float(np.asarray(_to_host(runner.output))))
        runner.prepare(warmup, min_block_s, min_calls_per_block)
        runner.first_call = times[0]
        self.runners[variant] = runner
        after = compilations()
        return {"first_step_s": times[0], "second_step_s": times[1], "losses": losses,
                **{f"{kind}_first_step": counts[1][kind] - counts[0][kind] for kind in KINDS},
                **{f"{kind}_second_step": counts[2][kind] - counts[1][kind] for kind in KINDS},
                **{f"{kind}_sizing": after[kind] - counts[2][kind] for kind in KINDS},
                "calls_per_block": runner.calls_per_block, "harness_s": runner.harness_s}

    def _build(self, variant: str):
        """`variant`'s step (`ROUTES`) and what a timer calls after a block to sync it."""
        if variant in (TORCHAX, JAX_TWIN):
            return ROUTES[variant](self.model(), self.images, self.labels), _block_jax
        return torch_step(self.model(), self.images, self.labels, variant=variant)

    def time_block(self, variant: str) -> dict:
        """One timed block of `variant`: seconds per step, and any compilation (XLA or a
        Dynamo graph) during it."""
        runner = self.runners[variant]
        before = compilations()
        runner.time_block()
        after = compilations()
        return {"sample_s": runner.samples[-1],
                "recompiles": sum(after[kind] - before[kind] for kind in KINDS)}

    def metrics(self) -> dict:
        """torch_xla's compile and execute counts so far (its metrics report)."""
        import torch_xla.debug.metrics as met

        counts = {name: int((met.metric_data(name) or (0,))[0])
                  for name in ("CompileTime", "ExecuteTime")}
        counts |= {name: int(met.counter_value(name) or 0)
                   for name in ("UncachedCompile", "CachedCompile")}
        return counts


KINDS = ("xla", "dynamo")


def compilations() -> dict[str, int]:
    """Compilations in this process so far, by kind. "xla": programs XLA compiled, from
    torch_xla's CompileTime metric (lazy graphs and the openxla backend's graphs alike) and
    JAX's compile events (torchax, the Flax twin). "dynamo": graphs Dynamo captured; with
    the openxla backend each is also compiled by XLA, unless XLA's cache already holds it,
    so a Dynamo recompile that hits that cache still shows here."""
    import torch_xla.debug.metrics as met

    from deepdive.core.timing import compilations as jax_and_dynamo

    data = met.metric_data("CompileTime")
    dynamo = _dynamo_graphs()
    return {"xla": int(data[0] if data else 0) + int(jax_and_dynamo() - dynamo),
            "dynamo": int(dynamo)}


def _dynamo_graphs() -> int:
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; accepted: {', '.join(VARIANTS)}")


def _device(variant: str):
    """The XLA device for the XLA routes, the CPU for eager PyTorch (the route runs on the
    CPU only: `deepdive.models.xla_route.route_device`)."""
    import torch

    if variant == EAGER:
        return torch.device("cpu")
    import torch_xla

    return torch_xla.device()


def _torch_xla_cuda() -> bool:
    import _XLAC  # torch_xla's extension module

    return hasattr(_XLAC, "_has_cuda_support")


def _to_host(value):
    """A step's loss as a host value (a torch tensor on any device, or a JAX array)."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def _block_jax(value):
    import jax

    return jax.block_until_ready(value)


def _xla_sync(variant: str):
    """Cut the lazy graph and wait for the device: what every timed XLA step ends with."""
    if variant == EAGER:
        return lambda: None
    import torch_xla
    import torch_xla.core.xla_model as xm

    def sync():
        torch_xla.sync()
        xm.wait_device_ops()

    return sync


def _forward(model, variant: str):
    import torch

    return torch.compile(model, backend="openxla") if variant == COMPILED else model


def save_run(path: Path, run: dict) -> None:
    """A run (`deepdive.models.parity.against_reference`'s shape) as one .npz; `load_run` reads
    it."""
    np.savez(path, logits=run["logits"], loss=np.asarray(run["loss"]),
             **{f"grad:{name}": g for name, g in run["gradients"].items()})


def load_run(path) -> dict:
    with np.load(path) as data:
        return {"logits": data["logits"], "loss": float(data["loss"]),
                "gradients": {k.removeprefix("grad:"): data[k] for k in data.files
                              if k.startswith("grad:")}}


def torch_gradients(model, images, labels, *, variant=EAGER) -> dict:
    """Logits, loss and every gradient of one fp32 pass of HF's model on `variant`'s
    device; with the default, plain eager PyTorch (the chapter's reference, on the book's
    torch)."""
    import torch
    import torch.nn.functional as F

    device = _device(variant)
    model = model.to(device)
    forward = _forward(model, variant)
    logits = forward(pixel_values=torch.as_tensor(images, device=device)).logits
    loss = F.cross_entropy(logits.float(), torch.as_tensor(labels, device=device))
    loss.backward()
    _xla_sync(variant)()
    return {"logits": logits.detach().cpu().numpy(), "loss": float(loss.item()),
            "gradients": {name: p.grad.cpu().numpy() for name, p in model.named_parameters()}}


# ---- the routes: each builds a zero-argument training step from HF's model and the batch ----
# Chapter `05_vit_xla` shows these functions as they are written here: they are the code a
# reader would write for each route. Each step is the ViT chapter's: the loss on fp32
# logits, backward, AdamW with `deepdive.models.parity.ADAMW`.

def eager_step(model, images, labels):
    """Eager PyTorch on the CPU: the baseline of every route, on either torch."""
    import torch
    import torch.nn.functional as F

    optimizer = parity.torch_adamw(model.parameters(), parity.ADAMW)  # torch.optim.AdamW
    images, labels = torch.as_tensor(images), torch.as_tensor(labels)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(pixel_values=images).logits.float(), labels)
        loss.backward()
        optimizer.step()
        return loss

    return step


def lazy_step(model, images, labels):
    """PyTorch/XLA's lazy tensors: on the XLA device each operation is recorded into a
    graph instead of run; `torch_xla.sync()` cuts the graph, compiles it (once per
    distinct graph) and runs it; `xm.wait_device_ops()` waits until the device is done."""
    import torch
    import torch.nn.functional as F
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = model.to(device)
    optimizer = parity.torch_adamw(model.parameters(), parity.ADAMW)
    images, labels = torch.as_tensor(images, device=device), torch.as_tensor(labels, device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(pixel_values=images).logits.float(), labels)
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # the step's graph: compiled the first time it is seen, then run
        xm.wait_device_ops()
        return loss

    return step


def openxla_step(model, images, labels):
    """`torch.compile(backend="openxla")`: Dynamo captures the model's forward pass and,
    through AOT Autograd, hands XLA its forward and backward graphs. The loss, its own
    backward and the optimizer sit outside the compiled model and run as lazy tensors, so
    the step ends with the same sync as `lazy_step`."""
    import torch
    import torch.nn.functional as F
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = model.to(device)
    optimizer = parity.torch_adamw(model.parameters(), parity.ADAMW)
    forward = torch.compile(model, backend="openxla")
    images, labels = torch.as_tensor(images, device=device), torch.as_tensor(labels, device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(pixel_values=images).logits.float(), labels)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        xm.wait_device_ops()
        return loss

    return step


def torchax_loss(model):
    """torchax: HF's model and the chapter's loss as one PyTorch module, traced into a JAX
    function of its weights (`torchax.extract_jax`). Returns the parameters, as JAX arrays
    named as PyTorch names them, and ``loss_fn(params, images, labels) -> (loss, logits)``."""
    import torch
    import torch.nn.functional as F
    import torchax

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, images, labels):
            logits = self.model(pixel_values=images).logits
            return F.cross_entropy(logits.float(), labels), logits

    module = WithLoss()
    weights, call = torchax.extract_jax(module)  # buffers too: call takes every tensor
    names = dict(module.named_parameters())
    params = {k: v for k, v in weights.items() if k in names}
    buffers = {k: v for k, v in weights.items() if k not in names}

    def loss_fn(params, images, labels):
        return call({**buffers, **params}, (images, labels))

    return params, loss_fn


def torchax_step(model, images, labels):
    """The PyTorch forward and loss from `torchax_loss`, differentiated by
    `jax.value_and_grad` and updated by optax's AdamW (proven equal to torch's in the ViT
    chapter), all in one `jax.jit` with the state donated, as the chapter's JAX step is."""
    import jax
    import jax.numpy as jnp
    import optax

    params, loss_fn = torchax_loss(model)
    transform = parity.optax_adamw(parity.ADAMW)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train(params, opt_state, images, labels):
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, images, labels)
        updates, opt_state = transform.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    state = [params, transform.init(params)]
    images, labels = jnp.asarray(images), jnp.asarray(labels)

    def step():
        state[0], state[1], loss = train(*state, images, labels)
        return loss

    return step


def twin_step(model, images, labels):
    """The ViT chapter's JAX step on the Flax NNX twin of `model` (`vit.split_merge_step`)."""
    from deepdive.models import vit

    return vit.split_merge_step(model, vit.nchw_to_nhwc(images), labels,
                                parity.optax_adamw(parity.ADAMW))


ROUTES = {EAGER: eager_step, LAZY: lazy_step, COMPILED: openxla_step, TORCHAX: torchax_step,
          JAX_TWIN: twin_step}


def torch_step(model, images, labels, *, variant=EAGER):
    """`variant`'s PyTorch step (eager, lazy tensors or the openxla backend) and the sync a
    timer calls after a block: an XLA step cuts its graph and waits for the device."""
    step = ROUTES[variant](model, images, labels)
    sync = _xla_sync(variant)
    return step, lambda _: sync()


def _torchax_gradients(model, images, labels):
    import jax

    params, loss_fn = torchax_loss(model)
    (loss, logits), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(
        params, images, labels)
    return {"logits": np.asarray(logits), "loss": float(loss),
            "gradients": {name.removeprefix("model."): np.asarray(g)
                          for name, g in grads.items()}}


HANDLERS = ("hello", "gradients", "prepare", "time_block", "metrics")


def installed(names) -> dict[str, str | None]:
    """Installed versions of the named distributions (None where missing), read without
    importing them: a wrong torch is then reported as such, not as an import error."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def serve(requests, replies) -> None:
    """Answer requests until stdin closes: {"op": ..., "args": {...}} -> {"ok": result} or
    {"error": traceback}. Before {"op": "start", ...} only "versions" is answered."""
    session = None
    for line in requests:
        started = time.perf_counter()
        try:
            request = json.loads(line)
            op, args = request.get("op"), request.get("args", {})
            if op == "versions":
                result = installed(args["names"])
            elif op == "start":
                session = Session(**args)
                result = {}
            elif op in HANDLERS and session is not None:
                result = getattr(session, op)(**args)
            else:
                raise ValueError(f"unknown or premature request {op!r}; accepted: versions, "
                                 f"start, then {', '.join(HANDLERS)}")
            reply = {"ok": result, "seconds": time.perf_counter() - started}
        except Exception:
            reply = {"error": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main() -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # library prints go to stderr; replies keep the original stdout
    sys.stdout = sys.stderr
    serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
