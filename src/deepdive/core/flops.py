"""FLOPs: analytic formulas, framework counters as cross-checks, peaks, and MFU.

MFU = analytic FLOPs per step / median step time / peak FLOP/s for that device and
dtype. Peaks come from datasheets (dense, no sparsity) for known GPUs; an unknown
device raises rather than guess. On a CPU the peak is measured (`measured_matmul_peak`,
the best rate over several matmul shapes) and the book says so. An MFU above 1 is a
wrong peak or a wrong FLOP count, never a result: `mfu` raises. Chapter 1 introduces the
matmul count; chapters 4 and 5 use MFU.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["DTYPES", "MEASURED", "PEAK_SHAPES", "NoDatasheetPeak", "Peak", "bf16_is_native",
           "build_peak", "datasheet_key", "device_peak", "gpt_flops_per_token", "jax_matmul_rate",
           "matmul_flops", "measured_copy_bandwidth", "measured_cuda_peak", "measured_matmul_peak",
           "mfu", "peak_flops", "torch_counted_flops", "vit_flops_per_image", "xla_counted_flops"]

DTYPES = ("fp32", "tf32", "bf16", "fp16")
# How a measured peak's source begins, so a page can tell it from a datasheet's.
MEASURED = "measured on this machine"

# Dense TFLOP/s by device and dtype; None where the part has no tensor-core path for the
# dtype (Turing: no TF32, no BF16). Where a datasheet prints only figures "with sparsity",
# they are halved, as its own footnote says. A10G (AWS) has no published figures: it
# gets a measured peak (device_peak).
_PEAKS_TFLOPS = {
    "T4": ({"fp32": 8.1, "tf32": None, "bf16": None, "fp16": 65},
           "NVIDIA T4 datasheet (FP16 is mixed precision; Turing has no TF32 or BF16 "
           "tensor cores)"),
    "L4": ({"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121},
           "NVIDIA L4 datasheet (sparsity figures halved)"),
    "A10": ({"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125},
            "NVIDIA A10 datasheet"),
    "L40S": ({"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05},
             "NVIDIA L40S datasheet"),
    "A100": ({"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
             "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe)"),
    "H100 SXM": ({"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
                 "NVIDIA H100 datasheet, SXM5 (sparsity figures halved)"),
    "H100 PCIe": ({"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756},
                  "NVIDIA H100 datasheet, PCIe (sparsity figures halved)"),
    "H100 NVL": ({"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
                 "NVIDIA H100 NVL datasheet, per GPU (sparsity figures halved)"),
    "H200 SXM": ({"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
                 "NVIDIA H200 datasheet, SXM (sparsity figures halved)"),
    "H200 NVL": ({"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
                 "NVIDIA H200 datasheet, NVL (sparsity figures halved)"),
    "B200": ({"fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250},
             "NVIDIA HGX B200 datasheet specifications, per GPU (sparsity figures halved)"),
}


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an (m x k) @ (k x n) matmul: one multiply and one add per term, 2mkn."""
    for name, value in (("m", m), ("k", k), ("n", n)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return 2 * m * k * n


def gpt_flops_per_token(n_params: int, n_layer: int, n_head: int, head_dim: int,
                        seq_len: int) -> int:
    """Training FLOPs per token of a GPT, forward and backward: 6N + 12·L·H·Q·T.

    The PaLM paper's formula (Appendix B), as nanoGPT's `estimate_mfu` uses it: 6N for
    the weight matmuls, 12·L·H·Q·T for attention scores and values.
    """
    return 6 * n_params + 12 * n_layer * n_head * head_dim * seq_len


def vit_flops_per_image(n_params: int, n_layer: int, n_head: int, head_dim: int,
                        n_tokens: int) -> int:
    """Training FLOPs per image of a ViT: the same per-token formula times its tokens.

    `n_tokens` is patches plus the class token; attention is not causal, so every
    token attends to all `n_tokens`.
    """
    return n_tokens * gpt_flops_per_token(n_params, n_layer, n_head, head_dim, n_tokens)


class NoDatasheetPeak(ValueError):
    """The table has no figure for this device, or the device lacks this dtype's path."""


def peak_flops(device_name: str, dtype: str) -> tuple[float, str]:
    """Datasheet peak FLOP/s of a known GPU for `dtype`, and its source.

    `device_name` is what the driver reports ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB
    HBM3", ...). Raises ValueError for an unknown dtype, and NoDatasheetPeak (a ValueError)
    for a device the table does not hold or a dtype the device has no tensor cores for;
    `device_peak` falls back to a measured peak there.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not known; accepted: {', '.join(DTYPES)}")
    key = datasheet_key(device_name)
    if key is None:
        raise NoDatasheetPeak(
            f"no datasheet peak for device {device_name!r}; known devices: "
            f"{', '.join(_PEAKS_TFLOPS)}. For a CPU use measured_matmul_peak() and say so."
        )
    peaks, source = _PEAKS_TFLOPS[key]
    if peaks[dtype] is None:
        raise NoDatasheetPeak(f"{key} has no {dtype} tensor-core path ({source})")
    return peaks[dtype] * 1e12, source


def device_peak(device_name: str, dtype: str, measure: Callable[[str], Peak] | None = None
                ) -> Peak:
    """The peak to divide by for MFU on `device_name`: the datasheet's where the table has
    one, else this device's measured matmul peak, labelled as measured and saying why.
    Never raises for a device it does not know (an invalid dtype is still an error).

    `measure(dtype)` returns a measured Peak; by default a torch matmul on the GPU, with
    fp32 standing in for tf32 (the rate is then whatever torch's matmul settings allow).
    """
    try:
        value, source = peak_flops(device_name, dtype)
    except NoDatasheetPeak as missing:
        measured = (measure or measured_cuda_peak)(dtype)
        return Peak(measured.flops_per_s, dtype, f"{measured.source}; {missing}")
    return Peak(value, dtype, f"datasheet: {source}")


def measured_cuda_peak(dtype: str) -> Peak:
    """This GPU's best torch matmul rate for `dtype` (fp32 standing in for tf32), as a
    Peak: what `device_peak` divides by where the datasheet table has no figure."""
    measured = measured_matmul_peak("fp32" if dtype == "tf32" else dtype, device="cuda")
    return Peak(measured.flops_per_s, dtype, measured.source)


def datasheet_key(device_name: str) -> str | None:
    """The datasheet table's row for a device name (`torch.cuda.get_device_name()`), e.g.
    "H100 SXM", or None where the table has none."""
    name = device_name.upper()
    for family in ("H100", "H200"):  # NVL parts have their own, lower peaks
        if family in name:
            return (f"{family} NVL" if "NVL" in name else
                    f"{family} PCIe" if family == "H100" and "PCIE" in name else f"{family} SXM")
    for key, pattern in (("A100", r"A100"), ("B200", r"\bB200\b"), ("L40S", r"\bL40S\b"),
                         ("L4", r"\bL4\b"), ("T4", r"\bT4\b"), ("A10", r"\bA10\b")):
        if re.search(pattern, name):
            return key
    return None


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float,
        peak_source: str = "the given peak") -> float:
    """Model FLOPs utilisation, a fraction: flops_per_step / step_time_s / peak.

    Raises when the result exceeds 1, naming the peak: either that peak is not this
    device's (a measured one taken on too few shapes or threads) or the FLOPs are
    overcounted. Printing it would be nonsense.
    """
    for name, value in (("flops_per_step", flops_per_step), ("step_time_s", step_time_s),
                        ("peak_flops_per_s", peak_flops_per_s)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    utilisation = flops_per_step / step_time_s / peak_flops_per_s
    if utilisation > 1:
        raise ValueError(
            f"MFU {utilisation:.2f} exceeds 1 against a peak of "
            f"{peak_flops_per_s / 1e12:.4g} TFLOP/s ({peak_source}): the peak is too low "
            "for this device, or the FLOP count is too high"
        )
    return utilisation


def torch_counted_flops(fn: Callable, *args) -> int:
    """FLOPs PyTorch's `FlopCounterMode` counts for ``fn(*args)`` (matmuls, convs, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn(*args)
    return counter.get_total_flops()


def xla_counted_flops(jitted: Callable, *args) -> float:
    """FLOPs XLA's `cost_analysis()` reports for the compiled ``jitted(*args)``."""
    if not hasattr(jitted, "lower"):
        raise TypeError(f"xla_counted_flops needs a jax.jit-wrapped function; got {jitted!r}")
    cost = jitted.lower(*args).compile().cost_analysis()
    if isinstance(cost, list):  # older jaxlib returned one dict per device
        cost = cost[0]
    return float(cost["flops"])


# (m, k, n) shapes for the measured CPU peak: square ones around the cache sizes, and the
# tall-skinny shapes of a transformer's linear layers (tokens x width x 4 width).
PEAK_SHAPES = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 256, 1024),
               (4096, 128, 512))


