"""ρ scheduling for OFMU's outer penalty ρ_k‖∇Φ‖²: ρ grows over outer rounds so the outer solution is pulled
ever closer to a stationary point of the inner problem.

Before each round k (= trainer.global_step, so a resumed run continues the schedule where it stopped) the
callback sets `pl_module.rho = rho_at(k, ...)` and logs it as `ofmu/rho`.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.errors import UserError
from lit_unlearn.algorithms.ofmu import rho_at
from lit_unlearn.core.plug_points import RhoScheduled, require

__all__ = ["RhoScheduler"]


class RhoScheduler(Callback):
    def __init__(self, schedule: str = "linear", rho0: float | None = 1.0, rate: float = 0.1,
                 cap: float | None = 100.0, every_n_steps: int = 1) -> None:
        """
        Args:
            schedule: "constant" (ρ0), "linear" (ρ0 + rate·k) or "geometric" (ρ0·rate^k).
            rho0: ρ at the first round; None: the module's `rho` as the run built it (so that a config or a bench
                grid sets ρ_0 on the model, and the schedule rises from there).
            rate: the increment (linear) or factor (geometric, > 0) per schedule stage.
            cap: ρ never exceeds this (None: no cap).
            every_n_steps: advance the schedule every n outer rounds (k = global_step // n).
        """
        super().__init__()
        rho_at(0, schedule, 1.0 if rho0 is None else rho0, rate, cap)  # validates the arguments now
        if every_n_steps < 1:
            raise UserError(f"every_n_steps must be ≥ 1, got {every_n_steps}")
        self.schedule, self.rho0, self.rate, self.cap, self.every_n_steps = schedule, rho0, rate, cap, every_n_steps
        self.start = rho0  # ρ_0 in use: rho0, or the module's rho read when fitting starts
        self.current: float | None = None

    def value(self, step: int) -> float:
        return rho_at(step // self.every_n_steps, self.schedule, self.start, self.rate, self.cap)

    def setup(self, trainer, pl_module, stage: str) -> None:
        module = require(pl_module, RhoScheduled, "RhoScheduler", "use OFMUModule")
        if self.start is None:  # read before a resumed run restores the module's current ρ over its built one
            self.start = float(module.rho)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.current = self.value(trainer.global_step)
        pl_module.rho = self.current
        pl_module.log("ofmu/rho", self.current, on_step=True, on_epoch=False)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(schedule=self.schedule, rho0=self.rho0, rate=self.rate, cap=self.cap)

    def state_dict(self) -> dict[str, Any]:
        return {"current": self.current, "schedule": self.schedule, "rho0": self.rho0, "start": self.start,
                "rate": self.rate, "cap": self.cap, "every_n_steps": self.every_n_steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The schedule is a pure function of the step; the stored value lets a resumed run report where it was.
        self.current = state_dict.get("current")
        if self.rho0 is None and state_dict.get("start") is not None:
            self.start = float(state_dict["start"])  # the ρ_0 the interrupted run started from
