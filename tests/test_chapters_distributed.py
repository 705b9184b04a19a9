"""deepdive.chapters.distributed: the distributed chapter's layouts, checks, tables and
sentences, on small fake inputs (one JAX device, tiny arrays, made-up records)."""

import functools
import os
import subprocess
import sys
from types import SimpleNamespace

import jax
import matplotlib
import numpy as np
import pandas as pd
import pytest
from jax.sharding import PartitionSpec as P

from deepdive.chapters import distributed as d
from deepdive.core.timing import Timing
from deepdive.models import torch_distributed as td

matplotlib.use("Agg")

TOLERANCE = dict(rtol=1e-5, atol=1e-6)


# Before JAX starts ------------------------------------------------------------------------

def test_the_device_count_is_set_once_and_other_flags_are_kept():
    assert d.with_device_count("", 8) == "--xla_force_host_platform_device_count=8"
    flags = "--xla_dump_to=/tmp --xla_force_host_platform_device_count=2"
    assert d.with_device_count(flags, 4) == ("--xla_dump_to=/tmp "
                                             "--xla_force_host_platform_device_count=4")


@pytest.mark.parametrize("n", [0, -1, 2.0, True])
def test_a_device_count_must_be_a_positive_integer(n):
    with pytest.raises(ValueError, match="integer >= 1"):
        d.with_device_count("", n)


def test_before_jax_refuses_once_jax_is_imported():
    assert "jax" in sys.modules
    with pytest.raises(RuntimeError, match="before `import jax`"):
        d.before_jax(4)


def test_before_jax_gives_jax_the_devices_and_lets_it_share_the_gpu():
    code = ("from deepdive.chapters import distributed as d; import os; d.before_jax(3); "
            "import jax; print(len(jax.devices('cpu')), "
            "os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])")
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "JAX_PLATFORMS": "cpu"}, check=True)
    assert out.stdout.split() == ["3", "false"]


def test_each_torch_rank_holds_its_rows():
    rows = np.arange(8.0).reshape(4, 2)
    assert d.torch_shards(rows, world=2) == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]


def test_torch_shards_needs_a_world():
    with pytest.raises(ValueError, match="world"):
        d.torch_shards(np.zeros(2), world=0)


# The JAX model and its layouts ------------------------------------------------------------

@pytest.fixture(scope="module")
def model():
    return td.make_model(8, 1)


def test_the_jax_params_are_the_torch_weights_in_x_at_w_layout(model):
    params = d.jax_params(model)
    assert d.first_axes(params) == [(64, 8), (8, 10)]
    named = d.by_torch_name(params, d.first_axes(params))
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(named[name], tensor.numpy())


def test_padding_is_cut_off_by_the_rows_it_had():
    params = [(d.padded(np.ones((3, 2), np.float32), 2), d.padded(np.ones(3, np.float32), 2))]
    assert params[0][0].shape == (4, 2) and params[0][1].shape == (4,)
    assert float(params[0][0][3].sum()) == 0.0
    named = d.by_torch_name(params, [(3, 3)])
    assert named["0.weight"].shape == (2, 3) and named["0.bias"].shape == (3,)


def test_the_jax_loss_and_step_match_the_torch_worker(model):
    import torch
    import torch.nn.functional as F

    x, y = td.global_batch(16, 0)
    params = d.jax_params(model)
    expected = F.cross_entropy(model(x), y).item()
    assert float(d.loss_fn(params, *d.jax_batch(16, 0))) == pytest.approx(expected, rel=1e-5)
    optimizer = torch.optim.SGD(model.parameters(), **td.SGD)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    stepped, _, _ = d.train_step(params, d.sgd().init(params), *d.jax_batch(16, 0),
                                 optimizer=d.sgd())
    for name, tensor in model.state_dict().items():
        np.testing.assert_allclose(d.by_torch_name(stepped, d.first_axes(params))[name],
                                   tensor.numpy(), rtol=1e-5, atol=1e-6)


def test_sgd_without_momentum_is_another_optimizer(model):
    params = d.jax_params(model)
    assert jax.tree.leaves(d.sgd().init(params))  # momentum buffers
    assert not jax.tree.leaves(d.sgd(momentum=False).init(params))


@pytest.fixture(scope="module")
def layouts(model):
    optimizer = d.sgd()
    plain = functools.partial(d.train_step, optimizer=optimizer)
    return d.Layouts(jax.devices("cpu")[:1], d.jax_params(model), optimizer, 16,
                     steps={"sharded": lambda mesh: plain}, sharded=("sharded",))


