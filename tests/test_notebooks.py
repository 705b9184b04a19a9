"""The chapters' sources: each opens with the Colab set-up cell, built from _config.yml."""

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
