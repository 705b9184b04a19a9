"""Proof that HF's PyTorch ViT and its Flax NNX twin train alike, in three parts.

Chapter 5 times a PyTorch training step against a JAX one. Before it does, this module
proves the two compute the same thing, in fp32 with strict matmul precision on both sides:

1. Model (`model_parity`): from the same ported weights and batch, the logits, the loss
   and the gradient of every parameter agree.
2. Optimizers (`optimizer_parity`): the same sequence of gradients, fed to
   `torch.optim.AdamW` and `optax.adamw`, and to torch SGD with momentum and
   `optax.sgd(momentum=...)`, moves every parameter along the same trajectory, compared
   after each of 10 steps. The betas are not the defaults and the weight decay is large
   enough to move the parameters far beyond the tolerance, so a mistranslated beta, weight
   decay or momentum fails. Identical inputs leave only rounding, so tolerances are tight.
3. Training (`training_parity`): 20 AdamW steps from the ported weights, each framework
   computing its own gradients, give the same loss curve.

`prove_parity` runs all three and returns one row per quantity, ready for a table;
`assert_parity` raises when any row is outside its tolerance.

Not proven here: any precision other than fp32 strict (TF32, bf16 and fused kernels need
their own checks against this reference); dropout (the twin refuses it); long or unstable
runs (20 steps at a stable learning rate bound the drift of rounding differences; a run
that spikes amplifies them); parameter trajectories under each framework's own gradients
(part 3 compares the loss, because a parameter whose gradient is zero up to rounding,
such as a key bias, is free to drift under Adam without changing the loss); and the
optimizers' other options (nesterov, amsgrad, schedules), which part 2 does not use.
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ADAMW", "OPTIMIZER_STEPS", "SGD", "TOLERANCES", "TRAINING_STEPS", "TRAJECTORY_ADAMW",
           "TRAJECTORY_SGD", "Family", "OptimizerPair", "adamw_pair", "against_reference",
           "assert_parity", "family_model_parity", "family_training_losses", "fp32_settings",
           "model_parity", "optax_adamw", "optax_sgd", "optimizer_parity", "prove", "prove_parity",
           "sgd_pair", "strict_fp32", "torch_adamw", "torch_sgd", "training_losses",
           "training_parity", "trajectory_optimizers", "vit_family", "worst_tensor_error"]

# Chapter 5's training hyper-parameters: the benchmark runs these, and part 3 trains with them.
SGD = dict(lr=1e-3)  # the seed's optimizer (torch.optim.SGD's default learning rate)
ADAMW = dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)

# Part 2's hyper-parameters, chosen to be seen: betas unlike the defaults, so swapping or
# dropping one changes the trajectory; over 10 steps the decay alone shrinks a parameter
# by about 10 * lr * weight_decay = 1% of its size, and momentum 0.9 carries each gradient
# into the next steps; each is orders of magnitude above the trajectory tolerance.
TRAJECTORY_ADAMW = dict(lr=1e-2, b1=0.8, b2=0.95, eps=1e-8, weight_decay=0.1)
TRAJECTORY_SGD = dict(lr=1e-2, momentum=0.9)
OPTIMIZER_STEPS = 10
TRAINING_STEPS = 20

TOLERANCES = {
    # fp32 on both sides; the frameworks sum in different orders, so the last bits differ.
    "logits": dict(rtol=1e-5, atol=1e-5),
    "loss": dict(rtol=1e-5, atol=1e-6),
    "gradients": dict(rtol=1e-4, atol=1e-6),
    # Same gradients in, so only the update's own rounding differs: each side rounds a
    # parameter about one ulp differently per step (one ulp of 1.0 is 1.2e-7), so 10 steps
    # stay under ~20 ulp; rtol=4e-6 is 33 ulp. Measured: at most 7.2e-7 (6 ulp, LayerNorm
    # scales near 1.0) on four configs. A wrong beta, decay or momentum moves parameters by
    # 3.5e-3 or more, ~1000x this tolerance (tests/test_parity.py).
    "parameter trajectory": dict(rtol=4e-6, atol=1e-7),
    # Each side's gradients carry their own rounding and Adam normalises them, so the
    # losses drift apart step by step, ~2e-7 per step: at most 3.8e-6 after 20 steps on the
    # chapter's config and three others, both attention paths. 2e-5 leaves fivefold room
    # and is over 40,000 times smaller than the loss falls (by 0.9 to 1.8), so a broken
    # model or optimizer fails. It holds for a stable run: at lr=1e-2 the chapter's model
    # spikes and the two curves part by 3e-2, as rounding differences are amplified.
    "loss curve": dict(rtol=0.0, atol=2e-5),
}


@dataclass(frozen=True)
class OptimizerPair:
    """One optimizer as each framework builds it; part 2 proves the two step alike."""

    name: str
    torch: Callable[[Any], Any]  # parameters -> torch.optim.Optimizer
    optax: Any  # optax.GradientTransformation


@dataclass(frozen=True)
class Family:
    """How the proof runs one model family in each framework. A batch is a pair of NumPy
    arrays (inputs, targets), laid out as PyTorch takes them.

    torch_forward(model, inputs, targets) -> (logits, loss), from NumPy arrays;
    torch_gradients(model) -> {NNX path: array}, after a backward pass;
    jax_loss(model, inputs, targets) -> (loss, logits), traced under `jax.jit`;
    jax_inputs(inputs) -> the JAX model's layout of `inputs`;
    torch_optimizer(model, hyper) -> an object with step() and zero_grad(set_to_none);
    optax(hyper) -> the twin `optax.GradientTransformation`.
    """

    name: str
    torch_forward: Callable
    torch_gradients: Callable
    jax_loss: Callable
    jax_inputs: Callable
    torch_optimizer: Callable
    optax: Callable


def torch_sgd(params, hyper: dict):
    """torch.optim.SGD from `hyper` (lr, optional momentum); the twin of `optax_sgd`."""
    import torch

    return torch.optim.SGD(params, lr=hyper["lr"], momentum=hyper.get("momentum", 0.0))


def optax_sgd(hyper: dict):
    """optax.sgd from `hyper` (lr, optional momentum); the twin of `torch_sgd`."""
    import optax

    return optax.sgd(hyper["lr"], momentum=hyper.get("momentum"))


def torch_adamw(params, hyper: dict):
    """torch.optim.AdamW from `hyper` (lr, b1, b2, eps, weight_decay)."""
    import torch

    return torch.optim.AdamW(params, lr=hyper["lr"], betas=(hyper["b1"], hyper["b2"]),
                             eps=hyper["eps"], weight_decay=hyper["weight_decay"])


def optax_adamw(hyper: dict):
    """optax.adamw from `hyper` (lr, b1, b2, eps, weight_decay)."""
    import optax

    return optax.adamw(hyper["lr"], b1=hyper["b1"], b2=hyper["b2"], eps=hyper["eps"],
                       weight_decay=hyper["weight_decay"])


def adamw_pair(hyper: dict) -> OptimizerPair:
    return OptimizerPair("AdamW", functools.partial(torch_adamw, hyper=hyper), optax_adamw(hyper))


def sgd_pair(hyper: dict) -> OptimizerPair:
    name = "SGD with momentum" if hyper.get("momentum") else "SGD"
    return OptimizerPair(name, functools.partial(torch_sgd, hyper=hyper), optax_sgd(hyper))


def prove_parity(hf_model, nnx_model, images_nchw, labels, *, optimizers=None,
                 hyper=ADAMW, steps: int = TRAINING_STEPS) -> list[dict]:
    """All three parts for one ported ViT pair and one batch: model, optimizers, training.

    Neither model is changed. Part 2 runs on `hf_model`'s own parameter shapes and values,
    with `optimizers` (default: `trajectory_optimizers()`). Part 3 trains `steps` AdamW
    steps with `hyper` (default: the chapter's `ADAMW`); part 1 is read from its first
    step, so each model is compiled once.
    """
    return prove(vit_family(), hf_model, nnx_model, [(images_nchw, labels)],
                 optimizers=optimizers or trajectory_optimizers(), hyper=hyper, steps=steps)


def prove(family: Family, torch_model, nnx_model, batches, *, optimizers, hyper,
          steps: int = TRAINING_STEPS, curves: dict | None = None) -> list[dict]:
    """The three parts for any `Family`: part 1 on the first batch, part 2 with
    `optimizers` on `torch_model`'s parameters, part 3 training `steps` steps with
    `family`'s optimizer built from `hyper`, step i on batch i (cycling). Neither model
    is changed. A `curves` dict receives part 3's losses, {"PyTorch": ..., "JAX": ...},
    as `training_losses` returns them."""
    runs = _train_both(family, torch_model, nnx_model, batches, hyper, steps)
    if curves is not None:
        curves.update({side: np.asarray(list(run["loss curve"].values()))
                       for side, run in runs.items()})
    named = {name: p.detach().cpu().numpy() for name, p in torch_model.named_parameters()}
    return [*_model_rows(runs), *optimizer_parity(named, optimizers), _training_row(runs)]


def model_parity(hf_model, nnx_model, images_nchw, labels) -> list[dict]:
    """Logits, loss and every gradient of the two models on one batch.

    `images_nchw` is a float32 array (batch, C, H, W); `labels` an int array (batch,).
    Neither model is changed. Returns one row per quantity: the largest absolute
    difference, the tensor where it occurred, and the tolerance.
    """
    return family_model_parity(vit_family(), hf_model, nnx_model, [(images_nchw, labels)])


def family_model_parity(family: Family, torch_model, nnx_model, batches,
                        hyper=ADAMW) -> list[dict]:
    """Part 1 alone for any `Family`, on the first of `batches`."""
    return _model_rows(_train_both(family, torch_model, nnx_model, batches[:1], hyper, steps=1))



def against_reference(reference: dict, other: dict) -> list[dict]:
    """Logits, loss and gradients of another implementation of the same model against a
    reference run on the same weights and batch, with the same tolerances. Each run is
    {"logits": array, "loss": float, "gradients": {name: array}}; chapter `05_vit_xla`
    checks PyTorch/XLA and torchax this way against eager PyTorch on the book's torch."""
    missing = set(reference["gradients"]) ^ set(other["gradients"])
    if missing:
        raise KeyError(f"the runs do not have the same parameters: {sorted(missing)}")
    return [_compare(quantity, reference[quantity] if quantity == "gradients"
                     else {quantity: reference[quantity]},
                     other[quantity] if quantity == "gradients" else {quantity: other[quantity]},
                     TOLERANCES[quantity]) for quantity in ("logits", "loss", "gradients")]


def optimizer_parity(named_params: dict[str, np.ndarray], optimizers=None, *,
                     steps: int = OPTIMIZER_STEPS, seed: int = 0) -> list[dict]:
    """Feed identical gradients to each `OptimizerPair` and compare every parameter after
    every step. One row per optimizer; `optimizers` defaults to `trajectory_optimizers()`.

    The gradients are random, drawn afresh each step with magnitudes spread from 1e-9 to 1,
    so that Adam's eps, its normalisation and the decay all take part. The two trajectories
    advance in lockstep, so memory holds one step, not the whole run.
    """
    import jax
    import torch

    rows = []
    for pair in optimizers or trajectory_optimizers():
        rng = np.random.default_rng(seed)  # the same gradients for every optimizer
        ours = {name: torch.nn.Parameter(torch.tensor(p)) for name, p in named_params.items()}
        torch_optimizer = pair.torch(list(ours.values()))
        theirs = jax.tree.map(np.asarray, named_params)
        state, optax_step = pair.optax.init(theirs), _compiled_update(pair.optax)
        comparison = _Comparison(TOLERANCES["parameter trajectory"])
        with strict_fp32():
            for step in range(1, steps + 1):
                grads = {name: (rng.standard_normal(p.shape) * 10.0 ** rng.uniform(-9, 0, p.shape))
                         .astype(np.float32) for name, p in named_params.items()}
                for name, param in ours.items():  # a copy: an optimizer may clip in place
                    param.grad = torch.tensor(grads[name])
                torch_optimizer.step()
                theirs, state = optax_step(theirs, state, grads)
                for name, param in ours.items():
                    comparison.add(f"{name} after step {step}", param.detach().numpy(),
                                   theirs[name])
        rows.append(comparison.row(
            f"parameters, {steps} {pair.name} steps on identical gradients"))
    return rows


@functools.cache
def trajectory_optimizers() -> tuple[OptimizerPair, ...]:
    """Part 2's optimizers: AdamW with `TRAJECTORY_ADAMW`, SGD with `TRAJECTORY_SGD`."""
    return adamw_pair(TRAJECTORY_ADAMW), sgd_pair(TRAJECTORY_SGD)


def training_parity(hf_model, nnx_model, images_nchw, labels, *, hyper=ADAMW,
                    steps: int = TRAINING_STEPS) -> list[dict]:
    """Train a copy of each model for `steps` AdamW steps on the batch; compare losses."""
    return [_training_row(_train_both(vit_family(), hf_model, nnx_model,
                                      [(images_nchw, labels)], hyper, steps))]


def training_losses(hf_model, nnx_model, images_nchw, labels, *, hyper=ADAMW,
                    steps: int = TRAINING_STEPS) -> dict[str, np.ndarray]:
    """The loss before each of `steps` AdamW steps on one batch, for a copy of each model.

    Returns {"PyTorch": losses, "JAX": losses}, ready to plot; neither model is changed.
    """
    return family_training_losses(vit_family(), hf_model, nnx_model, [(images_nchw, labels)],
                                  hyper=hyper, steps=steps)


def family_training_losses(family: Family, torch_model, nnx_model, batches, *, hyper,
                           steps: int = TRAINING_STEPS) -> dict[str, np.ndarray]:
    """`training_losses` for any `Family`, step i on batch i (cycling)."""
    runs = _train_both(family, torch_model, nnx_model, batches, hyper, steps)
    return {side: np.asarray(list(run["loss curve"].values())) for side, run in runs.items()}


def assert_parity(rows: list[dict]) -> None:
    """Raise AssertionError naming every quantity outside its tolerance."""
    failed = [f"{r['quantity']} (max diff {r['max |PyTorch - JAX|']:.3g} at {r['where']}, "
              f"tolerance {r['tolerance']})" for r in rows if not r["within tolerance"]]
    if failed:
        raise AssertionError("PyTorch and JAX disagree: " + "; ".join(failed))


def worst_tensor_error(values: dict, expected: dict, *, floor: float) -> tuple[float, str]:
    """The largest relative L2 error over same-named tensors, and that tensor's path.

    A tensor's error is ||value - expected|| over ||expected||, or over `floor` times the
    whole gradient's norm where that is larger: a near-zero gradient would otherwise turn
    rounding into a huge relative error."""
    if not expected:
        raise ValueError("no tensors to compare")
    total = float(np.sqrt(sum(float(np.sum(np.square(e, dtype=np.float64)))
                              for e in expected.values())))
    errors = {path: float(np.linalg.norm(np.asarray(values[path]) - e)
                          / max(float(np.linalg.norm(e)), floor * total))
              for path, e in expected.items()}
    where = max(errors, key=errors.get)
    return errors[where], ".".join(map(str, where)) if isinstance(where, tuple) else str(where)


class strict_fp32:  # noqa: N801 - used as a function: strict_fp32() or `with strict_fp32():`
    """fp32 means fp32 on both sides: no TF32 in PyTorch's matmuls or cuDNN's convolutions,
    full-precision dots in JAX. The book's one switch for it.

    Called, it sets this process strict for good (a page's set-up, a worker process) and
    `.settings` reads the settings back for the record (`fp32_settings`). Used as a context
    manager, it restores what was set before on exit (a proof inside a page that may run
    otherwise).

    `jax` says whether JAX's precision is set too: None (the default) where JAX is
    installed, False for PyTorch alone (a worker that never runs JAX, such as a
    distributed rank: importing JAX there only costs time), True to require it. Where JAX
    is left alone, `.settings` names PyTorch's settings only."""

    def __init__(self, jax: bool | None = None):
        import torch

        self.with_jax = _jax_wanted(jax)
        self._before = (torch.get_float32_matmul_precision(),
                        torch.backends.cuda.matmul.allow_tf32,
                        torch.backends.cudnn.allow_tf32,
                        _jax_precision() if self.with_jax else None)
        torch.set_float32_matmul_precision("highest")  # also cuda.matmul.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False  # not touched by the matmul precision
        if self.with_jax:
            _set_jax_precision("highest")
        self.settings = fp32_settings(jax=self.with_jax)

    def __enter__(self) -> strict_fp32:
        return self

    def __exit__(self, *exc) -> None:
        import torch

        matmul, cuda_tf32, cudnn_tf32, jax_precision = self._before
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cuda.matmul.allow_tf32 = cuda_tf32
        torch.backends.cudnn.allow_tf32 = cudnn_tf32
        if self.with_jax:
            _set_jax_precision(jax_precision)


def fp32_settings(jax: bool | None = None) -> dict[str, str | bool | None]:
    """The fp32 precision settings as they are now: strict means "highest" and no TF32
    anywhere. PyTorch's, and JAX's where `jax` asks for it (as in `strict_fp32`)."""
    import torch

    settings = {"float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32)}
    if _jax_wanted(jax):
        settings["jax_default_matmul_precision"] = _jax_precision()
    return settings


def _jax_wanted(jax: bool | None) -> bool:
    if jax not in (None, True, False):
        raise TypeError(f"jax must be None (where installed), True or False, got {jax!r}")
    if jax is None:
        import importlib.util

        return "jax" in sys.modules or importlib.util.find_spec("jax") is not None
    return jax


def _jax_precision():
    import jax

    return jax.config.jax_default_matmul_precision


def _set_jax_precision(value) -> None:
    import jax

    jax.config.update("jax_default_matmul_precision", value)


class _Comparison:
    """The worst difference seen so far between PyTorch and JAX values of one quantity."""

    def __init__(self, tolerance: dict):
        self.tolerance, self.count, self.passed = tolerance, 0, True
        self.worst, self.worst_key = -1.0, None

    def add(self, key, expected, value) -> None:
        expected, value = np.asarray(expected), np.asarray(value)
        diff = float(np.max(np.abs(value - expected)))
        self.passed &= bool(np.allclose(value, expected, **self.tolerance))
        self.count += 1
        if diff > self.worst:
            self.worst, self.worst_key = diff, key

    def row(self, quantity: str) -> dict:
        rtol, atol = self.tolerance["rtol"], self.tolerance["atol"]
        return {"quantity": quantity, "tensors compared": self.count,
                "max |PyTorch - JAX|": self.worst, "where": _name(self.worst_key),
                "tolerance": f"rtol={rtol:g}, atol={atol:g}", "within tolerance": self.passed}


def _compare(quantity, reference: dict, other: dict, tolerance: dict) -> dict:
    """One table row: how far `other` lies from `reference`, key by key."""
    comparison = _Comparison(tolerance)
    for key, expected in reference.items():
        comparison.add(key, expected, other[key])
    return comparison.row(quantity)


def _model_rows(runs) -> list[dict]:
    return [_compare(quantity, runs["PyTorch"][quantity], runs["JAX"][quantity],
                     TOLERANCES[quantity]) for quantity in ("logits", "loss", "gradients")]


def _training_row(runs) -> dict:
    ours, theirs = runs["PyTorch"]["loss curve"], runs["JAX"]["loss curve"]
    return _compare(f"loss curve, {len(ours)} AdamW steps on each side's own gradients",
                    ours, theirs, TOLERANCES["loss curve"])


def _train_both(family, torch_model, nnx_model, batches, hyper, steps) -> dict[str, dict]:
    """Train a copy of each model; keep the first step's logits, loss and gradients (keyed
    by NNX path) and every step's loss."""
    from flax import nnx

    with strict_fp32():
        return {"PyTorch": _torch_training(family, copy.deepcopy(torch_model), batches, hyper,
                                           steps),
                "JAX": _jax_training(family, nnx.clone(nnx_model), batches, hyper, steps)}


def _torch_training(family, model, batches, hyper, steps) -> dict[str, dict]:
    model.train()
    optimizer = family.torch_optimizer(model, hyper)
    out = {"loss curve": {}}
    for step in range(1, steps + 1):
        logits, loss = family.torch_forward(model, *batches[(step - 1) % len(batches)])
        loss.backward()
        if step == 1:
            out["logits"] = {"logits": logits.detach().cpu().numpy()}
            out["loss"] = {"loss": loss.detach().cpu().numpy()}
            out["gradients"] = family.torch_gradients(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out["loss curve"][f"step {step}"] = loss.detach().cpu().numpy()
    return out


def _jax_training(family, model, batches, hyper, steps) -> dict[str, dict]:
    import jax.numpy as jnp
    from flax import nnx

    batches = [(jnp.asarray(family.jax_inputs(x)), jnp.asarray(y)) for x, y in batches]
    optimizer = nnx.Optimizer(model, _optax_for(family, tuple(hyper.items())), wrt=nnx.Param)
    train_step = _jax_train_step(family)
    out = {"loss curve": {}}
    for step in range(1, steps + 1):
        loss, logits, grads = train_step(model, optimizer, *batches[(step - 1) % len(batches)])
        if step == 1:
            out["logits"] = {"logits": np.asarray(logits)}
            out["loss"] = {"loss": np.asarray(loss)}
            out["gradients"] = {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(grads)}
        out["loss curve"][f"step {step}"] = np.asarray(loss)
    return out


# Compiled functions are built once per process and reused, so proving several models of
# one shape, or the same model twice, compiles once.
@functools.cache
def _jax_train_step(family):
    from flax import nnx

    @nnx.jit  # compiled, as the benchmark runs it
    def train_step(model, optimizer, inputs, targets):
        (loss, logits), grads = nnx.value_and_grad(family.jax_loss, has_aux=True)(
            model, inputs, targets)
        optimizer.update(model, grads)
        return loss, logits, grads

    return train_step


@functools.cache
def _optax_for(family, hyper_items: tuple):
    return family.optax(dict(hyper_items))


@functools.cache
def vit_family() -> Family:
    """Chapter 5's ViT: HF's PyTorch model on NCHW images, its NNX twin on NHWC; AdamW."""
    return Family("ViT", _vit_torch_forward, _vit_torch_gradients, _vit_jax_loss,
                  _nchw_to_nhwc, lambda model, hyper: torch_adamw(model.parameters(), hyper),
                  optax_adamw)


def _vit_torch_forward(model, images_nchw, labels):
    import torch

    device = next(model.parameters()).device
    logits = model(pixel_values=torch.as_tensor(images_nchw, device=device)).logits
    loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels, device=device))
    return logits, loss


def _vit_torch_gradients(model):
    from deepdive.models.vit import hf_arrays_as_nnx

    return hf_arrays_as_nnx((name, p.grad.detach().cpu().numpy().copy())
                            for name, p in model.named_parameters())


def _vit_jax_loss(model, images, labels):
    import optax

    logits = model(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), logits


def _nchw_to_nhwc(images):
    from deepdive.models.vit import nchw_to_nhwc

    return nchw_to_nhwc(images)


@functools.cache
def _compiled_update(transform):
    import jax
    import optax

    @jax.jit  # as nnx.Optimizer.update runs inside the benchmark's compiled step
    def update(params, state, grads):
        updates, state = transform.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    return update


def _name(key) -> str:
    return ".".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
