"""HoldoutMatch: make each forget item look, token by token, like the holdout items the model never saw,
loss = w_f·mean_i [W1(surprisal_i, Q_s) + z_weight·W1(z_i, Q_z)] + w_r·NLL(retain).

Q_s and Q_z are quantile grids of the current model's per-token surprisal −log p(y_t) and Min-K %++ score z_t on
the steering half's holdout items, measured by HoldoutVerification as training goes
(lit_unlearn.algorithms.token_profile): by default their barycenter, each holdout item's quantile function averaged
over items, so that a forget item's loss, Min-K % and Min-K %++ scores (linear in its quantile function) equal the
holdout items' mean. The membership attacks the verification runs are functions of these
per-token values (the loss and zlib of their mean, Min-K % of the largest surprisals, Min-K %++ of the lowest z), so
an item whose per-token values are distributed as unseen items' is one the attacks cannot tell from them. Gradient
ascent instead raises the surprisal of a few tokens far past anything unseen (the over-forgetting Min-K %++ and the
gradient norm read) while the rest stay memorised; W1 to the holdout profile moves each token by its rank, raises
the memorised ones, lowers the overshot ones, and has nothing to gain past the holdout profile.

One named option, off by default: `sam_rho` ρ, the sharpness-aware form of the forget term (Fan et al., ICML 2025,
"Towards LLM unlearning resilient to relearning attacks: a sharpness-aware minimization perspective"): its gradient
is taken at θ + ρ·g/‖g‖, g the forget term's gradient at θ, so the step seeks weights where the forget items stay
unseen-looking under a small weight change, which is what a relearning attack makes. The retain term's gradient
stays at θ.

A second named option, off by default: `relearn_lr` α, relearning inside the objective (first-order, as
tamper-resistant training does it: Tamirisa et al. 2024, after first-order MAML). The attacker's step is simulated:
θ' = θ − α·sign(∇NLL_forget(θ)), the displacement of the first AdamW steps of fine-tuning on the forget items
(Adam moves each weight by about its learning rate per step, whatever the gradient's size); the forget term is
then (1 − λ)·F(θ) + λ·F(θ'), with the gradient of F(θ') taken at θ' (`relearn_weight` λ). The step thus seeks
weights where the forget items still look unseen after the attacker's first move. Two more forward and backward
passes on the forget batch per step.

Reference-free: the holdout items are what a Llama-2-7B user has (TOFU's holdout split, or their own); no
retain-only model is read, and only the steering half of the holdout items is.
"""

from __future__ import annotations

import torch
from torch import nn

from lit_unlearn.algorithms.ofmu import norm
from lit_unlearn.algorithms.token_profile import profile_distance, token_surprisal_and_z
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.objective import ObjectiveUnlearningModule
from lit_unlearn.core.plug_points import HoldoutProfileSource, plug_point

__all__ = ["HoldoutMatchModule"]


class HoldoutMatchModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal", "standardised_logprob"})  # the forget tokens' surprisal and Min-K %++ profiles
    def __init__(self, network: nn.Module, retain_weight: float = 1.0, forget_weight: float = 1.0,
                 z_weight: float = 1.0, profile: str = "barycenter", sam_rho: float = 0.0, relearn_lr: float = 0.0,
                 relearn_weight: float = 0.5, optimizer: str = "adamw", **kwargs) -> None:
        """
        Args:
            retain_weight, forget_weight: w_r and w_f.
            z_weight: the weight of the Min-K %++ profile beside the surprisal profile (0: surprisal alone).
            profile: "barycenter" (each holdout item's quantile function averaged: a typical unseen item) or
                "pooled" (the quantiles of all holdout tokens together, whose tails are more extreme than a
                typical item's; lit_unlearn.algorithms.token_profile.barycenter_grid).
            sam_rho: ρ > 0 takes the forget term's gradient at θ + ρ·g/‖g‖ (sharpness-aware; a named option,
                0 is the plain form); one more forward and backward pass on the forget batch per step.
            relearn_lr: α > 0 adds the forget term after a simulated relearning step θ − α·sign(∇NLL_forget)
                (a named option, 0 is the plain form; see the module docstring).
            relearn_weight: λ, the share of the forget term taken after the simulated relearning step.
        """
        if z_weight < 0:
            raise UserError(f"HoldoutMatch: z_weight must be ≥ 0, got {z_weight}")
        if profile not in ("barycenter", "pooled"):
            raise UserError(f"HoldoutMatch: profile must be 'barycenter' or 'pooled', got {profile!r}")
        if not sam_rho >= 0:
            raise UserError(f"HoldoutMatch: sam_rho must be ≥ 0, got {sam_rho}")
        if not relearn_lr >= 0 or not 0 < relearn_weight <= 1:
            raise UserError(f"HoldoutMatch: relearn_lr must be ≥ 0 and relearn_weight in (0, 1], got {relearn_lr}, "
                            f"{relearn_weight}")
        if sam_rho and relearn_lr:
            raise UserError("HoldoutMatch: sam_rho and relearn_lr are separate options; set one of them")
        self.profile, self.sam_rho = profile, sam_rho
        self.relearn_lr, self.relearn_weight = relearn_lr, relearn_weight
        super().__init__(network, optimizer=optimizer, **kwargs)
        self.retain_weight, self.forget_weight, self.z_weight = retain_weight, forget_weight, z_weight
        self._profile_source = None

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if (self.sam_rho or self.relearn_lr) and self.zero_stage:
            raise UserError("HoldoutMatch's sam_rho and relearn_lr shift the weights in place between two passes, "
                            "which DeepSpeed's engine does not see: use DDP or one process, or set them to 0")
        if stage == "fit":
            self._profile_source = plug_point(self.trainer.callbacks, HoldoutProfileSource, "HoldoutMatch",
                                              "add lit_unlearn.callbacks.HoldoutVerification to trainer.callbacks "
                                              "(it needs a holdout split)")

    def forget_term(self, forget_batch):
        """mean_i [W1(s_i, Q_s) + z_w·W1(z_i, Q_z)] (before w_f) and its logs, at the current weights."""
        profile = self._profile_source.holdout_token_profile(self.trainer, self)
        logits, labels = self.logits_and_labels(forget_batch)
        surprisal, z, mask = token_surprisal_and_z(logits, labels)
        suffix = "_pooled" if self.profile == "pooled" else ""
        distance_s = profile_distance(surprisal, mask, profile["surprisal" + suffix]).mean()
        distance_z = profile_distance(z, mask, profile["z" + suffix]).mean()
        logs = {"train/forget_surprisal_w1": distance_s.detach(), "train/forget_z_w1": distance_z.detach()}
        return distance_s + self.z_weight * distance_z, logs

    def objective(self, retain_batch, forget_batch):
        term, logs = self.forget_term(forget_batch)
        return self.plus_retain_nll(term, retain_batch, logs), logs

    @property
    def micro_batch_obstacle(self) -> str | None:
        if self.sam_rho or self.relearn_lr:
            return "the shifted forget terms of sam_rho and relearn_lr take passes of their own"
        return None

    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        if not (self.sam_rho or self.relearn_lr):
            return super().unlearning_step(retain_batch, forget_batch)
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        params = [p for p in self.network.parameters() if p.requires_grad]
        term, logs = self.forget_term(forget_batch)
        term = self.forget_weight * term
        if self.sam_rho:  # the whole forget term's gradient at θ + ρ·g/‖g‖
            grads = torch.autograd.grad(self.checked(term, "forget term"), params, allow_unused=True)
            scale = self.sam_rho / (float(norm([g for g in grads if g is not None])) + 1e-12)
            shifts, share = [None if g is None else scale * g for g in grads], 1.0
            where = "the sharpness-aware shift"
        else:  # (1 − λ)·∇F(θ) + λ·∇F at the attacker's first move θ − α·sign(∇NLL_forget)
            self.manual_backward(self.checked((1.0 - self.relearn_weight) * term, "forget term"))
            nll = self.checked_loss(forget_batch, "forget")
            grads = torch.autograd.grad(nll, params, allow_unused=True)
            shifts = [None if g is None else -self.relearn_lr * torch.sign(g) for g in grads]
            share, where = self.relearn_weight, "the simulated relearning step"
            logs["train/forget_nll"] = nll.detach()
        with torch.no_grad():
            for p, e in zip(params, shifts):
                if e is not None:
                    p.add_(e)
        try:
            shifted, shifted_logs = self.forget_term(forget_batch)
            self.manual_backward(self.checked(share * self.forget_weight * shifted, f"forget term at {where}"))
        finally:
            with torch.no_grad():
                for p, e in zip(params, shifts):
                    if e is not None:
                        p.sub_(e)
        if self.relearn_lr:
            logs["train/relearned_forget_surprisal_w1"] = shifted_logs["train/forget_surprisal_w1"]
        if self.retain_weight:
            loss_r = self.checked_loss(retain_batch, "retain")
            self.manual_backward(self.retain_weight * loss_r)
            logs["train/retain_loss"] = loss_r.detach()
        opt.step()
        if not self.should_compute_diagnostics():
            return {}
        objective = float(term.detach()) + self.retain_weight * float(logs.get("train/retain_loss", 0.0))
        return {"train/objective": objective, **{k: float(v) for k, v in logs.items()}}
