"""deepdive.book.results: tidy records saved per chapter and loaded back."""

import numpy as np
import pandas as pd
import pytest

from deepdive.book.results import COLUMNS, GLUE_PREFIX, Results, glue, load
from deepdive.core import env
from deepdive.core.env import results_dir
from deepdive.core.timing import Timing


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")
    return tmp_path / "results"


def test_add_makes_one_tidy_row_with_device_and_scale():
    results = Results("01_vmap")

    results.add("matmul", "jax", "vmap", 128, "median", 0.25, "s")

    assert results.frame().to_dict("records") == [{
        "chapter": "01_vmap", "experiment": "matmul", "framework": "jax", "variant": "vmap",
        "size": 128, "metric": "median", "value": 0.25, "unit": "s",
        "device": env.device_label(), "scale": "small", "code": "",
    }]


def test_add_timing_records_median_iqr_first_call_blocks_and_noise():
    timing = Timing("t", np.array([1.0, 2.0, 3.0, 4.0, 5.0]), calls_per_block=1, first_call=9.0)
    results = Results("01_vmap")

    results.add_timing("matmul", "torch", "loop", 64, timing)

    frame = results.frame().set_index("metric")
    assert frame.value.to_dict() == {"median": 3.0, "iqr": 2.0, "first_call": 9.0,
                                     "blocks": 5.0, "noisy": 1.0}
    assert frame.unit.to_dict() == {"median": "s", "iqr": "s", "first_call": "s",
                                    "blocks": "count", "noisy": "flag"}


def test_save_then_load_round_trips_the_records(results_in_tmp):
    results = Results("02_jit_xla")
    results.add("matmul", "jax", "jit", 256, "median", 1 / 3, "s")
    results.add("matmul", "torch", "eager", 512, "median", 0.1234567890123, "s")

    path = results.save()

    assert path == results_in_tmp / f"{results.chapter}.csv"
    loaded = load("02_jit_xla")
    assert list(loaded.columns) == list(COLUMNS)
    pd.testing.assert_frame_equal(loaded, results.frame())


def test_load_of_a_chapter_that_has_not_run_names_it():
    with pytest.raises(FileNotFoundError, match="no results for chapter '06_distributed'"):
        load("06_distributed")


def test_results_dir_is_found_from_the_books_toc_upwards(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPDIVE_RESULTS_DIR")
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    monkeypatch.chdir(notebooks)

    assert results_dir() == tmp_path.resolve() / "_build" / "results"


def test_results_dir_honours_the_environment_variable(results_in_tmp):
    assert results_dir() == results_in_tmp


@pytest.mark.parametrize("chapter", ["", None, 1])
def test_a_chapter_must_be_a_non_empty_name(chapter):
    with pytest.raises(ValueError, match="chapter must be a non-empty name such as '01_vmap'"):
        Results(chapter)


@pytest.fixture
def glued():
    """What a notebook kernel would receive from `glue`, captured in an IPython shell."""
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.display_pub = CapturingDisplayPublisher()
    yield shell.display_pub.outputs
    InteractiveShell.clear_instance()


@pytest.mark.parametrize(
    ("value", "text"), [(np.float64(2.5), "2.5"), (np.int64(3), "3"), (0.25, "0.25")]
)
def test_glue_gives_numpy_scalars_the_text_of_plain_numbers(glued, value, text):
    glue("speedup", value)

    (output,) = glued
    assert output["metadata"]["scrapbook"]["name"] == "speedup"
    assert output["data"][f"{GLUE_PREFIX}text/plain"] == text


@pytest.mark.parametrize("value", [2.5, "a sentence", pd.DataFrame({"a": [1, 2]})],
                         ids=["number", "text", "table"])
def test_glue_without_myst_nb_sends_exactly_what_myst_nb_glue_sends(glued, value):
    """Chapters glue without importing myst-nb (Colab has none); the book build reads the
    payload back with myst-nb, so both must write the same display, byte for byte."""
    from myst_nb import glue as myst_glue

    glue("value", value)
    myst_glue("value", value, display=False)

    ours, theirs = glued
    assert ours == theirs


def test_glue_never_imports_myst_nb(glued):
    import sys

    sys.modules.pop("myst_nb", None)
    glue("speedup", 1.5)
    assert "myst_nb" not in sys.modules
