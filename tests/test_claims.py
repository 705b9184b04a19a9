"""deepdive.book.claims: one file of claims, and prose glued from that file, not from memory."""

import numpy as np
import pandas as pd
import pytest

from deepdive.book.claims import (
    COLUMNS,
    Claims,
    cite,
    claims_path,
    glue_claims,
    glue_noise,
    load_claims,
    verdict_parts,
    verdict_phrase,
)
from deepdive.core import env
from deepdive.core.timing import Timing
from deepdive.core.verdict import BY_CONTROL, REASONS, TieBand


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("DEEPDIVE_SCALE", "small")
    return tmp_path / "results"


def paired(label, seconds, session=1):
    samples = np.asarray(seconds, dtype=float)
    return Timing(label, samples, calls_per_block=1, first_call=0.0, session=session)


ROUNDS = 15
VMAP, BEST, FUSED = "vmap_vs_loop", "best_jax_vs_torch", "fused_jax_vs_torch"
BAND_PCT, RANGE, CITED = "tie_band_pct", "tie_band_range", "char_inductor"
SLOW = paired("loop", [2e-3] * ROUNDS)
FAST = paired("vmap", [1e-3] * ROUNDS)
SAME = paired("vmap copy", [2e-3] * ROUNDS)


def collect():
    glued = {}
    return glued, lambda key, value: glued.__setitem__(key, value)


def test_a_claim_lands_in_claims_csv_with_every_required_column():
    claims = Claims("01_vmap", TieBand(0.03))
    claims.compare(VMAP, "dot, batch 64: vmap against a loop", SLOW, FAST,
                   headline=True)

    path = claims.save()

    assert path == claims_path() and path.name == "claims.csv"
    row = pd.read_csv(path).iloc[0]
    assert tuple(pd.read_csv(path).columns) == COLUMNS
    assert (row.chapter, row.claim_id, row.verdict, row.n) == ("01_vmap", VMAP,
                                                               "faster", ROUNDS)
    assert (row.ratio, row.low, row.high) == (2.0, 2.0, 2.0)
    assert (row.device, row.scale, row.tie_band) == (env.device_label(), "small", 0.03)
    assert (row.build_band, row.reason) == (0.03, REASONS["decided"])


def test_saving_a_chapter_replaces_its_rows_and_keeps_the_others():
    first = Claims("01_vmap", TieBand(0.03))
    first.compare("a", "question a", SLOW, FAST)
    first.save()
    other = Claims("02_jit_xla", TieBand(0.03))
    other.compare("b", "question b", SLOW, SAME)
    other.save()
    again = Claims("01_vmap", TieBand(0.03))
    again.compare("c", "question c", SLOW, SAME)
    again.save()

    saved = load_claims()
    assert sorted(zip(saved.chapter, saved.claim_id, strict=True)) == [("01_vmap", "c"),
                                                                      ("02_jit_xla", "b")]


def test_glued_verdicts_come_from_the_file_and_follow_its_numbers():
    claims = Claims("01_vmap", TieBand(0.03))
    question = "dot: vmap against a loop"
    claims.compare(VMAP, question, SLOW, FAST, headline=True)
    claims.save()
    glued, glue = collect()

    glue_claims("01_vmap", glue=glue)
    assert verdict_parts(glued[VMAP]) == {
        "form": "decided", "fast": "vmap", "slow": "loop", "ratio": 2.0, "low": 2.0,
        "high": 2.0, "band": 0.03}
    assert glued[f"{VMAP}_verdict"] == "faster"

    # Edit the numbers in the file, as a different build would have measured them...
    frame = pd.read_csv(claims_path())
    frame.loc[0, ["ratio", "low", "high"]] = [0.5, 0.45, 0.55]
    frame.to_csv(claims_path(), index=False)
    glued, glue = collect()
    glue_claims("01_vmap", glue=glue)

    # ...and the prose says what the file says, from the side that took less time.
    said = verdict_parts(glued[VMAP])
    assert (said["form"], said["fast"], said["slow"]) == ("decided", "loop", "vmap")
    assert (said["ratio"], said["low"], said["high"]) == (2.0, pytest.approx(1.82, abs=0.01),
                                                          pytest.approx(2.22, abs=0.01))
    assert glued[f"{VMAP}_verdict"] == "slower"
    assert glued["claims_found"].data == f"- {question}: {glued[VMAP]}"


