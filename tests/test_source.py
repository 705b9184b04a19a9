"""deepdive.core.source: every timing names where its code was written, and a page's timed code
hidden in a chapter module is caught."""

import functools
import types

import jax
import jax.numpy as jnp
import pytest
import torch

from deepdive.book.claims import Claims, load_claims
from deepdive.book.results import Results, load
from deepdive.core import sync
from deepdive.core.source import PAGE, defined_in, foreign
from deepdive.core.timing import compare, measure
from deepdive.core.verdict import TieBand


def page_module(name: str, code: str) -> types.ModuleType:
    """Code run as a module named `name`: "__main__" stands for a notebook page."""
    module = types.ModuleType(name)
    exec(compile(code, f"<{name}>", "exec"), module.__dict__)
    return module


# A chapter module as the old layout had them (named so, whether or not the layer exists).
HIDDEN_NAME = "deepdive.chapters.hidden"
HIDDEN_STEP, HIDDEN_CLASS = f"{HIDDEN_NAME}:step", f"{HIDDEN_NAME}:Step"
BLOCK = "deepdive.core.sync:block"
HIDDEN = page_module(HIDDEN_NAME, """
import torch
def step(x):
    return torch.sin(x) * 2
class Step:
    def __call__(self):
        return torch.ones(3)
""")


def on_page(code: str, **names) -> types.ModuleType:
    module = page_module(PAGE, code)
    module.__dict__.update(names)
    return module


def test_a_function_written_on_the_page_is_the_pages():
    page = on_page("def f(x):\n    return x + 1\n")

    assert defined_in(page.f) == (f"{PAGE}:f",)
    assert foreign(defined_in(page.f)) == []


def test_a_page_lambda_that_calls_a_chapter_module_names_that_module():
    page = on_page("run = lambda: hidden.step(1)\n", hidden=HIDDEN)

    assert foreign(defined_in(page.run)) == [HIDDEN_NAME]


def test_the_walk_follows_page_functions_into_what_they_call():
    page = on_page("def inner():\n    return step(1)\ndef outer():\n    return inner()\n",
                   step=HIDDEN.step)

    assert HIDDEN_STEP in defined_in(page.outer)


def test_compiled_jitted_and_partial_wrappers_are_unwrapped_to_their_code():
    page = on_page("def f(x):\n    return x * 2\n")

    assert f"{PAGE}:f" in defined_in(jax.jit(page.f))
    assert f"{PAGE}:f" in defined_in(torch.compile(page.f))
    assert f"{PAGE}:f" in defined_in(functools.partial(page.f, 3))
    assert HIDDEN_STEP in defined_in(jax.jit(HIDDEN.step))


def test_a_callable_object_is_named_by_its_class_and_a_module_by_its_type():
    assert foreign(defined_in(HIDDEN.Step())) == [HIDDEN_CLASS]
    model = torch.nn.Linear(2, 2)
    assert defined_in(torch.compile(model)) == (f"{type(model).__module__}:Linear",)
    assert foreign(defined_in(model)) == []


def test_the_shared_layers_are_allowed_and_data_is_not_code():
    page = on_page("def f():\n    return block(SIZES)\n", block=sync.block,
                   SIZES=TieBand(0.1))  # a package object that is data, not code

    assert foreign(defined_in(page.f)) == []
    assert BLOCK in defined_in(page.f)


def test_compare_and_measure_keep_the_code_with_each_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")
    page = on_page("def f(x):\n    return jnp.sin(x)\n"
                   "variants = {'page': lambda: f(x), 'hidden': lambda: hidden.step(t)}\n",
                   jnp=jnp, x=jnp.ones(8), t=torch.ones(8), hidden=HIDDEN)
    timings = compare(page.variants, blocks=3, min_block_s=1e-4)
    alone = measure(page.f, page.x, blocks=3, min_block_s=1e-4)

    assert f"{PAGE}:f" in timings["page"].code and f"{PAGE}:f" in alone.code
    assert foreign(timings["hidden"].code) == [HIDDEN_NAME]
    claims = Claims("01_vmap", TieBand(0.5))
    claims.compare("page_vs_hidden", "q", timings["hidden"], timings["page"])
    claims.save()
    row = load_claims("01_vmap").iloc[0]
    assert HIDDEN_NAME in row["baseline_code"].split(";")
    assert f"{PAGE}:f" in row["candidate_code"]
    records = Results("01_vmap")
    records.add_timing("e", "jax", "page", 8, timings["page"])
    records.save()
    medians = load("01_vmap").query("metric == 'median'")
    assert f"{PAGE}:f" in medians["code"].iat[0]


@pytest.mark.parametrize("module", ["deepdive.chapters.vmap", "deepdive.book.plots",
                                    "deepdive.releases.history"])
def test_anything_in_the_package_outside_core_and_models_is_foreign(module):
    shared = [BLOCK, "deepdive.models.gpt:GPT", "torch.nn:Linear", f"{PAGE}:f"]
    assert foreign([f"{module}:f", *shared]) == [f"{module}:f"]
