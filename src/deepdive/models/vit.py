"""A Vision Transformer in Flax NNX that mirrors Hugging Face's PyTorch `ViTForImageClassification`.

transformers 5 ships no Flax models, so chapter 5 compares HF's PyTorch ViT with this
mirror: the same modules under the same names (`vit.layers.3.attention.q_proj`, ...), the
same math (exact GELU, fp32 softmax, LayerNorm epsilon from the config), and
`port_hf_weights` to copy a PyTorch model's weights in. Images are NHWC here (Flax's
convolution layout) and NCHW on the PyTorch side; `nchw_to_nhwc` converts.

Mixed precision follows `torch.autocast`'s policy when asked to
(``dtype=jnp.bfloat16, residual_dtype=jnp.float32``): matmuls and convolutions in bf16,
while the residual stream and every LayerNorm stay in fp32, as they do in HF's model under
autocast (its bf16 sublayer outputs are added to an fp32 stream, and LayerNorm is not on
autocast's bf16 list).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = ["ATTENTION", "ViTAttention", "ViTEmbeddings", "ViTForImageClassification", "ViTLayer",
           "ViTMLP", "ViTModel", "ViTPatchEmbeddings", "dense", "eager_attention",
           "hf_arrays_as_nnx", "nchw_to_nhwc", "nnx_path", "port_hf_weights", "split_merge_step",
           "to_nnx_layout"]

ATTENTION = ("eager", "dot_product_attention")
_ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


class ViTPatchEmbeddings(nnx.Module):
    def __init__(self, config, *, dtype, residual_dtype, param_dtype, rngs: nnx.Rngs):
        patch = _pair(config.patch_size)
        self.projection = nnx.Conv(config.num_channels, config.hidden_size, kernel_size=patch,
                                   strides=patch, padding="VALID", dtype=dtype,
                                   param_dtype=param_dtype, rngs=rngs)
        self.patch, self.dtype, self.residual_dtype = patch, dtype, residual_dtype

    def __call__(self, images):
        # The convolution in `dtype`, accumulated and its bias added in fp32, as PyTorch's bf16
        # kernels do (see `dense`); the result joins the residual stream in its dtype.
        patches = jax.lax.conv_general_dilated(
            images.astype(self.dtype), self.projection.kernel[...].astype(self.dtype),
            window_strides=self.patch, padding="VALID",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            preferred_element_type=jnp.float32)  # (batch, rows, cols, hidden)
        patches = (patches + self.projection.bias[...].astype(jnp.float32)).astype(
            self.residual_dtype)
        # Row-major flattening, as PyTorch's flatten(2) on NCHW does.
        return patches.reshape(patches.shape[0], -1, patches.shape[-1])


class ViTEmbeddings(nnx.Module):
    def __init__(self, config, *, dtype, residual_dtype, param_dtype, rngs: nnx.Rngs):
        height, width = _pair(config.image_size)
        patch_h, patch_w = _pair(config.patch_size)
        n_tokens = (height // patch_h) * (width // patch_w) + 1
        init = nnx.initializers.truncated_normal(config.initializer_range)
        self.cls_token = nnx.Param(init(rngs.params(), (1, 1, config.hidden_size), param_dtype))
        self.position_embeddings = nnx.Param(
            init(rngs.params(), (1, n_tokens, config.hidden_size), param_dtype))
        self.patch_embeddings = ViTPatchEmbeddings(config, dtype=dtype,
                                                   residual_dtype=residual_dtype,
                                                   param_dtype=param_dtype, rngs=rngs)
        self.image_size = (height, width)
        self.residual_dtype = residual_dtype

    def __call__(self, images):
        if tuple(images.shape[1:3]) != self.image_size:
            raise ValueError(f"images must be NHWC with H, W = {self.image_size}; "
                             f"got shape {tuple(images.shape)}")
        patches = self.patch_embeddings(images)
        cls = jnp.broadcast_to(self.cls_token[...], (patches.shape[0], 1, patches.shape[-1]))
        tokens = jnp.concatenate([cls.astype(patches.dtype), patches], axis=1)
        # The residual stream starts here, in its own dtype (fp32 under autocast's policy).
        return (tokens.astype(self.residual_dtype)
                + self.position_embeddings[...]).astype(self.residual_dtype)


class ViTAttention(nnx.Module):
    def __init__(self, config, *, attention, dtype, param_dtype, rngs: nnx.Rngs):
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // heads
        self.heads = heads
        self.attention = attention
        width = heads * self.head_dim

        def linear(n_in, n_out, bias):
            return nnx.Linear(n_in, n_out, use_bias=bias, dtype=dtype, param_dtype=param_dtype,
                              rngs=rngs)

        self.q_proj = linear(hidden, width, config.qkv_bias)
        self.k_proj = linear(hidden, width, config.qkv_bias)
        self.v_proj = linear(hidden, width, config.qkv_bias)
        self.o_proj = linear(width, hidden, True)

    def __call__(self, x):
        batch, tokens, _ = x.shape
        split = (batch, tokens, self.heads, self.head_dim)
        q, k, v = (dense(proj, x).reshape(split)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.attention == "eager":
            out = eager_attention(q, k, v, self.head_dim ** -0.5)
        else:
            out = jax.nn.dot_product_attention(q, k, v, scale=self.head_dim ** -0.5)
        return dense(self.o_proj, out.reshape(batch, tokens, -1))


def dense(layer: nnx.Linear, x, *, precision=None, flatten: bool = False):
    """`layer(x)` as PyTorch's bf16 matmuls compute it: inputs and kernel in the layer's
    dtype, products accumulated and the bias added in fp32, one rounding to the layer's
    dtype at the end. In fp32 it is `layer(x)`. With the bias added in bf16 instead, its
    gradient, a sum over batch x tokens whose terms largely cancel, would be summed in bf16
    too and lose most of its digits (chapter 5 checks the gradients of every variant).

    precision: the dot's precision or algorithm (default: the one in force); the GPT twin
        passes `bf16_dot_algorithm` so its backward dots run in bf16 too.
    flatten: multiply (tokens, features) matrices, leading axes merged, as PyTorch's
        `F.linear` does, rather than a dot over all leading axes (Flax's `nnx.Linear`).
    """
    dtype = layer.dtype or x.dtype
    lead = x.shape[:-1]
    if flatten:
        x = x.reshape(-1, x.shape[-1])
    y = jnp.dot(x.astype(dtype), layer.kernel[...].astype(dtype),
                preferred_element_type=jnp.float32, precision=precision)
    if layer.bias is not None:
        y = y + layer.bias[...].astype(jnp.float32)
    return y.astype(dtype).reshape(*lead, y.shape[-1])


def eager_attention(q, k, v, scale):
    """HF's eager_attention_forward: scores, softmax in fp32, weighted values."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


class ViTMLP(nnx.Module):
    def __init__(self, config, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.activation_fn = _ACTIVATIONS[config.hidden_act]
        self.fc1 = nnx.Linear(config.hidden_size, config.intermediate_size, dtype=dtype,
                              param_dtype=param_dtype, rngs=rngs)
        self.fc2 = nnx.Linear(config.intermediate_size, config.hidden_size, dtype=dtype,
                              param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x):
        return dense(self.fc2, self.activation_fn(dense(self.fc1, x)))


class ViTLayer(nnx.Module):
    """Pre-norm transformer block: x + attention(LN(x)), then x + MLP(LN(x)).

    LayerNorm computes in `residual_dtype`; the sublayers' outputs (in `dtype`) are added to
    the stream in `residual_dtype`.
    """

    def __init__(self, config, *, attention, dtype, residual_dtype, param_dtype,
                 rngs: nnx.Rngs):
        def layer_norm():
            return nnx.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps,
                                 dtype=residual_dtype, param_dtype=param_dtype, rngs=rngs)

        self.attention = ViTAttention(config, attention=attention, dtype=dtype,
                                      param_dtype=param_dtype, rngs=rngs)
        self.layernorm_before = layer_norm()
        self.layernorm_after = layer_norm()
        self.mlp = ViTMLP(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.residual_dtype = residual_dtype

    def __call__(self, x):
        x = (x + self.attention(self.layernorm_before(x))).astype(self.residual_dtype)
        return (x + self.mlp(self.layernorm_after(x))).astype(self.residual_dtype)


class ViTModel(nnx.Module):
    def __init__(self, config, *, attention, dtype, residual_dtype, param_dtype,
                 rngs: nnx.Rngs):
        kwargs = dict(dtype=dtype, residual_dtype=residual_dtype, param_dtype=param_dtype,
                      rngs=rngs)
        self.embeddings = ViTEmbeddings(config, **kwargs)
        self.layers = nnx.List([ViTLayer(config, attention=attention, **kwargs)
                                for _ in range(config.num_hidden_layers)])
        self.layernorm = nnx.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps,
                                       dtype=residual_dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, images):
        x = self.embeddings(images)
        for layer in self.layers:
            x = layer(x)
        return self.layernorm(x)


class ViTForImageClassification(nnx.Module):
    """The NNX twin of `transformers.ViTForImageClassification`; returns fp32 logits.

    config: a `transformers.ViTConfig` (or anything with the same attributes).
    attention: "eager" (HF's eager math, written out) or "dot_product_attention"
        (`jax.nn.dot_product_attention` without `implementation=`: XLA's
        implementation, the same math with no fused kernel, on every device).
    dtype / param_dtype: computation dtype of the matmuls and convolutions, and parameter
        dtype (bf16 mixed precision is ``dtype=jnp.bfloat16, param_dtype=jnp.float32``).
    residual_dtype: dtype of the residual stream and of every LayerNorm; ``None`` (the
        default) means `dtype`. ``jnp.float32`` with a bf16 `dtype` is the policy of HF's
        model under ``torch.autocast``.
    """

    def __init__(self, config, *, attention: str = "eager", dtype=jnp.float32,
                 param_dtype=jnp.float32, residual_dtype=None, rngs: nnx.Rngs):
        _check_config(config, attention)
        residual_dtype = dtype if residual_dtype is None else residual_dtype
        self.vit = ViTModel(config, attention=attention, dtype=dtype,
                            residual_dtype=residual_dtype, param_dtype=param_dtype, rngs=rngs)
        self.classifier = nnx.Linear(config.hidden_size, config.num_labels, dtype=dtype,
                                     param_dtype=param_dtype, rngs=rngs)

    def __call__(self, images):
        hidden = self.vit(images)
        return dense(self.classifier, hidden[:, 0]).astype(jnp.float32)


def nchw_to_nhwc(images):
    """PyTorch's image layout to Flax's: (batch, C, H, W) -> (batch, H, W, C)."""
    return np.transpose(np.asarray(images), (0, 2, 3, 1))


def nnx_path(hf_name: str) -> tuple[tuple[str | int, ...], str]:
    """Where an HF parameter lives in the NNX model, and how its array must be laid out.

    Returns (path, layout) with layout "linear" (transpose (out, in) -> (in, out)), "conv"
    ((O, I, kh, kw) -> (kh, kw, I, O)) or "same". Raises KeyError for unknown names.
    """
    parts = tuple(int(p) if p.isdigit() else p for p in hf_name.split("."))
    *module, leaf = parts
    if module[-1] == "projection" and leaf == "weight":
        return (*module, "kernel"), "conv"
    if leaf in ("cls_token", "position_embeddings"):
        return parts, "same"
    if leaf == "bias":
        return parts, "same"
    if leaf == "weight" and str(module[-1]).startswith("layernorm"):
        return (*module, "scale"), "same"
    if leaf == "weight":
        return (*module, "kernel"), "linear"
    raise KeyError(f"no NNX place for HF parameter {hf_name!r}")


def to_nnx_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """Re-lay one HF array for NNX (see `nnx_path`)."""
    if layout == "linear":
        return array.T
    if layout == "conv":
        return np.transpose(array, (2, 3, 1, 0))
    return array


def hf_arrays_as_nnx(named_arrays) -> dict[tuple, np.ndarray]:
    """HF-named arrays (parameters or their gradients) keyed by NNX path, re-laid for NNX."""
    out = {}
    for name, array in named_arrays:
        path, layout = nnx_path(name)
        out[path] = to_nnx_layout(np.asarray(array), layout)
    return out


def port_hf_weights(hf_model, model: ViTForImageClassification) -> None:
    """Copy every parameter of an HF PyTorch ViT into `model`, in place.

    Fails loudly when a parameter has no place, a shape disagrees, or an NNX parameter
    is left without an HF source.
    """
    arrays = hf_arrays_as_nnx(
        (name, p.detach().cpu().float().numpy()) for name, p in hf_model.named_parameters())
    params = nnx.state(model, nnx.Param)
    flat = dict(nnx.to_flat_state(params))
    missing = sorted(set(flat) - set(arrays), key=str)
    if missing:
        raise KeyError(f"NNX parameters with no HF source: {missing}")
    for path, array in arrays.items():
        if path not in flat:
            raise KeyError(f"HF parameter mapped to {path}, which the NNX model lacks")
        variable = flat[path]
        if variable.shape != array.shape:
            raise ValueError(f"{path}: NNX shape {variable.shape} != ported {array.shape}")
        variable.set_value(jnp.asarray(array, dtype=variable.dtype))
    nnx.update(model, nnx.from_flat_state(flat))


def _pair(value) -> tuple[int, int]:
    return tuple(value) if isinstance(value, list | tuple) else (value, value)


def _check_config(config, attention: str) -> None:
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    if config.hidden_act not in _ACTIVATIONS:
        raise ValueError(f"hidden_act {config.hidden_act!r} is not mirrored; accepted: "
                         f"{', '.join(_ACTIVATIONS)}")
    dropouts = (config.hidden_dropout_prob, config.attention_probs_dropout_prob)
    if any(dropouts):
        raise ValueError(f"dropout must be 0.0 (the ViTConfig default) so both frameworks "
                         f"compute the same function; got hidden/attention {dropouts}")


def split_merge_step(hf_model, images_nhwc, labels, transform, attention: str = "eager"):
    """A training step of the twin of `hf_model` (its weights ported in): the split/merge
    form of chapter 5, one `jax.jit` of forward, cross-entropy, backward and `transform`'s
    update (an optax transform), with the state donated, and `attention` as the twin takes
    it. Returns ``step() -> loss`` on the given batch. Chapter `05_vit_xla` runs it in its
    own process and in the PyTorch/XLA worker, where the same step in two processes
    measures what crossing processes costs; `deepdive.chapters.regimes` times it per allocator."""
    import functools

    import optax

    model = ViTForImageClassification(hf_model.config, attention=attention, rngs=nnx.Rngs(0))
    port_hf_weights(hf_model, model)
    graphdef, state = nnx.split((model, nnx.Optimizer(model, transform, wrt=nnx.Param)))

    def loss_of(model, images, labels):
        return optax.softmax_cross_entropy_with_integer_labels(model(images), labels).mean()

    @functools.partial(jax.jit, donate_argnums=0)
    def train(state, images, labels):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_of)(model, images, labels)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    images, labels = jnp.asarray(images_nhwc), jnp.asarray(labels)
    held = [state]

    def step():
        held[0], loss = train(held[0], images, labels)
        return loss

    step.jitted, step.state = train, lambda: (held[0],)  # for XLA's plan of it, as chapter 5's
    return step
