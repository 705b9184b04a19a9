"""Sphinx extension: the PyTorch/XLA page re-executes when what it runs on changes, and only then.

The page's routes run in a side environment (`.venv-xla`, from requirements-xla.txt) through
a worker process (`deepdive.models.xla_worker`, driven by `xla_route`), none of which shows
in its code cells, which are all the execution cache hashes. So the cache alone would keep an
old run after the side environment or the worker changed. This extension fingerprints what
the page depends on beyond its cells; when the fingerprint differs from the last build's, it
drops the page's cached execution and has Sphinx read the page again. A rebuild with nothing
changed reads the page from the cache, like any other chapter.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DOC = "notebooks/05_vit_xla"
# Beyond the page's code cells: the side environment's pins and the worker's sources.
DEPENDS_ON = ("requirements-xla.txt", "src/deepdive/models/xla_worker.py",
              "src/deepdive/models/xla_route.py")
# Whether, and with which interpreter, the route runs (the Makefile's switches).
SWITCHES = ("DEEPDIVE_SKIP_XLA", "DEEPDIVE_XLA_PYTHON")
STAMP_NAME = "deepdive-xla-page-depends-on.sha256"


def fingerprint(root: Path, environ=os.environ) -> str:
    """A digest of every file in DEPENDS_ON (a missing one counts as such) and the switches."""
    digest = hashlib.sha256()
    for name in DEPENDS_ON:
        path = root / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(missing)")
    for switch in SWITCHES:
        digest.update(f"{switch}={environ.get(switch, '')}\0".encode())
    return digest.hexdigest()


def cache_folder(app) -> Path:
    configured = getattr(app.config, "nb_execution_cache_path", "") or ""
    return Path(configured) if configured else Path(app.outdir).parent / ".jupyter_cache"


def drop_cached_runs(folder: Path, doc: str = DOC) -> int:
    """Remove the execution cache's records of `doc`; returns how many there were."""
    from jupyter_cache import get_cache

    if not folder.exists():
        return 0
    cache = get_cache(str(folder))
    stale = [r.pk for r in cache.list_cache_records()
             if r.uri and Path(r.uri).with_suffix("").as_posix().endswith(doc)]
    for pk in stale:
        cache.remove_cache(pk)
    return len(stale)


def check_depends_on(app) -> None:
    """`builder-inited`: compare the fingerprint with the last build's; on a change, drop the
    page's cached run and remember to read it."""
    folder = cache_folder(app)
    stamp = folder / STAMP_NAME
    now = fingerprint(Path(app.srcdir))
    app.deepdive_xla_changed = not stamp.is_file() or stamp.read_text().strip() != now
    if app.deepdive_xla_changed:
        drop_cached_runs(folder)
        folder.mkdir(parents=True, exist_ok=True)
        stamp.write_text(now + "\n")


def outdated(app, env, added, changed, removed):
    return [DOC] if getattr(app, "deepdive_xla_changed", False) and DOC in env.found_docs else []


def setup(app):
    app.connect("builder-inited", check_depends_on)
    app.connect("env-get-outdated", outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
