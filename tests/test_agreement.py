"""deepdive.book.agreement and deepdive.book.machines: a claim's verdict on every machine that
ran this build's pins, read from small fixture bundles in tmp_path; bundles of other pins,
scales or device kinds are ignored; machines are named by their CPU's kind."""

import subprocess
import sys

import pandas as pd
import pytest
from test_bundles import GPU, build_json, claim, hand_bundle

from deepdive.book import agreement, bundles, claims
from deepdive.book.machines import cpu_kind, machine

XEON = "Intel(R) Xeon(R) Processor (1 of 2 cores)"
EPYC = "AMD EPYC (1 of 2 cores)"
PINS = ("2.15.0", "0.12.0.1")
VERSIONS = {"torch": "2.15.0", "jax": "0.12.0.1"}
# ratio, low, high against a band of ±5%
FASTER, SLOWER, TIE, OPEN = (1.5, 1.4, 1.6), (0.6, 0.55, 0.65), (1.0, 0.99, 1.01), \
    (1.05, 1.0, 1.1)


# Claim ids and machine names the assertions read (data, not wording).
DOT_COMPILE, DOT_VMAP = "dot_jit_vs_compile", "dot_jit_vs_vmap"
GRADS_COMPILE, DOT_BATCHED = "grads_jit_vs_compile", "dot_vmap_vs_batched"
VIT_BEST, VIT_MATH = "best_jax_vs_torch_b32", "math_jax_vs_torch"
XEON_NAME, EPYC_NAME = "Intel Xeon (2 cores)", "AMD EPYC (2 cores)"


def made(device, **ratios):
    """Claims of 01_vmap by id, each with its (ratio, low, high), measured on `device`."""
    return [claim("01_vmap", claim_id, ratio, device=device) for claim_id, ratio in ratios.items()]


def bundle(root, rows, device, **changes):
    """A committed bundle of `rows` on `device`, this build's pins unless `changes` says."""
    versions = VERSIONS | changes.pop("versions", {})
    return hand_bundle(root, rows, device=device, versions=versions, **changes)


def read(current_rows, folders, pins=PINS):
    return agreement.agreement(pd.DataFrame(current_rows, columns=claims.COLUMNS), folders,
                               pins).set_index("claim_id")


# ---- machines -----------------------------------------------------------------------------

@pytest.mark.parametrize("label, kind, named", [
    (XEON, "Intel Xeon", "Intel Xeon (2 cores)"),
    (EPYC, "AMD EPYC", "AMD EPYC (2 cores)"),
    ("AMD EPYC 7763 64-Core Processor (2 cores)", "AMD EPYC 7763", "AMD EPYC 7763 (2 cores)"),
    ("Intel(R) Core(TM) i7-9750H CPU @ 2.60GHz (1 core)", "Intel Core i7-9750H",
     "Intel Core i7-9750H (1 core)"),
    (GPU, GPU, GPU),  # a GPU is named by its name
])
def test_a_machine_is_named_by_its_cpus_kind_and_all_its_cores(label, kind, named):
    assert (cpu_kind(label), machine(label)) == (kind, named)
    assert agreement.cpu_kind is cpu_kind  # one naming for bundles, the ledger and the advice


def test_two_cpus_on_one_day_get_two_bundle_names():
    """The cold read: two CPUs' builds of one release on one day collided on one folder."""
    names = {bundles.bundle_name(build_json(device=d, versions=VERSIONS)) for d in (XEON, EPYC)}
    expected = {"2026-11-28_intel-xeon-2core_torch-2.15.0_jax-0.12.0.1",
                "2026-11-28_amd-epyc-2core_torch-2.15.0_jax-0.12.0.1"}
    assert names == expected


# ---- agreement ----------------------------------------------------------------------------

