"""What a build measures once and every page reads: the tie band and the CPU's peak FLOP/s.

The verdict rule needs the build's run-to-run spread (`deepdive.core.verdict.measure_tie_band`)
and MFU on a CPU needs a measured peak (`deepdive.core.flops`). Measured by each page, both
moved from page to page, so one comparison could read "tie" on one page and "withheld"
on another, and one step's MFU differ by the page that timed it. So a build measures
them once, before any page runs (`make book` runs `python -m deepdive.book.calibration`), and
saves them to `_build/results/calibration.json`; every page reads that file. The file lives
as long as the build's results do: an incremental build, whose cached pages keep the
verdicts they decided, keeps the calibration those verdicts used, and `make clean` (or a
fresh clone) measures anew. A page run on its own (Colab, Jupyter) reads the file where one
was measured under the same conditions (`Key`: machine, threads, allocator regime, framework
versions), and otherwise measures it now and saves it for the pages after it.

Measured here, per device kind the build runs on ("cpu", and "cuda" on a GPU build): the
tie band; on the CPU, the peak per dtype (fp32, bf16): the better of PyTorch's best matmul
rate over several shapes and JAX's on a square one, so neither framework's MFU can pass
1 because the other multiplies faster. A GPU's peak is its datasheet's (`flops.device_peak`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from dataclasses import asdict, dataclass

from deepdive.core import allocator, env, flops
from deepdive.core.env import results_dir
from deepdive.core.verdict import TieBand, measure_tie_band

__all__ = ["FILE_NAME", "NONE_SAVED", "PEAK_DTYPES", "Calibration", "Key", "current", "describe",
           "device_kinds", "load", "main", "measure", "path", "peak", "save", "slowness",
           "this_key", "tie_band"]

FILE_NAME = "calibration.json"
PEAK_DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class Key:
    """The conditions a calibration holds for: a page reuses it only when all match."""

    cpu: str
    threads: int
    allocator: str
    gpu: str
    torch: str
    jax: str


@dataclass(frozen=True)
class Calibration:
    key: Key
    build_id: str  # the build that measured it (`deepdive.book.provenance.build_id`)
    measured_at: str
    bands: dict  # device kind ("cpu", "cuda") -> TieBand
    peaks: dict  # CPU dtype -> {"flops_per_s", "source", "torch", "jax"} (FLOP/s)

    def tie_band(self, device: str = "cpu") -> TieBand:
        if device not in self.bands:
            raise KeyError(f"this build measured a tie band for {sorted(self.bands)}, not "
                           f"{device!r}")
        return self.bands[device]

    def cpu_peak(self, dtype: str = "fp32") -> flops.Peak:
        if dtype not in self.peaks:
            raise KeyError(f"this build measured CPU peaks for {sorted(self.peaks)}, not "
                           f"{dtype!r}")
        peak = self.peaks[dtype]
        return flops.Peak(peak["flops_per_s"], dtype, peak["source"])

    def to_json(self) -> str:
        return json.dumps({"key": asdict(self.key), "build_id": self.build_id,
                           "measured_at": self.measured_at,
                           "bands": {kind: {"width": band.width, "evidence": list(band.evidence)}
                                     for kind, band in self.bands.items()},
                           "peaks": self.peaks}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        raw = json.loads(text)
        return cls(Key(**raw["key"]), raw["build_id"], raw["measured_at"],
                   {kind: TieBand(band["width"], tuple(band["evidence"]))
                    for kind, band in raw["bands"].items()}, raw["peaks"])


def path():
    return results_dir() / FILE_NAME


def this_key() -> Key:
    """The conditions of this process, as a page (or the build's first step) runs."""
    versions = env.versions()
    return Key(env.cpu_model(), env.compute_threads(), allocator.describe(),
               env.gpu_name() or "none", versions.get("torch") or "none",
               versions.get("jax") or "none")


def device_kinds() -> tuple[str, ...]:
    """The devices this build's claims run on: the CPU always (the distributed chapter's simulated
    devices and the PyTorch/XLA page run there on any machine), and the GPU where both
    frameworks see one."""
    gpu = env.gpu_name() is not None and env.jax_sees_gpu()
    return ("cpu", "cuda") if gpu else ("cpu",)


def measure() -> Calibration:
    """Measure the tie band per device kind and the CPU peaks now, in this process (run
    with the threads, allocator regime and precision the pages use: `main` sets them)."""
    bands = {kind: measure_tie_band(device=kind) for kind in device_kinds()}
    peaks = {dtype: _cpu_peak(dtype) for dtype in PEAK_DTYPES}
    from deepdive.book import provenance

    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Calibration(this_key(), provenance.build_id(), when, bands, peaks)


def _cpu_peak(dtype: str) -> dict:
    torch_peak = flops.measured_matmul_peak(dtype=dtype)
    jax_rate = flops.jax_matmul_rate(dtype, device="cpu")
    emulated = "" if dtype != "bf16" or env.bf16_native("cpu") else ", emulated bf16"
    if torch_peak.flops_per_s >= jax_rate:
        best, source = torch_peak.flops_per_s, torch_peak.source + emulated
    else:
        best, source = jax_rate, f"{flops.MEASURED}: JAX 1024^3 {dtype} matmul{emulated}"
    return {"flops_per_s": best, "source": f"{source} (this build's calibration)",
            "torch": torch_peak.flops_per_s, "jax": jax_rate}


def load() -> Calibration | None:
    """The saved calibration, or None where none is saved or it is in an older format."""
    file = path()
    if not file.exists():
        return None
    try:
        return Calibration.from_json(file.read_text())
    except (KeyError, TypeError, ValueError):  # written by an older deepdive: measure anew
        return None


def save(calibration: Calibration):
    file = path()
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(calibration.to_json())
    temporary.replace(file)  # atomic: a reader never sees half a file
    return file


def current() -> Calibration:
    """The build's calibration: the saved one when it holds for this process (`Key`),
    else measured now and saved."""
    saved = load()
    if saved is not None and saved.key == this_key():
        return saved
    calibration = measure()
    save(calibration)
    return calibration


def tie_band(device: str = "cpu") -> TieBand:
    """This build's tie band on `device` ("cpu" or "cuda"), measured once per build."""
    return current().tie_band(device)


def peak(device: str, dtype: str, *, bf16_native: bool = True) -> flops.Peak:
    """The peak a page divides by for MFU: a GPU's datasheet peak (`flops.device_peak`),
    or this build's measured CPU peak for `dtype` (one per build: every page's MFU on a
    CPU divides by the same number)."""
    if device == "cuda":
        import torch

        return flops.device_peak(torch.cuda.get_device_name(), dtype)
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    measured = current().cpu_peak(dtype)
    if dtype == "bf16" and not bf16_native and "emulated" not in measured.source:
        return flops.Peak(measured.flops_per_s, dtype, measured.source + ", emulated bf16")
    return measured


def slowness(calibration: Calibration | None = None) -> float:
    """How much longer than the reference machine this build's CPU takes (`plan.slowness`,
    from the measured fp32 peak): the factor its page budgets and hang guards stretch by.
    By default this process's calibration (`current`, measured if none holds for it); a page
    that only reports on the build passes the saved one (`load()`), which it must not
    replace with one of its own conditions."""
    from deepdive.book import plan

    return plan.slowness((calibration or current()).cpu_peak("fp32").flops_per_s)


NONE_SAVED = "none saved yet: the first page to run measures it"


def describe() -> str:
    """Which build measured the saved calibration, when, and its CPU band, for the
    Reproduce page; or that none is saved yet."""
    saved = load()
    if saved is None:
        return NONE_SAVED
    bands = ", ".join(f"{kind} ±{100 * band.width:.1f}%" for kind, band in saved.bands.items())
    return f"tie band {bands}, by build {saved.build_id} at {saved.measured_at}"


def main() -> None:
    """The build's first step: set up as the pages do, then keep the saved calibration where
    it holds for these conditions (an incremental build) or measure and save one; print a
    summary."""
    env.pin_cpu_threads()
    allocator.keep_freed_memory()
    env.let_jax_share_the_gpu()
    import torch

    from deepdive.models import parity

    torch.set_num_threads(env.compute_threads())
    parity.strict_fp32()  # the book's one switch, as every page's set-up
    saved = load()
    kept = saved is not None and saved.key == this_key()
    calibration = current()
    bands = ", ".join(f"{kind} ±{100 * band.width:.1f}%" for kind, band in
                      calibration.bands.items())
    peaks = ", ".join(f"{dtype} {p['flops_per_s'] / 1e9:.1f} GFLOP/s"
                      for dtype, p in calibration.peaks.items())
    how = "kept, as measured" if kept else "measured"
    print(f"calibration {how} by build {calibration.build_id} ({calibration.measured_at}): "
          f"tie band {bands}; CPU peaks {peaks}; {calibration.key.allocator}; in {path()}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
