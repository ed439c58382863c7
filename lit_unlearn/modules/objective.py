"""Shared glue for the loss-based baselines: one scalar objective per step, one optimizer step.

A subclass implements `objective(retain_batch, forget_batch) -> (loss to minimise, logs)`. Baselines that
compare with the original model (KL, NPO, SCRUB) set `uses_reference = True` and read `self.reference`: a
frozen copy of the network taken at construction, i.e. of the target weights (a subclass's
`make_reference` may return another model: the base, for BaseDistill and BaseAnswers). It is deliberately not a
registered submodule, so checkpoints do not store a second copy of the model; a resumed run rebuilds it from
`target_ckpt` exactly as the first run did. Under DeepSpeed ZeRO-3 it is registered (as `frozen_reference`)
before the engine is built, so that its weights are sharded like the trained model's instead of replicated on
every GPU; the sharded checkpoint then holds its slices too.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from lit_unlearn.algorithms.losses import sequence_logprob
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.optimizers import build_optimizer, check_optimizer
from lit_unlearn.modules.unlearning import UnlearningModule

__all__ = ["ObjectiveUnlearningModule"]


class ObjectiveUnlearningModule(UnlearningModule):
    uses_reference = False

    # The optimizer's four arguments live here once: a method restates one only where its default differs (NPO's
    # paper form is SGD, IdkDPO's AdamW), and passes the rest on as **kwargs, which LightningCLI follows up to
    # UnlearningModule (target_ckpt, freeze_batchnorm, log_every_n_steps).
    def __init__(self, network: nn.Module, lr: float = 1e-3, optimizer: str = "sgd", momentum: float = 0.0,
                 weight_decay: float = 0.0, **kwargs) -> None:
        """
        Args:
            lr: learning rate of the optimizer.
            optimizer: "sgd" (with `momentum`), "adam" or "adamw".
            momentum: SGD's momentum.
            weight_decay: passed to the optimizer.
        """
        super().__init__(network, **kwargs)
        if not lr > 0:
            raise UserError(f"lr must be positive, got {lr}")
        check_optimizer(optimizer)
        self.save_hyperparameters(ignore=["network"])  # collects a subclass's own arguments too
        self.lr, self.optimizer_name, self.momentum, self.weight_decay = lr, optimizer, momentum, weight_decay
        self._reference: nn.Module | None = None
        if self.uses_reference:
            self.hold_frozen_reference(self.make_reference(network))  # not registered (see module docstring)

    # ----- hooks ---------------------------------------------------------------------------------------------------
    def objective(self, retain_batch, forget_batch) -> tuple[Tensor, dict[str, Tensor | float]]:
        raise NotImplementedError

    def make_reference(self, network: nn.Module) -> nn.Module:
        """The frozen model the objective compares with: by default a copy of the network as given (the target)."""
        return copy.deepcopy(network)

    # ----- helpers ------------------------------------------------------------------------------------------------
    @property
    def reference(self) -> nn.Module:
        if self._reference is None:
            raise RuntimeError(f"{type(self).__name__} has no reference model (set uses_reference = True)")
        return self._reference

    @torch.no_grad()
    def reference_logits(self, batch) -> Tensor:
        return self.logits_and_labels(batch, self.reference)[0]

    def logprob_and_reference(self, batch) -> tuple[Tensor, Tensor]:
        """Each example's summed answer log-probability under the model and under the frozen reference."""
        logits, labels = self.logits_and_labels(batch)
        return sequence_logprob(logits, labels), sequence_logprob(self.reference_logits(batch), labels)

    def plus_retain_nll(self, forget_term: Tensor, retain_batch, logs: dict) -> Tensor:
        """forget_weight·forget_term + retain_weight·NLL(retain), the preference methods' shape; the retain pass
        is skipped at retain_weight 0 (and its loss logged as train/retain_loss otherwise)."""
        loss = self.forget_weight * forget_term
        if self.retain_weight:
            loss_r = self.checked_loss(retain_batch, "retain")
            loss = loss + self.retain_weight * loss_r
            logs["train/retain_loss"] = loss_r.detach()
        return loss

    # ----- Lightning plumbing ---------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self._reference is not None and self.zero_stage == 3 and "frozen_reference" not in self._modules:
            self.add_module("frozen_reference", self._reference)  # partitioned by the engine built after setup()

    def train(self, mode: bool = True):
        super().train(mode)
        if self._reference is not None:
            self._reference.eval()  # the reference is a fixed function: no dropout, frozen statistics
        return self

    def on_fit_start(self) -> None:
        if self._reference is not None and "frozen_reference" not in self._modules:  # registered: the engine placed it
            self._reference.to(device=self.device)

    def configure_optimizers(self):
        return build_optimizer(self.optimizer_name, self.optimized_parameters, self.lr, self.momentum,
                               self.weight_decay)

    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        if self.micro_parts == 1:
            loss, logs = self.objective(retain_batch, forget_batch)
            self.manual_backward(self.checked(loss, "training objective"))
        else:  # the objective's gradient summed over the micro-batches, its logs averaged over them
            logs = {}

            def part_objective(retain_part, forget_part):
                part_loss, part_logs = self.objective(retain_part, forget_part)
                for k, v in part_logs.items():
                    logs[k] = logs.get(k, 0.0) + float(v) / self.micro_parts
                return self.checked(part_loss, "training objective")

            loss, grads = self.micro_gradients(part_objective, retain_batch, forget_batch, release=False)
            self.set_update(grads)
        opt.step()
        if not self.should_compute_diagnostics():
            return {}
        return {"train/objective": loss.item(), **{k: float(v) for k, v in logs.items()}}
