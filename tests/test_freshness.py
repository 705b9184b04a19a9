"""Chapter 6 and the Reproduce page are this build's: they re-execute whatever the cache
holds, and the published site's cache can only be reused by a build with the same
helpers and pins."""

from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ALWAYS_FRESH = (ROOT / "notebooks" / "07_choosing.md", ROOT / "book" / "reproduce.md",
                ROOT / "notebooks" / "05_vit_xla.md", ROOT / "book" / "intro.md",
                ROOT / "book" / "ledger.md")


@pytest.mark.parametrize("page", ALWAYS_FRESH, ids=lambda p: p.stem)
def test_pages_that_read_this_builds_results_force_their_execution(page):
    assert jupytext.read(page).metadata.get("mystnb") == {"execution_mode": "force"}


def test_the_paired_notebook_keeps_the_execution_mode_too():
    notebook = jupytext.read(ROOT / "notebooks" / "07_choosing.ipynb")

    assert notebook.metadata["mystnb"] == {"execution_mode": "force"}


def test_jupytext_with_this_repositorys_config_keeps_mystnb_in_the_markdown():
    """The pairing filter once dropped `mystnb`, so a sync silently undid the force."""
    from jupytext.config import load_jupytext_configuration_file

    config = load_jupytext_configuration_file(str(ROOT / "jupytext.toml"))
    notebook = jupytext.read(ROOT / "notebooks" / "07_choosing.ipynb")
    text = jupytext.writes(notebook, fmt="md:myst", config=config)

    assert jupytext.reads(text, fmt="md:myst").metadata["mystnb"] == {"execution_mode": "force"}


def workflow_cache():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = workflow["jobs"]["build"]["steps"]
    return next(s["with"] for s in steps if s.get("uses", "").startswith("actions/cache"))


def test_the_sites_cache_key_holds_what_the_numbers_depend_on():
    cache = workflow_cache()

    for dependency in ("src/**", "requirements.txt", "requirements-runtime.txt",
                       "requirements-xla.txt", "pyproject.toml", "notebooks/*.md"):
        assert f"'{dependency}'" in cache["key"], dependency


def test_the_sites_cache_keeps_the_results_with_the_executed_notebooks():
    assert set(workflow_cache()["path"].split()) == {"_build/.jupyter_cache", "_build/results"}


def test_a_fallback_cache_must_come_from_the_same_helpers_and_pins():
    restore = workflow_cache()["restore-keys"].strip()

    assert "src/**" in restore and "requirements.txt" in restore
    assert restore == workflow_cache()["key"].split("}}-")[0] + "}}-"


def test_every_build_gets_an_id_from_make():
    makefile = (ROOT / "Makefile").read_text()

    assert "export DEEPDIVE_BUILD_ID" in makefile


def test_sphinx_rereads_exactly_the_pages_that_force_their_execution():
    """Forcing bypasses the execution cache only for pages Sphinx reads; an incremental
    build reads changed sources only, so the extension makes it read these every time."""
    import importlib.util

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"]["always_reread"] == "book/_ext"
    spec = importlib.util.spec_from_file_location("always_reread",
                                                  ROOT / "book" / "_ext" / "always_reread.py")
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    forced = {str(page.relative_to(ROOT).with_suffix("")) for page in ALWAYS_FRESH}
    assert set(extension.ALWAYS_REREAD) == forced

    class Env:
        found_docs = {*forced, "notebooks/01_vmap"}

    assert set(extension.outdated(None, Env, set(), set(), set())) == forced


def test_the_pytorch_xla_page_re_executes_in_every_build():
    """Its numbers depend on the side environment, which its code cells do not show: a
    cached page would keep "not run" (or old versions) after the environment changed."""
    for suffix in (".md", ".ipynb"):
        notebook = jupytext.read(ROOT / "notebooks" / f"05_vit_xla{suffix}")
        assert notebook.metadata["mystnb"] == {"execution_mode": "force"}, suffix
