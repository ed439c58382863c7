"""Membership inference and retrain-relative measures for classifiers, as pure functions of per-example outputs.

The vision-unlearning literature (SalUn, ℓ1-sparse unlearning) judges an unlearned model against a model
retrained from scratch on D_r alone:

- UA = 1 − acc(D_f), RA = acc(D_r), TA = acc(test).
- MIA-efficacy: an SVC (C=3, RBF, gamma="auto"), fitted per feature on shadow members (the first |test|
  examples of D_r) against shadow non-members (the test set), labels D_f; efficacy = the fraction of D_f it
  calls non-members. Features: correctness, confidence p_y, entropy, modified entropy, the probability vector.
- Forget-vs-retrain distinguishability: the ROC AUC of a per-example score (loss, entropy) between the unlearned
  model's outputs on D_f and the retrained model's. 0.5 = indistinguishable; far above 0.5 = over-forgetting
  (forget losses higher than a retrained model's: itself a signal of which examples were removed).
- Avg. Gap = mean |metric − retrained metric| over UA, RA, TA and MIA-efficacy.

Modified entropy follows its definition (Song & Mittal 2021): −(1−p_y)·log p_y − Σ_{i≠y} p_i·log(1−p_i).
(The public SalUn code indexes `[:, labels]`, which mixes rows; we do not reproduce that.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "FEATURES",
    "GAP_KEYS",
    "avg_gap",
    "distinguishability_auc",
    "mia_efficacy",
    "output_features",
    "roc_auc",
    "svc_nonmember_fraction",
]

FEATURES = ("correctness", "confidence", "entropy", "m_entropy", "loss", "prob")
GAP_KEYS = ("ua", "ra", "ta", "mia_efficacy")
_LOG_FLOOR = 1e-30


def _log(x: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(x, _LOG_FLOOR))


def output_features(logits: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per-example attack features from classifier logits [N, C] (computed in float64) and labels [N]."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or labels.shape != (logits.shape[0],):
        raise ValueError(f"need logits [N, C] and labels [N]; got {logits.shape} and {labels.shape}")
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    prob = np.exp(log_prob)
    rows = np.arange(len(labels))
    p_y = prob[rows, labels]
    others = prob.copy()
    others[rows, labels] = 0.0
    m_entropy = -(1.0 - p_y) * _log(p_y) - (others * _log(1.0 - others)).sum(axis=1)
    return {
        "correctness": (prob.argmax(axis=1) == labels).astype(np.float64),
        "confidence": p_y,
        "entropy": -(prob * _log(prob)).sum(axis=1),
        "m_entropy": m_entropy,
        "loss": -log_prob[rows, labels],
        "prob": prob,
    }


def svc_nonmember_fraction(shadow_members: np.ndarray, shadow_nonmembers: np.ndarray, target: np.ndarray,
                           C: float = 3.0, gamma: str | float = "auto") -> float:
    """Fit SVC(C, RBF, gamma) on shadow members (label 1) vs non-members (label 0); the fraction of `target`
    predicted non-member. 1-D inputs are one feature per example."""
    from sklearn.svm import SVC

    def as_2d(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        return a.reshape(len(a), -1)

    members, nonmembers, target = as_2d(shadow_members), as_2d(shadow_nonmembers), as_2d(target)
    if len(members) == 0 or len(nonmembers) == 0:
        raise ValueError("MIA needs shadow members (retain examples) and shadow non-members (test examples)")
    if len(target) == 0:
        raise ValueError("MIA-efficacy needs at least one forget example")
    x = np.concatenate([members, nonmembers])
    y = np.concatenate([np.ones(len(members)), np.zeros(len(nonmembers))])
    clf = SVC(C=C, kernel="rbf", gamma=gamma).fit(x, y)
    return float(1.0 - clf.predict(target).mean())


def mia_efficacy(retain: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray], forget: Mapping[str, np.ndarray],
                 feature: str = "confidence") -> float:
    """MIA-efficacy of one model from its `output_features` on D_r, the test set and D_f: shadow members are the
    first |test| retain examples (all of them if D_r is smaller), shadow non-members the test set."""
    if feature not in FEATURES:
        raise ValueError(f"unknown MIA feature {feature!r}; choose one of {FEATURES}")
    n = min(len(test[feature]), len(retain[feature]))
    parts = (retain[feature][:n], test[feature], forget[feature])
    if not all(np.isfinite(p).all() for p in parts):  # a diverged model: no attack to fit, nothing measurable
        return float("nan")
    return svc_nonmember_fraction(*parts)


def roc_auc(negatives: Sequence[float], positives: Sequence[float]) -> float:
    """ROC AUC = P(score of a positive > score of a negative) + ½·P(tie), from ranks (Mann-Whitney U)."""
    from scipy.stats import rankdata

    neg, pos = np.asarray(negatives, dtype=np.float64), np.asarray(positives, dtype=np.float64)
    if neg.size == 0 or pos.size == 0:
        raise ValueError("an AUC needs at least one score on each side")
    ranks = rankdata(np.concatenate([neg, pos]))  # ties get their average rank
    u = ranks[neg.size:].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (neg.size * pos.size))


def distinguishability_auc(unlearned: Sequence[float], retrained: Sequence[float]) -> tuple[float, float]:
    """(folded AUC, raw AUC) of telling the unlearned model's per-example scores on D_f from the retrained model's.

    raw > 0.5: the unlearned scores are higher (e.g. forget losses above the retrained model's: over-forgetting);
    raw < 0.5: lower (under-forgetting). folded = max(raw, 1 − raw): 0.5 is indistinguishable, 1 fully separable.
    """
    raw = roc_auc(retrained, unlearned)
    return max(raw, 1.0 - raw), raw


def avg_gap(values: Mapping[str, float], reference: Mapping[str, float], keys: Sequence[str] = GAP_KEYS) -> float:
    """Mean |values[k] − reference[k]| over `keys` (the field's Avg. Gap over UA, RA, TA, MIA-efficacy)."""
    missing = [k for k in keys if values.get(k) is None or reference.get(k) is None]
    if missing:
        raise KeyError(f"Avg. Gap needs {list(keys)}; missing {missing}")
    return float(np.mean([abs(values[k] - reference[k]) for k in keys]))
