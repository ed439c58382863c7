"""Stop unlearning at the user's forget target, and end on the weights closest to it, never on an overshoot.

Every `every_n_steps` steps (and before the first) the callback evaluates the target's metric, from the metric
source in the run: `ForgettingVerification` (classifiers, with the retrained reference), `TofuEvaluation`
(TOFU forget quality, privleak), or, for absolute classifier targets, a plain evaluation of the eval sets. It
keeps the evaluated weights closest to the target (see `lit_unlearn.verification.targets`); once the target is
met it looks `patience` evaluations further for closer weights, then stops. Training ends on the closest
weights: they are restored before the final checkpoint and the final report, whatever step the run stopped at.
If the target is never met the run ends on the closest weights seen, and says so.

State (history, the closest weights and where they came from) is saved in checkpoints: a resumed run continues
the search exactly. The closest weights are kept in memory (trainable parameters and buffers only, so LoRA
runs keep only the adapters).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.console import say
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import ForgetLossGoal, StopTargets, UnlearningRun, as_plug
from lit_unlearn.verification.targets import ForgetTarget, parse_targets

__all__ = ["StopAtTarget"]


class StopAtTarget(Callback, ForgetLossGoal, StopTargets):
    def __init__(self, target: str, every_n_steps: int = 5, patience: int = 0, min_steps: int = 0,
                 verbose: bool = True, lazy: bool | None = None, when_unmeasured: str = "error") -> None:
        """
        Args:
            target: one line, e.g. "forget_vs_retrain_auc <= 0.6", "ua within 0.05 of retrain",
                "forget_quality >= 0.1", or several joined by " and " (see lit_unlearn.verification.targets
                for the grammar and the metrics).
            every_n_steps: evaluate the target every n optimizer steps (independent of data epochs).
            patience: after the target is first met, evaluate this many more times looking for closer weights.
            min_steps: never stop before this many steps.
            lazy: with several parts, evaluate them in order and stop at the first unmet one (later parts are
                "not evaluated": they count neither as met nor in the distance). None: lazy for TOFU targets,
                whose parts cost very differently (forget quality scores one split; model utility generates
                answers for three), eager for classifier targets (one pass measures them all).
            when_unmeasured: "error" (a target no callback of the run measures is a one-line error) or "skip" (the
                run says so and goes on to its step budget: the own-data job without holdout data, or under ZeRO).
        """
        super().__init__()
        self.targets = parse_targets(target)
        self.text = target if isinstance(target, str) else " and ".join(map(str, self.targets))
        if every_n_steps < 1:
            raise UserError(f"StopAtTarget: every_n_steps must be ≥ 1, got {every_n_steps}")
        if patience < 0 or min_steps < 0:
            raise UserError(f"StopAtTarget: patience and min_steps must be ≥ 0, got {patience}, {min_steps}")
        self.every_n_steps, self.patience, self.min_steps, self.verbose = every_n_steps, patience, min_steps, verbose
        if when_unmeasured not in ("error", "skip"):
            raise UserError(f"StopAtTarget: when_unmeasured is 'error' or 'skip', got {when_unmeasured!r}")
        self.when_unmeasured = when_unmeasured
        self.skipped: str | None = None
        self.lazy = lazy
        self.source = None
        self.history: list[dict[str, float]] = []  # {step, value, distance, met}
        self.best: dict[str, float] | None = None
        self.best_weights: dict[str, torch.Tensor] | None = None
        self.first_met_step: int | None = None
        self.stopped_step: int | None = None
        self.ended_on_step: int | None = None

    @property
    def target(self) -> ForgetTarget:
        """The first (primary) part of the target."""
        return self.targets[0]

    @target.setter
    def target(self, value) -> None:
        self.targets = parse_targets(value)
        self.text = " and ".join(map(str, self.targets))

    @property
    def state_key(self) -> str:
        return self._generate_state_key(target=self.text)

    # ----- finding the metric ------------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self.source is not None:
            return
        from lit_unlearn.distributed.sharded_grads import zero_stage

        if zero_stage(trainer.strategy):
            if self._skip(trainer, "DeepSpeed ZeRO partitions the weights it would keep"):
                return
            raise UserError("StopAtTarget keeps the closest weights as a copy of the module's parameters, which "
                            "DeepSpeed ZeRO partitions (and keeps a separate fp32 master copy of): not supported yet. "
                            "Run the target stop with one process, DDP or LoRA + DDP")
        from lit_unlearn.callbacks.metric_source import metric_sources

        kind = self.target.info.kind
        metrics = [t.metric for t in self.targets]
        usable = [cb for cb in metric_sources(trainer.callbacks, kind) if all(cb.available(m) for m in metrics)]
        needs_reference = any(t.needs_reference for t in self.targets)
        special = sorted({t.info.source for t in self.targets if t.info.source})
        if usable:
            self.source = usable[0]
        elif self._skip(trainer, "no callback of this run measures " + ", ".join(dict.fromkeys(metrics))):
            return
        elif special:
            raise UserError(f"target {self.text!r} is measured by {' and '.join(special)}: add it to trainer.callbacks")
        elif needs_reference:
            what = "lit_unlearn.callbacks.ForgettingVerification (a retrained reference)" if kind == "classifier" \
                else "lit_unlearn.callbacks.TofuEvaluation with reference=<the retain-only model's report>"
            raise UserError(f"target {self.text!r} is relative to the retrained model, but the run has no "
                            f"retrained reference: add {what} to trainer.callbacks")
        elif kind == "classifier":
            from lit_unlearn.callbacks.forgetting_verification import ForgettingVerification

            self.source = ForgettingVerification(reference=None)  # absolute measures of the eval sets
            self.source.setup(trainer, pl_module, stage)
        else:
            raise UserError(f"target {self.text!r} is a TOFU metric: add lit_unlearn.callbacks.TofuEvaluation "
                            "to trainer.callbacks")

    def _skip(self, trainer, why: str) -> bool:
        """With when_unmeasured='skip': note why the target cannot be evaluated and switch the callback off."""
        if self.when_unmeasured != "skip":
            return False
        self.skipped = why
        if trainer.is_global_zero:
            say(f"note: StopAtTarget {self.text!r} is off in this run ({why}); the run goes to its step budget")
        return True

    # ----- evaluation --------------------------------------------------------------------------------------------------
    def _values(self, trainer, pl_module) -> dict[str, float]:
        """The parts' metric values: all at once, or (lazy) in order up to the first unmet part."""
        lazy = self.lazy if self.lazy is not None else self.target.info.kind == "tofu"
        if not lazy or len(self.targets) == 1:
            return self.source.target_values(trainer, pl_module, list(dict.fromkeys(t.metric for t in self.targets)))
        values: dict[str, float] = {}
        for t in self.targets:
            if t.metric not in values:
                values.update(self.source.target_values(trainer, pl_module, [t.metric]))
            if values.get(t.metric) is None or not t.met(values[t.metric], self.source.reference_values()):
                break
        return values

    def evaluate(self, trainer, pl_module) -> dict[str, float]:
        values = self._values(trainer, pl_module)
        evaluated = [t for t in self.targets if t.metric in values]
        missing = [t.metric for t in evaluated if values.get(t.metric) is None]
        if missing:
            raise UserError(f"target metric(s) {missing} could not be computed in this run")
        reference = self.source.reference_values()
        # Parts left out by a lazy evaluation are neither met nor counted in the distance.
        met = [t.met(values[t.metric], reference) if t in evaluated else False for t in self.targets]
        dist = [t.distance(values[t.metric], reference) if t in evaluated else 0.0 for t in self.targets]
        row = {"step": float(trainer.global_step), "value": float(values[self.target.metric]),
               "met": float(all(met)), "n_met": float(sum(met)),
               "distance": dist[0] if all(met) else float(sum(d for d, m in zip(dist, met) if not m))}
        if len(self.targets) > 1:
            row.update({f"value/{t.metric}": float(values[t.metric]) for t in evaluated})
        self.history.append(row)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics({"target/value": row["value"], "target/distance": row["distance"],
                                    "target/met": row["met"]}, step=trainer.global_step)
        return row

    def loss_goal(self, trainer, pl_module) -> float | None:
        """The mean forget loss this target points to (for HAMU's quota controller), or None if it has none: what
        an absolute target on the forget loss implies, else the metric source's goal (re-read after every look:
        a holdout-based goal moves with the model)."""
        for t in self.targets:
            if t.metric == "delta_forget_loss" and not t.is_band:
                run = as_plug(pl_module, UnlearningRun)
                initial = ((run.initial_eval if run else None) or {}).get("forget", {}).get("loss")
                return None if initial is None else initial + float(t.value)
            if t.metric == "forget_loss" and not t.is_band:
                return float(t.value)
        return self.source.forget_loss_goal(trainer, pl_module) if self.source is not None else None

    def wants_more_forgetting(self) -> bool | None:
        """The source's reading of its last look (see MetricSource.wants_more_forgetting)."""
        return self.source.wants_more_forgetting() if self.source is not None else None

    @staticmethod
    def _better(row: dict[str, float], best: dict[str, float] | None) -> bool:
        # Any met evaluation beats any unmet one; then the smaller distance. Ties: among met weights keep the
        # earlier (less overshoot); among unmet ones take the later (more progress towards the target).
        if best is None or row["met"] != best["met"]:
            return best is None or row["met"] > best["met"]
        if row.get("n_met", 0) != best.get("n_met", 0):
            return row.get("n_met", 0) > best.get("n_met", 0)
        if row["distance"] != best["distance"]:
            return row["distance"] < best["distance"]
        return not row["met"]

    def _consider(self, row: dict[str, float], pl_module) -> None:
        if self._better(row, self.best):
            self.best = dict(row)
            self.best_weights = _snapshot(pl_module.network)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.skipped or self.history or trainer.global_step != 0:
            return
        row = self.evaluate(trainer, pl_module)
        if row["met"]:
            raise UserError(f"the target {self.text!r} is already met before unlearning "
                            f"({self.target.metric} = {row['value']:.4g}): nothing to unlearn; set a stricter target")
        self._consider(row, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.skipped or step % self.every_n_steps or (self.history and self.history[-1]["step"] == step):
            return
        row = self.evaluate(trainer, pl_module)
        self._consider(row, pl_module)
        if row["met"] and self.first_met_step is None:
            self.first_met_step = step
            if self.verbose:
                say(f"StopAtTarget: {self.text!r} met at step {step} ({self.target.metric} = {row['value']:.4g})")
        if self.first_met_step is not None and step >= self.min_steps:
            looked = sum(1 for r in self.history if r["step"] > self.first_met_step)
            if looked >= self.patience:
                self.stopped_step = step
                trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        if not self.history:
            return
        if self.history[-1]["step"] != trainer.global_step:  # the final weights are a candidate too
            self._consider(self.evaluate(trainer, pl_module), pl_module)
        best = self.best
        self.ended_on_step = int(best["step"])
        if self.ended_on_step != trainer.global_step:
            _restore(pl_module.network, self.best_weights)
        run = as_plug(pl_module, UnlearningRun)
        if run:  # the run's report carries the summary
            run.run_report.ended_on(self.ended_on_step, note=self.summary())
        elif self.verbose:
            say(self.summary())

    def summary(self) -> str:
        best = self.best
        name = self.target.metric
        head = f"StopAtTarget {self.text!r}: "
        if self.first_met_step is None:
            return (head + f"not met in {len(self.history)} evaluations; ended on the closest weights, step "
                    f"{int(best['step'])} ({name} = {best['value']:.4g})")
        return (head + f"met at step {self.first_met_step}; ended on step {int(best['step'])} ({name} = "
                f"{best['value']:.4g}), the closest of {len(self.history)} evaluations")

    # ----- checkpointing -----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "best": self.best, "best_weights": self.best_weights,
                "first_met_step": self.first_met_step, "stopped_step": self.stopped_step,
                "ended_on_step": self.ended_on_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])
        self.best, self.best_weights = state_dict["best"], state_dict["best_weights"]
        self.first_met_step, self.stopped_step = state_dict["first_met_step"], state_dict["stopped_step"]
        self.ended_on_step = state_dict.get("ended_on_step")


def _snapshot(network: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of what unlearning changes: trainable parameters and buffers (BatchNorm statistics)."""
    keep = {n for n, p in network.named_parameters() if p.requires_grad} | {n for n, _ in network.named_buffers()}
    return {k: v.detach().to("cpu", copy=True) for k, v in network.state_dict().items() if k in keep}


@torch.no_grad()
def _restore(network: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    state = network.state_dict()
    for k, v in weights.items():
        state[k].copy_(v.to(state[k].device))
