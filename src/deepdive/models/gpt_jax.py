"""The Flax NNX twin of `deepdive.models.gpt.GPT`, and the port of its weights.

Chapter `04_gpt_training` trains the same GPT in both frameworks. This module mirrors the
PyTorch model module for module, under the same names (`blocks.1.attn.qkv`, `ln_f`, ...),
and with the same math, where Flax's defaults differ from PyTorch's:

- **tied embeddings**: there is no head parameter; the logits are the final hidden states
  times the token embedding's transpose, so the token embedding's gradient collects both
  uses, as in PyTorch's tied `head.weight is tok.weight`;
- **causal attention**, written out (`eager`: scores, a causal mask, an fp32 softmax) or
  through `jax.nn.dot_product_attention(is_causal=True)`; PyTorch's side uses
  `F.scaled_dot_product_attention(is_causal=True)`;
- **exact GELU** (`approximate=False`; `jax.nn.gelu` defaults to the tanh approximation);
- **LayerNorm epsilon 1e-5**, PyTorch's default (Flax's is 1e-6), with the two-pass
  variance PyTorch computes (Flax's default is the one-pass E[x^2] - E[x]^2);
- **GPT-2 initialisation**: weights N(0, 0.02), zero biases, the two projections that
  write into the residual stream N(0, 0.02 / sqrt(2 * n_layer)).

Mixed precision follows `torch.autocast(dtype=torch.bfloat16)` on the PyTorch model when
asked to (``dtype=jnp.bfloat16``): matmuls and attention in bf16 with fp32 accumulation,
in the backward pass too (`bf16_dot_algorithm`), GELU on the bf16 matmul output, while the
embeddings, the residual stream, every LayerNorm and the loss stay in fp32; parameters stay
fp32. ``flatten_tokens=True`` multiplies (tokens, features) matrices in the linear layers,
as PyTorch's `F.linear` does, instead of Flax's dot over all leading axes: the same math,
which XLA's CPU backend differentiates faster (the GPT page measures it).

`port_torch_weights` copies a PyTorch GPT into the twin and refuses, by name, a parameter
without a home, a home without a parameter, or a shape that disagrees; an untied PyTorch
model (its own `head.weight`) has no home here. A transposed square kernel keeps every
name and shape: only the parity proof (`deepdive.models.parity`) can catch it.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from deepdive.models.gpt import INIT_STD, GPTConfig
from deepdive.models.vit import dense

__all__ = ["ATTENTION", "GPT", "GRAD_CLIP", "LAYER_NORM_EPS", "MLP", "TRAINING", "Block",
           "CausalSelfAttention", "ClippedAdamW", "bf16_dot_algorithm", "causal_attention",
           "cross_entropy", "family", "first_moment", "nanogpt_adamw", "nnx_path", "optimizer_pair",
           "port_torch_weights", "torch_arrays_as_nnx"]

ATTENTION = ("eager", "dot_product_attention")
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default
GRAD_CLIP = 1.0  # nanoGPT's grad_clip, applied by both frameworks' training steps


def bf16_dot_algorithm(dtype):
    """The dot algorithm of a `dtype` matmul: for bf16, BF16_BF16_F32 (bf16 operands,
    fp32 accumulation). Without it, the backward pass of a bf16 dot that returns fp32
    receives an fp32 cotangent, and JAX's transposed dots run in fp32 (jax-ml/jax#24047),
    where autocast's backward matmuls run in bf16. ``None`` (the precision in force) for
    any other dtype."""
    return jax.lax.DotAlgorithmPreset.BF16_BF16_F32 if dtype == jnp.bfloat16 else None


def _linear(n_in, n_out, cfg, *, std, dtype, param_dtype, rngs):
    return nnx.Linear(n_in, n_out, use_bias=cfg.bias, dtype=dtype, param_dtype=param_dtype,
                      kernel_init=nnx.initializers.normal(std),
                      bias_init=nnx.initializers.zeros_init(), rngs=rngs)


def _layer_norm(cfg, *, param_dtype, rngs):
    # fp32 under autocast too: on CUDA LayerNorm is on autocast's fp32 list; on a CPU its
    # input, the fp32 residual stream, keeps it in fp32.
    return nnx.LayerNorm(cfg.n_embd, epsilon=LAYER_NORM_EPS, use_bias=cfg.bias,
                         use_fast_variance=False, dtype=jnp.float32, param_dtype=param_dtype,
                         rngs=rngs)


def causal_attention(q, k, v, scale):
    """Written-out causal attention on (batch, time, heads, head_dim): scores, a mask that
    hides the future, softmax in fp32, weighted values (SDPA's math)."""
    time = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32,
                        precision=bf16_dot_algorithm(q.dtype)) * scale
    future = jnp.triu(jnp.ones((time, time), dtype=bool), k=1)
    weights = jax.nn.softmax(jnp.where(future, -jnp.inf, scores), axis=-1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v, preferred_element_type=jnp.float32,
                      precision=bf16_dot_algorithm(q.dtype)).astype(q.dtype)


