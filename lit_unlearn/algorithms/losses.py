"""Loss pieces the baselines are built from, as pure functions of logits.

Every function takes logits [B, ..., V] and labels [B, ...] (a classifier's [B, C] / [B], or a causal LM's
shifted [B, T, V] / [B, T]) where `ignore_index` marks positions without a target (prompt and padding
tokens), so the same baseline runs on images and on text.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "distillation_loss",
    "capped_nll",
    "sequence_entropy",
    "sequence_nll",
    "activation_mse",
    "dpo_loss",
    "kl_to_reference",
    "mean_nll",
    "npo_loss",
    "npo_item_losses",
    "rmu_control_vector",
    "sequence_logprob",
    "simnpo_loss",
    "target_counts",
]

IGNORE_INDEX = -100


def _upcast(x: Tensor) -> Tensor:
    """bf16/fp16 logits are upcast for the softmax (LM vocabularies make low-precision log-sums lossy)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _flat(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} disagree: logits must be "
                         "labels' shape plus a class dimension")
    return logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)


def mean_nll(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Cross-entropy averaged over all positions with a target (the usual task loss; HF's LM loss)."""
    flat_logits, flat_labels = _flat(logits, labels)
    if not (flat_labels != ignore_index).any():
        raise ValueError("no position in the batch has a target label (all labels are ignore_index)")
    return F.cross_entropy(_upcast(flat_logits), flat_labels, ignore_index=ignore_index)


def sequence_nll(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Each example's mean NLL over its target positions (TOFU's per-item answer loss), shape [B]."""
    valid = (labels != ignore_index).reshape(labels.shape[0], -1).sum(-1)
    if (valid == 0).any():
        raise ValueError("an example has no position with a target label")
    return -sequence_logprob(logits, labels, ignore_index) / valid


def token_capped_nll(logits: Tensor, labels: Tensor, cap: float,
                     ignore_index: int = IGNORE_INDEX) -> tuple[Tensor, Tensor]:
    """Per example, (mean over its target positions of min(nll_t, cap), mean of nll_t over the positions past the
    cap, zero elsewhere), both [B] and both divided by the example's target count: the first is its NLL with no
    token counted past `cap`, the second what the cap left out (so the two add up to the example's NLL)."""
    flat_logits, flat_labels = _flat(logits, labels)
    valid = flat_labels != ignore_index
    nll = torch.nn.functional.cross_entropy(_upcast(flat_logits), flat_labels.clamp(min=0), reduction="none")
    nll = (nll * valid).reshape(labels.shape[0], -1)
    count = valid.reshape(labels.shape[0], -1).sum(-1)
    if (count == 0).any():
        raise ValueError("an example has no position with a target label")
    past = nll.detach() > cap
    return nll.clamp(max=cap).sum(-1) / count, (nll * past).sum(-1) / count


def sequence_entropy(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Each example's mean predictive entropy −Σ_v p_v log p_v over its target positions, shape [B]."""
    valid = labels != ignore_index
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1) * valid
    counts = valid.reshape(labels.shape[0], -1).sum(-1)
    if (counts == 0).any():
        raise ValueError("an example has no position with a target label")
    return entropy.reshape(labels.shape[0], -1).sum(-1) / counts


def capped_nll(logits: Tensor, labels: Tensor, cap: float, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """mean_i min(NLL_i, cap) over the examples: an example whose loss is past the cap adds nothing to the
    gradient, so ascent on it works on the examples still below (forgetting evenly, not overshooting some)."""
    return sequence_nll(logits, labels, ignore_index).clamp(max=cap).mean()


def sequence_logprob(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """log p(labels | inputs) per example: the sum of target log-probabilities, shape [B]."""
    if logits.shape[:-1] != labels.shape:
        _flat(logits, labels)  # raises the shape error
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    valid = labels != ignore_index
    picked = logp.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1) * valid
    return picked.reshape(labels.shape[0], -1).sum(-1)


def kl_to_reference(logits: Tensor, reference_logits: Tensor, labels: Tensor | None = None,
                    ignore_index: int = IGNORE_INDEX) -> Tensor:
    """KL(p_reference ‖ p_current) per position, averaged over positions with a target (all if labels is None).

    The direction matches the KL baseline and SCRUB: the current model is pulled towards (retain) or pushed
    away from (SCRUB's forget step) the frozen original's full output distribution.
    """
    if logits.shape != reference_logits.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and reference logits {tuple(reference_logits.shape)} differ")
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    ref_logp = torch.log_softmax(_upcast(reference_logits), dim=-1)
    per_pos = (ref_logp.exp() * (ref_logp - logp)).sum(-1)
    if labels is None:
        return per_pos.mean()
    valid = (labels != ignore_index).float()
    return (per_pos * valid).sum() / valid.sum().clamp_min(1.0)


def distillation_loss(student_logits: Tensor, teacher_logits: Tensor, mask: Tensor, temperature: float = 1.0,
                      targets: str = "soft") -> Tensor:
    """The student's loss against a teacher on the positions of `mask` (a [B, T] 0/1 tensor), averaged over them.
    targets "soft": the forward KL(p_teacher^T ‖ p_student), p_teacher^T = softmax(teacher logits / T) (UNDO's
    distillation); "hard": the cross-entropy on the teacher's argmax token (the teacher's answer, none of its
    uncertainty: less of what its soft labels carry about the data it was trained on)."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student {tuple(student_logits.shape)} and teacher {tuple(teacher_logits.shape)} differ")
    if targets not in ("soft", "hard"):
        raise ValueError(f"targets must be 'soft' or 'hard', got {targets!r}")
    logp = torch.log_softmax(_upcast(student_logits), -1)
    if targets == "hard":
        per_pos = -logp.gather(-1, teacher_logits.argmax(-1, keepdim=True)).squeeze(-1)
    else:
        ref = torch.log_softmax(_upcast(teacher_logits) / temperature, -1)
        per_pos = (ref.exp() * (ref - logp)).sum(-1)
    mask = mask.to(per_pos.dtype)
    return (per_pos * mask).sum() / mask.sum().clamp_min(1.0)


def npo_loss(logprob: Tensor, reference_logprob: Tensor, beta: float = 0.1) -> Tensor:
    """Negative Preference Optimization on the forget set: −(2/β)·mean log σ(−β·(log p_θ − log p_ref)).

    Its gradient is GA's, reweighted by 2·σ(β·(log p_θ − log p_ref)): examples already forgotten (log-ratio
    ≪ 0) stop pushing, which is what keeps NPO from GA's collapse.
    """
    return npo_item_losses(logprob, reference_logprob, beta).mean()


def npo_item_losses(logprob: Tensor, reference_logprob: Tensor, beta: float = 0.1) -> Tensor:
    """Each example's NPO term, −(2/β)·log σ(−β·(log p_θ − log p_ref)), shape [B]; npo_loss is their mean."""
    if beta <= 0:
        raise ValueError(f"NPO needs beta > 0, got {beta}")
    return -(2.0 / beta) * F.logsigmoid(-beta * (logprob - reference_logprob))


def target_counts(labels: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Positions with a target per example, shape [B]."""
    return (labels != ignore_index).reshape(labels.shape[0], -1).sum(-1)


def simnpo_loss(logprob: Tensor, n_tokens: Tensor, beta: float = 4.5, delta: float = 0.0) -> Tensor:
    """SimNPO (Fan et al. 2024): −(2/β)·mean log σ(β·(NLL/|y| − δ)), NPO without a reference model, on the
    length-normalised sequence NLL (open-unlearning's form; defaults β = 4.5, δ = 0)."""
    if beta <= 0:
        raise ValueError(f"SimNPO needs beta > 0, got {beta}")
    normalised_nll = -logprob / n_tokens.clamp_min(1).to(logprob.dtype)
    return -(2.0 / beta) * F.logsigmoid(beta * (normalised_nll - delta)).mean()


def dpo_loss(win_logprob: Tensor, win_reference_logprob: Tensor, lose_logprob: Tensor,
             lose_reference_logprob: Tensor, beta: float = 0.1) -> Tensor:
    """DPO (Rafailov et al. 2023) as open-unlearning scales it: −(2/β)·mean log σ(β·(Δ_win − Δ_lose)), Δ the
    log-probability ratio of a whole answer against the frozen reference. IdkDPO: win = a refusal, lose = the
    forget answer."""
    if beta <= 0:
        raise ValueError(f"DPO needs beta > 0, got {beta}")
    margin = (win_logprob - win_reference_logprob) - (lose_logprob - lose_reference_logprob)
    return -(2.0 / beta) * F.logsigmoid(beta * margin).mean()


def rmu_control_vector(dim: int, steering: float, seed: int = 0) -> Tensor:
    """RMU's random direction: u ~ U[0, 1)^d, normalised once, times the steering coefficient c (shape [d])."""
    u = torch.rand(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (u / u.norm() * steering).float()


def activation_mse(activations: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """RMU's activation loss: squared error averaged over the hidden units, summed over the masked positions,
    divided by their number per example, averaged over the batch. activations [B, T, d]; target broadcastable;
    mask [B, T] (answer tokens)."""
    if activations.shape[:2] != mask.shape:
        raise ValueError(f"activations {tuple(activations.shape)} and mask {tuple(mask.shape)} disagree on [B, T]")
    per_position = (_upcast(activations) - _upcast(target)).pow(2).mean(-1)
    mask = mask.to(per_position.dtype)
    per_example = (per_position * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
    return per_example.mean()
