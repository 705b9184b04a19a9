"""Chapter 4 ({ref}`ch-gpt`): one GPT trained in PyTorch and JAX, and the PyTorch 2.0 slides'
eager / CUDA-graphs / Inductor benchmark on the same steps, each measured once.

The page builds every (mode, precision) of `deepdive.book.plans.gpt_twin_modes` from the proven
weights with `gpt_train_step`, checks its first step against both fp32 references
(`check_gpt_first_step`) and times them all in one `compare` per GPT. The rest of this
module takes the steps apart (`gpt_parts`, `anatomy_rounds`), counts FLOPs two ways, puts
the slides' table beside this build's, and writes the sentences the page glues.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import re
import time
from dataclasses import dataclass

import numpy as np

from deepdive.models import parity

__all__ = [
    "ANATOMY_ROUNDS", "BENCHMARK_SLUGS", "BF16_AT_LEAST", "GPTPrecision", "GRADIENT_FLOOR",
    "JAX_MODES", "LIBRARY_OPS", "MEMORY_TOOL", "NANOGPT", "SLIDES", "SLIDES_CLAIMED_PCT",
    "TORCH_MODES", "TWINS", "UNCOMPILED", "aa_table", "adamw_text", "analytic_step_flops",
    "anatomy_reading", "anatomy_rounds", "anatomy_tables", "autocast_dtypes", "autocast_sentence",
    "backend_note", "benchmark_claim_id", "best_pair_cases", "break_even_column",
    "break_even_text", "check_gpt_first_step", "check_parts", "clipped", "corpus_sentence",
    "counted_flops", "cpu_attention_mapping", "decide_gpt_claims", "decide_part_claims",
    "draw_batches", "flop_counter_sentence", "flop_numbers", "flop_table", "gpt_compile_kind",
    "gpt_first_step_references", "gpt_framework", "gpt_parts", "gpt_precisions", "gpt_step_row",
    "gpt_train_step", "gpt_twin", "loss_note", "mask_note", "paired_change", "parity_numbers",
    "parts_table", "plot_claims", "plot_loss_curves", "plot_steps", "port_table",
    "prove_gpt_twins", "scope_note", "sdpa_kernels", "seconds_text", "size_note", "size_table",
    "slides_anchor", "slides_sentence", "slides_size_ratio", "step_memory_mib", "summary_reading",
]

# torch.compile options per PyTorch mode (None: eager). Static shapes everywhere, so the
# second GPT's sizes are not compiled for symbolic sizes.
TORCH_MODES = {
    "torch eager": None, "torch eager A/A copy": None,
    "torch.compile aot_eager": dict(backend="aot_eager", dynamic=False),
    "torch.compile": dict(dynamic=False),
    "torch.compile cudagraphs": dict(backend="cudagraphs", dynamic=False),
    "torch.compile reduce-overhead": dict(dynamic=False, mode="reduce-overhead"),
}
# The twin's options per JAX mode.
JAX_MODES = {"jax.jit": dict(attention="dot_product_attention"),
             "jax.jit, tokens flattened": dict(attention="dot_product_attention",
                                               flatten_tokens=True)}
# The compiled PyTorch modes against eager: the benchmark's claim ids (moved from
# chapter 3 with their ids: "<gpt>_<slug>_<fp32|bf16>").
BENCHMARK_SLUGS = {"torch.compile aot_eager": "aot_eager", "torch.compile": "inductor",
                   "torch.compile cudagraphs": "cudagraphs",
                   "torch.compile reduce-overhead": "inductor_reduce_overhead"}
GRADIENT_FLOOR = 1e-3  # of the whole gradient's norm
BF16_AT_LEAST = 1e-4  # a bf16 step's gradient differs from fp32's by more than this
ANATOMY_ROUNDS = 12  # the fewest rounds whose 95% interval of a median drops 2 at each end
LIBRARY_OPS = re.compile(r"^aten::(mm|addmm|bmm|_scaled_dot_product_\w+)$")
UNCOMPILED = ("gradient clipping", "AdamW step", "zero_grad")


def gpt_framework(mode: str) -> str:
    """"torch" or "jax", from a mode's name."""
    return "torch" if mode.startswith("torch") else "jax"


def benchmark_claim_id(key: str, mode: str, precision: str) -> str:
    """The slides' benchmark claim for a compiled PyTorch mode against eager."""
    return f"{key}_{BENCHMARK_SLUGS[mode]}_{precision}"


@dataclass(frozen=True)
class GPTPrecision:
    """A precision of the GPT steps and its first-step tolerances against fp32."""

    name: str
    bf16: bool
    loss_rtol: float
    gradient_rtol: float


def gpt_precisions(bf16_native: bool) -> dict[str, GPTPrecision]:
    """fp32: sums in another order, ~1e-6 measured. bf16 keeps 8 significant bits (2^-9
    per operation), and a gradient passes through many bf16 operations."""
    return {"fp32": GPTPrecision("fp32 strict", False, 1e-5, 1e-4),
            "bf16": GPTPrecision("bf16 mixed" + ("" if bf16_native else " (emulated)"),
                                 True, 1e-2, 5e-2)}


@contextlib.contextmanager
def _no_part(name):
    yield


def gpt_train_step(reference, twin_of, batches, mode: str, precision: GPTPrecision,
                   device: str):
    """One training step of `mode` from the proven weights: PyTorch's (a copy of
    `reference`, nanoGPT's clipped AdamW, the model compiled per `TORCH_MODES`) or JAX's
    (`twin_of(dtype=..., **JAX_MODES[mode])` under one `jax.jit`, state donated). The step
    cycles through `batches` (NumPy pairs); `step.gradients()` reads back the clipped
    gradient its first step applied, keyed by NNX path."""
    if gpt_framework(mode) == "torch":
        return _torch_step(reference, batches, TORCH_MODES[mode], precision, device)
    import jax.numpy as jnp

    twin = twin_of(dtype=jnp.bfloat16 if precision.bf16 else jnp.float32, **JAX_MODES[mode])
    return _jax_step(twin, batches)


def _torch_step(reference, batches, options, precision, device):
    import torch

    from deepdive.core.compilation import keep_loss, uses_cuda_graphs
    from deepdive.models import gpt_jax

    model = copy.deepcopy(reference)  # the proven weights (the tie survives a copy)
    optimizer = gpt_jax.ClippedAdamW(model.parameters(), **gpt_jax.TRAINING,
                                     fused=True if device == "cuda" else None)
    forward = model if options is None else torch.compile(model, **options)
    new_graph_step = uses_cuda_graphs(options)
    batches = [tuple(torch.from_numpy(a).to(device) for a in b) for b in batches]
    calls = itertools.count()

    def step(part=None):
        """One step; `part(name)`, if given, wraps each part (the anatomy times them)."""
        part = part or _no_part
        idx, targets = batches[next(calls) % len(batches)]
        with part("zero_grad"):  # a no-op unless the last step kept its gradients
            optimizer.zero_grad(set_to_none=True)
        with part("forward and backward"):  # the compiled region
            if new_graph_step:  # CUDA graphs: a new step begins, outputs may be overwritten
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(device, dtype=torch.bfloat16, enabled=precision.bf16):
                loss = forward(idx, targets)
            loss.backward()
        with part("gradient clipping"):  # not compiled, as in nanoGPT
            torch.nn.utils.clip_grad_norm_(optimizer.params, optimizer.clip)
        with part("AdamW step"):
            optimizer.optimizer.step()
        if not step.keep_gradients:  # freed, as nanoGPT frees them: 4 bytes a parameter
            with part("zero_grad"):
                optimizer.zero_grad(set_to_none=True)
        return keep_loss(loss)

    def release_gradients(result=None):  # what zero_grad frees, for the memory reading
        optimizer.zero_grad(set_to_none=True)
        return result

    step.gradients = lambda: gpt_jax.torch_arrays_as_nnx(
        (n, p.grad.float().cpu().numpy()) for n, p in model.named_parameters())
    step.release_gradients = release_gradients
    step.keep_gradients = True  # for the first step's check; the page then clears it
    step.cuda_graphs = new_graph_step
    return step


