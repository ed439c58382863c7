"""What a verdict could have seen: how often its equivalence test fails a model whose forget items an attack tells
from holdout items with a true AUC t, for the verdict's own authors, items and margins.

A "forgotten" that rests on a check which could not have failed is no evidence. So every check (an attack under a
condition) carries its power, simulated the way the calibration simulates it: an item's score is an author effect
(a share `author_share` of its variance: items of one author are correlated) plus item noise, and the forget items
are shifted down by √2·Φ⁻¹(t), which gives a binormal AUC of t. Each simulated data set is judged as
holdout_equivalence judges real scores: the pooled percentile interval and one per forget author, against their
margins. The bootstrap counts are drawn once per item structure and shared by every simulated set and every t
(common random numbers: the rate rises with t without simulation noise crossing over).

- A check has power when its margins are below 0.5 and it fails a model of true AUC POWER_AUC at least POWER_RATE of
  the time; one without power counts for nothing: it never makes a verdict pass. The rates are taken at margins no
  narrower than a simulated never-trained model passes NULL_PASS of the time: a check whose margins the simulated null
  crosses more often would "catch" noise (its null pass rate is reported beside).
- Its detectable AUC is the smallest t (to 0.01) it fails DETECT_RATE of the time.
- Where a check lacks power, `authors_needed` says how many more holdout authors like the present ones would give it
  power, its margins recalibrated in proportion to the simulated null's spread (a margin of 0.5 never fails).

Everything here is numpy and scipy; no model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from lit_unlearn.verification.holdout_equivalence import bootstrap_counts, group_indices

__all__ = ["POWER_AUC", "POWER_RATE", "DETECT_RATE", "NULL_PASS", "CheckPower", "fail_rates", "check_power", "author_share",
           "authors_needed", "null_reach", "judged_margin", "rate_with_more_authors", "SIMS", "N_BOOT"]

POWER_AUC = 0.8     # a memory this plain must be caught...
POWER_RATE = 0.5    # ...at least this often for a check to count
DETECT_RATE = 0.8   # the detectable AUC: caught this often
NULL_PASS = 0.9     # power is taken at margins a simulated never-trained model passes at least this often
SIMS = 100          # simulated data sets per rate
N_BOOT = 200        # bootstrap replicates per simulated set (the verdict's intervals use more; the rate barely moves)
_TOP = 0.995        # the largest true AUC simulated (Φ⁻¹(1) is infinite)


@dataclass(frozen=True)
class CheckPower:
    margin: tuple[float, float]        # (pooled, per author)
    author_share: float
    null_pass: float                   # how often a never-trained model (true AUC 0.5) passes, in simulation
    judged_margin: tuple[float, float]  # the margins the rates are taken at: no narrower than NULL_PASS of the null needs
    rate: float                        # how often a model of true AUC POWER_AUC fails this check
    detectable_auc: float | None       # the smallest true AUC failed DETECT_RATE of the time; None: none up to _TOP

    @property
    def has_power(self) -> bool:
        return min(self.judged_margin) < 0.5 and self.rate >= POWER_RATE

    def as_dict(self) -> dict:
        return {**asdict(self), "has_power": self.has_power}


def author_share(values: Sequence[float], groups: Sequence) -> float | None:
    """The share of the scores' variance between authors (one-way ANOVA's estimate, clipped to [0, 0.95]); None with
    fewer than 2 authors or too few items to tell."""
    x = np.asarray(values, dtype=np.float64)
    members = group_indices(groups)
    if len(members) < 2 or len(x) <= len(members):
        return None
    means = np.array([x[m].mean() for m in members])
    sizes = np.array([len(m) for m in members])
    within = sum(((x[m] - mu) ** 2).sum() for m, mu in zip(members, means)) / (len(x) - len(members))
    between = (sizes * (means - x.mean()) ** 2).sum() / (len(members) - 1)
    n0 = (len(x) - (sizes ** 2).sum() / len(x)) / (len(members) - 1)
    var_b = max(0.0, (between - within) / n0)
    return float(min(0.95, var_b / (var_b + within))) if var_b + within > 0 else 0.0


def _reach(counts_f: np.ndarray, sum_h: np.ndarray, weighted: np.ndarray, alpha: float) -> np.ndarray:
    """[sims]: how far each simulated set's percentile interval reaches from 0.5. weighted: [sims, n_f, n_boot],
    Σ_j [h_j > f_i]·v_bj (ties ½) over the holdout draws v; counts_f: [n_boot, n_f] the forget side's draws."""
    reps = np.einsum("bi,sib->sb", counts_f, weighted) / (counts_f.sum(1) * sum_h)[None, :]
    low, high = np.quantile(reps, [alpha, 1 - alpha], axis=1)
    return np.maximum(0.5 - low, high - 0.5)


