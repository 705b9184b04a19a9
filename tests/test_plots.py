"""deepdive.book.plots: the house style, timing error bars, the provenance caption."""

import matplotlib
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from deepdive.book.plots import bar_timings, build_note, caption, plot_timings, use_house_style
from deepdive.core import env
from deepdive.core.timing import Timing


def agg_figure() -> Figure:
    """A figure drawn by Agg, outside pyplot: no display, no global figure state."""
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig


def timing(samples_s) -> Timing:
    return Timing("t", np.asarray(samples_s, dtype=float), calls_per_block=1, first_call=0.0)


@pytest.fixture
def ax():
    return agg_figure().subplots()


def test_use_house_style_sets_rcparams():
    with matplotlib.rc_context({"axes.grid": False, "axes.spines.top": True}):
        use_house_style()

        assert matplotlib.rcParams["axes.grid"] is True
        top_spine = "axes.spines.top"
        assert matplotlib.rcParams[top_spine] is False
        assert matplotlib.rcParams["figure.facecolor"] == "white"


@pytest.mark.parametrize(("unit", "per_second"), [("s", 1), ("ms", 1e3), ("µs", 1e6)])
def test_plot_timings_draws_medians_and_iqr_bars_in_the_unit(ax, unit, per_second):
    # medians 2 ms and 4 ms; quartiles 1.5/2.5 ms and 3/5 ms
    timings = [timing([1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3]), timing([2e-3, 3e-3, 4e-3, 5e-3, 6e-3])]

    plot_timings(ax, [10, 100], timings, label="jax", unit=unit)

    line, _, (bars,) = ax.containers[0]
    assert line.get_ydata() == pytest.approx(np.array([2e-3, 4e-3]) * per_second)
    bar_ends = [sorted(y for _, y in segment) for segment in bars.get_segments()]
    assert bar_ends == pytest.approx(np.array([[1.5e-3, 2.5e-3], [3e-3, 5e-3]]) * per_second)
    assert ax.get_legend_handles_labels()[1] == ["jax"]


def test_plot_timings_rejects_an_unknown_unit(ax):
    with pytest.raises(ValueError, match="unit 'ns' is not known; accepted: s, ms, µs"):
        plot_timings(ax, [1], [timing([1.0])], label="x", unit="ns")


def test_plot_timings_rejects_sizes_and_timings_of_different_lengths(ax):
    with pytest.raises(ValueError, match="2 sizes but 1 timings"):
        plot_timings(ax, [1, 2], [timing([1.0])], label="x")


@pytest.mark.parametrize("horizontal", [True, False])
def test_bar_timings_draws_medians_with_iqr_whiskers(ax, horizontal):
    timings = [timing([1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3]), timing([2e-3, 3e-3, 4e-3, 5e-3, 6e-3])]

    bar_timings(ax, ["a", "b"], timings, unit="ms", horizontal=horizontal)

    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    lengths = [b.get_width() if horizontal else b.get_height() for b in bars]
    assert lengths == pytest.approx([2, 4])
    (whiskers,) = bars.errorbar.lines[2]
    along = 0 if horizontal else 1
    ends = [sorted(point[along] for point in segment) for segment in whiskers.get_segments()]
    assert np.asarray(ends) == pytest.approx(np.array([[1.5, 2.5], [3, 5]]))


def test_bar_timings_needs_one_label_per_timing(ax):
    with pytest.raises(ValueError, match="1 labels but 2 timings"):
        bar_timings(ax, ["a"], [timing([1.0]), timing([2.0])])


def test_build_note_names_the_device_precision_and_scale(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")

    text = build_note("fp32 strict", extra="n=15 blocks")

    assert env.device_label() in text
    for part in ("fp32 strict", "scale=small", "torch ", "jax ", "n=15 blocks"):
        assert part in text


def test_caption_adds_its_text_to_the_figure():
    fig = agg_figure()
    fig.subplots()

    line = "Built on a test machine"
    caption(fig, line)
    fig.canvas.draw()

    assert [t.get_text() for t in fig.texts] == [line]
    assert fig.subplotpars.bottom >= 0.2  # room below the axes, so it does not overlap
