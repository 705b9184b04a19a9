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


def colab_block(source: str) -> str:
    """The Colab block that opens a chapter's set-up cell: up to its `colab.set_up` call."""
    lines = source.splitlines()
    end = next((i for i, line in enumerate(lines) if "colab.set_up(BOOK, REPO)" in line), None)
    return "\n".join(lines[:end + 1]) if end is not None else ""


def set_up_cell(path):
    """The chapter's set-up cell: the first code cell that opens with the Colab block. A
    quick example may come before it, as long as it needs nothing the set-up provides."""
    cells = [c for c in jupytext.read(path).cells if c.cell_type == "code"]
    index = next(i for i, c in enumerate(cells) if colab_block(c.source))
    return cells[index], cells[:index]


FIRST_CELL = colab_block(set_up_cell(CHAPTERS[0])[0].source)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_sets_up_with_the_same_colab_block_before_the_book_is_imported(chapter):
    cell, before = set_up_cell(chapter)
    assert colab_block(cell.source) == FIRST_CELL
    # in Colab the book is cloned by that block: nothing before it may import it
    assert not [c.source for c in before if "deepdive" in c.source]


def test_the_colab_block_acts_only_under_colab_and_fails_loudly():
    opening = 'import os\nimport sys\n\nif "google.colab" in sys.modules:'
    assert FIRST_CELL.startswith(opening)
    address = f'os.environ.get("DEEPDIVE_REPO", "{REPOSITORY}")'
    assert address in FIRST_CELL
    # IPython's !git and %pip never raise: a failure must stop the cell itself.
    assert "!" not in FIRST_CELL.replace("!=", "") and "%pip" not in FIRST_CELL
    assert len(FIRST_CELL.splitlines()) <= 30


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_the_set_up_cell_is_collapsed_not_removed(chapter):
    """A reader can open the set-up and run the page from it: it is on the page, folded."""
    tags = set_up_cell(chapter)[0].metadata.get("tags", [])
    assert "hide-cell" in tags and "remove-cell" not in tags


def assigned_names(source: str) -> set[str]:
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.update((a.asname or a.name).split(".")[0] for a in node.names)
    return found


def read_names(source: str) -> set[str]:
    """Names a cell reads from the notebook's globals: a function's own parameters and
    locals are not."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()

    def reads(node, local: frozenset) -> set[str]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            stored = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
            local = local | params | stored
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return set() if node.id in local else {node.id}
        return set().union(*(reads(child, local) for child in ast.iter_child_nodes(node)))

    return reads(tree, frozenset())


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_nothing_a_reader_sees_comes_from_a_removed_cell(chapter):
    """Removed cells are the site's bookkeeping (glue, records, claims saved): a name they
    define and no visible cell does would look undefined to a reader."""
    cells = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    removed = [c for c in cells if "remove-cell" in c.metadata.get("tags", [])]
    visible = [c for c in cells if c not in removed]
    only_removed = set().union(*(assigned_names(c.source) for c in removed)) - set().union(
        *(assigned_names(c.source) for c in visible))
    used = set().union(*(read_names(c.source) for c in visible))
    assert sorted(only_removed & used) == []


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
