"""A chapter's Colab edition: the executed page as a notebook that Colab and Jupyter render.

Colab shows every cell and renders Markdown as plain CommonMark: MyST's roles and directives,
the site's glue and its bookkeeping cells would reach a reader there as raw text. So the
build writes, from each executed chapter, an edition (`make book` puts them in
`_build/editions/`, the Pages workflow publishes them to the `editions` branch, and the
chapter pages' launch and download buttons open them):

- MyST is parsed with MyST's own parser (`myst_parser`'s markdown-it set-up), and each
  construct it finds is written as Markdown: glued values as this build's text (myst-nb's
  glue data, formatted by myst-nb's own function), references as links to the published
  site, citations as links to their source, admonitions as block quotes, labels dropped;
  glued figures as images and glued tables as HTML.
- Cells that exist only for the site (tagged `remove-cell`: glue, claims and records
  bookkeeping) are left out; the book checks no kept cell needs a name only they define.
- The set-up cell (the one with the Colab block) keeps its place, before anything imports
  the book, folded to its title in Colab and Jupyter.
- One line under the title names the build, its machine and its date, and says that running
  the cells measures the reader's machine.
- Kept cells keep this build's outputs, so the chapter reads before anything runs.

The parsers (myst_parser, myst_nb, pybtex) are the build's, not the runtime's: only the build
and the tests import this module.
"""

from __future__ import annotations

import ast
import base64
import builtins
import copy
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["COLAB_BLOCK", "EDITION_NOTE", "GLUE_CALLS", "RAW_MYST", "SET_UP_TITLE", "Build",
           "Site", "edition", "image_bytes", "markdown", "needs_only_dropped", "raw_myst",
           "references", "site_only"]

# What marks a cell as the site's own: the tag that hides it from the site's readers too.
SITE_ONLY_TAG = "remove-cell"
# Calls that only feed the site's prose (deepdive.book.results and claims): a cell of
# nothing else is site-only whatever its tags.
GLUE_CALLS = frozenset({"glue", "glue_claims", "glue_noise", "cite"})
# The set-up cell is the one that opens with the book's Colab block (tests/test_notebooks.py).
COLAB_BLOCK = 'if "google.colab" in sys.modules:'
SET_UP_TITLE = "Set-up: in Colab, fetches the book and adds what Colab lacks (run this first)"
EDITION_NOTE = ("*Colab edition of [this chapter]({url}) of PyTorch vs JAX, Deep Dives. Its "
                "text, numbers and outputs come from build `{build_id}` on {device}, "
                "{date}; running the cells measures your own machine, and their outputs "
                "replace the build's.*")
# What a reader must never meet in an edition's Markdown: the tests look for each.
RAW_MYST = ("{glue", "{ref}", "{cite}", "{numref}", "{doc}", ":::", "```{")
_SECTION_FORMAT = "Section %s"  # Sphinx's default text of a section's {numref}


@dataclass(frozen=True)
class Site:
    """Where the published site puts what a chapter refers to."""

    base_url: str  # e.g. https://deepdives.github.io/pytorch-vs-jax/
    labels: Mapping[str, tuple[str, str, str]]  # label -> (docname, anchor, title)
    numbers: Mapping[str, str]  # label -> its number as the site shows it ("2", "2.1")
    titles: Mapping[str, str]  # docname -> page title
    citations: Mapping[str, tuple[str, str]]  # bibliography key -> (title, url)

    def page(self, docname: str, anchor: str = "") -> str:
        return f"{self.base_url.rstrip('/')}/{docname}.html" + (f"#{anchor}" if anchor else "")


@dataclass(frozen=True)
class Build:
    """The build whose text and outputs an edition carries."""

    build_id: str
    device: str
    date: str


def references(bib_text: str, references_page: str) -> dict[str, tuple[str, str]]:
    """{key: (title, url)} of a BibTeX file: the url its `\\url{}` names, else the site's
    references page."""
    from pybtex.database import parse_string

    cited = {}
    for key, entry in parse_string(bib_text, "bibtex").entries.items():
        title = entry.fields.get("title", key).replace("{", "").replace("}", "")
        url = entry.fields.get("url", "")
        published = entry.fields.get("howpublished", "")
        if not url and "\\url{" in published:
            url = published.partition("\\url{")[2].partition("}")[0]
        if not url and "doi" in entry.fields:
            url = f"https://doi.org/{entry.fields['doi']}"
        cited[key] = (title, url or references_page)
    return cited


def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    # The extensions the book's _config.yml enables.
    config = MdParserConfig(enable_extensions={"colon_fence", "dollarmath", "substitution"})
    return create_md_parser(config, RendererHTML)


def _glue_text(glued: Mapping, key: str, docname: str) -> str:
    from myst_nb.core.variables import format_plain_text

    name, _, spec = key.rpartition(":") if ":" in key else ("", "", "")
    name = name or key
    data = _glued(glued, name, docname)["data"]
    return format_plain_text(data["text/plain"], spec or "s")