def _dense(layer, x, flatten):
    return dense(layer, x, precision=bf16_dot_algorithm(layer.dtype), flatten=flatten)


class CausalSelfAttention(nnx.Module):
    def __init__(self, cfg: GPTConfig, *, attention, dtype, param_dtype, flatten,
                 rngs: nnx.Rngs):
        kwargs = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.qkv = _linear(cfg.n_embd, 3 * cfg.n_embd, cfg, std=INIT_STD, **kwargs)
        self.proj = _linear(cfg.n_embd, cfg.n_embd, cfg, std=_residual_std(cfg), **kwargs)
        self.n_head, self.attention, self.flatten = cfg.n_head, attention, flatten

    def __call__(self, x):
        batch, time, width = x.shape
        split = (batch, time, self.n_head, width // self.n_head)
        q, k, v = (t.reshape(split)
                   for t in jnp.split(_dense(self.qkv, x, self.flatten), 3, axis=-1))
        scale = 1.0 / math.sqrt(split[-1])
        if self.attention == "eager":
            y = causal_attention(q, k, v, scale)
        else:
            y = jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=True)
        return _dense(self.proj, y.reshape(batch, time, width), self.flatten)


class MLP(nnx.Module):
    def __init__(self, cfg: GPTConfig, *, dtype, param_dtype, flatten, rngs: nnx.Rngs):
        kwargs = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.up = _linear(cfg.n_embd, 4 * cfg.n_embd, cfg, std=INIT_STD, **kwargs)
        self.proj = _linear(4 * cfg.n_embd, cfg.n_embd, cfg, std=_residual_std(cfg), **kwargs)
        self.flatten = flatten

    def __call__(self, x):
        hidden = jax.nn.gelu(_dense(self.up, x, self.flatten), approximate=False)
        return _dense(self.proj, hidden, self.flatten)


class Block(nnx.Module):
    """Pre-LayerNorm: x + attention(ln1(x)), then x + mlp(ln2(x)); the stream stays fp32."""

    def __init__(self, cfg: GPTConfig, *, attention, dtype, param_dtype, flatten,
                 rngs: nnx.Rngs):
        self.ln1 = _layer_norm(cfg, param_dtype=param_dtype, rngs=rngs)
        self.attn = CausalSelfAttention(cfg, attention=attention, dtype=dtype,
                                        param_dtype=param_dtype, flatten=flatten, rngs=rngs)
        self.ln2 = _layer_norm(cfg, param_dtype=param_dtype, rngs=rngs)
        self.mlp = MLP(cfg, dtype=dtype, param_dtype=param_dtype, flatten=flatten, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x)).astype(jnp.float32)
        return x + self.mlp(self.ln2(x)).astype(jnp.float32)


