# The only entry points: make book | make test | make lab | make clean
# Everything runs in .venv, created from the exact pins in requirements.txt. `make test` also
# builds .venv-runtime from requirements-runtime.txt alone (what a reader's Jupyter needs),
# to run chapters the way Colab and a plain Jupyter do. `make book` builds .venv-xla from
# requirements-xla.txt (torch 2.9 + torch_xla, about 8 GB) for the PyTorch/XLA chapter,
# unless DEEPDIVE_SKIP_XLA=1.

# Python 3.13, Colab's: the first interpreter found that runs (a pyenv shim for a version
# that is installed but not selected does not run, so pyenv's own folders are tried too).
PYTHON_CANDIDATES := python3.13 $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13)
PYTHON ?= $(firstword $(foreach p,$(PYTHON_CANDIDATES),$(shell $(p) -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && echo $(p))))
ifeq ($(strip $(PYTHON)),)
$(error no Python 3.13 found: install it (e.g. pyenv install 3.13) or pass PYTHON=/path/to/python3.13)
endif
VENV := .venv
BIN := $(VENV)/bin
# Marks an environment that matches requirements.txt and pyproject.toml; rebuilt when they change.
STAMP := $(VENV)/.deepdive-installed
RUNTIME_VENV := .venv-runtime
RUNTIME_STAMP := $(RUNTIME_VENV)/.deepdive-installed
XLA_VENV := .venv-xla
XLA_STAMP := $(XLA_VENV)/.deepdive-installed
# DEEPDIVE_SKIP_XLA=1 (make's variable or the shell's) skips the side environment; the
# PyTorch/XLA chapter then says it did not run and how to enable it. Under CI it fails.
# DEEPDIVE_XLA_PYTHON names another interpreter with the same pins: nothing is built then.
DEEPDIVE_SKIP_XLA ?= 0
export DEEPDIVE_SKIP_XLA
XLA_ENV_IF_WANTED := $(if $(filter 1,$(DEEPDIVE_SKIP_XLA))$(DEEPDIVE_XLA_PYTHON),,$(XLA_STAMP))
# A kernel needs ipykernel, which Colab and every Jupyter have: the build's pin of it.
IPYKERNEL := $(shell grep '^ipykernel==' requirements.txt)
# Inductor's compiled kernels live with the build, so `make clean` clears them too.
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/_build/inductor-cache
# Reproducible hashing inside the build.
export PYTHONHASHSEED := 0
# A build's chapter 6 reads that build's own evidence, whatever a reader's shell exports.
unexport DEEPDIVE_EVIDENCE
# Names this build (UTC start and commit); each chapter stamps its results with it, so the
# Reproduce page can say which build measured what (deepdive.book.provenance).
ifndef DEEPDIVE_BUILD_ID
DEEPDIVE_BUILD_ID := $(shell date -u +%Y%m%dT%H%M%SZ)-$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo no-git)
endif
export DEEPDIVE_BUILD_ID

# A virtual environment on another Python than $(PYTHON) (one made before the move to 3.13)
# is made anew.
PY_MINOR := import sys; print(sys.version_info[:2])
VENV_FOR_PYTHON = sh -c 'test "$$("$$1/bin/python" -c "$(PY_MINOR)" 2>/dev/null)" = "$$($(PYTHON) -c "$(PY_MINOR)")" || $(PYTHON) -m venv --clear "$$1"' venv

.PHONY: book test lab clean env runtime-env xla-env bundle releases

env: $(STAMP)
runtime-env: $(RUNTIME_STAMP)
xla-env: $(XLA_STAMP)

$(STAMP): requirements.txt requirements-runtime.txt pyproject.toml
	@date -u +"[make %T UTC] installing $(VENV)"
	$(VENV_FOR_PYTHON) $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $(STAMP)

$(RUNTIME_STAMP): requirements-runtime.txt pyproject.toml requirements.txt
	@date -u +"[make %T UTC] installing $(RUNTIME_VENV)"
	$(VENV_FOR_PYTHON) $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RUNTIME_VENV)/bin/python -m pip install --quiet -r requirements-runtime.txt "$(IPYKERNEL)"
	touch $(RUNTIME_STAMP)

# Rebuilt when requirements-xla.txt changes; pip moves what differs to its pin.
$(XLA_STAMP): requirements-xla.txt
	@date -u +"[make %T UTC] installing $(XLA_VENV)"
	$(VENV_FOR_PYTHON) $(XLA_VENV)
	$(XLA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(XLA_VENV)/bin/python -m pip install --quiet -r requirements-xla.txt
	touch $(XLA_STAMP)

# DEEPDIVE_BUILD=1 keeps progress bars out of the executed pages. The build first measures,
# once, what every page reads: its tie band and the CPU's peak (deepdive.book.calibration).
book: $(STAMP) $(XLA_ENV_IF_WANTED)
	@date -u +"[make %T UTC] environments ready; calibrating, then building the book"
	DEEPDIVE_BUILD=1 $(BIN)/python -m deepdive.book.calibration
	DEEPDIVE_BUILD=1 $(BIN)/jupyter-book build . -W --keep-going

test: book $(RUNTIME_STAMP)
	@date -u +"[make %T UTC] book built; checking and testing"
	$(BIN)/ruff check src tests notebooks
	$(BIN)/python -m pytest

# Jupyter refuses to run as root unless told; containers often run as root.
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

clean:
	rm -rf _build .pytest_cache .ruff_cache

# Writes this build's evidence as a dated bundle into book/data/builds/ (README: contribute a bundle).
bundle: $(STAMP)
	$(BIN)/python -m deepdive.book.bundles write

# Every jax and torch release since the old pins, each in a throwaway environment, one
# bundle each into book/data/releases (minutes per release; not part of book or test).
# RELEASES picks some: make releases RELEASES="jax==0.11.1 torch"
releases: $(STAMP)
	$(BIN)/python -m deepdive.releases.run $(RELEASES)
