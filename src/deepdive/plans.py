"""Each chapter's sizes at each scale, and the plan built from them (`deepdive.plan`).

The sizes live here, not in the notebooks, so that a test can build every chapter's plan
at every scale for a T4, an L4, an A100 and an H100 on a machine without any GPU, and
check that it fits. A chapter reads its sizes with ``SIZES = plans.sizes(chapter)`` and
prints ``plans.plan(chapter, SIZES, target)`` before it measures anything. The works
model each chapter's timed sweeps; `OTHER_S` is assumed for the rest of its page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepdive import env
from deepdive.plan import Call, Plan, Target, Work, alike, compile_seconds

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
    """Chapter 3: one GPT trained per backend and precision (nanoGPT's GPTConfig fields)."""

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
        `deepdive.gpt` builds it (a test checks the count against the model)."""
        d, layers = self.n_embd, self.n_layer
        per_layer = 12 * d * d + 2 * d  # attention and MLP weights, two LayerNorm gains
        return self.vocab_size * d + self.block_size * d + layers * per_layer + d


@dataclass(frozen=True)
class CompileSizes:
    """Chapter 3: the GPT workloads of the benchmark."""

    workloads: tuple


@dataclass(frozen=True)
class ViTSizes:
    """Chapter 4: the ViT's shape, the batch sweep and the timed steps per configuration."""

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
    """Chapter 5: the MLP, its global batch and the device counts."""

    width: int
    batch: int
    worlds: tuple
    depth: int = 3
    n_in: int = 64
    n_out: int = 10


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
    "03_torch_compile": {
        "small": CompileSizes((GPTWorkload("char", "char-small", 2, 4, 128, 64, 65, 16),
                               GPTWorkload("vocab", "gpt-v1024-0.54M", 2, 4, 128, 128, 1024,
                                           8))),
        "medium": CompileSizes((GPTWorkload("char", "shakespeare-char, 2 layers", 2, 6, 384,
                                            256, 65, 32),
                                GPTWorkload("vocab", "gpt-v50304, 2 layers", 2, 6, 384, 256,
                                            50304, 8))),
        "full": CompileSizes((GPTWorkload("char", "shakespeare-char 10.65M", 6, 6, 384, 256,
                                          65, 64),
                              GPTWorkload("vocab", "GPT-2 124M", 12, 12, 768, 1024, 50304,
                                          8))),
    },
    "04_vit_training": {
        "small": ViTSizes(32, 4, 64, 2, 4, 256, 10, (8, 32), 15),
        "medium": ViTSizes(224, 16, 384, 6, 6, 1536, 1000, (16, 32), 20),
        "full": ViTSizes(224, 16, 768, 12, 12, 3072, 1000, (32, 64, 128, 256), 30),
    },
    "05_distributed": {
        "small": DistributedSizes(256, 64, (2, 4)),
        "medium": DistributedSizes(512, 256, (2, 4)),
        "full": DistributedSizes(1024, 512, (2, 4, 8)),
    },
}

# Seconds assumed for the rest of each page (imports, correctness checks, the tie band's
# A/A timings, profiles, figures): on the 2-core CPU build, each page's execution time at
# commit 4a9d9a9 less what its works estimate; on a GPU, the same cells at larger sizes.
OTHER_S = {
    "01_vmap": {"small": 60.0, "medium": 90.0, "full": 120.0},
    "02_jit_xla": {"small": 60.0, "medium": 120.0, "full": 240.0},
    "03_torch_compile": {"small": 45.0, "medium": 150.0, "full": 300.0},
    "04_vit_training": {"small": 60.0, "medium": 90.0, "full": 180.0},
    "05_distributed": {"small": 20.0, "medium": 60.0, "full": 90.0},
}
CHAPTERS = tuple(SIZES)


def sizes(chapter: str, scale: str | None = None):
    """A chapter's sizes at `scale` (default: this build's, `env.scale()`)."""
    if chapter not in SIZES:
        raise KeyError(f"chapter {chapter!r} has no sizes; known: {', '.join(SIZES)}")
    scale = scale or env.scale()
    if scale not in env.SCALES:
        raise ValueError(f"scale {scale!r} is not one of {', '.join(env.SCALES)}")
    return SIZES[chapter][scale]