def _glued(glued: Mapping, key: str, docname: str) -> dict:
    if key not in glued:
        raise KeyError(f"{docname}: no glued value {key!r} in this build's glue data "
                       f"(it has {len(glued)} keys)")
    return glued[key]


def _title_and_target(content: str) -> tuple[str, str]:
    """"text <target>" -> ("text", "target"); "target" -> ("", "target")."""
    if content.endswith(">") and " <" in content:
        title, _, target = content[:-1].rpartition(" <")
        return title.strip(), target.strip()
    return "", content.strip()


def _role(name: str, content: str, glued: Mapping, docname: str, site: Site) -> str:
    """One MyST role, as the Markdown an edition shows for it."""
    if name == "glue:text" or name == "glue":
        return _glue_text(glued, content, docname)
    if name in ("ref", "numref"):
        title, label = _title_and_target(content)
        if label not in site.labels:
            raise KeyError(f"{docname}: {{{name}}} names {label!r}, which no page of the site "
                           "defines")
        page, anchor, heading = site.labels[label]
        if name == "numref":
            number = site.numbers.get(label)
            if number is None:
                raise KeyError(f"{docname}: {{numref}} to {label!r}, which the site numbers not")
            title = (title or _SECTION_FORMAT).replace("%s", number).replace("{number}", number)
        return f"[{title or heading}]({site.page(page, anchor)})"
    if name == "doc":
        title, target = _title_and_target(content)
        page = (target.lstrip("/") if target.startswith("/")
                else posixpath.normpath(posixpath.join(posixpath.dirname(docname), target)))
        if page not in site.titles:
            raise KeyError(f"{docname}: {{doc}} names {target!r}, not a page of the site")
        return f"[{title or site.titles[page]}]({site.page(page)})"
    if name == "cite":
        links = []
        for key in (k.strip() for k in content.split(",")):
            if key not in site.citations:
                raise KeyError(f"{docname}: {{cite}} names {key!r}, not in the bibliography")
            title, url = site.citations[key]
            links.append(f"[{title}]({url})")
        return f"({'; '.join(links)})"
    raise ValueError(f"{docname}: the edition has no Markdown for the role {{{name}}}; "
                     "known: glue:text, ref, numref, doc, cite")


def _options(content: str) -> tuple[dict, str]:
    """A directive's leading `:key: value` lines (MyST's own option parser) and its body."""
    from myst_parser.parsers.options import options_to_items

    lines = content.splitlines()
    count = next((i for i, line in enumerate(lines) if not line.startswith(":")), len(lines))
    # MyST reads ":key: value" lines as the YAML-like "key: value" after the colon.
    options = dict(options_to_items("\n".join(line[1:] for line in lines[:count]))[0])
    return options, "\n".join(lines[count:]).strip("\n")


def _html(text: str) -> str:
    """A glued table's HTML without its <style> (a renderer that drops the tag shows its CSS)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    for style in soup.find_all("style"):
        style.decompose()
    # No blank line inside: CommonMark ends an HTML block at one.
    return "\n".join(line for line in str(soup).splitlines() if line.strip())


def _paste(data: Mapping, key: str, glued: Mapping, docname: str, site: Site) -> str:
    """A glued output shown whole: its image, table, Markdown or text."""
    if "image/png" in data:
        return f"![{key}](data:image/png;base64,{''.join(data['image/png']).strip()})"
    if "text/html" in data:
        return _html("".join(data["text/html"]))
    if "text/markdown" in data:
        return markdown("".join(data["text/markdown"]), glued, docname, site)
    return f"```\n{''.join(data['text/plain'])}\n```"


def _directive(name: str, argument: str, content: str, glued: Mapping, docname: str,
               site: Site) -> str:
    """One MyST directive, as the Markdown an edition shows for it."""
    options, body = _options(content)
    if name == "admonition":
        inner = markdown(body, glued, docname, site)
        quoted = "\n".join(f"> {line}".rstrip() for line in inner.splitlines())
        return f"> **{argument}**\n>\n{quoted}" if argument else quoted
    if name == "container":
        return markdown(body, glued, docname, site)
    if name in ("glue", "glue:any", "glue:figure", "glue:md"):
        data = _glued(glued, argument, docname)["data"]
        if name == "glue:md":
            text = "".join(data["text/markdown"])
            shown = (markdown(text, glued, docname, site) if options.get("format", "commonmark")
                     == "myst" else text)
        else:
            shown = _paste(data, argument, glued, docname, site)
        if name == "glue:figure" and body:
            shown += "\n\n" + markdown(body, glued, docname, site)
        return shown
    raise ValueError(f"{docname}: the edition has no Markdown for the directive {{{name}}}; "
                     "known: admonition, container, glue, glue:figure, glue:md")


def _roles_in(tokens) -> list:
    found = []
    for token in tokens:
        found.extend(c for c in (token.children or []) if c.type == "myst_role")
    return found


def markdown(text: str, glued: Mapping, docname: str, site: Site) -> str:
    """MyST `text` of page `docname` as Markdown that Colab and Jupyter render."""
    tokens = _parser().parse(text)
    lines = text.splitlines()
    blocks = {}  # first line -> (last line, replacement) of each directive or label
    for token in tokens:
        if token.level != 0 or token.map is None:
            continue
        start, end = token.map
        if token.type == "myst_target":
            blocks[start] = (end, None)
        elif token.type in ("fence", "colon_fence") and token.info.startswith("{"):
            name, _, argument = token.info[1:].partition("}")
            blocks[start] = (end, _directive(name, argument.strip(), token.content, glued,
                                             docname, site))
    kept, index = [], 0
    while index < len(lines):
        if index in blocks:
            end, replacement = blocks[index]
            if replacement is not None:
                kept.append(replacement)
            index = end
        else:
            kept.append(lines[index])
            index += 1
    out = "\n".join(kept)
    for role in _roles_in(tokens):
        raw = f"{{{role.meta['name']}}}`{role.content}`"
        out = out.replace(raw, _role(role.meta["name"], role.content, glued, docname, site), 1)
    return out.strip("\n")


def raw_myst(text: str) -> list[str]:
    """The MyST constructs left in Markdown `text`: what MyST's parser still finds (roles,
    labels, directives), and the marks a reader would see as raw text."""
    tokens = _parser().parse(text)
    found = [f"{{{role.meta['name']}}}`{role.content}`" for role in _roles_in(tokens)]
    found += [f"({t.content})=" for t in tokens if t.type == "myst_target"]
    found += [f"{t.type} {t.info}" for t in tokens
              if t.type == "colon_fence" or (t.type == "fence" and t.info.startswith("{"))]
    found += [mark for mark in RAW_MYST if mark in text]
    return found


def _top_level_calls(source: str) -> list[str] | None:
    """The names a cell's top-level statements call, or None if any statement does more."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: not a plain call
        return None
    called = []
    for statement in tree.body:
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Name)):
            return None
        called.append(statement.value.func.id)
    return called


