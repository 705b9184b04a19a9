"""Where a number came from: the machine, the versions, the precision, the scale.

Chapter 1 (vmap) introduces `describe()` and `scale()`; every chapter prints them.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["CPU_BUILD_THREADS", "DATE_FORMAT", "FRAMEWORK_DISTRIBUTIONS", "FULL_MIN_GPU_BYTES",
           "ISA_PROBE_FOLDER", "SCALES", "IsaProbe", "available_cores", "bf16_native", "book_root",
           "choose_scale", "compute_threads", "cpu_flags", "cpu_label", "cpu_model", "describe",
           "device_label", "device_mismatch", "devices", "fresh_inductor_cache", "git_commit",
           "gpu_memory", "gpu_name", "inductor_isa_probe", "is_cpu_label", "jax_sees_gpu",
           "let_jax_share_the_gpu", "pin_cpu_threads", "precision", "progress",
           "require_same_device", "results_dir", "scale", "threads", "torch_sees_gpu", "versions"]

SCALES = ("small", "medium", "full")
# `full` runs the seeds' sizes: a data-centre GPU's memory (A100 40GB reports 39.6 GiB).
FULL_MIN_GPU_BYTES = 39 * 2**30
FRAMEWORK_DISTRIBUTIONS = (
    "torch", "jax", "jaxlib", "flax", "optax", "transformers", "numpy", "jupyter-book",
)


def book_root() -> Path:
    """The book's root folder (the one holding `_toc.yml`), searched from the working
    directory up; the working directory itself when none is found."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").exists():
            return folder
    return here


def results_dir() -> Path:
    """Where this build keeps what it measured: `DEEPDIVE_RESULTS_DIR`, else
    `_build/results` at the book's root (`deepdive.book.results` saves each chapter's records
    there; the calibration, provenance and compile caches live beside them)."""
    override = os.environ.get("DEEPDIVE_RESULTS_DIR")
    return Path(override) if override else book_root() / "_build" / "results"


def scale() -> str:
    """Return the build's size: ``"small"`` (CPU), ``"medium"`` (one reader's GPU, the
    default where PyTorch and JAX both see one) or ``"full"`` (the seeds' sizes, on request
    on a GPU with 40 GB or more; each chapter's plan says whether it fits).

    ``DEEPDIVE_SCALE`` asks for one; `choose_scale` decides and refuses what cannot run.
    See the methodology page's "Scale".
    """
    gpu = gpu_name()
    return choose_scale(os.environ.get("DEEPDIVE_SCALE"), gpu=gpu,
                        gpu_memory=gpu_memory() if gpu else None, torch_gpu=gpu is not None,
                        jax_gpu=jax_sees_gpu())


def choose_scale(requested: str | None, *, gpu: str | None, gpu_memory: int | None,
                 torch_gpu: bool, jax_gpu: bool) -> str:
    """The scale for a build, given the request and what each framework sees.

    `requested` is ``DEEPDIVE_SCALE`` (None or empty: choose); `gpu` is the GPU's name and
    `gpu_memory` its bytes; `torch_gpu` and `jax_gpu` say whether each framework runs on
    it. Without a request: ``medium`` where both frameworks see the GPU,
    ``small`` where neither does, and an error naming the fix where only one does (a
    comparison would time a GPU against a CPU). ``medium`` and ``full`` need both on the
    GPU; ``full`` also needs `FULL_MIN_GPU_BYTES`. Pure, so every case is unit-tested.
    """
    chosen = (requested or "").strip().lower()
    if chosen and chosen not in SCALES:
        raise ValueError(f"DEEPDIVE_SCALE={chosen!r} is not a scale; accepted values: "
                         f"{', '.join(SCALES)}")
    if torch_gpu != jax_gpu and chosen != "small":
        raise RuntimeError(device_mismatch("cuda" if torch_gpu else "cpu",
                                           "gpu" if jax_gpu else "cpu"))
    if not chosen:
        return "medium" if torch_gpu and jax_gpu else "small"
    if chosen != "small" and not (torch_gpu and jax_gpu):
        seen = f"{gpu!r} is there but neither framework uses it" if gpu else "there is none"
        raise ValueError(f"DEEPDIVE_SCALE={chosen} needs a GPU that PyTorch and JAX both "
                         f"see; {seen}. Use DEEPDIVE_SCALE=small on a CPU (README, 'On a GPU').")
    if chosen == "full" and (gpu_memory or 0) < FULL_MIN_GPU_BYTES:
        have = (f"{gpu} has {gpu_memory / 2**30:.1f} GiB" if gpu_memory
                else f"{gpu}'s memory is unknown")
        raise ValueError(f"DEEPDIVE_SCALE=full runs the seeds' sizes and needs a GPU with at "
                         f"least {FULL_MIN_GPU_BYTES / 2**30:.0f} GiB; {have}. Use "
                         "DEEPDIVE_SCALE=medium (any single GPU).")
    return chosen


