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


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_first_cell_installs_the_book_only_under_colab(chapter):
    first = code_cells(chapter)[0]

    assert first.startswith("import sys\n\nif \"google.colab\" in sys.modules:")
    assert f"!git clone --quiet --depth 1 {REPOSITORY} /content/book" in first
    assert "%pip install --quiet -r requirements.txt" in first


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_the_colab_cell_takes_its_address_from_config_and_nothing_else_has_one(chapter):
    text = chapter.read_text()
    assert text.count("github.com/") == text.count(REPOSITORY) == 1  # the Colab cell only


def test_requirements_install_the_helpers_too():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert "-e ." in lines  # so a kernel with only requirements.txt can import deepdive


# Chapters whose comparative sentences must all come from claims.csv (issue 11).
CLAIM_CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "04_vit_training",
                  "05_distributed", "06_choosing")
COMPARATIVE = re.compile(r"\b(faster|slower|quicker|wins?|beats?|outperforms?|level with|"
                         r"on par|ahead of|behind)\b", re.IGNORECASE)
# Glued values, and the rule's own verdict names in bold where a page defines them.
GLUE_ROLE = re.compile(r"\{glue:?\w*\}`[^`]*`|\*\*(faster|slower|tie|inconclusive)\*\*")


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
