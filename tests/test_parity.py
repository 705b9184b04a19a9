"""The parity proof of chapter 4 (`deepdive.models.parity`) on configurations unlike the chapter's.

HELD_BACK is the configuration on which the old one-step AdamW check failed: it runs with
both attention paths of the NNX twin. RECTANGULAR has one input channel, a non-square image
and no q/k/v bias. Each test that breaks something (the port, a beta, the weight decay, the
momentum) must make the proof raise, naming the quantity that moved.
"""

import jax
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification

from deepdive.models import parity, vit

HELD_BACK = dict(num_channels=2, image_size=40, patch_size=8, num_attention_heads=6,
                 hidden_size=72, intermediate_size=100, num_hidden_layers=3, qkv_bias=True,
                 hidden_act="gelu", layer_norm_eps=1e-6, num_labels=11)
RECTANGULAR = dict(num_channels=1, image_size=[24, 36], patch_size=6, num_attention_heads=5,
                   hidden_size=40, intermediate_size=56, num_hidden_layers=2, qkv_bias=False,
                   hidden_act="gelu_new", num_labels=4)
BATCH = {"held-back": (HELD_BACK, 5), "rectangular": (RECTANGULAR, 3)}


def ported_pair(name, attention="eager"):
    config = ViTConfig(**BATCH[name][0])
    torch.manual_seed(0)
    hf_model = ViTForImageClassification(config)
    hf_model.set_attn_implementation("sdpa" if attention == "dot_product_attention" else "eager")
    model = vit.ViTForImageClassification(config, attention=attention, rngs=nnx.Rngs(0))
    vit.port_hf_weights(hf_model, model)
    return hf_model, model


def batch(name):
    config, n = BATCH[name]
    rng = np.random.default_rng(0)
    height, width = vit._pair(config["image_size"])
    return (rng.standard_normal((n, config["num_channels"], height, width), dtype=np.float32),
            rng.integers(0, config["num_labels"], n))


def parameters(hf_model):
    return {name: p.detach().numpy().copy() for name, p in hf_model.named_parameters()}


@pytest.fixture(scope="module", params=[("held-back", "eager"),
                                        ("held-back", "dot_product_attention"),
                                        ("rectangular", "eager")], ids="-".join)
def proof(request):
    name, attention = request.param
    hf_model, model = ported_pair(name, attention)
    before = parameters(hf_model), jax.tree.map(np.array, nnx.state(model, nnx.Param))
    rows = parity.prove_parity(hf_model, model, *batch(name))
    return hf_model, model, before, rows


def test_the_proof_holds_on_configs_unlike_the_chapters(proof):
    hf_model, _, _, rows = proof

    parity.assert_parity(rows)

    n_params = len(parameters(hf_model))
    assert [(r["quantity"], r["tensors compared"]) for r in rows] == [
        ("logits", 1), ("loss", 1), ("gradients", n_params),
        ("parameters, 10 AdamW steps on identical gradients", 10 * n_params),
        ("parameters, 10 SGD with momentum steps on identical gradients", 10 * n_params),
        ("loss curve, 20 AdamW steps on each side's own gradients", 20)]


def test_the_proof_leaves_both_models_unchanged(proof):
    hf_model, model, (torch_before, jax_before), _ = proof

    assert all(np.array_equal(torch_before[name], p.detach().numpy())
               for name, p in hf_model.named_parameters())
    jax_after = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    assert jax.tree.all(jax.tree.map(np.array_equal, jax_before, jax_after))


def test_a_transposed_kernel_fails_the_proof():
    hf_model, model = ported_pair("held-back")
    kernel = model.vit.layers[1].attention.q_proj.kernel
    kernel[...] = kernel[...].T  # square, so only the numbers can tell

    rows = parity.prove_parity(hf_model, model, *batch("held-back"))

    with pytest.raises(AssertionError, match="logits .*gradients .*loss curve"):
        parity.assert_parity(rows)
    assert all(r["within tolerance"] for r in rows if "identical gradients" in r["quantity"])


def test_the_optimizers_are_proven_with_settings_a_mistake_would_change():
    adamw, sgd = parity.TRAJECTORY_ADAMW, parity.TRAJECTORY_SGD

    assert (adamw["b1"], adamw["b2"]) != (0.9, 0.999)  # optax's and torch's defaults
    assert adamw["b1"] != adamw["b2"]  # so swapping them shows
    assert adamw["weight_decay"] * adamw["lr"] * parity.OPTIMIZER_STEPS >= 1e-3
    assert sgd["momentum"] >= 0.5


def _mismatched(pair_for, hyper, torch_side=None, jax_side=None):
    """One optimizer built from `hyper`, with one side's settings changed."""
    make_torch, make_optax = pair_for
    return parity.OptimizerPair("mismatched",
                                lambda params: make_torch(params, {**hyper, **(torch_side or {})}),
                                make_optax({**hyper, **(jax_side or {})}))