def torch_sees_gpu() -> bool:
    """Whether PyTorch has a CUDA (or ROCm) device: what it sees honours
    CUDA_VISIBLE_DEVICES. Imports torch, which JAX's settings do not mind."""
    import torch

    return torch.cuda.is_available()


# The distributions through which JAX reaches an NVIDIA or AMD GPU.
_JAX_GPU_PLUGINS = re.compile(r"^jax[-_](cuda\d+|rocm\d*)[-_](plugin|pjrt)$")


def jax_sees_gpu() -> bool:
    """Whether JAX runs on a GPU: its backend once imported. Before that (so that XLA's
    settings can still change), whether it would: a GPU plugin of jaxlib's own version is
    installed, JAX_PLATFORMS allows a GPU, and PyTorch sees a GPU under the same
    CUDA_VISIBLE_DEVICES."""
    if "jax" in sys.modules:
        import jax

        return jax.default_backend() in _JAX_GPU_BACKENDS
    platforms = os.environ.get("JAX_PLATFORMS", "").lower()
    if platforms and not {"cuda", "gpu", "rocm"} & set(platforms.replace(" ", "").split(",")):
        return False
    jaxlib = versions().get("jaxlib")
    plugins = {(dist.metadata["Name"] or "").lower(): dist.version
               for dist in importlib.metadata.distributions()}
    # jaxlib ignores a CUDA plugin of another version ("it will not be used"): a plugin
    # left behind by an older JAX (Colab's, say) is no GPU
    usable = any(_JAX_GPU_PLUGINS.match(name) and ("rocm" in name or version == jaxlib)
                 for name, version in plugins.items())
    return usable and torch_sees_gpu()


def gpu_name() -> str | None:
    """Name of the GPU this build runs on: PyTorch's CUDA device 0, which honours
    CUDA_VISIBLE_DEVICES (and is AMD's GPU under ROCm); None where PyTorch sees none, even
    if the driver has one (a build told to ignore it runs on the CPU)."""
    if not torch_sees_gpu():
        return None
    import torch

    return torch.cuda.get_device_name(0)


def _gpu_visible() -> bool:
    """Whether this process will see a GPU, without importing torch when it is not imported
    yet: importing it loads NumPy, whose BLAS reads its thread count once, at load, so
    `pin_cpu_threads` must set OMP_NUM_THREADS first. The driver has a GPU (NVML) and
    CUDA_VISIBLE_DEVICES does not hide it; once torch is imported, torch decides."""
    if "torch" in sys.modules:
        return torch_sees_gpu()
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return False
    return _nvml_handle() is not None


def gpu_memory() -> int | None:
    """Total memory in bytes of the GPU `gpu_name` names, or None without one."""
    if not torch_sees_gpu():
        return None
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)


