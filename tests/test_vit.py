"""The Flax NNX ViT mirror and its weight port, checked against HF's PyTorch ViT.

The configuration differs from chapter 4's on purpose (image and patch size, width,
depth, heads, no q/k/v bias, tanh GELU, label count), so the port is not tuned to one shape.
The whole parity proof, optimizers and training included, is tested in test_parity.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification

from deepdive.models import parity, vit

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
def test_ported_model_matches_hf_logits_loss_and_gradients(attention):
    config, hf_model, model = ported_pair(attention)

    rows = parity.model_parity(hf_model, model, *batch(config))

    parity.assert_parity(rows)
    assert [r["quantity"] for r in rows] == ["logits", "loss", "gradients"]
    assert rows[-1]["tensors compared"] == sum(1 for _ in hf_model.parameters())


def test_a_transposed_kernel_breaks_model_parity():
    config, hf_model, model = ported_pair()
    kernel = model.vit.layers[1].attention.q_proj.kernel
    kernel[...] = kernel[...].T  # square, so only the numbers can tell

    with pytest.raises(AssertionError, match="logits .*gradients"):
        parity.assert_parity(parity.model_parity(hf_model, model, *batch(config)))


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


def test_autocast_policy_keeps_the_residual_stream_and_layernorm_in_fp32():
    config, hf_model, _ = ported_pair()
    mixed = vit.ViTForImageClassification(config, dtype=jnp.bfloat16,
                                          residual_dtype=jnp.float32, rngs=nnx.Rngs(0))
    vit.port_hf_weights(hf_model, mixed)
    images = jnp.asarray(vit.nchw_to_nhwc(batch(config)[0]))

    stream = mixed.vit.embeddings(images)
    after_layer = mixed.vit.layers[0](stream)

    assert stream.dtype == after_layer.dtype == jnp.float32
    assert mixed.vit.layers[0].layernorm_before(stream).dtype == jnp.float32
    assert mixed.vit.layers[0].mlp.fc1.dtype == jnp.bfloat16  # the matmuls stay bf16


def test_autocast_policy_matches_hf_under_autocast_closer_than_all_bf16():
    config, hf_model, _ = ported_pair()
    images, _ = batch(config, n=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hf_hidden = hf_model.vit(pixel_values=torch.as_tensor(images)).last_hidden_state
    assert hf_hidden.dtype == torch.float32  # HF's stream and LayerNorm stay fp32 under autocast
    hf_hidden = hf_hidden.detach().numpy()

    def mean_diff(residual_dtype):
        model = vit.ViTForImageClassification(config, dtype=jnp.bfloat16,
                                              residual_dtype=residual_dtype, rngs=nnx.Rngs(0))
        vit.port_hf_weights(hf_model, model)
        hidden = model.vit(jnp.asarray(vit.nchw_to_nhwc(images)))
        return float(np.mean(np.abs(np.asarray(hidden, np.float32) - hf_hidden)))

    matched, all_bf16 = mean_diff(jnp.float32), mean_diff(None)
    assert matched < 0.5 * all_bf16  # an fp32 stream keeps the bits a bf16 one rounds away
    assert matched < 0.01


def test_bf16_gradients_are_accumulated_in_fp32_like_pytorchs():
    """A bias gradient sums batch x tokens cancelling terms: summed in bf16 it loses most of
    its digits; `vit.dense` adds biases in fp32, as PyTorch's bf16 kernels do."""
    config, hf_model, model = ported_pair()
    images, labels = batch(config, n=16)
    mixed = vit.ViTForImageClassification(config, dtype=jnp.bfloat16,
                                          residual_dtype=jnp.float32, rngs=nnx.Rngs(0))
    vit.port_hf_weights(hf_model, mixed)
    nhwc, labels = jnp.asarray(vit.nchw_to_nhwc(images)), jnp.asarray(labels)

    def grads(m):
        def loss(m):
            logits = m(nhwc)
            return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(labels)), labels])
        return dict(nnx.to_flat_state(nnx.grad(loss)(m)))

    exact, rounded = grads(model), grads(mixed)
    total = np.sqrt(sum(float(np.sum(np.square(v[...]))) for v in exact.values()))
    for path, reference in exact.items():
        error = np.linalg.norm(rounded[path][...] - reference[...])
        assert error <= 0.05 * max(np.linalg.norm(reference[...]), 1e-3 * total), path