class GPT(nnx.Module):
    """Token ids in, next-token loss out; the output head is the token embedding (tied).

    cfg: the `deepdive.models.gpt.GPTConfig` of the PyTorch model it mirrors.
    attention: "eager" (the math written out) or "dot_product_attention" (JAX's API, called
        without `implementation=`: XLA's implementation on every device, no fused kernel).
    dtype: the matmuls' and attention's dtype (``jnp.bfloat16`` for autocast's policy).
    param_dtype: the parameters' dtype (fp32 master weights by default).
    flatten_tokens: the linear layers multiply (tokens, features) matrices, as PyTorch's
        `F.linear` does, rather than Flax's dot over (batch, time, features).
    """

    def __init__(self, cfg: GPTConfig, *, attention: str = "eager", dtype=jnp.float32,
                 param_dtype=jnp.float32, flatten_tokens: bool = False, rngs: nnx.Rngs):
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"GPT needs a deepdive.models.gpt.GPTConfig, got {type(cfg).__name__}")
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
        init = nnx.initializers.normal(INIT_STD)
        self.cfg, self.dtype = cfg, dtype
        self.tok = nnx.Embed(cfg.vocab_size, cfg.n_embd, param_dtype=param_dtype,
                             embedding_init=init, rngs=rngs)
        self.pos = nnx.Embed(cfg.block_size, cfg.n_embd, param_dtype=param_dtype,
                             embedding_init=init, rngs=rngs)
        self.blocks = nnx.List([Block(cfg, attention=attention, dtype=dtype,
                                      param_dtype=param_dtype, flatten=flatten_tokens,
                                      rngs=rngs)
                                for _ in range(cfg.n_layer)])
        self.ln_f = _layer_norm(cfg, param_dtype=param_dtype, rngs=rngs)

    def logits(self, idx):
        """Next-token logits (batch, time, vocab) in the matmul dtype, for token ids
        (batch, time); the head is the token embedding, transposed."""
        if idx.ndim != 2:
            raise ValueError(f"idx must be (batch, time) token ids, got shape {tuple(idx.shape)}")
        if idx.shape[1] > self.cfg.block_size:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds block_size "
                             f"{self.cfg.block_size}")
        x = (self.tok.embedding[...][idx] + self.pos.embedding[...][:idx.shape[1]]).astype(
            jnp.float32)  # the residual stream, fp32
        for block in self.blocks:
            x = block(x)
        head = self.tok.embedding[...].astype(self.dtype)
        return jnp.einsum("btc,vc->btv", self.ln_f(x).astype(self.dtype), head,
                          preferred_element_type=jnp.float32,
                          precision=bf16_dot_algorithm(self.dtype)).astype(self.dtype)

    def __call__(self, idx, targets):
        """Mean cross-entropy of the next-token predictions, computed in fp32."""
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, "
                             f"got {tuple(targets.shape)}")
        return cross_entropy(self.logits(idx), targets)


def cross_entropy(logits, targets):
    """Mean next-token cross-entropy in fp32, as `F.cross_entropy` under autocast."""
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), targets).mean()


def nanogpt_adamw(lr: float, weight_decay: float = 0.1, b1: float = 0.9, b2: float = 0.95,
                  eps: float = 1e-8, clip: float | None = GRAD_CLIP):
    """The twin of `deepdive.models.gpt.adamw` after nanoGPT's gradient clipping: optax's
    `clip_by_global_norm(clip)` then `adamw`, weight decay on parameters of two or more
    dimensions only (matrices and embeddings), as nanoGPT's `configure_optimizers`.
    PyTorch's `clip_grad_norm_` divides by the norm plus 1e-6, optax by the norm alone:
    a relative difference below 1e-6 whenever clipping acts (norm above `clip`)."""
    import optax

    def matrices(params):
        return jax.tree.map(lambda p: p.ndim >= 2, params)

    adamw = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=matrices)
    return adamw if clip is None else optax.chain(optax.clip_by_global_norm(clip), adamw)


class ClippedAdamW:
    """PyTorch's side of `nanogpt_adamw`: `clip_grad_norm_`, then `deepdive.models.gpt.adamw`'s
    step, as nanoGPT's training loop runs them. `step()` acts on the gradients present."""

    def __init__(self, params, lr: float, weight_decay: float = 0.1, b1: float = 0.9,
                 b2: float = 0.95, eps: float = 1e-8, clip: float | None = GRAD_CLIP,
                 fused: bool | None = None):
        from deepdive.models.gpt import adamw

        self.params = list(params)
        self.clip = clip
        self.optimizer = adamw(self.params, lr, weight_decay=weight_decay, betas=(b1, b2),
                               eps=eps, fused=fused)

    def step(self) -> None:
        import torch

        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def state(self):
        return self.optimizer.state


def nnx_path(torch_name: str) -> tuple[tuple[str | int, ...], str]:
    """Where a PyTorch GPT parameter lives in the twin, and its layout: "linear"
    ((out, in) -> (in, out)) or "same". Raises KeyError, naming it, for any other name."""
    parts = tuple(int(p) if p.isdigit() else p for p in torch_name.split("."))
    *module, leaf = parts
    owner = str(module[-1]) if module else ""
    if tuple(module) in (("tok",), ("pos",)) and leaf == "weight":
        return (*module, "embedding"), "same"
    if owner in ("ln1", "ln2", "ln_f") and leaf in ("weight", "bias"):
        return (*module, "scale" if leaf == "weight" else "bias"), "same"
    if owner in ("qkv", "proj", "up") and leaf == "weight":
        return (*module, "kernel"), "linear"
    if owner in ("qkv", "proj", "up") and leaf == "bias":
        return parts, "same"
    reason = (" (an untied output head: the twin's head is the token embedding)"
              if torch_name == "head.weight" else "")
    raise KeyError(f"PyTorch parameter {torch_name!r} has no place in the NNX twin{reason}")


