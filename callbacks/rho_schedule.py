"""ρ scheduling for OFMU's outer penalty ρ_k‖∇Φ‖²: ρ grows over outer rounds so the outer solution is pulled
ever closer to a stationary point of the inner problem.

Before each outer round the callback sets `pl_module.rho = rho_at(k, ...)` and logs it as `ofmu/rho`. k counts
rounds (the paper's form: k = trainer.global_step // every_n_steps) or, with `per="forget_epoch"` (a named option),
whole passes over the forget set before this round, so that ρ rises by the same factor over the same number of
epochs at every forget level (at forget10 a per-round geometric rate compounds over ten times as many rounds as at
forget01). Both are pure functions of the step, so a resumed run continues the schedule where it stopped.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader

from lit_unlearn.core.errors import UserError
from lit_unlearn.algorithms.ofmu import rho_at
from lit_unlearn.core.plug_points import ForgetPasses, RhoScheduled, require

__all__ = ["RhoScheduler"]

PER = ("round", "forget_epoch")


class RhoScheduler(Callback):
    def __init__(self, schedule: str = "linear", rho0: float | None = 1.0, rate: float = 0.1,
                 cap: float | None = 100.0, every_n_steps: int = 1, per: str = "round") -> None:
        """
        Args:
            schedule: "constant" (ρ0), "linear" (ρ0 + rate·k) or "geometric" (ρ0·rate^k).
            rho0: ρ at the first round; None: the module's `rho` as the run built it (so that a config or a bench
                grid sets ρ_0 on the model, and the schedule rises from there).
            rate: the increment (linear) or factor (geometric, > 0) per schedule stage.
            cap: ρ never exceeds this (None: no cap).
            every_n_steps: advance the schedule every n outer rounds (k = global_step // n).
            per: "round" (k as above) or "forget_epoch" (k = the passes over the forget set completed before this
                round, read from the training stream; every_n_steps must then be 1).
        """
        super().__init__()
        rho_at(0, schedule, 1.0 if rho0 is None else rho0, rate, cap)  # validates the arguments now
        if every_n_steps < 1:
            raise UserError(f"every_n_steps must be ≥ 1, got {every_n_steps}")
        if per not in PER:
            raise UserError(f"per={per!r}: choose one of {PER}")
        if per == "forget_epoch" and every_n_steps != 1:
            raise UserError("per='forget_epoch' counts passes over the forget set: leave every_n_steps at 1")
        self.schedule, self.rho0, self.rate, self.cap, self.every_n_steps = schedule, rho0, rate, cap, every_n_steps
        self.per = per
        self.pass_rounds: tuple[int, int] | None = None  # (forget batch, forget set size) for per="forget_epoch"
        self.start = rho0  # ρ_0 in use: rho0, or the module's rho read when fitting starts
        self.current: float | None = None

    def stage(self, step: int) -> int:
        """k for the round that starts at `step`."""
        if self.per == "round":
            return step // self.every_n_steps
        if self.pass_rounds is None:
            raise RuntimeError("per='forget_epoch' reads the forget set's size when training starts")
        batch, n_forget = self.pass_rounds
        return step * batch // n_forget  # items drawn before this round, in whole passes over the forget set

    def value(self, step: int) -> float:
        return rho_at(self.stage(step), self.schedule, self.start, self.rate, self.cap)

    def setup(self, trainer, pl_module, stage: str) -> None:
        module = require(pl_module, RhoScheduled, "RhoScheduler", "use OFMUModule")
        if self.start is None:  # read before a resumed run restores the module's current ρ over its built one
            self.start = float(module.rho)

    def on_train_start(self, trainer, pl_module) -> None:
        if self.per == "forget_epoch":
            loader = trainer.train_dataloader
            stream = require(loader.dataset if isinstance(loader, DataLoader) else None, ForgetPasses,
                             "RhoScheduler(per='forget_epoch')", "train on a retain/forget data module, or use "
                             "per='round'")
            self.pass_rounds = (int(stream.forget_batch_size), int(stream.n_forget))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.current = self.value(trainer.global_step)
        pl_module.rho = self.current
        pl_module.log("ofmu/rho", self.current, on_step=True, on_epoch=False)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(schedule=self.schedule, rho0=self.rho0, rate=self.rate, cap=self.cap,
                                        **({"per": self.per} if self.per != "round" else {}))

    def state_dict(self) -> dict[str, Any]:
        return {"current": self.current, "schedule": self.schedule, "rho0": self.rho0, "start": self.start,
                "rate": self.rate, "cap": self.cap, "every_n_steps": self.every_n_steps, "per": self.per}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The schedule is a pure function of the step; the stored value lets a resumed run report where it was.
        self.current = state_dict.get("current")
        if self.rho0 is None and state_dict.get("start") is not None:
            self.start = float(state_dict["start"])  # the ρ_0 the interrupted run started from
