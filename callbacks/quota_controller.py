"""Steer HAMU from the distance to the forget target, so the forget loss approaches it without overshoot.

Each step, before HAMU solves its constrained problem, the controller asks for the first-order forget gain
p_t = (L* − L_f)/H (raw loss units; nothing once L_f passes L*) and sets the quota Q_t, and where needed the step
size η_t ≤ η, so that HAMU's predicted gain is exactly p_t (`lit_unlearn.algorithms.quota.steer`):

- while p_t needs more than retain descent alone gives, η stays and Q_t ≤ max_fraction × the feasibility limit;
- when even Q = 0 forgets faster (κ < 0: retain descent itself raises the forget loss), Q_t = 0 and η_t shrinks.

L_f is the step's forget-batch loss; L* the goal, from the run's stop target: without a retrained model, the
current model's mean NLL on the holdout items of the steering half (HoldoutVerification: re-read after every look,
since it moves with the model); against a gold-standard reference, that model's mean forget loss; or what an
absolute target on the forget loss implies. With `escalate` > 0 the goal is multiplied by (1 + escalate) at each
look that finds the target unmet while the loss is at the goal (lit_unlearn.algorithms.quota.escalated_goal) and the
source does not say the model over-forgot: for targets the mean forget loss only approximates (attacks that read
every token, TOFU's truth ratios). Logged every step: `control/goal`, `control/distance`, `control/wanted_gain`,
`control/quota_limit`, `control/eta`, and HAMU's `hamu/quota` (Q_t).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from lit_unlearn.algorithms.quota import escalated_goal, steer
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import ForgetLossGoal, QuotaSteered, plug_points, require

__all__ = ["QuotaController"]


class QuotaController(Callback):
    def __init__(self, horizon: float = 10.0, max_fraction: float = 0.9, goal: float | None = None,
                 escalate: float = 0.0, reach: float = 0.95) -> None:
        """
        Args:
            horizon: H, the steps over which the remaining distance is spread (larger: slower, gentler approach).
            max_fraction: never ask more than this fraction of the largest feasible quota.
            goal: the mean forget loss to steer to; None takes it from the run's StopAtTarget (its metric
                source's goal, or the forget loss an absolute target implies).
            escalate: raise the goal by this factor (0.25: +25 %) at each evaluation of the stop target that finds
                it unmet while the mean forget loss since the previous evaluation is at least `reach` × the goal
                (0: never).
        """
        super().__init__()
        if not horizon > 0:
            raise UserError(f"QuotaController: horizon must be > 0 steps, got {horizon}")
        if not 0 < max_fraction <= 1:
            raise UserError(f"QuotaController: max_fraction must be in (0, 1], got {max_fraction}")
        if escalate < 0 or not 0 < reach <= 1:
            raise UserError(f"QuotaController: escalate must be ≥ 0 and reach in (0, 1], got {escalate}, {reach}")
        self.horizon, self.max_fraction, self.goal = float(horizon), float(max_fraction), goal
        self.escalate, self.reach = float(escalate), float(reach)
        self.fixed = goal is not None
        self.base_goal = goal            # the source's goal at its last look (or the one given)
        self.factor = 1.0                # the escalation so far: goal = base_goal × factor
        self.last: dict[str, float] = {}
        self.recent: list[float] = []  # forget losses since the stop target's last evaluation
        self.seen_evaluations = 0
        self._stopper = None
        self._trainer = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        require(pl_module, QuotaSteered, "QuotaController", "it steers HAMU's quota: use HAMUModule")
        if pl_module.variant != "Q":
            raise UserError("QuotaController sets the forget quota Q: use HAMU variant 'Q'")
        self._trainer = trainer
        self._stopper = next(iter(plug_points(trainer.callbacks, ForgetLossGoal)), None)
        if self.goal is None and self._stopper is None:
            raise UserError("QuotaController needs a forget-loss goal: give goal=<mean forget loss>, or add a "
                            "StopAtTarget callback whose target implies one")
        pl_module.quota_policy = self.quota

    def resolve_goal(self, pl_module) -> float:
        if self.goal is None:
            goal = self._stopper.loss_goal(self._trainer, pl_module)
            if goal is None:
                raise UserError(f"the target {self._stopper.text!r} implies no forget-loss goal for the "
                                "QuotaController (it needs HoldoutVerification, a retrained reference, or a target on "
                                "delta_forget_loss / forget_loss): give QuotaController(goal=...)")
            self.base_goal = float(goal)
            self.goal = self.base_goal * self.factor
        return self.goal

    def quota(self, request) -> tuple[float, float]:
        goal = self.resolve_goal(self._trainer.lightning_module)
        distance = goal - request.loss_forget
        st = steer(request.rr, request.ff, request.rf, distance=distance, horizon=self.horizon, eta=request.eta,
                   allocation=request.allocation, clip_norm=request.clip_norm, max_fraction=self.max_fraction)
        self.last = {"goal": goal, "distance": distance, "quota_limit": st.limit, "quota": st.quota, "eta": st.eta,
                     "wanted_gain": st.wanted_gain, "step": request.step}
        self.recent.append(float(request.loss_forget))
        return st.quota, st.eta

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.last:
            pl_module.log_dict({f"control/{k}": float(v) for k, v in self.last.items() if k != "step"},
                               on_step=True, on_epoch=False)
        history = getattr(self._stopper, "history", None) or []
        if self.goal is not None and len(history) > self.seen_evaluations:
            self.seen_evaluations = len(history)  # the stop target was just evaluated (it runs before us)
            if not self.fixed:  # a goal measured on the current model moves with it
                base = self._stopper.loss_goal(trainer, pl_module)
                self.base_goal = self.base_goal if base is None else float(base)
            over_forgot = self._stopper.wants_more_forgetting() is False
            if self.escalate and not over_forgot and escalated_goal(
                    self.goal, self.recent, bool(history[-1]["met"]), self.escalate, self.reach) != self.goal:
                self.factor *= 1.0 + self.escalate
            self.goal = self.base_goal * self.factor
            self.recent = []

    def state_dict(self) -> dict[str, Any]:
        return {"goal": self.goal, "base_goal": self.base_goal, "factor": self.factor, "last": self.last,
                "recent": self.recent, "seen_evaluations": self.seen_evaluations}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.goal, self.last = state_dict["goal"], dict(state_dict["last"])
        self.base_goal, self.factor = state_dict.get("base_goal", self.goal), state_dict.get("factor", 1.0)
        self.recent = list(state_dict.get("recent", []))
        self.seen_evaluations = int(state_dict.get("seen_evaluations", 0))
