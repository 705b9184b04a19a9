"""deepdive.core.env: the build's scale and the provenance printed beside every number."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import psutil
import pytest
import torch

from deepdive.core import env

GIB = 2**30
T4, H100 = ("Tesla T4", 15 * GIB), ("NVIDIA H100 80GB HBM3", 80 * GIB)


def choose(requested=None, gpu=None, torch_gpu=False, jax_gpu=False):
    name, memory = gpu or (None, None)
    return env.choose_scale(requested, gpu=name, gpu_memory=memory, torch_gpu=torch_gpu,
                            jax_gpu=jax_gpu)


def test_without_a_request_a_gpu_both_frameworks_see_gets_medium_and_a_cpu_small():
    assert choose(gpu=T4, torch_gpu=True, jax_gpu=True) == "medium"
    assert choose(gpu=H100, torch_gpu=True, jax_gpu=True) == "medium"  # full only on request
    assert choose() == "small"
    assert choose(gpu=T4) == "small"  # NVML sees a GPU that neither framework uses


@pytest.mark.parametrize(("torch_gpu", "jax_gpu", "fix"), [
    (True, False, "jax\\[cuda13\\]"), (False, True, "CUDA build of the pinned torch")])
@pytest.mark.parametrize("requested", [None, "medium", "full"])
def test_a_gpu_only_one_framework_sees_is_refused_with_the_fix(torch_gpu, jax_gpu, fix,
                                                              requested):
    with pytest.raises(RuntimeError, match=fix):
        choose(requested, H100, torch_gpu, jax_gpu)


def test_small_may_be_asked_for_whatever_the_frameworks_see():
    assert choose("small", H100, torch_gpu=True, jax_gpu=False) == "small"
    assert choose(" Small ", H100, torch_gpu=True, jax_gpu=True) == "small"


@pytest.mark.parametrize("requested", ["medium", "full"])
def test_gpu_scales_need_a_gpu_both_frameworks_see(requested):
    with pytest.raises(ValueError, match=f"DEEPDIVE_SCALE={requested} needs a GPU.*there is "
                                         "none.*DEEPDIVE_SCALE=small"):
        choose(requested)


def test_full_needs_a_data_centre_gpus_memory_and_names_medium():
    assert choose("full", H100, True, True) == "full"
    a100_40gb = ("NVIDIA A100-SXM4-40GB", 42_405_855_232)
    assert choose("full", a100_40gb, True, True) == "full"
    with pytest.raises(ValueError, match="Tesla T4 has 15.0 GiB.*DEEPDIVE_SCALE=medium"):
        choose("full", T4, True, True)
    assert choose("medium", T4, True, True) == "medium"


def test_scale_rejects_an_unknown_value_listing_the_accepted_ones(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_SCALE", "huge")

    with pytest.raises(ValueError, match="'huge' is not a scale; accepted values: small, "
                                         "medium, full"):
        env.scale()


@pytest.mark.parametrize(("value", "expected"), [("small", "small"), (" Small ", "small")])
def test_scale_honours_deepdive_scale(monkeypatch, value, expected):
    monkeypatch.setenv("DEEPDIVE_SCALE", value)

    assert env.scale() == expected


@pytest.mark.skipif(env.gpu_name() is not None, reason="a GPU is present: the default is medium")
def test_scale_defaults_to_small_without_a_gpu(monkeypatch):
    monkeypatch.delenv("DEEPDIVE_SCALE", raising=False)

    assert env.scale() == "small"


def seen_by(monkeypatch, gpu, memory, *, torch_gpu, jax_gpu):
    """Make env see `gpu` through NVML, and each framework see it or not."""
    monkeypatch.setattr(env, "gpu_name", lambda: gpu)
    monkeypatch.setattr(env, "gpu_memory", lambda: memory)
    monkeypatch.setattr(env, "torch_sees_gpu", lambda: torch_gpu)
    monkeypatch.setattr(env, "jax_sees_gpu", lambda: jax_gpu)


def test_scale_defaults_to_medium_where_both_frameworks_see_the_gpu(monkeypatch):
    monkeypatch.delenv("DEEPDIVE_SCALE", raising=False)
    seen_by(monkeypatch, "NVIDIA L4", 24 * GIB, torch_gpu=True, jax_gpu=True)

    assert env.scale() == "medium"
    monkeypatch.setenv("DEEPDIVE_SCALE", "full")
    with pytest.raises(ValueError, match="NVIDIA L4 has 24.0 GiB"):
        env.scale()


def test_scale_refuses_a_gpu_jax_does_not_see(monkeypatch):
    monkeypatch.delenv("DEEPDIVE_SCALE", raising=False)
    seen_by(monkeypatch, "Tesla T4", 15 * GIB, torch_gpu=True, jax_gpu=False)

    with pytest.raises(RuntimeError, match="JAX runs on its 'cpu' backend"):
        env.scale()


def test_jax_sees_the_gpu_only_through_a_gpu_plugin(monkeypatch):
    """This machine's JAX is imported and runs on its CPU; before import, the installed
    plugins decide (none here)."""
    assert env.jax_sees_gpu() is False
    monkeypatch.delitem(sys.modules, "jax")
    assert env.jax_sees_gpu() is False
    plugins = ("jax-cuda13-plugin", "jax_cuda12_pjrt")
    assert all(map(env._JAX_GPU_PLUGINS.match, plugins))
    assert not env._JAX_GPU_PLUGINS.match("jax")


def test_before_import_jax_is_on_the_gpu_only_with_a_plugin_a_gpu_and_a_gpu_platform(
        monkeypatch):
    class Plugin:
        metadata = {"Name": "jax-cuda13-plugin"}
        version = env.versions()["jaxlib"]

    monkeypatch.delitem(sys.modules, "jax")
    monkeypatch.setattr(env.importlib.metadata, "distributions", lambda: [Plugin()])
    monkeypatch.setattr(env, "torch_sees_gpu", lambda: True)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert env.jax_sees_gpu()
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert not env.jax_sees_gpu()
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert env.jax_sees_gpu()
    monkeypatch.setattr(env, "torch_sees_gpu", lambda: False)  # CUDA_VISIBLE_DEVICES=''
    assert not env.jax_sees_gpu()
    monkeypatch.setattr(env, "torch_sees_gpu", lambda: True)
    Plugin.version = "0.4.30"  # a plugin an older JAX left behind: jaxlib will not use it
    assert not env.jax_sees_gpu()


def test_pinning_threads_imports_neither_torch_nor_numpy():
    """NumPy's BLAS reads OMP_NUM_THREADS once, when it loads: deciding the thread count
    must not import torch (which loads NumPy) before the variable is set."""
    code = ("import sys; from deepdive.core import env; env.pin_cpu_threads(); "
            "print('torch' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "DEEPDIVE_CPU_THREADS": ""})

    assert out.stdout.split() == ["False", "False"]


def test_the_gpu_is_the_one_pytorch_runs_on_not_the_drivers(monkeypatch):
    """A GPU hidden with CUDA_VISIBLE_DEVICES='' is not this build's device, whatever the
    driver still lists: the label, the scale and the thread count say CPU."""
    monkeypatch.setattr(env, "torch_sees_gpu", lambda: False)
    monkeypatch.delenv("DEEPDIVE_SCALE", raising=False)
    monkeypatch.delenv("DEEPDIVE_CPU_THREADS", raising=False)

    assert env.gpu_name() is None and env.gpu_memory() is None
    assert env.scale() == "small"
    assert env.is_cpu_label(env.device_label())
    assert env.compute_threads() == env.CPU_BUILD_THREADS


def test_require_same_device_raises_when_jax_is_on_the_cpu_beside_a_cuda_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")

    with pytest.raises(RuntimeError, match="PyTorch sees a CUDA GPU but JAX runs on its 'cpu'"):
        env.require_same_device()


def test_describe_reports_machine_versions_scale_and_threads(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")

    found = env.describe()

    assert found["cpu"] and found["cpu"] == env.cpu_model()
    assert found["ram GiB"] == pytest.approx(psutil.virtual_memory().total / 2**30, abs=0.1)
    # the package's metadata: PyPI's CUDA wheel says "2.15.0" where torch.__version__ adds
    # "+cu132" (the CUDA build is its own row); a local CPU wheel says "2.13.0+cpu" in both
    assert torch.__version__.split("+")[0] == found["version torch"].split("+")[0]
    cuda_row = "cuda (torch build)"
    assert found[cuda_row] == torch.version.cuda
    assert found["version jax"] == jax.__version__
    assert found["scale"] == "small"
    intra_op = "torch intra-op threads"
    assert found[intra_op] == torch.get_num_threads()
    assert found["os.cpu_count"] == os.cpu_count()
    assert found["jax backend"] == jax.default_backend()


def test_describe_reports_the_precision_settings_in_force():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with jax.default_matmul_precision("highest"):
            found = env.describe()
    finally:
        torch.set_float32_matmul_precision(before)

    torch_rows = ("float32_matmul_precision", "cuda.matmul.allow_tf32")
    jax_rows = ("default_matmul_precision", "enable_x64")
    # "high" lets matmuls use TF32
    assert [found[f"torch {row}"] for row in torch_rows] == ["high", True]
    assert [found[f"jax {row}"] for row in jax_rows] == ["highest", False]


def test_helpers_import_no_framework_so_precision_reports_none():
    code = ("import sys; from deepdive.core import env, flops, memory, sync, timing; "
            "from deepdive.book import plots, results; "
            "print(sorted(env.precision()), 'torch' in sys.modules, 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "[] False False"


def test_git_commit_is_none_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    assert env.git_commit() is None


@pytest.mark.parametrize("n", [0, -1, 10_000, 1.5])
def test_pin_cpu_threads_rejects_a_count_outside_the_available_cores(n):
    with pytest.raises(ValueError, match="n must be a number of threads from 1 to"):
        env.pin_cpu_threads(n)


def test_pin_cpu_threads_refuses_once_jax_is_imported():
    with pytest.raises(RuntimeError, match="must run before `import jax`"):
        env.pin_cpu_threads(1)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to pin to 1")
def test_pin_cpu_threads_gives_torch_and_the_process_the_same_count():
    code = ("import os, torch; from deepdive.core.env import pin_cpu_threads; pin_cpu_threads(1); "
            "print(len(os.sched_getaffinity(0)), torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.split() == ["1", "1"]


def test_compute_threads_is_one_on_a_cpu_build_and_every_core_on_a_gpu(monkeypatch):
    monkeypatch.delenv("DEEPDIVE_CPU_THREADS", raising=False)
    monkeypatch.setattr(env, "_gpu_visible", lambda: False)
    assert env.compute_threads() == env.CPU_BUILD_THREADS == 1

    monkeypatch.setattr(env, "_gpu_visible", lambda: True)
    assert env.compute_threads() == len(os.sched_getaffinity(0))


def test_a_gpu_is_visible_before_torch_is_imported_unless_cuda_hides_it(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(env, "_nvml_handle", lambda: object())  # the driver lists a GPU
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert env._gpu_visible()
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert not env._gpu_visible()
    monkeypatch.setattr(env, "_nvml_handle", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert not env._gpu_visible()


def test_compute_threads_honours_deepdive_cpu_threads(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_CPU_THREADS", "1")

    assert env.compute_threads() == 1


@pytest.mark.parametrize("value", ["0", "two", "10000"])
def test_compute_threads_rejects_a_bad_deepdive_cpu_threads(monkeypatch, value):
    monkeypatch.setenv("DEEPDIVE_CPU_THREADS", value)

    with pytest.raises(ValueError, match=f"DEEPDIVE_CPU_THREADS='{value}' is not a thread count"):
        env.compute_threads()


def test_cpu_flags_read_this_cpus_features():
    flags = env.cpu_flags()

    assert flags and all(" " not in flag for flag in flags)
    assert env.bf16_native("cpu") == bool({"avx512_bf16", "amx_bf16", "bf16"} & flags)


def test_bf16_native_rejects_an_unknown_device():
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        env.bf16_native("tpu")


def test_progress_is_silent_inside_the_book_build(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_BUILD", "1")
    steps = range(3)

    assert env.progress(steps, desc="sweep") is steps


def fake_isa_probe(calls, returncode=0):
    """Stands in for the probe's process: writes a compiled check where its cache folder
    is, as Inductor does, and prints the instruction set it chose."""
    def run(argv, capture_output, text, env):
        calls.append(env["TORCHINDUCTOR_CACHE_DIR"])
        (Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "isa_check.so").write_text("compiled")
        return subprocess.CompletedProcess(argv, returncode, stdout="avx512\n", stderr="")
    return run


def test_fresh_inductor_cache_is_a_new_folder_under_build_seeded_with_the_isa_check(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path / "_build" / "results"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    calls = []
    monkeypatch.setattr(env.subprocess, "run", fake_isa_probe(calls))

    first = env.fresh_inductor_cache("03_torch_compile")
    second = env.fresh_inductor_cache("03_torch_compile")

    assert first != second
    isa_check = "isa_check.so"
    assert sorted(p.name for p in first.iterdir()) == [isa_check]  # no graph, no kernel
    assert first.parent == tmp_path / "_build" / "inductor-cache"
    assert first.name.startswith("03_torch_compile-")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(second)
    assert calls == [str(first.parent / env.ISA_PROBE_FOLDER)]  # once per build
    probe = env.inductor_isa_probe(first.parent)
    assert probe.chosen == "avx512" and probe.seconds >= 0


def test_a_failed_isa_check_leaves_the_new_folder_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path / "_build" / "results"))
    monkeypatch.setattr(env.subprocess, "run", fake_isa_probe([], returncode=1))

    folder = env.fresh_inductor_cache("01_vmap")

    assert not any(folder.iterdir())
    assert env.inductor_isa_probe(folder.parent) is None
    assert not (folder.parent / env.ISA_PROBE_FOLDER).exists()


@pytest.mark.parametrize(("available", "total", "label"),
                         [(2, 2, "(2 cores)"), (1, 2, "(1 of 2 cores)"), (1, 1, "(1 core)"),
                          (11, 12, "(11 of 12 cores)")])
def test_device_label_names_the_cpu_and_the_cores_in_use(monkeypatch, available, total, label):
    monkeypatch.setattr(env, "gpu_name", lambda: None)
    monkeypatch.setattr(env, "available_cores", lambda: available)
    monkeypatch.setattr(os, "cpu_count", lambda: total)

    assert env.device_label() == f"{env.cpu_model()} {label}"
    assert env.is_cpu_label(env.device_label())


@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA L4",
                                 "NVIDIA GeForce RTX 4090"])
def test_a_gpu_label_is_not_a_cpu_label(monkeypatch, gpu):
    monkeypatch.setattr(env, "gpu_name", lambda: gpu)

    assert env.device_label() == gpu and not env.is_cpu_label(gpu)


@pytest.mark.parametrize(("torch_kind", "jax_backend"), [("cpu", "cpu"), ("cuda", "gpu"),
                                                         ("cuda", "cuda"), ("cuda", "rocm")])
def test_frameworks_on_the_same_kind_of_device_pass(torch_kind, jax_backend):
    assert env.device_mismatch(torch_kind, jax_backend) is None


@pytest.mark.parametrize(("torch_kind", "jax_backend", "fix"), [
    ("cuda", "cpu", "jax[cuda13]=="),  # the bug: jax[cpu] beside a CUDA torch
    ("cpu", "gpu", "CUDA build of the pinned torch"),
    ("cpu", "tpu", "JAX_PLATFORMS=cpu"),
])
def test_frameworks_on_different_devices_are_refused_with_the_fix(torch_kind, jax_backend, fix):
    problem = env.device_mismatch(torch_kind, jax_backend)

    assert problem is not None and fix in problem
    hide_the_gpu = "CUDA_VISIBLE_DEVICES=''"
    if "cuda" in (torch_kind, jax_backend) or jax_backend == "gpu":
        assert hide_the_gpu in problem


def test_an_unknown_torch_device_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="torch_kind must be 'cuda' or 'cpu'"):
        env.device_mismatch("mps", "cpu")


def test_this_machine_runs_both_frameworks_on_one_kind_of_device():
    import torch

    assert env.require_same_device() == ("cuda" if torch.cuda.is_available() else "cpu")


def test_jax_is_told_not_to_reserve_the_gpu_before_it_starts(monkeypatch):
    import sys

    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    env.let_jax_share_the_gpu()

    preallocate = "XLA_PYTHON_CLIENT_PREALLOCATE"
    assert os.environ[preallocate] == "false"


def test_sharing_the_gpu_is_refused_once_jax_is_imported():
    import jax  # noqa: F401

    with pytest.raises(RuntimeError, match="must run before `import jax`"):
        env.let_jax_share_the_gpu()