def fail_rates(aucs: Sequence[float], forget_groups: Sequence, holdout_groups: Sequence, margin: tuple[float, float],
               share: float, alpha: float = 0.05, sims: int = SIMS, n_boot: int = N_BOOT, seed: int = 0
               ) -> np.ndarray:
    """How often the pooled-and-per-author test fails at each true AUC of `aucs` (see the module docstring)."""
    pooled, author = _reaches(aucs, forget_groups, holdout_groups, share, alpha, sims, n_boot, seed)
    return _failed(pooled, author, margin).mean(axis=1)


def _failed(pooled: np.ndarray, author: np.ndarray, margin: tuple[float, float]) -> np.ndarray:
    """Which simulated sets the test fails: the pooled interval or any author's reaches past its margin."""
    return (pooled > margin[0]) | (author > margin[1])


def null_reach(forget_groups: Sequence, holdout_groups: Sequence, share: float, alpha: float = 0.05,
               quantile: float = 0.9, sims: int = SIMS, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float]:
    """(pooled, per author): the `quantile` of how far never-trained sets' intervals reach from 0.5 in simulation,
    the spread a margin must cover on this item structure."""
    return _null_reach(tuple(map(str, forget_groups)), tuple(map(str, holdout_groups)), float(share), float(alpha),
                       float(quantile), int(sims), int(n_boot), int(seed))


