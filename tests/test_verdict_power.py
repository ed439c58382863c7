"""A verdict's power: the vectorised simulation against the equivalence test itself run on simulated sets, planted
models caught or passed at the calibrated rate, and checks without power never making a verdict pass."""

import math

import numpy as np
from scipy.stats import norm

from lit_unlearn.verification.full_verdict import HalfItems, Scored, VerdictSpec, judge
from lit_unlearn.verification.holdout_calibration import calibrated_margins
from lit_unlearn.verification.holdout_equivalence import auc, holdout_verdict
from lit_unlearn.verification.verdict_power import (
    POWER_AUC,
    POWER_RATE,
    authors_needed,
    check_power,
    fail_rates,
    rate_with_more_authors,
)

SPEC = VerdictSpec(n_boot=400)


def groups(authors: int, items: int, prefix: str) -> list[str]:
    return [f"{prefix}{a}" for a in range(authors) for _ in range(items)]


def planted(fg, hg, true_auc: float, share: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """Per-item scores: an author effect plus noise, the forget items shifted so that the true AUC is `true_auc`."""
    def draw(g):
        names = list(dict.fromkeys(g))
        effect = dict(zip(names, rng.normal(0, math.sqrt(share), len(names))))
        return np.array([effect[x] for x in g]) + rng.normal(0, math.sqrt(1 - share), len(g))
    return draw(fg) - math.sqrt(2) * norm.ppf(true_auc), draw(hg)


def full(fg, hg, scores: dict[str, tuple], margins: dict[str, tuple[float, float]]):
    """The full verdict of the model as it is, from planted per-item scores of each attack."""
    mia = {}
    for attack, (f, h) in scores.items():
        mia[f"forget_{attack}"], mia[f"holdout_{attack}"] = list(map(float, f)), list(map(float, h))
    mia.setdefault("forget_loss", mia[f"forget_{attack}"])
    mia.setdefault("holdout_loss", mia[f"holdout_{attack}"])
    half = HalfItems([{}] * len(fg), [{}] * len(hg), list(fg), list(hg), [], [])
    pooled = {a: m[0] for a, m in margins.items()}
    author = {a: m[1] for a, m in margins.items()}
    return judge({"none": Scored(mia, list(range(len(fg))))}, half, list(scores), lambda c: (pooled, author), SPEC)


def test_the_vectorised_rates_match_the_equivalence_test_run_on_simulated_sets():
    """The library's simulation (shared bootstrap draws, one matrix product for all sets) against holdout_verdict
    itself on independently drawn sets: the same rates up to simulation noise, at the null, mid-way and high."""
    fg, hg = groups(5, 20, "f"), groups(5, 20, "h")
    margin, share, sims = (0.3, 0.45), 0.2, 150
    rng = np.random.default_rng(7)
    fast = fail_rates([0.5, 0.75, 0.9], fg, hg, margin, share, sims=sims, n_boot=300, seed=3)
    for t, rate in zip([0.5, 0.75, 0.9], fast):
        fails = 0
        for _ in range(sims):
            f, h = planted(fg, hg, t, share, rng)
            v = holdout_verdict({"a": f}, {"a": h}, fg, hg, margin[0], margin[1], n_boot=300,
                                seed=int(rng.integers(1 << 30)))
            fails += not v.passed
        assert abs(fails / sims - rate) < 0.12, (t, fails / sims, rate)
    assert fast[0] < 0.2 < 0.8 < fast[2]  # the range the comparison covers: near the null and near certain


def test_the_detectable_auc_is_where_the_rate_first_reaches_80_percent():
    fg, hg = groups(5, 20, "f"), groups(5, 20, "h")
    p = check_power(fg, hg, (0.3, 0.45), 0.2)
    assert p.has_power and p.detectable_auc is not None
    below, at = fail_rates([p.detectable_auc - 0.01, p.detectable_auc], fg, hg, p.judged_margin, 0.2)
    assert below < 0.8 <= at


def test_margins_narrower_than_the_simulated_null_needs_borrow_no_power():
    """Margins a never-trained set crosses most of the time would "catch" noise: the rates are taken at the wider
    margins the simulated null passes 90 % of the time, and the null pass rate at the check's own is reported."""
    fg, hg = groups(5, 20, "f"), groups(5, 20, "h")
    narrow = check_power(fg, hg, (0.05, 0.1), 0.2)
    assert narrow.null_pass < 0.2 and narrow.judged_margin[0] > 0.15 and narrow.judged_margin[1] > 0.3
    null_rate = fail_rates([0.5], fg, hg, narrow.judged_margin, 0.2)[0]
    assert null_rate <= 0.1 + 1e-9 and narrow.rate == fail_rates([POWER_AUC], fg, hg, narrow.judged_margin, 0.2)[0]
    assert narrow.rate < fail_rates([POWER_AUC], fg, hg, (0.05, 0.1), 0.2)[0]


def test_the_limit_of_an_item_structure_is_the_power_at_margins_from_sampling_alone():
    """Zero margins are judged at what the simulated null needs (each scope's reach at 95 %, together 90 %): the
    least any calibration on these authors and items could detect (benchmarks/verification/verdict_power.py's
    limit column). Wider margins never detect less; at forget01's structure the limit stays above 0.70."""
    from lit_unlearn.verification.verdict_power import null_reach

    fg, hg = groups(2, 10, "f"), groups(2, 10, "h")
    limit = check_power(fg, hg, (0.0, 0.0), 0.1)
    assert limit.judged_margin == tuple(min(0.5, r) for r in null_reach(fg, hg, 0.1, quantile=0.95))
    wider = check_power(fg, hg, tuple(m + 0.05 for m in limit.judged_margin), 0.1)
    assert limit.detectable_auc is not None and wider.detectable_auc is not None
    assert 0.7 < limit.detectable_auc < wider.detectable_auc


def test_a_planted_auc_of_085_fails_and_a_null_model_passes_at_the_calibrated_rate():
    """forget10's half (10 authors of 20 items a side) with its calibrated raw margins for the loss attack."""
    fg, hg = groups(10, 20, "f"), groups(10, 20, "h")
    pooled, author = calibrated_margins("10", "raw", "none", ["loss"])
    margin = (pooled["loss"], author["loss"])
    rng = np.random.default_rng(0)
    passes = {0.5: 0, 0.85: 0}
    for t in passes:
        for _ in range(40):
            f, h = planted(fg, hg, t, 0.2, rng)
            passes[t] += holdout_verdict({"loss": f}, {"loss": h}, fg, hg, margin[0], margin[1], n_boot=400,
                                         seed=int(rng.integers(1 << 30))).passed
    assert passes[0.5] >= 32 and passes[0.85] <= 2, passes  # the calibration aims at 90 % passes for never-trained
    caught = full(fg, hg, {"loss": planted(fg, hg, 0.85, 0.2, np.random.default_rng(1))}, {"loss": margin})
    assert caught.decision == "not forgotten" and not caught.passed
    null = full(fg, hg, {"loss": planted(fg, hg, 0.5, 0.2, np.random.default_rng(2))}, {"loss": margin})
    assert null.power["none"]["loss"].has_power
    assert null.decision == "forgotten" and null.passed, null.headline()
    assert "detectable AUC before" in null.headline()


def test_a_check_with_margin_05_has_no_power_and_never_turns_a_verdict_into_a_pass():
    fg, hg = groups(10, 20, "f"), groups(10, 20, "h")
    pooled, author = calibrated_margins("10", "raw", "none", ["loss"])
    rng = np.random.default_rng(3)
    wide = {"zlib": (0.5, 0.5)}
    remembered = full(fg, hg, {"loss": planted(fg, hg, 0.95, 0.2, rng), "zlib": planted(fg, hg, 0.5, 0.2, rng)},
                      {"loss": (pooled["loss"], author["loss"]), **wide})
    assert not remembered.power["none"]["zlib"].has_power and remembered.power["none"]["zlib"].rate == 0.0
    assert remembered.decision == "not forgotten"
    assert any("no power here: zlib" in line for line in remembered.power_statement())
    alone = full(fg, hg, {"zlib": planted(fg, hg, 0.5, 0.2, rng)}, wide)
    assert alone.band_ratio <= 1.0 and alone.decision == "undecided" and not alone.passed
    assert alone.headline().startswith("UNDECIDED: too little data")
    assert "margins are 0.5" in alone.missing()[0]
    both = full(fg, hg, {"zlib": planted(fg, hg, 0.5, 0.2, rng), "min_k": planted(fg, hg, 0.5, 0.2, rng)},
                {**wide, "min_k": (0.5, 0.5)})
    assert both.decision == "undecided"


def test_a_check_too_weak_for_an_auc_of_08_leaves_the_verdict_undecided_with_the_authors_that_would_decide():
    fg, hg = groups(2, 10, "f"), groups(2, 10, "h")  # forget01's half
    margin = (0.45, 0.49)
    weak = check_power(fg, hg, margin, 0.2)
    assert 0.0 < weak.rate < POWER_RATE and not weak.has_power
    k = authors_needed(fg, hg, margin, 0.2)
    assert k is not None and k > 0
    assert rate_with_more_authors(fg, hg, margin, 0.2, k) >= POWER_RATE > rate_with_more_authors(fg, hg, margin, 0.2,
                                                                                                   k - 1)
    assert fail_rates([POWER_AUC], fg, hg, weak.judged_margin, 0.2)[0] == weak.rate
    f, h = planted(fg, hg, 0.5, 0.2, np.random.default_rng(4))
    v = full(fg, hg, {"loss": (f, h)}, {"loss": margin})
    share = v.power["none"]["loss"].author_share
    assert v.band_ratio <= 1.0 and v.decision == "undecided"
    k = authors_needed(fg, hg, margin, share)
    assert f"about {k} more holdout author{'s' if k > 1 else ''} of 10 items" in v.missing()[0]


def test_one_holdout_author_is_undecided_and_says_what_is_missing():
    fg, hg = groups(10, 20, "f"), groups(1, 40, "h")
    f, h = planted(fg, hg, 0.5, 0.0, np.random.default_rng(5))
    v = full(fg, hg, {"loss": (f, h)}, {"loss": (0.45, 0.49)})
    assert 0.3 < auc(f, h) < 0.7 and v.band_ratio <= 1.0
    assert v.decision == "undecided" and "only 1 holdout author" in v.missing()[0]


def test_the_bench_columns_carry_the_decision_and_the_detectable_auc():
    from lit_unlearn.bench.adapters import TofuBenchmark, full_verdict_columns

    fg, hg = groups(10, 20, "f"), groups(10, 20, "h")
    pooled, author = calibrated_margins("10", "raw", "none", ["loss"])
    margin = {"loss": (pooled["loss"], author["loss"])}
    null = full(fg, hg, {"loss": planted(fg, hg, 0.5, 0.2, np.random.default_rng(2))}, margin)
    caught = full(fg, hg, {"loss": planted(fg, hg, 0.85, 0.2, np.random.default_rng(1))}, margin)
    unsure = full(fg, hg, {"zlib": planted(fg, hg, 0.5, 0.2, np.random.default_rng(3))}, {"zlib": (0.5, 0.5)})
    cols = {name: full_verdict_columns(v) for name, v in (("null", null), ("caught", caught), ("unsure", unsure))}
    assert [cols[n]["verify/full/decision"] for n in cols] == ["forgotten", "not forgotten", "undecided"]
    assert [cols[n]["verify/full/passed"] for n in cols] == [1.0, 0.0, 0.0]
    assert cols["null"]["verify/full/detectable_auc"] == null.power["none"]["loss"].detectable_auc
    assert cols["unsure"]["verify/full/detectable_auc"] is None and cols["unsure"]["verify/full/fails_on"] == "-"
    assert cols["caught"]["verify/full/fails_on"].startswith("loss (")
    shown = TofuBenchmark.columns
    assert shown["decision"] == "verify/full/decision" and shown["detectable AUC"] == "verify/full/detectable_auc"


def test_the_paraphrase_part_has_a_bench_column_shown_only_where_a_run_has_it():
    from lit_unlearn.bench.adapters import TofuBenchmark, full_verdict_columns
    from lit_unlearn.bench.results import shown_columns
    from lit_unlearn.verification.full_verdict import FullVerdict

    fg, hg = groups(10, 20, "f"), groups(10, 20, "h")
    margin = {"loss": (0.3, 0.45)}
    before = full(fg, hg, {"loss": planted(fg, hg, 0.5, 0.2, np.random.default_rng(2))}, margin)
    asked = full(fg, hg, {"loss": planted(fg, hg, 0.9, 0.2, np.random.default_rng(4))}, margin)
    both = FullVerdict({"none": before.verdicts["none"], "paraphrase": asked.verdicts["none"]}, frozenset(), "raw",
                       "given", power={"none": before.power["none"], "paraphrase": asked.power["none"]})
    cols = full_verdict_columns(both)
    assert cols["verify/full/paraphrase"] == asked.verdicts["none"].band_ratio > 1
    assert cols["verify/full/decision"] == "not forgotten" and cols["verify/full/fails_on"].endswith("paraphrase")
    assert full_verdict_columns(before)["verify/full/paraphrase"] is None
    name = "paraphrase band ratio"
    assert TofuBenchmark.columns[name] == "verify/full/paraphrase"
    assert name not in shown_columns(TofuBenchmark, [{name: None}, {}])
    assert name in shown_columns(TofuBenchmark, [{name: None}, {name: 1.2}])
    assert "int4 band ratio" in shown_columns(TofuBenchmark, [{}])  # the others are always shown
