"""A chapter's Colab edition: the executed page as a notebook that Colab and Jupyter render.

Colab shows every cell and renders Markdown as plain CommonMark: MyST's roles and directives,
the site's glue and its bookkeeping cells would reach a reader there as raw text. So the
build writes, from each executed chapter, an edition (`make book` puts them in
`_build/editions/`, the Pages workflow publishes them to the `editions` branch, and the
chapter pages' launch and download buttons open them):

- MyST is parsed with MyST's own parser (`myst_parser`'s markdown-it set-up), and each
  construct it finds is written as Markdown: glued values as this build's text (myst-nb's
  glue data, formatted by myst-nb's own function), references as links to the published
  site, citations as the site numbers them ("[12]"), linked to the site's bibliography entry,
  admonitions as block quotes, labels dropped; glued figures as images and glued tables as
  HTML.
- Cells that exist only for the site (tagged `remove-cell`: glue, claims and records
  bookkeeping) are left out; the book checks no kept cell needs a name only they define.
- The set-up cell (the one with the Colab block) keeps its place, before anything imports
  the book. It, and every cell the site collapses, is folded in Colab (its form view, under
  a `# @title`) and in Jupyter (`source_hidden`); outputs stay in view.
- A cell that fails on purpose (tagged `raises-exception`, which Colab ignores) runs inside
  a `try` that prints the error, so "Run all" goes on past it; the parser checks the wrapped
  statements are the cell's own, unchanged.
- One line under the title names the build, its machine and its date, and says that running
  the cells measures the reader's machine.
- Kept cells keep this build's outputs, so the chapter reads before anything runs.

The parsers (myst_parser, myst_nb) are the build's, not the runtime's: only the build
and the tests import this module.
"""

from __future__ import annotations

import ast
import builtins
import copy
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BOOKKEEPING", "BUILDS_OWN", "CHECKS_TITLE", "COLAB_BLOCK", "EDITION_NOTE",
           "EXPECTED_ERROR", "EXPECTED_TYPE", "FAILS_ON_PURPOSE", "FOLDED_TITLE", "GLUE_CALLS",
           "RAW_MYST", "READING_NOTE", "READS_SAVED", "RELEASES", "SET_UP_TITLE", "SHOWN_LINES",
           "Build", "Site", "checks_or_cleans_up", "edition", "markdown", "needs_only_dropped",
           "raw_myst", "site_only"]

# What marks a cell as the site's own: the tag that hides it from the site's readers too.
SITE_ONLY_TAG = "remove-cell"
# Calls that only feed the site's prose (deepdive.book.results and claims): a cell of
# nothing else is site-only whatever its tags.
GLUE_CALLS = frozenset({"glue", "glue_claims", "glue_noise", "cite"})
# What a site-only cell may call that a reader's run still needs: releasing a worker or a folder.
RELEASES = frozenset({"close", "rmtree"})
CHECKS_TITLE = "Checks the text relies on, and clean-up (the site runs them unseen)"
# Calls that keep the site's books (besides any `.save()`): a cell making them is site-only.
BOOKKEEPING = frozenset({"glue_claims", "glue_noise", "cite"})
# A kept cell must not read what only a dropped cell saves: this chapter's claims.csv rows
# (unless a kept cell saved them first); glue_claims and cite read them too.
READS_SAVED = frozenset({"load_claims", "glue_claims", "cite"})
# The set-up cell is the one that opens with the book's Colab block (tests/test_notebooks.py).
COLAB_BLOCK = 'if "google.colab" in sys.modules:'
SET_UP_TITLE = "Set-up: in Colab, fetches the book and adds what Colab lacks (run this first)"
FOLDED_TITLE = "Code for the output below (double-click to open)"
PLOT_HANDLES = frozenset({"fig", "ax", "axes", "_"})  # bound by a figure's code, used by none
FAILS_ON_PURPOSE = "raises-exception"
BUILDS_OWN = "*This build's {what}, as the site shows it; running the cells does not redraw it.*"
# The error's type and its message's first lines, as the site shows a cell that fails on purpose.
SHOWN_LINES = 4
_PRINT = ("    _lines = str(error).splitlines()  # underscored: no chapter name is rebound\n"
          "    _more = [f\"[... {len(_lines) - 4} more lines of the message]\"] "
          "if len(_lines) > 4 else []\n"
          "    print(f\"{type(error).__name__}:\", *_lines[:4], *_more, sep=\"\\n  \")")
EXPECTED_ERROR = ("except Exception as error:  # fails on purpose: the error is the point\n"
                  + _PRINT)
# With the build's error type known: another type, or no error, is a real failure.
EXPECTED_TYPE = ("except Exception as error:  # fails on purpose: the error is the point\n"
                 "    if type(error).__name__ != \"{name}\":\n"
                 "        raise\n" + _PRINT.replace("{", "{{").replace("}", "}}") + "\n"
                 "else:\n"
                 "    raise AssertionError(\"this cell should have raised {name}\")")
