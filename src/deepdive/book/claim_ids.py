"""Every claim id the book's pages can save, as fully anchored regular expressions.

A committed bundle (`deepdive.book.bundles`) is checked against this registry when the book
builds, so a bundle cannot carry a claim the book has never made, and the ledger page can
set a claim of one build beside the same claim of another. Many ids are built from a
size or a configuration (`best_jax_vs_torch_b32`, `dp_x4_vs_one`, `char_fp32_jax_vs_torch`):
each pattern names every value the page's code can put there, GPU-only branches included.
Ids an older build saved that moved since (`deepdive.chapters.claim_map.MOVED`) are listed
too. `tests/test_ledger.py` checks the registry against the ids the pages and helpers
spell out, and every id of a built book's claims.csv against the registry.
"""

from __future__ import annotations

import re

__all__ = ["CLAIM_IDS", "known", "unknown"]

_GPT = "(?:char|vocab)"  # the GPT chapter's two models (deepdive.book.plans)
_PRECISION = "(?:fp32|bf16)"
_N = r"[0-9]+"  # a batch size or a device count: it changes with the scale

CLAIM_IDS: tuple[str, ...] = (
    # 01_vmap: the sweep at the largest batch, per workload (the page's sweep_claim calls)
    r"^(?:dot|attention)_(?:torch_vmap_vs_loop|jax_vmap_vs_loop|jit_vmap_vs_jit_loop"
    r"|vmap_vs_batched|compile_vs_batched|jit_vs_compile|jit_vs_vmap|best_jax_vs_torch)$",
    # ... and at every batch size
    rf"^(?:dot|attention)_(?:compile_vs_vmap|fori_vs_vmap)_{_N}$",
    rf"^attention_at_set_vs_loop_{_N}$",
    # 01_vmap: per-example gradients (the page's GRAD_CLAIMS)
    r"^grads_(?:torch_vmap_vs_loop|jax_vmap_vs_loop|jit_vs_jit_loop|compile_vs_vmap"
    r"|jax_vs_torch_eager|jit_vs_compile|best_jax_vs_torch)$",
    # 02_jit_xla: fusion and copies, under the kept allocator regime and glibc's defaults
    r"^(?:defaults_)?(?:fusion_jit_k1|fusion_jit|fusion_compile|fusion_compile_vs_jit"
    r"|fusion_eager_torch_vs_jax|fusion_eager_torch_vs_numpy|jit_one_vs_chain"
    r"|compile_one_vs_chain|copy_fresh_vs_owned|new_function_jit|fusion_best_jax_vs_torch)$",
    # 02_jit_xla: dispatch of a tiny function, a new function, a stream of shapes
    r"^(?:tiny_jit|tiny_compile|tiny_eager_torch_vs_jax|tiny_compile_vs_jit"
    r"|tiny_best_jax_vs_torch"
    r"|new_function_compile|stream_padding)$",
    # 03_torch_compile: the tiny function and the MLP block (autotune and CUDA graphs: GPU)
    r"^tiny_(?:dynamo_eager|aot_eager|inductor|inductor_vs_eager_backend)$",
    r"^mlp_(?:inductor|dynamo_eager|autotune|autotune_graphs|reduce_overhead)$",
    # 04_gpt_training: PyTorch against JAX, per model and precision (bf16: GPU)
    rf"^{_GPT}_{_PRECISION}_(?:jax_vs_torch|jax_vs_eager)$",
    # 04_gpt_training: the slides' benchmark, each compiled mode against eager (CUDA graphs
    # and reduce-overhead: GPU); chapter 3 saved the same ids before they moved
    rf"^{_GPT}_(?:aot_eager|inductor|cudagraphs|inductor_reduce_overhead)_{_PRECISION}$",
    rf"^{_GPT}_(?:fp32_flat_vs_3d|bf16_eager|jax_bf16_vs_fp32)$",
    # 04_gpt_training: the step taken apart
    # 04_gpt_training: PyTorch's AdamW implementations on one GPT's parameters
    r"^adamw_(?:foreach|fused)_vs_loop$",
    rf"^{_GPT}_fp32_(?:forward_jax_vs_torch|backward_jax_vs_torch|backward_flat_vs_3d"
    r"|one_vs_two_programs|backward_flat_jax_vs_torch)$",
    # 04_gpt_training, older builds: reduce-overhead against eager, now the benchmark's id
    rf"^{_GPT}_{_PRECISION}_reduce_overhead_vs_eager$",
    # 05_vit_training: per batch size
    rf"^(?:best_jax_vs_torch|fused_jax_vs_torch|split_vs_nnx)_b{_N}$",
    # 05_vit_training: pairings, the step's parts, the seed's setup and its loader
    r"^(?:math_jax_vs_torch|seed_pair_jax_vs_torch|compile_vs_eager_torch"
    r"|sdpa_vs_eager_attn_torch|dpa_vs_eager_attn_jax|seed_jax_vs_torch|seed_compile_vs_eager"
    r"|loader_torch|loader_jax)$",
    # 05_vit_training: bf16 against fp32 per mode (the page's BF16_IDS; compiled: GPU)
    r"^bf16_(?:torch_eager_SDPA|torch_compile_SDPA|jax_jit_split_merge"
    r"|jax_jit_split_merge_dot_product_attention|fused_jax_vs_torch|best_jax_vs_torch)$",
    # 05_vit_xla: each PyTorch/XLA route against eager and against JAX, in the worker
    r"^(?:xla_lazy|xla_compile|torchax)_vs_(?:eager|jax)$",
    r"^(?:xla_compile_vs_lazy|jax_vs_torch_eager|jax_across_processes)$",
    # 05_vit_xla: the same eager step on the worker's torch and the page's; older builds
    # named it by the two versions (torch29_vs_torch213)
    r"^(?:xla_torch_vs_book_torch|torch[0-9]+_vs_torch[0-9]+)$",
    # releases: the reduced set every jax and torch release runs (deepdive.releases.workloads)
    r"^release_(?:dot_jit_vmap_vs_torch_vmap|dot_fori_vs_vmap|attention_jit_vmap_vs_torch_vmap"
    r"|chain_jit_vs_eager|chain_compile_vs_eager|chain_jit_vs_compile|gpt_jax_vs_torch_eager"
    r"|gpt_jax_vs_compile|fori_write_40k_vs_4x10k)$",
    # 06_distributed: per device count (real GPUs only)
    rf"^(?:dp_x{_N}_vs_one|fsdp_x{_N}_vs_dp|dp_shard_map_x{_N}_vs_dp"
    rf"|fsdp_constraints_x{_N}_vs_shard_map)$",
)

_COMPILED = tuple(re.compile(pattern) for pattern in CLAIM_IDS)


def known(claim_id: str, patterns=CLAIM_IDS) -> bool:
    """Whether some pattern of the registry (or of `patterns`) matches `claim_id`."""
    compiled = _COMPILED if patterns is CLAIM_IDS else tuple(re.compile(p) for p in patterns)
    return any(p.fullmatch(str(claim_id)) for p in compiled)


def unknown(claim_ids, patterns=CLAIM_IDS) -> list[str]:
    """The ids of `claim_ids` that no pattern matches, in order, each once."""
    return [c for c in dict.fromkeys(map(str, claim_ids)) if not known(c, patterns)]