def _jax_step(model, batches):
    import jax
    from flax import nnx

    from deepdive.core import memory
    from deepdive.models import gpt_jax

    optimizer = nnx.Optimizer(model, gpt_jax.nanogpt_adamw(**gpt_jax.TRAINING), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    @functools.partial(jax.jit, donate_argnums=0)
    def train(state, idx, targets):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: m(idx, targets))(model)
        optimizer.update(model, grads)  # clip_by_global_norm, then AdamW
        return nnx.state((model, optimizer)), loss

    batches = [tuple(jax.device_put(a) for a in b) for b in batches]
    calls, held = itertools.count(), [state]

    def step():
        held[0], loss = train(held[0], *batches[next(calls) % len(batches)])
        return loss

    def gradients():  # after one step, Adam's first moment is (1 - b1) x the clipped gradient
        _, opt = nnx.merge(graphdef, held[0])
        mu = gpt_jax.first_moment(opt.opt_state)
        return {path: np.asarray(v[...]) / (1 - gpt_jax.TRAINING["b1"])
                for path, v in nnx.to_flat_state(mu)}

    step.gradients = gradients
    step.plan = lambda: memory.xla_memory_plan(train, held[0], *batches[0])
    return step


def clipped(gradients: dict) -> dict:
    """The gradients scaled as nanoGPT's clipping at norm `gpt_jax.GRAD_CLIP` scales them."""
    from deepdive.models.gpt_jax import GRAD_CLIP

    norm = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64)))
                         for g in gradients.values()))
    scale = min(1.0, GRAD_CLIP / norm) if norm > 0 else 1.0
    return {path: g * scale for path, g in gradients.items()}


def gpt_first_step_references(reference, twin, batch) -> dict:
    """Loss and clipped gradients of both proven fp32 models on `batch`, strict fp32."""
    import jax.numpy as jnp
    from flax import nnx

    from deepdive.models import gpt_jax

    family = gpt_jax.family()
    with parity.strict_fp32():
        model = copy.deepcopy(reference)
        _, loss = family.torch_forward(model, *batch)
        loss.backward()
        torch_ref = {"loss": loss.item(), "gradients": clipped(family.torch_gradients(model))}
        idx, targets = (jnp.asarray(a) for a in batch)
        jax_loss, grads = nnx.value_and_grad(lambda m: m(idx, targets))(twin)
    jax_ref = {"loss": float(jax_loss), "gradients": clipped(
        {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(grads)})}
    return {"PyTorch": torch_ref, "JAX": jax_ref}


def check_gpt_first_step(model: str, label: str, gradients: dict, loss: float,
                         precision: GPTPrecision, references: dict) -> dict:
    """One variant's first step against both fp32 references: the loss (relative), the
    gradient (worst tensor, relative L2, floor `GRADIENT_FLOOR`); a bf16 variant must also
    differ by at least `BF16_AT_LEAST` (else fp32 ran in disguise). Returns the row;
    raises AssertionError naming the variant when it fails."""
    row, passed = {"model": model, "variant": label}, True
    for side, ref in references.items():
        loss_error = abs(loss - ref["loss"]) / abs(ref["loss"])
        error, where = parity.worst_tensor_error(gradients, ref["gradients"],
                                                 floor=GRADIENT_FLOOR)
        row.update({f"loss vs {side}": loss_error, f"gradient vs {side}": error,
                    f"worst tensor vs {side}": where})
        passed &= loss_error <= precision.loss_rtol and error <= precision.gradient_rtol
        passed &= not precision.bf16 or error >= BF16_AT_LEAST
    row["tolerance (loss, gradient)"] = f"{precision.loss_rtol:g}, {precision.gradient_rtol:g}" \
        + (f"; gradient at least {BF16_AT_LEAST:g} (bf16 ran)" if precision.bf16 else "")
    row["passed"] = bool(passed)
    if not passed:
        raise AssertionError(f"{label} on {model} disagrees with the fp32 references: {row}")
    return row


def gpt_compile_kind(mode: str, inductor_started: list) -> str:
    """What the first step of `mode` compiles; appends to `inductor_started` the Inductor
    modes built so far (the page's first one is a cold compile)."""
    if gpt_framework(mode) == "jax":
        return "new XLA program"
    options = TORCH_MODES[mode]
    if options is None:
        return "none (eager)"
    if options.get("backend") in ("aot_eager", "cudagraphs"):
        return f"{options['backend']} (no kernels generated)"
    kind = "Inductor already warm" if inductor_started else "cold: first Inductor compile"
    inductor_started.append(mode)
    return kind


# --- FLOPs ---------------------------------------------------------------------------------

def cpu_attention_mapping() -> dict:
    """FlopCounterMode has formulas for the GPU attention kernels, none for the CPU one:
    this mapping gives the CPU kernel the formulas PyTorch uses for the others."""
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    def forward(query, key, value, *args, out_shape=None, **kwargs):
        return sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, out_shape=None, **kwargs):
        return sdpa_backward_flop_count(grad_out, query, key, value)

    aten = torch.ops.aten
    return {aten._scaled_dot_product_flash_attention_for_cpu: forward,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}