def plan(chapter: str, scale: str, target: Target, host: Target | None = None) -> Plan:
    """The chapter's plan at `scale` on `target` (`host`: the CPU beside a GPU)."""
    works = _BUILDERS[chapter](sizes(chapter, scale), target)
    return Plan(chapter, scale, target, tuple(works), OTHER_S[chapter][scale], host)


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
    for workload, (flops, traffic, out, ops) in per_example.items():
        for b in s.batch_sizes:
            loop = Call(b * flops, b * traffic, b * (ops + 3))
            at_set = Call(b * flops, b * traffic + b * b * out * F32 / 2, b * (ops + 4))
            vector = Call(b * flops, b * traffic, ops)
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
    return works


def _jit_works(s: JitSizes, target: Target) -> list[Work]:
    """Five ways to run each chain (NumPy on the host), the longest again in a fresh process
    beside compiled and copy variants; tiny-array dispatch; new functions compiled per
    call; the shape stream compiled per length."""
    n, works = s.fusion_elements, []
    array = n * F32
    for k in s.chain_lengths:
        eager = Call(k * n, 2 * k * array, k)
        fused = Call(k * n, 2 * array, 1)
        host = Call(k * n, 2 * k * array, k, host=True)
        runs = 2 if k == s.chain_lengths[-1] else 1  # the longest also runs in a fresh process
        works.append(Work(f"chain of {k} ops on {array / 2**20:.0f} MiB",
                          (host, eager, eager, fused, fused) * runs,
                          compile_s=runs * (compile_seconds("torch.compile", target.kind)
                                            + compile_seconds("jax.jit", target.kind)),
                          memory=8 * array, cell="fusion sweep"))
    works.append(Work(f"tiny arrays, {s.dispatch_k} ops on 16 elements",
                      (*alike(2, Call(dispatches=s.dispatch_k)), *alike(2, Call())),
                      compile_s=(compile_seconds("torch.compile", target.kind)
                                 + compile_seconds("jax.jit", target.kind)),
                      min_calls=s.min_calls))
    longest = s.chain_lengths[-1]
    works.append(Work(f"a new function compiled per call, chain of {longest}",
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
    return works


def gpt_step_flops(w: GPTWorkload) -> float:
    """nanoGPT's estimate of one training step: 6N per token plus attention's 12LHQT."""
    tokens = w.batch_size * w.block_size
    head_dim = w.n_embd // w.n_head
    return tokens * (6 * w.parameters + 12 * w.n_layer * w.n_head * head_dim * w.block_size)


def gpt_activation_bytes(w: GPTWorkload, target: Target) -> float:
    """Activations of one fp32 step: ~68 bytes per token and width per layer (Korthikanti
    et al.'s 34 at 16 bits), the scores where no flash kernel runs (CPU), and the logits."""
    tokens = w.batch_size * w.block_size
    per_layer = 68 * tokens * w.n_embd
    if target.kind == "cpu":
        per_layer += 10 * w.n_head * w.block_size * tokens
    return w.n_layer * per_layer + 3 * tokens * w.vocab_size * F32


def _compile_works(s: CompileSizes, target: Target) -> list[Work]:
    """Per GPT: each backend and the A/A copy at two precisions, checked for a few steps and
    timed in one compare; every model stays alive until the end, with its AdamW state."""
    works = [Work("tiny function, recompiles, graph breaks, MLP modes",
                  alike(12, Call(dispatches=10)),
                  compile_s=20 * compile_seconds("torch.compile", target.kind)
                  + (2 * compile_seconds("max-autotune", target.kind)
                     if target.kind == "cuda" else 0))]
    backends = 6 if target.kind == "cuda" else 4  # + cudagraphs, reduce-overhead on a GPU
    generated = 2 if target.kind == "cuda" else 1  # Inductor: default, and reduce-overhead
    traced = backends - 2 - generated  # aot_eager, and cudagraphs: no code generated
    # CUDA graphs (two backends, two precisions) keep their activations in private pools;
    # bf16 autocast's are taken as 0.6 of fp32's. One more set is the running step's.
    activation_sets = 1 + (2 * (1.0 + 0.6) if target.kind == "cuda" else 0)
    for w in s.workloads:
        step = Call(gpt_step_flops(w), dispatches=30 * w.n_layer)
        models = 2 * backends * 16 * w.parameters  # fp32 weights, gradients, two moments
        memory = models + activation_sets * gpt_activation_bytes(w, target)
        works.append(Work(f"GPT {w.name}, batch {w.batch_size}x{w.block_size}",
                          alike(2 * backends, step),
                          compile_s=2 * (
                              generated * compile_seconds("torch.compile", target.kind, w.n_layer)
                              + traced * compile_seconds("aot_eager", target.kind, w.n_layer)),
                          untimed_calls=6, memory=memory, cell="GPT timing"))
    return works


def vit_step_flops(s: ViTSizes, batch: int) -> float:
    """Forward and backward of one step: three times the forward's matmuls and attention."""
    d, n = s.hidden_size, s.tokens
    per_layer = 2 * n * (4 * d * d + 2 * d * s.intermediate_size) + 4 * n * n * d
    patch = 2 * (n - 1) * 3 * s.patch_size**2 * d
    return 3 * batch * (s.num_hidden_layers * per_layer + patch + 2 * d * s.num_labels)


def vit_activation_bytes(s: ViTSizes, batch: int) -> float:
    """Activations of one fp32 step with eager attention (~68 bytes per token and width per
    layer, and the scores, softmax and their gradients)."""
    n = s.tokens
    per_layer = 68 * n * s.hidden_size + 10 * s.num_attention_heads * n * n
    return batch * s.num_hidden_layers * per_layer


def _vit_works(s: ViTSizes, target: Target) -> list[Work]:
    """Each batch size: the fp32 modes (PyTorch's four with reduce-overhead on a GPU, JAX's
    three), each compiled for its shape; at the seed's batch, the compiled eager attention
    and the lower precisions; then a batch four times the device's memory, recorded as OOM.
    Both frameworks' allocators keep their peak, so memory counts the activations twice."""
    gpu = target.kind == "cuda"
    torch_modes, torch_compiled, jax_modes = (4, 2, 3) if gpu else (3, 1, 3)
    precisions = 2 if gpu else 1  # bf16, and TF32 on a GPU
    layers = s.num_hidden_layers
    models = (torch_modes + jax_modes) * 16 * s.parameters
    works = []
    for b in s.batch_sizes:
        variants = torch_modes + jax_modes
        dispatches = 40 * layers
        calls = alike(variants, Call(vit_step_flops(s, b), dispatches=dispatches))
        compile_s = (torch_compiled * compile_seconds("torch.compile", target.kind, layers)
                     + jax_modes * compile_seconds("jax.jit", target.kind, layers))
        if b == s.ref_batch:
            low = 3 + (1 if gpu else 0)
            calls += alike(1 + precisions * low,
                           Call(vit_step_flops(s, b), dispatches=dispatches, dtype="bf16"))
            compile_s += ((1 + precisions * (1 if gpu else 0))
                          * compile_seconds("torch.compile", target.kind, layers)
                          + precisions * 2 * compile_seconds("jax.jit", target.kind, layers))
        works.append(Work(f"ViT training step, batch {b}", calls, compile_s=compile_s,
                          min_calls=s.min_steps, memory=models + 2 * vit_activation_bytes(s, b),
                          may_oom=b > s.ref_batch, cell="batch sweep"))
    return works


def _distributed_works(s: DistributedSizes, target: Target) -> list[Work]:
    """PyTorch: one process, then DDP and FSDP2 per device count in fresh processes (each
    trains the checked steps and times 20); JAX: every layout and count in one compare."""
    from deepdive.torch_distributed import CHECK_STEPS

    params = s.n_in * s.width + (s.depth - 1) * s.width**2 + s.width * s.n_out
    step = Call(6 * s.batch * params, 4 * 4 * params * F32, dispatches=20 * s.depth)
    spawns = 1 + len(s.worlds)
    torch_steps = (CHECK_STEPS + 20) * (1 + 2 * len(s.worlds))
    works = [Work("PyTorch one process, DDP and FSDP2", (step,), min_calls=torch_steps,
                  timed=False, fixed_s=10.0 * spawns),
             Work("JAX layouts on every device count",
                  alike(1 + 2 * len(s.worlds), step),
                  compile_s=(1 + 2 * len(s.worlds)) * 2 * compile_seconds("jax.jit", target.kind),
                  memory=8 * 4 * params * F32)]
    return works


_BUILDERS = {"01_vmap": _vmap_works, "02_jit_xla": _jit_works,
             "03_torch_compile": _compile_works, "04_vit_training": _vit_works,
             "05_distributed": _distributed_works}
