"""Distil an unlearned model into a shrunk and perturbed copy of itself, on data without the forget set (UNDO: Lee et
al., NeurIPS 2025): the stage after any unlearning method that aims to remove what the method only hid.

The student starts as the unlearned weights moved toward noise or toward the base model (lit_unlearn.algorithms.
shrink_perturb), once, at construction (deterministic in `seed`, so a resumed run rebuilds the same start and then
loads its checkpoint). Each step: the frozen teacher's logits on a batch of retain and general-knowledge items, the
student's loss against them (forward KL on soft labels, or cross-entropy on the teacher's argmax), optionally mixed
with the items' own answer NLL (`label_weight`).

Compute is counted as the field counts it, in token passes: a forward pass costs one unit per token, a backward pass
two, so a student step costs 3 per token it reads and the teacher's forward 1; the retain-only fine-tune that would
retrain instead costs 3 per token it reads (`finetune_units`). `distill/compute_share` is the ratio.
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import torch
from torch import nn

from lit_unlearn.algorithms.losses import distillation_loss, mean_nll
from lit_unlearn.algorithms.token_passes import FORWARD_UNITS, training_units
from lit_unlearn.core.batches import logits_and_labels
from lit_unlearn.core.errors import UserError

__all__ = ["DistillRobustifyModule", "INITS", "TARGETS"]

INITS = ("noise", "base")
TARGETS = ("soft", "hard")


class DistillRobustifyModule(pl.LightningModule):
    def __init__(self, network: nn.Module, teacher: str, alpha: float = 0.8, beta: float = 0.1, init: str = "noise",
                 base: str | None = None, lr: float = 1.5e-3, lr_schedule: str = "cosine",
                 warmup_fraction: float = 0.05, temperature: float = 1.0, targets: str = "soft",
                 positions: str = "all", label_weight: float = 0.0, seed: int = 0,
                 finetune_units: float | None = None) -> None:
        """
        Args:
            network: the student's starting weights (the unlearned model, before shrinking and perturbing).
            teacher: the unlearned model (a Hugging Face folder), loaded frozen.
            alpha: how far the start moves: θ ← (1 − α)·θ + α·target.
            beta: the noise's scale (init "noise"; ε Xavier-uniform).
            init: "noise" (UNDO's corruption) or "base" (toward the model the target was fine-tuned from, `base`).
            temperature: the teacher's softmax temperature for soft labels.
            targets: "soft" (forward KL) or "hard" (the teacher's argmax token).
            positions: "all" (every token of the sequence, as UNDO distils text) or "answer" (answer tokens only).
            label_weight: w in (1 − w)·distillation + w·NLL(the items' own answers).
            finetune_units: the token-pass units of the retain-only fine-tune this stage is compared with.
        """
        super().__init__()
        for name, value, allowed in (("init", init, INITS), ("targets", targets, TARGETS),
                                     ("positions", positions, ("all", "answer")),
                                     ("lr_schedule", lr_schedule, ("constant", "cosine"))):
            if value not in allowed:
                raise UserError(f"DistillRobustify: {name}={value!r}: choose one of {allowed}")
        if not 0.0 <= alpha <= 1.0 or not 0.0 <= label_weight <= 1.0 or not temperature > 0:
            raise UserError(f"DistillRobustify: need alpha and label_weight in [0, 1] and temperature > 0 (got "
                            f"{alpha}, {label_weight}, {temperature})")
        if init == "base" and not base:
            raise UserError("DistillRobustify(init='base') moves the start toward the base model: give base=PATH")
        self.save_hyperparameters(ignore=["network"])
        self.network = network
        self.network_spec: dict | None = None
        self.teacher_path, self.alpha, self.beta, self.init, self.base = teacher, alpha, beta, init, base
        self.lr, self.lr_schedule, self.warmup_fraction = lr, lr_schedule, warmup_fraction
        self.temperature, self.targets, self.positions = temperature, targets, positions
        self.label_weight, self.finetune_units = label_weight, finetune_units
        self.student_tokens = self.teacher_tokens = 0
        self._teacher: list[nn.Module] = []  # kept out of the module tree: not trained, not checkpointed
        self._perturb(seed)

    def _perturb(self, seed: int) -> None:
        from lit_unlearn.algorithms.shrink_perturb import shrink_perturb_

        toward = None
        if self.init == "base":
            from lit_unlearn.models import CausalLM

            toward = dict(CausalLM(name_or_path=self.base).named_parameters())
            toward = {n: p.detach() for n, p in toward.items()}
        shrink_perturb_(list(self.network.named_parameters()), self.alpha, self.beta,
                        torch.Generator().manual_seed(seed), toward)

    @property
    def teacher(self) -> nn.Module:
        if not self._teacher:
            from lit_unlearn.models import CausalLM

            # whole on every rank, in the student's dtype (bf16 under a bf16 strategy): it is never trained
            dtype = next(self.network.parameters()).dtype
            net = CausalLM(name_or_path=self.teacher_path).to(device=self.device, dtype=dtype).eval()
            for p in net.parameters():
                p.requires_grad_(False)
            self._teacher.append(net)
        return self._teacher[0]

    def training_step(self, batch, batch_idx: int):
        logits, labels = logits_and_labels(self.network, batch)
        with torch.no_grad():
            teacher_logits, _ = logits_and_labels(self.teacher, batch)
        if self.positions == "answer":
            mask = labels != -100
        else:
            mask = batch["attention_mask"][:, 1:].bool()
        loss = distillation_loss(logits, teacher_logits, mask, self.temperature, self.targets)
        logs = {"distill/loss": loss.detach()}
        if self.label_weight:
            nll = mean_nll(logits, labels)
            loss = (1 - self.label_weight) * loss + self.label_weight * nll
            logs["distill/answer_nll"] = nll.detach()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"distillation loss is {loss.item()} at step {self.global_step}: lower lr")
        tokens = int(batch["attention_mask"].sum())
        self.student_tokens += tokens
        self.teacher_tokens += tokens
        logs["distill/units"] = float(self.units())
        if self.finetune_units:
            logs["distill/compute_share"] = self.units() / self.finetune_units
        self.log_dict(logs, prog_bar=True)
        return loss

    def units(self) -> int:
        """Token-pass units spent: 3 per student token (forward and backward), 1 per teacher token."""
        return training_units(self.student_tokens) + FORWARD_UNITS * self.teacher_tokens

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.network.parameters(), lr=self.lr, weight_decay=0.0)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = max(1, round(self.warmup_fraction * total)) if self.warmup_fraction else 0

        def factor(step: int) -> float:
            ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
            if self.lr_schedule == "constant":
                return ramp
            return ramp * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["distill_tokens"] = {"student": self.student_tokens, "teacher": self.teacher_tokens}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        tokens = checkpoint.get("distill_tokens") or {}
        self.student_tokens, self.teacher_tokens = tokens.get("student", 0), tokens.get("teacher", 0)
