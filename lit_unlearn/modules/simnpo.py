"""SimNPO baseline (Fan et al. 2024, "Simplicity Prevails"): NPO without a reference model, on the
length-normalised forget NLL, plus the retain NLL.

loss = γ·SimNPO_{β,δ}(forget) + α·CE(retain), SimNPO = −(2/β)·mean log σ(β·(NLL_sum/|y| − δ)).
Defaults are open-unlearning's TOFU ones (β = 4.5, δ = 0, γ = 0.125, α = 1).
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.algorithms.losses import sequence_logprob, simnpo_loss, target_counts
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["SimNPOModule"]


class SimNPOModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal"})  # the forget answers' length-normalised log-likelihood
    def __init__(self, network: nn.Module, lr: float = 1e-5, beta: float = 4.5, delta: float = 0.0,
                 forget_weight: float = 0.125, retain_weight: float = 1.0, optimizer: str = "adamw",
                 weight_decay: float = 0.01, **kwargs) -> None:
        """
        Args:
            beta: inverse temperature of the sigmoid (large β: examples stop pushing once forgotten).
            delta: margin subtracted from the normalised NLL (SimNPO's γ in the paper).
            forget_weight: γ, the weight of the SimNPO term.
            retain_weight: α, the weight of the retain NLL.
        """
        super().__init__(network, lr=lr, optimizer=optimizer, weight_decay=weight_decay, **kwargs)
        if beta <= 0:
            raise UserError(f"SimNPO needs beta > 0, got {beta}")
        self.beta, self.delta = beta, delta
        self.forget_weight, self.retain_weight = forget_weight, retain_weight

    def objective(self, retain_batch, forget_batch):
        logits_f, labels_f = self.logits_and_labels(forget_batch)
        logp, n = sequence_logprob(logits_f, labels_f), target_counts(labels_f)
        forget_term = simnpo_loss(logp, n, self.beta, self.delta)
        logs = {"train/simnpo_forget": forget_term.detach(),
                "train/forget_loss": (-logp / n.clamp_min(1)).mean().detach()}
        return self.plus_retain_nll(forget_term, retain_batch, logs), logs
