"""deepdive.core.allocator: the regime every page times under, put in force and observed."""

import json
import subprocess
import sys

import pytest

from deepdive.core import allocator

PROBE = ("import json; from deepdive.core import allocator; "
         "print(json.dumps([allocator.describe(), allocator.serves_from_heap()]))")


def run(code, env):
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not allocator.is_glibc(), reason="glibc only")
def test_a_fresh_process_runs_glibcs_defaults_and_maps_large_blocks_afresh():
    described, from_heap = run(PROBE, allocator.child_env(allocator.DEFAULTS))

    assert described == allocator.DEFAULTS
    assert not from_heap  # 48 MiB is past glibc's largest default mmap threshold


@pytest.mark.skipif(not allocator.is_glibc(), reason="glibc only")
def test_keeping_freed_memory_in_a_running_process_serves_large_blocks_from_the_heap():
    code = ("import json; from deepdive.core import allocator; "
            "before = allocator.serves_from_heap(); said = allocator.keep_freed_memory(); "
            "print(json.dumps([before, said, allocator.serves_from_heap()]))")
    before, said, after = run(code, allocator.child_env(allocator.DEFAULTS))

    assert (before, after) == (False, True)
    threshold = "mmap threshold 2 GiB"
    assert said.startswith(allocator.KEPT) and threshold in said


@pytest.mark.skipif(not allocator.is_glibc(), reason="glibc only")
def test_a_child_of_a_page_inherits_the_regime_from_its_start():
    described, from_heap = run(PROBE, allocator.child_env(allocator.KEPT))

    assert described.startswith(allocator.KEPT) and from_heap


def test_child_env_sets_or_clears_exactly_the_regimes_variables():
    base = {"PATH": "/bin", "MALLOC_TRIM_THRESHOLD_": "1"}

    kept = allocator.child_env(allocator.KEPT, base)
    defaults = allocator.child_env(allocator.DEFAULTS, base)

    assert {k: kept[k] for k in allocator.KEEP_ENV} == allocator.KEEP_ENV
    assert not set(allocator.KEEP_ENV) & set(defaults) and defaults["PATH"] == "/bin"
    with pytest.raises(ValueError, match="regime must be"):
        allocator.child_env("jemalloc", base)


def test_a_preloaded_allocator_is_named_and_glibcs_settings_said_not_to_apply(monkeypatch):
    monkeypatch.setattr(allocator, "preloaded", lambda: "tcmalloc")

    assert allocator.describe() == f"tcmalloc {allocator.PRELOADED}"
