"""Chapter 1 (vmap): the page writes and times its own code; `deepdive.chapters.vmap` is the
release sweep's saved copy of it. These check that the copy is the page's text, that the
workloads and variants compute what their references say, that the page shows what it
times, and that it still makes every claim the committed build made."""

import ast
import csv
import inspect
from pathlib import Path
from types import SimpleNamespace

import jax.numpy as jnp
import jupytext
import numpy as np
import pytest

from deepdive.book import plans
from deepdive.chapters import vmap as ch
from deepdive.core.equality import as_numpy

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "notebooks" / "01_vmap.md"
BUILD_CLAIMS = ROOT / "book" / "data" / "builds" / \
    "2026-11-28_intel-xeon-2core_torch-2.15.0_jax-0.12.0.1" / "claims.csv"
SIZES = SimpleNamespace(batch_sizes=(2, 8), dot_dim=4, seq_len=3, head_dim=2)
TORCH_LABELS = ["PyTorch loop", "torch.func.vmap", "PyTorch batched ops", "torch.compile(vmap)"]
JAX_LABELS = ["JAX loop", "JAX loop of jit(f)", "JAX .at[].set loop", "jax.vmap",
              "jax.jit(vmap)", "jax.jit(fori_loop)"]
HIDDEN = {"remove-cell", "remove-input", "hide-cell", "hide-input"}
SHOWN_TRANSFORMS = {"jax.jit", "jax.vmap", "vmap", "grad", "jax.grad", "jax.lax.fori_loop"}
RELEASE_DOT_CLAIMS = {"release_dot_jit_vmap_vs_torch_vmap", "release_dot_fori_vs_vmap"}


def cells():
    """(source, tags) of every code cell of the page."""
    return [(c.source, set(c.metadata.get("tags", [])))
            for c in jupytext.read(PAGE).cells if c.cell_type == "code"]


def shown_trees():
    return [ast.parse(source) for source, tags in cells() if not tags & HIDDEN]


def page_functions() -> dict[str, str]:
    """Every top-level function the page defines, by name, as its text."""
    found = {}
    for source, _ in cells():
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = ast.get_source_segment(source, node)
    return found


def grad_variant_labels() -> list[str]:
    """The labels of the page's GRAD_VARIANTS, read from its shown cell."""
    for tree in shown_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "GRAD_VARIANTS":
                return [ast.literal_eval(key) for key in node.value.keys]
    raise AssertionError("the page shows no GRAD_VARIANTS")


def inputs(workload, batch):
    return ch.make_inputs(batch, ch.example_shapes(workload, SIZES))


# --- the saved copy is the page's text -----------------------------------------------------

@pytest.mark.parametrize("name", ch.SAVED)
def test_every_saved_function_is_the_pages_own_text(name):
    on_page = page_functions()
    assert name in on_page
    assert inspect.getsource(getattr(ch, name)).rstrip() == on_page[name].rstrip()


def test_the_page_shows_what_it_times_with_its_compile_options():
    calls = [node for tree in shown_trees() for node in ast.walk(tree)
             if isinstance(node, ast.Call)]
    names = [ast.unparse(node.func) for node in calls]
    assert names.count("compare") == 3  # the gradients, the sweep and one eager write
    compiles = [node for node in calls if ast.unparse(node.func) == "torch.compile"]
    assert len(compiles) == 2
    for node in compiles:
        assert {k.arg: ast.literal_eval(k.value) for k in node.keywords} == \
            {"dynamic": False, "fullgraph": True}
    assert SHOWN_TRANSFORMS <= set(names)
    every_import = [node for source, _ in cells() for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.ImportFrom)]
    assert not [n.module for n in every_import if n.module.startswith("deepdive.chapters")]


# --- the workloads, their references and the variants ----------------------------------------

def test_inputs_have_each_workloads_shape_and_repeat_per_batch():
    dot, attention = inputs("dot", 8), inputs("attention", 2)
    assert [a.shape for a in dot] == [(8, 4)] * 2
    assert [a.shape for a in attention] == [(2, 3, 2)] * 3
    assert dot[0].dtype == np.float32
    np.testing.assert_array_equal(inputs("dot", 8)[0], dot[0])
    assert not np.array_equal(inputs("dot", 2)[0], dot[0][:2])  # a batch is its own seed