@lru_cache(maxsize=256)
def _null_reaches(forget_groups: tuple, holdout_groups: tuple, share: float, alpha: float, sims: int, n_boot: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[sims] each: the never-trained sets' pooled and largest per-author reaches (simulated once per structure)."""
    pooled, author = _reaches([0.5], forget_groups, holdout_groups, share, alpha, sims, n_boot, seed)
    return pooled[0], author[0]


def _null_reach(forget_groups: tuple, holdout_groups: tuple, share: float, alpha: float, quantile: float, sims: int,
                n_boot: int, seed: int) -> tuple[float, float]:
    pooled, author = _null_reaches(forget_groups, holdout_groups, share, alpha, sims, n_boot, seed)
    return float(np.quantile(pooled, quantile)), float(np.quantile(author, quantile))


def _reaches(aucs, forget_groups, holdout_groups, share, alpha, sims, n_boot, seed) -> tuple[np.ndarray, np.ndarray]:
    """[len(aucs), sims] each: the pooled interval's reach from 0.5, and the largest per-author reach."""
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    f_members, h_members = group_indices(forget_groups), group_indices(holdout_groups)
    n_f, n_h = len(forget_groups), len(holdout_groups)
    counts_f = bootstrap_counts(f_members, n_f, n_boot, rng)
    counts_h = bootstrap_counts(h_members, n_h, n_boot, rng)
    per_author = [bootstrap_counts([np.arange(len(m))], len(m), n_boot, rng).astype(np.float32) for m in f_members]
    counts_f, counts_h = counts_f.astype(np.float32), counts_h.astype(np.float32)
    sum_h = counts_h.sum(1)

    def draw(members, n):
        effect = np.zeros((sims, n))
        for m in members:
            effect[:, m] = rng.normal(0.0, math.sqrt(share), (sims, 1))
        return effect + rng.normal(0.0, math.sqrt(1.0 - share), (sims, n))

    base_f, h = draw(f_members, n_f), draw(h_members, n_h)
    pooled, author = np.zeros((len(aucs), sims)), np.zeros((len(aucs), sims))
    for k, t in enumerate(aucs):
        f = base_f - math.sqrt(2.0) * norm.ppf(min(float(t), _TOP))
        above = ((h[:, None, :] > f[:, :, None]) + 0.5 * (h[:, None, :] == f[:, :, None])).astype(np.float32)
        weighted = above @ counts_h.T                 # [sims, n_f, n_boot]; small integers and halves: exact
        pooled[k] = _reach(counts_f, sum_h, weighted, alpha)
        for m, counts in zip(f_members, per_author):
            author[k] = np.maximum(author[k], _reach(counts, sum_h, weighted[:, m, :], alpha))
    return pooled, author


def judged_margin(forget_groups: Sequence, holdout_groups: Sequence, margin: tuple[float, float], share: float,
                  alpha: float = 0.05, sims: int = SIMS, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float]:
    """The margins a check's rates are taken at: its own, widened to what a simulated never-trained model passes
    at least NULL_PASS of the time (at most 0.5): each scope's reach at 1 − (1 − NULL_PASS)/2, so that the two
    together fail at most 1 − NULL_PASS (Bonferroni)."""
    need = null_reach(forget_groups, holdout_groups, share, alpha, 1 - (1 - NULL_PASS) / 2, sims, n_boot, seed)
    return max(margin[0], min(0.5, need[0])), max(margin[1], min(0.5, need[1]))


@lru_cache(maxsize=512)
def _check_power(forget_groups: tuple, holdout_groups: tuple, margin: tuple[float, float], share: float,
                 alpha: float, sims: int, n_boot: int, seed: int) -> CheckPower:
    if min(margin) >= 0.5:  # an interval never reaches past 0.5 from 0.5: this check cannot fail
        return CheckPower(margin, share, 1.0, margin, 0.0, None)
    pooled, author = _null_reaches(forget_groups, holdout_groups, share, alpha, sims, n_boot, seed)
    null_pass = 1.0 - float(_failed(pooled, author, margin).mean())  # the null judged_margin reads
    # A check that fails never-trained sets as often as remembering ones has seen noise, not memory: where the
    # simulated null needs wider margins than the check's, its rates are taken at those (power is never borrowed).
    judged = judged_margin(forget_groups, holdout_groups, margin, share, alpha, sims, n_boot, seed)
    if min(judged) >= 0.5:
        return CheckPower(margin, share, null_pass, judged, 0.0, None)
    args = (forget_groups, holdout_groups, judged, share, alpha, sims, n_boot, seed)
    rate = float(fail_rates([POWER_AUC], *args)[0])
    grid = np.round(np.arange(0.51, 1.0, 0.01), 2)
    lo, hi = 0, len(grid)                       # bisection for the first grid point failed DETECT_RATE of the time
    if fail_rates([_TOP], *args)[0] < DETECT_RATE:
        return CheckPower(margin, share, null_pass, judged, rate, None)
    while lo < hi:
        mid = (lo + hi) // 2
        if fail_rates([grid[mid]], *args)[0] >= DETECT_RATE:
            hi = mid
        else:
            lo = mid + 1
    return CheckPower(margin, share, null_pass, judged, rate, float(grid[lo]) if lo < len(grid) else float(_TOP))


def check_power(forget_groups: Sequence, holdout_groups: Sequence, margin: tuple[float, float], share: float,
                alpha: float = 0.05, sims: int = SIMS, n_boot: int = N_BOOT, seed: int = 0) -> CheckPower:
    """The power of one check (an attack under a condition) on these authors with these margins. The author share
    is rounded to 0.05 (finer does not change a rate beyond simulation noise, and equal checks are computed once)."""
    share = round(min(0.95, max(0.0, share)) * 20) / 20
    margin = (float(margin[0]), float(margin[1]))
    return _check_power(tuple(map(str, forget_groups)), tuple(map(str, holdout_groups)), margin, share, float(alpha),
                        int(sims), int(n_boot), int(seed))


def rate_with_more_authors(forget_groups: Sequence, holdout_groups: Sequence, margin: tuple[float, float], share: float,
                           k: int, alpha: float = 0.05) -> float:
    """How often a true AUC of POWER_AUC fails the check with k more holdout authors (the present authors' median
    item count each), its margins scaled as `authors_needed` says. More simulated sets than a check's rate uses: the
    margins' scale is a ratio of two simulated quantiles."""
    per = int(np.median([len(m) for m in group_indices(holdout_groups)]))
    more = [*map(str, holdout_groups), *(f"more-{j}" for j in range(k) for _ in range(per))]
    here = null_reach(forget_groups, holdout_groups, share, alpha, sims=4 * SIMS)
    there = null_reach(forget_groups, more, share, alpha, sims=4 * SIMS)
    scaled = tuple(min(0.5, m * t / h) if h > 0 else m for m, t, h in zip(margin, there, here))
    judged = judged_margin(forget_groups, more, scaled, share, alpha, sims=2 * SIMS)
    if min(judged) >= 0.5:
        return 0.0
    return float(fail_rates([POWER_AUC], forget_groups, more, judged, share, alpha, sims=2 * SIMS)[0])


def authors_needed(forget_groups: Sequence, holdout_groups: Sequence, margin: tuple[float, float], share: float,
                   alpha: float = 0.05, most: int = 64) -> int | None:
    """How many more holdout authors (each with the present authors' median item count) would give this check power,
    by doubling then bisection; None if its margins are 0.5 or even `most` more would not.

    Margins are calibrated for an item structure: with more holdout authors a recalibration would give narrower ones.
    They are taken to shrink as the simulated null's spread does (margin × null reach there / null reach here, the
    calibration's inflation over the simulation kept); with the margins held fixed, more data would *lower* the rate
    at which an AUC of 0.8 crosses them (a noisier test crosses any margin more often, never-trained models too)."""
    if min(margin) >= 0.5:
        return None

    def powered(k: int) -> bool:
        return rate_with_more_authors(forget_groups, holdout_groups, margin, share, k, alpha) >= POWER_RATE

    if powered(0):
        return 0
    k = 1
    while k <= most and not powered(k):
        k *= 2
    if k > most:
        return None
    lo, hi = k // 2 + 1, k
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if powered(mid) else (mid + 1, hi)
    return hi
