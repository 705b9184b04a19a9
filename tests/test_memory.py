"""deepdive.core.memory on allocations of known size."""

import jax
import numpy as np
import pytest
import torch

from deepdive.core import env
from deepdive.core.memory import (
    host_call_peak,
    host_peak_rss,
    is_out_of_memory,
    jax_device_peak,
    nvml_used,
    psutil_rss_deltas,
    step_peak,
    torch_cuda_peak,
    xla_memory_plan,
)

MB = 10**6
# numpy's ones() writes every page, so RSS grows by the array's bytes; the interpreter's
# own bookkeeping adds well under 1%. 10% is the brief's tolerance, not a fudge.
RSS_TOLERANCE = 0.10
no_gpu = pytest.mark.skipif(
    env.gpu_name() is not None or torch.cuda.is_available(), reason="a GPU is present"
)


def test_host_peak_rss_of_a_200mb_array_is_200mb():
    reading = host_peak_rss("a = np.ones(200 * 10**6 // 8)", setup="import numpy as np")

    assert reading.bytes == pytest.approx(200 * MB, rel=RSS_TOLERANCE)


@pytest.mark.parametrize(
    "setup",
    [
        "import numpy as np\nkept = np.ones(300 * 10**6 // 8)",
        "import numpy as np\nfreed = np.ones(300 * 10**6 // 8)\ndel freed",
    ],
    ids=["kept", "freed"],
)
def test_host_peak_rss_does_not_count_setup_allocations(setup):
    reading = host_peak_rss("a = np.ones(50 * 10**6 // 8)", setup=setup)

    assert reading.bytes == pytest.approx(50 * MB, rel=RSS_TOLERANCE)


def test_host_peak_rss_reports_the_error_of_failing_code():
    with pytest.raises(RuntimeError, match="(?s)failed in its own process.*ZeroDivisionError"):
        host_peak_rss("1 / 0")


def test_psutil_rss_deltas_gives_one_int_per_call():
    deltas = psutil_rss_deltas(lambda: np.ones(1000), calls=3)

    assert deltas.shape == (3,) and deltas.dtype.kind == "i"


def test_psutil_rss_deltas_misses_a_peak_freed_within_the_call():
    """The seed's method reads ~0 for code whose peak host_peak_rss measures as 50 MB."""

    def temporary_50mb():
        return float(np.ones(50 * MB // 8).sum())  # the array is freed before the call ends

    deltas = psutil_rss_deltas(temporary_50mb, calls=3)

    assert np.abs(deltas).max() < 5 * MB
    peak = host_peak_rss("float(np.ones(50 * 10**6 // 8).sum())", setup="import numpy as np")
    assert peak.bytes == pytest.approx(50 * MB, rel=RSS_TOLERANCE)


@pytest.mark.parametrize("calls", [0, -1, 2.5])
def test_psutil_rss_deltas_rejects_calls_below_one(calls):
    with pytest.raises(ValueError, match=r"calls must be an integer >= 1"):
        psutil_rss_deltas(lambda: None, calls)


def test_xla_memory_plan_reports_the_exact_argument_and_output_bytes():
    column_sums = jax.jit(lambda a, b: a.sum(axis=0) + b)
    a, b = np.ones((256, 128), np.float32), np.ones(128, np.float32)

    plan = xla_memory_plan(column_sums, a, b)

    assert plan["argument"] == a.nbytes + b.nbytes
    assert plan["output"] == 128 * 4
    assert plan["total"] == plan["argument"] + plan["output"] + plan["temp"] - plan["alias"]


def test_xla_memory_plan_rejects_a_function_that_is_not_jitted():
    with pytest.raises(TypeError, match="needs a jax.jit-wrapped function"):
        xla_memory_plan(lambda a: a * 2, np.ones(4))


@no_gpu
def test_torch_cuda_peak_is_none_without_a_gpu():
    assert torch_cuda_peak(lambda: torch.ones(4)) is None


@no_gpu
def test_jax_device_peak_is_none_on_cpu():
    assert jax_device_peak() is None


@no_gpu
def test_nvml_used_is_none_without_a_gpu():
    assert nvml_used() is None


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
def test_host_call_peak_counts_a_temporary_200mb_allocation(framework):
    n = 200 * MB // 4
    make = {"numpy": lambda: np.ones(n, np.float32).sum(),
            "torch": lambda: torch.ones(n).sum(),
            "jax": lambda: jax.numpy.ones(n).sum()}[framework]
    make()  # warm-up: compile caches stay out of the reading

    reading = host_call_peak(make)

    assert reading.bytes == pytest.approx(200 * MB, rel=RSS_TOLERANCE)


def test_host_call_peak_sees_pages_the_allocator_had_cached():
    n = 200 * MB // 8
    np.ones(n).sum()  # the same size was allocated and freed just before

    assert host_call_peak(lambda: np.ones(n).sum()).bytes > 0.9 * 200 * MB


def test_host_call_peak_ignores_resident_state():
    resident = np.ones(200 * MB // 8)

    assert host_call_peak(lambda: resident.sum()).bytes < 0.05 * 200 * MB


@pytest.mark.parametrize("allocate", [
    lambda: torch.empty(2**62 // 4),
    lambda: np.empty(2**42),
    lambda: jax.block_until_ready(jax.numpy.zeros(2**60 // 4)),
], ids=["torch", "numpy", "jax"])
def test_a_real_failed_allocation_is_out_of_memory(allocate):
    with pytest.raises(Exception) as failure:
        allocate()

    assert is_out_of_memory(failure.value)


@pytest.mark.parametrize("error", [RuntimeError("shape mismatch"), ValueError("out of memory"),
                                   KeyError("x")])
def test_other_errors_are_not_out_of_memory(error):
    assert not is_out_of_memory(error)


def test_host_call_peak_counts_buffers_a_worker_thread_recycles():
    """A worker thread's freed buffer below glibc's mmap threshold stays in its arena, which
    malloc_trim cannot hand back; with thread_arenas the reading still counts it."""
    from concurrent.futures import ThreadPoolExecutor

    size = 8 * MB
    with ThreadPoolExecutor(max_workers=1) as worker:
        def touch():
            return worker.submit(lambda: float(np.ones(size // 8).sum())).result()

        for _ in range(3):  # glibc raises its mmap threshold above 8 MB as blocks are freed
            touch()
        reading = host_call_peak(touch, thread_arenas=True)

    assert reading.bytes > 0.9 * size
    assert "thread arenas" in reading.tool


def test_step_peak_on_a_cpu_reads_the_host_for_either_framework():
    n = 200 * MB // 4
    for framework in ("torch", "jax"):
        reading = step_peak(framework, "cpu", lambda: torch.ones(n).sum())
        assert reading.bytes == pytest.approx(200 * MB, rel=RSS_TOLERANCE)
        assert "VmHWM" in reading.tool and "thread arenas" in reading.tool


def test_step_peak_of_jax_on_a_gpu_is_xlas_plan_of_the_step():
    plan = {"temp": 300, "output": 50, "alias": 40}

    reading = step_peak("jax", "cuda", lambda: None, xla_plan=lambda: plan)

    assert reading.bytes == 310 and "memory_analysis" in reading.tool
    with pytest.raises(ValueError, match="needs xla_plan"):
        step_peak("jax", "cuda", lambda: None)


@pytest.mark.parametrize(("framework", "device", "message"), [
    ("tensorflow", "cpu", "framework must be"), ("torch", "tpu", "device must be")])
def test_step_peak_names_what_it_accepts(framework, device, message):
    with pytest.raises(ValueError, match=message):
        step_peak(framework, device, lambda: None)
