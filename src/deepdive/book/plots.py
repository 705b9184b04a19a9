"""One house style for every figure: units on axes, IQR error bars, a provenance caption.

Chapter 1 introduces it. Figures sit on a white card so they read in light and dark
themes alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepdive.core import env
from deepdive.core.timing import Timing

__all__ = ["bar_timings", "build_note", "caption", "log_axes", "medians_and_whiskers",
           "plot_timings", "use_house_style"]

_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}
_STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "legend.frameon": False,
}


def use_house_style() -> None:
    """Apply the book's matplotlib settings."""
    import matplotlib as mpl

    mpl.rcParams.update(_STYLE)


def build_note(precision: str, extra: str = "") -> str:
    """Caption text: device, precision, scale and framework versions of this build."""
    versions = env.versions()
    parts = [
        f"Built on {env.device_label()}", precision, f"scale={env.scale()}",
        f"torch {versions['torch']}, jax {versions['jax']}",
    ]
    if extra:
        parts.append(extra)
    return " · ".join(parts)




def caption(fig, text: str) -> None:
    """Put a provenance line under the axes of `fig`."""
    fig.text(0.01, 0.0, text, fontsize=7, color="0.35", ha="left", va="bottom", wrap=True)
    fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, 0.2))


def medians_and_whiskers(timings: Sequence[Timing], unit: str):
    """Medians and their (below, above) distances to the quartiles, in `unit`."""
    if unit not in _UNITS:
        raise ValueError(f"unit {unit!r} is not known; accepted: {', '.join(_UNITS)}")
    scale = _UNITS[unit]
    medians = [t.median / scale for t in timings]
    whiskers = [[(t.median - t.q1) / scale for t in timings],
                [(t.q3 - t.median) / scale for t in timings]]
    return medians, whiskers


def plot_timings(ax, sizes: Sequence[float], timings: Sequence[Timing], label: str,
                 unit: str = "ms", **style) -> None:
    """Median per size with an IQR error bar, in `unit` (s, ms or µs)."""
    medians, whiskers = medians_and_whiskers(timings, unit)
    if len(sizes) != len(timings):
        raise ValueError(f"{len(sizes)} sizes but {len(timings)} timings: one each")
    ax.errorbar(sizes, medians, yerr=whiskers, label=label, capsize=3, marker="o",
                markersize=4, **style)


def bar_timings(ax, labels: Sequence[str], timings: Sequence[Timing], unit: str = "ms",
                horizontal: bool = True, **style) -> None:
    """Bars of medians with IQR whiskers, in `unit`: every bar chart of timings uses it."""
    medians, whiskers = medians_and_whiskers(timings, unit)
    if len(labels) != len(timings):
        raise ValueError(f"{len(labels)} labels but {len(timings)} timings: one each")
    if horizontal:
        ax.barh(list(labels), medians, xerr=whiskers, capsize=3, **style)
    else:
        ax.bar(list(labels), medians, yerr=whiskers, capsize=3, **style)


def log_axes(ax, x: bool = True, y: bool = True) -> None:
    """Log scales for sizes and times that span orders of magnitude."""
    if x:
        ax.set_xscale("log")
    if y:
        ax.set_yscale("log")
