"""The ViT chapter's helpers and readings (deepdive.chapters.vit_training), on small fakes."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from deepdive.chapters import vit_training as vt
from deepdive.core.timing import OutOfMemory


def test_precisions_add_tf32_only_on_a_gpu_with_native_bf16():
    assert set(vt.vit_precisions("cpu", True)) == {"fp32", "bf16"}
    assert set(vt.vit_precisions("cuda", False)) == {"fp32", "bf16"}
    gpu = vt.vit_precisions("cuda", True)
    assert set(gpu) == {"fp32", "bf16", "tf32"} and gpu["tf32"].jax_matmul == "tensorfloat32"
    assert vt.vit_precisions("cpu", False)["bf16"].name == "bf16 mixed (emulated)"
    assert vt.vit_precisions("cpu", True)["bf16"].name == "bf16 mixed"
    fp32 = gpu["fp32"]
    assert fp32.loss_rtol < gpu["tf32"].loss_rtol < gpu["bf16"].loss_rtol


def test_matmul_precision_is_restored_after_the_block():
    import torch

    before = torch.get_float32_matmul_precision()
    tf32 = vt.vit_precisions("cuda", True)["tf32"]
    with vt.vit_matmul_precision(tf32):
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == before


def test_modes_add_cuda_graphs_only_on_a_gpu():
    cpu_torch, cpu_jax = vt.vit_modes("cpu")
    gpu_torch, gpu_jax = vt.vit_modes("cuda")
    assert set(gpu_torch) - set(cpu_torch) == {"torch.compile reduce-overhead, SDPA"}
    assert cpu_jax == gpu_jax and cpu_torch["torch eager, SDPA"] == ("sdpa", None)


@pytest.mark.parametrize("graphs, hits, warm, kind", [
    (0, 0, True, "reused"), (1, 2, False, "cache hit"), (1, 0, True, "new graph"),
    (1, 0, False, "cold")])
def test_compile_label(graphs, hits, warm, kind):
    assert vt.compile_label(graphs, hits, warm).startswith(kind)


def timing(median=0.01, iqr=0.001):
    return SimpleNamespace(median=median, iqr=iqr, recompiles=0, noisy=False)


def test_summarize_row_reads_mfu_against_the_rows_peak_and_flags_oom():
    peaks = {"fp32": {"peak FLOP/s": 1e12, "source": "measured"},
             "bf16": {"peak FLOP/s": 4e12, "source": "measured"}}
    row = dict(timing=timing(), precision="fp32", batch=4, first_call=0.5,
               compile_kind="none (eager)", memory_mib=3.0)
    fp32 = vt.summarize_row(row, peaks, 1e8)
    assert fp32["images/s"] == pytest.approx(400) and fp32["MFU (%)"] == pytest.approx(4.0)
    assert fp32["compile (s)"] == pytest.approx(0.49) and not fp32["OOM"]
    assert vt.summarize_row(row | {"precision": "bf16"}, peaks, 1e8)["MFU (%)"] == \
        pytest.approx(1.0)
    tf32 = vt.summarize_row(row | {"precision": "tf32"}, peaks, 1e8)  # no tf32 peak: fp32's
    assert tf32["MFU (%)"] == pytest.approx(4.0)
    fast_first = vt.summarize_row(row | {"first_call": 0.001}, peaks, 1e8)
    assert fast_first["compile (s)"] == 0.0
    assert vt.summarize_row(row | {"timing": OutOfMemory("m", "oom")}, peaks, 1e8) == \
        {"OOM": True}


def test_op_kind_and_bf16_claim_ids():
    assert vt.op_kind("aten::addmm") == "matmuls"
    assert vt.op_kind("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == \
        "attention (SDPA)"
    assert vt.op_kind("aten::gelu") == "other"
    assert vt.bf16_claim_id("torch eager, SDPA") == "bf16_torch_eager_SDPA"
    assert vt.bf16_claim_id("jax.jit split/merge") == "bf16_jax_jit_split_merge"
    assert vt.bf16_claim_id("torch.compile, SDPA") == "bf16_torch_compile_SDPA"


def test_adamw_reason_and_attention_kernels():
    assert "for-loop" in vt.adamw_reason("for-loop (single-tensor)")
    assert "multi-tensor" in vt.adamw_reason("foreach (multi-tensor)")
    assert vt.adamw_reason("fused") == "as configured"
    assert "CPU flash" in vt.attention_kernels("cpu")[1]
    assert "not cuDNN" in vt.attention_kernels("cuda")[0]


def test_memory_check_reading_branches():
    assert vt.memory_check_reading({}, {}).startswith("On a GPU")
    agreed = vt.memory_check_reading({8: 0.9, 32: 1.1}, {8: 1.0, 32: 1.0})
    assert "0.90 to 1.10" in agreed and agreed.endswith("agreed with the plan on this build.")
    recovered = vt.memory_check_reading({8: 0.1, 32: 1.0}, {8: 0.95, 32: 1.0})
    assert "missed most of the plan at batch 8" in recovered
    assert recovered.endswith("trimming recovered it.")
    unrecovered = vt.memory_check_reading({8: 0.1, 32: 0.2}, {8: 0.95, 32: 0.3})
    assert "batch 8, 32" in unrecovered and "did not recover it at batch 32," in unrecovered


def test_growth_caveat_branches():
    assert vt.growth_caveat(32, 32, 2.0, 3.0) == ""
    assert vt.growth_caveat(8, 32, None, 3.0) == ""
    assert vt.growth_caveat(8, 32, 2.0, None) == ""
    text = vt.growth_caveat(8, 32, 2.04, 3.0)
    assert "(4 times the images)" in text and "grew 2.0 times" in text and "3.0 times." in text


def test_bf16_status_branches():
    cpu = vt.bf16_status("cpu", True, {"PyTorch": (30.0, 20.0), "JAX": (5.0, 10.0)})
    assert cpu.startswith("native") and "30.0 against 20.0" in cpu and "5.0 against 10.0" in cpu
    assert vt.bf16_status("cuda", True) == "native on this GPU"
    assert "this CPU has no bf16" in vt.bf16_status("cpu", False)
    assert "Inductor refuses bf16" in vt.bf16_status("cuda", False)


def profile(attention_bf16=8.0):
    kinds = [*vt.OP_KINDS, "other"]
    return pd.DataFrame({"fp32": [10.0, 2.0, 1.0, 0.0, 3.0],
                         "bf16": [6.0, attention_bf16, 1.0, 2.0, 3.0]}, index=kinds)


def test_bf16_reading_names_the_largest_change():
    slow = vt.bf16_reading(profile(), 0.8, "cpu", True, 16)
    assert "(below 1: bf16 took longer)" in slow and "attention (SDPA), +6.0 ms" in slow
    assert "head size 16" in slow and "casts" not in slow.split("by kind:")[1].split(".")[0]
    assert "matmuls 0.60x" in slow and "converted" not in slow
    fast = vt.bf16_reading(profile(attention_bf16=1.0), 1.5, "cuda", False, 16)
    assert "On this GPU" in fast and "below 1" not in fast and "head size" not in fast
    assert "largest change was in casts" in fast and fast.endswith("fp32 and back")


def test_loader_reading_branches():
    costly = vt.loader_reading({"torch": "slower", "jax": "tie"})
    assert costly.startswith("Where the loader-fed step took longer (PyTorch)")
    open_ = vt.loader_reading({"torch": "tie", "jax": "withheld"})
    assert "PyTorch: tie and JAX: withheld" in open_ and "unresolved" in open_
    none = vt.loader_reading({"torch": "tie", "jax": "tie"})
    assert "(PyTorch: tie, JAX: tie)" in none and "workers" in none


GLUED = {"fused_jax_vs_torch_b8": "faster than", "fused_jax_vs_torch_b8_ratio": "1.2x",
         "fused_jax_vs_torch_b32": "tied with", "fused_jax_vs_torch_b32_ratio": "1.0x",
         "split_vs_nnx_b8": "faster than", "split_vs_nnx_b8_ratio": "1.5x"}


def test_fused_other_batches_and_nnx_sentence():
    assert vt.fused_other_batches(GLUED, [8, 32], 32) == (
        "At batch 8, with each framework's compiled attention API, jax.jit with "
        "dot_product_attention was faster than torch.compile with SDPA (1.2x).")
    assert vt.fused_other_batches(GLUED, [32], 32) == ""
    assert vt.nnx_sentence(GLUED, [8, 32]) == (
        "At batch 8, the split/merge step was faster than nnx.jit (1.5x).")
    assert vt.nnx_sentence(GLUED, [32]) == ""


def test_algoperf_rows_read_the_anchors_and_refuse_without_them():
    anchors = pd.DataFrame({
        "source_key": ["algoperf-pr892", "algoperf-pr892", "other"],
        "workload": ["AlgoPerf imagenet_vit (ViT on ImageNet)"] * 2 + ["imagenet_vit"],
        "hardware": ["NVIDIA A100"] * 3, "variant": ["JAX implementation", "PyTorch, TF32", "x"],
        "metric": ["s per step"] * 3, "value": [0.386, 0.321, 9.0], "unit": ["s"] * 3})
    hours = anchors.iloc[:2].assign(metric="hours", value=[18.0, 15.0], unit="h")
    anchors = pd.concat([anchors, hours])
    table = vt.algoperf_rows(anchors)
    assert list(table.index) == ["JAX implementation", "PyTorch, TF32"]
    assert table["time per step"].tolist() == [0.386, 0.321]
    assert (table["source"] == "MLCommons AlgoPerf, pull request #892").all()
    with pytest.raises(ValueError, match="no AlgoPerf ViT rows"):
        vt.algoperf_rows(anchors[anchors["source_key"] == "other"])


def test_the_books_anchor_file_has_the_algoperf_vit_rows():
    table = vt.algoperf_rows()
    assert len(table) == 2 and not math.isnan(table["time per step"].iloc[0])


@pytest.fixture(scope="module")
def bench():
    import torch
    from flax import nnx
    from transformers import ViTConfig, ViTForImageClassification

    from deepdive.models import vit

    config = ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=3)
    torch.manual_seed(0)
    reference = ViTForImageClassification(config)
    reference.set_attn_implementation("eager")
    twin = vit.ViTForImageClassification(config, attention="eager", rngs=nnx.Rngs(0))
    vit.port_hf_weights(reference, twin)
    return vt.ViTBench(config, reference, twin, "cpu", vt.vit_precisions("cpu", False))


@pytest.mark.parametrize("mode", ["torch eager, eager attn", "jax.jit split/merge", "nnx.jit"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_built_step_passes_its_first_step_check(bench, mode, optimizer):
    step = bench.build(mode, "fp32", 2, optimizer_name=optimizer)
    assert bench.checks[-1]["passed"] and step.first_call > 0
    assert step.compile_kind in ("none (eager)", "new XLA program (XLA already started)")


def test_a_wrong_step_fails_its_check(bench):
    step = bench.torch_step("torch eager, eager attn", bench.precisions["fp32"])
    loss = float(step(*bench.synthetic_batch("torch", 2)).detach())
    with pytest.raises(AssertionError, match="disagrees with the fp32 references"):
        bench.check_first_step("wrong", "torch", step, loss * 1.01, 2,
                               bench.precisions["fp32"], "adamw")


def test_feeds_serve_the_same_first_batch(bench):
    synthetic = next(bench.synthetic_feed("jax", 2))
    loader = next(bench.loader_feed("jax", 2))
    np.testing.assert_array_equal(np.asarray(synthetic[0]), np.asarray(loader[0]))
    torch_loader = next(bench.loader_feed("torch", 2))
    np.testing.assert_array_equal(bench.synthetic_batch("torch", 2)[0].numpy(),
                                  torch_loader[0].numpy())
