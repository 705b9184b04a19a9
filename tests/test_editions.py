"""The Colab edition's conversion: MyST in, Markdown that Colab renders out (no build needed)."""

import nbformat
import pytest

from deepdive.book import editions

BASE = "https://example.org/book/"
SITE = editions.Site(
    BASE,
    labels={"ch-jit": ("notebooks/02_jit_xla", "ch-jit", "jit and XLA"),
            "verdict-rule": ("book/methodology", "verdict-rule", "The verdict rule")},
    numbers={"ch-jit": "2"},
    titles={"book/ledger": "The ledger", "notebooks/01_vmap": "vmap"},
    citations={"torch-func": ("torch.func", "https://pytorch.org/docs/stable/func.html")})
BUILD = editions.Build("20261128T000000Z-abc", "a test CPU", "2026-11-28")
GLUED = {"speedup": {"data": {"text/plain": "1.23456"}},
         "device": {"data": {"text/plain": "'a test CPU'"}},
         "found": {"data": {"text/plain": "<Markdown>",
                            "text/markdown": "- a finding, see {ref}`verdict-rule`"}},
         "table": {"data": {"text/plain": "t", "text/html":
                            "<div><style scoped>td {color: red}</style>\n\n<table><tr><td>1</td>"
                            "</tr></table></div>"}},
         "fig": {"data": {"text/plain": "<Figure>", "image/png": "iVBORw0KGgo="}}}
DOC = "notebooks/01_vmap"


def convert(text):
    return editions.markdown(text, GLUED, DOC, SITE)


def test_glued_text_is_written_in_with_myst_nbs_own_formatting():
    myst = "took {glue:text}`speedup:.2f`x on {glue:text}`device`"
    written = "took 1.23x on a test CPU"
    assert convert(myst) == written


def test_references_become_links_to_the_published_site():
    out = convert("see {ref}`verdict-rule`, {numref}`Chapter %s <ch-jit>`, "
                  "{ref}`the rule <verdict-rule>` and {doc}`ledger <../book/ledger>`")
    rule, chapter = f"{BASE}book/methodology.html#verdict-rule", f"{BASE}notebooks/02_jit_xla.html"
    linked = (f"see [The verdict rule]({rule}), [Chapter 2]({chapter}#ch-jit), "
              f"[the rule]({rule}) and [ledger]({BASE}book/ledger.html)")
    assert out == linked


def test_citations_become_links_to_their_source():
    title, url = SITE.citations["torch-func"]
    myst = "`vmap` {cite}`torch-func`"
    assert convert(myst) == f"`vmap` ([{title}]({url}))"


def test_labels_are_dropped_and_admonitions_become_block_quotes_of_their_glued_markdown():
    text = ("(ch-vmap)=\n# vmap\n\n:::{admonition} What this build found\n:class: tip\n\n"
            "```{glue:md} found\n:format: myst\n```\n:::\n")
    out = convert(text).splitlines()
    quoted = ["# vmap", "", "> **What this build found**", ">",
              f"> - a finding, see [The verdict rule]({BASE}book/methodology.html#verdict-rule)"]
    assert out == quoted
    assert editions.raw_myst("\n".join(out)) == []


def test_glued_figures_are_images_with_their_caption_and_tables_are_html_without_style():
    out = convert("```{glue:figure} fig\n:name: fig-a\n\nSpeed-up {glue:text}`speedup:.1f`x.\n"
                  "```\n\n:::{container}\n:name: tbl-a\n\n```{glue} table\n```\n:::\n")
    image, caption = "![fig](data:image/png;base64,iVBORw0KGgo=)", "Speed-up 1.2x."
    assert image in out and caption in out and "<td>1</td>" in out
    assert "<style" not in out and "\n\n<table" not in out  # one HTML block
    assert editions.raw_myst(out) == []


def test_a_missing_glue_key_or_label_fails_naming_it():
    with pytest.raises(KeyError, match="no glued value 'nope'"):
        convert("{glue:text}`nope`")
    with pytest.raises(KeyError, match="'ch-nowhere'"):
        convert("{ref}`ch-nowhere`")
    with pytest.raises(KeyError, match="'no-such-source'"):
        convert("{cite}`no-such-source`")
    with pytest.raises(ValueError, match="no Markdown for the role"):
        convert("{eq}`one`")


def test_raw_myst_finds_what_a_reader_would_see_raw():
    plain = "plain *text* with `code`"
    assert editions.raw_myst(plain) == []
    for raw in ("{glue:text}`a`", "(label)=\n# Title", ":::{note}\nhi\n:::", "{cite}`x`",
                "```{glue:md} key\n```"):
        assert editions.raw_myst(raw), raw


def chapter(*cells):
    return nbformat.v4.new_notebook(cells=list(cells), metadata={"jupytext": {}})


def code(source, tags=()):
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def test_site_only_cells_are_left_out_and_the_set_up_cell_stays_first_folded():
    nb = chapter(nbformat.v4.new_markdown_cell("(ch-vmap)=\n# vmap\n\nThe question."),
                 code('import sys\nif "google.colab" in sys.modules:\n    pass\nimport torch',
                      ["hide-cell"]),
                 code("x = torch.ones(3)\nprint(x)"),
                 code("glue('speedup', 1.2)"),  # nothing but glue: site-only
                 code("CLAIMS.save()\nrecords = 1", ["remove-cell"]),
                 code("print(x.sum())", ["hide-input"]))
    ed = editions.edition(nb, GLUED, DOC, SITE, BUILD)
    sources = [c.source for c in ed.cells if c.cell_type == "code"]
    assert sources[0].startswith(f"# @title {editions.SET_UP_TITLE}\nimport sys")
    assert ed.cells[1].metadata["cellView"] == "form"
    kept = ["x = torch.ones(3)\nprint(x)", "print(x.sum())"]
    assert sources[1:] == kept
    assert ed.cells[-1].metadata["jupyter"]["source_hidden"]
    assert not any(editions.site_only(c) for c in ed.cells)
    first = ed.cells[0].source.splitlines()
    note = editions.EDITION_NOTE.format(url=SITE.page(DOC), build_id=BUILD.build_id,
                                        device=BUILD.device, date=BUILD.date)
    assert first[0] == "# vmap" and first[2] == note
    assert "jupytext" not in ed.metadata


def test_a_kept_cell_that_needs_a_dropped_cells_name_stops_the_edition():
    nb = chapter(nbformat.v4.new_markdown_cell("# t"), code("import numpy"),
                 code("table = numpy.ones(2)", ["remove-cell"]), code("print(table)"))
    with pytest.raises(ValueError, match="table"):
        editions.edition(nb, GLUED, DOC, SITE, BUILD)
    # A name the kept cell binds itself (a loop variable) is no dependency.
    loops = [code("for key in 'ab':\n    glue(key, 1)", ["remove-cell"]),
             code("for key in 'cd':\n    print(key)")]
    assert editions.needs_only_dropped(loops) == {}


def test_references_read_the_bibliography_urls():
    bib = ("@misc{a, title = {{JAX}: composable}, howpublished = {\\url{https://jax.dev}}}\n"
           "@misc{b, title = {Slides}, howpublished = {Talk}}\n")
    page = f"{BASE}references.html"
    read = {"a": ("JAX: composable", "https://jax.dev"), "b": ("Slides", page)}
    assert editions.references(bib, page) == read
