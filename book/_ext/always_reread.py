"""Sphinx extension: re-read, and so re-execute, the pages that must be this build's.

`mystnb: execution_mode: force` bypasses the execution cache, but only for a page Sphinx
reads; an incremental build reads changed sources only, and would keep an old rendering
of the choosing chapter (this build's evidence), of the intro (the book's verdicts, read
from every chapter's claims), of the Reproduce page (this build's machine and id), of the
ledger (this build beside the committed bundles). Listing them here makes every build read
them. The PyTorch/XLA page is read again only when its side environment or worker changed
(`xla_deps`).
"""

ALWAYS_REREAD = ("notebooks/07_choosing", "book/reproduce", "book/intro", "book/ledger")


def outdated(app, env, added, changed, removed):
    return [doc for doc in ALWAYS_REREAD if doc in env.found_docs]


def setup(app):
    app.connect("env-get-outdated", outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
