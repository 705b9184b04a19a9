"""The Flax NNX ViT mirror and its weight port, checked against HF's PyTorch ViT.

The configuration differs from chapter 4's on purpose (image and patch size, width,
depth, heads, no q/k/v bias, tanh GELU, label count), so the port is not tuned to one shape.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification

from deepdive import parity, vit

OTHER_CONFIG = dict(image_size=24, patch_size=6, hidden_size=48, num_hidden_layers=3,
                    num_attention_heads=3, intermediate_size=96, num_labels=7, qkv_bias=False,
                    hidden_act="gelu_new")


@pytest.fixture(autouse=True)
def strict_fp32():
    with jax.default_matmul_precision("highest"):
        yield


def ported_pair(attention="eager", **overrides):
    config = ViTConfig(**{**OTHER_CONFIG, **overrides})
    torch.manual_seed(0)
    hf_model = ViTForImageClassification(config)
    hf_model.set_attn_implementation("sdpa" if attention == "dot_product_attention" else "eager")
    model = vit.ViTForImageClassification(config, attention=attention, rngs=nnx.Rngs(0))
    vit.port_hf_weights(hf_model, model)
    return config, hf_model, model


def batch(config, n=4):
    rng = np.random.default_rng(0)
    size = config.image_size
    return (rng.standard_normal((n, 3, size, size), dtype=np.float32),
            rng.integers(0, config.num_labels, n))


@pytest.mark.parametrize("attention", vit.ATTENTION)
def test_ported_model_matches_hf_through_one_training_step(attention):
    config, hf_model, model = ported_pair(attention)

    rows = parity.one_step_parity(hf_model, model, *batch(config))

    parity.assert_parity(rows)
    assert [r["quantity"] for r in rows] == list(parity.TOLERANCES)
    n_params = sum(1 for _ in hf_model.parameters())
    assert all(r["tensors compared"] == n_params for r in rows if "param" in r["quantity"])


def test_parity_leaves_both_models_unchanged():
    config, hf_model, model = ported_pair()
    before_torch = [p.detach().clone() for p in hf_model.parameters()]
    before_jax = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))

    parity.one_step_parity(hf_model, model, *batch(config))

    assert all(torch.equal(a, b) for a, b in zip(before_torch, hf_model.parameters(), strict=True))
    after_jax = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    assert jax.tree.all(jax.tree.map(np.array_equal, before_jax, after_jax))


def test_a_transposed_kernel_breaks_parity():
    config, hf_model, model = ported_pair()
    kernel = model.vit.layers[1].attention.q_proj.kernel
    kernel[...] = kernel[...].T  # square, so only the numbers can tell

    with pytest.raises(AssertionError, match="logits .*gradients"):
        parity.assert_parity(parity.one_step_parity(hf_model, model, *batch(config)))


def test_port_refuses_a_model_of_another_shape():
    _, hf_model, _ = ported_pair()
    wider = vit.ViTForImageClassification(ViTConfig(**{**OTHER_CONFIG, "intermediate_size": 64}),
                                          rngs=nnx.Rngs(0))

    with pytest.raises(ValueError, match="fc1"):
        vit.port_hf_weights(hf_model, wider)


def test_port_refuses_a_model_with_unported_parameters():
    _, hf_model, _ = ported_pair()
    with_bias = vit.ViTForImageClassification(ViTConfig(**{**OTHER_CONFIG, "qkv_bias": True}),
                                              rngs=nnx.Rngs(0))

    with pytest.raises(KeyError, match="no HF source"):
        vit.port_hf_weights(hf_model, with_bias)


@pytest.mark.parametrize(("overrides", "attention", "message"), [
    ({}, "flash", "attention must be one of"),
    ({"hidden_act": "swish_beta"}, "eager", "hidden_act 'swish_beta' is not mirrored"),
    ({"hidden_dropout_prob": 0.1}, "eager", "dropout must be 0.0"),
])
def test_unsupported_settings_are_refused_by_name(overrides, attention, message):
    with pytest.raises(ValueError, match=message):
        vit.ViTForImageClassification(ViTConfig(**{**OTHER_CONFIG, **overrides}),
                                      attention=attention, rngs=nnx.Rngs(0))


def test_wrong_image_size_is_refused():
    config, _, model = ported_pair()

    with pytest.raises(ValueError, match=r"H, W = \(24, 24\)"):
        model(jnp.zeros((1, 32, 32, 3)))


def test_bf16_computation_returns_fp32_logits_close_to_fp32():
    config, hf_model, model = ported_pair()
    mixed = vit.ViTForImageClassification(config, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    vit.port_hf_weights(hf_model, mixed)
    images = jnp.asarray(vit.nchw_to_nhwc(batch(config)[0]))

    logits, reference = mixed(images), model(images)

    assert logits.dtype == jnp.float32
    assert mixed.classifier.kernel[...].dtype == jnp.float32  # parameters stay fp32
    np.testing.assert_allclose(logits, reference, atol=0.05)  # bf16 keeps 8 mantissa bits
    assert not np.allclose(logits, reference, atol=1e-6)  # and it did compute in bf16


def test_unknown_hf_parameter_has_no_place():
    with pytest.raises(KeyError, match="no NNX place"):
        vit.nnx_path("vit.pooler.gamma")