def counted_flops(model, batch, mapping=None) -> tuple[int, int]:
    """FlopCounterMode's total and its attention part for one forward and backward of a
    copy of `model` on `batch` (torch tensors)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = copy.deepcopy(model)
    counter = FlopCounterMode(display=False, custom_mapping=mapping or {})
    with counter:
        model(*batch).backward()
    per_op = counter.get_flop_counts()["Global"]
    return counter.get_total_flops(), sum(v for op, v in per_op.items()
                                          if "scaled_dot_product" in str(op))


def flop_counter_sentence(matmuls_only: bool) -> str:
    """What FlopCounterMode counted, as Markdown."""
    if matmuls_only:
        return ("On this build `FlopCounterMode` counted exactly 6 x matmul parameters x "
                "tokens for both models: the weight matmuls only, because it has no formula "
                "for `aten._scaled_dot_product_flash_attention_for_cpu`, the kernel SDPA calls "
                "on a CPU.")
    return "On this build `FlopCounterMode` counted the attention kernels as well as the matmuls."


def mask_note(device: str, longest_sequence: int) -> str:
    """Whether the causal mask can save attention work at these sequence lengths."""
    if device == "cpu" and longest_sequence <= 512:
        return ("PyTorch's CPU kernel takes keys in blocks of up to 512, so at these lengths "
                "one block holds all the keys: it computes every score and masks those above "
                "the diagonal afterwards, and the formula charges the work it does.")
    return ("A kernel can skip only the blocks of scores wholly above the diagonal: up to half "
            "of the work at long sequences, less where blocks straddle the diagonal.")


_WATCHED = ((r"aten\.(mm|addmm|bmm)\.", "the matmuls"),
            (r"scaled_dot_product", "the attention kernel (SDPA)"),
            (r"aten\.gelu", "GELU"), (r"layer_norm", "LayerNorm"),
            (r"log_softmax|nll_loss", "the loss (log-softmax and NLL)"))


def autocast_dtypes(model, batch, device: str) -> tuple[dict, dict]:
    """Under bf16 autocast, the dtypes each watched ATen operator returned (forward and
    backward) and its first input's dtype in the forward, as names ("bfloat16")."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen, inputs = {}, {}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            first = out[0] if isinstance(out, tuple | list) else out
            label = next((lb for p, lb in _WATCHED if re.search(p, str(func))), None)
            if label is not None and isinstance(first, torch.Tensor) \
                    and first.is_floating_point():
                seen.setdefault(label, set()).add(str(first.dtype).removeprefix("torch."))
                if "backward" not in str(func):
                    inputs.setdefault(label, set()).add(
                        str(args[0].dtype).removeprefix("torch."))
            return out

    model = copy.deepcopy(model)
    with Record():
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(*batch)
        loss.backward()
    return seen, inputs


def autocast_sentence(seen: dict, inputs: dict) -> str:
    """Which operators ran in bf16 under autocast, and why, from `autocast_dtypes`."""
    bf16, fp32 = {"bfloat16"}, {"float32"}
    usual = (all(seen.get(lb) == bf16 for lb in ("the matmuls", "the attention kernel (SDPA)",
                                                   "GELU"))
             and inputs.get("GELU") == bf16 and seen.get("LayerNorm") == fp32
             and inputs.get("LayerNorm") == fp32
             and seen.get("the loss (log-softmax and NLL)") == fp32)
    if usual:
        return ("Under autocast the matmuls and the attention kernel ran in bf16, and so did "
                "GELU, whose input is a bf16 matmul output; LayerNorm ran in fp32, the dtype of "
                "the residual stream, and so did the loss: autocast casts the logits up for it.")
    in_bf16 = [lb for _, lb in _WATCHED if seen.get(lb) == bf16]
    in_fp32 = [lb for _, lb in _WATCHED if seen.get(lb) == fp32]
    return (f"Under autocast {', '.join(in_bf16) or 'none of the watched operators'} ran in "
            f"bf16 and {', '.join(in_fp32) or 'none of them'} in fp32.")


# --- the slides ----------------------------------------------------------------------------

# The slides' table (nanoGPT train.py, 1000 iterations; hardware and precision not stated).
SLIDES = {"model": ["GPT-2 124M"] * 3 + ["Shakespeare-char 10.65M"] * 3,
          "backend": ["eager", "cudagraphs", "inductor"] * 2,
          "ms per iteration (seed)": [3107.334, 3098.297, 2640.227, 16.029, 16.828, 12.191],
          "MFU % (seed)": [43.337, 43.463, 51.023, 22.951, 21.916, 29.920]}
SLIDES_CLAIMED_PCT = {"GPT-2 124M": 16.25, "Shakespeare-char 10.65M": 27.2}  # "% speedup"
# Inferred from nanoGPT's train.py: micro-steps per iteration, micro-batch, GPTConfig args.
NANOGPT = {"GPT-2 124M": (40, 12, (12, 12, 768, 1024, 50304)),
           "Shakespeare-char 10.65M": (1, 64, (6, 6, 384, 256, 65))}


def slides_anchor():
    """The slides' table with the MFU nanoGPT's formula implies at 40 micro-steps per GPT-2
    iteration (and 312 TFLOP/s, as nanoGPT divides by on any GPU), and what their own
    table says Inductor's speed-up was, three ways. Returns (anchor, slides)."""
    import pandas as pd
    import torch

    from deepdive.core import flops
    from deepdive.models.gpt import GPT, GPTConfig

    a100 = flops.peak_flops("NVIDIA A100-SXM4-40GB", "bf16")[0]
    anchor = pd.DataFrame(SLIDES)
    micro = anchor["model"].map(lambda m: NANOGPT[m][0])
    anchor["ms per micro-step (seed)"] = anchor["ms per iteration (seed)"] / micro
    implied = []
    for m, ms in zip(anchor["model"], anchor["ms per iteration (seed)"], strict=True):
        steps, batch, args = NANOGPT[m]
        cfg = GPTConfig(*args)
        with torch.device("meta"):
            n = GPT(cfg).params_for_flops()
        per_token = flops.gpt_flops_per_token(n, cfg.n_layer, cfg.n_head, cfg.head_dim,
                                              cfg.block_size)
        implied.append(100 * flops.mfu(per_token * steps * batch * cfg.block_size, ms / 1e3,
                                       a100, peak_source="nanoGPT's 312 TFLOP/s"))
    anchor["MFU % implied by nanoGPT's formula"] = implied
    anchor = anchor.set_index(["model", "backend"])
    ms, mfu = anchor["ms per iteration (seed)"], anchor["MFU % (seed)"]
    slides = pd.DataFrame([{
        "model": m, "the slides' stated speed-up (%)": claimed,
        "eager / inductor − 1 (%)": 100 * (ms[m, "eager"] / ms[m, "inductor"] - 1),
        "1 − inductor / eager (%)": 100 * (1 - ms[m, "inductor"] / ms[m, "eager"]),
        "MFU inductor / eager − 1 (%)": 100 * (mfu[m, "inductor"] / mfu[m, "eager"] - 1),
    } for m, claimed in SLIDES_CLAIMED_PCT.items()]).set_index("model")
    return anchor, slides


def slides_sentence(slides) -> str:
    """Whether the slides' headline speed-ups follow from their own table."""
    stated = slides["the slides' stated speed-up (%)"]
    readings = slides.drop(columns=stated.name)
    if not (readings.sub(stated, axis=0).abs() > 0.5).all(axis=None):
        return "Their headline figures agree with one reading of their table."
    r = readings.to_numpy()
    return (f"Their headline figures, {stated.iloc[0]:.2f}% and {stated.iloc[1]:.1f}%, do not "
            f"follow from their own table: Inductor's speed-up there is {r[0, 0]:.1f}% and "
            f"{r[1, 0]:.1f}%, or {r[0, 1]:.1f}% and {r[1, 1]:.1f}% less time, or "
            f"{r[0, 2]:.1f}% and {r[1, 2]:.1f}% more MFU.")


# --- where the time goes -------------------------------------------------------------------

