"""The PyTorch/XLA section's readings (deepdive.chapters.vit_xla), on small fakes."""

import math
from types import SimpleNamespace

import pytest

from deepdive.chapters import vit_xla as vx
from deepdive.models import xla_route

HERE = {"torch matmul precision": "highest", "jax matmul precision": "highest",
        **{f"version of {n}": "1.0" for n in vx.SAME_LIBRARIES}}


def hello(**changes):
    report = {"torch threads": 1, "CPU affinity": [3], "torch_xla matmul precision": "highest",
              "PJRT_DEVICE": "CPU", "torch matmul precision": "highest",
              "jax matmul precision": "highest",
              "torch_xla's _has_cuda_support binding present": False,
              "versions": {"torch": "2.9.0", **dict.fromkeys(vx.SAME_LIBRARIES, "1.0")}}
    return report | changes


def test_check_worker_passes_and_lists_the_workers_column():
    column = vx.check_worker(hello(), HERE, 1, [3])
    assert column["CPU affinity"] == "3" and column["version of torch"] == "2.9.0"
    assert "versions" not in column


@pytest.mark.parametrize("changes, problem", [
    ({"torch threads": 2}, "torch threads"), ({"CPU affinity": [4]}, "CPU affinity"),
    ({"PJRT_DEVICE": "CUDA"}, "not fp32 strict"), ({"torch_xla matmul precision": "high"},
                                                   "not fp32 strict"),
    ({"jax matmul precision": "default"}, "jax matmul precision"),
    ({"torch_xla's _has_cuda_support binding present": True}, "CUDA support"),
    ({"versions": {"torch": "2.9.0", **dict.fromkeys(vx.SAME_LIBRARIES, "1.0"), "flax": "2"}},
     "flax: worker 2")])
def test_check_worker_refuses_a_worker_that_runs_otherwise(changes, problem):
    with pytest.raises(AssertionError, match=problem):
        vx.check_worker(hello(**changes), HERE, 1, [3])


BOOK = "2.99.0"  # a made-up version of the book's torch: nothing here may type the real one


def test_route_framework_and_versions():
    side = {"torch": "2.9.0", "torch_xla": "2.9.0", "torchax": "0.0.7", "jax": "0.7.0"}
    assert vx.torch_named(f"{BOOK}+cpu") == f"torch {BOOK}"
    here = vx.torch_here(f"{BOOK}+cpu")
    assert here == f"torch {BOOK} eager"
    assert vx.route_framework(xla_route.TORCHAX) == "jax"
    assert vx.route_framework(vx.JAX_HERE) == "jax"
    assert vx.route_framework(xla_route.LAZY) == "torch"
    assert vx.route_versions(vx.JAX_HERE, side, "0.8.0", f"{BOOK}+cpu") == "jax 0.8.0"
    assert vx.route_versions(xla_route.JAX_TWIN, side, "0.8.0", f"{BOOK}+cpu") == "jax 0.7.0"
    assert vx.route_versions(here, side, "0.8.0", f"{BOOK}+cpu") == f"torch {BOOK}+cpu"
    assert vx.route_versions(xla_route.LAZY, side, "0.8", BOOK) == \
        "torch 2.9.0, torch_xla 2.9.0"
    assert vx.route_versions(xla_route.TORCHAX, side, "0.8", BOOK) == \
        "torch 2.9.0, torchax 0.0.7, jax 0.7.0"
    assert vx.route_versions(xla_route.EAGER, side, "0.8", BOOK) == "torch 2.9.0"


STEPS = {"first_step_s": 1.5, "second_step_s": 0.25, "xla_first_step": 2, "xla_second_step": 1,
         "dynamo_first_step": 1, "dynamo_second_step": 0, "xla_sizing": 0, "dynamo_sizing": 0}
TIMING = SimpleNamespace(first_call=1.5, median=0.01, iqr=0.001, recompiles=0, n=15,
                         calls_per_block=2)


def test_mode_row_for_worker_and_local_routes():
    here = vx.torch_here(BOOK)
    worker = vx.mode_row(xla_route.LAZY, TIMING, STEPS, 1e-6, "torch 2.9.0", 32, reference=here)
    assert worker["compiled in steps 1 + 2"] == "2 + 1 XLA, 1 Dynamo"
    assert worker["second step (s)"] == 0.25 and worker["images/s"] == pytest.approx(3200)
    assert vx.parity_column(here) == f"max |grad difference| vs torch {BOOK} eager"
    assert worker[vx.parity_column(here)] == 1e-6
    local = vx.mode_row(vx.JAX_HERE, TIMING, {}, 0.0, "jax 0.8", 32, reference=here)
    assert local["compiled in steps 1 + 2"] == "n/a (this process)"
    assert math.isnan(local["second step (s)"])
    assert vx.first_two_steps_s(STEPS) == 1.75


