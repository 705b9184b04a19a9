"""The chapters' sources: each opens with the Colab set-up cell, built from _config.yml, and
no comparative word is typed by hand next to a measured number."""

import re
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
REPOSITORY = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def code_cells(path):
    return [c.source for c in jupytext.read(path).cells if c.cell_type == "code"]


FIRST_CELL = code_cells(CHAPTERS[0])[0]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_opens_with_the_same_colab_cell(chapter):
    assert code_cells(chapter)[0] == FIRST_CELL


def test_the_colab_cell_acts_only_under_colab_and_fails_loudly():
    assert FIRST_CELL.startswith('import os\nimport sys\n\nif "google.colab" in sys.modules:')
    assert f'os.environ.get("DEEPDIVE_REPO", "{REPOSITORY}")' in FIRST_CELL
    assert "colab.set_up(BOOK, REPO)" in FIRST_CELL
    # IPython's !git and %pip never raise: a failure must stop the cell itself.
    assert "!" not in FIRST_CELL.replace("!=", "") and "%pip" not in FIRST_CELL
    assert len(FIRST_CELL.splitlines()) <= 30


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_the_colab_cell_is_removed_from_the_html(chapter):
    first = next(c for c in jupytext.read(chapter).cells if c.cell_type == "code")
    assert "remove-cell" in first.metadata.get("tags", [])


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_the_colab_cell_takes_its_address_from_config_and_nothing_else_has_one(chapter):
    text = chapter.read_text().replace("https://github.com/<you>/<fork>", "")
    assert text.count("github.com/") == text.count(REPOSITORY) == 1  # the Colab cell only


def test_the_runtime_requirements_install_the_helpers_and_the_build_adds_only_tools():
    runtime = (ROOT / "requirements-runtime.txt").read_text().splitlines()
    build = (ROOT / "requirements.txt").read_text().splitlines()
    assert "-e ." in runtime  # a kernel with only the runtime can import deepdive
    assert "-r requirements-runtime.txt" in build
    tools = {line.split("==")[0] for line in build if "==" in line}
    assert tools.isdisjoint({"torch", "jax[cpu]", "flax", "numpy", "pandas"})
    assert {"jupyter-book", "pytest", "ruff", "playwright"} <= tools


# Chapters whose comparative sentences must all come from claims.csv (issue 11).
CLAIM_CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "05_vit_training",
                  "04_gpt_training", "06_distributed", "07_choosing")
COMPARATIVE = re.compile(r"\b(faster|slower|quicker|wins?|beats?|outperforms?|level with|"
                         r"on par|ahead of|behind)\b", re.IGNORECASE)
# Glued values, and the rule's own verdict names in bold where a page defines them.
GLUE_ROLE = re.compile(r"\{glue:?\w*\}`[^`]*`|\*\*(faster|slower|tie|withheld)\*\*")


def paragraphs(path):
    for cell in jupytext.read(path).cells:
        if cell.cell_type == "markdown":
            yield from (p for p in re.split(r"\n\s*\n", cell.source) if p.strip())


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c.stem in CLAIM_CHAPTERS],
                         ids=lambda p: p.stem)
def test_no_comparative_word_is_typed_next_to_a_glued_number(chapter):
    """A paragraph that shows a measured value may compare only through glued verdicts."""
    for paragraph in paragraphs(chapter):
        if not GLUE_ROLE.search(paragraph):
            continue
        typed = COMPARATIVE.findall(GLUE_ROLE.sub("", paragraph))
        assert not typed, f"{chapter.name}: {typed} typed beside a glued value in:\n{paragraph}"


def test_the_lint_catches_a_typed_verdict():
    paragraph = "jax.jit ran {glue:text}`ratio:.1f` times faster than the loop."
    assert COMPARATIVE.findall(GLUE_ROLE.sub("", paragraph)) == ["faster"]
    glued = "jax.jit was {glue:text}`jit_vs_loop` the loop ({glue:text}`jit_vs_loop_ratio`)."
    assert not COMPARATIVE.findall(GLUE_ROLE.sub("", glued))
