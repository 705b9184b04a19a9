"""The ViT chapter's helpers and readings ({ref}`ch-vit`, `notebooks/05_vit_training.md`).

The ViT benchmark's machinery: the precisions, the PyTorch and JAX training steps built from
the proven weights, their first-step checks against both fp32 references, the timed sweep's
records; and the readings that turn its measurements and verdicts into the page's sentences.
Names carry `vit` where another chapter has a step of its own."""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import math
import time
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ViTPrecision",
    "vit_precisions",
    "vit_matmul_precision",
    "vit_modes",
    "ViTBench",
    "compile_label",
    "summarize_row",
    "OP_KINDS",
    "op_kind",
    "bf16_claim_id",
    "adamw_reason",
    "attention_kernels",
    "memory_check_reading",
    "growth_caveat",
    "bf16_status",
    "bf16_reading",
    "loader_reading",
    "fused_other_batches",
    "nnx_sentence",
    "algoperf_rows",
    "published_anchors_path",
]

GRADIENT_FLOOR = 1e-3  # of the whole gradient's norm: a near-zero gradient is rounding noise


@dataclass(frozen=True)
class ViTPrecision:
    """One precision setting, applied explicitly on both sides, with the tolerances its
    variants' first step must meet against the fp32 references."""

    name: str
    torch_matmul: str  # torch.set_float32_matmul_precision
    jax_matmul: str  # jax.default_matmul_precision
    bf16_compute: bool
    peak_dtype: str  # which peak MFU is measured against
    loss_rtol: float
    gradient_rtol: float
    sgd_update_rtol: float


def vit_precisions(device: str, bf16_native: bool) -> dict[str, ViTPrecision]:
    """fp32 strict and bf16 mixed everywhere; TF32 on a GPU with native bf16 (both came with
    compute capability 8.0). Tolerances: fp32 sums in another order (~1e-6 measured); TF32
    keeps 10 mantissa bits, bf16 8, and a step chains hundreds of roundings; an SGD update
    is read as fp32 after - before, so one fp32 spacing of a weight may differ."""
    precisions = {
        "fp32": ViTPrecision("fp32 strict", "highest", "highest", False, "fp32",
                             1e-5, 1e-4, 1e-2),
        "bf16": ViTPrecision("bf16 mixed" + ("" if bf16_native else " (emulated)"), "highest",
                             "highest", True, "bf16", 1e-2, 5e-2, 1e-1),
    }
    if device == "cuda" and bf16_native:
        precisions["tf32"] = ViTPrecision("TF32", "high", "tensorfloat32", False, "tf32",
                                          1e-3, 1e-2, 5e-2)
    return precisions


@contextlib.contextmanager
def vit_matmul_precision(precision: ViTPrecision):
    """PyTorch's matmul (and cuDNN convolution) precision for one block, restored after."""
    import torch

    previous = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision(precision.torch_matmul)
    torch.backends.cudnn.allow_tf32 = precision.torch_matmul != "highest"
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous[0])
        torch.backends.cudnn.allow_tf32 = previous[1]


def vit_modes(device: str) -> tuple[dict, dict]:
    """The PyTorch modes (attention, torch.compile options or None) and the JAX modes
    (wrapper, attention); CUDA graphs (`reduce-overhead`) only on a GPU."""
    torch_modes = {"torch eager, eager attn": ("eager", None),
                   "torch eager, SDPA": ("sdpa", None),
                   "torch.compile, SDPA": ("sdpa", dict(dynamic=False)),
                   "torch.compile, eager attn": ("eager", dict(dynamic=False))}
    if device == "cuda":
        torch_modes["torch.compile reduce-overhead, SDPA"] = (
            "sdpa", dict(dynamic=False, mode="reduce-overhead"))
    jax_modes = {"nnx.jit": ("nnx.jit", "eager"),
                 "jax.jit split/merge": ("split/merge", "eager"),
                 "jax.jit split/merge, dot_product_attention": ("split/merge",
                                                                "dot_product_attention")}
    return torch_modes, jax_modes


