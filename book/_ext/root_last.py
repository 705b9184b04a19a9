"""Sphinx extension: read, and so execute, the book's root page (the intro) after every
other page.

The intro glues the book's decided verdicts from `claims.csv`, which every chapter writes
while it executes. Sphinx reads (and myst-nb executes) documents in sorted docname order, so
`book/intro` would run before `notebooks/...` and read the previous build's claims, or none.
This moves the root document to the end of the read list; `always_reread` makes every build
read it. The order holds in a serial read, which is how the book builds (no `-j`).
"""


def root_doc(config) -> str:
    """The root document's name (`root_doc`; `master_doc` in older Sphinx)."""
    return getattr(config, "root_doc", None) or config.master_doc


def read_root_last(app, env, docnames: list[str]) -> None:
    """`env-before-read-docs` handler: move the root document to the end, in place."""
    root = root_doc(app.config)
    if root in docnames:
        docnames.remove(root)
        docnames.append(root)


def setup(app):
    app.connect("env-before-read-docs", read_root_last)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