@dataclass(frozen=True)
class Peak:
    """A peak FLOP/s and where it came from (datasheet, or which measured matmul)."""

    flops_per_s: float
    dtype: str
    source: str


def measured_matmul_peak(dtype: str = "fp32", device: str = "cpu",
                         shapes: Sequence[tuple[int, int, int]] = PEAK_SHAPES) -> Peak:
    """This machine's best achieved matmul FLOP/s with PyTorch over `shapes`, timed synced.

    A measured peak, not a datasheet one: use it for CPU MFU and label it as measured
    (its `source` says so and names the best shape). Taking the best over several shapes
    matters: one square size can be slower than the shapes a model runs, and MFU would
    then pass 1. Run it with the thread count the measured work uses.
    """
    import torch

    from deepdive.core.timing import measure

    torch_dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype not in torch_dtypes:
        raise ValueError(f"dtype {dtype!r} is not measurable here; accepted: {list(torch_dtypes)}")
    if not shapes:
        raise ValueError("shapes must name at least one (m, k, n) matmul")
    rates = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, dtype=torch_dtypes[dtype], device=device)
        b = torch.randn(k, n, dtype=torch_dtypes[dtype], device=device)
        timing = measure(torch.mm, a, b, label=f"{m}x{k}x{n} {dtype} matmul")
        rates[(m, k, n)] = matmul_flops(m, k, n) / timing.median
    (m, k, n), best = max(rates.items(), key=lambda item: item[1])
    shapes_tried = f"over {len(rates)} shapes ({m}x{k}x{n})"
    return Peak(best, dtype, f"{MEASURED}: best {dtype} torch.mm rate {shapes_tried}")


