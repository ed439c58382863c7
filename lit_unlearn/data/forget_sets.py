"""Which training examples to forget. Each spec maps the training labels to (forget, retain) index arrays.

- ClassForget: every example of one class (class unlearning).
- RandomForget: a seeded uniform random subset.
- MixtureForget (the HAMU paper's ρ-mixture): a forget set of N examples, (1−ρ)·N drawn from the forget class
  and ρ·N drawn uniformly from the other classes, so that a fraction ρ of the forget set looks like the retain
  set. The retain set is the complement. ρ = 0 is class forgetting (of N examples of the class); larger ρ makes
  g_r and g_f more aligned, i.e. a harder, more conflicting unlearning problem.
- IndexForget: explicit index lists (e.g. read from a file), checked for overlap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lit_unlearn.core.errors import UserError

__all__ = ["ForgetSpec", "ClassForget", "RandomForget", "MixtureForget", "IndexForget", "check_split"]


def check_split(forget: np.ndarray, retain: np.ndarray, n: int) -> None:
    """Refuse splits that cannot train: empty sides, out-of-range, duplicated or overlapping indices."""
    if forget.size == 0:
        raise UserError("the forget set is empty: nothing to unlearn. Check the forget class / fraction / indices.")
    if retain.size == 0:
        raise UserError("the retain set is empty: every training example was put in the forget set.")
    for name, idx in (("forget", forget), ("retain", retain)):
        if idx.min() < 0 or idx.max() >= n:
            raise UserError(f"{name} indices must lie in [0, {n}); got range [{idx.min()}, {idx.max()}]")
        if np.unique(idx).size != idx.size:
            raise UserError(f"the {name} indices contain duplicates")
    overlap = np.intersect1d(forget, retain)
    if overlap.size:
        raise UserError(
            f"{overlap.size} example(s) are in both the forget and the retain set (first: {overlap[:5].tolist()}); "
            "a forget/retain split must be disjoint."
        )


def _complement(forget: np.ndarray, n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[forget] = False
    return np.flatnonzero(mask)


class ForgetSpec:
    def split(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(forget indices, retain indices), both sorted, disjoint and non-empty."""
        forget = np.sort(np.asarray(self.forget_indices(np.asarray(labels)), dtype=np.int64))
        retain = self.retain_indices(forget, len(labels))
        check_split(forget, retain, len(labels))
        return forget, retain

    def forget_indices(self, labels: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def retain_indices(self, forget: np.ndarray, n: int) -> np.ndarray:
        return _complement(forget, n)

    @property
    def forget_class(self) -> int | None:
        """The class being forgotten, where the spec has one (adds per-class test splits to the report)."""
        return None


class ClassForget(ForgetSpec):
    def __init__(self, forget_class: int = 0) -> None:
        self._class = forget_class

    @property
    def forget_class(self) -> int:
        return self._class

    def forget_indices(self, labels: np.ndarray) -> np.ndarray:
        idx = np.flatnonzero(labels == self._class)
        if idx.size == 0:
            present = sorted(np.unique(labels).tolist())
            raise UserError(f"forget_class={self._class} has no training examples; classes present: {present}")
        return idx


class RandomForget(ForgetSpec):
    def __init__(self, fraction: float | None = 0.1, size: int | None = None, seed: int = 0) -> None:
        if (fraction is None) == (size is None):
            raise UserError("give exactly one of fraction or size for RandomForget")
        if fraction is not None and not 0.0 < fraction < 1.0:
            raise UserError(f"fraction must be in (0, 1), got {fraction}")
        self.fraction, self.size, self.seed = fraction, size, seed

    def forget_indices(self, labels: np.ndarray) -> np.ndarray:
        n = len(labels)
        k = self.size if self.size is not None else int(round(self.fraction * n))
        if not 0 < k < n:
            raise UserError(f"a random forget set of {k} out of {n} examples leaves no forget or no retain set")
        return np.random.default_rng(self.seed).choice(n, size=k, replace=False)


class MixtureForget(ForgetSpec):
    def __init__(self, forget_class: int = 0, rho: float = 0.0, size: int | None = None, seed: int = 0) -> None:
        if not 0.0 <= rho <= 1.0:
            raise UserError(f"rho must be in [0, 1], got {rho}")
        self._class, self.rho, self.size, self.seed = forget_class, rho, size, seed

    @property
    def forget_class(self) -> int:
        return self._class

    def forget_indices(self, labels: np.ndarray) -> np.ndarray:
        in_class = np.flatnonzero(labels == self._class)
        others = np.flatnonzero(labels != self._class)
        size = self.size if self.size is not None else in_class.size
        n_similar = int(round(self.rho * size))
        n_class = size - n_similar
        if size <= 0:
            raise UserError("the mixture forget set would be empty (size 0 or no examples of the forget class)")
        if n_class > in_class.size:
            raise UserError(f"need {n_class} examples of class {self._class}, only {in_class.size} exist")
        if n_similar > others.size:
            raise UserError(f"need {n_similar} examples of other classes, only {others.size} exist")
        rng = np.random.default_rng(self.seed)
        return np.concatenate([
            rng.choice(in_class, size=n_class, replace=False),
            rng.choice(others, size=n_similar, replace=False),
        ])


class IndexForget(ForgetSpec):
    def __init__(self, forget: Sequence[int], retain: Sequence[int] | None = None) -> None:
        self.forget = np.asarray(forget, dtype=np.int64)
        self.retain = None if retain is None else np.sort(np.asarray(retain, dtype=np.int64))

    def forget_indices(self, labels: np.ndarray) -> np.ndarray:
        return self.forget

    def retain_indices(self, forget: np.ndarray, n: int) -> np.ndarray:
        return _complement(forget, n) if self.retain is None else self.retain
