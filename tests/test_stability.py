"""deepdive.chapters.stability: the worker behind the methodology page's CPU set-up probes."""

import json
import subprocess
import sys

import pytest

from deepdive.chapters import stability


@pytest.mark.parametrize(("cores", "threads", "block_ms"), [
    (0, 1, 10), (1, 2, 10), (1, 1, 0), (10_000, 1, 10)])
def test_a_probe_refuses_a_set_up_that_cannot_run(cores, threads, block_ms):
    with pytest.raises(ValueError, match="a probe needs 1 <= threads <= cores"):
        stability.run(cores, threads, block_ms)


def test_one_probe_times_every_workload_in_a_fresh_process_on_one_core():
    done = subprocess.run([sys.executable, "-m", "deepdive.chapters.stability", "1", "1", "1"],
                          capture_output=True, text=True, timeout=300, check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    assert {w.split()[0] for w in found} == {"torch", "jax.jit"} and len(found) == 8
    for reading in found.values():
        assert reading["median_s"] > 0 and reading["iqr_fraction"] >= 0
        # at least 15 blocks of about the 1 ms asked for (less the harness's own check)
        assert reading["timed_s"] >= 15 * 0.0005
    # the tiny op's call is far shorter than the 256x256 matmul's, in either framework
    for framework in ("torch", "jax.jit"):
        assert found[f"{framework} tiny op"]["median_s"] < \
            found[f"{framework} 256x256 matmul"]["median_s"]
