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

Reference-free: the holdout items are what a Llama-2-7B user has (TOFU's holdout split, or their own); no
retain-only model is read, and only the steering half of the holdout items is.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.algorithms.token_profile import profile_distance, token_surprisal_and_z
from lit_unlearn.errors import UserError
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["HoldoutMatchModule"]


class HoldoutMatchModule(ObjectiveUnlearningModule):
    def __init__(self, network: nn.Module, target_ckpt: str | None = None, lr: float = 1e-3,
                 retain_weight: float = 1.0, forget_weight: float = 1.0, z_weight: float = 1.0,
                 profile: str = "barycenter",
                 optimizer: str = "adamw", momentum: float = 0.0, weight_decay: float = 0.0,
                 freeze_batchnorm: bool = True, log_every_n_steps: int | None = None) -> None:
        """
        Args:
            retain_weight, forget_weight: w_r and w_f.
            z_weight: the weight of the Min-K %++ profile beside the surprisal profile (0: surprisal alone).
            profile: "barycenter" (each holdout item's quantile function averaged: a typical unseen item) or
                "pooled" (the quantiles of all holdout tokens together, whose tails are more extreme than a
                typical item's; lit_unlearn.algorithms.token_profile.barycenter_grid).
        """
        if z_weight < 0:
            raise UserError(f"HoldoutMatch: z_weight must be ≥ 0, got {z_weight}")
        if profile not in ("barycenter", "pooled"):
            raise UserError(f"HoldoutMatch: profile must be 'barycenter' or 'pooled', got {profile!r}")
        self.profile = profile
        super().__init__(network, target_ckpt, lr, optimizer, momentum, weight_decay, freeze_batchnorm,
                         log_every_n_steps)
        self.retain_weight, self.forget_weight, self.z_weight = retain_weight, forget_weight, z_weight
        self._profile_source = None

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            self._profile_source = next((cb for cb in self.trainer.callbacks
                                         if hasattr(cb, "holdout_token_profile")), None)
            if self._profile_source is None:
                raise UserError("HoldoutMatch steers to the holdout items' token profile: add "
                                "lit_unlearn.callbacks.HoldoutVerification to trainer.callbacks (it needs a holdout "
                                "split)")

    def objective(self, retain_batch, forget_batch):
        profile = self._profile_source.holdout_token_profile(self.trainer, self)
        logits, labels = self.logits_and_labels(forget_batch)
        surprisal, z, mask = token_surprisal_and_z(logits, labels)
        suffix = "_pooled" if self.profile == "pooled" else ""
        distance_s = profile_distance(surprisal, mask, profile["surprisal" + suffix]).mean()
        distance_z = profile_distance(z, mask, profile["z" + suffix]).mean()
        forget_term = distance_s + self.z_weight * distance_z
        logs = {"train/forget_surprisal_w1": distance_s.detach(), "train/forget_z_w1": distance_z.detach()}
        return self.plus_retain_nll(forget_term, retain_batch, logs), logs