def jax_matmul_rate(dtype: str = "fp32", n: int = 1024, device: str | None = None) -> float:
    """JAX's achieved FLOP/s on one jitted (n x n) @ (n x n) matmul, timed synced, at the
    default matmul precision in force (set "highest" for strict fp32), on JAX's default
    device or on `device` ("cpu": its CPU, also on a GPU build)."""
    import jax
    import jax.numpy as jnp

    from deepdive.core.timing import measure

    dtypes = {"fp32": jnp.float32, "bf16": jnp.bfloat16}
    if dtype not in dtypes:
        raise ValueError(f"dtype {dtype!r} is not measurable here; accepted: {list(dtypes)}")
    if device not in (None, "cpu"):
        raise ValueError(f"device must be None (JAX's default) or 'cpu', got {device!r}")
    a = jnp.ones((n, n), dtype=dtypes[dtype])
    if device == "cpu":
        a = jax.device_put(a, jax.devices("cpu")[0])
    return matmul_flops(n, n, n) / measure(jax.jit(jnp.dot), a, a).median


def build_peak(device: str, dtype: str, *, bf16_native: bool = True) -> Peak:
    """The peak a chapter divides by for MFU on this build: on a GPU ("cuda") the
    datasheet's (`device_peak`); on a CPU, which has no datasheet row, the better of
    PyTorch's measured matmul peak and JAX's square-matmul rate, so that neither
    framework's MFU can pass 1 merely because the other multiplies faster. Run it with
    the thread count the measured work uses."""
    if device == "cuda":
        import torch

        return device_peak(torch.cuda.get_device_name(), dtype)
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    torch_peak = measured_matmul_peak(dtype=dtype)
    jax_rate = jax_matmul_rate(dtype)
    emulated = "" if bf16_native or dtype != "bf16" else ", emulated bf16"
    if torch_peak.flops_per_s >= jax_rate:
        return Peak(torch_peak.flops_per_s, dtype, torch_peak.source + emulated)
    return Peak(jax_rate, dtype, f"{MEASURED}: JAX 1024^3 {dtype} matmul{emulated}")


def bf16_is_native(cpu_flags: set[str], cuda_capability: tuple[int, int] | None) -> bool:
    """Whether bf16 arithmetic runs in hardware rather than emulated.

    On an NVIDIA GPU: compute capability 8.0 (Ampere) or newer. On a CPU: the x86
    avx512_bf16 or amx_bf16 instructions, or Arm's bf16 extension. Without them PyTorch
    and XLA convert to fp32 and back, so a bf16 timing measures emulation: label it and
    keep it out of speed verdicts (chapter 4).
    """
    if cuda_capability is not None:
        return tuple(cuda_capability) >= (8, 0)
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(cpu_flags))


def measured_copy_bandwidth(n_bytes: int = 2**26, device: str = "cpu"):
    """Achieved memory bandwidth of `device`: a PyTorch copy of `n_bytes`, timed synced.

    Returns ``(bytes_per_s, Timing)``, counting the read and the write (2 x n_bytes per
    copy). Pick `n_bytes` well above the last-level cache, or the number is a cache's.
    A measured ceiling for memory-bound work (chapter 2's fusion experiment).
    """
    import torch

    from deepdive.core.timing import measure

    if not isinstance(n_bytes, int) or n_bytes < 4:
        raise ValueError(f"n_bytes must be an integer >= 4, got {n_bytes!r}")
    source = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    timing = measure(target.copy_, source, label=f"copy {n_bytes / 2**20:.0f} MiB")
    return 2 * source.nbytes / timing.median, timing
