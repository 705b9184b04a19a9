"""deepdive.chapters.regimes: the worker behind the methodology page's allocator probe. Its
page-fault count, in fresh processes started under each glibc regime as the page starts
them (`deepdive.core.allocator.child_env`)."""

import subprocess
import sys

import pytest

from deepdive.core import allocator

# A call that allocates and touches 64 MiB: past glibc's largest default mmap threshold.
FRESH_ARRAY = """
import numpy as np
from deepdive.chapters import regimes
print(regimes.faults_per_call(lambda: np.ones(2**24, dtype=np.float32)))
"""


def faults_under(regime: str) -> float:
    done = subprocess.run([sys.executable, "-c", FRESH_ARRAY], env=allocator.child_env(regime),
                          capture_output=True, text=True, timeout=120, check=True)
    return float(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not allocator.is_glibc() or allocator.preloaded() is not None,
                    reason="glibc's malloc settings apply only where glibc allocates")
def test_a_steady_call_faults_in_fresh_pages_only_under_glibcs_defaults():
    # at least one fault per 2 MiB: numpy asks for transparent huge pages for large arrays
    assert faults_under(allocator.DEFAULTS) >= 2**26 // 2**21
    assert faults_under(allocator.KEPT) < 1