def test_each_machine_that_ran_the_pins_gives_its_verdict(tmp_path):
    epyc = bundle(tmp_path, made(EPYC, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE,
                                 grads_jit_vs_compile=SLOWER), EPYC)
    # other pins: the same claim slower there, which must not count
    older = bundle(tmp_path, made(EPYC, dot_jit_vs_compile=SLOWER), EPYC,
                   versions={"torch": "2.13.0", "jax": "0.10.2"})
    found = read(made(XEON, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=FASTER,
                      grads_jit_vs_compile=SLOWER, dot_vmap_vs_batched=TIE), [epyc, older])
    assert [found.index.name, *found.columns] == ["claim_id", *agreement.COLUMNS[:1],
                                                  *agreement.COLUMNS[2:]]
    assert found["agreed"].to_dict() == {DOT_COMPILE: True, DOT_VMAP: False,
                                         GRADS_COMPILE: True,
                                         DOT_BATCHED: True}
    assert found.at[DOT_VMAP, "verdicts"] == \
        f"{XEON_NAME}: faster; {EPYC_NAME}: tie"
    assert found.at[DOT_COMPILE, "verdicts"] == \
        f"{XEON_NAME}: faster; {EPYC_NAME}: faster"
    # made by this build alone: it agrees with itself, on one machine
    assert found.loc[DOT_BATCHED, ["verdicts", "machines"]].tolist() == [
        f"{XEON_NAME}: tie", 1]
    assert found["machines"].tolist() == [2, 2, 2, 1]


def test_builds_of_one_cpu_model_show_once_where_they_agree_and_each_where_not(tmp_path):
    first = bundle(tmp_path, made(XEON, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE), XEON,
                   date="2026-11-27", build_id="20261127T100000Z-a")
    second = bundle(tmp_path, made(XEON, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=FASTER),
                    XEON)
    found = read(made(XEON, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=FASTER), [second, first])
    assert found.loc[DOT_COMPILE, ["agreed", "verdicts", "machines"]].tolist() == [
        True, f"{XEON_NAME}: faster", 1]
    # a disagreement on one model names each build, oldest bundle first
    assert found.at[DOT_VMAP, "verdicts"] == (
        f"{XEON_NAME} [{agreement.THIS_BUILD}]: faster; "
        f"{XEON_NAME} [{first.name}]: tie; {XEON_NAME} [{second.name}]: faster")
    assert not found.at[DOT_VMAP, "agreed"]


def test_a_withheld_verdict_anywhere_agrees_with_nothing(tmp_path):
    epyc = bundle(tmp_path, made(EPYC, dot_jit_vs_compile=OPEN, dot_jit_vs_vmap=FASTER), EPYC)
    found = read(made(XEON, dot_jit_vs_compile=OPEN, dot_jit_vs_vmap=FASTER,
                      grads_jit_vs_compile=OPEN), [epyc])
    assert found["agreed"].tolist() == [False, True, False]
    assert found.at[DOT_COMPILE, "verdicts"] == \
        f"{XEON_NAME}: withheld; {EPYC_NAME}: withheld"
    assert found.at[GRADS_COMPILE, "machines"] == 1  # withheld on its own: not advice


def test_another_scale_or_device_kind_is_not_comparable(tmp_path):
    medium = bundle(tmp_path / "m", [claim("01_vmap", "dot_jit_vs_compile", SLOWER, device=EPYC,
                                           scale="medium")], EPYC, scale="medium")
    gpu = bundle(tmp_path / "g", made(GPU, dot_jit_vs_compile=SLOWER), GPU, device_kind="gpu")
    found = read(made(XEON, dot_jit_vs_compile=FASTER), [medium, gpu])
    assert found.loc[DOT_COMPILE, ["agreed", "machines"]].tolist() == [True, 1]


def test_pins_are_compared_without_their_local_labels(tmp_path):
    wheel = bundle(tmp_path, made(EPYC, dot_jit_vs_compile=SLOWER), EPYC,
                   versions={"torch": "2.15.0+cpu"})
    found = read(made(XEON, dot_jit_vs_compile=FASTER), [wheel])
    assert found.loc[DOT_COMPILE, ["agreed", "machines"]].tolist() == [False, 2]


