"""deepdive.chapters.choosing: where chapter 7's Pallas kernel runs and how its cells that fail
on purpose show their errors; and the intro, which reads the same evidence, read last."""

import importlib.util
from pathlib import Path

import pytest

from deepdive.chapters import choosing

ROOT = Path(__file__).resolve().parents[1]


# --- the kernels' backends ------------------------------------------------------------------

@pytest.mark.parametrize(("platform", "triton", "capability", "chosen"), [
    ("cpu", True, None, "interpret"),
    ("tpu", False, None, "interpret"),
    ("gpu", True, (7, 5), "triton"),  # while JAX ships the Triton backend: on any GPU
    ("gpu", True, (9, 0), "triton"),
    ("gpu", False, (9, 0), "mosaic_gpu"),  # gone: Mosaic GPU from Hopper on
    ("gpu", False, (10, 0), "mosaic_gpu"),
    ("gpu", False, (8, 0), None),  # an A100 then has no Pallas GPU backend
    ("gpu", False, None, None),
])
def test_the_pallas_backend_follows_what_jax_ships_and_the_gpu(platform, triton, capability,
                                                              chosen):
    assert choosing.pallas_backend(platform, triton, capability) == chosen


def test_pallas_launch_options_per_backend():
    assert choosing.pallas_launch("interpret") == {"interpret": True}
    if choosing.has_pallas_triton():  # this build's JAX: 0.12.0.1 still ships it
        assert "compiler_params" in choosing.pallas_launch("triton")
    with pytest.raises(ValueError, match="backend must be 'interpret', 'triton' or 'mosaic_gpu'"):
        choosing.pallas_launch("cuda")


# --- the intro, which reads the same evidence, is read last ----------------------------------

def load_extension(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class App:
    class config:  # noqa: N801  (Sphinx's attribute name)
        root_doc = "book/intro"
        master_doc = "index"

    def __init__(self):
        self.connected = []

    def connect(self, event, handler):
        self.connected.append((event, handler))


def test_the_root_page_is_read_after_every_chapter():
    extension = load_extension("root_last")
    docs = sorted(["book/intro", "book/ledger", "notebooks/01_vmap", "notebooks/07_choosing",
                   "book/reproduce"])
    extension.read_root_last(App(), None, docs)
    assert docs[-2:] == ["book/ledger", "book/intro"] and sorted(docs) == sorted(set(docs))
    unchanged = ["notebooks/01_vmap"]
    extension.read_root_last(App(), None, unchanged)  # an incremental read without the root
    assert unchanged == ["notebooks/01_vmap"]


def test_the_extension_connects_before_the_read_and_is_configured():
    import yaml

    app = App()
    extension = load_extension("root_last")
    extension.setup(app)
    assert app.connected == [("env-before-read-docs", extension.read_root_last)]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"]["root_last"] == "book/_ext"
    assert yaml.safe_load((ROOT / "_toc.yml").read_text())["root"] == "book/intro"


def test_the_root_doc_falls_back_to_master_doc():
    extension = load_extension("root_last")

    class Old:
        root_doc = None
        master_doc = "index"

    assert extension.root_doc(Old) == "index"
    assert extension.root_doc(App.config) == "book/intro"


def test_the_intro_is_re_read_every_build_and_executes_last():
    assert "book/intro" in load_extension("always_reread").ALWAYS_REREAD
    import jupytext

    intro = jupytext.read(ROOT / "book" / "intro.md")
    assert intro.metadata["mystnb"] == {"execution_mode": "force"}
    shown = [c for c in intro.cells if c.cell_type == "code"
             and "remove-cell" not in c.metadata.get("tags", [])]
    assert all("hide-input" in c.metadata.get("tags", []) for c in shown)


def test_a_failing_cell_shows_its_error_type_and_the_first_lines_of_its_message():
    try:
        raise ValueError("one\nat /tmp/ipykernel_12/345.py:1\nthree\nfour\nfive\nsix")
    except ValueError as error:
        shown = choosing.short_traceback(ValueError, error)
    assert shown == ["ValueError: one", "at <cell>:1", "three", "four",
                     "[... 2 more lines of the message]"]
    assert choosing.short_traceback(KeyError, KeyError("x")) == ["KeyError: 'x'"]
    assert choosing.short_traceback(RuntimeError, RuntimeError("")) == ["RuntimeError: "]


def test_short_errors_installs_the_handler_for_every_exception():
    class Shell:
        def set_custom_exc(self, kinds, handler):
            self.kinds, self.handler = kinds, handler

        def _showtraceback(self, etype, value, stb):
            self.shown = (etype, value, stb)

    shell = Shell()
    choosing.short_errors(shell, lines=1)
    assert shell.kinds == (Exception,)
    error = KeyError("x")
    assert shell.handler(shell, KeyError, error, None) == ["KeyError: 'x'"]
    assert shell.shown == (KeyError, error, ["KeyError: 'x'"])  # the error output is sent


def test_short_errors_in_a_real_shell_still_fail_the_cell_and_show_the_error():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell._showtraceback = lambda etype, value, stb: shown.append(stb)
    choosing.short_errors(shell, lines=1)
    result = shell.run_cell("raise ValueError('first\\nsecond')")
    assert isinstance(result.error_in_exec, ValueError)
    assert shown == [["ValueError: first", "[... 1 more lines of the message]"]]
    shell.set_custom_exc((), None)