def rewrite_first_claim(**values):
    """Edit the saved file's first claim, as another build would have measured it."""
    frame = pd.read_csv(claims_path())
    for column, value in values.items():
        frame.loc[0, column] = value
    frame.to_csv(claims_path(), index=False)


def test_a_noisy_claim_in_the_file_stays_decided_against_its_widened_band():
    claims = Claims("01_vmap", TieBand(0.03))
    claims.compare(VMAP, "q", SLOW, FAST)
    claims.save()
    rewrite_first_claim(noisy=True, decision_band=0.25)
    glued, glue = collect()

    glue_claims("01_vmap", glue=glue)

    said = verdict_parts(glued[VMAP])
    assert (said["form"], said["band"]) == ("decided", 0.25)  # the band it cleared
    assert [glued[f"claims_{k}"] for k in ("noisy", "withheld")] == [1, 0]
    assert glued["claims_all"].loc["q", "noisy side"] == "yes"


def test_a_withheld_claim_names_the_band_its_interval_crosses():
    claims = Claims("01_vmap", TieBand(0.03))
    closer = paired("closer", [2e-3 / 1.03] * ROUNDS)
    claims.compare("close", "q", SLOW, closer)
    claims.save()
    rewrite_first_claim(ratio=1.03, low=1.01, high=1.05)
    glued, glue = collect()

    glue_claims("01_vmap", glue=glue)

    assert glued["close_verdict"] == "withheld"
    said = verdict_parts(glued["close"])
    assert (said["form"], said["fast"], said["band"]) == ("withheld", closer.label, 0.03)
    assert (said["low"], said["ratio"], said["high"]) == (1.01, 1.03, 1.05)
    assert glued["claims_withheld"] == 1


def test_the_box_holds_headline_claims_and_the_full_table_all():
    claims = Claims("01_vmap", TieBand(0.03))
    claims.compare("headline", "the headline", SLOW, FAST, headline=True)
    claims.compare("detail", "a detail", SLOW, SAME)
    claims.save()
    glued, glue = collect()

    glue_claims("01_vmap", glue=glue)

    assert glued["claims_found"].data.splitlines() == [f"- the headline: {glued['headline']}"]
    assert list(glued["claims_all"].index) == ["the headline", "a detail"]
    assert glued[BAND_PCT] == pytest.approx(3.0)
    assert glued["claims_all"].loc["a detail", "verdict"] == "tie"
    assert glued["claims_all"].loc["a detail", "result"] == glued["detail"]
    assert verdict_parts(glued["detail"])["form"] == "tie"


def test_claims_refuse_timings_that_were_not_interleaved():
    claims = Claims("01_vmap", TieBand(0.03))
    other_session = paired("vmap", [1e-3] * ROUNDS, session=2)

    with pytest.raises(ValueError, match="not timed in one compare"):
        claims.compare("x", "q", SLOW, other_session)


@pytest.mark.parametrize(("claim_id", "message"), [("has space", "must be a Python identifier"),
                                                   ("dup", "already recorded")])
def test_claim_ids_must_name_glue_keys_once(claim_id, message):
    claims = Claims("01_vmap", TieBand(0.03))
    claims.compare("dup", "q", SLOW, FAST)

    with pytest.raises(ValueError, match=message):
        claims.compare(claim_id, "q", SLOW, FAST)


def test_loading_claims_that_were_never_saved_says_what_to_do():
    with pytest.raises(FileNotFoundError, match="build the chapters first"):
        load_claims()