def test_the_references_agree_with_each_example_computed_on_its_own():
    import torch

    x, y = (a.astype(np.float64) for a in inputs("dot", 8))
    one_by_one = [np.dot(a, b) for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(ch.dot_reference(x, y), one_by_one)
    q, k, v = (a.astype(np.float64) for a in inputs("attention", 2))
    one = [torch.softmax(torch.tensor(qi @ ki.T / np.sqrt(2)), dim=-1).numpy() @ vi
           for qi, ki, vi in zip(q, k, v, strict=True)]
    np.testing.assert_allclose(ch.attention_reference(q, k, v), np.stack(one), rtol=1e-12)
    big = [a * 1e3 for a in (q, k, v)]  # the softmax subtracts its maximum: no overflow
    assert np.isfinite(ch.attention_reference(*big)).all()


@pytest.mark.parametrize("workload", ["dot", "attention"])
def test_every_variant_of_both_frameworks_matches_the_float64_reference(workload):
    f_torch, f_jax, f_batched, reference = ch.PER_EXAMPLE[workload]
    arrays = inputs(workload, 8)
    expected = reference(*(a.astype(np.float64) for a in arrays))
    variants = {**ch.torch_variants(f_torch, f_batched, arrays, "cpu"),
                **ch.jax_variants(f_jax, arrays)}
    assert list(variants) == TORCH_LABELS + JAX_LABELS
    for label, fn in variants.items():
        if label != "torch.compile(vmap)":  # compiling is the page's job, not a unit test's
            np.testing.assert_allclose(as_numpy(fn()), expected, rtol=1e-4, atol=1e-5,
                                       err_msg=label)


def test_the_loops_of_writes_equal_vmap_and_the_eager_one_copies():
    import jax

    q, k, v = (jnp.asarray(a) for a in inputs("attention", 8))
    expected = jax.vmap(ch.attention_jax)(q, k, v)
    in_place = jax.jit(ch.fori_writes, static_argnums=0)(ch.attention_jax, q, k, v)
    np.testing.assert_allclose(in_place, expected, rtol=1e-6, atol=1e-6)
    copied = ch.at_set_loop(ch.attention_jax, expected.shape, q, k, v)
    np.testing.assert_allclose(copied, expected, rtol=1e-6, atol=1e-6)
    assert "while" in jax.jit(ch.fori_writes, static_argnums=0).lower(
        ch.attention_jax, q, k, v).as_text()  # a loop in the program, not unrolled


def test_labels_name_their_framework_and_shapes_follow_the_sizes():
    assert {ch.framework(v) for v in TORCH_LABELS} == {"torch"}
    assert {ch.framework(v) for v in JAX_LABELS} == {"jax"}
    assert ch.example_shapes("attention", SIZES) == [(3, 2)] * 3
    with pytest.raises(KeyError):
        ch.example_shapes("conv", SIZES)


# --- jax-ml/jax#39103 ----------------------------------------------------------------------

def test_jit_matches_eager_on_this_jax_at_the_issues_size():
    check = ch.jit_matches_eager()
    assert check.rows == ch.JAX_39103_ROWS == 32_769
    assert check.eager_last == float(np.float32(32_768.0**2))  # i**2, rounded to float32
    assert check.matches and check.jit_last == check.eager_last


def test_the_old_pins_release_record_that_the_page_quotes_shows_the_bug():
    """The page glues jax 0.10.2's values for this check from its release-sweep bundle."""
    releases = ROOT / "book" / "data" / "releases"
    bundle = sorted(releases.glob("*_jax-0.10.2"))[-1]
    with (bundle / "results" / "releases.csv").open() as saved:
        found = {row["metric"]: float(row["value"]) for row in csv.DictReader(saved)
                 if row["experiment"] == "jax-ml/jax#39103"}
    assert found["eager result"] == float(np.float32(32_768.0**2))
    assert found["jit result"] != found["eager result"]
    assert found["rows differing"] >= 1 and found["jit equals eager"] == 0


def test_a_check_with_differing_rows_does_not_match_and_rows_must_be_positive():
    assert not ch.JitCheck(3, 4.0, 5.0, mismatches=1).matches
    with pytest.raises(ValueError, match="positive"):
        ch.jit_matches_eager(0)


# --- the page's claims --------------------------------------------------------------------

class Recorder:
    """Stands in for the page's `Claims`: records each id with the two labels it compares."""

    def __init__(self):
        self.seen, self.best = {}, set()

    def compare(self, claim_id, question, baseline, candidate, headline=False):
        assert claim_id not in self.seen, claim_id
        self.seen[claim_id] = (baseline, candidate, headline)

    def compare_best(self, claim_id, where, timings, torch_labels, jax_labels, headline=False):
        self.best.add(claim_id)  # each side's fastest of the labels: picked when timed


class Labels(dict):
    """A sweep or a set of timings whose every entry is the label it was looked up by."""

    def __getitem__(self, key):
        return Labels() if isinstance(key, tuple) else key


def test_the_page_makes_every_claim_the_committed_build_made_between_variants_it_timed():
    sizes = plans.sizes("01_vmap", "small")
    recorder = Recorder()
    namespace = dict(CLAIMS=recorder, sweep=Labels(), grad_timings=Labels(), SIZES=sizes,
                     LARGEST=sizes.batch_sizes[-1], BATCH_SIZES=list(sizes.batch_sizes),
                     WORKLOADS={"dot": None, "attention": None}, SCOPE="CPU, 1 thread",
                     n_examples=32, n_in=32, n_hidden=64)
    for source, _ in cells():
        if "CLAIMS.compare(" in source:
            exec(compile(source, str(PAGE), "exec"), namespace)
    with BUILD_CLAIMS.open() as saved:
        committed = {row["claim_id"] for row in csv.DictReader(saved)
                     if row["chapter"] == "01_vmap"}
    # every claim the committed build made: each framework's fastest against the other's,
    # and the named pairs (a pair the fastest already made is saved once, as an alias)
    assert recorder.best == {f"{w}_best_jax_vs_torch" for w in ("dot", "attention", "grads")}
    assert committed - recorder.best <= set(recorder.seen)
    assert recorder.best <= committed
    timed = set(TORCH_LABELS + JAX_LABELS + grad_variant_labels())
    assert {label for seen in recorder.seen.values() for label in seen[:2]} <= timed


# --- the release sweep runs the saved copy ----------------------------------------------------

def test_the_release_sweep_times_the_saved_dot_variants(monkeypatch, tmp_path):
    from deepdive.book.claims import Claims
    from deepdive.book.results import Results
    from deepdive.core.verdict import TieBand
    from deepdive.releases import workloads

    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path))
    claims, records = Claims("releases", TieBand(0.1)), Results("releases")
    workloads.dot_vmap(claims, records)
    assert set(claims.claims) == RELEASE_DOT_CLAIMS
    assert {r.variant for r in records.records} == {TORCH_LABELS[1], *JAX_LABELS[-2:]}
