"""IdkDPO baseline (Maini et al. 2024 / Rafailov et al. 2023): DPO that prefers a refusal ("I don't know")
to the forget answer, against the frozen target model, plus the retain NLL.

loss = γ·DPO_β(win = refusal, lose = forget answer) + α·CE(retain), DPO = −(2/β)·mean log σ(β·(Δ_win − Δ_lose)),
Δ = log p_θ(answer | question) − log p_ref(answer | question) summed over the answer tokens.
Defaults are open-unlearning's (β = 0.1, γ = 1, α = 1). The refusals come from the data module
(`TofuDataModule(alternate_answers="generated" | path)`), which adds them to every forget item.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.algorithms.losses import dpo_loss
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["IdkDPOModule", "alternate_batch"]


def alternate_batch(batch: dict) -> dict:
    """The refusal version of a forget batch (its alt_* tensors under the usual names)."""
    if not isinstance(batch, dict) or "alt_input_ids" not in batch:
        raise UserError("IdkDPO needs refusal answers in the forget batches: set data.init_args.alternate_answers "
                        "to 'generated' or to a file of refusals (one per line)")
    return {"input_ids": batch["alt_input_ids"], "attention_mask": batch["alt_attention_mask"],
            "labels": batch["alt_labels"]}


class IdkDPOModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal"})  # the forget answers' and refusals' log-likelihoods
    uses_reference = True

    def __init__(self, network: nn.Module, lr: float = 1e-5, beta: float = 0.1, forget_weight: float = 1.0,
                 retain_weight: float = 1.0, optimizer: str = "adamw", weight_decay: float = 0.01, **kwargs) -> None:
        """
        Args:
            beta: DPO's inverse temperature.
            forget_weight: γ, the weight of the preference term.
            retain_weight: α, the weight of the retain NLL.
        """
        super().__init__(network, lr=lr, optimizer=optimizer, weight_decay=weight_decay, **kwargs)
        if beta <= 0:
            raise UserError(f"IdkDPO needs beta > 0, got {beta}")
        self.beta, self.forget_weight, self.retain_weight = beta, forget_weight, retain_weight

    def objective(self, retain_batch, forget_batch):
        win, win_ref = self.logprob_and_reference(alternate_batch(forget_batch))
        lose, lose_ref = self.logprob_and_reference(forget_batch)
        forget_term = dpo_loss(win, win_ref, lose, lose_ref, self.beta)
        logs = {"train/dpo_forget": forget_term.detach(),
                "train/refusal_log_ratio": (win - win_ref).mean().detach(),
                "train/forget_log_ratio": (lose - lose_ref).mean().detach()}
        return self.plus_retain_nll(forget_term, retain_batch, logs), logs
