"""Colab's first cell: what it keeps, installs and restarts for, decided without Colab."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from deepdive.book import colab

ROOT = Path(__file__).resolve().parents[1]
MINIMUM = colab.minimums(ROOT)
PINNED = colab.pins(ROOT)

# Colab's Python 3.13 images (googlecolab/backend-info at a724079, 2026-08-19:
# pip-freeze.gpu.txt and pip-freeze.txt): the runtime's packages as it ships them.
COLAB_GPU = {"torch": "2.11.0+cu128", "triton": "3.6.0", "jax": "0.7.2", "jaxlib": "0.7.2",
             "jax-cuda12-plugin": "0.7.2", "jax-cuda12-pjrt": "0.7.2", "flax": "0.11.2",
             "optax": "0.2.8", "transformers": "5.15.0", "numpy": "2.1.3", "pandas": "2.2.3",
             "matplotlib": "3.10.0", "psutil": "5.9.5", "nvidia-ml-py": "13.610.43",
             "tqdm": "4.67.3", "ipykernel": "6.17.1"}
# Its CPU image: a CPU torch, and no Triton, JAX GPU plugin or nvidia-ml-py.
COLAB_CPU = dict({k: v for k, v in COLAB_GPU.items()
                  if not k.startswith(("triton", "jax-", "nvidia"))}, torch="2.11.0+cpu")
# The JAX family and NumPy at the book's pins, as in a runtime where the cell has already run.
AT_PINS = {name: next(iter(PINNED[name].specifier)).version
           for name in ("jax", "jaxlib", "flax", "numpy")}
# Invented, not from the freeze: a JAX dependency older than the new JAX accepts, which pip
# moves without being asked (JAX 0.12 requires ml_dtypes>=0.5.0).
OLD_ML_DTYPES = {"ml-dtypes": "0.4.1"}
# pip 24's words when an install leaves a preinstalled package without what it declares (the
# cell installs NumPy 2.5.5, as JAX 0.12 needs 2.2; Colab's numba 0.61.2 declares numpy<2.3).
NUMBA_CONFLICT_PREAMBLE = ("ERROR: pip's dependency resolver does not currently take into "
                           "account all the packages that are installed. This behaviour is the "
                           "source of the following dependency conflicts.")
NUMBA_CONFLICT = ("numba 0.61.2 requires numpy<2.3,>=1.24, but you have numpy 2.5.5 which is "
                  "incompatible.")
REPO = "https://example.org/book"
# What the cell installs on Colab's images, at the book's pins.
JAX_FAMILY = ["flax==0.12.12", "jax[{}]==0.12.0.1", "jaxlib==0.12.0.1", "numpy==2.5.5"]
GPU_INSTALL = [p.format("cuda12") for p in JAX_FAMILY]
CPU_INSTALL = [p.format("cpu") for p in JAX_FAMILY] + ["nvidia-ml-py==13.615.71", "triton==3.9.0"]
REPLACED = {"flax": "0.11.2", "jax": "0.7.2", "jaxlib": "0.7.2", "numpy": "2.1.3"}


def test_every_dependency_has_a_pin_and_every_pin_meets_its_minimum():
    assert set(MINIMUM) == set(PINNED)
    for name, pin in PINNED.items():
        (version,) = [s.version for s in pin.specifier]
        assert MINIMUM[name].specifier.contains(version), (name, version)


def test_colab_keeps_its_torch_and_replaces_the_jax_family_and_numpy_keeping_the_gpu_plugin():
    choice = colab.choose_packages(COLAB_GPU, MINIMUM, PINNED)

    # Colab's JAX 0.7.2 and Flax 0.11.2 are older than the book's minimums, and its NumPy
    # 2.1.3 is older than the 2.2 that JAX 0.12 requires.
    assert choice.install == GPU_INSTALL
    assert choice.replaced == REPLACED
    assert choice.kept["torch"] == "2.11.0+cu128"  # a local CUDA label still compares
    assert set(choice.kept) == set(MINIMUM) - {"flax", "jax", "jaxlib", "numpy"}
    summary = choice.summary(MINIMUM)
    assert f"Installing: {' '.join(GPU_INSTALL)}." in summary
    replacing = ", ".join(f"{name} {version}" for name, version in REPLACED.items())
    assert f"Replacing: {replacing} (" in summary


def test_a_numpy_that_jax_accepts_is_kept_below_the_pin():
    # 2.2.6 meets JAX 0.12's minimum and numba 0.61.2's numpy<2.3 alike.
    installed = dict(COLAB_GPU, **AT_PINS) | {"numpy": "2.2.6"}

    choice = colab.choose_packages(installed, MINIMUM, PINNED)

    assert choice.install == [] and choice.kept["numpy"] == "2.2.6"


def test_a_colab_with_a_new_enough_jax_and_numpy_installs_nothing():
    current = dict(COLAB_GPU, **AT_PINS)

    choice = colab.choose_packages(current, MINIMUM, PINNED)

    assert choice.install == [] and choice.replaced == {}


def test_a_missing_package_gets_its_pin_and_nothing_else_moves():
    installed = {k: v for k, v in COLAB_GPU.items() if k != "optax"}
    installed.update(AT_PINS)

    choice = colab.choose_packages(installed, MINIMUM, PINNED)

    assert choice.install == ["optax==0.2.8"]
    assert choice.replaced == {}


def test_a_jax_below_the_minimum_moves_with_jaxlib_and_keeps_colabs_gpu_plugin_flavour():
    # The previous pin: its jit(vmap(matvec, reduce)) is wrong on the CPU (jax-ml/jax#39103).
    installed = dict(COLAB_GPU, **AT_PINS) | {"jax": "0.10.2", "jaxlib": "0.10.2"}

    choice = colab.choose_packages(installed, MINIMUM, PINNED)

    assert choice.install == ["jax[cuda12]==0.12.0.1", "jaxlib==0.12.0.1"]
    assert choice.replaced == {"jax": "0.10.2", "jaxlib": "0.10.2"}
    assert {"torch", "flax", "numpy"} <= set(choice.kept)


def test_without_a_gpu_plugin_a_new_jax_is_the_cpu_pin():
    installed = {k: v for k, v in COLAB_GPU.items() if not k.startswith("jax")}

    assert "jax[cpu]==0.12.0.1" in colab.choose_packages(installed, MINIMUM, PINNED).install


def test_an_old_torch_brings_its_triton():
    choice = colab.choose_packages(dict(COLAB_GPU, torch="2.8.0+cu126"), MINIMUM, PINNED,
                            torch_triton="3.4.0")

    assert {"torch==2.15.0", "triton==3.9.0"} <= set(choice.install)
    assert choice.replaced["triton"] == "3.6.0"


def test_colabs_cpu_runtime_keeps_its_cpu_torch_and_adds_triton_and_the_jax_family():
    """Colab's CPU image has torch 2.11.0+cpu, no Triton and no nvidia-ml-py: the torch stays."""
    choice = colab.choose_packages(COLAB_CPU, MINIMUM, PINNED, torch_triton=None)

    assert choice.install == CPU_INSTALL
    assert choice.kept["torch"] == COLAB_CPU["torch"]
    assert choice.replaced == REPLACED


