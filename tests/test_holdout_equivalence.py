"""The reference-free verification's statistics against independent references: the AUC against scikit-learn, the
author bootstrap against a brute-force loop and (item level) against scipy's bootstrap, the two-sided equivalence
decision, its coverage when authors are correlated, the steering/reporting split, and δ's calibration rule."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from lit_unlearn.verification.holdout_calibration import delta_from_bands
from lit_unlearn.verification.holdout_equivalence import (
    FEW_AUTHORS,
    auc,
    bootstrap_counts,
    equivalence_verdict,
    group_bootstrap,
    tost_p_value,
)
from lit_unlearn.verification.steering_halves import split_halves


def _sk_auc(forget, holdout):
    """P(holdout score > forget score): holdout is the positive class."""
    return roc_auc_score([0] * len(forget) + [1] * len(holdout), list(forget) + list(holdout))


def _authors(rng, n_authors, per_author, shift=0.0, spread=1.0):
    """Scores with an author effect: author means ~ N(shift, spread²), items ~ N(author mean, 1)."""
    means = rng.normal(shift, spread, n_authors)
    scores = np.concatenate([rng.normal(m, 1.0, per_author) for m in means])
    return scores, [a for a in range(n_authors) for _ in range(per_author)]


def test_auc_equals_sklearn_with_ties():
    rng = np.random.default_rng(0)
    f, h = rng.integers(0, 5, 37).astype(float), rng.integers(0, 5, 23).astype(float)  # many ties
    assert auc(f, h) == pytest.approx(_sk_auc(f, h), abs=1e-12)
    assert auc([1.0, 2.0], [3.0, 4.0]) == 1.0 and auc([3.0, 4.0], [1.0, 2.0]) == 0.0


def _brute_force(forget, holdout, gf, gh, n_boot, seed):
    """The two-level bootstrap written out with loops over replicates, drawn groups and items, the same random
    numbers (the draw order bootstrap_counts documents), and scikit-learn's AUC on each resampled list."""
    rng = np.random.default_rng(seed)

    def draws(groups):
        members = {}
        for i, g in enumerate(groups):
            members.setdefault(g, []).append(i)
        members = list(members.values())
        n, widest = len(members), max(len(m) for m in members)
        chosen = rng.integers(0, n, size=(n_boot, n)) if n >= FEW_AUTHORS else [list(range(n))] * n_boot
        u = rng.random((n_boot, n, widest))
        out = []
        for b in range(n_boot):
            picked = []
            for slot in range(n):
                items = members[chosen[b][slot]]
                picked += [items[int(u[b, slot, j] * len(items))] for j in range(len(items))]
            out.append(picked)
        return out

    fd, hd = draws(gf), draws(gh)
    return {a: np.array([_sk_auc([forget[a][i] for i in fi], [holdout[a][i] for i in hi]) for fi, hi in zip(fd, hd)])
            for a in forget}


@pytest.mark.parametrize("n_authors", [2, 3, 6])  # below FEW_AUTHORS: items within authors; from it: two levels
def test_group_bootstrap_equals_a_brute_force_loop(n_authors):
    rng = np.random.default_rng(1)
    f1, gf = _authors(rng, n_authors, 7)
    h1, gh = _authors(rng, n_authors, 5)
    f1, gf = f1[:-2], gf[:-2]  # authors of unequal sizes
    forget = {"loss": f1, "zlib": f1 * 2 + rng.normal(0, 1, f1.size)}
    holdout = {"loss": h1, "zlib": h1 * 2 + rng.normal(0, 1, h1.size)}
    ours = group_bootstrap(forget, holdout, gf, gh, n_boot=300, seed=7)
    brute = _brute_force(forget, holdout, gf, gh, n_boot=300, seed=7)
    for a in forget:
        np.testing.assert_allclose(ours[a], brute[a], atol=1e-12)
    assert ours["loss"].std() > 0


def test_three_authors_a_side_are_drawn_as_authors_and_two_keep_their_items():
    """From 3 authors a replicate may leave an author out (authors are drawn with replacement); with 2, each author
    keeps as many item draws as it has items."""
    rng = np.random.default_rng(0)
    three = bootstrap_counts([np.arange(0, 5), np.arange(5, 10), np.arange(10, 15)], 15, 200, rng)
    assert (three.reshape(200, 3, 5).sum(axis=2) == 0).any()
    two = bootstrap_counts([np.arange(0, 5), np.arange(5, 10)], 10, 200, rng)
    assert (two.reshape(200, 2, 5).sum(axis=2) == 5).all()