def gpt_parts(reference, twin_of, batch, device: str) -> dict:
    """The first GPT's fp32 step taken apart, as callables: each framework's forward (as
    training runs it, keeping what the backward needs) and backward alone; for JAX with
    tokens flattened also forward and backward as one program and as two. Backward parts
    carry `.gradients()` (NNX paths) for the check."""
    import jax
    import torch
    from flax import nnx

    from deepdive.models import gpt_jax

    model = copy.deepcopy(reference)
    idx, targets = (torch.from_numpy(a).to(device) for a in batch)
    params = list(model.parameters())
    kept = model(idx, targets)  # one graph, kept for the backward part

    def torch_backward():
        torch_backward.grads = torch.autograd.grad(kept, params, retain_graph=True)
        return torch_backward.grads

    torch_backward.gradients = lambda: gpt_jax.torch_arrays_as_nnx(
        (n, g.cpu().numpy()) for (n, _), g in zip(model.named_parameters(),
                                                  torch_backward.grads, strict=True))
    parts = {"PyTorch eager · forward": lambda: model(idx, targets),
             "PyTorch eager · backward": torch_backward}
    jidx, jtargets = (jax.device_put(a) for a in batch)
    for name in ("jax.jit", "jax.jit, tokens flattened"):
        graphdef, jparams = nnx.split(twin_of(**JAX_MODES[name]))
        forward, backward, both = _jax_parts(graphdef, jparams, jidx, jtargets)
        parts[f"{name} · forward"], parts[f"{name} · backward"] = forward, backward
        if JAX_MODES[name].get("flatten_tokens"):
            parts[f"{name} · forward and backward, one program"] = both
            parts[f"{name} · forward and backward, two programs"] = \
                lambda f=forward, b=backward: (f(), b())[1]
    return parts


