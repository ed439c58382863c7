"""SCRUB baseline (Kurmanji et al. 2023): the student (the model being unlearned) moves away from the teacher
(the frozen original) on the forget set and stays close to it, and correct, on the retain set.

- max step:  minimise −KL(p_teacher ‖ p_student) on the forget batch;
- min step:  minimise α·KL(p_teacher ‖ p_student) + γ·CE on the retain batch.

schedule="alternating" is the original: during the first `max_phase_steps` steps even steps are max steps and
odd steps min steps, then min steps only (one optimizer step per batch pair, so max_steps counts batches).
schedule="combined" takes both terms in every step (the HAMU reference's form, α = 0.001, γ = 0.99).
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.core.errors import UserError
from lit_unlearn.algorithms.losses import kl_to_reference, mean_nll
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["SCRUBModule"]

SCHEDULES = ("alternating", "combined")


class SCRUBModule(ObjectiveUnlearningModule):
    # the KL to the teacher on forget answers: the whole predictive distribution
    READS = frozenset({"surprisal", "standardised_logprob", "entropy", "rank"})
    uses_reference = True

    def __init__(self, network: nn.Module, schedule: str = "alternating", max_phase_steps: int = 20,
                 alpha: float = 0.001, gamma: float = 0.99, forget_weight: float = 1.0, **kwargs) -> None:
        super().__init__(network, **kwargs)
        if schedule not in SCHEDULES:
            raise UserError(f"schedule={schedule!r}: choose one of {SCHEDULES}")
        if max_phase_steps < 0:
            raise UserError(f"max_phase_steps must be ≥ 0, got {max_phase_steps}")
        self.schedule, self.max_phase_steps = schedule, max_phase_steps
        self.alpha, self.gamma, self.forget_weight = alpha, gamma, forget_weight

    def is_max_step(self, step: int) -> bool:
        return self.schedule == "alternating" and step < self.max_phase_steps and step % 2 == 0

    def _forget_term(self, forget_batch):
        logits_f, labels_f = self.logits_and_labels(forget_batch)
        return -kl_to_reference(logits_f, self.reference_logits(forget_batch), labels_f)

    def _retain_term(self, retain_batch):
        logits_r, labels_r = self.logits_and_labels(retain_batch)
        kl_r = kl_to_reference(logits_r, self.reference_logits(retain_batch), labels_r)
        ce_r = mean_nll(logits_r, labels_r)
        return self.alpha * kl_r + self.gamma * ce_r, ce_r

    def objective(self, retain_batch, forget_batch):
        if self.is_max_step(self.global_step):
            neg_kl = self._forget_term(forget_batch)
            return self.forget_weight * neg_kl, {"train/forget_kl": -neg_kl.detach(), "scrub/max_step": 1.0}
        retain_term, ce_r = self._retain_term(retain_batch)
        logs = {"train/retain_loss": ce_r.detach(), "scrub/max_step": 0.0}
        if self.schedule == "alternating":
            return retain_term, logs
        neg_kl = self._forget_term(forget_batch)
        logs["train/forget_kl"] = -neg_kl.detach()
        return retain_term + self.forget_weight * neg_kl, logs