def test_item_level_interval_agrees_with_scipy_bootstrap():
    """With every item its own author, the bootstrap is scipy's independent two-sample percentile bootstrap."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(2)
    f, h = rng.normal(0.3, 1, 60), rng.normal(0, 1, 50)
    verdict = equivalence_verdict({"loss": f}, {"loss": h}, list(range(60)), list(range(50)), delta=0.3,
                                  alpha=0.05, n_boot=6000, seed=3)
    res = bootstrap((f, h), lambda x, y: auc(x, y), vectorized=False, paired=False, n_resamples=6000,
                    confidence_level=0.9, method="percentile", random_state=np.random.default_rng(4))
    iv = verdict.intervals["loss"]
    assert iv.low == pytest.approx(res.confidence_interval.low, abs=0.015)
    assert iv.high == pytest.approx(res.confidence_interval.high, abs=0.015)
    assert iv.auc == pytest.approx(_sk_auc(f, h))


def test_equivalence_is_two_sided_and_names_the_failing_side():
    rng = np.random.default_rng(5)
    same_f, gf = _authors(rng, 10, 20, spread=0.0)
    same_h, gh = _authors(rng, 10, 20, spread=0.0)
    passed = equivalence_verdict({"loss": same_f}, {"loss": same_h}, gf, gh, delta=0.15, n_boot=1000)
    assert passed.passed and passed.band <= 0.15 and passed.failing() == []
    # forget items with lower loss than holdout: still remembered
    remembers = equivalence_verdict({"loss": same_f - 1.5}, {"loss": same_h}, gf, gh, delta=0.15, n_boot=1000)
    assert not remembers.passed and remembers.worst.side() == "remembers" and remembers.wants_more_forgetting()
    assert remembers.intervals["loss"].auc > 0.8
    # forget items with far higher loss: over-forgotten, which fails just the same
    over = equivalence_verdict({"loss": same_f + 1.5}, {"loss": same_h}, gf, gh, delta=0.15, n_boot=1000)
    assert not over.passed and over.worst.side() == "over-forgotten" and not over.wants_more_forgetting()
    assert over.intervals["loss"].auc < 0.2
    # every attack must pass: one failing attack fails the verdict
    mixed = equivalence_verdict({"loss": same_f, "min_k": same_f - 1.5}, {"loss": same_h, "min_k": same_h}, gf, gh,
                                delta=0.15, n_boot=1000)
    assert not mixed.passed and [iv.attack for iv in mixed.failing()] == ["min_k"]


def test_tost_p_value_agrees_with_the_interval_decision():
    rng = np.random.default_rng(6)
    agree = 0
    for shift in np.linspace(0, 1.2, 13):
        f, gf = _authors(rng, 8, 15, shift=-shift, spread=0.3)
        h, gh = _authors(rng, 8, 15, spread=0.3)
        reps = group_bootstrap({"loss": f}, {"loss": h}, gf, gh, n_boot=1000, seed=0)["loss"]
        v = equivalence_verdict({"loss": f}, {"loss": h}, gf, gh, delta=0.2, n_boot=1000, seed=0)
        agree += (tost_p_value(reps, 0.2) < 0.05) == v.passed
    assert agree >= 12  # the two differ only where an interval end sits on the margin


def test_author_bootstrap_covers_where_an_item_bootstrap_does_not():
    """Null data (forget and holdout from one distribution) with strong author effects: the 90 % author-level
    interval covers 0.5 about as often as it should, the item-level one (authors ignored) much less."""
    rng = np.random.default_rng(8)
    cover_author = cover_item = 0
    sims = 200
    for _ in range(sims):
        f, gf = _authors(rng, 10, 10, spread=1.0)
        h, gh = _authors(rng, 10, 10, spread=1.0)
        a = equivalence_verdict({"loss": f}, {"loss": h}, gf, gh, delta=0.5, n_boot=1000).intervals["loss"]
        i = equivalence_verdict({"loss": f}, {"loss": h}, list(range(100)), list(range(100)), delta=0.5,
                                n_boot=1000).intervals["loss"]
        cover_author += a.low <= 0.5 <= a.high
        cover_item += i.low <= 0.5 <= i.high
    assert cover_author / sims >= 0.75
    assert cover_item / sims <= 0.6 and cover_author > cover_item + 15


def test_few_authors_resample_items_within_authors_and_say_so():
    f, gf = np.arange(40.0), [i // 20 for i in range(40)]
    v = equivalence_verdict({"loss": f}, {"loss": f + 0.5}, gf, gf, delta=0.5, n_boot=200)
    assert v.n_groups == {"forget": 2, "holdout": 2} and "optimistic" in v.notes[0]
    many = equivalence_verdict({"loss": f}, {"loss": f + 0.5}, [i // 5 for i in range(40)], [i // 5 for i in range(40)],
                               delta=0.5, n_boot=200)
    assert many.notes == []


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="delta"):
        equivalence_verdict({"loss": [1, 2]}, {"loss": [1, 2]}, [0, 1], [0, 1], delta=0.0)
    with pytest.raises(ValueError, match="one side only"):
        equivalence_verdict({"loss": [1, 2]}, {"zlib": [1, 2]}, [0, 1], [0, 1], delta=0.2)
    with pytest.raises(ValueError, match="differ in length"):
        group_bootstrap({"loss": [1, 2]}, {"loss": [1, 2]}, [0], [0, 1])


def test_halves_split_whole_authors_when_each_half_keeps_two_and_items_otherwise():
    tofu10 = [i // 20 for i in range(200)]  # forget05: 10 authors of 20 items
    h = split_halves(tofu10, seed=0)
    assert h.by == "author" and set(h.steering).isdisjoint(h.reporting)
    assert sorted(h.steering + h.reporting) == list(range(200))
    steer_authors = {tofu10[i] for i in h.steering}
    assert len(steer_authors) == 5 and not steer_authors & {tofu10[i] for i in h.reporting}
    tofu2 = [i // 20 for i in range(40)]  # forget01: 2 authors
    h2 = split_halves(tofu2, seed=0)
    assert h2.by == "item within author" and len(h2.steering) == len(h2.reporting) == 20
    assert all(sum(tofu2[i] == a for i in h2.steering) == 10 for a in (0, 1))  # both authors in both halves
    assert split_halves(tofu2, seed=0) == h2 and split_halves(tofu2, seed=1).steering != h2.steering


def test_delta_is_the_largest_calibration_band_rounded_up():
    assert delta_from_bands([0.12, 0.271, 0.2]) == 0.28
    assert delta_from_bands([0.27]) == 0.27
    assert delta_from_bands([0.61]) == 0.5
    with pytest.raises(ValueError):
        delta_from_bands([])


def test_a_pooled_auc_near_half_hides_two_authors_the_per_author_tests_see():
    """One forget author over-forgotten (losses far above the holdout's), the other still remembered (far below):
    their pooled AUC sits near 0.5 and passes, each author's fails, on opposite sides."""
    from lit_unlearn.verification.holdout_equivalence import holdout_verdict

    rng = np.random.default_rng(9)
    hold, gh = _authors(rng, 2, 20, spread=0.0)
    over, under = rng.normal(3.0, 1.0, 20), rng.normal(-3.0, 1.0, 20)
    forget, gf = np.concatenate([over, under]), [0] * 20 + [1] * 20
    v = holdout_verdict({"loss": forget}, {"loss": hold}, gf, gh, delta=0.3, delta_author=0.4, n_boot=1000)
    assert v.pooled.passed and abs(v.pooled.intervals["loss"].auc - 0.5) < 0.1
    assert not v.passed and v.band_ratio > 1
    assert v.authors["0"].worst.side() == "over-forgotten" and v.authors["1"].worst.side() == "remembers"
    assert not v.wants_more_forgetting()  # one side over-forgot: raising the goal would not help
    fine = holdout_verdict({"loss": rng.normal(0, 1, 40)}, {"loss": hold}, gf, gh, 0.3, 0.4, n_boot=1000)
    assert fine.passed and fine.band_ratio == pytest.approx(
        max(fine.pooled.band / 0.3, max(a.band / 0.4 for a in fine.authors.values())))


def test_the_band_ratio_target_is_smaller_is_closer():
    from lit_unlearn.verification.targets import parse_targets

    band, utility = parse_targets("holdout_band_ratio <= 1 and model_utility_ratio >= 0.95")
    assert band.met(0.99) and not band.met(1.01) and band.info.source.endswith("HoldoutVerification")
    assert band.distance(0.4) < band.distance(0.9)  # the closest weights are the most clearly forgotten
    assert utility.met(0.96) and not utility.met(0.94)
