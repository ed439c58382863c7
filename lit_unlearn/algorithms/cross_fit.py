"""A learned membership attack's maths: L2-penalised logistic regression and cross-fitting, in numpy.

`fit_logistic` minimises C·Σ_i logloss(y_i, σ(x_i·w + b)) + ½‖w‖² (the intercept unpenalised: scikit-learn's
LogisticRegression with its default lbfgs solver), by Newton's method on standardised features, which converges in
a few steps on the dozen features an attack has.

`cross_fitted_scores` never scores an item with a model fitted on it: the items are split into k folds, each fold is
scored by a model fitted on the other folds, and this is repeated over `repeats` fold seeds, the scores averaged.
Folds keep authors whole when each side (label) has at least two of them: a classifier that has seen an author's
other items could recognise the author's style instead of the model's memory, which a model that never saw the
author shows as much as one that did. With fewer authors on a side, items are split within authors (stratified by
label) and the caller should say so.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_logistic", "predict_logistic", "standardise", "fold_ids", "cross_fitted_scores", "MIN_GROUPS"]

MIN_GROUPS = 2  # per side, for folds that keep groups whole


def standardise(train: np.ndarray, *others: np.ndarray):
    """Columns centred and scaled by the training rows' mean and population std (constant columns: scale 1)."""
    mean, std = train.mean(axis=0), train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return [(x - mean) / std for x in (train, *others)]


def fit_logistic(x: np.ndarray, y: np.ndarray, c: float = 1.0, max_iter: int = 100,
                 tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """(w, b) minimising c·Σ logloss + ½‖w‖² by Newton's method (x: [n, d], y in {0, 1})."""
    n, d = x.shape
    a = np.hstack([x, np.ones((n, 1))])
    theta = np.zeros(d + 1)
    penalty = np.ones(d + 1)
    penalty[-1] = 0.0  # the intercept is not penalised
    for _ in range(max_iter):
        p = _sigmoid(a @ theta)
        grad = c * a.T @ (p - y) + penalty * theta
        hess = c * (a * (p * (1 - p))[:, None]).T @ a + np.diag(penalty)
        step = np.linalg.solve(hess + 1e-12 * np.eye(d + 1), grad)
        theta -= step
        if np.max(np.abs(step)) < tol:
            break
    return theta[:-1], float(theta[-1])


def predict_logistic(x: np.ndarray, w: np.ndarray, b: float) -> np.ndarray:
    return _sigmoid(x @ w + b)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # exp(-z) overflows to inf for z < -709 and the result is then its exact limit, 0: not worth a warning to a user
    # reading a verdict (a separable item's score saturates)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def fold_ids(y: np.ndarray, groups: list, k: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Each item's fold (0..k'-1) and how they were made ("group" or "item"). Per label, in order: that side's
    distinct groups (first appearance) permuted by `rng` and dealt to folds round-robin; or, with fewer than
    MIN_GROUPS groups on a side, that side's items permuted and dealt. k' = min(k, the smallest side's count of
    what is dealt)."""
    y = np.asarray(y)
    sides = [np.flatnonzero(y == label) for label in (0, 1)]
    side_groups = [list(dict.fromkeys(groups[i] for i in idx)) for idx in sides]
    by_group = min(len(g) for g in side_groups) >= MIN_GROUPS
    units = [len(g) if by_group else len(idx) for g, idx in zip(side_groups, sides)]
    k = max(2, min(k, *units))
    folds = np.empty(len(y), dtype=np.int64)
    for idx, names in zip(sides, side_groups):
        if by_group:
            order = rng.permutation(len(names))
            fold_of = {names[g]: j % k for j, g in enumerate(order)}
            folds[idx] = [fold_of[groups[i]] for i in idx]
        else:
            order = rng.permutation(len(idx))
            folds[idx[order]] = np.arange(len(idx)) % k
    return folds, "group" if by_group else "item"


def cross_fitted_scores(x: np.ndarray, y: np.ndarray, groups: list, k: int = 5, repeats: int = 5, seed: int = 0,
                        c: float = 1.0) -> tuple[np.ndarray, str]:
    """Each item's out-of-fold P(y = 1 | x), averaged over `repeats` fold assignments (fold seeds drawn from one
    Generator(seed) in order), and the fold kind."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    total = np.zeros(len(y))
    kind = "group"
    for _ in range(repeats):
        folds, kind = fold_ids(y, groups, k, rng)
        for f in np.unique(folds):
            test = folds == f
            train_x, test_x = standardise(x[~test], x[test])
            w, b = fit_logistic(train_x, y[~test], c)
            total[test] += predict_logistic(test_x, w, b)
    return total / repeats, kind
