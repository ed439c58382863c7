"""How a target classifier was trained, so that a reference can be retrained the same way on D_r alone.

`lit-unlearn pretrain` (SupervisedModule) stores this recipe in every checkpoint it writes, under
"training_recipe". A target trained elsewhere has none: give the recipe as a pretrain config (name or path)
or as a mapping of the fields below.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError

__all__ = ["TrainingRecipe", "training_recipe_of"]


@dataclass(frozen=True)
class TrainingRecipe:
    """AdamW on cross-entropy for `epochs` epochs (the target trainer's recipe), from seed `seed`."""

    epochs: int
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 128
    seed: int = 0  # seed_everything: network initialisation
    data_seed: int = 0  # the shuffling generator of the training loader
    network: dict | None = None  # class_path / init_args of the architecture (None: the unlearned network's)

    def __post_init__(self) -> None:
        if not (isinstance(self.epochs, int) and self.epochs >= 1):
            raise UserError(f"a training recipe needs epochs ≥ 1, got {self.epochs!r}")
        if not self.lr > 0:
            raise UserError(f"a training recipe needs lr > 0, got {self.lr!r}")
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise UserError(f"a training recipe needs batch_size ≥ 1, got {self.batch_size!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> TrainingRecipe:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"unknown training-recipe keys {unknown}; known: {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> TrainingRecipe | None:
        """The recipe a `lit-unlearn pretrain` checkpoint recorded (None for plain state-dict files)."""
        from lit_unlearn.storage.safe_load import load_checkpoint

        blob = load_checkpoint(Path(path).expanduser(), mmap=True)
        recipe = blob.get("training_recipe") if isinstance(blob, dict) else None
        return cls.from_mapping(recipe) if recipe else None

    @classmethod
    def from_config(cls, name_or_path: str) -> TrainingRecipe:
        """Read a pretrain LightningCLI config (a packaged name such as `digits_pretrain`, or a YAML path)."""
        import yaml

        path = Path(name_or_path).expanduser()
        if not path.is_file():
            from lit_unlearn.storage.packaged_files import packaged_config

            path = Path(packaged_config(name_or_path))
        cfg = yaml.safe_load(path.read_text()) or {}
        model = (cfg.get("model") or {}).get("init_args") or {}
        data = (cfg.get("data") or {}).get("init_args") or {}
        trainer = cfg.get("trainer") or {}
        if "max_epochs" not in trainer:
            raise UserError(f"{path}: a pretrain recipe needs trainer.max_epochs")
        return cls(epochs=int(trainer["max_epochs"]), lr=float(model.get("lr", 1e-3)),
                   weight_decay=float(model.get("weight_decay", 0.0)), batch_size=int(data.get("batch_size", 128)),
                   seed=int(cfg.get("seed_everything", 0) or 0), data_seed=int(data.get("seed", 0)),
                   network=model.get("network"))


def training_recipe_of(trainer, module) -> dict[str, Any]:
    """The recipe of a running target training (called when its checkpoints are written)."""
    dm = trainer.datamodule
    return TrainingRecipe(
        epochs=int(trainer.max_epochs) if trainer.max_epochs and trainer.max_epochs > 0 else 1,
        lr=float(module.lr), weight_decay=float(module.weight_decay),
        batch_size=int(getattr(dm, "batch_size", 0) or 1), seed=int(os.environ.get("PL_GLOBAL_SEED", 0)),
        data_seed=int(getattr(dm, "seed", 0)), network=getattr(module, "network_spec", None),
    ).as_dict()
