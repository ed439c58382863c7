"""HAMU as a LightningModule: two backward passes per step, then the per-layer constrained update.

Per step: g_r = ∇L(retain batch), g_f = ∇L(forget batch); three scalars per block; the closed-form solution
(lit_unlearn.algorithms.hamu); δ written into p.grad as −δ and applied by plain SGD(lr=1). The maths lives in
`hamu_step`; this file only moves tensors and logs.

One named option changes the paper's form, off by default: `forget_ceiling` c (a number, or "holdout": the model's
current mean NLL on holdout items it never saw, from the run's HoldoutVerification) makes forgetting stop at the
level of unseen data, item by item. The forget loss becomes mean_i min(NLL_i, c) over the forget batch, so an item
already past c stops pulling, and the items past c join the retain side (L_r + Σ_{NLL_i > c} NLL_i / n), so HAMU
holds them there instead of letting the shared direction that forgets the remembered items push them further.
Without it, the mean-loss goal of the quota controller is met by over-forgetting an easy author while a hard one
stays remembered (docs/findings/hamu.md, "Forgetting evenly", has the measurements). A second option, `forget_entropy`, adds
each forget item's mean predictive entropy to that objective, capped at the holdout items' (Yuan et al.'s
maximum-entropy objective, ICLR 2025): raising only the answer's NLL leaves the model confidently wrong on the forget
items, which unseen items are not. A third, `preconditioner="adam"`, solves the step in Adam's diagonal geometry
(lit_unlearn.algorithms.preconditioning): the raw-gradient step moves along few directions and leaves the forget
items with gradient norms far above unseen items', which the gradient-norm attack sees. A fourth,
`forget_token_cap` τ (with a ceiling), caps each answer token's NLL in L_f and holds the tokens past it, so that
forgetting spreads over an answer instead of driving a few tokens far down (measured in docs/findings/hamu.md: it does not
help at τ = 9.5).

`forget_objective` replaces g_f, as the paper says its formalism allows: "nll" (the paper's), "npo" (−NPO_β against
the target, frozen) or "holdout_match" (−HoldoutMatch's profile distance to the holdout items, read from the run's
HoldoutVerification); lit_unlearn.algorithms.forget_objectives defines each as a gain. The per-block quota, the
branch switch and the κ₂ stop then apply to an objective that forgets without collapse. The quota controller steers a
mean forget NLL, so it takes "nll" only; the other objectives run at a fixed quota.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lit_unlearn.core.errors import UserError
from lit_unlearn.algorithms import (
    COMBINE_PRECISIONS,
    GROUPINGS,
    INFEASIBLE_POLICIES,
    QUOTA_ALLOCATIONS,
    HamuStep,
    block_index,
    block_stats,
    combine_arithmetic,
    combine_into,
    hamu_step,
    tensor_stats,
)
from lit_unlearn.algorithms.fused_passes import fused_combine_into, fused_tensor_stats
from lit_unlearn.algorithms.preconditioning import DiagonalPreconditioner
from lit_unlearn.algorithms.quota import QUOTA_UNITS, raw_to_clipped_quota, reachable_gain
from lit_unlearn.algorithms.forget_objectives import FORGET_OBJECTIVES, npo_gain, profile_gain
from lit_unlearn.algorithms.forget_objectives import READS as FORGET_READS
from lit_unlearn.algorithms.losses import sequence_logprob
from lit_unlearn.algorithms.token_profile import token_surprisal_and_z
from lit_unlearn.modules.unlearning import UnlearningModule
from lit_unlearn.core.plug_points import (
    EntropyInForgetLoss,
    HardnessRecorded,
    HoldoutLossSource,
    HoldoutProfileSource,
    QuotaSteered,
    UpdateGuarded,
    plug_point,
)

__all__ = ["HAMUModule", "QuotaRequest"]

UpdateGuard = Callable[[HamuStep], bool]


@dataclass(frozen=True)
class QuotaRequest:
    """What a quota policy (e.g. `lit_unlearn.callbacks.QuotaController`) sees before each step is solved."""

    step: int
    loss_forget: float
    loss_retain: float
    rr: Tensor  # per-block raw ‖G_r⁽ⁱ⁾‖², ‖G_f⁽ⁱ⁾‖², G_r⁽ⁱ⁾·G_f⁽ⁱ⁾
    ff: Tensor
    rf: Tensor
    eta: float
    allocation: str
    clip_norm: float | None
    variant: str


# A policy returns this step's (quota Q_t in clipped units, step size η_t).
QuotaPolicy = Callable[[QuotaRequest], tuple[float, float]]


class HAMUModule(UnlearningModule, QuotaSteered, UpdateGuarded, HardnessRecorded, EntropyInForgetLoss):
    READS = frozenset({"surprisal"})  # the forget NLL (and the predictive entropy with forget_entropy)

    @property
    def reads_statistics(self) -> frozenset[str]:
        return FORGET_READS[self.forget_objective] | ({"entropy"} if self.forget_entropy else set())

    def __init__(self, network: nn.Module, eta: float = 1e-4, quota: float = 5e-5, variant: str = "Q",
                 grouping: str = "parameter", allocation: str = "norm_product", clip_norm: float | None = 1.0,
                 infeasible: str = "best_effort", quota_units: str = "clipped",
                 forget_ceiling: float | str | None = None, forget_entropy: bool = False,
                 forget_token_cap: float | None = None, preconditioner: str | None = None,
                 forget_objective: str = "nll", npo_beta: float = 0.1, profile_z_weight: float = 1.0,
                 measure_every_n_steps: int = 0, combine_precision: str = "auto", fused_passes: bool = False,
                 **kwargs) -> None:
        """
        Args:
            eta: η; the trust radius of block i is R_i = η‖g_r⁽ⁱ⁾‖ (HAMU-U: η‖g_f⁽ⁱ⁾‖).
            quota: Q, the first-order forget-loss increase demanded per step (variant "Q"), or U, the retain-loss
                decrease demanded per step (variant "U"). Split over blocks by `allocation`. Q < η is advised.
            variant: "Q" (min retain damage s.t. forget gain ≥ Q) or "U" (max forget gain s.t. retain gain ≥ U).
            grouping: blocks ("layers") = each "parameter" tensor, each "module", or one "global" block.
            allocation: "norm_product" (Q_i ∝ ‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖), "uniform" or "softmax_dot".
            clip_norm: g_r and g_f are each clipped to this global norm first (None/0: no clipping).
            infeasible: blocks where Q_i > R_i‖g_f⁽ⁱ⁾‖ take the "best_effort" step R_i ĝ_f (the most forget gain
                the ball allows) or are left untouched ("skip"). Either way they are counted and logged.
            quota_units: "clipped" (the paper's: Q is met by the clipped gradients, so the raw forget-loss
                increase asked per step is Q·‖G_f‖/clip_norm and grows with ‖G_f‖) or "raw" (Q is the raw
                first-order forget-loss increase per step) or "reachable" (a named option: `quota` is a share in
                (0, 1] of the forget gain the step can reach without raising the retain loss, recomputed every step,
                so the constraint binds). A `QuotaController` callback overrides all three.
            forget_ceiling: None (the paper's L_f and L_r), a number c, or "holdout" (c = the model's mean NLL on
                the holdout items of the run's HoldoutVerification, re-read every step): L_f becomes
                mean_i min(NLL_i, c) and the items past c join L_r (see the module docstring).
            forget_entropy: with forget_ceiling="holdout": add each forget item's mean predictive entropy to L_f,
                capped at the holdout items' mean entropy (and held there like the NLL).
            forget_token_cap: with a forget_ceiling: no answer token counts past this NLL in L_f (each item's NLL
                becomes the mean of min(nll_t, τ)), and the tokens past τ join the retain side like the items past
                c, so forgetting has to spread over an answer's tokens instead of driving a few far down.
            preconditioner: None (the paper's raw-gradient geometry) or "adam": the same closed form solved for
                δ = s ⊙ u with s = (√v̂ + ε)^(−1/2) from second moments of the gradients (see the module docstring).
            forget_objective: the gain whose gradient is g_f: "nll" (the paper's mean forget NLL), "npo" (−NPO_β
                against the target, frozen at the start) or "holdout_match" (−HoldoutMatch's distance to the
                holdout items' token profile; needs HoldoutVerification). The named options above (forget_ceiling,
                forget_entropy, forget_token_cap) shape "nll" only.
            npo_beta: β of forget_objective="npo".
            profile_z_weight: the Min-K %++ profile's weight in forget_objective="holdout_match".
            measure_every_n_steps: every n steps re-evaluate both batches after the update and log the measured
                loss changes next to the first-order predictions (two extra forward passes; 0 = never).
            combine_precision: how δ = a·g_f + b·g_r is computed before it is rounded into the gradients' dtype:
                "auto" (float32 for bf16/fp16 gradients, float64 only for blocks whose terms nearly cancel) or
                "float64" (every bf16/fp16 block in float64). Both keep ‖δ_i‖ ≤ R_i(1 + 1e-6); "auto" moves less
                memory. float32 gradients are combined the same way under both.
            fused_passes: compute the statistics and the bf16 combination with one torch.compile kernel each
                (same arithmetic, one read of the gradients per pass; if compiling fails, a warning and the eager
                passes). Off by default: the kernels alone are ~6× faster on a GPU, but a Llama-2-7B run with
                them on one H200 did not finish 8 steps in 160 s, for a reason not yet found (docs/guide/hamu.md).
        """
        super().__init__(network, **kwargs)
        if variant not in ("Q", "U"):
            raise UserError(f"variant={variant!r}: choose 'Q' or 'U'")
        if grouping not in GROUPINGS:
            raise UserError(f"grouping={grouping!r}: choose one of {GROUPINGS}")
        if allocation not in QUOTA_ALLOCATIONS:
            raise UserError(f"allocation={allocation!r}: choose one of {QUOTA_ALLOCATIONS}")
        if infeasible not in INFEASIBLE_POLICIES:
            raise UserError(f"infeasible={infeasible!r}: choose one of {INFEASIBLE_POLICIES}")
        if combine_precision not in COMBINE_PRECISIONS:
            raise UserError(f"combine_precision={combine_precision!r}: choose one of {COMBINE_PRECISIONS}")
        if quota_units not in QUOTA_UNITS:
            raise UserError(f"quota_units={quota_units!r}: choose one of {QUOTA_UNITS}")
        if not (eta > 0 and math.isfinite(eta)):
            raise UserError(f"eta must be positive and finite, got {eta}")
        if not (quota >= 0 and math.isfinite(quota)):
            raise UserError(f"quota must be ≥ 0 and finite, got {quota}")
        if isinstance(forget_ceiling, str) and forget_ceiling.lower() in ("none", "null"):
            forget_ceiling = None  # as a command line spells it
        if forget_ceiling is not None and forget_ceiling != "holdout" and not (
                isinstance(forget_ceiling, (int, float)) and math.isfinite(forget_ceiling) and forget_ceiling > 0):
            raise UserError(f"forget_ceiling must be a positive number, 'holdout' or None, got {forget_ceiling!r}")
        if quota_units == "reachable" and variant != "Q":
            raise UserError("quota_units='reachable' shares the forget gain HAMU-Q can reach: use variant='Q'")
        if quota_units == "reachable" and not 0 < quota <= 1:
            raise UserError(f"quota_units='reachable' takes quota as a share of the reachable gain, in (0, 1]; got "
                            f"{quota}")
        if quota >= eta and quota_units == "clipped":
            # With clipped gradients the largest reachable first-order gain per step is η·Σ‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖ ≤ η.
            warnings.warn(f"quota={quota} ≥ eta={eta}: the quota can never be met after clipping (needs Q < η); "
                          "every step will be infeasible", stacklevel=2)
        self.save_hyperparameters(ignore=["network"])
        self.eta, self.quota, self.variant = eta, quota, variant
        self.grouping, self.allocation, self.clip_norm, self.infeasible = grouping, allocation, clip_norm, infeasible
        self.quota_units = quota_units
        if forget_entropy and forget_ceiling != "holdout":
            raise UserError("forget_entropy needs forget_ceiling='holdout' (the entropy of unseen items is its cap)")
        if forget_token_cap is not None and (forget_ceiling is None or not forget_token_cap > 0):
            raise UserError(f"forget_token_cap needs a forget_ceiling and a positive value, got {forget_token_cap!r} "
                            f"with forget_ceiling={forget_ceiling!r}")
        self.forget_token_cap = forget_token_cap
        if preconditioner not in (None, "adam"):
            raise UserError(f"preconditioner={preconditioner!r}: choose None or 'adam'")
        self.forget_ceiling, self.forget_entropy = forget_ceiling, forget_entropy
        if forget_objective not in FORGET_OBJECTIVES:
            raise UserError(f"forget_objective={forget_objective!r}: choose one of {FORGET_OBJECTIVES}")
        if forget_objective != "nll" and (forget_ceiling is not None or forget_entropy or forget_token_cap):
            raise UserError(f"forget_ceiling, forget_entropy and forget_token_cap shape the NLL objective; "
                            f"forget_objective={forget_objective!r} takes none of them")
        if not (npo_beta > 0 and math.isfinite(npo_beta)):
            raise UserError(f"npo_beta must be positive and finite, got {npo_beta}")
        self.forget_objective, self.npo_beta, self.profile_z_weight = forget_objective, npo_beta, profile_z_weight
        self._reference: nn.Module | None = None
        if forget_objective == "npo":  # frozen, not a submodule: rebuilt from the target on resume, not saved
            self.hold_frozen_reference(copy.deepcopy(network))
        self._profile_source = None
        self.preconditioner = DiagonalPreconditioner() if preconditioner == "adam" else None
        self._holdout_source = None
        self.measure_every_n_steps = measure_every_n_steps
        self.combine_precision = combine_precision
        self.fused_passes = fused_passes
        self._fused_compiled: set[str] = set()
        self._fused_failed = False  # compiling a fused pass failed: the eager passes from then on
        self.update_guards: list[UpdateGuard] = []
        self.quota_policy: QuotaPolicy | None = None  # set by a QuotaController callback
        self.last_step: HamuStep | None = None
        self._index: Tensor | None = None
        self.block_names: list[str] = []

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.forget_ceiling is not None and self.zero_stage == 3:
            raise UserError("HAMU's forget_ceiling backpropagates twice through one forward pass, which is not "
                            "supported under DeepSpeed ZeRO-3 yet: use ZeRO-2, DDP or one process")
        if self.forget_ceiling == "holdout" and self._trainer is not None:
            self._holdout_source = plug_point(self.trainer.callbacks, HoldoutLossSource,
                                              "HAMU forget_ceiling='holdout'", "add lit_unlearn.callbacks."
                                              "HoldoutVerification to trainer.callbacks, or give a number")
        if self.forget_objective == "npo" and self.zero_stage == 3:
            raise UserError("HAMU forget_objective='npo' keeps an unsharded frozen reference: use ZeRO-2, DDP or "
                            "one process")
        if self.forget_objective == "holdout_match" and stage == "fit" and self._trainer is not None:
            self._profile_source = plug_point(self.trainer.callbacks, HoldoutProfileSource,
                                              "HAMU forget_objective='holdout_match'", "add lit_unlearn.callbacks."
                                              "HoldoutVerification to trainer.callbacks (it needs a holdout split)")
        if self.forget_objective != "nll" and self.quota_policy is not None:
            raise UserError(f"QuotaController steers the mean forget NLL; HAMU forget_objective="
                            f"{self.forget_objective!r} runs at a fixed quota: remove the controller")
        self._index, self.block_names = block_index(self.trainable_named_parameters, self.grouping)
        # Whole-parameter element counts per block (ZeRO-3 keeps only a partition: ds_numel is the full size).
        numel = torch.tensor([float(getattr(p, "ds_numel", p.numel())) for p in self._params], dtype=torch.float64)
        self._block_sizes = block_stats(numel, self._index, len(self.block_names))

    @property
    def fused(self) -> bool:
        """Whether the two gradient passes run fused (`fused_passes`), unless compiling them failed."""
        return bool(self.fused_passes) and not self._fused_failed

    def _fused_or_eager(self, part: str, fused_fn, eager_fn):
        """The fused pass; where compiling it fails (no compiler for this device), a warning and the eager pass.
        Safe to repeat eagerly: a first call compiles before it writes anything."""
        if not self.fused:
            return eager_fn()
        if part in self._fused_compiled:
            return fused_fn()
        try:
            out = fused_fn()
        except Exception as e:  # noqa: BLE001 - whatever the compiler raised, the eager pass computes the same
            self._fused_failed = True
            warnings.warn(f"HAMU's fused gradient passes could not be compiled ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''}); using the eager passes "
                          "(same results, more memory traffic). fused_passes=False silences this.", stacklevel=2)
            return eager_fn()
        self._fused_compiled.add(part)
        return out

    def register_update_guard(self, guard: UpdateGuard) -> None:
        """A guard sees each step's solution before it is applied and returns False to veto it (κ₂ stopping)."""
        if guard not in self.update_guards:
            self.update_guards.append(guard)

    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        opt = self.optimizers()
        loss_r, grads_r, loss_f, grads_f = self.objective_gradients(retain_batch, forget_batch)
        scales = None
        if self.preconditioner is not None:  # solve for u in δ = s ⊙ u, with ĝ = s ⊙ g (first-order gains kept)
            scales = self.preconditioner.update(grads_r, grads_f)
            for g_r, g_f, s in zip(grads_r, grads_f, scales):
                g_r.mul_(s.to(g_r.dtype))
                g_f.mul_(s.to(g_f.dtype))
        n_blocks = len(self.block_names)
        # One [3, n_tensors] reduction: under ZeRO each rank holds slices, and the slices' sums are the stats.
        stats = self._fused_or_eager("stats", lambda: fused_tensor_stats(grads_r, grads_f),
                                     lambda: tensor_stats(grads_r, grads_f))
        per_tensor = self.sum_over_shards(torch.stack(stats))
        rr, ff, rf = (block_stats(s, self._index, n_blocks) for s in per_tensor)
        quota, eta = self.step_controls(loss_r, loss_f, rr, ff, rf)
        step = hamu_step(rr, ff, rf, eta=eta, quota=quota, variant=self.variant, allocation=self.allocation,
                         clip_norm=self.clip_norm, infeasible=self.infeasible, sizes=self._block_sizes)
        self.last_step = step

        apply = all(guard(step) for guard in self.update_guards)
        if apply:
            idx = self._index.to(step.coef_f.device)
            # Blocks whose two terms nearly cancel are combined in float64 (rounded once): keeps ‖δ_i‖ ≤ R_i.
            arithmetic = combine_arithmetic(grads_f[0].dtype, step.conditioning[idx].tolist(),
                                            self.combine_precision) if grads_f else []
            self._fused_or_eager(  # p.grad = −δ (−u with a preconditioner)
                "combine", lambda: fused_combine_into(grads_f, grads_f, grads_r, -step.coef_f[idx], -step.coef_r[idx],
                                                      arithmetic),
                lambda: combine_into(grads_f, grads_f, grads_r, (-step.coef_f[idx]).tolist(),
                                     (-step.coef_r[idx]).tolist(), arithmetic))
            for g, s in zip(grads_f, scales or ()):
                g.mul_(s.to(g.dtype))  # −δ = −s ⊙ u
            self.set_update(grads_f)
            opt.step()
        opt.zero_grad(set_to_none=True)

        logs: dict[str, float] = {}
        if apply and self.measure_every_n_steps and self.global_step % self.measure_every_n_steps == 0:
            with torch.no_grad(), self.preserved_buffers():
                logs["hamu/meas_delta_forget_loss"] = (self.forget_loss(forget_batch) - loss_f).item()
                logs["hamu/meas_neg_delta_retain_loss"] = (loss_r - self.compute_loss(retain_batch)).item()
        if self.should_compute_diagnostics():
            logs.update(self.diagnostics(step, loss_r, loss_f, applied=apply))
        return logs

    def ceiling(self) -> tuple[float, float | None] | None:
        """This step's forget ceilings (NLL, entropy or None); None: the paper's form."""
        if self._holdout_source is not None:
            nll = self._holdout_source.holdout_loss(self._trainer, self)
            if nll is None:
                return None
            return nll, self._holdout_source.holdout_entropy(self._trainer, self) if self.forget_entropy else None
        return None if self.forget_ceiling in (None, "holdout") else (float(self.forget_ceiling), None)

    def _capped_terms(self, batch, cap) -> tuple[Tensor, Tensor]:
        """(Σ over items of their capped terms, Σ over items of what is past the caps), each over the global
        batch's item count: L_f and the retain side's hold on the items past the caps."""
        # With a token cap each item's NLL leaves out its tokens past τ; those are held instead, like the items past c.
        nll, entropy, count, token_past = self.item_losses(batch, with_entropy=cap[1] is not None,
                                                           token_cap=self.forget_token_cap)
        terms = [(nll, cap[0])] + ([(entropy, cap[1])] if cap[1] is not None else [])
        capped = sum(v.clamp(max=c).sum() for v, c in terms) / count
        past = sum((v * (v.detach() > c).to(v.dtype)).sum() for v, c in terms) / count
        if token_past is not None:
            past = past + token_past.sum() / count
        return capped, past

    def forget_gain(self, batch) -> Tensor:
        """L_f of a non-NLL forget objective: the batch's mean gain (lit_unlearn.algorithms.forget_objectives)."""
        logits, labels = self.logits_and_labels(batch)
        if self.forget_objective == "npo":
            with torch.no_grad():
                reference = self.logits_and_labels(batch, self._reference)[0]
            gains = npo_gain(sequence_logprob(logits, labels), sequence_logprob(reference, labels), self.npo_beta)
        else:
            if self._profile_source is None:
                raise UserError("HAMU forget_objective='holdout_match' reads the holdout token profile: add "
                                "lit_unlearn.callbacks.HoldoutVerification to trainer.callbacks")
            profile = self._profile_source.holdout_token_profile(self._trainer, self)
            surprisal, z, mask = token_surprisal_and_z(logits, labels)
            gains = profile_gain(surprisal, z, mask, profile["surprisal"], profile["z"], self.profile_z_weight)
        return gains.sum() / self.item_count(labels.shape[0], gains.device)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self._reference is not None:
            self._reference.to(device=self.device)

    def objective_gradients(self, retain_batch, forget_batch):
        """(L_r, g_r, L_f, g_f) of this step; g_f stays in p.grad, where the update is written over it. With a
        forget ceiling c: L_f = mean_i min(NLL_i, c) (+ the capped entropy) and L_r += what is past the caps.
        With another forget objective, L_f is its gain (forget_gain)."""
        cap = self.ceiling() if self.forget_objective == "nll" else None
        if cap is None or self.micro_parts > 1:
            # one backward per side (per micro-batch); with a ceiling the forget side's forward is taken twice

            def retain_loss(r, f):
                past = 0.0 if cap is None else self._capped_terms(f, cap)[1]
                return self.checked(self.compute_loss(r) + past, "retain")

            def forget_loss(f):
                if self.forget_objective != "nll":
                    return self.checked(self.forget_gain(f), "forget")
                return self.checked(self.compute_loss(f) if cap is None else self._capped_terms(f, cap)[0], "forget")

            loss_r, grads_r = self.micro_gradients(retain_loss, retain_batch, forget_batch, release=True)
            loss_f, grads_f = self.micro_gradients(forget_loss, forget_batch, release=False)
            return loss_r, grads_r, loss_f, grads_f
        loss_r = self.checked_loss(retain_batch, "retain")
        capped, past = self._capped_terms(forget_batch, cap)
        loss_r = self.checked(loss_r + past, "retain")
        grads_r = self.gradients(loss_r, release=True, retain_graph=True)  # the forget pass is used again below
        loss_f = self.checked(capped, "forget")
        return loss_r, grads_r, loss_f, self.gradients(loss_f, release=False)

    def forget_loss(self, batch) -> Tensor:
        """L_f as this step's objective defines it (for measuring a step's effect)."""
        if self.forget_objective != "nll":
            return self.forget_gain(batch)
        cap = self.ceiling()
        return self.compute_loss(batch) if cap is None else self._capped_terms(batch, cap)[0]

    def step_controls(self, loss_r: Tensor, loss_f: Tensor, rr: Tensor, ff: Tensor, rf: Tensor) -> tuple[float, float]:
        """This step's (total quota in clipped units, η): the policy's, or (`quota` in its units, `eta`)."""
        if self.quota_policy is not None:
            # The policy must see the global batch's losses: every process has to choose the same Q_t and η_t.
            loss_r, loss_f = self.global_mean(loss_r.detach()), self.global_mean(loss_f.detach())
            quota, eta = self.quota_policy(QuotaRequest(
                step=self.global_step, loss_forget=loss_f.item(), loss_retain=loss_r.item(), rr=rr, ff=ff, rf=rf,
                eta=self.eta, allocation=self.allocation, clip_norm=self.clip_norm, variant=self.variant))
            return float(quota), float(eta)
        if self.quota_units == "raw":
            return raw_to_clipped_quota(self.quota, ff.sum(), self.clip_norm), self.eta
        if self.quota_units == "reachable":
            return self.quota * reachable_gain(rr, ff, rf, eta=self.eta, clip_norm=self.clip_norm), self.eta
        return self.quota, self.eta

    @staticmethod
    def diagnostics(step: HamuStep, loss_r: Tensor, loss_f: Tensor, applied: bool = True) -> dict[str, float]:
        sol, glob = step.solution, step.global_solution
        kappa2 = sol.kappa2[~torch.isnan(sol.kappa2)]
        logs = {
            "train/retain_loss": loss_r.item(),
            "train/forget_loss": loss_f.item(),
            "hamu/kappa_mean": sol.kappa.mean().item(),
            "hamu/kappa1_mean": sol.kappa1.mean().item(),
            "hamu/kappa2_mean": kappa2.mean().item() if kappa2.numel() else float("nan"),
            "hamu/kappa_global": glob.kappa.item(),
            "hamu/kappa2_global": glob.kappa2.item(),
            "hamu/retain_grad_norm": step.retain_norm.item(),
            "hamu/forget_grad_norm": step.forget_norm.item(),
            "hamu/reachable_gain": step.reachable_gain,
            "hamu/quota": step.total_quota,
            "hamu/irreconcilable": float(step.irreconcilable),
            "hamu/pred_delta_forget_loss": step.pred_delta_forget.item(),
            "hamu/pred_neg_delta_retain_loss": -step.pred_delta_retain.item(),
            "hamu/update_applied": float(applied),
        }
        for name, count in step.branch_counts().items():
            logs[f"hamu/branch_{name}"] = float(count)
        return logs

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.preconditioner is not None:  # exact resume: the second moments are state, like Adam's
            checkpoint["hamu_preconditioner"] = self.preconditioner.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        if self.preconditioner is not None and "hamu_preconditioner" in checkpoint:
            self.preconditioner.load_state_dict(checkpoint["hamu_preconditioner"])
