"""Proof that two implementations of one model compute the same thing, one step deep.

Chapter 4 runs HF's PyTorch ViT and its Flax NNX mirror (`deepdive.vit`) from the same
weights on the same batch and compares logits, loss, every gradient, and every
parameter after one SGD step and after one AdamW step. `assert_parity` fails the build
when any quantity leaves its stated fp32 tolerance, so a broken weight port cannot go
unnoticed.
"""

from __future__ import annotations

import copy

import numpy as np

# fp32 on both sides; the frameworks sum in different orders, so bits differ slightly.
TOLERANCES = {
    "logits": dict(rtol=1e-5, atol=1e-5),
    "loss": dict(rtol=1e-5, atol=1e-6),
    "gradients": dict(rtol=1e-4, atol=1e-6),
    "parameters after one SGD step": dict(rtol=1e-5, atol=1e-7),
    # Adam's first update is lr * g / (|g| + eps), about lr * sign(g): where a gradient is
    # at rounding level (|g| ~ 1e-7), a 1e-8 difference can move it by a good part of lr.
    "parameters after one AdamW step": dict(rtol=1e-5, atol=0.1 * 1e-3),
}
SGD = dict(lr=1e-3)  # the seed's optimizer (torch.optim.SGD's default learning rate)
ADAMW = dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)


def one_step_parity(hf_model, nnx_model, images_nchw, labels) -> list[dict]:
    """Run one training step in each framework and measure how far apart they land.

    Neither model is changed: both are copied first. `images_nchw` is a float32 NumPy
    array (batch, C, H, W); `labels` an int array (batch,). Returns one row per quantity
    with the largest absolute difference, the tensor where it occurred, and the tolerance.
    """
    torch_side = _torch_step(copy.deepcopy(hf_model), images_nchw, labels)
    jax_side = _jax_step(nnx_model, images_nchw, labels)
    rows = []
    for quantity, tolerance in TOLERANCES.items():
        ours, theirs = torch_side[quantity], jax_side[quantity]
        worst_key, worst, passed = None, -1.0, True
        for key, reference in ours.items():
            value = theirs[key]
            diff = float(np.max(np.abs(value - reference)))
            passed &= bool(np.allclose(value, reference, **tolerance))
            if diff > worst:
                worst_key, worst = key, diff
        rows.append({"quantity": quantity, "tensors compared": len(ours),
                     "max |PyTorch - JAX|": worst, "where": _name(worst_key),
                     "tolerance": f"rtol={tolerance['rtol']:g}, atol={tolerance['atol']:g}",
                     "within tolerance": passed})
    return rows


def assert_parity(rows: list[dict]) -> None:
    """Raise AssertionError naming every quantity outside its tolerance."""
    failed = [f"{r['quantity']} (max diff {r['max |PyTorch - JAX|']:.3g} at {r['where']}, "
              f"tolerance {r['tolerance']})" for r in rows if not r["within tolerance"]]
    if failed:
        raise AssertionError("PyTorch and JAX models disagree: " + "; ".join(failed))


def _torch_step(model, images_nchw, labels) -> dict[str, dict]:
    import torch

    from deepdive.vit import hf_arrays_as_nnx

    model.train()
    logits = model(pixel_values=torch.as_tensor(images_nchw)).logits
    loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels))
    loss.backward()
    out = {"logits": {"logits": logits.detach().numpy()},
           "loss": {"loss": np.asarray(loss.item())},
           "gradients": hf_arrays_as_nnx((n, p.grad.numpy())
                                         for n, p in model.named_parameters())}
    optimizers = {
        "SGD": lambda params: torch.optim.SGD(params, lr=SGD["lr"]),
        "AdamW": lambda params: torch.optim.AdamW(
            params, lr=ADAMW["lr"], betas=(ADAMW["b1"], ADAMW["b2"]), eps=ADAMW["eps"],
            weight_decay=ADAMW["weight_decay"]),
    }
    for name, make in optimizers.items():
        stepped = copy.deepcopy(model)  # deepcopy drops .grad: hand the gradients over
        for original, param in zip(model.parameters(), stepped.parameters(), strict=True):
            param.grad = original.grad.clone()
        make(stepped.parameters()).step()
        out[f"parameters after one {name} step"] = hf_arrays_as_nnx(
            (n, p.detach().numpy()) for n, p in stepped.named_parameters())
    return out


def _jax_step(model, images_nchw, labels) -> dict[str, dict]:
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from deepdive.vit import nchw_to_nhwc

    images, labels = jnp.asarray(nchw_to_nhwc(images_nchw)), jnp.asarray(labels)

    def loss_fn(model):
        logits = model(images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), logits

    # Compiled, as the benchmark runs it (and op-by-op dispatch would be far slower).
    (loss, logits), grads = nnx.jit(nnx.value_and_grad(loss_fn, has_aux=True))(model)
    out = {"logits": {"logits": np.asarray(logits)}, "loss": {"loss": np.asarray(loss)},
           "gradients": _flat_arrays(grads)}
    optimizers = {"SGD": optax.sgd(SGD["lr"]),
                  "AdamW": optax.adamw(ADAMW["lr"], b1=ADAMW["b1"], b2=ADAMW["b2"],
                                       eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])}
    apply = nnx.jit(lambda model, optimizer, grads: optimizer.update(model, grads))
    for name, transform in optimizers.items():
        stepped = nnx.clone(model)
        apply(stepped, nnx.Optimizer(stepped, transform, wrt=nnx.Param), grads)
        out[f"parameters after one {name} step"] = _flat_arrays(nnx.state(stepped, nnx.Param))
    return out


def _flat_arrays(state) -> dict[tuple, np.ndarray]:
    from flax import nnx

    return {path: np.asarray(variable[...]) for path, variable in nnx.to_flat_state(state)}


def _name(key) -> str:
    return ".".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