def _jax_parts(graphdef, params, idx, targets):
    """JAX's forward (the loss, via `jax.vjp`), backward (the jitted pullback of what the
    forward saved) and both as one program, for `gpt_parts`."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    def loss_of(p, idx, targets):
        return nnx.merge(graphdef, p)(idx, targets)

    # the batch passed in as arguments, as the training step passes it
    forward_vjp = jax.jit(lambda p, i, t: jax.vjp(lambda q: loss_of(q, i, t), p))
    pullback = jax.jit(lambda vjp: vjp(jnp.float32(1.0))[0])
    saved = forward_vjp(params, idx, targets)[1]
    both = jax.jit(jax.value_and_grad(loss_of))

    def backward():
        backward.grads = pullback(saved)
        return backward.grads

    backward.gradients = lambda: {path: np.asarray(v)
                                  for path, v in nnx.to_flat_state(backward.grads)}
    return ((lambda: forward_vjp(params, idx, targets)[0]), backward,
            (lambda: both(params, idx, targets)[0]))


class _PartTimes:
    """A `part` for a PyTorch step: the wall-clock ms of each part of one step."""

    def __init__(self):
        self.ms = {}

    @contextlib.contextmanager
    def __call__(self, name):
        start = time.perf_counter()
        yield
        self.ms[name] = self.ms.get(name, 0.0) + 1e3 * (time.perf_counter() - start)


def anatomy_rounds(steps: dict, rounds: int = ANATOMY_ROUNDS) -> dict:
    """Per PyTorch step (a dict of name -> `gpt_train_step`), one row per round: each
    part's ms from an unprofiled step, and the library calls' self ms from a profiled step
    right after it in the same round; the steps alternate, and so does which goes first."""
    import pandas as pd
    import torch

    keys = list(steps)
    parts, library = {k: [] for k in keys}, {k: [] for k in keys}
    for r in range(rounds):
        order = keys if r % 2 == 0 else keys[::-1]
        for key in order:
            times = _PartTimes()
            steps[key](part=times)
            parts[key].append(times.ms)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for key in order:
                with torch.profiler.record_function(f"anatomy {keys.index(key)}"):
                    steps[key]()
        spent = dict.fromkeys(keys, 0.0)
        for event in prof.events():
            if LIBRARY_OPS.match(event.name):
                parent = event.cpu_parent
                while not parent.name.startswith("anatomy "):
                    parent = parent.cpu_parent
                spent[keys[int(parent.name.split()[1])]] += event.self_cpu_time_total / 1e3
        for key in keys:
            library[key].append(spent[key])
    frames = {}
    for key in keys:
        f, lib = pd.DataFrame(parts[key]), np.array(library[key])
        frames[key] = pd.DataFrame({
            "step": f.sum(axis=1), "library calls": lib,
            "compiled region outside the library calls": f["forward and backward"] - lib,
            "uncompiled: clipping, AdamW, zero_grad": f[list(UNCOMPILED)].sum(axis=1)})
    return frames


def paired_change(eager_values, compiled_values) -> tuple[float, float, float]:
    """(median, low, high) of the per-round eager − compiled differences, in ms."""
    from deepdive.core.timing import median_interval

    d = np.asarray(eager_values) - np.asarray(compiled_values)
    return (float(np.median(d)), *median_interval(d))


def anatomy_tables(frames_by_model: dict, claims_by_model: dict):
    """From `{model: (eager frame, inductor frame)}` and `{model: the Inductor fp32 claim}`:
    the parts table (medians and paired differences) and the bounds table (shares of the
    eager step, the speed-up bounds, how far Inductor's interval reached toward them)."""
    import pandas as pd

    part_rows, bound_rows = [], []
    for model, (eager, inductor) in frames_by_model.items():
        for part in eager.columns:
            median, low, high = paired_change(eager[part], inductor[part])
            part_rows.append({"model": model, "part of the fp32 step": part,
                              "eager (ms)": eager[part].median(),
                              "inductor (ms)": inductor[part].median(),
                              "eager − inductor (ms)": median, "low": low, "high": high})
        e, claim = eager.median(), claims_by_model[model]
        uncompiled = e["uncompiled: clipping, AdamW, zero_grad"]
        bound = e["step"] / (e["library calls"] + uncompiled)
        bound_rows.append({
            "model": model, "eager step (ms)": e["step"],
            "library share (%)": 100 * e["library calls"] / e["step"],
            "uncompiled share (%)": 100 * uncompiled / e["step"],
            "bound, model compiled": bound, "bound, everything compiled":
                e["step"] / e["library calls"],
            "inductor against eager (claim)": claim.ratio,
            "way to the bound, low (%)": 100 * (claim.low - 1) / (bound - 1),
            "way to the bound, high (%)": 100 * (claim.high - 1) / (bound - 1)})
    return (pd.DataFrame(part_rows).set_index(["model", "part of the fp32 step"]),
            pd.DataFrame(bound_rows).set_index("model"))


def _noisy(frame) -> list[str]:
    measured = frame[["step", "library calls"]]
    iqr = measured.quantile(0.75) - measured.quantile(0.25)
    return [part for part in measured if iqr[part] > 0.1 * measured[part].median()]


def anatomy_reading(parts, bounds, frames_by_model: dict) -> str:
    """The anatomy's sentence: the shares, the bounds, how far Inductor reached toward
    them, and eager − Inductor outside the library calls; rough when a round spread."""
    noisy = [f"{m}, {side} {p}" for m, frames in frames_by_model.items()
             for side, frame in zip(("eager", "inductor"), frames, strict=True)
             for p in _noisy(frame)]

    def each(column, fmt):
        return " and ".join(format(v, fmt) for v in bounds[column])

    outside = parts.xs("compiled region outside the library calls",
                       level="part of the fp32 step")
    changes = " and ".join(f"{r['eager − inductor (ms)']:+.2f} ms [{r['low']:+.2f}, "
                           f"{r['high']:+.2f}]" for _, r in outside.iterrows())
    excluded = int(((outside["low"] > 0) | (outside["high"] < 0)).sum())
    text = (f"The library calls took {each('library share (%)', '.0f')}% of the eager fp32 "
            f"steps and the uncompiled clipping, AdamW and zero_grad "
            f"{each('uncompiled share (%)', '.0f')}%, so compiling the model alone could reach "
            f"at most {each('bound, model compiled', '.2f')}x; Inductor's intervals reach "
            + " and ".join(f"{lo:.0f}% to {hi:.0f}%" for lo, hi in zip(
                bounds["way to the bound, low (%)"], bounds["way to the bound, high (%)"],
                strict=True))
            + f" of the way there. Outside the library calls, eager's time minus Inductor's "
            f"was {changes} (paired by round, 95% intervals), "
            + ("an interval that excludes 0 for none of the models." if excluded == 0 else
               f"intervals that exclude 0 for {excluded} of the {len(outside)} models."))
    if noisy:
        return ("The rounds were noisy (" + "; ".join(noisy) + ": IQR above 10% of the "
                "median), so this is rough and nothing is concluded from it. " + text)
    return text


# --- readings ------------------------------------------------------------------------------

def corpus_sentence(n_chars: int, vocab: int, source: str) -> str:
    """What the character model reads."""
    if source == "synthetic":
        return (f"Tiny Shakespeare could not be downloaded, so {n_chars:,} random characters "
                f"over {vocab} symbols stand in for it")
    return f"The character model reads Tiny Shakespeare, {n_chars:,} characters over " \
           f"{vocab} symbols ({source})"


def loss_note(random_names: list[str], all_random: bool) -> str:
    """Why a model's loss stays near ln V: it reads random tokens."""
    if all_random:
        return ("Every model in this build reads random tokens, so its loss stays near ln V, "
                "a uniform guess; only agreement across variants is read.")
    return (f"{' and '.join(random_names)} reads random token ids, so its loss stays near "
            "ln V, a uniform guess.")


def size_note(size_ratio: float, slides_ratio: float) -> str:
    """Whether this scale's two GPTs can test the slides' "more pronounced in smaller
    models" reading, by how their parameter counts differ."""
    spread = (f"At this scale the two models differ {size_ratio:.1f}-fold in parameters, the "
              f"slides' two {slides_ratio:.1f}-fold")
    if size_ratio < 2:
        return (f"{spread}, so this build cannot test the slides' reading that Inductor's gain "
                "\"is more pronounced in smaller models\".")
    if abs(math.log(size_ratio / slides_ratio)) < math.log(1.25):
        return f"{spread}, as the slides' do."
    return f"{spread}: a narrower spread than theirs, so it tests that reading only weakly."


def break_even_text(options, verdict: str | None, steps: float) -> str:
    """The break-even column: steps after which a compile paid for itself, only where the
    claim against eager says faster (a point estimate); else the verdict."""
    if options is None:
        return ""
    if verdict != "faster" or not math.isfinite(steps):
        return f"— ({verdict or 'no claim'})"
    return f"{float(f'{steps:.2g}'):,.0f}"


def seconds_text(values) -> str:
    """"1.2 s" or "1.2 to 3.4 s" for a set of compile times."""
    values = list(values)
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return f"{low} s" if low == high else f"{low} to {high} s"


def best_pair_cases(glued: dict, best: dict, workloads, precision: str) -> list[str]:
    """Per GPT, "<JAX's best> was <verdict> <PyTorch's best> on <model> (<ratio>)" for the
    best-against-best claims of `precision` that exist. `best[(key, precision)]` names
    each framework's best mode; `workloads` are (key, name) pairs."""
    out = []
    for key, name in workloads:
        claim_id = f"{key}_{precision}_jax_vs_torch"
        if claim_id in glued:
            pair = best[key, precision]
            out.append(f"{pair['jax']} was {glued[claim_id]} {pair['torch']} on {name} "
                       f"({glued[claim_id + '_ratio']})")
    return out


def summary_reading(glued: dict, best: dict, workloads, precisions: dict,
                    compile_seconds: dict) -> str:
    """The summary paragraph, from the claims read back: each precision's best against
    best and the benchmark's Inductor claims, and the compile times
    (`{"jax": [...], "cold": [...], "warm": [...]}`)."""
    said = []
    for p, precision in precisions.items():
        cases = best_pair_cases(glued, best, workloads, p)
        if cases:
            said.append(f"In {precision.name}, JAX's best step against PyTorch's best: "
                        f"{' and '.join(cases)}.")
        inductor = [f"{glued[f'{k}_inductor_{p}']} eager on {n} "
                    f"({glued[f'{k}_inductor_{p}_ratio']})" for k, n in workloads
                    if f"{k}_inductor_{p}" in glued]
        if inductor:
            said.append(f"In {precision.name}, Inductor's step was {' and '.join(inductor)}.")
    said.append(f"Compiling took {seconds_text(compile_seconds['jax'])} per jax.jit step; "
                f"torch.compile with Inductor {seconds_text(compile_seconds['cold'])} for the "
                "page's first, cold compile"
                + (f" and {seconds_text(compile_seconds['warm'])} for the others"
                   if compile_seconds["warm"] else "")
                + "; once per shape, outside every step time.")
    return " ".join(said)


# --- the models, the data, the proof -------------------------------------------------------

def gpt_twin(reference, dtype=None, **options):
    """The Flax NNX twin of PyTorch GPT `reference`, holding its (proven) weights."""
    import jax.numpy as jnp
    from flax import nnx

    from deepdive.models import gpt_jax

    model = gpt_jax.GPT(reference.cfg, dtype=dtype or jnp.float32, rngs=nnx.Rngs(0), **options)
    gpt_jax.port_torch_weights(reference, model)
    return model


def size_table(workloads, references):
    """The GPTs of this scale: shape, batch, tokens per step and three parameter counts."""
    import pandas as pd

    return pd.DataFrame([{
        "model": w.name, **vars(references[w.key].cfg), "batch": w.batch_size,
        "tokens per step": w.batch_size * w.block_size,
        "parameters": references[w.key].num_parameters(),
        "N for nanoGPT's formula (no position embeddings)":
            references[w.key].params_for_flops(),
        "in matmuls (no LayerNorm gains either)": references[w.key].matmul_params()}
        for w in workloads]).set_index("model").T


def slides_size_ratio() -> float:
    """How many times GPT-2 124M's parameters the slides' Shakespeare-char model has, inverted:
    the slides' two models' size ratio."""
    import torch

    from deepdive.models.gpt import GPT, GPTConfig

    with torch.device("meta"):
        return (GPT(GPTConfig(*NANOGPT["GPT-2 124M"][2])).num_parameters()
                / GPT(GPTConfig(*NANOGPT["Shakespeare-char 10.65M"][2])).num_parameters())


def port_table(reference, rows: int = 9):
    """Where the first PyTorch parameters live in the twin, and their layout change."""
    import pandas as pd

    from deepdive.models import gpt_jax

    return pd.DataFrame([{"PyTorch parameter": name,
                          "NNX path": ".".join(map(str, gpt_jax.nnx_path(name)[0])),
                          "layout change": gpt_jax.nnx_path(name)[1],
                          "shape (PyTorch)": tuple(p.shape)}
                         for name, p in reference.named_parameters()][:rows])


def draw_batches(w, corpus, count: int = 8) -> list:
    """`count` batches of (inputs, next-token targets) as NumPy arrays, drawn once: the
    character model reads the corpus, the other random ids over its vocabulary."""
    from deepdive.models import data

    tokens = corpus.tokens if w.vocab_size == corpus.vocab_size else (
        np.random.default_rng(0).integers(0, w.vocab_size, 200_000))
    stream = data.batches(tokens, w.batch_size, w.block_size, seed=1)
    return [next(stream) for _ in range(count)]


TWINS = {"eager": dict(attention="eager"),
         "dot_product_attention": dict(attention="dot_product_attention"),
         "dot_product_attention, tokens flattened": dict(attention="dot_product_attention",
                                                         flatten_tokens=True)}


def prove_gpt_twins(workloads, references, batches):
    """`parity.prove` (model, optimizer, training) for the eager-attention twin of every GPT,
    and the model part for the other two forms on the first. Returns (rows, loss curves)."""
    from deepdive.models import gpt_jax

    optimizers = [gpt_jax.optimizer_pair(parity.TRAJECTORY_ADAMW)]
    rows, curves = [], {}
    for i, w in enumerate(workloads):
        for twin_name, options in TWINS.items():
            model = gpt_twin(references[w.key], **options)
            if twin_name == "eager":  # all three parts
                curves[w.key] = {}
                proven = parity.prove(gpt_jax.family(), references[w.key], model, batches[w.key],
                                      optimizers=optimizers, hyper=gpt_jax.TRAINING,
                                      curves=curves[w.key])
            elif i == 0:  # the other forms of the twin: the model part, first GPT
                proven = parity.family_model_parity(gpt_jax.family(), references[w.key], model,
                                                    batches[w.key])
            else:
                continue
            rows += [{"model": w.name, "JAX twin": twin_name, **r} for r in proven]
    return rows, curves


def parity_numbers(table) -> dict:
    """The largest differences of the proof, for the prose."""
    diffs = table["max |PyTorch - JAX|"]
    quantity = diffs.index.get_level_values("quantity")
    return {"parity_logits": diffs[quantity == "logits"].max(),
            "parity_grads": diffs[quantity == "gradients"].max(),
            "parity_trajectory": diffs[quantity.str.contains("identical gradients")].max(),
            "parity_loss_curve": diffs[quantity.str.contains("loss curve")].max(),
            "parity_optimizer_steps": parity.OPTIMIZER_STEPS,
            "parity_training_steps": parity.TRAINING_STEPS,
            "loss_curve_atol": parity.TOLERANCES["loss curve"]["atol"]}


def plot_loss_curves(workloads, curves):
    """Both frameworks' loss curves per GPT, and their difference against the tolerance."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    fig, axes = plt.subplots(2, len(workloads), figsize=(4.6 * len(workloads), 5.2),
                             sharex=True, squeeze=False, height_ratios=[2, 1])
    for w, top, bottom in zip(workloads, axes[0], axes[1], strict=True):
        c = curves[w.key]
        steps = np.arange(1, len(c["PyTorch"]) + 1)
        top.plot(steps, c["PyTorch"], "o-", label="PyTorch", markersize=4)
        top.plot(steps, c["JAX"], "x--", label="JAX (NNX twin)", markersize=5)
        top.set(title=w.name, ylabel="training loss (nats)")
        top.legend()
        # A step whose two losses are bit-identical is drawn at 1e-9 (a log axis has no 0).
        bottom.semilogy(steps, np.maximum(np.abs(c["PyTorch"] - c["JAX"]), 1e-9), "k.-")
        bottom.axhline(parity.TOLERANCES["loss curve"]["atol"], color="C3", ls=":",
                       label="tolerance")
        bottom.set(xlabel="training step", ylabel="|PyTorch - JAX|\n(0 drawn at 1e-9)")
        bottom.legend(fontsize=8)
    plots.caption(fig, plots.build_note("fp32 strict",
                                        extra="nanoGPT's AdamW, clipped at 1.0, eight batches"))
    return fig


# --- the steps -----------------------------------------------------------------------------

def sdpa_kernels(reference, batch, device: str) -> str:
    """The attention kernels PyTorch's eager fp32 forward ran, from its profiler."""
    import torch

    model = copy.deepcopy(reference)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        model(*(torch.from_numpy(a).to(device) for a in batch))
    ops = sorted({e.key for e in profile.key_averages() if "attention" in e.key
                  and not e.key.endswith("scaled_dot_product_attention")})
    return " and ".join(ops) or "no fused kernel"


def adamw_text(device: str, foreach: bool) -> str:
    """How PyTorch's AdamW runs here."""
    if device == "cuda":
        return "its fused kernel"
    if foreach:
        return "multi-tensor (foreach) kernels"
    return ("one eager update per parameter tensor (on a CPU, PyTorch picks its multi-tensor "
            "kernels for CUDA tensors only), with gradient clipping also per tensor")


def analytic_step_flops(reference, w) -> float:
    """nanoGPT's 6N + 12LHQT per token, times the step's tokens."""
    from deepdive.core import flops

    cfg = reference.cfg
    return w.batch_size * w.block_size * flops.gpt_flops_per_token(
        reference.params_for_flops(), cfg.n_layer, cfg.n_head, cfg.head_dim, cfg.block_size)


def flop_table(workloads, references, batches, device: str):
    """Per GPT: the formula and its attention part beside FlopCounterMode's count of one real
    forward and backward, without and with the CPU attention formulas registered."""
    import pandas as pd
    import torch

    rows = []
    for w in workloads:
        ref = references[w.key]
        batch = tuple(torch.from_numpy(a).to(device) for a in batches[w.key][0])
        counted, counted_attention = counted_flops(ref, batch)
        with_cpu, cpu_attention = counted_flops(ref, batch, cpu_attention_mapping())
        tokens = w.batch_size * w.block_size
        rows.append({"model": w.name, "formula 6N + 12LHQT": analytic_step_flops(ref, w),
                     "  of which attention (12LHQT)":
                         12 * w.n_layer * w.n_embd * w.block_size * tokens,
                     "FlopCounterMode": counted, "  of which attention": counted_attention,
                     "6 x matmul parameters x tokens": 6 * ref.matmul_params() * tokens,
                     "FlopCounterMode, CPU attention formula added": with_cpu,
                     "  of which attention ": cpu_attention})
    return pd.DataFrame(rows).set_index("model")


def flop_numbers(table) -> dict:
    """The FLOPs section's numbers, for the prose."""
    formula, attention = table["formula 6N + 12LHQT"], table["  of which attention (12LHQT)"]
    return {"flop_matmuls_only": bool(
                (table["FlopCounterMode"] == table["6 x matmul parameters x tokens"]).all()),
            "flop_with_attention_ratio": " and ".join(
                f"{v:.3f} for {m}" for m, v in (
                    table["FlopCounterMode, CPU attention formula added"] / formula).items()),
            "flop_counter_attention_ratio": " and ".join(
                f"{v:.3f}" for v in table["  of which attention "] / attention),
            "flop_attention_share": " and ".join(
                f"{v:.1f}% for {m}" for m, v in (100 * attention / formula).items())}


MEMORY_TOOL = {"cpu": "peak RSS added by one step (VmHWM after malloc_trim, thread arenas "
                      "trimmed)",
               "cuda": "PyTorch: max_memory_allocated above the resident state; "
                       "JAX: XLA memory_analysis temp + output - alias"}


def step_memory_mib(step, framework: str, device: str) -> float:
    """What one more step adds (`memory.step_peak`), PyTorch's gradients counted as XLA's
    plan counts JAX's; NaN under CUDA graphs, whose private pool these counters miss."""
    from deepdive.core import memory

    if framework == "jax":
        return memory.step_peak("jax", device, step, step.plan).mib
    if step.cuda_graphs:
        return math.nan
    step.release_gradients()
    step.keep_gradients = True  # the reading counts the gradients; then they are freed
    try:
        return memory.step_peak("torch", device, lambda: step.release_gradients(step())).mib
    finally:
        step.keep_gradients = False


def gpt_step_row(w, label: str, step, timing, flops_per_step: float, peak, device: str) -> dict:
    """One configuration's row of the step table: time, throughput, MFU, compile, memory."""
    from deepdive.core import flops

    mode, precision = label.split(" · ")
    return {"model": w.name, "key": w.key, "framework": gpt_framework(mode), "mode": mode,
            "precision": precision, "timing": timing,
            "step median (ms)": 1e3 * timing.median, "IQR (ms)": 1e3 * timing.iqr,
            "tokens/s": w.batch_size * w.block_size / timing.median,
            "MFU (%)": 100 * flops.mfu(flops_per_step, timing.median, peak.flops_per_s,
                                       peak.source),
            "first step (s)": step.first_s,
            "compile (s)": max(step.first_s - timing.median, 0.0), "compile": step.compile_kind,
            "recompiles while timed": timing.recompiles,
            "memory (MiB)": step_memory_mib(step, gpt_framework(mode), device)}


# --- the claims ----------------------------------------------------------------------------

def decide_gpt_claims(claims, key: str, scope: str, t: dict, configs, precisions: dict,
                      tie_band, bf16_native: bool):
    """Every whole-step claim of one GPT from its one compare (`t`: label -> Timing):
    PyTorch against JAX (each side's best checked step, and mode for mode), tokens flattened
    against Flax's form, JAX's bf16 against its fp32, all against the band the fp32 A/A
    pair widened; and the slides' benchmark (each compiled PyTorch mode against eager, and
    eager bf16 against fp32) with the A/A copy of its baseline as its control. Returns
    (the widened band, {precision: {"torch": best mode, "jax": best mode}})."""
    from deepdive.core import verdict

    band = verdict.widen(tie_band, t["torch eager · fp32"], t["torch eager A/A copy · fp32"])
    best = {}
    for p, precision in precisions.items():
        modes = [m for m, q in configs if q == p and "A/A" not in m]
        where = f"{scope}, {precision.name}"
        eager = t[f"torch eager · {p}"]
        if any(gpt_framework(m) == "jax" for m in modes):
            labels = {fw: verdict.best_of(t, [f"{m} · {p}" for m in modes
                                              if gpt_framework(m) == fw])
                      for fw in ("torch", "jax")}
            best[p] = {fw: label.split(" · ")[0] for fw, label in labels.items()}
            if p == "fp32" or any(m in BENCHMARK_SLUGS for m in modes):
                claims.compare(f"{key}_{p}_jax_vs_torch",
                               f"{where}: JAX's best step ({best[p]['jax']}) against "
                               f"PyTorch's best ({best[p]['torch']})", t[labels["torch"]],
                               t[labels["jax"]], headline=True, band=band)
            claims.compare(f"{key}_{p}_jax_vs_eager", f"{where}: jax.jit "
                           "(dot_product_attention, Flax's dense) against torch eager (SDPA)",
                           eager, t[f"jax.jit · {p}"], band=band)
        if p == "fp32" or bf16_native:  # emulated bf16 carries no verdict
            for m in (m for m in modes if m in BENCHMARK_SLUGS):
                claims.compare(benchmark_claim_id(key, m, p), f"{where}: {m} against eager",
                               eager, t[f"{m} · {p}"], control=t[f"torch eager A/A copy · {p}"],
                               headline=(m == "torch.compile" and p == "fp32"))
    claims.compare(f"{key}_fp32_flat_vs_3d", f"{scope}, fp32 strict: jax.jit with tokens "
                   "flattened in the linear layers against jax.jit with Flax's dot over "
                   "(batch, time, features)", t["jax.jit · fp32"],
                   t["jax.jit, tokens flattened · fp32"], band=band)
    if bf16_native and "bf16" in precisions:
        claims.compare(f"{key}_bf16_eager", f"{scope}, torch eager: bf16 mixed against fp32 "
                       "strict", t["torch eager · fp32"], t["torch eager · bf16"],
                       control=t["torch eager A/A copy · fp32"])
        if "jax.jit · bf16" in t:
            claims.compare(f"{key}_jax_bf16_vs_fp32", f"{scope}: jax.jit in bf16 mixed "
                           "against fp32 strict", t["jax.jit · fp32"], t["jax.jit · bf16"],
                           band=band)
    return band, best


def aa_table(timings: dict, names: dict, tie_band, bands: dict):
    """Each GPT's A/A pairs (eager against its copy, per precision) beside the bands."""
    import pandas as pd

    from deepdive.core.timing import speedup

    rows = []
    for key, t in timings.items():
        for p in ("fp32", "bf16"):
            if f"torch eager A/A copy · {p}" not in t:
                continue
            ratio, low, high = speedup(t[f"torch eager · {p}"], t[f"torch eager A/A copy · {p}"])
            rows.append({"model": names[key], "precision": p, "A/A ratio": ratio,
                         "95% interval": f"[{low:.3f}, {high:.3f}]",
                         "build's band": f"±{tie_band.width:.3f}",
                         "band with the A/A reach (a noisy side may widen it)":
                             f"±{bands[key].width:.3f}"})
    return pd.DataFrame(rows).set_index(["model", "precision"])


def check_parts(parts: dict, references: dict, precision: GPTPrecision) -> None:
    """Every part of the taken-apart step against both fp32 references: a forward's loss,
    a backward's clipped gradients; raises AssertionError naming the part."""
    for label, part in parts.items():
        out = part()
        if label.endswith("two programs"):
            continue  # its parts are checked on their own
        if label.endswith("backward"):
            errors = [parity.worst_tensor_error(clipped(part.gradients()), r["gradients"],
                                                floor=GRADIENT_FLOOR)[0]
                      for r in references.values()]
            limit = precision.gradient_rtol
        else:
            loss = float(out.detach() if hasattr(out, "detach") else out)
            errors = [abs(loss - r["loss"]) / abs(r["loss"]) for r in references.values()]
            limit = precision.loss_rtol
        if max(errors) > limit:
            raise AssertionError(f"{label} disagrees with the fp32 references: {errors}")


def decide_part_claims(claims, key: str, scope: str, times: dict) -> None:
    """The breakdown's claims on the first GPT (the chapter's band)."""
    for part in ("forward", "backward"):
        claims.compare(f"{key}_fp32_{part}_jax_vs_torch", f"{scope}: the {part} pass alone, "
                       "jax.jit (dot_product_attention) against PyTorch eager (SDPA)",
                       times[f"PyTorch eager · {part}"], times[f"jax.jit · {part}"])
    flat = "jax.jit, tokens flattened"
    claims.compare(f"{key}_fp32_backward_flat_vs_3d", f"{scope}: JAX's backward pass with "
                   "tokens flattened in the linear layers against the dot over (batch, time, "
                   "features)", times["jax.jit · backward"], times[f"{flat} · backward"])
    claims.compare(f"{key}_fp32_one_vs_two_programs", f"{scope}: JAX's forward and backward "
                   "passes (tokens flattened) compiled as one program against the same passes "
                   "as two programs run in turn",
                   times[f"{flat} · forward and backward, two programs"],
                   times[f"{flat} · forward and backward, one program"])
    claims.compare(f"{key}_fp32_backward_flat_jax_vs_torch", f"{scope}: the backward pass "
                   "alone, jax.jit with tokens flattened against PyTorch eager",
                   times["PyTorch eager · backward"], times[f"{flat} · backward"])


def parts_table(times: dict, step_timings: dict):
    """Median ms per part and framework, their sum, and the whole step from the benchmark."""
    import pandas as pd

    table = pd.DataFrame([{"framework": label.split(" · ")[0], "part": label.split(" · ")[1],
                           "median (ms)": 1e3 * t.median} for label, t in times.items()]
                         ).pivot(index="framework", columns="part", values="median (ms)")
    table = table.loc[["PyTorch eager", "jax.jit", "jax.jit, tokens flattened"]]
    table["forward + backward (sum)"] = table["forward"] + table["backward"]
    mode = {"PyTorch eager": "torch eager"}
    table["whole step (benchmark's rounds)"] = [
        1e3 * step_timings[f"{mode.get(f, f)} · fp32"].median for f in table.index]
    return table


def backend_note(device: str, threads: int) -> str:
    """What the breakdown's verdicts are about."""
    if device == "cpu":
        return (f"These verdicts are about XLA's CPU backend and PyTorch's CPU kernels, with "
                f"{threads} thread{'s' if threads > 1 else ''} each: how XLA lays out a "
                "gradient's transposed matmuls decides them, and a GPU lays them out its own "
                "way.")
    return ("These verdicts are about this GPU's backends, XLA's and PyTorch's CUDA kernels, in "
            "these versions.")


def scope_note(device: str, threads: int) -> str:
    """What the chapter's verdicts can and cannot say."""
    if device == "cpu":
        return (f"They describe how the two frameworks' CPU backends train a small GPT with "
                f"{threads} thread{'s' if threads > 1 else ''} each, and say nothing about "
                "GPUs, where a medium or full build measures the same steps.")
    return ("They describe this GPU; another GPU, or a full build's larger models, may decide "
            "otherwise.")


# --- figures -------------------------------------------------------------------------------

def plot_steps(results, workloads):
    """Step time (median, IQR) and MFU per configuration, one bar per GPT."""
    import matplotlib.pyplot as plt

    from deepdive.book import plots

    first = results[results["key"] == workloads[0].key]
    labels = [f"{r.mode} · {r.precision}" for r in first.itertuples()]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.42 * len(labels) + 1.8), sharey=True)
    y = np.arange(len(labels))
    for ax, metric in zip(axes, ("step median (ms)", "MFU (%)"), strict=True):
        for i, w in enumerate(workloads):
            sub = results[results["key"] == w.key]
            values = sub[metric].to_numpy()
            offset = (i - (len(workloads) - 1) / 2) * 0.38
            err = None
            if metric.startswith("step"):
                err = [values - 1e3 * np.array([t.q1 for t in sub["timing"]]),
                       1e3 * np.array([t.q3 for t in sub["timing"]]) - values]
            ax.barh(y + offset, values, height=0.36, xerr=err, capsize=2, label=w.name)
        ax.set_yticks(y, labels, fontsize=8)
        ax.set(xlabel=metric, title="step time (median, IQR whiskers)" if metric.startswith(
            "step") else "MFU (nanoGPT's formula; peak per precision)")
    axes[0].invert_yaxis()
    axes[0].legend(fontsize=8, loc="upper center", bbox_to_anchor=(1.05, -0.12), ncol=2,
                   frameon=False)
    plots.caption(fig, plots.build_note("fp32 strict and bf16 mixed, as labelled",
                                        extra="attention: SDPA (PyTorch), XLA (JAX)"))
    return fig


