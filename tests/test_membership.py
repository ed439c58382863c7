"""Membership-inference and retrain-relative measures against independent references: scikit-learn's
roc_auc_score and SVC written out here, brute-force pair counting, and features computed by hand."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.svm import SVC

from lit_unlearn.metrics.membership import (
    avg_gap,
    distinguishability_auc,
    mia_efficacy,
    output_features,
    roc_auc,
    svc_nonmember_fraction,
)


def brute_force_auc(neg, pos):
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auc_equals_pair_counting_and_sklearn_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        neg = np.round(rng.normal(0, 1, rng.integers(1, 40)), 1)  # rounding makes ties
        pos = np.round(rng.normal(0.5, 1, rng.integers(1, 40)), 1)
        ours = roc_auc(neg, pos)
        assert ours == pytest.approx(brute_force_auc(neg, pos), abs=1e-12)
        labels = np.r_[np.zeros(len(neg)), np.ones(len(pos))]
        assert ours == pytest.approx(roc_auc_score(labels, np.r_[neg, pos]), abs=1e-12)
    with pytest.raises(ValueError, match="at least one"):
        roc_auc([], [1.0])


def test_distinguishability_is_folded_and_keeps_the_direction():
    retrained = np.array([5.0, 6.0, 7.0])
    over = np.array([50.0, 60.0, 70.0])  # losses far above the retrained model's
    under = np.array([0.1, 0.2, 0.3])
    assert distinguishability_auc(over, retrained) == (1.0, 1.0)
    assert distinguishability_auc(under, retrained) == (1.0, 0.0)
    assert distinguishability_auc(retrained, retrained) == (0.5, 0.5)


def test_features_by_hand():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]])
    labels = np.array([0, 2])
    f = output_features(logits, labels)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(f["prob"], p, rtol=1e-12)
    np.testing.assert_allclose(f["confidence"], [p[0, 0], p[1, 2]], rtol=1e-12)
    np.testing.assert_allclose(f["loss"], -np.log([p[0, 0], p[1, 2]]), rtol=1e-12)
    np.testing.assert_allclose(f["entropy"], -(p * np.log(p)).sum(1), rtol=1e-12)
    np.testing.assert_array_equal(f["correctness"], [1.0, 0.0])
    # Modified entropy (Song & Mittal): −(1−p_y)log p_y − Σ_{i≠y} p_i log(1−p_i), written out per row.
    for i, y in enumerate(labels):
        expected = -(1 - p[i, y]) * np.log(p[i, y]) - sum(p[i, k] * np.log(1 - p[i, k]) for k in range(3) if k != y)
        assert f["m_entropy"][i] == pytest.approx(expected, rel=1e-12)


def test_svc_fraction_matches_sklearn_written_out():
    rng = np.random.default_rng(1)
    members = rng.beta(8, 1, 60)  # confident on members
    nonmembers = rng.beta(2, 2, 50)
    target = rng.beta(3, 2, 40)
    clf = SVC(C=3, kernel="rbf", gamma="auto").fit(np.r_[members, nonmembers][:, None],
                                                   np.r_[np.ones(60), np.zeros(50)])
    expected = 1 - clf.predict(target[:, None]).mean()
    assert svc_nonmember_fraction(members, nonmembers, target) == pytest.approx(expected, abs=0)
    # Brute-force-obvious case: separable features, targets exactly like the non-members.
    assert svc_nonmember_fraction(np.ones(20), np.zeros(20), np.zeros(7)) == 1.0
    assert svc_nonmember_fraction(np.ones(20), np.zeros(20), np.ones(7)) == 0.0


def test_mia_efficacy_uses_the_first_test_sized_slice_of_retain():
    rng = np.random.default_rng(2)
    retain = {"confidence": np.r_[np.full(10, 0.99), np.full(90, 0.1)]}  # only the first 10 look like members
    test = {"confidence": rng.uniform(0.0, 0.5, 10)}
    forget = {"confidence": np.full(5, 0.99)}
    # With shadow members = retain[:10] (all 0.99) the forget set (0.99) is called "member": efficacy 0.
    assert mia_efficacy(retain, test, forget) == 0.0
    assert np.isnan(mia_efficacy(retain, test, {"confidence": np.array([np.nan])}))  # a diverged model
    with pytest.raises(ValueError, match="unknown MIA feature"):
        mia_efficacy(retain, test, forget, feature="nope")


def test_avg_gap():
    a = {"ua": 0.9, "ra": 0.95, "ta": 0.8, "mia_efficacy": 0.7}
    r = {"ua": 1.0, "ra": 1.0, "ta": 0.85, "mia_efficacy": 1.0}
    assert avg_gap(a, r) == pytest.approx((0.1 + 0.05 + 0.05 + 0.3) / 4)
    with pytest.raises(KeyError, match="mia_efficacy"):
        avg_gap({"ua": 1, "ra": 1, "ta": 1}, r)