EDITION_NOTE = ("*Colab edition of [this chapter]({url}) of PyTorch vs JAX, Deep Dives. Its "
                "text, numbers and outputs come from build `{build_id}` on {device}, at "
                "{scale} scale, {date}; running the cells measures your own machine (at the "
                "scale its set-up cell picks), and their outputs replace the build's.*")
# The choosing chapter times nothing: it reads the evidence the measuring chapters saved.
READING_NOTE = ("*Colab edition of [this chapter]({url}) of PyTorch vs JAX, Deep Dives. Its "
                "text, numbers and outputs come from build `{build_id}` on {device}, at "
                "{scale} scale, {date}, read from the evidence the measuring chapters saved. "
                "It times nothing itself: run here, it reads the evidence its first cells "
                "say how to point it at, and its outputs replace the build's.*")
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
    citations: Mapping[str, tuple[str, str]]  # bibliography key -> (label, url), e.g. "12"

    def page(self, docname: str, anchor: str = "") -> str:
        return f"{self.base_url.rstrip('/')}/{docname}.html" + (f"#{anchor}" if anchor else "")


@dataclass(frozen=True)
class Build:
    """The build whose text and outputs an edition carries."""

    build_id: str
    device: str
    date: str
    scale: str
    measures: bool = True  # False: the chapter reads other chapters' evidence, timing nothing

    def note(self, url: str) -> str:
        """The line under an edition's title."""
        return (EDITION_NOTE if self.measures else READING_NOTE).format(
            url=url, build_id=self.build_id, device=self.device, scale=self.scale,
            date=self.date)


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
            links.append(site.citations[key])
        links.sort(key=lambda link: int(link[0]) if link[0].isdigit() else 0)  # as the site
        return f"[{', '.join(f'[{label}]({url})' for label, url in links)}]"  # [12], [3, 7]
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
    """A glued output shown whole: its image, table, Markdown or text. An image or table is
    marked as the build's: it stays in the text when the reader's run redraws the cells."""
    if "image/png" in data:
        image = f"![{key}](data:image/png;base64,{''.join(data['image/png']).strip()})"
        return f"{image}\n\n{BUILDS_OWN.format(what='figure')}"
    if "text/html" in data:
        return f"{_html(''.join(data['text/html']))}\n\n{BUILDS_OWN.format(what='table')}"
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
    blocks = {}  # first line -> (end line, replacement) of each directive, label or paragraph
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
    for token in tokens:  # roles, each within its own block's lines (a table row's cells
        if token.type == "inline" and token.map and _roles_in([token]):  # share a line)
            start, end = token.map
            source = blocks[start][1] if start in blocks else "\n".join(lines[start:end])
            blocks[start] = (end, _with_roles(source, token.children, glued, docname, site))
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
    return "\n".join(kept).strip("\n")


def _with_roles(block: str, children, glued: Mapping, docname: str, site: Site) -> str:
    """A block's source with its roles written as Markdown, in order: each found after the
    one before it and after any code span before it, so a role's text quoted in code stays."""
    cursor = 0
    for child in children:
        if child.type == "code_inline":
            found = block.find(f"{child.markup}{child.content}{child.markup}", cursor)
            cursor = cursor if found < 0 else found + len(child.content) + 2 * len(child.markup)
        elif child.type == "myst_role":
            raw = f"{{{child.meta['name']}}}`{child.content}`"
            found = block.find(raw, cursor)
            if found < 0:
                raise ValueError(f"{docname}: the parser's role {raw} is not in its block's "
                                 f"source:\n{block}")
            written = _role(child.meta["name"], child.content, glued, docname, site)
            block = block[:found] + written + block[found + len(raw):]
            cursor = found + len(written)
    return block


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


def checks_or_cleans_up(source: str) -> bool:
    """Whether a cell asserts something the text relies on, or releases what the chapter
    started (a worker's `.close()`, a folder's `rmtree`), and keeps no books: a reader's run
    needs the first two. A cell that also saves claims or records, or glues them for the
    prose, is the site's bookkeeping, and its asserts check that bookkeeping."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    called = _called(source)
    if any(c.endswith(".save") or c in BOOKKEEPING for c in called):
        return False
    return any(isinstance(node, ast.Assert) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr in RELEASES) for node in ast.walk(tree))


def site_only(cell) -> bool:
    """Whether a code cell exists only for the site: tagged `remove-cell` and neither
    checking nor cleaning up, or nothing but calls that glue values for its prose."""
    if cell.get("cell_type") != "code":
        return False
    if SITE_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
        return not checks_or_cleans_up(cell["source"])
    called = _top_level_calls(cell["source"])
    return bool(called) and set(called) <= GLUE_CALLS


def _called(source: str) -> list[str]:
    """What a cell calls anywhere, as written: `load_claims`, `CLAIMS.save`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name | ast.Attribute)]


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


