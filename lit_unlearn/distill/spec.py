"""What the distillation stage does, fixed in a config (configs/distill/*.yaml) and stated in its report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from lit_unlearn.core.errors import UserError
from lit_unlearn.storage.specs import dataclass_spec

__all__ = ["DistillSpec", "load_distill_spec"]

MANAGED_TRAINER_KEYS = ("max_steps", "max_epochs", "logger", "limit_val_batches", "log_every_n_steps")


@dataclass
class DistillSpec:
    alpha: float = 0.8                  # θ ← (1 − α)·θ + α·target, once, before distilling
    beta: float = 0.1                   # the noise's scale (init "noise")
    init: str = "noise"                 # "noise" (UNDO) or "base" (toward the model the target was fine-tuned from)
    epochs: float = 2.0                 # over the distillation data (retain + general knowledge)
    lr: float = 1.5e-3
    lr_schedule: str = "cosine"
    warmup_fraction: float = 0.05
    batch_size: int = 8
    temperature: float = 1.0
    targets: str = "soft"               # "soft" (forward KL) or "hard" (the teacher's argmax)
    positions: str = "all"              # "all" tokens or the "answer" tokens
    label_weight: float = 0.0           # mixed with the items' own answer NLL
    knowledge_repeat: int = 2           # the general-knowledge sets' items per epoch, as the world's fine-tunes
    finetune_epochs: int = 8            # the retain-only fine-tune compared with (the world's recipe)
    seed: int = 0
    verdict: bool = True                # the full verdict on the student when distilling ends
    splits: list[str] = field(default_factory=lambda: ["real_authors", "world_facts"])  # besides the retain split
    # pl.Trainer keywords for the distillation run: strategy (a {class_path, init_args} mapping, e.g. DeepSpeed
    # ZeRO-3), precision, accelerator, devices; the stage sets the schedule and the logger itself
    trainer: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.epochs > 0 or not self.lr > 0 or self.batch_size < 1:
            raise UserError("distill: epochs, lr and batch_size must be positive")
        managed = sorted(set(self.trainer) & set(MANAGED_TRAINER_KEYS))
        if managed:
            raise UserError(f"distill: trainer.{managed[0]} is set by the stage itself (from epochs and batch_size); "
                            f"remove it")

    def as_dict(self) -> dict:
        return asdict(self)


def load_distill_spec(path: str | Path | None) -> DistillSpec:
    """The distillation config (YAML mapping of DistillSpec fields); None: the defaults."""
    return dataclass_spec(DistillSpec, path, "distill config")
