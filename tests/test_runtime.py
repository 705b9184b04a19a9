"""Chapters run the way readers run them: in Colab, and in a Jupyter with only the runtime.

The kernels here use `.venv-runtime`, built by `make test` from requirements-runtime.txt
alone (plus ipykernel): no Sphinx, no myst-nb, no test tools. The Colab path executes a
chapter's paired .ipynb top to bottom with nbclient, with a stand-in `google.colab`
imported at kernel start, the repository address pointed at a local clone of this working
tree, and `small` scale.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

GLUED = "application/papermill.record/"  # how myst-nb's glue keeps a value, by MIME type

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_PYTHON = ROOT / ".venv-runtime" / "bin" / "python"
KEPT_TORCH = "Kept from this runtime: torch"  # the Colab cell kept the runtime's torch
BUILD_ONLY = ("sphinx", "myst_nb", "jupyter_book", "pytest", "ruff", "playwright", "jupytext")


@pytest.fixture(scope="module")
def runtime_python():
    if not RUNTIME_PYTHON.exists():
        message = "no .venv-runtime: `make runtime-env` builds it (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return RUNTIME_PYTHON


def kernel_spec(folder: Path, python: Path) -> str:
    """A kernelspec for `python`, so nbclient starts the kernel in that environment."""
    spec = folder / "kernels" / "reader"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "reader", "language": "python"}))
    return "reader"


def execute(notebook: Path, *, python: Path, cwd: Path, env: dict, tmp_path: Path,
            timeout: int = 900):
    """Run every cell of `notebook` in a kernel of `python`, started in `cwd` with `env`."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    specs = tmp_path / "jupyter"
    name = kernel_spec(specs, python)
    nb = nbformat.read(notebook, as_version=4)
    manager = KernelManager(kernel_name=name,
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[specs / "kernels"]))
    client = NotebookClient(nb, km=manager, timeout=timeout, allow_errors=False,
                            resources={"metadata": {"path": str(cwd)}})
    kernel_env = {k: v for k, v in os.environ.items()
                  if not k.startswith(("DEEPDIVE_", "JPY_", "PYTEST_"))}
    kernel_env.update(env)
    client.execute(env=kernel_env)
    return nb


def glued(nb) -> dict[str, str]:
    """{key: the value's Markdown, else its text} of everything the notebook glued."""
    return {o["metadata"]["scrapbook"]["name"]:
            o["data"].get(GLUED + "text/markdown", o["data"].get(GLUED + "text/plain"))
            for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "scrapbook" in o.get("metadata", {})}


def first_output(nb) -> str:
    """What the first code cell (the Colab cell) printed."""
    first = next(c for c in nb.cells if c.cell_type == "code")
    return "".join(o.get("text", "") for o in first.outputs if o.output_type == "stream")