ADAMW_PAIR = (parity.torch_adamw, parity.optax_adamw)
SGD_PAIR = (parity.torch_sgd, parity.optax_sgd)
MISTAKES = {
    "b1 left at its default in optax": (ADAMW_PAIR, parity.TRAJECTORY_ADAMW, None, {"b1": 0.9}),
    "b2 left at its default in torch": (ADAMW_PAIR, parity.TRAJECTORY_ADAMW, {"b2": 0.999}, None),
    "betas swapped in optax": (ADAMW_PAIR, parity.TRAJECTORY_ADAMW, None, {"b1": 0.95, "b2": 0.8}),
    "no weight decay in optax": (ADAMW_PAIR, parity.TRAJECTORY_ADAMW, None, {"weight_decay": 0.0}),
    "torch's default weight decay": (ADAMW_PAIR, parity.TRAJECTORY_ADAMW,
                                     {"weight_decay": 0.01}, None),
    "no momentum in optax": (SGD_PAIR, parity.TRAJECTORY_SGD, None, {"momentum": None}),
    "another momentum in torch": (SGD_PAIR, parity.TRAJECTORY_SGD, {"momentum": 0.8}, None),
}


@pytest.fixture(scope="module")
def held_back_parameters():
    return parameters(ported_pair("held-back")[0])


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistranslated_optimizer_fails_the_proof(mistake, held_back_parameters):
    pair = _mismatched(*MISTAKES[mistake])

    (row,) = parity.optimizer_parity(held_back_parameters, [pair])

    with pytest.raises(AssertionError, match="parameters, 10 mismatched steps"):
        parity.assert_parity([row])
    # Far outside, not at the edge: a hundred times what the largest parameter may differ.
    largest = max(float(np.max(np.abs(p))) for p in held_back_parameters.values())
    tolerance = parity.TOLERANCES["parameter trajectory"]
    assert row["max |PyTorch - JAX|"] > 100 * (tolerance["rtol"] * largest + tolerance["atol"])


def test_the_loss_falls_far_more_than_the_curves_may_differ():
    hf_model, model = ported_pair("held-back")

    curves = parity.training_losses(hf_model, model, *batch("held-back"))

    fall = curves["PyTorch"][0] - curves["PyTorch"][-1]
    assert fall > 1000 * parity.TOLERANCES["loss curve"]["atol"]
    assert np.all(np.diff(curves["JAX"]) < 0)  # a stable run: the loss falls at every step


def test_assert_parity_names_every_failing_quantity_and_where():
    rows = [{"quantity": "loss", "max |PyTorch - JAX|": 0.0, "where": "loss",
             "tolerance": "rtol=1e-05, atol=1e-06", "within tolerance": True},
            {"quantity": "gradients", "max |PyTorch - JAX|": 0.5, "where": "vit.layernorm.bias",
             "tolerance": "rtol=0.0001, atol=1e-06", "within tolerance": False}]

    with pytest.raises(AssertionError, match=r"^PyTorch and JAX disagree: gradients "
                                             r"\(max diff 0.5 at vit.layernorm.bias"):
        parity.assert_parity(rows)
    parity.assert_parity(rows[:1])


def test_worst_tensor_error_names_the_worst_tensor_and_floors_near_zero_gradients():
    from deepdive.models.parity import worst_tensor_error

    expected = {("a", "w"): np.array([3.0, 4.0]), ("b",): np.array([1e-9, 0.0])}
    values = {("a", "w"): np.array([3.0, 4.5]), ("b",): np.array([2e-9, 0.0])}
    error, where = worst_tensor_error(values, expected, floor=1e-3)
    assert where == "a.w" and error == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no tensors"):
        worst_tensor_error({}, {}, floor=1e-3)


@pytest.fixture
def loose_fp32():
    """TF32 allowed everywhere and JAX at its default, the process's settings restored
    after the test."""
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32, jax.config.jax_default_matmul_precision)
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    jax.config.update("jax_default_matmul_precision", None)
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cuda.matmul.allow_tf32 = before[1]
    torch.backends.cudnn.allow_tf32 = before[2]
    jax.config.update("jax_default_matmul_precision", before[3])


STRICT_TORCH = {"float32_matmul_precision": "highest", "cuda.matmul.allow_tf32": False,
                "cudnn.allow_tf32": False}


def test_strict_fp32_called_sets_both_frameworks_for_good_and_reads_them_back(loose_fp32):
    assert parity.fp32_settings()["cudnn.allow_tf32"] is True
    assert parity.strict_fp32().settings == {**STRICT_TORCH,
                                             "jax_default_matmul_precision": "highest"}
    assert parity.fp32_settings() == {**STRICT_TORCH, "jax_default_matmul_precision": "highest"}


def test_strict_fp32_as_a_context_restores_what_was_set(loose_fp32):
    with parity.strict_fp32() as strict:
        assert strict.settings["float32_matmul_precision"] == "highest"
        assert jax.config.jax_default_matmul_precision == "highest"
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cudnn.allow_tf32 is True
    assert jax.config.jax_default_matmul_precision is None


def test_strict_fp32_for_pytorch_alone_leaves_jax_as_it_was(loose_fp32):
    """A torch-only worker (a distributed rank) passes jax=False: JAX is neither set nor
    read, and the record names PyTorch's settings only."""
    assert parity.strict_fp32(jax=False).settings == STRICT_TORCH
    assert jax.config.jax_default_matmul_precision is None
    with pytest.raises(TypeError, match="jax must be"):
        parity.strict_fp32(jax="yes")


def test_strict_fp32_where_jax_is_not_installed_sets_pytorch_alone(loose_fp32, monkeypatch):
    import importlib.util
    import sys

    monkeypatch.delitem(sys.modules, "jax")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    assert parity.strict_fp32().settings == STRICT_TORCH
