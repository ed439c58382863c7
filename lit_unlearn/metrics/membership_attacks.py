"""Every membership attack of the reference-free verification, declared once: its name, what it means, the per-token
statistics it is a function of, and its per-item score (higher: more likely never trained on).

A method's objective declares the statistics it reads (`reads_statistics` on the module); an attack whose statistics
that objective never reads is one it cannot have been shaped to pass (Goodhart), and the verdict is reported on those
attacks apart (lit_unlearn.verification.full_verdict). The statistics:
- surprisal: the answer tokens' −log p(y_t) (the loss, zlib and Min-K % are functions of them);
- standardised_logprob: (log p(y_t) − μ_t)/σ_t with μ_t, σ_t² the moments of log p under p (Min-K %++);
- entropy: the predictive entropy H_t = −μ_t at each answer position (its mean and its spread over the answer);
- rank: how many vocabulary tokens the model ranks above y_t;
- gradient: the gradient of the answer NLL with respect to the weights (the gradient-norm attack);
- activations: hidden states (RMU's objective; no attack here reads them directly);
- learned: a classifier fitted at verification time over the per-item features below (lit_unlearn.verification.
  learned_attack); no objective reads it, since it does not exist until the model is final.

The learned attack's features are the scalar attacks plus surprisal quantiles and the top-1 share, so it sees the
shape of an answer's token distribution, not only its mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lit_unlearn.metrics.tofu import formulas as tofu_math

__all__ = ["Attack", "ATTACKS", "ORIENTED", "STATISTICS", "SCORING_ATTACKS", "CLASSIC_ATTACKS", "FEATURES", "attack_reads",
           "unread_attacks", "entropy_mean", "entropy_spread", "token_rank", "item_features"]

STATISTICS = ("surprisal", "standardised_logprob", "entropy", "rank", "gradient", "activations", "learned")


@dataclass(frozen=True)
class Attack:
    name: str
    reads: frozenset[str]   # the statistics of STATISTICS the score is a function of
    meaning: str
    oriented: bool = True   # a trained-on item scores lower; False: either side may mean remembered


ATTACKS: dict[str, Attack] = {a.name: a for a in (
    Attack("loss", frozenset({"surprisal"}), "mean answer NLL"),
    Attack("zlib", frozenset({"surprisal"}), "answer NLL over the zlib-compressed length of its text"),
    Attack("min_k", frozenset({"surprisal"}), "mean of the k % largest token surprisals"),
    Attack("min_k_plus_plus", frozenset({"surprisal", "standardised_logprob"}),
           "Min-K % on the tokens' log-probabilities standardised by the model's next-token moments"),
    Attack("gradnorm", frozenset({"gradient"}), "norm of the answer NLL's gradient (mean over parameter tensors)"),
    Attack("entropy_mean", frozenset({"entropy"}), "mean predictive entropy over the answer tokens"),
    Attack("entropy_spread", frozenset({"entropy"}), "standard deviation of the predictive entropy over the answer",
           oriented=False),  # the targets' forget answers spread *more* than unseen ones (AUC 0.3)
    Attack("token_rank", frozenset({"rank"}), "mean log(1 + rank of the answer token) over the answer"),
    Attack("learned", frozenset({"learned"}), "a cross-fitted logistic regression over per-item features"),
)}
ORIENTED = tuple(a for a, spec in ATTACKS.items() if spec.oriented)  # where a side says which way to go
CLASSIC_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm")  # the five of the first verification
SCORING_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus", "entropy_mean", "entropy_spread", "token_rank")
# The learned attack's extra features besides the scalar attacks (and gradnorm where it is computed).
FEATURES = ("surprisal_q10", "surprisal_q50", "surprisal_q90", "top1_share")


def attack_reads(attack: str) -> frozenset[str]:
    return ATTACKS[attack].reads


def unread_attacks(attacks, reads) -> list[str]:
    """The attacks none of whose statistics an objective that reads `reads` reads."""
    reads = frozenset(reads)
    return [a for a in attacks if not (ATTACKS[a].reads & reads)]


def entropy_mean(mu: Tensor) -> float:
    """The mean predictive entropy over the scored positions (μ_t = E_p[log p] = −H_t)."""
    return float(-mu.double().mean()) if mu.numel() else 0.0


def entropy_spread(mu: Tensor) -> float:
    """The population standard deviation of the predictive entropy over the scored positions."""
    return float(mu.double().std(unbiased=False)) if mu.numel() > 1 else 0.0


def token_rank(rank: Tensor) -> float:
    """Mean log(1 + rank of y_t): 0 when every answer token is the model's first choice."""
    return float(torch.log1p(rank.double()).mean()) if rank.numel() else 0.0


def item_features(logp: Tensor, rank: Tensor) -> dict[str, float]:
    """The learned attack's extra per-item features: surprisal quantiles (linear interpolation) and the share of
    answer tokens that are the model's argmax."""
    if logp.numel() == 0:
        return {name: 0.0 for name in FEATURES}
    q = torch.quantile(-logp.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return {"surprisal_q10": float(q[0]), "surprisal_q50": float(q[1]), "surprisal_q90": float(q[2]),
            "top1_share": float((rank == 0).double().mean())}


def scoring_attack_scores(stats, texts: list[str], min_k: float, k_rounding: str, var_floor: float) -> dict:
    """Per-item scores of SCORING_ATTACKS from AnswerStats (already cut to the convention's scored tokens for the
    token-wise ones; `texts`: the text zlib compresses), and the learned attack's extra features."""
    out: dict[str, list[float]] = {a: [] for a in (*SCORING_ATTACKS, *FEATURES)}
    for st, text in zip(stats, texts):
        out["loss"].append(st.nll)
        out["zlib"].append(tofu_math.zlib_score(st.nll, text))
        out["min_k"].append(tofu_math.min_k_score(st.logp, min_k, k_rounding))
        out["min_k_plus_plus"].append(tofu_math.min_k_plus_plus_from_moments(st.logp, st.mu, st.var, min_k,
                                                                             k_rounding, var_floor))
        out["entropy_mean"].append(entropy_mean(st.mu))
        out["entropy_spread"].append(entropy_spread(st.mu))
        rank = st.rank if st.rank is not None else torch.zeros(0)
        out["token_rank"].append(token_rank(rank))
        for name, value in item_features(st.logp, rank).items():
            out[name].append(value)
    return out
