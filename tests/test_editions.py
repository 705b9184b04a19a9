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
    citations={"torch-func": ("3", f"{BASE}book/references.html#id7")})
BUILD = editions.Build("20261128T000000Z-abc", "a test CPU", "2026-11-28", "small")
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


def test_citations_read_as_the_site_numbers_them_linked_to_the_bibliography_entry():
    label, url = SITE.citations["torch-func"]
    myst = "`vmap` {cite}`torch-func`"
    assert convert(myst) == f"`vmap` [[{label}]({url})]"


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
    marks = [editions.BUILDS_OWN.format(what=what) for what in ("figure", "table")]
    assert all(mark in out for mark in marks)  # the reader's run does not redraw them
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
    kept = ["x = torch.ones(3)\nprint(x)", f"# @title {editions.FOLDED_TITLE}\nprint(x.sum())"]
    assert sources[1:] == kept
    assert ed.cells[-1].metadata["jupyter"]["source_hidden"]
    assert not any(editions.site_only(c) for c in ed.cells)
    first = ed.cells[0].source.splitlines()
    assert first[0] == "# vmap" and first[2] == BUILD.note(SITE.page(DOC))
    assert BUILD.build_id in first[2] and BUILD.device in first[2]
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


def test_a_cell_that_fails_on_purpose_prints_its_error_and_lets_the_rest_run():
    failing = code("x = 1\nassert x == 2, 'on purpose'", ["raises-exception"])
    failing.outputs = [nbformat.v4.new_output("error", ename="AssertionError",
                                              evalue="on purpose", traceback=[])]
    nb = chapter(nbformat.v4.new_markdown_cell("# t"), failing, code("print(x)"))
    wrapped = editions.edition(nb, GLUED, DOC, SITE, BUILD).cells[1]
    assert wrapped.source.startswith("try:\n    x = 1\n") and editions.FAILS_ON_PURPOSE not in (
        wrapped.metadata.get("tags", []))
    printed = []
    exec(wrapped.source, {"print": lambda *parts, sep=" ": printed.append(sep.join(parts))})
    shown = "AssertionError:\n  on purpose"  # the type, then the message's first lines
    assert printed == [shown]
    assert wrapped.outputs[0].text == printed[0] + "\n"  # the build's error, as a run prints it
    # Another error, or none, is a real failure: it still stops the run.
    for changed, error in (("x = 1\nx.nope", AttributeError), ("x = 2\nassert x == 2",
                                                                AssertionError)):
        failing.source = changed
        rewrapped = editions.edition(nb, GLUED, DOC, SITE, BUILD).cells[1].source
        with pytest.raises(error):
            exec(rewrapped, {"print": print})
    assert [o.output_type for o in wrapped.outputs] == ["stream"]


def test_collapsed_cells_fold_under_their_opening_comment_and_glue_outputs_are_dropped():
    plot = code("# Figure: the sweep\nplt.plot([1, 2])", ["hide-input"])
    plot.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "fig"}),
                    nbformat.v4.new_output("display_data", data={"text/plain": "1"},
                                           metadata={"scrapbook": {"name": "x"}})]
    nb = chapter(nbformat.v4.new_markdown_cell("# t"), code("import matplotlib"), plot,
                 code("print(2)", ["hide-cell"]),
                 code("def rows(t):\n    return t\nLIMIT, (a, b) = 3, (1, 2)", ["hide-input"]))
    cells = editions.edition(nb, GLUED, DOC, SITE, BUILD).cells
    titles = [c.source.splitlines()[0] for c in cells[2:]]
    assert titles == ["# @title Figure: the sweep", f"# @title {editions.FOLDED_TITLE}",
                      "# @title Defines rows, LIMIT, a, b"]
    assert cells[3].metadata["jupyter"]["outputs_hidden"]  # hide-cell: output folded too
    assert all(c.metadata["cellView"] == "form" for c in cells[2:])
    assert len(cells[2].outputs) == 1  # the figure, not the glued value


def test_a_role_quoted_in_a_code_span_stays_and_the_real_one_is_written():
    myst = "Write `{glue:text}`speedup`` in MyST; here: {glue:text}`speedup:.1f`x."
    written = "Write `{glue:text}`speedup`` in MyST; here: 1.2x."
    assert convert(myst) == written


def test_a_removed_cell_that_checks_or_cleans_up_is_kept_folded_and_one_reading_claims_stops():
    check = code("glue('n', 3)\nassert n == 3", ["remove-cell"])
    check.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "3"})]
    close = code("WORKER.close()", ["remove-cell"])
    books = code("records.save()\nassert records", ["remove-cell"])  # checks its own books
    nb = chapter(nbformat.v4.new_markdown_cell("# t"), code("n, records, WORKER = 3, 0, 0"),
                 check, close, books, code("glue('m', n)", ["remove-cell"]))
    cells = editions.edition(nb, GLUED, DOC, SITE, BUILD).cells
    titles = [c.source.splitlines()[0] for c in cells[2:]]
    assert titles == [f"# @title {editions.CHECKS_TITLE}"] * 2
    assert not cells[2].outputs  # the site shows none of a check it runs unseen
    assert all("remove-cell" not in c.metadata.get("tags", []) for c in cells)
    for reader in ("x = load_claims('01_vmap')", "x = 1\nglue_claims('01_vmap')"):
        reads = chapter(nbformat.v4.new_markdown_cell("# t"), code(reader, ["hide-input"]))
        with pytest.raises(ValueError, match="claims.csv"):
            editions.edition(reads, GLUED, DOC, SITE, BUILD)
    # A kept cell that saves the claims first may read them back.
    saves = code("CLAIMS.save()\nsaved = load_claims('01_vmap')")
    editions.edition(chapter(nbformat.v4.new_markdown_cell("# t"), code("CLAIMS = 0"), saves),
                     GLUED, DOC, SITE, BUILD)


def test_the_choosing_chapters_note_says_it_times_nothing():
    reading = editions.Build("id", BUILD.device, "2026-11-28", "small", measures=False)
    assert reading.note("u") == editions.READING_NOTE.format(
        url="u", build_id="id", device=BUILD.device, scale="small", date="2026-11-28")
    assert reading.note("u") != BUILD.note("u")
