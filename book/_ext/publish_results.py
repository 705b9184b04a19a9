"""Sphinx extension: publish the evidence with the site, under `results/`.

The choosing chapter can then run on its own, in Colab or a fresh Jupyter, and read what this build
measured (`DEEPDIVE_EVIDENCE=published`) instead of needing every chapter before it run first.
"""

import shutil
from pathlib import Path

from deepdive.book.evidence import EVIDENCE_FILES
from deepdive.core.env import results_dir


def publish(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "results"
    target.mkdir(exist_ok=True)
    for name in EVIDENCE_FILES:
        if (results_dir() / name).exists():
            shutil.copyfile(results_dir() / name, target / name)


def setup(app):
    app.connect("build-finished", publish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