def _nvml_handle():
    """NVML handle of device 0, or None without a driver. Kept tiny: it cannot run on CPU CI."""
    if shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 - any NVML failure means "no usable GPU"
        return None


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, falling back to `platform`."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def versions() -> dict[str, str | None]:
    """Installed versions of the frameworks, read from package metadata (nothing imported)."""
    found = {}
    for dist in FRAMEWORK_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def precision() -> dict[str, str | bool | None]:
    """Matmul precision settings of the frameworks already imported (none are imported here)."""
    settings: dict[str, str | bool | None] = {}
    if "torch" in sys.modules:
        import torch

        settings["torch float32_matmul_precision"] = torch.get_float32_matmul_precision()
        settings["torch cuda.matmul.allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        settings["torch cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
    if "jax" in sys.modules:
        import jax

        # None means JAX's default: full fp32 on CPU, TF32-like on NVIDIA GPUs.
        settings["jax default_matmul_precision"] = jax.config.jax_default_matmul_precision
        settings["jax enable_x64"] = bool(jax.config.jax_enable_x64)
    return settings


def threads() -> dict[str, int | str | None]:
    """CPU thread counts each framework will use, and the variables that set them."""
    counts: dict[str, int | str | None] = {"os.cpu_count": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        counts["cores available"] = len(os.sched_getaffinity(0))
    if "torch" in sys.modules:
        import torch

        counts["torch intra-op threads"] = torch.get_num_threads()
        counts["torch inter-op threads"] = torch.get_num_interop_threads()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS"):
        counts[var] = os.environ.get(var)
    return counts


# One compute thread per framework on CPU builds: on the 2-core build machine two threads
# barely sped these workloads up and made their medians far less stable (the methodology
# page measures both on every build). DEEPDIVE_CPU_THREADS overrides.
CPU_BUILD_THREADS = 1


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), else the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def compute_threads() -> int:
    """How many CPU threads both frameworks get: ``DEEPDIVE_CPU_THREADS``, else one on a
    CPU build, else every core (a GPU build's host threads feed the device and compile)."""
    cores = available_cores()
    chosen = os.environ.get("DEEPDIVE_CPU_THREADS", "").strip()
    if chosen:
        if not chosen.isdigit() or not 1 <= int(chosen) <= cores:
            raise ValueError(f"DEEPDIVE_CPU_THREADS={chosen!r} is not a thread count; accepted: "
                             f"an integer from 1 to {cores} (this machine's available cores)")
        return int(chosen)
    return cores if _gpu_visible() else min(CPU_BUILD_THREADS, cores)


def pin_cpu_threads(n: int | None = None) -> int:
    """Give PyTorch and XLA's CPU backend the same number of threads (default:
    `compute_threads()`).

    XLA has no thread-count flag: it sizes its CPU thread pool from the process's CPU
    affinity when its backend initialises, at the first JAX operation. So the affinity
    mask is narrowed to `n` cores (if fewer than available) and torch is told the same
    number. It refuses once `jax` is imported: the simplest point that is certainly
    before the backend starts. Chapter 1 explains why (protocol rule 5); the methodology
    page measures how the choice affects the stability of timings.
    """
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = len(available) if available else os.cpu_count()
    n = compute_threads() if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= cores:
        raise ValueError(f"n must be a number of threads from 1 to {cores} (this machine's "
                         f"available cores), got {n!r}")
    if "jax" in sys.modules:
        raise RuntimeError("pin_cpu_threads must run before `import jax`: XLA sizes its thread "
                           "pool once, when its backend starts; restart the kernel and call "
                           "it first")
    if available and n < cores:
        os.sched_setaffinity(0, available[:n])
    os.environ["OMP_NUM_THREADS"] = str(n)
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(n)
    return n


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (x86 `flags`, Arm `Features`); empty
    where there is no /proc."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return set()
    for line in cpuinfo.read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def bf16_native(device: str = "cpu") -> bool:
    """Whether bf16 runs in hardware on `device` ("cpu" or "cuda"); see
    `deepdive.core.flops.bf16_is_native`. Chapter 4 labels emulated bf16 rows."""
    from deepdive.core.flops import bf16_is_native

    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    capability = None
    if device == "cuda":
        import torch

        capability = torch.cuda.get_device_capability()
    return bf16_is_native(cpu_flags(), capability)


def devices() -> dict[str, str | None]:
    """The accelerator, driver and CUDA versions, or None where there is none."""
    found: dict[str, str | None] = {"gpu": gpu_name(), "driver": None, "cuda (torch build)": None}
    handle = _nvml_handle()
    if handle is not None:
        import pynvml

        found["driver"] = pynvml.nvmlSystemGetDriverVersion()
    if "torch" in sys.modules:
        import torch

        found["cuda (torch build)"] = torch.version.cuda
    if "jax" in sys.modules:
        import jax

        found["jax backend"] = jax.default_backend()
        found["jax devices"] = ", ".join(str(d) for d in jax.devices())
    return found


def git_commit() -> str | None:
    """The commit this build came from, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
            timeout=10, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


DATE_FORMAT = "%Y-%m-%d %H:%M UTC"


def describe() -> dict[str, object]:
    """Everything a reader needs to reproduce a number: machine, versions, precision, scale.

    Frameworks are reported only as far as they are already imported, so calling this
    costs nothing extra. Chapter 1 prints it; the reproduce page shows the build's.
    """
    import psutil

    return {
        "date": _dt.datetime.now(_dt.UTC).strftime(DATE_FORMAT),
        "git commit": git_commit(),
        "scale": scale(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "ram GiB": round(psutil.virtual_memory().total / 2**30, 1),
        **devices(),
        **threads(),
        **precision(),
        **{f"version {name}": v for name, v in versions().items()},
    }


ISA_PROBE_FOLDER = "cpu-isa-probe"  # under _build/inductor-cache/, compiled once per build
_ISA_PROBE = ("from torch._inductor import cpu_vec_isa; "
              "print(cpu_vec_isa.pick_vec_isa() or 'none')")


def fresh_inductor_cache(chapter: str) -> Path:
    """Point torch.compile's Inductor cache at a new folder for this run, empty but for
    Inductor's check of the CPU's vector instructions.

    Compile times are then cold compiles of every graph and kernel on every build, while the
    kernels still land under the book's `_build/inductor-cache/` (so `make clean` removes
    them). The check (`cpu_vec_isa`: a test program compiled and run per instruction set,
    about 16 s on the 2-core build machine, once per cache folder) is a cost of the machine,
    not of any model: `inductor_isa_probe` runs it once per build and each new folder starts
    with its results, so no page's first compile pays it again. Call this before the first
    `torch.compile`.
    """
    import tempfile

    parent = results_dir().parent / "inductor-cache"
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{chapter}-", dir=parent))
    probe = inductor_isa_probe(parent)
    if probe is not None:
        shutil.copytree(probe.folder, folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(IsaProbe.RECORD))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    return folder


class IsaProbe:
    """Inductor's CPU instruction-set check, run once into `folder`: what it chose and how
    long the fresh process that ran it took (torch's import included)."""

    RECORD = "probe.txt"

    def __init__(self, folder: Path, chosen: str, seconds: float):
        self.folder, self.chosen, self.seconds = folder, chosen, seconds


def inductor_isa_probe(parent: Path) -> IsaProbe | None:
    """Run Inductor's CPU instruction-set check once into `parent`/cpu-isa-probe (a fresh
    process, so its cache folder is that one) and return it; later calls read the record.
    None where the check fails (no C++ compiler, say): torch.compile will then say why."""
    import time

    folder = parent / ISA_PROBE_FOLDER
    record = folder / IsaProbe.RECORD
    if not record.exists():
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        ran = subprocess.run([sys.executable, "-c", _ISA_PROBE], capture_output=True,
                             text=True, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder)})
        if ran.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            return None
        chosen = (ran.stdout.strip().splitlines() or ["none"])[-1]
        record.write_text(f"{chosen}\n{time.perf_counter() - start:.3f}\n")
    chosen, seconds = record.read_text().split("\n")[:2]
    return IsaProbe(folder, chosen, float(seconds))


