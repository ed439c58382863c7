"""The learned membership attack: a logistic regression over each item's features of the model's forward pass (the
scalar attacks, surprisal quantiles, the top-1 share, and the gradient norm where it was computed), cross-fitted so
that no item is scored by a classifier fitted on it (lit_unlearn.algorithms.cross_fit).

No unlearning objective reads it: it is fitted at verification time, on the items being judged, to whatever
separates them in this model. Its score is the out-of-fold P(holdout | features), so, like every attack here,
higher means "looks never trained on", and its AUC, interval and margin are computed as the other attacks' are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lit_unlearn.algorithms.cross_fit import cross_fitted_scores
from lit_unlearn.metrics.membership_attacks import FEATURES, SCORING_ATTACKS

__all__ = ["LEARNED_INPUTS", "learned_inputs", "learned_attack_scores"]

LEARNED_INPUTS = (*SCORING_ATTACKS, "gradnorm", *FEATURES)


def learned_inputs(forget: Mapping[str, Sequence[float]], holdout: Mapping[str, Sequence[float]]) -> list[str]:
    """The learned attack's inputs both sides have, in LEARNED_INPUTS' order."""
    return [name for name in LEARNED_INPUTS if name in forget and name in holdout]


def learned_attack_scores(forget: Mapping[str, Sequence[float]], holdout: Mapping[str, Sequence[float]],
                          forget_groups: Sequence, holdout_groups: Sequence, folds: int = 5, repeats: int = 5,
                          seed: int = 0) -> tuple[list[float], list[float], str]:
    """(forget items' scores, holdout items' scores, fold kind "group" or "item"): each item's out-of-fold
    probability of being a holdout item, averaged over `repeats` fold assignments."""
    names = learned_inputs(forget, holdout)
    if not names:
        raise ValueError(f"the learned attack needs per-item features; none of {list(LEARNED_INPUTS)} is given")
    n_f, n_h = len(forget_groups), len(holdout_groups)
    x = np.array([[*forget[n]] + [*holdout[n]] for n in names], dtype=np.float64).T
    if x.shape[0] != n_f + n_h:
        raise ValueError(f"features and groups differ in length: {x.shape[0]} rows vs {n_f} + {n_h} items")
    y = np.r_[np.zeros(n_f), np.ones(n_h)]
    groups = [("forget", g) for g in forget_groups] + [("holdout", g) for g in holdout_groups]
    scores, kind = cross_fitted_scores(x, y, groups, folds, repeats, seed)
    return scores[:n_f].tolist(), scores[n_f:].tolist(), kind
