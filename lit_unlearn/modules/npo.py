"""NPO baseline (Zhang et al. 2024): negative preference optimisation on the forget set, plus the retain NLL.

loss = w_f·NPO_β(forget) + w_r·CE(retain), with log p = the summed target log-probability of each example.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.core.errors import UserError
from lit_unlearn.algorithms.losses import npo_loss
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["NPOModule"]


class NPOModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal"})  # the forget answers' log-likelihood ratio to the reference
    uses_reference = True

    def __init__(self, network: nn.Module, beta: float = 0.1, forget_weight: float = 1.0, retain_weight: float = 1.0,
                 **kwargs) -> None:
        """
        Args:
            beta: NPO's inverse temperature (small β: GA-like; large β: stops early on forgotten examples).
            retain_weight: weight of the retain NLL (0 gives the original forget-only NPO).
        """
        super().__init__(network, **kwargs)
        if beta <= 0:
            raise UserError(f"NPO needs beta > 0, got {beta}")
        self.beta, self.forget_weight, self.retain_weight = beta, forget_weight, retain_weight

    def objective(self, retain_batch, forget_batch):
        logp, ref_logp = self.logprob_and_reference(forget_batch)
        forget_term = npo_loss(logp, ref_logp, self.beta)
        logs = {"train/npo_forget": forget_term.detach(), "train/forget_log_ratio": (logp - ref_logp).mean().detach()}
        return self.plus_retain_nll(forget_term, retain_batch, logs), logs
