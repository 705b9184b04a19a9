"""Colab's first cell: what it keeps, installs and restarts for, decided without Colab."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from deepdive.book import colab

ROOT = Path(__file__).resolve().parents[1]
MINIMUM = colab.minimums(ROOT)
PINNED = colab.pins(ROOT)

# Colab's GPU image (googlecolab/backend-info, pip-freeze.gpu.txt, 2026): the runtime's
# packages as it ships them.
COLAB_GPU = {"torch": "2.11.0+cu128", "triton": "3.6.0", "jax": "0.7.2", "jaxlib": "0.7.2",
             "jax-cuda12-plugin": "0.7.2", "jax-cuda12-pjrt": "0.7.2", "flax": "0.11.2",
             "optax": "0.2.8", "transformers": "5.9.0", "numpy": "2.0.2", "pandas": "2.2.2",
             "matplotlib": "3.10.0", "psutil": "5.9.5", "nvidia-ml-py": "13.610.43",
             "tqdm": "4.67.3", "ipykernel": "6.17.1"}


def test_every_dependency_has_a_pin_and_every_pin_meets_its_minimum():
    assert set(MINIMUM) == set(PINNED)
    for name, pin in PINNED.items():
        (version,) = [s.version for s in pin.specifier]
        assert MINIMUM[name].specifier.contains(version), (name, version)


def test_colab_keeps_its_torch_and_replaces_only_the_jax_family_keeping_the_gpu_plugin():
    choice = colab.choose_packages(COLAB_GPU, MINIMUM, PINNED)

    # Flax 0.11 lacks nnx.List (chapter 4), and Flax 0.12.8 needs JAX 0.10: one family.
    assert choice.install == ["flax==0.12.8", "jax[cuda12]==0.10.2", "jaxlib==0.10.2"]
    assert choice.replaced == {"flax": "0.11.2", "jax": "0.7.2", "jaxlib": "0.7.2"}
    assert choice.kept["torch"] == "2.11.0+cu128"  # a local CUDA label still compares
    assert set(choice.kept) == set(MINIMUM) - {"flax", "jax", "jaxlib"}


def test_a_colab_with_a_new_enough_jax_installs_nothing():
    current = dict(COLAB_GPU, jax="0.10.2", jaxlib="0.10.2", flax="0.12.8")

    choice = colab.choose_packages(current, MINIMUM, PINNED)

    assert choice.install == [] and choice.replaced == {}


def test_a_missing_package_gets_its_pin_and_nothing_else_moves():
    installed = {k: v for k, v in COLAB_GPU.items() if k != "optax"}
    installed.update(jax="0.10.2", jaxlib="0.10.2", flax="0.12.8")

    choice = colab.choose_packages(installed, MINIMUM, PINNED)

    assert choice.install == ["optax==0.2.8"]
    assert choice.replaced == {}


def test_an_old_jax_moves_with_jaxlib_and_keeps_colabs_gpu_plugin_flavour():
    installed = dict(COLAB_GPU, jax="0.6.0", jaxlib="0.6.0", flax="0.12.8")

    choice = colab.choose_packages(installed, MINIMUM, PINNED)

    assert choice.install == ["jax[cuda12]==0.10.2", "jaxlib==0.10.2"]
    assert choice.replaced == {"jax": "0.6.0", "jaxlib": "0.6.0"}
    assert "torch" in choice.kept and "flax" in choice.kept


def test_without_a_gpu_plugin_a_new_jax_is_the_cpu_pin():
    installed = {k: v for k, v in COLAB_GPU.items() if not k.startswith("jax")}

    assert "jax[cpu]==0.10.2" in colab.choose_packages(installed, MINIMUM, PINNED).install


def test_an_old_torch_brings_its_triton():
    choice = colab.choose_packages(dict(COLAB_GPU, torch="2.8.0+cu126"), MINIMUM, PINNED,
                            torch_triton="3.4.0")

    assert {"torch==2.13.0", "triton==3.7.1"} <= set(choice.install)
    assert choice.replaced["triton"] == "3.6.0"


def test_colabs_cpu_runtime_keeps_its_cpu_torch_and_only_adds_triton():
    """Colab's CPU image has torch 2.11.0+cpu and no Triton: the torch stays."""
    cpu = {k: v for k, v in COLAB_GPU.items() if not k.startswith(("jax-", "triton"))}
    cpu["torch"] = "2.11.0+cpu"

    choice = colab.choose_packages(cpu, MINIMUM, PINNED, torch_triton=None)

    assert "torch" in choice.kept and "triton==3.7.1" in choice.install
    assert "jax[cpu]==0.10.2" in choice.install
    assert not any(r.startswith("torch") for r in choice.install)


def test_a_missing_triton_beside_a_kept_cuda_torch_is_the_one_that_torch_declares():
    installed = {k: v for k, v in COLAB_GPU.items() if k != "triton"}

    choice = colab.choose_packages(installed, MINIMUM, PINNED, torch_triton="3.6.0")

    assert "triton==3.6.0" in choice.install and "torch" in choice.kept


def test_the_torch_here_declares_its_triton_or_none():
    declared = colab.torch_declared_triton()
    assert declared is None or Requirement(f"triton=={declared}")


def test_a_tpu_runtime_is_refused_naming_the_fix():
    with pytest.raises(colab.SetUpError, match="TPU runtime.*Change runtime type"):
        colab.choose_packages(dict(COLAB_GPU, libtpu="0.0.21"), MINIMUM, PINNED)


