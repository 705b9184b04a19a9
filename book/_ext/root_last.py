"""Sphinx extension: read, and so execute, the pages that read what every chapter left after
every other page: the Reproduce page (each chapter's run time), the ledger of builds, then
the book's root page (the intro).

Both glue from `claims.csv`, which every chapter writes while it executes. Sphinx reads (and
myst-nb executes) documents in sorted docname order, so `book/intro` and `book/ledger` would
run before `notebooks/...` and read the previous build's claims, or none. This moves them to
the end of the read list, the root last; `always_reread` makes every build read them. The
order holds in a serial read, which is how the book builds (no `-j`).
"""

READ_LAST = ("book/reproduce", "book/ledger")  # then the root document


def root_doc(config) -> str:
    """The root document's name (`root_doc`; `master_doc` in older Sphinx)."""
    return getattr(config, "root_doc", None) or config.master_doc


def read_root_last(app, env, docnames: list[str]) -> None:
    """`env-before-read-docs` handler: move the READ_LAST pages, then the root document, to
    the end, in place (a page an incremental build does not read stays unread)."""
    for doc in (*READ_LAST, root_doc(app.config)):
        if doc in docnames:
            docnames.remove(doc)
            docnames.append(doc)


def setup(app):
    app.connect("env-before-read-docs", read_root_last)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
