"""TOFU's metric definitions as pure functions of per-item numbers (no model, no framework).

Inputs are per-item mean answer-token NLLs (the length-normalised losses TOFU uses): p = exp(−nll).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.stats
import torch
from torch import Tensor

__all__ = [
    "probability",
    "normalised_probability",
    "truth_ratio",
    "forget_truth_ratio",
    "true_truth_ratio",
    "forget_quality",
    "model_utility",
    "MODEL_UTILITY_KEYS",
    "utility_of",
    "rouge_l_scorer",
    "rouge_l_recall",
    "min_k_score",
    "min_k_plus_plus_score",
    "min_k_plus_plus_from_moments",
    "zlib_score",
    "extraction_strength",
    "exact_memorization",
    "auc",
    "privleak",
]

MODEL_UTILITY_KEYS = (
    "retain/prob", "retain/rouge", "retain/truth_ratio",
    "real_authors/prob", "real_authors/rouge", "real_authors/truth_ratio",
    "world_facts/prob", "world_facts/rouge", "world_facts/truth_ratio",
)


def probability(nll: Tensor) -> Tensor:
    """Per-item answer probability exp(−mean token NLL)."""
    return torch.exp(-nll)


def normalised_probability(nll_true: Tensor, nll_perturbed: Tensor) -> Tensor:
    """p_true / (p_true + Σ_k p_perturbed,k), per item (real authors, world facts). nll_perturbed: [N, K]."""
    p_true, p_wrong = torch.exp(-nll_true), torch.exp(-nll_perturbed).sum(-1)
    return p_true / (p_true + p_wrong)


def truth_ratio(nll_correct: Tensor, nll_perturbed: Tensor) -> Tensor:
    """TR = p_wrong / p_correct with p_wrong the geometric mean of the perturbed answers' normalised
    probabilities: exp(−mean_k nll_k) / exp(−nll_correct), computed in log space."""
    return torch.exp(nll_correct - nll_perturbed.mean(-1))


def forget_truth_ratio(tr: Tensor) -> float:
    """Forget-set aggregation ("closer to 1 is better"): mean(min(TR, 1/TR))."""
    return torch.minimum(tr, 1.0 / tr).mean().item()


def true_truth_ratio(tr: Tensor) -> float:
    """Retain / real-authors / world-facts aggregation ("true is better"): mean(max(0, 1 − TR))."""
    return torch.clamp(1.0 - tr, min=0.0).mean().item()


def forget_quality(tr_unlearned: Sequence[float], tr_retrained: Sequence[float]) -> float:
    """p-value of the two-sample KS test between per-item forget truth ratios (unlearned vs retrained)."""
    if len(tr_unlearned) == 0 or len(tr_retrained) == 0:
        raise ValueError("forget quality needs per-item truth ratios of both the unlearned and the retrained model")
    return float(scipy.stats.ks_2samp(np.asarray(tr_unlearned), np.asarray(tr_retrained)).pvalue)


def utility_of(values: Mapping[str, float]) -> tuple[float | None, tuple[str, ...]]:
    """(utility, the numbers it is the harmonic mean of): TOFU's model utility where all nine numbers are there;
    otherwise the harmonic mean of those present (your own data: the retain set's probability and ROUGE-L, and its
    truth ratio when it has perturbed answers)."""
    present = tuple(k for k in MODEL_UTILITY_KEYS if values.get(k) is not None)
    if not present:
        return None, ()
    vals = [float(values[k]) for k in present]
    return (0.0 if any(v <= 0 for v in vals) else float(scipy.stats.hmean(vals))), present


def model_utility(values: Mapping[str, float]) -> float:
    """Harmonic mean of TOFU's nine utility numbers (retain / real authors / world facts × prob, ROUGE, TR)."""
    missing = [k for k in MODEL_UTILITY_KEYS if k not in values]
    if missing:
        raise KeyError(f"model utility needs {missing}")
    vals = [float(values[k]) for k in MODEL_UTILITY_KEYS]
    if any(v <= 0 for v in vals):
        return 0.0  # the harmonic mean's limit when any term is 0
    return float(scipy.stats.hmean(vals))