def test_every_layout_trains_the_same_steps(layouts):
    assert layouts.strategies == ("one device", "data parallel", "sharded")
    reference = layouts.train("one device", 1, 2)
    for strategy in layouts.strategies[1:]:
        params, _, losses = layouts.train(strategy, 1, 2)
        np.testing.assert_allclose(losses, reference[2], rtol=1e-6)
        assert params[0][0].sharding.spec == (P("data") if strategy == "sharded" else P())


def test_the_compiled_step_is_the_trained_one(layouts):
    assert layouts.step("sharded", 1) is layouts.step("sharded", 1)
    assert "HloModule" in layouts.compiled("one device", 4).as_text()


def test_the_timed_variants_check_their_first_loss(layouts):
    first = layouts.train("one device", 1, 1)[2][0]
    variants, checks = layouts.variants([], first_loss=first)  # one device: no mesh to time
    assert list(variants) == ["one device x1"]
    for label, run in variants.items():
        checks[label](run())
    with pytest.raises(AssertionError, match="one device x1"):
        checks["one device x1"](first * 2)


def test_a_sharded_layout_needs_a_step(model):
    with pytest.raises(ValueError, match="no step"):
        d.Layouts(jax.devices("cpu")[:1], d.jax_params(model), d.sgd(), 16, sharded=("FSDP",))


# Checks --------------------------------------------------------------------------------

STRICT = {"float32_matmul_precision": "highest", "cuda.matmul.allow_tf32": False,
          "cudnn.allow_tf32": False, "jax_default_matmul_precision": "highest"}


def test_strict_fp32_means_highest_and_no_tf32():
    assert d.is_strict(STRICT)
    assert not d.is_strict({**STRICT, "cudnn.allow_tf32": True})
    assert not d.is_strict({**STRICT, "jax_default_matmul_precision": None})
    with pytest.raises(ValueError, match="not an fp32 settings record"):
        d.is_strict({"scale": "small"})


def run(value, losses=(1.0, 0.5)):
    return {"losses": list(losses), "params": {"w": np.full(3, value, np.float32)}}


def test_equal_runs_make_rows_and_a_different_one_fails_the_build():
    rows = d.equality_rows("JAX", {("dp", 2): run(1.0)}, run(1.0), 6, TOLERANCE)
    assert rows == [{"framework": "JAX", "strategy": "dp", "devices": 2, "steps": 6,
                     "max |param - 1-device param|": 0.0}]
    with pytest.raises(AssertionError):
        d.equality_rows("JAX", {("dp", 2): run(1.1)}, run(1.0), 6, TOLERANCE)
    with pytest.raises(AssertionError, match="JAX dp x2"):
        d.equality_rows("JAX", {("dp", 2): run(1.0, (1.0, 0.4))}, run(1.0), 6, TOLERANCE)


def test_the_check_must_catch_a_run_without_momentum():
    d.assert_check_catches(run(2.0)["params"], run(1.0)["params"], TOLERANCE, 6)
    with pytest.raises(RuntimeError, match="6 steps cannot tell"):
        d.assert_check_catches(run(1.0)["params"], run(1.0)["params"], TOLERANCE, 6)


def test_the_counts_checked_are_listed_by_framework():
    table = pd.DataFrame({"framework": ["PyTorch", "PyTorch", "JAX", "JAX"],
                          "devices": [4, 2, 2, 2]})
    assert d.check_counts(table) == "PyTorch on 2, 4 devices; JAX on 2 devices"


def test_the_momentum_gaps_read_as_words():
    assert d.gap_one_step(0.0) == "nothing: bit-identical (0)"
    assert d.gap_one_step(3e-8) == "3.0e-08, no more than rounding"
    assert d.gap_over_worst(1e-2, 1e-7) == "about 10⁵ times"
    assert d.gap_over_worst(1e-2, 0.0) == "far above"


# Collectives and memory ----------------------------------------------------------------

COUNTS = {"JAX: one device": {}, "JAX: data parallel": {"all-reduce": 1},
          "JAX: FSDP, shard_map": {"all-gather": 4, "reduce-scatter": 4, "all-reduce": 1},
          "JAX: FSDP, constraints": {"all-gather": 4, "all-reduce": 2},
          "PyTorch: ddp": {"all-reduce": 1, "broadcast": 0},
          "PyTorch: fsdp2": {"all-gather": 4, "reduce-scatter": 2}}


