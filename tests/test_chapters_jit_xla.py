"""deepdive.chapters.jit_xla: page functions sent to a fresh process as their source, the
machine readers with their fall-backs, and the collectors of JAX's log and debugger input."""

import importlib.util
import io
import logging
import textwrap

import numpy as np
import pytest

from deepdive.chapters import jit_xla
from deepdive.core import allocator
from deepdive.core.timing import Timing

PAGE = '''
import numpy as np

from deepdive.core import allocator
from deepdive.core.timing import compare

SIZE = 64
SCALE = 2.0
ARRAY = np.ones(3)


def double(x):
    return x * SCALE


def experiment(offset):
    x = np.arange(SIZE, dtype=np.float64) + offset
    timings = compare({"double": lambda: double(x), "copy": lambda: x.copy()})
    return timings, double(x)[:2].tolist(), allocator.describe()


def reads_an_array():
    return ARRAY.sum()


def raises():
    raise ValueError("meant to fail")
'''


@pytest.fixture
def page(tmp_path):
    """A module written like a notebook's cells: its functions belong to `__main__`."""
    path = tmp_path / "page.py"
    path.write_text(textwrap.dedent(PAGE))
    spec = importlib.util.spec_from_file_location("__main__", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_code_defines_the_function_with_what_it_reads(page):
    from deepdive.core.timing import compare

    namespace = {}
    exec(jit_xla.page_code(page.experiment), namespace)  # as the fresh process does
    assert namespace["np"] is np and namespace["allocator"] is allocator
    assert namespace["compare"] is compare
    assert (namespace["SIZE"], namespace["SCALE"]) == (64, 2.0)  # SCALE: read by double
    assert namespace["double"](np.ones(2)).tolist() == [2.0, 2.0]
    assert namespace["experiment"].__code__.co_filename != page.experiment.__code__.co_filename
    assert "ARRAY" not in namespace  # an array is never sent as source: pass it as argument
    assert "raises" not in namespace  # page functions it does not call stay behind


def test_page_code_sends_no_array_even_when_read(page):
    namespace = {}
    exec(jit_xla.page_code(page.reads_an_array), namespace)
    with pytest.raises(NameError, match="ARRAY"):
        namespace["reads_an_array"]()


def test_a_page_function_runs_in_a_fresh_process_under_the_regime_asked(page):
    timings, doubled, regime = jit_xla.in_fresh_process(page.experiment, 1.0,
                                                        regime=allocator.DEFAULTS)
    assert doubled == [2.0, 4.0]  # the argument arrived, the page's SCALE was sent
    if allocator.is_glibc() and allocator.preloaded() is None:
        assert regime == allocator.DEFAULTS
    assert set(timings) == {"double", "copy"}
    double = timings["double"]
    assert isinstance(double, Timing) and double.median > 0
    assert "__main__:double" in double.code  # the code timed is the page's, as written there
    assert double.session < 0 and timings["copy"].session == double.session  # one compare


def test_each_fresh_process_gets_sessions_of_its_own(page):
    first = jit_xla.in_fresh_process(page.experiment, 0.0)[0]["double"].session
    second = jit_xla.in_fresh_process(page.experiment, 0.0)[0]["double"].session
    assert first < 0 and second < 0 and first != second


def test_a_failure_in_the_fresh_process_names_the_function_and_the_error(page):
    with pytest.raises(RuntimeError, match=r"raises failed in a fresh process(.|\n)*meant to fail"):
        jit_xla.in_fresh_process(page.raises)
    with pytest.raises(RuntimeError, match="NameError: name 'ARRAY'"):
        jit_xla.in_fresh_process(page.reads_an_array)


def test_timings_nested_in_a_result_all_move_apart():
    t = Timing("a", np.array([1.0, 2.0]), 4, 0.5, 2, session=3)
    moved = jit_xla._apart({"x": [t, (t, "kept")], "n": 1}, child=7)
    assert moved["x"][0].session == moved["x"][1][0].session == -7003
    assert moved["x"][1][1] == "kept" and moved["n"] == 1
    assert list(moved["x"][0].samples) == [1.0, 2.0] and moved["x"][0].recompiles == 2


def test_the_machine_readers_fall_back_where_linux_files_are_missing(tmp_path):
    assert jit_xla.xla_pool_threads(tmp_path / "none") is None
    tasks = tmp_path / "task"
    for i, name in enumerate(["tf_XLAEigen", "python", "tf_XLAEigen"]):
        (tasks / str(i)).mkdir(parents=True)
        (tasks / str(i) / "comm").write_text(name + "\n")
    (tasks / "3").mkdir()  # a thread that ended: no comm file
    assert jit_xla.xla_pool_threads(tasks) == 2
    assert jit_xla.thp_mode(tmp_path / "none") == "unknown"
    (tmp_path / "thp").write_text("always [madvise] never\n")
    assert jit_xla.thp_mode(tmp_path / "thp") == "madvise"
    assert jit_xla.llc_kib(tmp_path / "none") is None
    (tmp_path / "llc").write_text("32768K\n")
    assert jit_xla.llc_kib(tmp_path / "llc") == 32768


def test_jax_log_collects_and_lets_go():
    with jit_xla.jax_log() as messages:
        logging.getLogger("jax").warning("hello")
    logging.getLogger("jax").warning("after")
    assert messages == ["hello"]


def test_typed_commands_echo_what_they_feed():
    first, then = "p x\n", "c\n"
    transcript = io.StringIO()
    typed = jit_xla.TypedCommands(first + then, transcript)
    assert typed.readline() == first and transcript.getvalue() == first
    assert typed.readline() == then and typed.readline() == ""  # then nothing more
    assert transcript.getvalue() == first + then