@functools.cache
def rouge_l_scorer(use_stemmer: bool):
    """rouge-score's ROUGE-L scorer, built once per setting (TOFU stems, MUSE does not)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)


def rouge_l_recall(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-L recall with stemming (rouge-score), per item."""
    scorer = rouge_l_scorer(True)
    return [scorer.score(ref, pred)["rougeL"].recall for pred, ref in zip(predictions, references)]


def min_k_score(token_logprobs: Tensor, k: float = 0.4, rounding: str = "ceil") -> float:
    """Min-K%: −mean of the lowest k·|y| token log-probabilities of one answer (higher: less likely seen).
    rounding: "ceil" (ours) or "floor" (open-unlearning's int(k·n)); at least one token either way."""
    if token_logprobs.numel() == 0:
        return 0.0  # open-unlearning's value for an answer with no scored token
    kn = k * token_logprobs.numel()
    n = max(1, math.ceil(kn) if rounding == "ceil" else int(kn))
    return -torch.sort(token_logprobs).values[:n].mean().item()


def min_k_plus_plus_from_moments(token_logprobs: Tensor, mu: Tensor, var: Tensor, k: float = 0.4,
                                 rounding: str = "ceil", var_floor: float = 1e-12) -> float:
    """Min-K%++ from per-token moments of log p under p (μ_t = E[log p], var_t = E[log² p] − μ_t²): Min-K% on
    (log p(y_t) − μ_t)/σ_t. var_floor: the lower bound on σ² (ours 1e-12, open-unlearning's 1e-6)."""
    return min_k_score((token_logprobs - mu) / var.clamp_min(var_floor).sqrt(), k, rounding)


def min_k_plus_plus_score(token_logprobs: Tensor, token_logits: Tensor, k: float = 0.4) -> float:
    """Min-K%++ from the answer tokens' logits (the moments are computed here)."""
    logp = torch.log_softmax(token_logits.float(), -1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    return min_k_plus_plus_from_moments(token_logprobs, mu, (p * logp**2).sum(-1) - mu**2, k)


def extraction_strength(correct: Tensor, no_suffix_is_last: bool = False) -> float:
    """ES = 1 − k/n, k the smallest index from which every teacher-forced argmax prediction equals the label
    (correct: [n] bools). When even the last token is wrong, k = n (ES = 0); open-unlearning's loop leaves
    k = n − 1 there (ES = 1/n): no_suffix_is_last=True reproduces that."""
    n = correct.numel()
    if n == 0:
        return 0.0
    wrong = (~correct.bool()).nonzero()
    k = 0 if wrong.numel() == 0 else int(wrong[-1]) + 1
    if k == n and no_suffix_is_last:
        k = n - 1
    return 1.0 - k / n


def exact_memorization(correct: Tensor) -> float:
    """EM: the fraction of answer tokens whose teacher-forced argmax prediction is the label."""
    return correct.double().mean().item() if correct.numel() else 0.0


def zlib_score(nll: float, text: str) -> float:
    """zlib attack: NLL / length of the zlib-compressed text."""
    return nll / len(zlib.compress(text.encode("utf-8")))


def auc(scores_forget: Sequence[float], scores_holdout: Sequence[float]) -> float:
    """ROC AUC with forget = label 0 and holdout = label 1 (scores: higher means "not trained on")."""
    from sklearn.metrics import roc_auc_score

    labels = [0] * len(scores_forget) + [1] * len(scores_holdout)
    return float(roc_auc_score(labels, list(scores_forget) + list(scores_holdout)))


def privleak(auc_unlearned: float, auc_retrained: float, eps: float = 0.0) -> float:
    """((1 − AUC) − (1 − AUC_retrain)) / (1 − AUC_retrain + eps) · 100 (open-unlearning adds eps = 1e-10)."""
    return ((1 - auc_unlearned) - (1 - auc_retrained)) / (1 - auc_retrained + eps) * 100
