"""A compact GPT in the style of nanoGPT, for chapter 4's GPT training benchmark.

The same architecture as nanoGPT's `model.py`: pre-LayerNorm blocks of
causal self-attention (`F.scaled_dot_product_attention`) and a GELU MLP, token and
position embeddings, a final LayerNorm, and an output head that shares the token
embedding's weight (weight tying). Initialisation is GPT-2's, as nanoGPT does it: weights
N(0, 0.02), zero biases, and the residual projections scaled down by sqrt(2 * n_layer).
Unlike nanoGPT there is no dropout (its benchmark runs with dropout 0 too) and
`forward(idx, targets)` returns only the mean cross-entropy loss; `logits(idx)` gives the
logits. `params_for_flops` counts the parameters that nanoGPT's MFU formula charges,
`matmul_params` those that enter a matmul (what PyTorch's FLOP counter charges), and
`adamw` builds nanoGPT's optimizer (weight decay on matrices only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["GPT", "INIT_STD", "MLP", "Block", "CausalSelfAttention", "GPTConfig", "adamw"]

INIT_STD = 0.02  # GPT-2's initialisation


@dataclass(frozen=True)
class GPTConfig:
    """The shape of a GPT. `bias=False` is nanoGPT's train.py default (no biases in the
    linear layers and LayerNorms); the counts nanoGPT prints (10.65M parameters for
    Shakespeare-char, 123.59M for GPT-2 124M, position embeddings excluded) assume it."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    bias: bool = False

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head "
                             f"({self.n_head}): each head gets n_embd // n_head channels")
        if not isinstance(self.bias, bool):
            raise ValueError(f"bias must be True or False, got {self.bias!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees only itself and the past."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.n_head = cfg.n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """Two linear layers, four times wider inside, with GELU between them."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.up = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.up(x)))


class Block(nn.Module):
    """One transformer block, pre-LayerNorm: x + attention(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token ids in, next-token loss out; the output head is the token embedding (tied)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"GPT needs a GPTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        self.apply(_init_weights)
        residual_std = INIT_STD / math.sqrt(2 * cfg.n_layer)
        for block in self.blocks:  # the projections that write into the residual stream
            nn.init.normal_(block.attn.proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=residual_std)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits, shape (batch, time, vocab_size), for token ids (batch, time)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, time) token ids, got shape {tuple(idx.shape)}")
        if idx.shape[1] > self.cfg.block_size:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds block_size "
                             f"{self.cfg.block_size}")
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the next-token predictions against `targets`."""
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, "
                             f"got {tuple(targets.shape)}")
        return F.cross_entropy(self.logits(idx).flatten(0, 1), targets.flatten())

    def num_parameters(self) -> int:
        """Distinct parameters (the tied head and embedding count once)."""
        return sum(p.numel() for p in self.parameters())

    def params_for_flops(self) -> int:
        """N in nanoGPT's MFU formula: every parameter but the position embeddings.

        nanoGPT's `get_num_params(non_embedding=True)` subtracts the position embeddings,
        a lookup that does no multiply-adds; the token embedding stays, because through
        weight tying it is also the output head's matmul.
        """
        return self.num_parameters() - self.pos.weight.numel()

    def matmul_params(self) -> int:
        """The parameters that enter a matmul: the linear layers' weights, the tied head
        counted once. Not the position embeddings (a lookup), nor LayerNorm gains and
        biases (elementwise). A training step's matmuls cost 6 FLOPs per such parameter
        and token (2 in the forward, 4 in the backward's two matmuls), which is what
        PyTorch's `FlopCounterMode` counts for them; chapter 4 compares it with nanoGPT's
        6N + 12LHQT formula.
        """
        weights = {id(m.weight): m.weight.numel() for m in self.modules()
                   if isinstance(m, nn.Linear)}
        return sum(weights.values())


def adamw(parameters, lr: float, weight_decay: float = 0.1,
          betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
          fused: bool | None = None):
    """AdamW as nanoGPT's `configure_optimizers` builds it: weight decay on every parameter
    with two or more dimensions (matmul weights, embeddings), none on biases and LayerNorm
    gains. `parameters` is a model or its parameters. nanoGPT passes ``fused=True`` on
    CUDA; ``None`` leaves PyTorch's default."""
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if isinstance(parameters, nn.Module):
        parameters = parameters.parameters()
    params = [p for p in parameters if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