def test_a_bare_interpreter_gets_every_pin():
    choice = colab.choose_packages({}, MINIMUM, PINNED)

    assert len(choice.install) == len(PINNED) and choice.kept == {}


def test_a_dependency_without_a_pin_is_refused_by_name():
    minimum = dict(MINIMUM, scipy=Requirement("scipy>=1.10"))
    with pytest.raises(ValueError, match=r"no pin for \['scipy'\]"):
        colab.choose_packages(COLAB_GPU, minimum, PINNED)


def test_names_compare_as_pip_compares_them():
    assert colab.canonical("nvidia_ml.py") == colab.canonical("NVIDIA-ML-py") == "nvidia-ml-py"


def test_the_newest_gpu_plugin_sets_the_flavour():
    assert colab.jax_gpu_flavour({"jax-cuda12-plugin": "1", "jax-cuda13-plugin": "1"}) == "cuda13"
    assert colab.jax_gpu_flavour({"jax": "0.7.2"}) is None


def test_a_restart_only_when_a_replaced_package_was_imported():
    distributions_of = {"numpy": ["numpy"], "jax": ["jax"], "PIL": ["pillow"]}

    assert colab.imported_among(["jax"], ["numpy", "numpy.linalg"], distributions_of) == []
    assert colab.imported_among(["numpy", "jax"], ["numpy.linalg"], distributions_of) == ["numpy"]
    assert colab.imported_among(["Pillow"], ["PIL.Image"], distributions_of) == ["pillow"]


def test_a_failed_install_names_the_requirement_and_the_address(monkeypatch):
    class Failed:
        returncode, stdout, stderr = 1, "", "ERROR: No matching distribution found for flax"

    monkeypatch.setattr(colab.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(colab.SetUpError, match=r"(?s)flax==0.12.8.*No matching.*"
                       r"cloned from https://example\.org/book.*delete.*DEEPDIVE_REPO"):
        colab.install(["flax==0.12.8"], "https://example.org/book", Path("/content/book"))


def test_the_scale_is_chosen_in_a_fresh_process_and_its_refusal_surfaces(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")
    assert colab.pick_scale(ROOT) == "small"

    monkeypatch.setenv("DEEPDIVE_SCALE", "huge")
    with pytest.raises(colab.SetUpError, match="the scale could not be chosen"):
        colab.pick_scale(ROOT)


def test_a_folder_that_is_not_a_clone_of_the_address_is_refused(tmp_path):
    with pytest.raises(colab.SetUpError, match=r"holds no git clone, not a clone of .*delete"):
        colab.check_clone(tmp_path, "https://example.org/book")


@pytest.fixture
def colab_runtime(monkeypatch, tmp_path):
    """set_up with pip, git, the restart and the scale's process replaced by recorders."""
    monkeypatch.chdir(tmp_path)  # set_up moves into the book's notebooks/
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setenv("DEEPDIVE_SCALE", "")
    done = {"install": [], "restart": 0}
    monkeypatch.setattr(colab, "check_clone", lambda book, repo: None)
    monkeypatch.setattr(colab, "torch_declared_triton", lambda: "3.6.0")
    monkeypatch.setattr(colab, "install", lambda reqs, repo, book: done["install"].append(reqs))
    monkeypatch.setattr(colab, "restart_runtime",
                        lambda: done.__setitem__("restart", done["restart"] + 1))
    monkeypatch.setattr(colab, "pick_scale", lambda book: "medium")
    return done


def test_set_up_restarts_when_pip_replaced_something_already_imported(colab_runtime, monkeypatch):
    versions = iter([COLAB_GPU, dict(COLAB_GPU, jax="0.10.2", jaxlib="0.10.2", flax="0.12.8",
                                     **{"jax-cuda12-plugin": "0.10.2"})])
    monkeypatch.setattr(colab, "installed_versions", lambda: next(versions))
    monkeypatch.setattr(colab.importlib.metadata, "packages_distributions",
                        lambda: {"jax_plugins": ["jax-cuda12-plugin"], "numpy": ["numpy"]})
    monkeypatch.setitem(colab.sys.modules, "jax_plugins", object())  # imported before

    assert colab.set_up(ROOT, "https://example.org/book") == "restarting"
    assert colab_runtime["install"] == [["flax==0.12.8", "jax[cuda12]==0.10.2",
                                         "jaxlib==0.10.2"]]
    assert colab_runtime["restart"] == 1


def test_set_up_without_a_replaced_import_sets_the_scale_and_the_workers_path(colab_runtime,
                                                                            monkeypatch):
    current = dict(COLAB_GPU, jax="0.10.2", jaxlib="0.10.2", flax="0.12.8")
    monkeypatch.setattr(colab, "installed_versions", lambda: current)

    assert colab.set_up(ROOT, "https://example.org/book") == "medium"
    assert colab_runtime == {"install": [], "restart": 0}
    assert colab.os.environ["DEEPDIVE_SCALE"] == "medium"
    assert colab.os.environ["PYTHONPATH"].split(colab.os.pathsep)[0] == str(ROOT / "src")
    assert Path.cwd() == ROOT / "notebooks"
    colab.set_up(ROOT, "https://example.org/book")  # run again: the path is not repeated
    assert colab.os.environ["PYTHONPATH"].count(str(ROOT / "src")) == 1
