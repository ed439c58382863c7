"""CIR: unlearning whose update keeps off the directions the forget tokens share with everything else (Sondej & Yang
2025, arXiv 2509.11816; the maths in lit_unlearn.algorithms.cir).

Only the weights of the linear layers whose names contain one of `target_modules` (the MLPs by default) change. Each
step:
1. the forget batch's answer NLL is back-propagated with hooks that keep every target layer's per-token inputs x_t
   and output gradients g_t (attended positions);
2. each target weight's forget gradient is rebuilt as Σ_t g̃_t x̃_tᵀ, with the mean and top `components` principal
   directions of the forget tokens' inputs and output gradients (measured over the last `basis_every` steps, as CIR
   measures them over the previous epoch) projected out; before the first basis exists the step only measures;
3. the forget update ascends that gradient with a fixed norm, `lr` (CIR normalises its updates), and a retain step
   descends the retain NLL at `retain_lr`: p ← p + lr·G̃/‖G̃‖ − retain_lr·∇L_r.

Why it may survive relearning: what the update changes is specific to the forget tokens, so fine-tuning on a
neighbouring author, which moves the shared directions, does not move it back (the paper's diagnosis, and this
project's: HoldoutMatch's forgetting moved shared representations and came back).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from lit_unlearn.algorithms.cir import collapsed_weight_grad, shared_basis
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.unlearning import UnlearningModule

__all__ = ["CIRModule"]


class CIRModule(UnlearningModule):
    micro_batch_obstacle = "its hooks rebuild the forget gradients from one pass's activations"
    READS = frozenset({"surprisal", "activations"})  # the forget NLL, and the activations its update is built from

    def __init__(self, network: nn.Module, lr: float = 1e-2, retain_lr: float = 1e-3, components: int = 8,
                 basis_every: int = 5, target_modules: list[str] | None = None, **kwargs) -> None:
        """
        Args:
            lr: the norm of each forget update (over all target weights together).
            retain_lr: the retain step's rate (plain gradient descent).
            components: principal components projected out, besides the mean, of inputs and of output gradients.
            basis_every: steps between bases (each from the tokens of the steps since the last one); the first
                `basis_every` steps only measure.
            target_modules: name fragments of the linear layers that change (default: "mlp").
        """
        super().__init__(network, **kwargs)
        if not lr > 0 or retain_lr < 0 or components < 0 or basis_every < 1:
            raise UserError(f"CIR: need lr > 0, retain_lr ≥ 0, components ≥ 0, basis_every ≥ 1 (got {lr}, "
                            f"{retain_lr}, {components}, {basis_every})")
        self.save_hyperparameters(ignore=["network"])
        self.lr, self.retain_lr, self.components, self.basis_every = lr, retain_lr, components, basis_every
        self.target_modules = list(target_modules or ["mlp"])
        self.targets = {name: m for name, m in network.named_modules()
                        if isinstance(m, nn.Linear) and any(t in name for t in self.target_modules)}
        if not self.targets:
            raise UserError(f"CIR: no linear layer's name contains any of {self.target_modules}")
        wanted = {id(m.weight) for m in self.targets.values()}
        for p in network.parameters():
            p.requires_grad_(id(p) in wanted)
        self.bases: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._seen: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {n: ([], []) for n in self.targets}
        self._captured: dict[str, Any] = {}

    # ----- the hooks that keep inputs and output gradients --------------------------------------------------------
    def _hooks(self):
        handles = []
        for name, module in self.targets.items():
            def keep_input(mod, args, name=name):
                self._captured[name] = {"x": args[0].detach()}

            def keep_grad(mod, grad_input, grad_output, name=name):
                self._captured[name]["g"] = grad_output[0].detach()

            handles.append(module.register_forward_pre_hook(keep_input))
            handles.append(module.register_full_backward_hook(keep_grad))
        return handles

    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        if self.zero_stage:
            raise UserError("CIR rebuilds weight gradients from per-token activations: run it without ZeRO")
        opt = self.optimizers()
        loss_r = self.checked_loss(retain_batch, "retain")
        grads_r = self.gradients(loss_r, release=True)
        handles = self._hooks()
        try:
            loss_f = self.checked_loss(forget_batch, "forget")
            with warnings.catch_warnings():  # the frozen layers below give the hooks no input gradients: expected
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                self.gradients(loss_f, release=True)  # the hooks keep what the collapsed gradients are built from
        finally:
            for h in handles:
                h.remove()
        mask = forget_batch["attention_mask"].bool()
        index = {id(p): i for i, p in enumerate(self._params)}
        forget = [torch.zeros_like(p) for p in self._params]
        for name, module in self.targets.items():
            acts = self._captured[name]["x"][mask].float()
            grads = self._captured[name]["g"][mask].float()
            self._seen[name][0].append(acts.cpu())
            self._seen[name][1].append(grads.cpu())
            if name in self.bases:
                act_basis, grad_basis = self.bases[name]
                forget[index[id(module.weight)]] = collapsed_weight_grad(
                    acts, grads, act_basis.to(acts.device), grad_basis.to(acts.device)).to(module.weight.dtype)
        self._captured.clear()
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in forget))
        ready = bool(self.bases) and float(norm) > 0
        with torch.no_grad():
            for p, gf, gr in zip(self._params, forget, grads_r):
                # SGD(lr=1) applies p ← p − p.grad: the forget ascent of norm lr and the retain descent
                p.grad = self.retain_lr * gr - (self.lr / norm * gf if ready else 0.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (self.global_step + 1) % self.basis_every == 0:
            self._new_bases()
        if not self.should_compute_diagnostics():
            return {}
        return {"train/retain_loss": loss_r.item(), "train/forget_loss": loss_f.item(),
                "train/cir_collapsed_norm": float(norm), "train/cir_ready": float(ready)}

    def _new_bases(self) -> None:
        for name, (acts, grads) in self._seen.items():
            if acts:
                self.bases[name] = (shared_basis(torch.cat(acts), self.components),
                                    shared_basis(torch.cat(grads), self.components))
        self._seen = {n: ([], []) for n in self.targets}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super_save = getattr(super(), "on_save_checkpoint", None)
        if super_save is not None:
            super_save(checkpoint)
        checkpoint["cir"] = {"bases": self.bases, "seen": self._seen}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super_load = getattr(super(), "on_load_checkpoint", None)
        if super_load is not None:
            super_load(checkpoint)
        state = checkpoint.get("cir") or {}
        self.bases = state.get("bases", {})
        self._seen = state.get("seen", {n: ([], []) for n in self.targets})