def working_tree_repository(target: Path) -> Path:
    """A git repository holding this working tree (committed or not), to clone from."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    subprocess.run([*git, "init", "--quiet", "--initial-branch=main"], cwd=target, check=True)
    subprocess.run([*git, "add", "--all"], cwd=target, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "working tree"], cwd=target, check=True)
    return target


def colab_stand_in(folder: Path) -> Path:
    """`google.colab`, imported at interpreter start as Colab's kernel has it (a namespace
    `google`, so protobuf's `google.protobuf` still imports)."""
    (folder / "google" / "colab").mkdir(parents=True)
    (folder / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab."""\n')
    # JAX imports google.colab.output when it sees Colab (for its debugger's widgets).
    (folder / "google" / "colab" / "output.py").write_text('"""Stand-in."""\n')
    (folder / "sitecustomize.py").write_text("import google.colab  # noqa: F401\n")
    return folder


def test_the_runtime_environment_has_no_build_tools(runtime_python):
    probe = ("import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m)"
             " is not None for m in sys.argv[1:]}))")
    found = json.loads(subprocess.run([runtime_python, "-c", probe, *BUILD_ONLY],
                                      capture_output=True, text=True, check=True).stdout)
    assert not any(found.values()), f"build tools in the runtime: {found}"


@pytest.mark.parametrize("evidence", ["published", "none"])
def test_the_colab_path_runs_a_chapter_top_to_bottom(runtime_python, tmp_path, evidence):
    """Chapter 6, on its own in a fresh 'Colab' runtime: with the evidence this build
    published, and with none (the page must say so and how to get it)."""
    repository = working_tree_repository(tmp_path / "repository")
    book = tmp_path / "content" / "book"
    book.parent.mkdir()  # Colab's /content, where the kernel starts
    env = {"PYTHONPATH": str(colab_stand_in(tmp_path / "colab")),
           "DEEPDIVE_REPO": repository.as_uri(), "DEEPDIVE_BOOK_DIR": str(book),
           "DEEPDIVE_SCALE": "small", "CUDA_VISIBLE_DEVICES": ""}
    published = ROOT / "_build" / "html" / "results"
    if evidence == "published":
        if not (published / "claims.csv").exists():
            pytest.skip("no published results: run after `make book`")
        env["DEEPDIVE_EVIDENCE"] = published.as_uri()

    nb = execute(repository / "notebooks" / "07_choosing.ipynb", python=runtime_python,
                 cwd=tmp_path / "content", env=env, tmp_path=tmp_path)

    report = first_output(nb)
    assert KEPT_TORCH in report and "Installing:" not in report
    assert "Scale: small" in report
    assert (book / "_build" / "results" / "07_choosing.csv").exists()  # saved in the clone
    text, values = json.dumps([c.get("outputs", []) for c in nb.cells]), glued(nb)
    if evidence == "published":
        assert values["missing_chapters"] == repr("none")  # every measuring page was found
        assert env["DEEPDIVE_EVIDENCE"] in values["evidence_source"]  # and said whose
        assert "MISSING" not in values["findings"]
    else:  # the page says so, and how to get some, and shows no stale number
        assert "No evidence to read yet" in text and "DEEPDIVE_EVIDENCE=published" in text
        assert "01_vmap" in values["missing_chapters"]
        assert "MISSING" in values["findings"] and " faster than " not in text


def test_the_colab_edition_runs_top_to_bottom(runtime_python, tmp_path):
    """The notebook a reader opens from the launch button (the choosing chapter's Colab
    edition, which `make book` writes), in a fresh 'Colab' runtime with the evidence this
    build published: every kept cell runs, and the outputs become the reader's own."""
    edition = ROOT / "_build" / "editions" / "notebooks" / "07_choosing.ipynb"
    published = ROOT / "_build" / "html" / "results"
    if not edition.exists() or not (published / "claims.csv").exists():
        message = "no Colab edition or published results: run after `make book`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    repository = working_tree_repository(tmp_path / "repository")
    book = tmp_path / "content" / "book"
    book.parent.mkdir()
    env = {"PYTHONPATH": str(colab_stand_in(tmp_path / "colab")),
           "DEEPDIVE_REPO": repository.as_uri(), "DEEPDIVE_BOOK_DIR": str(book),
           "DEEPDIVE_SCALE": "small", "CUDA_VISIBLE_DEVICES": "",
           "DEEPDIVE_EVIDENCE": published.as_uri()}
    built = nbformat.read(edition, as_version=4)

    nb = execute(edition, python=runtime_python, cwd=tmp_path / "content", env=env,
                 tmp_path=tmp_path)

    assert KEPT_TORCH in first_output(nb)
    # Each cell that fails on purpose ran past its error (an error of another type, or none,
    # would have stopped the run) and printed the type the build's run printed.
    def printed(cell):
        return "".join(o.get("text", "") for o in cell.outputs).split(":")[0]
    on_purpose = [(ran, was) for ran, was in zip(nb.cells, built.cells, strict=True)
                  if was.cell_type == "code" and "fails on purpose" in was.source]
    assert len(on_purpose) == 4  # the chapter's four errors of the two frameworks
    assert all(printed(ran) == printed(was) != "" for ran, was in on_purpose)
    # The reader's run measured its own machine: its results, in its own clone.
    assert (book / "_build" / "results" / "07_choosing.csv").exists()


def test_an_unreachable_address_stops_the_first_cell_saying_how_to_fix_it(tmp_path):
    """The main environment's kernel is enough: the cell fails before it imports anything."""
    address = (tmp_path / "no-such-repository").as_uri()
    env = {"PYTHONPATH": str(colab_stand_in(tmp_path / "colab")), "DEEPDIVE_REPO": address,
           "DEEPDIVE_BOOK_DIR": str(tmp_path / "book")}

    with pytest.raises(CellExecutionError) as failure:
        execute(ROOT / "notebooks" / "01_vmap.ipynb", python=Path(sys.executable),
                cwd=tmp_path, env=env, tmp_path=tmp_path, timeout=120)

    message = str(failure.value)
    assert f"could not clone the book from {address}" in message
    assert "DEEPDIVE_REPO" in message
    assert not (tmp_path / "book").exists()


def test_a_plain_jupyter_with_only_the_runtime_runs_a_chapter(runtime_python, tmp_path):
    """A kernel started in notebooks/ imports deepdive (installed by the runtime's `-e .`)."""
    results = tmp_path / "results"
    nb = execute(ROOT / "notebooks" / "06_distributed.ipynb", python=runtime_python,
                 cwd=ROOT / "notebooks", tmp_path=tmp_path,
                 env={"DEEPDIVE_RESULTS_DIR": str(results), "DEEPDIVE_SCALE": "small",
                      "CUDA_VISIBLE_DEVICES": ""})

    assert first_output(nb) == ""  # the Colab cell did nothing
    assert (results / "06_distributed.csv").exists()
    assert not any(o.output_type == "error" for c in nb.cells for o in c.get("outputs", []))