def test_a_claim_another_build_saved_under_an_alias_is_found(tmp_path):
    old = claim("05_vit_training", "math_jax_vs_torch", SLOWER, device=EPYC)
    epyc = bundle(tmp_path, [old], EPYC)
    mine = claim("05_vit_training", "best_jax_vs_torch_b32", FASTER, device=XEON)
    mine["aliases"] = "math_jax_vs_torch"
    found = read([mine], [epyc])
    assert found.at[VIT_BEST, "verdicts"] == \
        f"{XEON_NAME}: faster; {EPYC_NAME}: slower"


def test_a_malformed_bundle_fails_the_reading(tmp_path):
    epyc = bundle(tmp_path, made(EPYC, dot_jit_vs_compile=FASTER), EPYC)
    (epyc / bundles.BUILD_FILE).unlink()
    with pytest.raises(bundles.BundleError, match="build.json: file missing"):
        read(made(XEON, dot_jit_vs_compile=FASTER), [epyc])


def test_the_module_imports_no_framework():
    probe = ("import sys, deepdive.book.agreement\n"
             "print(sorted({'torch', 'jax'} & set(sys.modules)))")
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert ran.stdout.strip() == "[]"


def test_a_pair_another_build_asked_the_other_way_round_is_found_and_turned(tmp_path):
    """One comparison under two ids, its sides swapped (tiny_best_jax_vs_torch against the
    older tiny_compile_vs_jit): the other build's verdict is read, from this claim's side."""
    old = claim("02_jit_xla", "tiny_compile_vs_jit", SLOWER, device=EPYC)  # cand slower
    old.update(baseline="jax.jit", candidate="torch.compile")
    epyc = bundle(tmp_path, [old], EPYC)
    mine = claim("02_jit_xla", "tiny_best_jax_vs_torch", FASTER, device=XEON)
    mine.update(baseline="torch.compile", candidate="jax.jit")
    found = read([mine], [epyc]).loc[mine["claim_id"]]
    assert found[["agreed", "machines"]].tolist() == [True, 2]


def test_the_guide_gives_advice_only_where_every_machine_agrees(tmp_path):
    """The intro's and the guide's column: a verdict every machine reached is advice; one
    the CPUs disagree on favours no side and names each machine's by the side it favours;
    builds of one CPU that disagree say so; a claim no other build made is marked."""
    from deepdive.book import evidence

    epyc = bundle(tmp_path, made(EPYC, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE), EPYC)
    xeon = bundle(tmp_path, made(XEON, grads_jit_vs_compile=TIE), XEON, date="2026-11-27",
                  build_id="20261127T100000Z-a")
    current = pd.DataFrame(made(XEON, dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=FASTER,
                                grads_jit_vs_compile=FASTER, dot_vmap_vs_batched=FASTER),
                           columns=claims.COLUMNS)
    ids = [DOT_COMPILE, DOT_VMAP, GRADS_COMPILE, DOT_BATCHED]
    table = pd.DataFrame({"if you need": evidence.EVIDENCE[0].need, "chapter": "01_vmap",
                          "claim": ids, "favours": "JAX"})
    found = evidence.across_machines(table, current, [epyc, xeon],
                                     lambda chapter, claim_id: (chapter, claim_id))
    across, favours = (found.set_index("claim")[c] for c in (evidence.ACROSS, "favours"))
    assert (across[DOT_COMPILE], favours[DOT_COMPILE]) == (f"same on {2} machines", "JAX")
    assert across[DOT_VMAP] == f"{evidence.DEPENDS}: {XEON_NAME}: JAX; {EPYC_NAME}: tie"
    assert favours[DOT_VMAP] == evidence.DEPENDS  # no side to favour: no advice
    assert across[GRADS_COMPILE].startswith(evidence.REBUILDS_DIFFER)
    assert across[DOT_BATCHED] == evidence.HERE_ONLY
