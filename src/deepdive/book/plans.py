"""Each chapter's sizes at each scale, and the plan built from them (`deepdive.book.plan`).

The sizes live here, not in the notebooks, so that a test can build every chapter's plan
at every scale for a T4, an L4, an A100 and an H100 on a machine without any GPU, and
check that it fits. A chapter reads its sizes with ``SIZES = plans.sizes(chapter)`` and
prints ``plans.plan(chapter, SIZES, target)`` before it measures anything. The works
model each chapter's timed sweeps; `OTHER_S` is assumed for the rest of its page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepdive.book.plan import (
    BUDGET_S,
    CELL_TIMEOUT_S,
    PROCESS_START_S,
    Call,
    Plan,
    Target,
    Work,
    alike,
    compile_seconds,
)
from deepdive.core import env, flops

__all__ = [
    "BUDGET_S_OF", "CHAPTERS", "budget_s", "DistributedSizes", "F32", "GPTSizes", "GPTWorkload",
    "GUARDED_SCALES", "HANG_FACTOR", "JitSizes", "OTHER_S",
    "READER_GPUS", "SIZES", "ViTSizes", "VmapSizes", "gpt_activation_bytes", "gpt_step_flops",
    "gpt_twin_modes", "hang_limit_s", "main", "plan", "sizes", "vit_activation_bytes", "vit_modes",
    "vit_step_flops",
]

F32 = 4  # bytes


@dataclass(frozen=True)
class VmapSizes:
    """Chapter 1: dot products and attention over a batch sweep, per-example gradients,
    and the run lengths of the unsynced-timing experiment."""

    batch_sizes: tuple
    dot_dim: int
    seq_len: int
    head_dim: int
    grad_batch: int
    grad_features: int
    grad_hidden: int
    run_lengths: tuple


@dataclass(frozen=True)
class JitSizes:
    """Chapter 2: the fusion chains, tiny-array dispatch and the shape stream."""

    fusion_elements: int
    chain_lengths: tuple
    min_calls: int  # timed calls per tiny-array variant, at least (the seed's 1000)
    stream_length: int
    stream_max: int
    dispatch_k: int = 16


@dataclass(frozen=True)
class GPTWorkload:
    """Chapter 4: one GPT trained per mode and precision (nanoGPT's GPTConfig fields)."""

    key: str  # short id, used in claim ids
    name: str  # the size recorded in the results
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    batch_size: int

    @property
    def config(self) -> tuple:
        """GPTConfig's positional arguments: (n_layer, n_head, n_embd, block_size, vocab)."""
        return (self.n_layer, self.n_head, self.n_embd, self.block_size, self.vocab_size)

    @property
    def parameters(self) -> int:
        """Parameters (tied embedding counted once), from the shapes alone: no biases, as
        `deepdive.models.gpt` builds it (a test checks the count against the model)."""
        d, layers = self.n_embd, self.n_layer
        per_layer = 12 * d * d + 2 * d  # attention and MLP weights, two LayerNorm gains
        return self.vocab_size * d + self.block_size * d + layers * per_layer + d


@dataclass(frozen=True)
class GPTSizes:
    """Chapter 4: the two GPTs of the benchmark and the JAX twin."""

    workloads: tuple


@dataclass(frozen=True)
class ViTSizes:
    """Chapter 5: the ViT's shape, the batch sweep and the timed steps per configuration."""

    image_size: int
    patch_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    num_labels: int
    batch_sizes: tuple
    min_steps: int
    ref_batch: int = 32  # the seed's batch size

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2 + 1

    @property
    def config(self) -> dict:
        """transformers.ViTConfig's keyword arguments."""
        return {k: getattr(self, k) for k in (
            "image_size", "patch_size", "hidden_size", "num_hidden_layers",
            "num_attention_heads", "intermediate_size", "num_labels")}

    @property
    def parameters(self) -> int:
        d, layers = self.hidden_size, self.num_hidden_layers
        patch = 3 * self.patch_size ** 2 * d + d
        per_layer = 4 * d * d + 4 * d + 2 * d * self.intermediate_size + self.intermediate_size \
            + d + 4 * d
        return patch + (self.tokens + 1) * d + layers * per_layer + 2 * d \
            + d * self.num_labels + self.num_labels


@dataclass(frozen=True)
class DistributedSizes:
    """Chapter 6: the MLP, its global batch and the device counts."""

    width: int
    batch: int
    worlds: tuple
    jax_counts: tuple = (2, 4, 8)  # JAX's device counts (eight simulated on one CPU)
    depth: int = 3
    n_in: int = 64
    n_out: int = 10


# Chapter 4's two GPTs per scale (the slides' two at full), trained by both frameworks.
_GPTS = {
    "small": GPTSizes((GPTWorkload("char", "char-small", 2, 4, 128, 64, 65, 16),
                           GPTWorkload("vocab", "gpt-v1024-0.54M", 2, 4, 128, 128, 1024,
                                       8))),
    "medium": GPTSizes((GPTWorkload("char", "shakespeare-char, 2 layers", 2, 6, 384,
                                        256, 65, 32),
                            GPTWorkload("vocab", "gpt-v50304, 2 layers", 2, 6, 384, 256,
                                        50304, 8))),
    "full": GPTSizes((GPTWorkload("char", "shakespeare-char 10.65M", 6, 6, 384, 256,
                                      65, 64),
                          GPTWorkload("vocab", "GPT-2 124M", 12, 12, 768, 1024, 50304,
                                      12))),
}

SIZES = {
    "01_vmap": {
        "small": VmapSizes((16, 64, 256), 64, 64, 32, 32, 32, 64, (10, 30, 100, 300)),
        "medium": VmapSizes((16, 64, 256, 1024), 512, 128, 64, 256, 128, 256, (10, 100, 1000)),
        "full": VmapSizes((16, 64, 256, 1024, 4096), 1024, 128, 64, 512, 256, 512,
                          (10, 100, 1000)),
    },
    "02_jit_xla": {
        "small": JitSizes(2**23, (1, 2, 4, 8), 1, 6, 256),
        "medium": JitSizes(2**25, (1, 2, 4, 8, 16), 100, 50, 1024),
        "full": JitSizes(2**27, (1, 2, 4, 8, 16, 32), 1000, 200, 4096),
    },
    # Chapter 3 measures torch.compile's internals on fixed tiny shapes: no sizes per scale.
    "03_torch_compile": dict.fromkeys(("small", "medium", "full")),
    "05_vit_training": {
        "small": ViTSizes(32, 4, 64, 2, 4, 256, 10, (8, 32), 15),
        "medium": ViTSizes(224, 16, 384, 6, 6, 1536, 1000, (16, 32), 15),
        "full": ViTSizes(224, 16, 768, 12, 12, 3072, 1000, (32, 64, 128, 256), 30),
    },
    "04_gpt_training": _GPTS,
    # PyTorch/XLA and torchax on chapter 5's small ViT: torch_xla 2.9 has no GPU build, so
    # the page runs on the CPU at every scale (deepdive.models.xla_route.SCALE).
    "05_vit_xla": {scale: ViTSizes(32, 4, 64, 2, 4, 256, 10, (32,), 15)
                   for scale in ("small", "medium", "full")},
    "06_distributed": {
        "small": DistributedSizes(256, 64, (2, 4)),
        "medium": DistributedSizes(512, 256, (2, 4)),
        "full": DistributedSizes(1024, 512, (2, 4, 8)),
    },
}

# Seconds assumed for the rest of each page (imports, correctness checks, the tie band's
# A/A timings, profiles, figures): on the 2-core CPU build, each page's execution time at
# commit 4a9d9a9 less what its works estimate; on a GPU, the same cells at larger sizes.
OTHER_S = {
    "01_vmap": {"small": 50.0, "medium": 90.0, "full": 120.0},
    "02_jit_xla": {"small": 30.0, "medium": 90.0, "full": 180.0},
    # The internals only (the GPT benchmark moved to chapter 4): the tie band's table,
    # Dynamo's and AOTAutograd's outputs, the profiles of a compiled call.
    "03_torch_compile": {"small": 8.0, "medium": 90.0, "full": 150.0},
    "05_vit_training": {"small": 60.0, "medium": 90.0, "full": 180.0},
    # Imports, the parity proofs (two GPTs, 20 steps each side), the first-step references,
    # the memory readings (two steps per configuration), FlopCounterMode and autocast's
    # dtypes, figures: the GPT page's build time at commit b58bc38 (134-177 s) less its
    # measured compiles and timings.
    "04_gpt_training": {"small": 90.0, "medium": 120.0, "full": 240.0},
    # Two worker starts, the parity pass (four routes compile) and the tie band.
    "05_vit_xla": {"small": 45.0, "medium": 45.0, "full": 45.0},
    "06_distributed": {"small": 20.0, "medium": 60.0, "full": 90.0},
}
# A chapter may take longer than its scale's budget (`plan.BUDGET_S`) only where it says
# why. The GPT chapter holds two benchmarks of the same model, PyTorch against JAX and the
# PyTorch 2.0 slides' eager/aot_eager/Inductor in fp32 and bf16, each configuration timed
# once: eleven configurations per GPT, nine of them compiled, do not fit three minutes on
# two cores. It replaced two pages of three minutes each. On torch 2.15 it ran 230-256 s on
# this book's 2-core machine with Inductor's cache warm, and 304 s on the CI machine
# (2026-11-28), whose clean clone compiles every kernel cold: six minutes leaves that
# machine's run-to-run spread room. Four cold Inductor compiles (two GPTs, fp32 and bf16)
# are most of it; two where the CPU emulates bf16, which builds no compiled bf16 mode.
BUDGET_S_OF = {("04_gpt_training", "small"): 360.0}
CHAPTERS = tuple(SIZES)


def sizes(chapter: str, scale: str | None = None):
    """A chapter's sizes at `scale` (default: this build's, `env.scale()`)."""
    if chapter not in SIZES:
        raise KeyError(f"chapter {chapter!r} has no sizes; known: {', '.join(SIZES)}")
    scale = scale or env.scale()
    if scale not in env.SCALES:
        raise ValueError(f"scale {scale!r} is not one of {', '.join(env.SCALES)}")
    return SIZES[chapter][scale]


# A cell still running at twice its whole chapter's budget is hung, not slow: the build ends
# its kernel and logs every thread's stack (`deepdive.core.watchdog`) rather than wait out
# the hour-long cell timeout, which at small scale would take most of CI's time. Small only:
# the medium and full plans rest on GPU figures no build has checked yet, so there only the
# cell timeout bounds a cell, and a reader's slow GPU rebuild is never cut short.
HANG_FACTOR = 2.0
GUARDED_SCALES = ("small",)


def budget_s(chapter: str, scale: str, slowness: float = 1.0) -> float | None:
    """What the chapter may take at `scale` (None: unbounded, at full) on a machine
    `slowness` times slower than the reference one (`plan.slowness`)."""
    sizes(chapter, scale)  # refuses an unknown chapter or scale, naming the known ones
    if not (isinstance(slowness, int | float) and slowness >= 1):
        raise ValueError(f"slowness is a factor of at least 1, got {slowness!r}")
    budget = BUDGET_S_OF.get((chapter, scale), BUDGET_S[scale])
    return None if budget is None else budget * slowness


def hang_limit_s(chapter: str, scale: str | None = None,
                 slowness: float | None = None) -> float | None:
    """Seconds after which one of the chapter's cells counts as hung at `scale`: twice the
    chapter's budget at small, stretched by this CPU's slowness (by default the build's
    calibration's, `calibration.slowness`); None (the cell timeout alone) at medium and full."""
    scale = scale or env.scale()
    sizes(chapter, scale)
    if scale not in GUARDED_SCALES:
        return None
    if slowness is None:
        from deepdive.book import calibration

        slowness = calibration.slowness()
    return min(HANG_FACTOR * budget_s(chapter, scale, slowness), CELL_TIMEOUT_S)


def plan(chapter: str, scale: str, target: Target, host: Target | None = None) -> Plan:
    """The chapter's plan at `scale` on `target` (`host`: the CPU beside a GPU)."""
    works = _BUILDERS[chapter](sizes(chapter, scale), target)
    return Plan(chapter, scale, target, tuple(works), OTHER_S[chapter][scale], host,
                BUDGET_S_OF.get((chapter, scale)))


def _vmap_works(s: VmapSizes, target: Target) -> list[Work]:
    """Ten variants per workload and batch: three Python loops, the .at[].set loop (its
    output copied per example), six vectorised ones; one torch.compile and three jax.jit
    per point (Dynamo is reset at each)."""
    works = []
    per_example = {  # flops, bytes read and written, output floats, ops
        "dot": (2 * s.dot_dim, 2 * s.dot_dim * F32, 1, 2),
        "attention": (4 * s.seq_len**2 * s.head_dim + 5 * s.seq_len**2,
                      (4 * s.seq_len * s.head_dim + 3 * s.seq_len**2) * F32,
                      s.seq_len * s.head_dim, 6),
    }
    compiles = (compile_seconds("torch.compile", target.kind)
                + 3 * compile_seconds("jax.jit", target.kind))
    for workload, (work, traffic, out, ops) in per_example.items():
        for b in s.batch_sizes:
            loop = Call(b * work, b * traffic, b * (ops + 3))
            at_set = Call(b * work, b * traffic + b * b * out * F32 / 2, b * (ops + 4))
            vector = Call(b * work, b * traffic, ops)
            works.append(Work(f"{workload}, batch {b}", (*alike(3, loop), at_set,
                                                         *alike(6, vector)),
                              compile_s=compiles, memory=4 * b * traffic,
                              cell="batch sweep"))
    grad_flops = 6 * s.grad_features * s.grad_hidden
    grad_traffic = 3 * (s.grad_features * s.grad_hidden + s.grad_hidden) * F32
    loop = Call(s.grad_batch * grad_flops, s.grad_batch * grad_traffic, s.grad_batch * 12)
    vector = Call(s.grad_batch * grad_flops, s.grad_batch * grad_traffic, 12)
    works.append(Work(f"per-example gradients, batch {s.grad_batch}",
                      (*alike(3, loop), *alike(4, vector)),
                      compile_s=(compile_seconds("torch.compile", target.kind)
                                 + 2 * compile_seconds("jax.jit", target.kind)),
                      memory=4 * s.grad_batch * grad_traffic))
    b = s.batch_sizes[-1]
    attention = per_example["attention"]
    works.append(Work(f"unsynced timing, runs of {', '.join(map(str, s.run_lengths))}",
                      alike(2, Call(b * attention[0], b * attention[1], 6)),
                      min_calls=4 * sum(s.run_lengths), timed=False))
    works.append(Work("peak RSS, one fresh process per variant",
                      alike(4, Call(b * attention[0], b * attention[1], 6)), timed=False,
                      fixed_s=4 * PROCESS_START_S[target.kind]))
    return works


def _jit_works(s: JitSizes, target: Target) -> list[Work]:
    """Five ways to run each chain (NumPy on the host); at the longest, four more (second
    builds, one-op baselines: three torch.compile and three jax.jit) and the copies, in
    this process and again in a fresh one that keeps freed memory; tiny-array dispatch;
    new functions compiled per call; the shape stream compiled per length; eight fresh
    processes in all (the kept-memory run, compile stages, caches, XLA's flags)."""
    n, works = s.fusion_elements, []
    array = n * F32
    both_compilers = compile_seconds("torch.compile", target.kind) + \
        compile_seconds("jax.jit", target.kind)
    for k in s.chain_lengths:
        eager = Call(k * n, 2 * k * array, k)
        fused = Call(k * n, 2 * array, 1)
        host = Call(k * n, 2 * k * array, k, host=True)
        chain = (host, eager, eager, fused, fused)
        if k != s.chain_lengths[-1]:
            works.append(Work(f"chain of {k} ops on {array / 2**20:.0f} MiB", chain,
                              compile_s=both_compilers, memory=8 * array, cell="fusion sweep"))
            continue
        longest = chain + (fused, fused, Call(n, 2 * array), Call(n, 2 * array))
        copies = alike(2, Call(traffic=2 * array))
        works.append(Work(f"chain of {k} ops on {array / 2**20:.0f} MiB, with baselines and "
                          "copies, twice (this process and one that keeps freed memory)",
                          (longest + copies) * 2, compile_s=2 * 3 * both_compilers,
                          memory=12 * array))
    works.append(Work(f"tiny arrays, {s.dispatch_k} ops on 16 elements",
                      (*alike(2, Call(dispatches=s.dispatch_k)), *alike(2, Call())),
                      compile_s=both_compilers, min_calls=s.min_calls))
    longest = s.chain_lengths[-1]
    works.append(Work(f"a new function compiled per call (in ms per call), chain of {longest}",
                      (Call(longest * n, 2 * longest * array, longest),
                       Call(longest * n, 2 * array, overhead_s=0.2),
                       Call(longest * n, 2 * longest * array, longest),
                       Call(longest * n, 2 * array, overhead_s=2.0)),
                      memory=4 * array))
    distinct = min(s.stream_length, s.stream_max)
    buckets = math.ceil(math.log2(s.stream_max)) + 1
    works.append(Work(f"a stream of {s.stream_length} lengths up to {s.stream_max}",
                      (Call(dispatches=3 * s.stream_length, overhead_s=0.05 * distinct),
                       Call(dispatches=3 * s.stream_length, overhead_s=0.05 * buckets))))
    works.append(Work("fresh processes: compile stages, caches, XLA's flags", (Call(),),
                      timed=False, fixed_s=7 * PROCESS_START_S[target.kind]))
    return works


def gpt_step_flops(w: GPTWorkload) -> float:
    """One training step: `flops.gpt_flops_per_token` (nanoGPT's 6N + 12LHQT) per token."""
    return w.batch_size * w.block_size * flops.gpt_flops_per_token(
        w.parameters, w.n_layer, w.n_head, w.n_embd // w.n_head, w.block_size)


def gpt_activation_bytes(w: GPTWorkload, target: Target) -> float:
    """Activations of one fp32 step: ~68 bytes per token and width per layer (Korthikanti
    et al.'s 34 at 16 bits), the scores where no flash kernel runs (CPU), and the logits."""
    tokens = w.batch_size * w.block_size
    per_layer = 68 * tokens * w.n_embd
    if target.kind == "cpu":
        per_layer += 10 * w.n_head * w.block_size * tokens
    return w.n_layer * per_layer + 3 * tokens * w.vocab_size * F32


def gpt_twin_modes(target: Target) -> list[tuple[str, str]]:
    """Chapter `04_gpt_training`'s (mode, precision) configurations per GPT, each timed once
    for both of its readings (the slides' benchmark and PyTorch against JAX): PyTorch eager
    and an A/A copy of it, torch.compile with `aot_eager` and with Inductor (on a GPU also
    the `cudagraphs` backend and Inductor's reduce-overhead); jax.jit as Flax's dense writes
    it and, in fp32, with tokens flattened in its linear layers (both with
    dot_product_attention; the written-out attention is proven equal, not timed). A GPU
    where bf16 is emulated (a CPU without AVX512-BF16 or AMX, a GPU below compute capability
    8.0) no bf16 claim is decided, so bf16 is timed only as a reader who turns it on would
    meet it: each framework's plain step, PyTorch eager and jax.jit (not on such a GPU, which
    lacks JAX's BF16_BF16_F32 dot), labelled emulated; the compiled modes and the A/A copy,
    which serve verdicts only, are not built (on a CPU they cost two cold Inductor
    compiles)."""
    gpu = target.kind == "cuda"
    compiled = ["torch.compile aot_eager", "torch.compile"]
    if gpu:
        compiled += ["torch.compile cudagraphs", "torch.compile reduce-overhead"]
    fp32 = ["torch eager", "torch eager A/A copy", *compiled, "jax.jit",
            "jax.jit, tokens flattened"]
    inductor = ("torch.compile", "torch.compile reduce-overhead")
    if target.bf16_native:
        bf16 = ["torch eager", "torch eager A/A copy",
                *(m for m in compiled if target.inductor_bf16 or m not in inductor)]
    else:
        bf16 = ["torch eager"]
    if target.inductor_bf16:
        bf16.append("jax.jit")
    return [(m, "fp32") for m in fp32] + [(m, "bf16") for m in bf16]


def _gpt_compiler(mode: str) -> str | None:
    """The plan's compile-time entry for a GPT mode (None: eager)."""
    if mode.startswith("jax"):
        return "jax.jit"
    if mode.endswith(("aot_eager", "cudagraphs")):
        return "aot_eager"  # AOTAutograd's graphs, no kernels generated
    return "torch.compile" if mode.startswith("torch.compile") else None


def _gpt_twin_works(s: GPTSizes, target: Target) -> list[Work]:
    """Per GPT: every configuration of `gpt_twin_modes`, built from the proven weights,
    checked on its first step and timed in one compare, all alive together (weights and
    two moments, 12 bytes a parameter: PyTorch's steps free their gradients at the end, JAX
    donates its state; plus the running step's gradients and the reference weights).
    Both frameworks' allocators keep their peak, and on a GPU the CUDA-graph pool another,
    so activations count two or three times. Each GPT is freed before the next. Then the
    first GPT's fp32 step taken apart (six parts, five XLA programs), and on a CPU the
    anatomy: 12 rounds of an eager and an Inductor step per GPT, each once with a clock
    per part and once profiled."""
    works = []
    configs = gpt_twin_modes(target)
    for w in s.workloads:
        compile_s = sum(compile_seconds(kind, target.kind, w.n_layer)
                        for kind in map(_gpt_compiler, (m for m, _ in configs)) if kind)
        state = (12 * len(configs) + 8) * w.parameters
        copies = 3 if target.kind == "cuda" else 2
        step = Call(gpt_step_flops(w), dispatches=30 * w.n_layer)
        works.append(Work(f"GPT {w.name}, batch {w.batch_size}x{w.block_size}",
                          tuple(Call(step.flops, dispatches=step.dispatches, dtype=p)
                                for _, p in configs),
                          compile_s=compile_s, untimed_calls=4,
                          memory=state + copies * gpt_activation_bytes(w, target),
                          cell="GPT timing"))
    first = s.workloads[0]
    full = gpt_step_flops(first)
    parts = (Call(full / 3, dispatches=10 * first.n_layer),
             Call(2 * full / 3, dispatches=20 * first.n_layer), Call(full / 3), Call(2 * full / 3),
             Call(full), Call(full))
    works.append(Work(f"GPT {first.name}: the fp32 step taken apart", parts,
                      compile_s=5 * compile_seconds("jax.jit", target.kind, first.n_layer),
                      memory=2 * gpt_activation_bytes(first, target)))
    if target.kind == "cpu":
        for w in s.workloads:
            works.append(Work(f"GPT {w.name}: the anatomy of eager and Inductor steps",
                              alike(2, Call(gpt_step_flops(w), dispatches=30 * w.n_layer)),
                              min_calls=2 * 12, untimed_calls=0, timed=False,
                              fixed_s=1.0))  # the profiler's own start and stop, per round
    return works


def _compile_works(s: None, target: Target) -> list[Work]:
    """The tiny function, recompiles, graph breaks and the MLP block's modes; the GPT
    benchmark moved to chapter 4 (`_gpt_twin_works`)."""
    return [Work("tiny function, recompiles, breaks, MLP",
                 alike(12, Call(dispatches=10)),
                 compile_s=20 * compile_seconds("torch.compile", target.kind)
                 + (2 * compile_seconds("max-autotune", target.kind)
                    if target.kind == "cuda" else 0))]


def vit_step_flops(s: ViTSizes, batch: int) -> float:
    """One training step: `flops.vit_flops_per_image` per image."""
    return batch * flops.vit_flops_per_image(
        s.parameters, s.num_hidden_layers, s.num_attention_heads,
        s.hidden_size // s.num_attention_heads, s.tokens)


def vit_activation_bytes(s: ViTSizes, batch: int) -> float:
    """Activations of one fp32 step with eager attention (~68 bytes per token and width per
    layer, and the scores, softmax and their gradients)."""
    n = s.tokens
    per_layer = 68 * n * s.hidden_size + 10 * s.num_attention_heads * n * n
    return batch * s.num_hidden_layers * per_layer


def vit_modes(target: Target, batch: int, ref_batch: int) -> list[tuple[str, str]]:
    """Chapter 5's (mode, precision) configurations at `batch`: the fp32 modes (PyTorch's
    three, four with reduce-overhead on a GPU; JAX's three); at the seed's batch also the
    compiled eager attention and, per lower precision (bf16; TF32 on a GPU that has it,
    compute capability 8.0 on), PyTorch's SDPA eager and compiled (compiled on a GPU only,
    and bf16 only where Inductor compiles it) and JAX's split/merge modes: both attentions
    on a GPU, the written-out one on a CPU, where `dot_product_attention` is XLA's
    reference path, the same math (its bf16 program would cost the budget a compile and
    measure nothing new)."""
    gpu = target.kind == "cuda"
    torch_modes = ["torch eager, eager attn", "torch eager, SDPA", "torch.compile, SDPA"]
    if gpu:
        torch_modes.append("torch.compile reduce-overhead, SDPA")
    jax_modes = ["nnx.jit", "jax.jit split/merge", "jax.jit split/merge, dot_product_attention"]
    configs = [(m, "fp32") for m in torch_modes + jax_modes]
    if batch == ref_batch:
        configs.append(("torch.compile, eager attn", "fp32"))
        for precision in ("bf16", "tf32") if gpu and target.inductor_bf16 else ("bf16",):
            low = ["torch eager, SDPA", "jax.jit split/merge"]
            if gpu:
                low.append("jax.jit split/merge, dot_product_attention")
            if gpu and (precision != "bf16" or target.inductor_bf16):
                low.insert(1, "torch.compile, SDPA")
            configs += [(m, precision) for m in low]
    return configs


def _vit_works(s: ViTSizes, target: Target) -> list[Work]:
    """Each batch size: every configuration of `vit_modes`, built before the timing and
    alive together (weights and AdamW moments), each compiled for its shape; the seed's
    set-up (five configurations with SGD, one of them compiled); then a batch four times
    the device's memory, recorded as OOM. PyTorch's configurations keep their gradients
    between steps (zeroed at the start of the next), JAX's do not; the HF reference and the
    checked NNX model stay on the device too. Both frameworks' allocators keep their peak
    (and on a GPU reduce-overhead's CUDA-graph pool another), so activations count that
    often."""
    layers = s.num_hidden_layers
    sets = 3 if target.kind == "cuda" else 2
    works = []

    def compiles(configs):
        return sum(compile_seconds("torch.compile" if m.startswith("torch.compile") else
                                   "jax.jit", target.kind, layers)
                   for m, _ in configs if not m.startswith("torch eager"))

    for b in s.batch_sizes:
        configs = vit_modes(target, b, s.ref_batch)
        calls = tuple(Call(vit_step_flops(s, b), dispatches=40 * layers, dtype=precision)
                      for _, precision in configs)
        torch_configs = sum(m.startswith("torch") for m, _ in configs)
        memory = (16 * torch_configs + 12 * (len(configs) - torch_configs) + 8) * s.parameters \
            + sets * vit_activation_bytes(s, b)
        works.append(Work(f"ViT training step, batch {b}", calls, compile_s=compiles(configs),
                          min_calls=s.min_steps, memory=memory, may_oom=b > s.ref_batch,
                          cell="batch sweep"))
    seed = [("torch eager, eager attn", "fp32")] * 2 + [("torch.compile, eager attn", "fp32")] \
        + [("jax.jit split/merge", "fp32")] * 2
    works.append(Work(f"the seed's set-up, batch {s.ref_batch}, SGD",
                      tuple(Call(vit_step_flops(s, s.ref_batch), dispatches=40 * layers)
                            for _ in seed), compile_s=compiles(seed), min_calls=s.min_steps,
                      memory=len(seed) * 8 * s.parameters + sets
                      * vit_activation_bytes(s, s.ref_batch)))
    return works


def _xla_works(s: ViTSizes, target: Target) -> list[Work]:
    """Seven routes of one fp32 AdamW step at the seed's batch, timed together: the book's
    torch eager and the JAX twin in the page's process; torch 2.9 eager, PyTorch/XLA lazy and
    compiled, torchax and the JAX twin again in a fresh worker. Lazy tensors compile in
    each of their first two steps (the optimizer's state appears after the first), the
    openxla backend a forward, a backward and the lazy optimizer; each JAX step once, the
    page's twin twice (its checked copy too). torch_xla's compile time per graph is its own
    entry (plan.COMPILE_S; the route runs on the CPU only). The checking worker's start and
    its parity pass are in OTHER_S."""
    layers, b = s.num_hidden_layers, s.ref_batch
    calls = tuple(Call(vit_step_flops(s, b), dispatches=40 * layers) for _ in range(7))
    compile_s = (5 * compile_seconds("torch_xla", target.kind, layers)
                 + 4 * compile_seconds("jax.jit", target.kind, layers))
    return [Work(f"ViT step, seven routes, batch {b}", calls, compile_s=compile_s,
                 min_calls=s.min_steps, memory=7 * 16 * s.parameters
                 + 2 * vit_activation_bytes(s, b))]


def _distributed_works(s: DistributedSizes, target: Target) -> list[Work]:
    """PyTorch: one process, then DDP and FSDP2 per device count in a fresh set of
    processes each; JAX: one device and four layouts on each of 2, 4 and 8 devices, each
    compiled and run for its check. Only on GPUs does the page time anything: PyTorch's
    ranks `TIMED_STEPS` more steps each, and every JAX layout, compiled again, in one
    compare. A CPU target is devices simulated on one CPU, where nothing is timed."""
    from deepdive.models.torch_distributed import CHECK_STEPS, TIMED_STEPS

    params = s.n_in * s.width + (s.depth - 1) * s.width**2 + s.width * s.n_out
    step = Call(6 * s.batch * params, 4 * 4 * params * F32, dispatches=20 * s.depth)
    timed = target.kind == "cuda"
    torch_steps = (CHECK_STEPS + (TIMED_STEPS if timed else 0)) * (1 + 2 * len(s.worlds))
    layouts = alike(1 + 4 * len(s.jax_counts), step)
    compile_s = len(layouts) * compile_seconds("jax.jit", target.kind)
    state = 8 * 4 * params * F32
    start = PROCESS_START_S[target.kind]
    works = [Work("PyTorch one process, DDP and FSDP2", (step,), min_calls=torch_steps,
                  timed=False, fixed_s=start * (1 + sum(s.worlds))),
             Work("JAX layouts on every device count, checked", layouts, compile_s=compile_s,
                  min_calls=CHECK_STEPS, untimed_calls=0, timed=False, memory=state)]
    if timed:
        works.append(Work("JAX layouts on every device count, timed", layouts,
                          compile_s=compile_s, memory=state))
    return works


_BUILDERS = {"01_vmap": _vmap_works, "02_jit_xla": _jit_works,
             "03_torch_compile": _compile_works, "05_vit_training": _vit_works,
             "05_vit_xla": _xla_works, "04_gpt_training": _gpt_twin_works,
             "06_distributed": _distributed_works}


# The GPUs a reader has or rents, by short name, with the memory torch reports for them.
READER_GPUS = {"T4": ("Tesla T4", 15_828_320_256), "L4": ("NVIDIA L4", 23_612_293_120),
               "A100-40GB": ("NVIDIA A100-SXM4-40GB", 42_405_855_232),
               "A100-80GB": ("NVIDIA A100-SXM4-80GB", 85_100_000_000),
               "H100": ("NVIDIA H100 80GB HBM3", 85_520_809_984)}


def main(argv=None) -> int:
    """`python -m deepdive.book.plans [GPU ...] [--scale medium|full]`: every chapter's plan for
    each named GPU (default: all of `READER_GPUS`), and whether it fits, without a GPU."""
    import argparse

    from deepdive.book.plan import PlanDoesNotFit, cpu_target, gpu_target

    parser = argparse.ArgumentParser(prog="python -m deepdive.book.plans", description=main.__doc__)
    parser.add_argument("gpus", nargs="*", choices=[[], *READER_GPUS], metavar="GPU",
                        help=f"one of {', '.join(READER_GPUS)} (default: all)")
    parser.add_argument("--scale", choices=("medium", "full"), default="medium")
    args = parser.parse_args(argv)
    host = cpu_target("a 16-core host", 16, 128 * 2**30)
    for gpu in args.gpus or READER_GPUS:
        target = gpu_target(*READER_GPUS[gpu])
        for chapter in CHAPTERS:
            built = plan(chapter, args.scale, target, host)
            try:
                built.check()
                verdict = "fits"
            except PlanDoesNotFit as refusal:
                verdict = f"REFUSED: {refusal}"
            print(f"{built.summary()}\n{built.table().to_string()}\n-> {verdict}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