def test_a_missing_triton_beside_a_kept_cuda_torch_is_the_one_that_torch_declares():
    installed = {k: v for k, v in COLAB_GPU.items() if k != "triton"}

    choice = colab.choose_packages(installed, MINIMUM, PINNED, torch_triton="3.6.0")

    assert "triton==3.6.0" in choice.install and "torch" in choice.kept


def test_the_torch_here_declares_its_triton_or_none():
    declared = colab.torch_declared_triton()
    assert declared is None or Requirement(f"triton=={declared}")


def test_a_python_older_than_requires_python_is_refused_naming_both():
    assert str(colab.required_python(ROOT)) == ">=3.12"
    with pytest.raises(colab.SetUpError, match=r"runs Python 3\.11\.13, and the book needs "
                       r"Python >=3\.12 .*latest runtime version.*Change runtime type"):
        colab.check_python(ROOT, "3.11.13")  # Colab's 2025.07 runtime version


def test_colabs_current_python_and_its_past_runtime_versions_3_12_are_accepted():
    for version in ("3.13.15", "3.12.13"):  # the current image; the 2026.07 runtime version
        colab.check_python(ROOT, version)
    colab.check_python(ROOT)  # this interpreter: the book's own environment


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
    spellings = ("nvidia_ml.py", "NVIDIA-ML-py", "nvidia-ml-py")
    assert {colab.canonical(name) for name in spellings} == {spellings[-1]}


def test_the_newest_gpu_plugin_sets_the_flavour():
    plugins = {f"jax-cuda{n}-plugin": "1" for n in (12, 13)}
    assert colab.jax_gpu_flavour(plugins) == "cuda13"
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
    with pytest.raises(colab.SetUpError, match=r"(?s)flax==0.12.12.*No matching.*"
                       r"cloned from https://example\.org/book.*delete.*DEEPDIVE_REPO"):
        colab.install(["flax==0.12.12"], REPO, Path("/content/book"))


def test_an_install_returns_pips_conflict_notes(monkeypatch):
    class Done:
        returncode, stdout, stderr = 0, "", f"{NUMBA_CONFLICT_PREAMBLE}\n{NUMBA_CONFLICT}\n"

    monkeypatch.setattr(colab.subprocess, "run", lambda *a, **k: Done())
    monkeypatch.setattr(colab.importlib, "invalidate_caches", lambda: None)
    notes = colab.install(["numpy==2.5.5"], REPO, Path("/content/book"))
    assert notes == [NUMBA_CONFLICT]


