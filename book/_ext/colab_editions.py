"""Sphinx extension: write each chapter's Colab edition, and point the page's buttons at it.

After the build, every chapter (`notebooks/*`) gets its edition (`deepdive.book.editions`)
from its executed notebook and myst-nb's glue data, with this site's labels, section
numbers, titles and bibliography: written to `_build/editions/notebooks/`, which the Pages
workflow publishes as the `deepdive_editions_branch` branch, and over the page's downloadable
`.ipynb`. The chapter pages' Colab and Binder buttons open that branch's edition; the
download menu offers the edition, not the MyST source. The other executed pages get no
launch buttons.
"""

import json
from pathlib import Path

import nbformat
import pandas as pd

from deepdive.book import editions
from deepdive.core.env import results_dir

CHAPTERS = "notebooks/"


def _site(app) -> editions.Site:
    env = app.env
    labels = {name: (doc, anchor, title) for name, (doc, anchor, title)
              in env.domaindata["std"]["labels"].items() if doc}
    titles = {doc: title.astext() for doc, title in env.titles.items()}
    numbers = {}
    for name, (doc, anchor, title) in labels.items():
        sections = env.toc_secnumbers.get(doc, {})
        # A label on a page's title takes the page's number; one on a section, the section's.
        number = sections.get(f"#{anchor}") or (sections.get("") if title == titles.get(doc)
                                                else None)
        if number:
            numbers[name] = ".".join(map(str, number))
    base = app.config.html_baseurl
    site = editions.Site(base, labels, numbers, titles, {})
    # Each bibliography entry as the site numbers it (sphinxcontrib-bibtex's labels), linked
    # to its entry on the site's bibliography page.
    cited = {c.key: (c.formatted_entry.label,
                     site.page(c.bibliography_key.docname, c.citation_id))
             for c in env.get_domain("cite").citations}
    return editions.Site(base, labels, numbers, titles, cited)


def _executed(app, doc: str):
    """The chapter as this build executed it, outputs included. myst-nb writes the executed
    notebook of a page it ran; for a page whose code it found in the execution cache, the
    outputs are in that cache (jupyter-cache), merged into the notebook as myst-nb does."""
    from jupyter_cache import get_cache

    notebook = nbformat.read(Path(app.outdir).parent / "jupyter_execute" / f"{doc}.ipynb",
                             as_version=4)
    if any(c.get("outputs") for c in notebook.cells if c.cell_type == "code"):
        return notebook
    cache = Path(app.env.mystnb_config.execution_cache_path)  # myst-nb resolves it at start
    try:
        # The cell metadata (tags) stays the source's: the cache's may be older.
        return get_cache(cache).merge_match_into_notebook(notebook, cell_meta=())[1]
    except KeyError as missing:
        raise RuntimeError(f"{doc}: its executed notebook has no outputs and the execution "
                           f"cache {cache} holds no run of its code") from missing


def _build_of(chapter: str) -> editions.Build:
    """The build behind a chapter's page (its provenance stamp), and whether the page timed
    anything (its results hold medians) or only read the other chapters' evidence."""
    stamps = pd.read_csv(results_dir() / "provenance.csv").set_index("chapter")
    if chapter not in stamps.index:
        raise KeyError(f"no provenance stamp for {chapter} in {results_dir()}: the page did "
                       "not run in this build's results folder")
    row = stamps.loc[chapter]
    results = pd.read_csv(results_dir() / f"{chapter}.csv")
    return editions.Build(row["build_id"], row["device"], row["executed_at"][:10],
                          row["scale"], measures="median" in set(results["metric"]))


def write_editions(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    executed, target = out.parent / "jupyter_execute", out.parent / "editions"
    site = _site(app)
    for doc in sorted(d for d in app.env.found_docs if d.startswith(CHAPTERS)):
        notebook = _executed(app, doc)
        glue_file = executed / f"{doc}.glue.json"
        glued = json.loads(glue_file.read_text()) if glue_file.exists() else {}
        chapter = Path(doc).name
        nb = editions.edition(notebook, glued, doc, site, _build_of(chapter))
        for path in (target / f"{doc}.ipynb", out / "_sources" / f"{doc}.ipynb"):
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)


def point_buttons_at_editions(app, pagename, templatename, context, doctree):
    """The Colab and Binder buttons open the edition's branch; download offers no .md. The
    book's other executed pages (intro, methodology, ledger, Reproduce) read this build's
    results and have no edition: they get no launch buttons, which would open raw MyST."""
    if not pagename.startswith(CHAPTERS):
        context["header_buttons"] = [group for group in context.get("header_buttons", [])
                                     if group.get("label") != "launch-buttons"]
        return
    main = app.config.html_theme_options.get("repository_branch", "main")
    branch, main = app.config.deepdive_editions_branch, f"/blob/{main}/"
    for group in context.get("header_buttons", []):
        if group.get("label") == "launch-buttons":
            for button in group["buttons"]:
                url = button.get("url", "")
                if url.startswith("https://colab.research.google.com/"):
                    button["url"] = url.replace(main, f"/blob/{branch}/")
                elif url.startswith("https://mybinder.org/"):
                    path, _, query = url.partition("?")
                    button["url"] = f"{path.rpartition('/')[0]}/{branch}?{query}"
        if group.get("label") == "download-buttons":
            group["buttons"] = [b for b in group["buttons"]
                                if b.get("label") != "download-source-button"]


def setup(app):
    # The branch the Pages workflow publishes the editions to (_config.yml sets it).
    app.add_config_value("deepdive_editions_branch", "editions", "html")
    app.connect("html-page-context", point_buttons_at_editions, priority=900)
    app.connect("build-finished", write_editions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