def progress(iterable, desc: str = "", total: int | None = None):
    """A progress bar in Jupyter; nothing inside the book build (`DEEPDIVE_BUILD=1`)."""
    if os.environ.get("DEEPDIVE_BUILD") == "1":
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False)


def is_cpu_label(label: str) -> bool:
    """Whether a `device_label()` names a CPU (it ends in its core count), not a GPU."""
    return bool(re.search(r"\(\d+ (of \d+ )?cores?\)$", str(label)))


def device_label() -> str:
    """Short name of the device a chapter measures on: the GPU, else the CPU and its cores."""
    return gpu_name() or cpu_label()


def cpu_label() -> str:
    """The CPU and the cores this process may use, e.g. "AMD EPYC (1 of 2 cores)": the
    device label of work that ran on the CPU even where a GPU is present (chapter 6's
    simulated devices)."""
    cores, total = available_cores(), os.cpu_count()
    noun = "core" if total == 1 else "cores"
    return f"{cpu_model()} ({cores} of {total} {noun})" if cores != total else \
        f"{cpu_model()} ({total} {noun})"


# JAX's backend names for an NVIDIA or AMD GPU, as torch names its device kind.
_JAX_GPU_BACKENDS = {"gpu", "cuda", "rocm"}


def device_mismatch(torch_kind: str, jax_backend: str) -> str | None:
    """Why PyTorch and JAX would not run on the same kind of device, or None when they do.

    `torch_kind` is "cuda" or "cpu" (what `torch.cuda.is_available()` gives a chapter);
    `jax_backend` is `jax.default_backend()` ("gpu", "cpu", "tpu", ...). A chapter that
    compares them on different kinds would time a GPU against a CPU, so it must stop; the
    message names the fix.
    """
    if torch_kind not in ("cuda", "cpu"):
        raise ValueError(f"torch_kind must be 'cuda' or 'cpu', got {torch_kind!r}")
    jax_kind = "cuda" if jax_backend in _JAX_GPU_BACKENDS else jax_backend
    if jax_kind == torch_kind:
        return None
    jax_version = versions().get("jax") or "<the pinned version>"
    hide_gpu = "or run on the CPU alone: CUDA_VISIBLE_DEVICES='' DEEPDIVE_SCALE=small"
    if torch_kind == "cuda":
        return (f"PyTorch sees a CUDA GPU but JAX runs on its {jax_backend!r} backend, so a "
                f"comparison would time a GPU against a {jax_backend.upper()}. Install JAX's "
                f"CUDA build beside the pinned one (pip install 'jax[cuda13]=={jax_version}'), "
                f"{hide_gpu}.")
    if jax_kind == "cuda":
        return ("JAX sees a GPU but this PyTorch has no CUDA, so a comparison would time a "
                "CPU against a GPU. Install a CUDA build of the pinned torch (the registry's "
                f"wheel is one), {hide_gpu}.")
    return (f"PyTorch runs on the {torch_kind.upper()} and JAX on its {jax_backend!r} "
            "backend; this book compares them on one kind of device only: run JAX on the "
            "CPU too (JAX_PLATFORMS=cpu).")


def require_same_device() -> str:
    """The kind of device both frameworks run on ("cuda" or "cpu"); raises RuntimeError,
    naming the fix, when PyTorch and JAX see different kinds (see `device_mismatch`)."""
    import jax
    import torch

    torch_kind = "cuda" if torch.cuda.is_available() else "cpu"
    problem = device_mismatch(torch_kind, jax.default_backend())
    if problem:
        raise RuntimeError(problem)
    return torch_kind


def let_jax_share_the_gpu() -> None:
    """Stop JAX from reserving 75% of a GPU's memory when its backend starts
    (`XLA_PYTHON_CLIENT_PREALLOCATE=false`), so PyTorch can allocate beside it in the same
    process. It refuses once `jax` is imported: the setting is read when the backend
    starts. Harmless on a CPU."""
    if "jax" in sys.modules:
        raise RuntimeError("let_jax_share_the_gpu must run before `import jax`: JAX reads "
                           "XLA_PYTHON_CLIENT_PREALLOCATE when its backend starts; restart "
                           "the kernel and call it first")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
