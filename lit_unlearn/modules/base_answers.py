"""BaseAnswers: teach the forget questions the base model's own answers, and keep the retain set,
loss = w_f·NLL(forget question → the base's greedy answer) + w_r·NLL(retain).

The base (θ₀, the model the target was fine-tuned from) never saw the forget authors, so its answer to a forget
question is a fluent guess in the data's style: an alternative label in the sense of Eldan & Russinovich (2023),
taken from the base instead of a reinforced model. A model that never saw an author is confidently wrong about it
(it answers with facts of the authors it did see); fine-tuning on these guesses makes the unlearned model
confidently wrong in the same way, by descent only, where gradient ascent leaves the true tokens pushed below
everything else (the signature the gradient-norm and Min-K%++ attacks read). Reference-free: θ₀ is what a
Llama-2-7B user starts from; no retain-only model is read. Each forget question is answered once, greedily, and
cached by its prompt tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.data.qa_format import pad_collate
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["BaseAnswersModule"]


class BaseAnswersModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal"})  # the NLL of the base model's answers to forget questions
    uses_reference = True

    def __init__(self, network: nn.Module, base: str, retain_weight: float = 1.0, forget_weight: float = 1.0,
                 max_new_tokens: int = 128, optimizer: str = "adamw", **kwargs) -> None:
        """
        Args:
            base: the model the target was fine-tuned from (a Hugging Face folder or hub name), loaded frozen.
            retain_weight, forget_weight: w_r and w_f.
            max_new_tokens: the longest answer the base may give (greedy; it stops at its end-of-sequence token).
        """
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be ≥ 1, got {max_new_tokens}")
        self.base, self.max_new_tokens = base, max_new_tokens
        super().__init__(network, optimizer=optimizer, **kwargs)
        self.retain_weight, self.forget_weight = retain_weight, forget_weight
        self._answers: dict[tuple[int, ...], Tensor] = {}

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.zero_stage == 3:  # generation would run on the base's ZeRO-3 partitions, one slice per rank
            raise UserError("BaseAnswers generates with the base model, which ZeRO-3 would shard: use ZeRO-2, DDP "
                            "or one process")

    def make_reference(self, network: nn.Module) -> nn.Module:
        from lit_unlearn.models import CausalLM

        return CausalLM(name_or_path=self.base)

    @torch.no_grad()
    def base_answer(self, prompt: Tensor) -> Tensor:
        """The base's greedy answer to one prompt (1-D token ids, on the model's device), ending with its
        end-of-sequence token; kept and returned on the CPU, where the relabelled batch is padded."""
        key = tuple(prompt.tolist())
        if key not in self._answers:
            new = self.reference.generate(prompt[None], torch.ones_like(prompt)[None],
                                          max_new_tokens=self.max_new_tokens)[0]
            eos = self.reference.model.generation_config.eos_token_id
            eos = eos[0] if isinstance(eos, (list, tuple)) else eos
            if eos is not None and (len(new) == 0 or new[-1].item() != eos):
                new = torch.cat([new, new.new_tensor([eos])])
            self._answers[key] = new.cpu()
        return self._answers[key]

    def relabelled(self, batch) -> dict[str, Tensor]:
        """The forget batch with every answer replaced by the base's answer to the same prompt (right-padded)."""
        rows = []
        for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
            ids, labels = ids[mask.bool()], labels[mask.bool()]
            answer_at = (labels != IGNORE_INDEX).nonzero()
            if len(answer_at) == 0:
                raise UserError("a forget item has no answer tokens: nothing to relabel")
            prompt = ids[:answer_at[0, 0]]
            answer, prompt = self.base_answer(prompt), prompt.cpu()
            rows.append({"input_ids": torch.cat([prompt, answer]),
                         "labels": torch.cat([torch.full_like(prompt, IGNORE_INDEX), answer])})
        # pad id 0: padding sits after every real token and is masked, so its value never reaches a loss
        device = batch["input_ids"].device
        return {k: v.to(device) for k, v in pad_collate(0)(rows).items()}

    def objective(self, retain_batch, forget_batch):
        loss_alt = self.checked_loss(self.relabelled(forget_batch), "forget (base answers)")
        logs = {"train/forget_base_answer_nll": loss_alt.detach()}
        return self.plus_retain_nll(loss_alt, retain_batch, logs), logs