def test_loading_a_chapter_without_claims_names_it():
    claims = Claims("01_vmap", TieBand(0.03))
    claims.compare("a", "q", SLOW, FAST)
    claims.save()

    with pytest.raises(KeyError, match="no claims of chapter '03_torch_compile'"):
        load_claims("03_torch_compile")


def test_an_a_a_control_widens_the_band_of_its_claim_only():
    # The control differs from its baseline by 8% in every round: a tie band of 3% is too
    # narrow for this workload, so a 6% difference must read as a tie, not as faster.
    base = paired("step", [1.00e-3] * ROUNDS, session=5)
    control = paired("step copy", [1.08e-3] * ROUNDS, session=5)
    candidate = paired("compiled step", [0.94e-3] * ROUNDS, session=5)
    claims = Claims("03_torch_compile", TieBand(0.03))

    twin = paired("compiled step, second build", [0.94e-3] * ROUNDS, session=5)
    with_control = claims.compare("with", "q", base, candidate, control=control)
    without = claims.compare("without", "q", base, twin)

    assert with_control.tie_band == pytest.approx(1.08 / 1.00 - 1)
    assert (with_control.verdict, without.verdict) == ("tie", "faster")
    assert (with_control.widened_by, without.widened_by) == (BY_CONTROL, "")
    assert without.tie_band == 0.03 and with_control.build_band == 0.03
    claims.save()
    glued, glue = collect()
    glue_claims("03_torch_compile", glue=glue)
    assert glued[BAND_PCT] == pytest.approx(3.0)  # the chapter's band, not a widened one
    assert glued[RANGE] == "[0.971, 1.030]"


def test_a_control_from_another_compare_call_is_refused():
    claims = Claims("01_vmap", TieBand(0.03))
    stranger = paired("copy", [2e-3] * ROUNDS, session=99)

    with pytest.raises(ValueError, match="was not timed in the same compare"):
        claims.compare("x", "q", SLOW, FAST, control=stranger)


@pytest.mark.parametrize(("numbers", "shown"), [
    ((1.0213, 1.0119, 1.0432), (1.021, 1.012, 1.043)),  # near 1: three decimals
    ((0.99, 0.97, 0.9933), (1.010, 1.007, 1.031)),  # the baseline's side, inverted
    ((1595.6, 1559.5, 1629.1), (1596, 1560, 1629)),
    ((24.02, 23.41, 24.04), (24.0, 23.4, 24.0)),
    ((2.553, 2.49, 2.66), (2.55, 2.49, 2.66)),
])
def test_a_phrase_shows_a_ratio_of_at_least_one_with_digits_to_place_it_against_the_band(
        numbers, shown):
    row = dict(zip(("ratio", "low", "high"), numbers, strict=True), noisy=False,
               tie_band=0.001, baseline="base", candidate="cand")
    said = verdict_parts(verdict_phrase(row))
    assert (said["ratio"], said["low"], said["high"]) == shown
    assert said["ratio"] >= 1 and said["low"] <= said["ratio"] <= said["high"]
    assert said["fast"] == ("cand" if numbers[0] >= 1 else "base")


@pytest.mark.parametrize("text", ["faster than", "jax 2x faster than torch", "tied with",
                                  "jax 1.2x [1.1, 1.3] against torch: undecided"])
def test_text_in_no_form_of_the_books_is_refused(text):
    with pytest.raises(ValueError, match="not a verdict in the book's one form"):
        verdict_parts(text)


def test_glue_noise_counts_noisy_and_extended_timings():
    steady = paired("a", [1e-3] * 15)
    noisy = paired("b", [1e-3, 2e-3] * 10)  # 20 rounds: extended, and still noisy
    glued, glue = collect()

    partner = paired("c", [1e-3] * 20)  # timed in the same rounds as `noisy`
    steady = paired("a", [1e-3] * 15, session=2)

    counts = glue_noise([steady, noisy, partner], glue=glue)

    assert counts == glued == {"timing_count": 3, "noisy_count": 1, "set_count": 2,
                               "extended_sets": 1, "extended_count": 2}