def test_the_collectives_table_keeps_what_ran_and_the_chapters_three():
    table = d.collectives_table(COUNTS)
    assert list(table.columns) == ["all-reduce", "all-gather", "reduce-scatter"]
    assert table.loc["JAX: one device"].sum() == 0
    assert "reduce-scatter" in d.collectives_table({"JAX: dp": {"all-reduce": 1}})
    d.check_fsdp_collectives(table)


def test_fsdp_without_reduce_scatter_or_with_all_to_all_fails():
    with pytest.raises(AssertionError, match="no reduce-scatter"):
        d.check_fsdp_collectives(d.collectives_table({"JAX: FSDP, shard_map": {"all-gather": 1}}))
    with pytest.raises(AssertionError, match="all-to-all"):
        d.check_fsdp_collectives(d.collectives_table(
            {"JAX: FSDP, shard_map": {"reduce-scatter": 1, "all-to-all": 1}}))


def test_collectives_read_as_words_under_their_glue_keys():
    table = d.collectives_table(COUNTS)
    glued = d.collective_glue(table)
    assert glued["coll_jax_fsdp_shard_map"] == "1 all-reduce, 4 all-gather, 4 reduce-scatter"
    assert glued["coll_jax_one_device"] == "none"
    assert "no reduce-scatter" in d.constraints_reading(table.loc["JAX: FSDP, constraints"])
    assert "became FSDP too" in d.constraints_reading(table.loc["JAX: FSDP, shard_map"])


def executable(inputs, temporaries):
    analysis = SimpleNamespace(argument_size_in_bytes=inputs, temp_size_in_bytes=temporaries)
    return SimpleNamespace(memory_analysis=lambda: analysis)


def test_xla_s_plan_per_device_in_kib():
    table = d.peak_table({"one device": executable(2048, 1024), "FSDP": executable(1024, 4096)},
                         4)
    assert table.loc[("one device", 1), "inputs (KiB)"] == 2.0
    assert table.loc[("FSDP", 4), "temporaries (KiB)"] == 4.0
    assert "more than the whole weights" in d.fsdp_peak_reading(4, 1, 4, 3)
    assert "did not keep them all" in d.fsdp_peak_reading(4, 1, 2, 3)


def test_bytes_are_counted_per_device():
    array = jax.device_put(np.ones(4, np.float32), jax.devices("cpu")[0])
    assert d.bytes_by_device({"a": array, "b": [array]}) == {jax.devices("cpu")[0]: 32}


