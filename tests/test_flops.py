"""deepdive.core.flops: formulas against worked examples, counters against each other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from deepdive.core.flops import (
    MEASURED,
    NoDatasheetPeak,
    Peak,
    bf16_is_native,
    build_peak,
    device_peak,
    gpt_flops_per_token,
    jax_matmul_rate,
    matmul_flops,
    measured_matmul_peak,
    mfu,
    peak_flops,
    torch_counted_flops,
    vit_flops_per_image,
    xla_counted_flops,
)

SHAPES = [(64, 32, 16), (48, 80, 24), (1, 7, 3)]


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_matmul_flops_is_2mkn(m, k, n):
    assert matmul_flops(m, k, n) == 2 * m * k * n


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_matmul_flops_matches_pytorchs_counter(m, k, n):
    counted = torch_counted_flops(torch.mm, torch.ones(m, k), torch.ones(k, n))

    assert counted == matmul_flops(m, k, n)


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_matmul_flops_matches_xlas_cost_analysis(m, k, n):
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)

    assert xla_counted_flops(jax.jit(jnp.matmul), a, b) == matmul_flops(m, k, n)


def test_xla_counted_flops_rejects_a_function_that_is_not_jitted():
    with pytest.raises(TypeError, match="needs a jax.jit-wrapped function"):
        xla_counted_flops(lambda a, b: a @ b, np.ones((2, 2)), np.ones((2, 2)))


@pytest.mark.parametrize("bad", [0, -3, 2.0])
def test_matmul_flops_rejects_sizes_that_are_not_positive_integers(bad):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        matmul_flops(4, bad, 4)


def test_gpt_flops_per_token_of_gpt2_124m():
    # nanoGPT's GPT-2 small: 123.65M parameters without the position embedding,
    # L=12 layers, H=12 heads of Q=64, T=1024 tokens of context.
    # 6N = 741,920,256 and 12*L*H*Q*T = 12*12*12*64*1024 = 113,246,208.
    assert gpt_flops_per_token(123_653_376, 12, 12, 64, 1024) == 855_166_464


def test_vit_flops_per_image_is_tokens_times_flops_per_token():
    # ViT-B/16 at 224 px: 196 patches and a class token; 86M parameters.
    per_token = gpt_flops_per_token(86_000_000, 12, 12, 64, 197)

    assert vit_flops_per_image(86_000_000, 12, 12, 64, 197) == 197 * per_token


@pytest.mark.parametrize(
    ("device", "dtype", "tflops"),
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
        ("NVIDIA A100-PCIE-40GB", "tf32", 156),
        ("NVIDIA H100 80GB HBM3", "bf16", 989),  # the SXM part reports no form factor
        ("NVIDIA H100 PCIe", "bf16", 756),
        ("NVIDIA H200", "fp16", 989),
        ("NVIDIA L4", "bf16", 121),
        ("Tesla T4", "fp16", 65),
        ("NVIDIA A10", "tf32", 62.5),
        ("NVIDIA L40S", "bf16", 362.05),
        ("NVIDIA H100 NVL", "bf16", 835.5),
        ("NVIDIA H200 NVL", "fp32", 60),
        ("NVIDIA B200", "bf16", 2250),
    ],
)
def test_peak_flops_gives_datasheet_values_for_driver_names(device, dtype, tflops):
    peak, source = peak_flops(device, dtype)

    assert peak == tflops * 1e12
    assert "datasheet" in source


@pytest.mark.parametrize(
    "device", ["NVIDIA A10G", "NVIDIA GeForce RTX 4090", "NVIDIA L40", "AMD EPYC 7B13"]
)
def test_peak_flops_refuses_to_guess_an_unknown_device(device):
    with pytest.raises(NoDatasheetPeak, match=r"no datasheet peak.*known devices: T4, L4"):
        peak_flops(device, "bf16")


@pytest.mark.parametrize(("device", "dtype"), [("Tesla T4", "bf16"), ("Tesla T4", "tf32")])
def test_peak_flops_refuses_a_dtype_the_gpu_has_no_tensor_cores_for(device, dtype):
    with pytest.raises(NoDatasheetPeak, match=f"T4 has no {dtype} tensor-core path"):
        peak_flops(device, dtype)


def fake_measure(dtype):
    return Peak(1.5e13, dtype, f"{MEASURED}: best torch.mm rate")


@pytest.mark.parametrize("device", ["NVIDIA A10G", "NVIDIA GeForce RTX 4090", "Tesla T4",
                                    "NVIDIA RTX A6000", "Tesla V100-SXM2-16GB", ""])
def test_device_peak_never_raises_for_a_gpu_it_does_not_know(device):
    peak = device_peak(device, "bf16", measure=fake_measure)

    assert peak.flops_per_s == 1.5e13 and peak.dtype == "bf16"
    why = ("no datasheet peak", "no bf16 tensor-core path")
    assert peak.source.startswith(MEASURED) and any(reason in peak.source for reason in why)


def test_device_peak_takes_the_datasheet_where_there_is_one():
    peak = device_peak("NVIDIA L4", "bf16", measure=fake_measure)

    datasheet = "datasheet: NVIDIA L4"
    assert peak.flops_per_s == 121e12 and peak.source.startswith(datasheet)


def test_device_peak_still_rejects_an_unknown_dtype():
    with pytest.raises(ValueError, match="dtype 'fp8' is not known"):
        device_peak("NVIDIA A10G", "fp8", measure=fake_measure)


def test_peak_flops_rejects_an_unknown_dtype():
    with pytest.raises(ValueError, match="dtype 'fp8' is not known; accepted: fp32, tf32"):
        peak_flops("NVIDIA A100-SXM4-80GB", "fp8")


def test_mfu_is_achieved_flops_over_peak():
    # 1 TFLOP in 0.5 s is 2 TFLOP/s, a quarter of an 8 TFLOP/s peak
    assert mfu(1e12, 0.5, 8e12) == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("args", "name"),
    [((0, 1.0, 1e12), "flops_per_step"), ((1e9, 0.0, 1e12), "step_time_s"),
     ((1e9, 1.0, -1.0), "peak_flops_per_s"), ((1e9, float("nan"), 1e12), "step_time_s")],
)
def test_mfu_rejects_values_that_are_not_positive(args, name):
    with pytest.raises(ValueError, match=f"{name} must be positive"):
        mfu(*args)


def test_mfu_above_one_fails_and_names_the_peak():
    with pytest.raises(ValueError, match=r"MFU 1.25 exceeds 1 against a peak of 8 TFLOP/s "
                                         r"\(measured on this machine\)"):
        mfu(1e12, 0.1, 8e12, peak_source="measured on this machine")


def test_measured_matmul_peak_is_the_best_rate_over_its_shapes():
    shapes = ((64, 64, 64), (256, 256, 256))

    peak = measured_matmul_peak(shapes=shapes)

    assert isinstance(peak, Peak) and peak.dtype == "fp32"
    assert peak.source.startswith(MEASURED) and f"{len(shapes)} shapes" in peak.source
    # Plausible for a CPU: above 100 MFLOP/s, below 10 TFLOP/s (no CPU core reaches 1).
    assert 1e8 < peak.flops_per_s < 1e13
    # No shape beats the best one by more than timing noise.
    one = measured_matmul_peak(shapes=shapes[:1]).flops_per_s
    assert one <= peak.flops_per_s * 1.5


def test_measured_matmul_peak_rejects_a_dtype_it_cannot_measure():
    with pytest.raises(ValueError, match="dtype 'tf32' is not measurable here; accepted"):
        measured_matmul_peak(dtype="tf32", shapes=((8, 8, 8),))


def test_measured_matmul_peak_needs_a_shape():
    with pytest.raises(ValueError, match="shapes must name at least one"):
        measured_matmul_peak(shapes=())


@pytest.mark.parametrize(
    ("flags", "capability", "native"),
    [
        ({"fma", "avx2", "avx512f"}, None, False),  # the CI machine of issue 11
        ({"avx512f", "avx512_bf16"}, None, True),
        ({"amx_bf16", "amx_tile"}, None, True),
        ({"fp", "asimd", "bf16"}, None, True),  # Arm with the BF16 extension
        (set(), (7, 5), False),  # a T4: bf16 runs emulated
        (set(), (8, 0), True),  # an A100
        ({"avx512_bf16"}, (7, 0), False),  # on a GPU the GPU decides, not the host CPU
    ],
)
def test_bf16_is_native_only_with_the_instructions_for_it(flags, capability, native):
    assert bf16_is_native(flags, capability) is native


def test_measured_copy_bandwidth_counts_read_and_write_of_each_copy():
    from deepdive.core.flops import measured_copy_bandwidth

    bytes_per_s, timing = measured_copy_bandwidth(2**24)

    assert bytes_per_s == pytest.approx(2 * 2**24 / timing.median)
    assert 1e8 < bytes_per_s < 1e13  # between a floppy disk and a GPU's HBM


def test_measured_copy_bandwidth_rejects_a_bad_size():
    from deepdive.core.flops import measured_copy_bandwidth

    with pytest.raises(ValueError, match="n_bytes must be an integer >= 4"):
        measured_copy_bandwidth(2)


@pytest.mark.parametrize(("torch_rate", "jax_rate", "source"), [
    (2e11, 1e11, "torch.mm"), (1e11, 3e11, "JAX 1024^3")])
def test_build_peak_on_a_cpu_takes_the_better_rate_of_the_two_frameworks(
        monkeypatch, torch_rate, jax_rate, source):
    import deepdive.core.flops as flops_module

    monkeypatch.setattr(flops_module, "measured_matmul_peak", lambda dtype: Peak(
        torch_rate, dtype, f"measured on this machine: best {dtype} torch.mm rate"))
    monkeypatch.setattr(flops_module, "jax_matmul_rate", lambda dtype: jax_rate)

    peak = build_peak("cpu", "fp32")

    assert peak.flops_per_s == max(torch_rate, jax_rate) and source in peak.source


def test_jax_matmul_rate_is_a_plausible_cpu_rate():
    with jax.default_matmul_precision("highest"):
        rate = jax_matmul_rate("fp32", n=256)
    assert 1e8 < rate < 1e13


def test_build_peak_labels_emulated_bf16_and_rejects_other_devices():
    assert "emulated bf16" in build_peak("cpu", "bf16", bf16_native=False).source
    with pytest.raises(ValueError, match="device must be"):
        build_peak("tpu", "fp32")
    with pytest.raises(ValueError, match="not measurable"):
        jax_matmul_rate("fp8")