def plot_claims(frame):
    """Every claim's speed-up with its 95% interval, coloured by verdict, over its band."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullFormatter

    from deepdive.book import plots
    from deepdive.core import verdict

    colors = {"faster": "C2", "slower": "C3", "tie": "C0", "withheld": "0.5"}
    fig, ax = plt.subplots(figsize=(9, 0.34 * len(frame) + 1.6))
    for i, c in enumerate(frame.itertuples()):
        ax.errorbar(c.ratio, i, xerr=[[c.ratio - c.low], [c.high - c.ratio]], fmt="o",
                    capsize=3, color=colors[c.verdict])
        width = getattr(c, "decision_band", c.tie_band)  # the band the verdict was decided
        band = verdict.TieBand(c.tie_band if width != width else width, ())  # against
        ax.plot([band.low, band.high], [i, i], color="0.8", lw=6, zorder=0,
                solid_capstyle="butt")
    ax.set_xscale("log")
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 3, 4)
             if frame["low"].min() / 1.2 <= t <= frame["high"].max() * 1.2]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(range(len(frame)), frame["claim_id"], fontsize=7)
    ax.invert_yaxis()
    ax.set(title="every claim: speed-up of the candidate over the baseline",
           xlabel="baseline time / candidate time (log; 95% interval; grey: the band the "
                  "verdict was decided against)")
    ax.legend(handles=[Patch(color="0.8", label="decision band"), *[
        Line2D([], [], marker="o", linestyle="", color=color, label=name)
        for name, color in colors.items()]], loc="upper center", bbox_to_anchor=(0.5, -0.12),
        ncol=5, fontsize=8, frameon=False)
    plots.caption(fig, plots.build_note("precision as named per claim",
                                        extra="questions in the table below"))
    return fig


def break_even_column(results, verdicts: dict) -> list[str]:
    """`break_even_text` for every row of the step table (`results`: one row per
    configuration with key, mode, precision, timing and compile (s)); `verdicts` maps
    claim ids to verdicts."""
    from deepdive.core.compilation import break_even_calls

    eager = {(r["key"], r["precision"]): r["timing"].median for _, r in results.iterrows()
             if r["mode"] == "torch eager"}
    out = []
    for _, r in results.iterrows():
        if r["mode"] not in BENCHMARK_SLUGS:
            out.append("")
            continue
        steps = break_even_calls(r["compile (s)"], eager[r["key"], r["precision"]],
                                 r["timing"].median)
        out.append(break_even_text(TORCH_MODES[r["mode"]], verdicts.get(
            benchmark_claim_id(r["key"], r["mode"], r["precision"])), steps))
    return out