def torch_arrays_as_nnx(named_arrays) -> dict[tuple, np.ndarray]:
    """PyTorch-named arrays (parameters or their gradients) keyed by NNX path, re-laid."""
    out = {}
    for name, array in named_arrays:
        path, layout = nnx_path(name)
        array = np.asarray(array)
        out[path] = array.T if layout == "linear" else array
    return out


def port_torch_weights(torch_model, model: GPT) -> GPT:
    """Copy every parameter of a PyTorch `deepdive.models.gpt.GPT` into `model`, in place,
    and return `model`.

    Refuses, naming it: a model of another configuration (a head count changes no name or
    shape), a parameter that is not fp32, a PyTorch parameter with no place in the twin (an
    untied head among them), a twin parameter with no PyTorch source, or a shape that
    disagrees.
    """
    if getattr(torch_model, "cfg", None) != model.cfg:
        raise ValueError(f"the PyTorch model's config {getattr(torch_model, 'cfg', None)} is "
                         f"not the twin's {model.cfg}")
    not_fp32 = [n for n, p in torch_model.named_parameters() if str(p.dtype) != "torch.float32"]
    if not_fp32:
        raise ValueError(f"PyTorch parameters must be fp32 (master weights), got {not_fp32}")
    arrays = torch_arrays_as_nnx((name, p.detach().cpu().numpy())
                                 for name, p in torch_model.named_parameters())
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    missing = sorted(set(flat) - set(arrays), key=str)
    if missing:
        raise KeyError(f"NNX parameters with no PyTorch source: "
                       f"{['.'.join(map(str, p)) for p in missing]}")
    for path, array in arrays.items():
        if path not in flat:
            raise KeyError(f"PyTorch parameter mapped to {'.'.join(map(str, path))}, which "
                           "the NNX twin lacks (are both built from the same GPTConfig?)")
        variable = flat[path]
        if variable.shape != array.shape:
            raise ValueError(f"{'.'.join(map(str, path))}: NNX shape {variable.shape} != "
                             f"ported {array.shape}")
        variable.set_value(jnp.asarray(array, dtype=variable.dtype))
    nnx.update(model, nnx.from_flat_state(flat))
    return model


def _residual_std(cfg: GPTConfig) -> float:
    return INIT_STD / math.sqrt(2 * cfg.n_layer)


# The chapter's training settings: nanoGPT's train.py optimizer (betas 0.9 and 0.95,
# weight decay 0.1 on matrices, gradients clipped at 1.0) at a constant learning rate.
TRAINING = dict(lr=1e-3, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)


def optimizer_pair(hyper: dict):
    """nanoGPT's clipped AdamW in each framework, for `deepdive.models.parity.optimizer_parity`."""
    from deepdive.models.parity import OptimizerPair

    return OptimizerPair("nanoGPT AdamW (decay on matrices, clipped at 1.0)",
                         lambda params: ClippedAdamW(params, **hyper), nanogpt_adamw(**hyper))


def first_moment(opt_state):
    """Adam's first moment (mu) inside `nanogpt_adamw`'s state (of `nnx.Optimizer`): after
    one step it is exactly (1 - b1) times the clipped gradient."""
    import optax

    return optax.tree_utils.tree_get(opt_state, "mu")


@functools.cache
def family():
    """The GPT for `deepdive.models.parity.prove`: token ids in both frameworks, nanoGPT's AdamW."""
    from deepdive.models.parity import Family

    return Family("GPT", _torch_forward, _torch_gradients, _jax_loss, np.asarray,
                  _torch_optimizer, _optax)


def _torch_forward(model, idx, targets):
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    idx, targets = (torch.as_tensor(a, device=device) for a in (idx, targets))
    logits = model.logits(idx)
    return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _torch_gradients(model):
    # Copies: clip_grad_norm_ scales the gradients in place, and .numpy() shares memory.
    return torch_arrays_as_nnx((name, p.grad.detach().cpu().numpy().copy())
                               for name, p in model.named_parameters())


def _jax_loss(model, idx, targets):
    logits = model.logits(idx)
    return cross_entropy(logits, targets), logits


def _torch_optimizer(model, hyper):
    return ClippedAdamW(model.parameters(), **hyper)


def _optax(hyper):
    return nanogpt_adamw(**hyper)