def _vit_loss(model, images, labels):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(model(images), labels).mean()


def _vit_train_update(model, optimizer, images, labels):
    from flax import nnx

    loss, grads = nnx.value_and_grad(_vit_loss)(model, images, labels)
    optimizer.update(model, grads)
    return loss


class ViTBench:
    """The chapter's benchmark: HF's model `reference` and its proven NNX twin `twin`, on
    `device`. Builds each variant from the proven weights, checks its first step against
    both fp32 references, times the variants of one batch size together and keeps the rows
    (`runs`), the checks (`checks`) and the memory-tool checks (`memory_checks`)."""

    MEMORY_CHECK_MODE = "jax.jit split/merge"

    def __init__(self, config, reference, twin, device, precisions):
        from deepdive.models import vit

        self.config, self.reference, self.twin = config, reference, twin
        self.device, self.precisions = device, precisions
        self.torch_modes, self.jax_modes = vit_modes(device)
        self.proven = vit.hf_arrays_as_nnx((n, p.detach().cpu().numpy())
                                           for n, p in reference.named_parameters())
        self.checks, self.runs, self.memory_checks, self.timed = [], [], [], []
        self.inductor_started = []
        self.min_steps = 15

    def framework_of(self, mode: str) -> str:
        return "torch" if mode in self.torch_modes else "jax"

    # ---- the steps -------------------------------------------------------------------
    def torch_step(self, mode, precision, optimizer_name="adamw"):
        """A copy of the reference; loss on fp32 logits, backward, the optimizer. Gradients
        are cleared at the start, so after the first step they are there to be checked."""
        import torch
        import torch.nn.functional as F

        from deepdive.models import parity

        attention, compile_options = self.torch_modes[mode]
        model = copy.deepcopy(self.reference).to(self.device).train()
        model.set_attn_implementation(attention)
        optimizer = (parity.torch_sgd(model.parameters(), parity.SGD) if optimizer_name == "sgd"
                     else parity.torch_adamw(model.parameters(), parity.ADAMW))
        forward = model if compile_options is None else torch.compile(model, **compile_options)
        device = self.device

        def step(images, labels):
            optimizer.zero_grad(set_to_none=True)
            with vit_matmul_precision(precision):
                with torch.autocast(device, dtype=torch.bfloat16,
                                    enabled=precision.bf16_compute):
                    logits = forward(pixel_values=images).logits
                loss = F.cross_entropy(logits.float(), labels)
                loss.backward()
                optimizer.step()
            return loss

        step.model, step.optimizer = model, optimizer
        return step

    def jax_step(self, mode, precision, optimizer_name="adamw"):
        """The same loss and update, wrapped by `nnx.jit` or as a pure `jax.jit` function
        after `nnx.split`; both donate the state."""
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from deepdive.core import flops, memory
        from deepdive.models import parity, vit

        wrapper, attention = self.jax_modes[mode]
        model = vit.ViTForImageClassification(
            self.config, attention=attention,
            dtype=jnp.bfloat16 if precision.bf16_compute else jnp.float32,
            residual_dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
        vit.port_hf_weights(self.reference, model)
        transform = (parity.optax_sgd(parity.SGD) if optimizer_name == "sgd"
                     else parity.optax_adamw(parity.ADAMW))
        optimizer = nnx.Optimizer(model, transform, wrt=nnx.Param)
        if wrapper == "nnx.jit":
            train = nnx.jit(_vit_train_update, donate_argnums=(0, 1))

            def run(images, labels):
                return train(model, optimizer, images, labels)

            def objects():
                return model, optimizer

            def state_args():
                return model, optimizer
        else:
            graphdef, state = nnx.split((model, optimizer))

            @functools.partial(jax.jit, donate_argnums=0)
            def train(state, images, labels):
                model, optimizer = nnx.merge(graphdef, state)
                loss = _vit_train_update(model, optimizer, images, labels)
                return nnx.state((model, optimizer)), loss

            def run(images, labels):
                nonlocal state
                state, loss = train(state, images, labels)
                return loss

            def objects():
                return nnx.merge(graphdef, state)

            def state_args():
                return (state,)

        def step(images, labels):
            with jax.default_matmul_precision(precision.jax_matmul):
                return run(images, labels)

        step.objects = objects
        step.plan = lambda images, labels: memory.xla_memory_plan(
            train, *state_args(), images, labels)
        step.counted_flops = lambda images, labels: flops.xla_counted_flops(
            train, *state_args(), images, labels)
        return step

    # ---- data ------------------------------------------------------------------------
    def image(self, index):
        """The dataset's item `index`: a random NCHW image, the same on every call."""
        import torch

        size = self.config.image_size
        return torch.randn(3, size, size, generator=torch.Generator().manual_seed(index))

    def synthetic_batch(self, framework, batch_size):
        """Items 0..batch_size-1 on the device, NCHW for PyTorch, NHWC for JAX. A batch too
        large fails as its memory is reserved, before any image is drawn: the reservation is
        written (zeros), since untouched pages cost a CPU nothing, and since JAX 0.11
        `jnp.empty` returns uninitialised memory as `torch.empty` does."""
        import jax
        import jax.numpy as jnp
        import torch

        from deepdive.models import vit

        size = self.config.image_size
        if framework == "torch":
            images = torch.zeros((batch_size, 3, size, size), device=self.device)
        else:
            images = jax.block_until_ready(jnp.zeros((batch_size, size, size, 3)))
        del images
        nchw = torch.stack([self.image(i) for i in range(batch_size)])
        labels = np.arange(batch_size) % self.config.num_labels
        if framework == "torch":
            return nchw.to(self.device), torch.as_tensor(labels, device=self.device)
        return jax.block_until_ready((jnp.asarray(vit.nchw_to_nhwc(nchw.numpy())),
                                      jnp.asarray(labels)))

    def synthetic_feed(self, framework, batch_size):
        batch = self.synthetic_batch(framework, batch_size)
        while True:
            yield batch

    def loader_feed(self, framework, batch_size):
        """The seed's feed: a DataLoader in the main process over random images, NumPy
        collation and NHWC for JAX."""
        import jax
        import torch

        bench = self

        class RandomImages(torch.utils.data.Dataset):
            def __len__(self):
                return 1_000_000

            def __getitem__(self, index):
                item = bench.image(index)
                return ((item.permute(1, 2, 0) if framework == "jax" else item),
                        index % bench.config.num_labels)

        def numpy_collate(items):
            return (np.stack([image.numpy() for image, _ in items]),
                    np.array([label for _, label in items]))

        loader = torch.utils.data.DataLoader(
            RandomImages(), batch_size=batch_size,
            collate_fn=numpy_collate if framework == "jax" else None,
            pin_memory=self.device == "cuda")
        for images, labels in loader:
            if framework == "torch":
                yield (images.to(self.device, non_blocking=True),
                       labels.to(self.device, non_blocking=True))
            else:
                yield jax.device_put(images), jax.device_put(labels)

    # ---- the first-step check --------------------------------------------------------
    @functools.cache  # noqa: B019 - one bench per page, kept for the page's life
    def references(self, batch_size):
        """Loss and gradients of both proven fp32 models on the synthetic batch."""
        import torch.nn.functional as F
        from flax import nnx

        from deepdive.models import vit

        images, labels = self.synthetic_batch("torch", batch_size)
        twin = copy.deepcopy(self.reference).to(self.device).train()
        with vit_matmul_precision(self.precisions["fp32"]):
            loss = F.cross_entropy(twin(pixel_values=images).logits, labels)
            loss.backward()
        torch_ref = {"loss": loss.item(), "gradients": vit.hf_arrays_as_nnx(
            (n, p.grad.cpu().numpy()) for n, p in twin.named_parameters())}
        jax_images, jax_labels = self.synthetic_batch("jax", batch_size)
        jax_loss, grads = nnx.jit(nnx.value_and_grad(_vit_loss))(self.twin, jax_images,
                                                                  jax_labels)
        jax_ref = {"loss": float(jax_loss), "gradients": {
            path: np.asarray(v[...]) for path, v in nnx.to_flat_state(grads)}}
        return {"torch": torch_ref, "jax": jax_ref}

    def first_step_values(self, framework, step, optimizer_name):
        """Gradients (AdamW: first moment / (1 - b1)) or the SGD update, keyed by NNX path."""
        from flax import nnx

        from deepdive.models import parity, vit

        if framework == "torch":
            named = list(step.model.named_parameters())
            if optimizer_name == "adamw":
                arrays = ((n, step.optimizer.state[p]["exp_avg"].cpu().numpy())
                          for n, p in named)
            else:
                arrays = ((n, p.detach().cpu().numpy()) for n, p in named)
            values = vit.hf_arrays_as_nnx(arrays)
        else:
            model, optimizer = step.objects()
            state = (optimizer.opt_state[0].mu if optimizer_name == "adamw"
                     else nnx.state(model, nnx.Param))
            values = {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(state)}
        if optimizer_name == "adamw":
            return {path: v / (1 - parity.ADAMW["b1"]) for path, v in values.items()}
        return {path: v.astype(np.float64) - self.proven[path] for path, v in values.items()}

    def sgd_update_in_fp32(self, path, gradient):
        """The reference's SGD update as it lands on fp32 weights: near 1.0 (LayerNorm
        scales) the spacing of fp32 numbers is as large as a whole step of lr x gradient."""
        from deepdive.models import parity

        after = self.proven[path] - np.float32(parity.SGD["lr"]) * gradient.astype(np.float32)
        return after.astype(np.float64) - self.proven[path]

    def check_first_step(self, variant, framework, step, loss, batch_size, precision,
                         optimizer_name):
        """Compare a variant's first step with both fp32 references; raise when it
        disagrees."""
        from deepdive.models.parity import worst_tensor_error

        values = self.first_step_values(framework, step, optimizer_name)
        row = {"variant": variant, "batch": batch_size}
        adamw = optimizer_name == "adamw"
        quantity = "gradients" if adamw else "SGD update"
        tolerance = precision.gradient_rtol if adamw else precision.sgd_update_rtol
        passed = True
        for side, ref in self.references(batch_size).items():
            expected = (ref["gradients"] if adamw else
                        {p: self.sgd_update_in_fp32(p, g) for p, g in ref["gradients"].items()})
            loss_error = abs(loss - ref["loss"]) / abs(ref["loss"])
            error, where = worst_tensor_error(values, expected, floor=GRADIENT_FLOOR)
            name = "PyTorch" if side == "torch" else "JAX"
            row |= {f"loss vs {name}": loss_error, f"{quantity} vs {name}": error,
                    f"worst tensor vs {name}": where}
            passed &= loss_error <= precision.loss_rtol and error <= tolerance
        row["tolerance (loss, gradients)"] = f"{precision.loss_rtol:g}, {tolerance:g}"
        row["passed"] = passed
        self.checks.append(row)
        if not passed:
            raise AssertionError(f"{variant} at batch {batch_size} disagrees with the fp32 "
                                 f"references: {row}")

    # ---- building, timing, recording -------------------------------------------------
    def compile_kind(self, mode, graphs_before, hits_before):
        """What the first step compiled: a new XLA program, none, or Inductor's cold
        start, a new graph, a cache hit or a reuse (from Dynamo's counters)."""
        from torch._dynamo.utils import counters

        if self.framework_of(mode) == "jax":
            return "new XLA program (XLA already started)"
        if self.torch_modes[mode][1] is None:
            return "none (eager)"
        graphs = counters["stats"]["unique_graphs"] - graphs_before
        hits = (counters["inductor"]["fxgraph_cache_hit"]
                + counters["aot_autograd"]["autograd_cache_hit"] - hits_before)
        kind = compile_label(graphs, hits, bool(self.inductor_started))
        self.inductor_started.append(mode)
        return kind

    def build(self, mode, precision_key, batch_size, feed=None, optimizer_name="adamw"):
        """One configuration from the proven weights: its first step timed (compilation
        included) and checked; out of memory becomes an `OutOfMemory` result."""
        from torch._dynamo.utils import counters

        from deepdive.core import memory
        from deepdive.core.timing import OutOfMemory

        framework, precision = self.framework_of(mode), self.precisions[precision_key]
        counts = (counters["stats"]["unique_graphs"],
                  counters["inductor"]["fxgraph_cache_hit"]
                  + counters["aot_autograd"]["autograd_cache_hit"])
        try:
            batches = (feed or self.synthetic_feed)(framework, batch_size)
            step = (self.torch_step if framework == "torch" else self.jax_step)(
                mode, precision, optimizer_name)
            first = next(batches)
            start = time.perf_counter()
            loss = step(*first)
            loss = float(loss.detach() if framework == "torch" else loss)  # waits for it
            step.first_call = time.perf_counter() - start
        except Exception as error:
            if not memory.is_out_of_memory(error):
                raise
            return OutOfMemory(mode, str(error).split("\n")[0])
        step.compile_kind = self.compile_kind(mode, *counts)
        label = f"{mode} · {precision_key}" + ("" if optimizer_name == "adamw" else " · SGD")
        self.check_first_step(label, framework, step, loss, batch_size, precision,
                              optimizer_name)
        step.run = lambda: step(*next(batches))
        step.batch, step.framework, step.mode = first, framework, mode
        step.precision = precision_key
        return step

    def step_memory_mib(self, step):
        """What one more step adds: CUDA's peak for PyTorch, XLA's plan for JAX on a GPU,
        the host's high-water mark (thread arenas trimmed) on a CPU."""
        from deepdive.core import memory

        if self.device == "cuda" and step.framework == "torch":
            return memory.torch_cuda_peak(step.run).mib
        if self.device == "cuda":
            plan = step.plan(*step.batch)
            return (plan["temp"] + plan["output"] - plan["alias"]) / 2**20
        return memory.host_call_peak(step.run, thread_arenas=True).mib

    def time_and_record(self, experiment, steps, batch_size, feed="synthetic"):
        """Time the built steps in one compare() call, then read each one's memory (the
        tool check's plain reading before any trimming)."""
        from deepdive.core import memory
        from deepdive.core.timing import OutOfMemory, compare

        ready = {label: s for label, s in steps.items() if not isinstance(s, OutOfMemory)}
        timings = compare({label: s.run for label, s in ready.items()},
                          min_calls=self.min_steps, record_oom=True) if ready else {}

        def checked_mode(s):
            return (getattr(s, "mode", None) == self.MEMORY_CHECK_MODE
                    and s.precision == "fp32" and self.device == "cpu")

        for label, s in sorted(steps.items(), key=lambda item: not checked_mode(item[1])):
            result = s if isinstance(s, OutOfMemory) else timings[label]
            mode, precision = label.split(" · ")[:2]
            row = dict(experiment=experiment, label=label, framework=self.framework_of(mode),
                       mode=mode, precision=precision, batch=batch_size, feed=feed,
                       timing=result, memory_mib=math.nan, compile_kind="",
                       first_call=math.nan)
            self.runs.append(row)
            if isinstance(result, OutOfMemory):
                continue
            self.timed.append(result)
            row.update(first_call=s.first_call, compile_kind=s.compile_kind)
            if experiment != "sweep":
                continue
            if checked_mode(s):
                plan = s.plan(*s.batch)
                self.memory_checks.append({
                    "batch": batch_size,
                    "XLA plan: temp + output - alias (MiB)":
                        (plan["temp"] + plan["output"] - plan["alias"]) / 2**20,
                    "host_call_peak (MiB)": memory.host_call_peak(s.run).mib})
            row["memory_mib"] = self.step_memory_mib(s)
            if checked_mode(s):
                self.memory_checks[-1]["host_call_peak, thread arenas trimmed (MiB)"] = (
                    row["memory_mib"])
        return {label: s if isinstance(s, OutOfMemory) else timings[label]
                for label, s in steps.items()}

    def release_memory(self):
        import torch

        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()


def compile_label(new_graphs: int, cache_hits: int, inductor_warm: bool) -> str:
    """The kind of a torch.compile first step, from Dynamo's and Inductor's counters."""
    if new_graphs == 0:
        return "reused: graph compiled earlier in this run"
    if cache_hits:
        return "cache hit: kernels compiled earlier in this run"
    if inductor_warm:
        return "new graph (Inductor already warm)"
    return "cold: Inductor's first compile in this run"




def summarize_row(row: dict, peaks: dict, flops_per_image: float) -> dict:
    """One timed row as the tables show it: step time, throughput, MFU, compile, memory."""
    from deepdive.core import flops
    from deepdive.core.timing import OutOfMemory

    t = row["timing"]
    if isinstance(t, OutOfMemory):
        return {"OOM": True}
    peak = peaks[row["precision"] if row["precision"] in peaks else "fp32"]
    return {"step median (ms)": t.median * 1e3, "IQR (ms)": t.iqr * 1e3,
            "images/s": row["batch"] / t.median,
            "MFU (%)": 100 * flops.mfu(flops_per_image * row["batch"], t.median,
                                       peak["peak FLOP/s"], peak["source"]),
            "compile (s)": max(row["first_call"] - t.median, 0.0),
            "compile": row["compile_kind"], "recompiles": t.recompiles, "noisy": t.noisy,
            "OOM": False, "memory (MiB)": row["memory_mib"]}



# ---- the profile's operator kinds ---------------------------------------------------------
OP_KINDS = {"matmuls": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
            "attention (SDPA)": tuple(
                f"aten::_scaled_dot_product_{kernel}{suffix}"
                for kernel in ("flash_attention_for_cpu", "efficient_attention",
                               "flash_attention", "cudnn_attention")
                for suffix in ("", "_backward")),
            "convolution": ("aten::mkldnn_convolution", "aten::convolution_backward",
                            "aten::cudnn_convolution"),
            "casts": ("aten::_to_copy", "aten::copy_")}


def op_kind(name: str) -> str:
    """The kind of a profiled operator: one of `OP_KINDS`, or "other"."""
    return next((kind for kind, names in OP_KINDS.items() if name in names), "other")


def bf16_claim_id(mode: str) -> str:
    """The claim id of a mode's bf16-against-fp32 claim: "bf16_" and the mode's name with
    every run of other characters made one underscore (at most doubled ones collapse)."""
    claim_id = "bf16_" + "".join(c if c.isalnum() else "_" for c in mode).strip("_")
    return claim_id.replace("__", "_")


# ---- readings: sentences glued into the prose ------------------------------------------
def adamw_reason(impl: str) -> str:
    """Why torch.optim.AdamW resolved to `impl` here."""
    return {"for-loop (single-tensor)": "on a CPU, foreach=None resolves to the for-loop: "
            "PyTorch picks its multi-tensor kernels only for CUDA tensors",
            "foreach (multi-tensor)": "on CUDA tensors, foreach=None resolves to the "
            "multi-tensor kernels, a few launches for all parameters"}.get(impl, "as configured")


def attention_kernels(device: str) -> tuple[str, str]:
    """What dot_product_attention (without implementation=) and SDPA run on `device`."""
    return {"cpu": ("XLA's reference path on CPU", "PyTorch's CPU flash kernel"),
            "cuda": ("XLA's reference path, not cuDNN", "PyTorch's fused GPU kernel")}[device]


def memory_check_reading(plain_share: dict, trimmed_share: dict) -> str:
    """The memory tool's check against XLA's plan, per batch: plain and trimmed readings
    as shares of the plan; below 0.8 a reading missed the plan."""
    if not plain_share:
        return ("On a GPU the JAX reading is XLA's plan itself, so there is no independent "
                "check to show.")
    missed = [b for b, share in plain_share.items() if share < 0.8]
    unrecovered = [b for b in missed if trimmed_share[b] < 0.8]
    text = (f"Against XLA's plan, the plain reading came to {min(plain_share.values()):.2f} "
            f"to {max(plain_share.values()):.2f} times it, and with thread arenas trimmed "
            f"{min(trimmed_share.values()):.2f} to {max(trimmed_share.values()):.2f}. ")
    if not missed:
        return text + "Both readings agreed with the plan on this build."
    text += (f"The plain reading missed most of the plan at batch {', '.join(map(str, missed))}"
             ", as if a step there needed almost nothing; ")
    if not unrecovered:
        return text + "trimming recovered it."
    return text + (f"trimming did not recover it at batch {', '.join(map(str, unrecovered))}, "
                   "so there a host reading cannot stand for a JAX step's memory on a CPU, "
                   "and the memory figure's JAX points at that size understate it.")


def growth_caveat(small: int, large: int, jax_growth, torch_growth) -> str:
    """How the compiled-API steps' median times grew from `small` to `large` images; empty
    when the batches are the same or either side ran out of memory (growth None)."""
    if small == large or jax_growth is None or torch_growth is None:
        return ""
    return (f"From batch {small} to batch {large} ({large // small} times the images) the "
            f"JAX step's median time grew {jax_growth:.1f} times and the PyTorch step's "
            f"{torch_growth:.1f} times.")


def bf16_status(device: str, bf16_native: bool, rates: dict | None = None) -> str:
    """What bf16 is on this build. `rates`: framework -> (bf16, fp32) matmul GFLOP/s,
    for a CPU with bf16 instructions."""
    if bf16_native and device == "cpu":
        said = {fw: f"{bf16:.1f} against {fp32:.1f}" for fw, (bf16, fp32) in rates.items()}
        return ("native: the CPU has bf16 instructions, so bf16 rows carry verdicts. The "
                f"measured matmul rates, bf16 against fp32, were {said['PyTorch']} GFLOP/s in "
                f"PyTorch and {said['JAX']} GFLOP/s in JAX, so each framework's bf16 rows say "
                "what its own CPU backend makes of bf16, and the bf16 MFU of every row, JAX's "
                "included, is against the higher of the two bf16 rates (the peak table above "
                "names whose)")
    if bf16_native:
        return "native on this GPU"
    if device == "cpu":
        return ("emulated: this CPU has no bf16 instructions, so the bf16 rows are labelled "
                "'(emulated)' and carry no speed verdict")
    return ("emulated: this GPU has no native bf16 (compute capability below 8.0), so the "
            "bf16 rows are labelled '(emulated)' and carry no speed verdict, and "
            "torch.compile's bf16 row is not run (Inductor refuses bf16 there)")


def bf16_reading(profile, eager_ratio: float, device: str, bf16_native: bool,
                 head_size: int) -> str:
    """The bf16 profile read: `profile` has rows per operator kind (and "other"), columns
    "fp32" and "bf16" in ms; `eager_ratio` is the eager SDPA step's fp32 / bf16 time."""
    extra = (profile["bf16"] - profile["fp32"]).drop("other")
    most = extra.idxmax()
    changes = ", ".join(f"{kind} {profile.loc[kind, 'bf16'] / profile.loc[kind, 'fp32']:.2f}x"
                        for kind in OP_KINDS if profile.loc[kind, "fp32"] > 0)
    text = (f"On this {'GPU' if device == 'cuda' else 'CPU'} the eager SDPA step's fp32 time "
            f"was {eager_ratio:.2f} times its bf16 time"
            + (" (below 1: bf16 took longer)" if eager_ratio < 1 else "")
            + f". Operator time in bf16 against fp32, by kind: {changes}. The largest change "
            f"was in {most}, {extra[most]:+.1f} ms, while the whole profiled step's operator "
            f"time changed by {profile['bf16'].sum() - profile['fp32'].sum():+.1f} ms")
    if most == "attention (SDPA)" and device == "cpu":
        text += (f". PyTorch's CPU flash-attention kernels run bf16 (here at head size "
                 f"{head_size}) far below their fp32 speed, while its bf16 matmuls, with the "
                 "CPU's bf16 instructions, gain")
    if not bf16_native:
        text += "; without bf16 instructions, each bf16 operation is moreover converted to "
        text += "fp32 and back"
    return text


def loader_reading(verdicts: dict) -> str:
    """What the DataLoader cost, from the loader claims' verdicts (framework -> verdict)."""
    names = {"torch": "PyTorch", "jax": "JAX"}
    costly = [f for f, v in verdicts.items() if v == "slower"]
    open_ = [f for f, v in verdicts.items() if v == "withheld"]
    if costly:
        return ("Where the loader-fed step took longer (" + ", ".join(names[f] for f in costly)
                + "), random images made one by one in the main process were work the step "
                "waited for; workers (num_workers) or a device-side pipeline hide it.")
    if open_:
        return ("On this build the loader's cost was " + " and ".join(
            f"{names[f]}: {v}" for f, v in verdicts.items()) + "; a withheld verdict leaves "
            "the cost unresolved at this build's band, not absent. With larger "
            "images or a real decoding pipeline, work done in the main process is time the "
            "step waits for, which workers (num_workers) or a device-side pipeline hide.")
    return ("On this build the loader showed no measurable cost ("
            + ", ".join(f"{names[f]}: {v}" for f, v in verdicts.items()) + "). With larger "
            "images or a real decoding pipeline, work done in the main process is time the "
            "step waits for, which workers (num_workers) or a device-side pipeline hide.")


def fused_other_batches(glued: dict, batches, ref_batch: int) -> str:
    """The compiled-API pairing's verdicts at the batch sizes other than `ref_batch`."""
    return " ".join(
        f"At batch {b}, with each framework's compiled attention API, jax.jit with "
        f"dot_product_attention was {glued[f'fused_jax_vs_torch_b{b}']} torch.compile with SDPA "
        f"({glued[f'fused_jax_vs_torch_b{b}_ratio']})."
        for b in batches if b != ref_batch and f"fused_jax_vs_torch_b{b}" in glued)


def nnx_sentence(glued: dict, batches) -> str:
    """split/merge against nnx.jit at every batch size that has a claim."""
    parts = [f"at batch {b}, the split/merge step was {glued[f'split_vs_nnx_b{b}']} nnx.jit "
             f"({glued[f'split_vs_nnx_b{b}_ratio']})" for b in batches
             if f"split_vs_nnx_b{b}" in glued]
    if not parts:
        return ""
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def published_anchors_path():
    """`book/data/published_anchors.csv`: under the book's root found from the working
    directory, else beside this package's source tree (nbconvert runs a copied notebook)."""
    from pathlib import Path

    from deepdive.core.env import book_root

    for root in (book_root(), Path(__file__).resolve().parents[3]):
        path = root / "book" / "data" / "published_anchors.csv"
        if path.is_file():
            return path
    raise FileNotFoundError("book/data/published_anchors.csv is not under the book's root")


def algoperf_rows(anchors=None):
    """AlgoPerf's ViT seconds per step from `published_anchors.csv` (pull request 892), labelled
    with their hardware and source, indexed by variant; `anchors` defaults to the book's."""
    if anchors is None:
        import pandas as pd

        anchors = pd.read_csv(published_anchors_path())
    rows = anchors[(anchors["source_key"] == "algoperf-pr892")
                   & anchors["workload"].str.contains("imagenet_vit")
                   & (anchors["metric"] == "s per step")]
    if rows.empty:
        raise ValueError("published_anchors.csv has no AlgoPerf ViT rows (algoperf-pr892)")
    table = rows.set_index("variant")[["value", "unit", "hardware"]]
    return table.rename(columns={"value": "time per step"}).assign(
        source="MLCommons AlgoPerf, pull request #892")