def test_what_pip_moved_beyond_the_request_is_named_with_both_versions():
    before = COLAB_GPU | OLD_ML_DTYPES
    after = before | AT_PINS | {"jax-cuda12-plugin": "0.12.0.1", "jax-cuda12-pjrt": "0.12.0.1",
                                "ml-dtypes": "0.6.0"}
    requested = colab.choose_packages(before, MINIMUM, PINNED).install

    # NumPy moved too, but the cell asked for it.
    moved = {name: (before[name], after[name])
             for name in ("jax-cuda12-pjrt", "jax-cuda12-plugin", "ml-dtypes")}
    assert colab.moved_beyond(requested, before, after) == moved
    assert colab.moved_beyond(["Flax==1"], {"flax": "0"}, {"ml_dtypes": "1"}) == {
        "ml_dtypes": (None, "1")}


def test_the_scale_is_chosen_in_a_fresh_process_and_its_refusal_surfaces(monkeypatch):
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")
    assert colab.pick_scale(ROOT) == "small"

    monkeypatch.setenv("DEEPDIVE_SCALE", "huge")
    with pytest.raises(colab.SetUpError, match="the scale could not be chosen"):
        colab.pick_scale(ROOT)


def test_a_folder_that_is_not_a_clone_of_the_address_is_refused(tmp_path):
    with pytest.raises(colab.SetUpError, match=r"holds no git clone, not a clone of .*delete"):
        colab.check_clone(tmp_path, REPO)


@pytest.fixture
def colab_runtime(monkeypatch, tmp_path):
    """set_up with pip, git, the restart and the scale's process replaced by recorders."""
    monkeypatch.chdir(tmp_path)  # set_up moves into the book's notebooks/
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setenv("DEEPDIVE_SCALE", "")
    monkeypatch.setattr(colab.platform, "python_version", lambda: "3.13.15")
    done = {"install": [], "restart": 0}
    monkeypatch.setattr(colab, "check_clone", lambda book, repo: None)
    monkeypatch.setattr(colab, "torch_declared_triton", lambda: "3.6.0")

    def install(requirements, repo, book):
        done["install"].append(requirements)
        return [NUMBA_CONFLICT]

    monkeypatch.setattr(colab, "install", install)
    monkeypatch.setattr(colab, "restart_runtime",
                        lambda: done.__setitem__("restart", done["restart"] + 1))
    monkeypatch.setattr(colab, "pick_scale", lambda book: "medium")
    return done


def test_set_up_restarts_when_pip_replaced_something_already_imported(colab_runtime, monkeypatch,
                                                                     capsys):
    before = COLAB_GPU | OLD_ML_DTYPES
    versions = iter([before, before | AT_PINS | {"jax-cuda12-plugin": "0.12.0.1",
                                                 "ml-dtypes": "0.6.0"}])
    monkeypatch.setattr(colab, "installed_versions", lambda: next(versions))
    monkeypatch.setattr(colab.importlib.metadata, "packages_distributions",
                        lambda: {"jax_plugins": ["jax-cuda12-plugin"], "numpy": ["numpy"]})
    # Both imported before the cell ran (this process's own NumPy kept where it has one).
    monkeypatch.setitem(colab.sys.modules, "jax_plugins", object())
    monkeypatch.setitem(colab.sys.modules, "numpy", colab.sys.modules.get("numpy", object()))

    outcome = colab.set_up(ROOT, REPO)
    assert outcome == "restarting"
    assert colab_runtime["install"] == [GPU_INSTALL]
    assert colab_runtime["restart"] == 1
    printed = capsys.readouterr().out
    for name, old in REPLACED.items():
        assert f"{name} {old}" in printed
    assert "jax-cuda12-plugin 0.7.2 -> 0.12.0.1" in printed  # what pip moved unasked
    assert "ml-dtypes 0.4.1 -> 0.6.0" in printed
    assert NUMBA_CONFLICT in printed
    restarting = printed[printed.index("Restarting"):]
    assert "jax-cuda12-plugin, numpy" in restarting.splitlines()[0]


def test_set_up_refuses_an_old_python_before_installing_anything(colab_runtime, monkeypatch):
    monkeypatch.setattr(colab.platform, "python_version", lambda: "3.11.13")
    monkeypatch.setattr(colab, "installed_versions", lambda: COLAB_GPU)

    with pytest.raises(colab.SetUpError, match=r"Python 3\.11\.13.*needs Python >=3\.12"):
        colab.set_up(ROOT, REPO)
    assert colab_runtime == {"install": [], "restart": 0}


def test_set_up_without_a_replaced_import_sets_the_scale_and_the_workers_path(colab_runtime,
                                                                            monkeypatch):
    current = dict(COLAB_GPU, **AT_PINS)
    monkeypatch.setattr(colab, "installed_versions", lambda: current)

    scale = colab.set_up(ROOT, REPO)
    assert scale == "medium"
    assert colab_runtime == {"install": [], "restart": 0}
    assert colab.os.environ["DEEPDIVE_SCALE"] == "medium"
    assert colab.os.environ["PYTHONPATH"].split(colab.os.pathsep)[0] == str(ROOT / "src")
    assert Path.cwd() == ROOT / "notebooks"
    colab.set_up(ROOT, REPO)  # run again: the path is not repeated
    assert colab.os.environ["PYTHONPATH"].count(str(ROOT / "src")) == 1