def test_compile_story():
    assert vx.compile_story({}, {}) == ""
    story = vx.compile_story({xla_route.LAZY: STEPS}, {xla_route.LAZY: 0})
    assert story.startswith("In this build: PyTorch/XLA lazy tensors: step 1 took 1.500 s")
    assert story.endswith("the timed rounds 0.")


@pytest.mark.parametrize("verdict, says", [("tie", "can be read beside"),
                                          ("withheld", "cannot tell"),
                                          ("faster", "differ at this size")])
def test_version_reading(verdict, says):
    reading = vx.version_reading(verdict, "torch 2.9.0", f"torch {BOOK}")
    assert says in reading and "torch 2.9.0" in reading
    assert (f"torch {BOOK}" in reading) == (verdict == "tie")


def glued(lazy="slower", jax="slower", versions="tie"):
    keys = ("xla_lazy_vs_eager", "xla_compile_vs_eager", "torchax_vs_eager", "xla_lazy_vs_jax",
            "xla_compile_vs_jax", "torchax_vs_jax", "jax_vs_torch_eager", "xla_torch_vs_book_torch")
    out = {k: f"<{k}>" for k in keys} | {f"{k}_ratio": "1.0x" for k in keys}
    return out | {"xla_lazy_vs_eager_verdict": lazy, "jax_vs_torch_eager_verdict": jax,
                  "xla_torch_vs_book_torch_verdict": versions}


FIRST_TWO = {xla_route.LAZY: 3.0, xla_route.COMPILED: 4.0, xla_route.TORCHAX: 2.0,
             xla_route.JAX_TWIN: 1.0}


def test_xla_reading_branches():
    both_slow = vx.xla_reading(glued(), True, FIRST_TWO, f"torch {BOOK}", "torch 2.9.0")
    assert both_slow.startswith("On torch 2.9.0, against eager PyTorch, lazy tensors were "
                                "<xla_lazy_vs_eager> it (1.0x)")
    assert f"<jax_vs_torch_eager> eager PyTorch on torch {BOOK} (1.0x)" in both_slow
    assert (f"The same eager step on torch 2.9.0 was <xla_torch_vs_book_torch> torch {BOOK} "
            "(1.0x)") in both_slow
    assert "cited, not measured again" in both_slow and "JAX's own step lost" in both_slow
    assert "lazy tensors 3.0 s" in both_slow and "can be read beside" in both_slow
    local = vx.xla_reading(glued(jax="tie", versions="withheld"), False, FIRST_TWO,
                           f"torch {BOOK}", "torch 2.9.0")
    assert "In this page's process" in local and "JAX's own step lost" not in local
    assert "cannot tell" in local


def test_scope_sentence():
    text = vx.scope_sentence("CPU, pinned to 1 core per process", "small", 1_234_567, 32,
                             "torch 2.9.0")
    assert text.startswith("Measured on CPU, pinned to 1 core per process at small scale")
    assert "1.23M-parameter ViT, batch 32. Rows on torch 2.9.0 ran in the side" in text
    assert "compare torch 2.9.0 with torch 2.9.0. A CPU build's" in text
    alone = vx.scope_sentence("CPU", "small", 1_234_567, 32, None)  # no worker ran
    assert "side environment" not in alone and "batch 32. A CPU build's verdicts" in alone


def test_loss_check_records_and_refuses():
    record = {}
    check = vx.loss_check("r", [1.0, 0.9], {"rtol": 1e-5, "atol": 0.0}, record)
    check({"losses": [1.0, 0.9]})
    assert record == {"r": [1.0, 0.9]}
    with pytest.raises(AssertionError, match="r: first two losses .* the book's torch eager"):
        check([1.0, 0.8])
    assert record["r"] == [1.0, 0.8]


def test_first_two_losses_reads_tensors_and_floats():
    import torch

    calls = iter([torch.tensor(2.0), 1.5])
    assert vx.first_two_losses(lambda: next(calls)) == [2.0, 1.5]


def test_not_run_glue_and_this_process():
    glue = vx.not_run_glue("skipped (DEEPDIVE_SKIP_XLA=1)", 3.0)
    assert glue["claims_all"].index[0] == "skipped (DEEPDIVE_SKIP_XLA=1)"
    assert glue["across_band_pct"] == glue["aa_reach_pct"] == 3.0
    here = vx.this_process()
    assert {"torch threads", "version of jax", "version of python"} <= set(here)
