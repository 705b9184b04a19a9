"""Tidy result records, saved under `_build/results/` for later chapters and the guide.

One row per measured value: chapter, experiment, framework, variant, size, metric, value,
unit, device. Chapter 1 introduces `Results`; the choosing chapter reads every chapter's file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from deepdive.book import provenance
from deepdive.core import env
from deepdive.core.env import results_dir
from deepdive.core.timing import Timing

__all__ = ["COLUMNS", "GLUE_PREFIX", "OPTIONAL_COLUMNS", "Record", "Results", "glue", "load"]


COLUMNS = ("chapter", "experiment", "framework", "variant", "size", "metric", "value",
           "unit", "device", "scale", "code")
# Columns a saved file may lack: bundles of builds from before they existed.
OPTIONAL_COLUMNS = ("code",)


@dataclass(frozen=True)
class Record:
    chapter: str
    experiment: str
    framework: str
    variant: str
    size: float | int | str
    metric: str
    value: float
    unit: str
    device: str
    scale: str
    code: str = ""  # a timing's: where the timed code was written (`Timing.code`, ";"-joined)


class Results:
    """The records of one chapter; `save()` writes them to `<results_dir>/<chapter>.csv`."""

    def __init__(self, chapter: str, device: str | None = None, versions: dict | None = None):
        """`device` labels where the values were measured; by default
        `env.device_label()`: pass `env.cpu_label()` for work that ran on the CPU anyway.
        `versions` names the torch and jax that ran where this process's are not all of
        them (`deepdive.book.provenance.stamp`)."""
        if not chapter or not isinstance(chapter, str):
            raise ValueError(f"chapter must be a non-empty name such as '01_vmap', got {chapter!r}")
        self.chapter, self.versions = chapter, versions
        self.records: list[Record] = []
        self._device = device or env.device_label()
        self._scale = env.scale()

    def add(self, experiment: str, framework: str, variant: str, size, metric: str,
            value: float, unit: str, code: str = "") -> None:
        self.records.append(Record(self.chapter, experiment, framework, variant, size, metric,
                                   float(value), unit, self._device, self._scale, code))

    def add_timing(self, experiment: str, framework: str, variant: str, size,
                   timing: Timing) -> None:
        """Median, IQR and first-call time of a Timing, in seconds, and its number of
        samples and noisy flag (the site checks count both). The median's row also keeps
        where the timed code was written (`Timing.code`), which the site's tests check."""
        code = ";".join(timing.code)
        for metric, value in (("median", timing.median), ("iqr", timing.iqr),
                              ("first_call", timing.first_call)):
            self.add(experiment, framework, variant, size, metric, value, "s",
                     code if metric == "median" else "")
        self.add(experiment, framework, variant, size, "blocks", timing.n, "count")
        self.add(experiment, framework, variant, size, "noisy", float(timing.noisy), "flag")

    def frame(self):
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.records], columns=COLUMNS)

    def save(self) -> Path:
        folder = results_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.chapter}.csv"
        self.frame().to_csv(path, index=False)
        provenance.stamp(self.chapter, self._device, self.versions)
        return path


# myst-nb's glue format: a display with these MIME-type keys and `scrapbook` metadata, which
# the book build reads back from the executed notebook. Written here so that chapters run in
# a kernel without myst-nb (Colab, a runtime-only Jupyter); a test checks it matches myst_nb.
GLUE_PREFIX = "application/papermill.record/"


def glue(name: str, value) -> None:
    """Glue a value for the page's prose (`{glue:text}` role), numpy scalars made plain.

    myst-nb formats glued numbers from their text form, which for numpy scalars is
    ``np.float64(...)``; converting first keeps format specs such as ``:.2f`` working.
    Nothing shows in the notebook itself (myst_nb.glue with ``display=False``).
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display

    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()
    bundle, metadata = format_display_data(value)
    metadata["scrapbook"] = {"name": name, "mime_prefix": GLUE_PREFIX}
    display({GLUE_PREFIX + kind: data for kind, data in bundle.items()}, raw=True,
            metadata=metadata)


def load(chapter: str):
    """The saved records of `chapter` as a DataFrame; a clear error when it has not run."""
    import pandas as pd

    path = results_dir() / f"{chapter}.csv"
    if not path.exists():
        raise FileNotFoundError(
            f"no results for chapter {chapter!r} at {path}: build that chapter first "
            "(make book) or run its notebook"
        )
    frame = pd.read_csv(path, dtype={"code": str}, keep_default_na=False,
                        na_values={"value": ["", "nan", "NaN"]})
    return frame.reindex(columns=list(COLUMNS), fill_value="")