def _fold(cell, title: str) -> None:
    """Hide a cell's code, not its output: Jupyter's `source_hidden`, and Colab's form view,
    which shows the `# @title` line in its place."""
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    cell.source = f"# @title {title}\n{cell.source}"
    cell.metadata["cellView"] = "form"


def _folded_title(source: str) -> str:
    """A folded cell's title, which is all Colab shows of it: its opening comment, else the
    names it defines (what later cells use), else that it makes the output below."""
    first = source.lstrip().splitlines()[0] if source.strip() else ""
    if first.startswith("#"):
        return first.lstrip("#").strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return FOLDED_TITLE
    defined = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    names = [n for n in dict.fromkeys(defined) if n not in PLOT_HANDLES]
    if not names:
        return FOLDED_TITLE
    return "Defines " + ", ".join(names[:4]) + (", …" if len(names) > 4 else "")


def _wrapped(source: str, expected: str | None) -> str:
    """A cell that raises on purpose, as one that prints its error and lets the rest run; an
    error of another type than the build's (`expected`), or none, still stops the run."""
    body = "\n".join(f"    {line}" if line.strip() else "" for line in source.splitlines())
    if expected is None:
        wrapped = f"try:\n{body}\n{EXPECTED_ERROR}"
    else:
        wrapped = f"try:\n{body}\n" + EXPECTED_TYPE.format(name=expected)
    inner = ast.parse(wrapped).body[0].body
    if [ast.dump(s) for s in inner] != [ast.dump(s) for s in ast.parse(source).body]:
        raise ValueError(f"wrapping changed the cell's statements:\n{source}")
    return wrapped


def _printed_error(output):
    """A saved error output as the text the wrapped cell prints instead."""
    import nbformat

    if output.get("output_type") != "error":
        return output
    message = output["evalue"].splitlines()
    more = ([f"[... {len(message) - SHOWN_LINES} more lines of the message]"]
            if len(message) > SHOWN_LINES else [])
    lines = "".join(f"\n  {line}" for line in [*message[:SHOWN_LINES], *more])
    return nbformat.v4.new_output("stream", name="stdout", text=f"{output['ename']}:{lines}\n")


def edition(executed, glued: Mapping, docname: str, site: Site, build: Build):
    """The Colab edition of one executed chapter (an nbformat notebook, not changed)."""
    import nbformat

    needs = needs_only_dropped(executed.cells)
    if needs:
        raise ValueError(f"{docname}: kept cells read names only site-only cells bind, so the "
                         f"edition would fail when run: {needs}")
    reading, saved = [], False
    for cell in (c for c in executed.cells if c.cell_type == "code" and not site_only(c)):
        saved = saved or "CLAIMS.save" in _called(cell.source)  # a kept cell saves them
        if READS_SAVED & set(_called(cell.source)) and not saved:
            reading.append(cell.source[:80])
    if reading:
        raise ValueError(f"{docname}: kept cells read claims.csv, which only the site's "
                         f"bookkeeping saves (read the Claims object instead): {reading}")
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
            tags = [t for t in cell.metadata.get("tags", [])
                    if t not in (FAILS_ON_PURPOSE, SITE_ONLY_TAG)]
            # Glued values' outputs feed the site's prose and show nothing (Jupyter: "no
            # renderer"): the edition has the values in its text.
            outputs = [copy.deepcopy(o) for o in cell.outputs
                       if "scrapbook" not in o.get("metadata", {})]
            source = cell.source
            if SITE_ONLY_TAG in cell.metadata.get("tags", []):
                outputs = []  # a check the site runs unseen: its page shows no output
            if FAILS_ON_PURPOSE in cell.metadata.get("tags", []):
                expected = next((o["ename"] for o in outputs if o.get("output_type") == "error"),
                                None)
                source, outputs = _wrapped(source, expected), [_printed_error(o) for o in outputs]
            kept = nbformat.v4.new_code_cell(source, execution_count=cell.execution_count,
                                             outputs=outputs)
            if set_up and COLAB_BLOCK in cell.source:
                _fold(kept, SET_UP_TITLE)
                set_up = False
            elif SITE_ONLY_TAG in cell.metadata.get("tags", []):  # kept: it checks
                _fold(kept, CHECKS_TITLE)
            elif "hide-input" in tags or "hide-cell" in tags:
                _fold(kept, _folded_title(cell.source))
            if "hide-output" in tags or "hide-cell" in tags:  # Jupyter folds outputs too
                kept.metadata.setdefault("jupyter", {})["outputs_hidden"] = True
            if tags:
                kept.metadata["tags"] = tags
            nb.cells.append(kept)
    _add_note(nb, docname, site, build)
    return nb


def _add_note(nb, docname: str, site: Site, build: Build) -> None:
    """The line under the title: whose build this is, and what running it does."""
    note = build.note(site.page(docname))
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    lines = first.source.splitlines()
    heading = next((i for i, line in enumerate(lines) if line.startswith("# ")), -1)
    lines.insert(heading + 1, f"\n{note}\n")
    first.source = "\n".join(lines)