def site_only(cell) -> bool:
    """Whether a code cell exists only for the site: tagged `remove-cell`, or nothing but
    calls that glue values for its prose."""
    if cell.get("cell_type") != "code":
        return False
    if SITE_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
        return True
    called = _top_level_calls(cell["source"])
    return bool(called) and set(called) <= GLUE_CALLS


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads without binding them itself)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store | ast.Del) else read).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read - bound


def needs_only_dropped(cells) -> dict[int, set[str]]:
    """{index of a kept cell: names it reads that only dropped (site-only) cells bind}."""
    kept_bound, dropped_bound, needs = set(dir(builtins)), set(), {}
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        bound, read = _names(cell["source"])
        if site_only(cell):
            dropped_bound |= bound
            continue
        missing = (read & dropped_bound) - kept_bound
        if missing:
            needs[index] = missing
        kept_bound |= bound
    return needs


def _fold(cell, title: str | None = None):
    """Hide a cell's code (Jupyter's `source_hidden`; Colab's form view, under a title)."""
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    if title:
        cell.source = f"# @title {title}\n{cell.source}"
        cell.metadata["cellView"] = "form"


def edition(executed, glued: Mapping, docname: str, site: Site, build: Build):
    """The Colab edition of one executed chapter (an nbformat notebook, not changed)."""
    import nbformat

    needs = needs_only_dropped(executed.cells)
    if needs:
        raise ValueError(f"{docname}: kept cells read names only site-only cells bind, so the "
                         f"edition would fail when run: {needs}")
    nb = nbformat.v4.new_notebook(metadata=copy.deepcopy(executed.metadata))
    for key in ("jupytext", "source_map"):
        nb.metadata.pop(key, None)
    nb.metadata["colab"] = {"name": f"{posixpath.basename(docname)}.ipynb", "provenance": []}
    set_up = True  # until the cell with the Colab block is kept
    for cell in executed.cells:
        if cell.cell_type == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(
                markdown(cell.source, glued, docname, site)))
        elif cell.cell_type == "code" and not site_only(cell):
            kept = nbformat.v4.new_code_cell(cell.source, execution_count=cell.execution_count,
                                             outputs=copy.deepcopy(cell.outputs))
            tags = cell.metadata.get("tags", [])
            if set_up and COLAB_BLOCK in cell.source:
                _fold(kept, SET_UP_TITLE)
                set_up = False
            elif "hide-input" in tags or "hide-cell" in tags:
                _fold(kept)
            if tags:
                kept.metadata["tags"] = list(tags)
            nb.cells.append(kept)
    _add_note(nb, docname, site, build)
    return nb


def _add_note(nb, docname: str, site: Site, build: Build) -> None:
    """The line under the title: whose build this is, and what running it does."""
    note = EDITION_NOTE.format(url=site.page(docname), build_id=build.build_id,
                               device=build.device, date=build.date)
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    lines = first.source.splitlines()
    heading = next((i for i, line in enumerate(lines) if line.startswith("# ")), -1)
    lines.insert(heading + 1, f"\n{note}\n")
    first.source = "\n".join(lines)


def image_bytes(data_uri: str) -> bytes:
    """The bytes of a `data:image/png;base64,` image (for tests and sizes)."""
    return base64.b64decode(data_uri.partition("base64,")[2])