def ranks(*held, storage=None):
    return [{"param_bytes": h, "optimizer_bytes": h, "param_storage_bytes": storage or h,
             "local_shapes": {"2.weight": [h // 8, 4], "2.bias": [h // 8]}} for h in held]


@pytest.fixture
def memory():
    jax_held = {("FSDP, shard_map", 2): {0: 1024, 1: 1024}, ("one device", 1): {0: 2048}}
    torch_runs = {("single", 1): ranks(1024), ("fsdp2", 2): ranks(512, 512),
                  ("fsdp2", 4): ranks(320, 256, 256, 192)}
    return d.memory_table(jax_held, torch_runs)


def test_the_memory_table_sorts_and_keeps_both_extremes(memory):
    assert list(memory["framework"]) == ["JAX", "JAX", "PyTorch", "PyTorch", "PyTorch"]
    assert list(memory["devices"]) == [1, 2, 1, 2, 4]
    row = memory.iloc[-1]
    assert (row["largest (KiB)"], row["smallest (KiB)"]) == (640 / 1024, 384 / 1024)


def test_the_fullest_share_is_read_at_the_asked_or_largest_count(memory):
    assert d.fullest_share(memory, "JAX", "FSDP, shard_map") == (2, 0.5)
    assert d.fullest_share(memory, "PyTorch", "fsdp2") == (4, 320 / 1024)
    assert d.fullest_share(memory, "PyTorch", "fsdp2", 2) == (2, 0.5)
    with pytest.raises(KeyError, match="no memory row"):
        d.fullest_share(memory, "JAX", "ddp")
    assert d.both_ran(memory) == 2
    with pytest.raises(KeyError, match="both frameworks"):
        d.both_ran(memory[memory["framework"] == "JAX"])


def test_the_output_layer_split_is_tabled_per_device():
    w = jax.device_put(np.ones((4, 10), np.float32), jax.devices("cpu")[0])
    b = jax.device_put(np.ones(12, np.float32), jax.devices("cpu")[0])
    table = d.shard_table(ranks(32, 16), {"2.weight": [10, 4], "2.bias": [10]}, (w, b),
                          (4, 10), "2")
    assert list(table["array"]) == ["2.weight (10, 4)", "2.bias (10,)", "w (4, 10)",
                                    "b (10,), padded to (12,)"]
    assert table["each device holds"].iat[0] == "(4, 4), (2, 4)"


def test_the_output_split_reads_even_padded_or_per_buffer():
    assert "evenly" in d.output_split_reading(2, 10, 8, [5, 5], 1, 1, [4, 4], [4, 4], 10)
    padded = d.output_split_reading(4, 10, 8, [3, 3, 3, 1], 2.0, 1.0, [4096] * 4,
                                    [3000, 3000, 3000, 1000], 11)
    assert "every rank allocates 4.0 KiB" in padded and "1 padding entry included" in padded
    per_buffer = d.output_split_reading(4, 10, 8, [3, 3, 3, 1], 2.0, 1.0, [3072, 1024] * 2,
                                        [3072, 1024] * 2, 12)
    assert "3.0, 1.0, 3.0, 1.0 KiB by rank" in per_buffer and "2 padding entries" in per_buffer


# Timings and claims --------------------------------------------------------------------

def timing(label, seconds):
    return Timing(label, np.full(5, seconds), 1, seconds)


class Recorder:
    def __init__(self):
        self.calls = []

    def compare(self, claim_id, question, baseline, candidate, headline=False):
        self.calls.append((claim_id, baseline.label, candidate.label, headline))

    def add(self, *row):
        self.calls.append(("add", *row))

    def add_timing(self, *row):
        self.calls.append(("add_timing", *row))


def timings(counts):
    found = {"one device x1": timing("one device x1", 1.0)}
    for n in counts:
        for s in ("data parallel", "data parallel, shard_map", "FSDP, shard_map",
                  "FSDP, constraints"):
            found[f"{s} x{n}"] = timing(f"{s} x{n}", 1.0 / n)
    return found


def test_the_claims_keep_their_ids_and_headlines():
    claims = Recorder()
    d.claim_layouts(claims, timings([2, 4, 8]), [2, 4, 8], "scope")
    ids = {c[0]: c for c in claims.calls}
    assert len(ids) == 12
    assert ids["dp_x2_vs_one"][1:] == ("one device x1", "data parallel x2", True)
    assert ids["dp_x4_vs_one"][3] is False and ids["dp_x8_vs_one"][3] is True
    assert ids["fsdp_x8_vs_dp"][3] and not ids["fsdp_x4_vs_dp"][3]
    assert ids["fsdp_constraints_x8_vs_shard_map"][1:3] == ("FSDP, shard_map x8",
                                                            "FSDP, constraints x8")
    assert ids["dp_shard_map_x2_vs_dp"][3] is False


def test_the_step_time_table_marks_what_is_a_claim():
    torch_runs = {("ddp", 2): [{"step_s_samples": [0.002, 0.002], "first_call_s": 0.1}]}
    table = d.step_time_table({"one device x1": timing("one device x1", 0.001)}, torch_runs)
    assert list(table["claim"]) == ["yes", "no: timed in the worker"]
    assert list(table["step median (ms)"]) == [1.0, 2.0]
    assert list(table["devices"]) == [1, 2]


def glued(verdict):
    found = {"claims_count": 12, "claims_withheld": 1, "claims_noisy": 2,
             "fsdp_x4_vs_dp_verdict": verdict}
    for claim in ("dp_x2_vs_one", "dp_x4_vs_one", "fsdp_x4_vs_dp",
                  "fsdp_constraints_x4_vs_shard_map", "dp_shard_map_x4_vs_dp"):
        found[claim], found[f"{claim}_ratio"] = "faster than", "1.50x [1.40, 1.60]"
    return found


@pytest.mark.parametrize("verdict", sorted(d.FSDP_READING))
def test_the_step_time_reading_reads_each_fsdp_verdict(verdict):
    text = d.step_time_reading(glued(verdict), [2, 4])
    assert d.FSDP_READING[verdict] in text
    assert "on 2 devices was faster than one device (1.50x [1.40, 1.60])" in text
    assert "XLA's (1.50x" in text


def test_without_claims_the_readings_say_what_was_not_timed():
    assert d.step_time_reading(None, [2]).startswith("No step time was measured")
    assert d.found_reading(None, None).startswith("What needs real devices")
    found = d.found_reading(glued("tie"), {"timing_count": 9, "noisy_count": 3})
    assert found.startswith("Of 12 claims, 1 were withheld and 2") and "of 9 timings, 3" in found


def test_the_scope_status_and_caption_name_the_devices():
    simulated = d.scope_sentence("MLP", "small", True, 8, "cpus", 2)
    assert "8 simulated CPU host devices" in simulated and "gloo" in simulated
    assert "NCCL" in d.scope_sentence("MLP", "full", False, 4, "H100 GPUs", 32)
    assert d.timing_status(True, 8, "cpus", 2).startswith("Nothing is timed in this build: its 8")
    assert d.timing_status(False, 4, "H100 GPUs", 32) == ("This build ran on 4 H100 GPUs: the "
                                                          "timings follow.")
    assert "no verdicts" in d.summary_caption(True)
    assert "95% interval" in d.summary_caption(False)


def test_a_simulated_build_tables_and_boxes_what_it_proved(memory):
    equality = pd.DataFrame([{"framework": "JAX", "strategy": "dp", "devices": n,
                              "max |param - 1-device param|": 1e-7 * n} for n in (2, 4)])
    collectives = d.collectives_table(COUNTS)
    table = d.proofs_table(equality, 6, 2e-7, 1e-2, collectives, 4,
                           {"JAX": ("FSDP, shard_map", 2, 0.5)}, (10.0, 40.0, 30.0))
    assert table.loc["JAX dp, 2, 4 devices: the same 6 steps as one device", "result"] == (
        "parameters within the fp32 tolerance; largest difference 4.0e-07")
    assert "collectives in one step, JAX: one device on 4 devices" not in table.index
    assert table.loc["state on the fullest device, JAX FSDP, shard_map on 2 devices",
                     "result"] == "0.500 of one device's (1/2 = 0.500)"
    box = d.claims_found_simulated(8, 2, "JAX on 2 devices", 6, 4e-7, 1e-2, collectives, 4,
                                   {"JAX": (2, 0.5), "PyTorch": (2, 0.5)})
    assert box.startswith("This build made no timing claims: its 8 devices")
    assert "2 all-reduce, 4 all-gather under FSDP2" not in box
    assert "4 all-gather, 2 reduce-scatter in one step under FSDP2" in box


def test_the_records_are_the_ones_the_choosing_chapter_reads(memory):
    records = Recorder()
    table = d.step_time_table({"one device x1": timing("one device x1", 0.001)}, {})
    equality = pd.DataFrame([{"framework": "PyTorch", "strategy": "ddp", "devices": 2,
                              "max |param - 1-device param|": 0.0}])
    d.record(records, "MLP", 100, table, {"one device x1": timing("one device x1", 0.001)},
             memory, equality, d.collectives_table({"JAX: dp": {"all-reduce": 1}}), 4)
    kinds = [c[1] if c[0] == "add" else c[0] for c in records.calls]
    assert kinds == ["model", "step_time", "add_timing", *["memory_per_device"] * 5,
                     "equality", "collectives", "collectives", "collectives"]
    assert records.calls[3][1:5] == ("memory_per_device", "jax", "one device", 1)
    records = Recorder()
    d.record(records, "MLP", 100, None, {}, memory.iloc[:0], equality.iloc[:0],
             d.collectives_table({"JAX: dp": {}}).iloc[:0], 4)
    assert records.calls == [("add", "model", "both", "MLP", "-", "parameters", 100, "count")]


# Figures -------------------------------------------------------------------------------

def test_the_figures_draw(memory):
    peaks = d.peak_table({"one device": executable(2048, 1024), "FSDP": executable(1024, 4096)},
                         2)
    assert d.plot_memory_plan(peaks, 3.0, "caption").axes
    assert d.plot_memory(memory, [2, 4], "caption").axes
    table = d.step_time_table(timings([2]), {("single", 1): [{"step_s_samples": [0.002],
                                                               "first_call_s": 0.1}]})
    table["IQR (ms)"] = 0.1
    assert len(d.plot_step_times(table, [2], "title", "caption").axes) == 2
