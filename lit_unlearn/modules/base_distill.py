"""BaseDistill: teach the forget answers back to what the base model predicts, and keep the retain set,
loss = w_f·KL(p_base ‖ p_θ) on forget answer tokens + w_r·NLL(retain).

The base (θ₀) is the model the target was fine-tuned from: it never saw the forget authors, so its next-token
distributions on a forget answer are an uninformed model's ("generic predictions", as in Eldan & Russinovich 2023,
who derive them from a reinforced model instead). Pulling the forget answers towards them lowers the probability of
the memorised facts without the steep, confidently wrong slopes of gradient ascent. Reference-free in the sense of
the verification: θ₀ is what a Llama-2-7B user starts from, and no retain-only model is read. Where the base also
lacks what the fine-tune taught every author (a format, a style), distilling to it goes past unseen items; the
holdout verification shows that as over-forgetting.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.algorithms.losses import kl_to_reference
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["BaseDistillModule"]


class BaseDistillModule(ObjectiveUnlearningModule):
    # the KL to the base on forget answers: the whole predictive distribution
    READS = frozenset({"surprisal", "standardised_logprob", "entropy", "rank"})
    uses_reference = True

    def __init__(self, network: nn.Module, base: str, retain_weight: float = 1.0, forget_weight: float = 1.0,
                 teacher_temperature: float = 1.0, optimizer: str = "adamw", **kwargs) -> None:
        """
        Args:
            base: the model the target was fine-tuned from (a Hugging Face folder or hub name), loaded frozen.
            retain_weight, forget_weight: w_r and w_f.
            teacher_temperature: T in p_base = softmax(base logits / T); T > 1 flattens the teacher (a named option;
                1 is the plain form). A fine-tune that specialises on its authors predicts unseen authors worse
                than its base does, so the base's own predictions can be more confident than the model's on
                holdout items.
        """
        if not teacher_temperature > 0:
            from lit_unlearn.core.errors import UserError

            raise UserError(f"teacher_temperature must be positive, got {teacher_temperature}")
        self.teacher_temperature = teacher_temperature
        self.base = base
        super().__init__(network, optimizer=optimizer, **kwargs)
        self.retain_weight, self.forget_weight = retain_weight, forget_weight

    def make_reference(self, network: nn.Module) -> nn.Module:
        from lit_unlearn.models import CausalLM

        return CausalLM(name_or_path=self.base)

    def objective(self, retain_batch, forget_batch):
        logits_f, labels_f = self.logits_and_labels(forget_batch)
        kl_f = kl_to_reference(logits_f, self.reference_logits(forget_batch) / self.teacher_temperature, labels_f)
        logs = {"train/forget_kl_to_base": kl_f.detach()}
        return self.plus_retain_nll(kl_f, retain_batch, logs), logs
