"""Chapter 6 and the Reproduce page are this build's: they re-execute whatever the cache
holds, and the published site's cache can only be reused by a build with the same
helpers and pins."""

from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ALWAYS_FRESH = (ROOT / "notebooks" / "07_choosing.md", ROOT / "book" / "reproduce.md",
                ROOT / "book" / "intro.md", ROOT / "book" / "ledger.md")


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
    kept = {"_build/.jupyter_cache", "_build/results"}
    assert set(workflow_cache()["path"].split()) == kept


def test_a_fallback_cache_must_come_from_the_same_helpers_and_pins():
    restore = workflow_cache()["restore-keys"].strip()

    assert "src/**" in restore and "requirements.txt" in restore
    assert restore == workflow_cache()["key"].split("}}-")[0] + "}}-"


def test_every_build_gets_an_id_from_make():
    makefile = (ROOT / "Makefile").read_text()

    exported = "export DEEPDIVE_BUILD_ID"
    assert exported in makefile


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


def load_extension(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / "_ext" / f"{name}.py")
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    return extension


def test_the_pytorch_xla_page_is_cached_like_any_chapter():
    """Re-executing it in every build cost a no-change rebuild minutes; its cache now keys on
    what it runs on (`xla_deps`)."""
    for suffix in (".md", ".ipynb"):
        notebook = jupytext.read(ROOT / "notebooks" / f"05_vit_xla{suffix}")
        assert "mystnb" not in notebook.metadata, suffix
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"]["xla_deps"] == "book/_ext"


def test_the_xla_fingerprint_moves_with_each_thing_the_page_runs_on(tmp_path):
    xla_deps = load_extension("xla_deps")
    for name in xla_deps.DEPENDS_ON:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("one")
    before = xla_deps.fingerprint(tmp_path, {})

    assert xla_deps.fingerprint(tmp_path, {}) == before
    skip, other_python = xla_deps.SWITCHES
    assert xla_deps.fingerprint(tmp_path, {skip: "1"}) != before
    assert xla_deps.fingerprint(tmp_path, {other_python: "/x/python"}) != before
    for name in xla_deps.DEPENDS_ON:
        (tmp_path / name).write_text("two")
        assert xla_deps.fingerprint(tmp_path, {}) != before, name
        (tmp_path / name).write_text("one")
    (tmp_path / xla_deps.DEPENDS_ON[0]).unlink()
    assert xla_deps.fingerprint(tmp_path, {}) != before


def test_a_changed_fingerprint_drops_the_cached_run_and_rereads_the_page(tmp_path):
    """A real jupyter-cache holding the page and another: only the page's record goes."""
    import nbformat
    from jupyter_cache import get_cache

    xla_deps = load_extension("xla_deps")
    cache = get_cache(str(tmp_path / "cache"))
    for doc, source in ((xla_deps.DOC, "1 + 1"), ("notebooks/01_vmap", "2 + 2")):
        path = tmp_path / f"{doc}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                           "language": "python"}
        cache.cache_notebook_bundle(
            __import__("jupyter_cache.base", fromlist=["CacheBundleIn"]).CacheBundleIn(
                notebook, str(path)), check_validity=False)

    assert xla_deps.drop_cached_runs(tmp_path / "cache") == 1
    assert [Path(r.uri).stem for r in cache.list_cache_records()] == ["01_vmap"]

    class App:
        deepdive_xla_changed = True

    class Env:
        found_docs = {xla_deps.DOC, "notebooks/01_vmap"}

    assert xla_deps.outdated(App, Env, set(), set(), set()) == [xla_deps.DOC]
    App.deepdive_xla_changed = False
    assert xla_deps.outdated(App, Env, set(), set(), set()) == []
