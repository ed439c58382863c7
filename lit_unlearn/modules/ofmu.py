"""OFMU as a LightningModule: one training step is one outer round of the bi-level schedule.

Round k on a fixed (retain, forget) batch pair:
  inner: T steps of gradient ascent θ ← θ + η_in·∇Φ(θ),  Φ = L_f − β·cos(∇L_f, ∇L_r);
  outer: θ ← θ − η_out·(∇L_r + 2ρ_k·∇²Φ·∇Φ) at the inner result.

The paper's form is the default: no clip anywhere (`inner_clip_norm` and `outer_clip_norm` None), the exact HVP.
Every change to it is a named option, off by default (docs/findings/ofmu.md measures what each changes):
- `inner_clip_norm` / `outer_clip_norm`: safety clips, not in the paper. With `outer_clip="joint"` the outer direction
  ∇L_r + 2ρ∇²Φ∇Φ is clipped as one vector; with `outer_clip="separate"` each term on its own, so that the penalty,
  whose norm grows with ρ_k and the Hessian, cannot crowd the retain descent out of a fixed-size step. The scale a
  clip applied is logged (`ofmu/outer_clip_scale`, 1 when it did not bind);
- `hvp="finite_difference"`: first-order gradients only (the affordable form at 7B, under ZeRO); its agreement with
  the exact product is checked every `hvp_check_every_n_steps` rounds where the model allows double backward
  (`ofmu/hvp_fd_cos`, `ofmu/hvp_fd_norm_ratio`);
- `forget_ceiling` bounds the inner objective: the forget term of Φ is flat past a ceiling on L_f (a number, or
  "holdout": the current model's mean NLL on holdout items it never saw, from the run's HoldoutVerification), so the
  inner ascent stops where unseen data of the same kind is. Nothing here reads a retain-only model.
The inner steps move the weights directly; the round's net change is then handed to the optimizer as
p.grad = −δ (SGD, lr 1), so Lightning counts one step per round, checkpoints the optimizer and the ρ
scheduler sees k = global_step. The maths is in lit_unlearn.algorithms.ofmu.

Under DeepSpeed ZeRO-2/3 (hvp="finite_difference") every vector is this rank's slice: gradients are read as
local slices, weights are shifted on the local partition and re-synced (lit_unlearn.distributed.sharded_weights),
and every dot product and norm is summed over the ranks in one all_reduce. No full parameter or gradient is
gathered, and the weights are restored bit for bit after each shift.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lit_unlearn.core.errors import UserError
from lit_unlearn.algorithms.ofmu import (
    HVP_MODES,
    capped_phi_gradient,
    clip_scale,
    distance,
    fd_hvp,
    norm,
    phi_gradient_autograd,
    phi_gradient_fd,
)
from lit_unlearn.distributed.sharded_weights import ShardedWeights
from lit_unlearn.modules.unlearning import UnlearningModule
from lit_unlearn.core.plug_points import HoldoutLossSource, RhoScheduled, plug_point

__all__ = ["OFMUModule", "OUTER_CLIPS", "STRUCTURES"]

OUTER_CLIPS = ("separate", "joint")
STRUCTURES = ("bilevel", "linear")  # the paper's form, and its ablation: the same terms weighted linearly
HOLDOUT = "holdout"  # forget_ceiling: the current model's mean NLL on unseen holdout items


class OFMUModule(UnlearningModule, RhoScheduled):
    READS = frozenset({"surprisal", "gradient"})  # the forget NLL and its gradient's direction
    def __init__(self, network: nn.Module, inner_steps: int = 5, inner_lr: float = 1e-3, beta: float = 0.1,
                 outer_lr: float = 1e-3, rho: float = 1.0, hvp: str = "autograd", fd_step: float = 1e-3,
                 stationarity_tol: float | None = None, inner_clip_norm: float | None = None,
                 outer_clip_norm: float | None = None, outer_clip: str = "joint",
                 forget_ceiling: float | str | None = None, hvp_check_every_n_steps: int = 0,
                 structure: str = "bilevel", linear_weight: float = 1.0, **kwargs) -> None:
        """
        Args:
            inner_steps: T, gradient-ascent steps on Φ per outer round (0: outer step only).
            inner_lr: η_in of the inner ascent.
            beta: β, weight of the gradient-decorrelation term (0 gives plain forget ascent inside).
            outer_lr: η_out of the outer step.
            rho: ρ_k of the penalty ρ‖∇Φ‖² (a `lit_unlearn.callbacks.RhoScheduler` overrides it each round).
            hvp: "autograd" (double/third-order backward, exact) or "finite_difference" (first-order gradients
                only: for models where double backward is unsupported or too costly, and for data parallelism).
            fd_step: the finite-difference step, a distance in parameter space.
            stationarity_tol: stop training once ‖∇Φ‖ at the outer point falls below this (None: never).
            inner_clip_norm, outer_clip_norm: scale ∇Φ (inner) and the outer direction's terms down to this global
                norm (None: off). The cosine's gradient grows like ‖H‖/‖g‖, so a well-fit target (small
                gradients) gives large ∇Φ and much larger HVPs; clipping keeps the first rounds stable.
            outer_clip: with outer_clip_norm set (a safety clip; the paper has none): "joint" clips
                ∇L_r + 2ρ∇²Φ∇Φ as one vector, "separate" each term on its own (the retain descent keeps its share;
                the penalty can crowd it out of a joint clip).
            forget_ceiling: bound the inner objective, Φ_c = min(L_f, c) − β·cos: a number c, "holdout" (the
                current model's mean NLL on the holdout items of the run's HoldoutVerification, re-read every
                round), or None (unbounded, the paper's form).
            hvp_check_every_n_steps: with hvp="finite_difference", every n rounds also compute the exact (autograd)
                product at the outer point and log how far the finite-difference one is from it (ofmu/hvp_fd_cos,
                ofmu/hvp_fd_norm_ratio), to choose fd_step; 0: never. One process, unsharded, only.
            structure: "bilevel" (the paper's form) or "linear", the paper's ablation of the bi-level structure:
                one step a round on the same terms weighted linearly, θ ← θ − η_out·(∇L_r − λ·∇Φ), no inner
                loop and no penalty (λ = `linear_weight`; `outer_clip_norm` still clips the direction where set).
        """
        super().__init__(network, **kwargs)
        if inner_steps < 0:
            raise UserError(f"inner_steps must be ≥ 0, got {inner_steps}")
        if hvp not in HVP_MODES:
            raise UserError(f"hvp={hvp!r}: choose one of {HVP_MODES}")
        for name, value in (("inner_lr", inner_lr), ("outer_lr", outer_lr), ("fd_step", fd_step)):
            if not (value > 0 and math.isfinite(value)):
                raise UserError(f"{name} must be positive and finite, got {value}")
        if rho < 0 or beta < 0:
            raise UserError(f"rho and beta must be ≥ 0, got rho={rho}, beta={beta}")
        self.save_hyperparameters(ignore=["network"])
        self.inner_steps, self.inner_lr, self.beta, self.outer_lr = inner_steps, inner_lr, beta, outer_lr
        self.rho, self.hvp, self.fd_step, self.stationarity_tol = rho, hvp, fd_step, stationarity_tol
        for name, value in (("inner_clip_norm", inner_clip_norm), ("outer_clip_norm", outer_clip_norm)):
            if value is not None and not value > 0:
                raise UserError(f"{name} must be positive or None, got {value}")
        self.inner_clip_norm, self.outer_clip_norm = inner_clip_norm, outer_clip_norm
        if isinstance(forget_ceiling, str) and forget_ceiling.lower() in ("none", "null"):
            forget_ceiling = None  # as a command line spells it
        if outer_clip not in OUTER_CLIPS:
            raise UserError(f"outer_clip={outer_clip!r}: choose one of {OUTER_CLIPS}")
        if forget_ceiling is not None and forget_ceiling != HOLDOUT and not (
                isinstance(forget_ceiling, (int, float)) and math.isfinite(forget_ceiling) and forget_ceiling > 0):
            raise UserError(f"forget_ceiling must be a positive number, {HOLDOUT!r} or None, got {forget_ceiling!r}")
        self.outer_clip, self.forget_ceiling = outer_clip, forget_ceiling
        if hvp_check_every_n_steps < 0:
            raise UserError(f"hvp_check_every_n_steps must be ≥ 0, got {hvp_check_every_n_steps}")
        self.hvp_check_every_n_steps = hvp_check_every_n_steps
        if structure not in STRUCTURES:
            raise UserError(f"structure={structure!r}: choose one of {STRUCTURES}")
        if not (linear_weight >= 0 and math.isfinite(linear_weight)):
            raise UserError(f"linear_weight must be ≥ 0 and finite, got {linear_weight}")
        self.structure, self.linear_weight = structure, linear_weight
        self._ceiling: float | None = None if forget_ceiling in (None, HOLDOUT) else float(forget_ceiling)
        self._holdout_source = None
        self.stationary_at: int | None = None
        self._weights: ShardedWeights | None = None

    @property
    def micro_batch_obstacle(self) -> str | None:
        # the finite-difference form needs first-order gradients only, which sum over micro-batches
        if self.hvp == "autograd" or self.hvp_check_every_n_steps:
            return "the exact Hessian-vector product differentiates one pass's gradient graph: use " \
                   "hvp='finite_difference' and hvp_check_every_n_steps=0"
        return None

    def setup(self, stage: str) -> None:
        super().setup(stage)
        world = self.trainer.world_size if self._trainer is not None else 1
        if self.zero_stage and self.hvp == "autograd":
            raise UserError("OFMU under DeepSpeed ZeRO needs hvp='finite_difference': double backward through "
                            "sharded parameters is not available")
        if world > 1 and self.hvp == "autograd":
            raise UserError("hvp='autograd' differentiates per-process gradient graphs, which data parallelism "
                             "does not synchronise: use hvp='finite_difference' with more than one process")
        if self.hvp_check_every_n_steps and (world > 1 or self.zero_stage):
            raise UserError("hvp_check_every_n_steps needs the exact product, which one unsharded process alone can "
                            "compute: check the finite differences on one process (a few layers of the model if it "
                            "does not fit), then run sharded with the fd_step the check chose")
        if self.forget_ceiling == HOLDOUT and self._trainer is not None:
            self._holdout_source = plug_point(self.trainer.callbacks, HoldoutLossSource,
                                              "OFMU forget_ceiling='holdout'", "add lit_unlearn.callbacks."
                                              "HoldoutVerification to trainer.callbacks, or give a number")

    def _current_ceiling(self) -> float | None:
        """The ceiling of this round: fixed, or the model's holdout NLL as the verification has it now (its last
        look, or measured for this round)."""
        if self._holdout_source is not None:
            value = self._holdout_source.holdout_loss(self._trainer, self)
            self._ceiling = None if value is None else float(value)
        return self._ceiling

    # ----- ∇Φ at the current weights ---------------------------------------------------------------------------------
    def _grads_at(self, retain_batch, forget_batch):
        def grads_at(direction: Sequence[Tensor] | None, step: float, which: str = "both"):
            g_f = g_r = loss_f = loss_r = None
            with self._moved(direction, step):
                if which in ("both", "forget"):  # released: these tensors are ours, p.grad is reset
                    loss_f, g_f = self.micro_gradients(lambda b: self.checked_loss(b, "forget"), forget_batch)
                if which in ("both", "retain"):
                    loss_r, g_r = self.micro_gradients(lambda b: self.checked_loss(b, "retain"), retain_batch)
            return g_f, g_r, None if loss_f is None else loss_f.detach(), None if loss_r is None else loss_r.detach()

        return grads_at

    def phi_gradient(self, retain_batch, forget_batch, create_graph: bool = False, capped: bool | None = None):
        """∇Φ (∇Φ_c with a forget ceiling) at the current weights, as a PhiGradient. capped: whether the forget
        term is past the ceiling (default: decided by this point's forget loss)."""
        if self.hvp == "autograd":
            pg = phi_gradient_autograd(self.checked_loss(forget_batch, "forget"),
                                       self.checked_loss(retain_batch, "retain"), self._params, self.beta,
                                       create_graph=create_graph)
        else:
            pg = phi_gradient_fd(self._grads_at(retain_batch, forget_batch), self.beta, self.fd_step,
                                 reduce=self._reduce)
        if capped is None:
            capped = self._ceiling is not None and float(pg.loss_forget) >= self._ceiling
        if capped:
            pg.grad = capped_phi_gradient(pg, -math.inf)  # past the ceiling: the decorrelation term alone
        return pg

    def phi_hvp(self, retain_batch, forget_batch):
        """(∇Φ, ∇²Φ·∇Φ, the PhiGradient) at the current weights (with a ceiling, the branch of Φ_c at this point
        holds for the whole product: a local linearisation)."""
        if self.hvp == "autograd":
            pg = self.phi_gradient(retain_batch, forget_batch, create_graph=True)
            v = [g.detach() for g in pg.grad]
            hv = torch.autograd.grad(pg.grad, self._params, grad_outputs=v, allow_unused=True)
            hv = [torch.zeros_like(p) if h is None else h for h, p in zip(hv, self._params)]
            return v, hv, pg
        pg = self.phi_gradient(retain_batch, forget_batch)
        capped = self._ceiling is not None and float(pg.loss_forget) >= self._ceiling

        def phi_grad_at(direction, step):
            with self._moved(direction, step):
                return self.phi_gradient(retain_batch, forget_batch, capped=capped).grad

        return pg.grad, fd_hvp(phi_grad_at, pg.grad, self.fd_step, reduce=self._reduce), pg

    def hvp_check(self, retain_batch, forget_batch) -> dict[str, float]:
        """The finite-difference ∇²Φ·∇Φ (with this module's fd_step) against the exact one at the current weights:
        the cosine between them and the ratio of their norms (1 and 1 when the step h is right)."""
        mode = self.hvp
        try:
            self.hvp = "autograd"
            _, exact, _ = self.phi_hvp(retain_batch, forget_batch)
            self.hvp = "finite_difference"
            _, approx, _ = self.phi_hvp(retain_batch, forget_batch)
        finally:
            self.hvp = mode
        with torch.no_grad():
            dot = sum(float((a.double() * b.double()).sum()) for a, b in zip(approx, exact))
            na, nb = float(norm(approx, self._reduce)), float(norm(exact, self._reduce))
        return {"ofmu/hvp_fd_cos": dot / max(na * nb, 1e-300), "ofmu/hvp_fd_norm_ratio": na / max(nb, 1e-300)}

    @property
    def weights(self) -> ShardedWeights:
        """The weights as this rank holds them (made at first use: the DeepSpeed engine exists only then)."""
        if self._weights is None:
            optimizer = self.trainer.strategy.deepspeed_engine.optimizer if self.zero_stage in (1, 2) else None
            self._weights = ShardedWeights(self._params, self.zero_stage, optimizer)
        return self._weights

    def _reduce(self, partial: Tensor) -> Tensor:
        """A dot product of local slices → the dot product of the whole vectors (identity unsharded)."""
        return self.sum_over_shards(partial.reshape(1)).reshape(())

    @contextlib.contextmanager
    def _moved(self, direction: Sequence[Tensor] | None, step: float):
        """Weights at θ + step·direction inside the block, restored exactly (copied back) afterwards; nests."""
        if direction is None:
            yield
            return
        weights = self.weights
        saved = weights.snapshot()
        weights.shift(list(direction), step)
        try:
            yield
        finally:
            weights.restore(saved)

    # ----- one outer round -----------------------------------------------------------------------------------------
    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        if self.structure == "linear":
            return self.linear_step(retain_batch, forget_batch)
        weights = self.weights
        start = weights.snapshot()
        self._current_ceiling()
        inner_phi = []
        for _ in range(self.inner_steps):
            pg = self.phi_gradient(retain_batch, forget_batch)
            inner_phi.append(float(pg.loss_forget - self.beta * pg.cosine))
            scale = clip_scale(pg.grad, self.inner_clip_norm, self._reduce)
            weights.shift(pg.grad, self.inner_lr * scale)  # ascent on Φ

        check = {}
        if self.hvp == "finite_difference" and self.hvp_check_every_n_steps and \
                self.global_step % self.hvp_check_every_n_steps == 0:
            check = self.hvp_check(retain_batch, forget_batch)
        grad_phi, hvp, pg = self.phi_hvp(retain_batch, forget_batch)
        views = weights.local_views()
        retain = [g.to(v.dtype).reshape(v.shape) for v, g in zip(views, pg.grad_retain)]
        penalty = [(2.0 * self.rho) * h.to(v.dtype).reshape(v.shape) for v, h in zip(views, hvp)]
        if self.outer_clip == "separate":  # each term at most outer_clip_norm: the retain descent keeps its share
            a = clip_scale(retain, self.outer_clip_norm, self._reduce)
            b = clip_scale(penalty, self.outer_clip_norm, self._reduce)
            outer = [a * r + b * q for r, q in zip(retain, penalty)]
            clip_applied = min(float(a), float(b))
        else:  # the sum as one direction, clipped only where outer_clip_norm is set (the paper: no clip)
            outer = [r + q for r, q in zip(retain, penalty)]
            outer_scale = clip_scale(outer, self.outer_clip_norm, self._reduce)
            outer = [outer_scale * d for d in outer]
            clip_applied = float(outer_scale)
        diagnose = self.should_compute_diagnostics(steps_ahead=1)  # asked as after opt.step(), as it always was
        if diagnose:  # how far the inner ascent moved the weights, beside the outer step's length (docs/guide/ofmu.md)
            with torch.no_grad():
                inner_shift = float(distance(views, start, self._reduce))
        with torch.no_grad():
            # −δ with δ = (θ_T − θ_0) − η_out·d; SGD(lr=1) from θ_0 lands on θ_T − η_out·d.
            update = [(p0 - v) + self.outer_lr * d for v, p0, d in zip(views, start, outer)]
        weights.restore(start)
        self._take_step(update)

        grad_norm = float(norm(grad_phi, self._reduce))
        if not math.isfinite(grad_norm):
            raise FloatingPointError(f"‖∇Φ‖ is {grad_norm} at step {self.global_step}: lower inner_lr / outer_lr")
        if self.stationarity_tol is not None and grad_norm < self.stationarity_tol:
            self.stationary_at = self.global_step
            self.trainer.should_stop = True
            self.print_once(f"OFMU: ‖∇Φ‖ = {grad_norm:.3g} < {self.stationarity_tol} after {self.global_step} "
                            "rounds (stationary); stopping")
        if not diagnose:
            return check
        outer_norm = float(norm(outer, self._reduce))
        logs = {"ofmu/grad_phi_norm": grad_norm, "ofmu/hvp_norm": float(norm(hvp, self._reduce)), "ofmu/rho": self.rho,
                "ofmu/outer_norm": outer_norm, "ofmu/inner_shift_norm": inner_shift,
                "ofmu/outer_step_norm": self.outer_lr * outer_norm,
                "ofmu/retain_grad_norm": float(norm(retain, self._reduce)),
                "ofmu/penalty_norm": float(norm(penalty, self._reduce)),
                "ofmu/outer_clip_scale": clip_applied, **check,
                "ofmu/cosine": float(pg.cosine), "train/forget_loss": float(pg.loss_forget),
                "train/retain_loss": float(pg.loss_retain), "ofmu/phi": float(pg.loss_forget - self.beta * pg.cosine)}
        if inner_phi:
            logs["ofmu/inner_phi_first"], logs["ofmu/inner_phi_last"] = inner_phi[0], inner_phi[-1]
        if self._ceiling is not None:
            logs["ofmu/forget_ceiling"] = self._ceiling
        return logs

    def _take_step(self, update: list[Tensor]) -> None:
        """Hand −δ = `update` to the optimizer (SGD, lr 1): the round's step, counted and checkpointed by Lightning."""
        opt = self.optimizers()
        if self.zero_stage:  # over the last backward's slices: the update is what the optimizer step applies
            self.set_update([u.reshape(-1) for u in update])
        else:
            for p, u in zip(self._params, update):
                p.grad = u.reshape(p.shape)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def linear_step(self, retain_batch, forget_batch) -> dict[str, float]:
        """The ablation of the bi-level structure: θ ← θ − η_out·(∇L_r − λ·∇Φ) at the current weights."""
        self._current_ceiling()
        pg = self.phi_gradient(retain_batch, forget_batch)
        views = self.weights.local_views()
        direction = [(r.to(v.dtype) - self.linear_weight * g.to(v.dtype)).reshape(v.shape)
                     for v, r, g in zip(views, pg.grad_retain, pg.grad)]
        scale = clip_scale(direction, self.outer_clip_norm, self._reduce)
        diagnose = self.should_compute_diagnostics(steps_ahead=1)  # asked before the step counts, as above
        self._take_step([(self.outer_lr * scale) * d for d in direction])
        if not diagnose:
            return {}
        return {"ofmu/cosine": float(pg.cosine), "train/forget_loss": float(pg.loss_forget),
                "train/retain_loss": float(pg.loss_retain), "ofmu/outer_clip_scale": float(scale),
                "ofmu/phi": float(pg.loss_forget - self.beta * pg.cosine)}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["ofmu_rho"] = self.rho

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.rho = checkpoint.get("ofmu_rho", self.rho)