def test_one_comparison_asked_twice_is_one_claim_under_two_names():
    claims = Claims("05_vit_training", TieBand(0.03))
    first = claims.compare(BEST, "best against best", SLOW, FAST, headline=True)
    again = claims.compare(FUSED, "the API pairing", SLOW, FAST)
    claims.save()
    glued, glue = collect()

    glue_claims("05_vit_training", glue=glue)

    assert again is claims.claims[BEST] and first.claim_id == again.claim_id
    assert list(load_claims("05_vit_training")["claim_id"]) == [BEST]
    assert glued[FUSED] == glued[BEST]
    assert glued[f"{FUSED}_verdict"] == "faster"


def test_another_page_cites_a_claim_instead_of_measuring_it_again():
    claims = Claims("03_torch_compile", TieBand(0.03))
    claims.compare("char_inductor_fp32", "GPT char: inductor against eager", SLOW, FAST)
    claims.save()
    glued, glue = collect()

    cited = cite("03_torch_compile", "char_inductor_fp32", as_key=CITED, glue=glue)

    assert cited == glued and glued[f"{CITED}_verdict"] == "faster"
    assert verdict_parts(glued[CITED])["fast"] == "vmap"
    assert glued[f"{CITED}_question"] == load_claims("03_torch_compile")["question"].iat[0]
    with pytest.raises(KeyError, match="run 03_torch_compile first"):
        cite("03_torch_compile", "vocab_inductor_fp32", glue=glue)


def test_a_headline_can_be_marked_after_a_later_check():
    claims = Claims("02_jit_xla", TieBand(0.03))
    claims.compare("fusion_jit", "q", SLOW, FAST)
    claims.mark_headline("fusion_jit")

    assert claims.claims["fusion_jit"].headline
    with pytest.raises(KeyError, match="no claims"):
        claims.mark_headline("not_made")


@pytest.mark.parametrize("native, verdict", [(False, "withheld"), (True, "faster")])
def test_a_bf16_side_on_a_device_that_emulates_bf16_is_never_decided(native, verdict):
    """The rule holds for every claim, cross-framework ones included: emulated bf16 times
    the emulation, so its claim is saved and read back withheld, whatever its interval."""
    claims = Claims("04_gpt_training", TieBand(0.03), bf16_native=native)
    claims.compare("char_bf16_jax_vs_torch", "GPT, bf16 mixed: jax.jit against torch.compile",
                   paired("torch.compile · bf16", [9e-3] * ROUNDS),
                   paired("jax.jit · bf16", [1e-3] * ROUNDS), headline=True)
    claims.compare("fp32_only", "GPT, fp32 strict: vmap against a loop", SLOW, FAST)
    claims.save()

    saved = load_claims("04_gpt_training").set_index("claim_id")
    bf16_claim = "char_bf16_jax_vs_torch"
    assert saved.loc[bf16_claim, "verdict"] == verdict
    assert saved.loc[bf16_claim, "bf16"] == ("native" if native else "emulated")
    assert saved.loc["fp32_only", "verdict"] == "faster"  # no bf16 side: decided as ever
    glued, glue = collect()
    glue_claims("04_gpt_training", glue=glue)
    phrase = glued[bf16_claim]
    assert glued[f"{bf16_claim}_verdict"] == verdict
    assert verdict_parts(phrase)["form"] == ("decided" if native else "emulated")


def test_a_side_that_is_not_the_fastest_of_its_rivals_is_refused_and_the_rivals_are_saved():
    claims = Claims("01_vmap", TieBand(0.03))
    rivals = {"loop": SLOW, "vmap": FAST}
    other = {"vmap copy": SAME}
    with pytest.raises(ValueError, match="fastest checked variant.*vmap"):
        claims.compare("best", "dot: x against y", SLOW, SAME, among=(rivals, other))

    claims.compare("best", "dot: vmap copy against vmap", FAST, SAME, among=(rivals, other))
    claims.save()

    row = load_claims("01_vmap").iloc[0]
    assert (row.baseline_among, row.candidate_among) == ("loop;vmap", "vmap copy")
