"""The gold standard of unlearning: the target's architecture, trained with the target's recipe on D_r alone.

`RetrainedReference` gives an unlearning run its retrained model:
- `ckpt=PATH`: a model the user retrained already (a `lit-unlearn pretrain` checkpoint or a state dict);
- otherwise the model trained with `recipe` ("target": the recipe stored in the target checkpoint; a pretrain
  config name/path; or a mapping) on the training set minus the forget set, cached under `cache_dir`, keyed by
  (dataset, forget indices, recipe). Training it is a run of its own, made by the launch path before the
  unlearning run starts (`ensure`, called by lit_unlearn.launch.runs.fit_run); every later run with the same
  setting loads it.

Training a reference costs as much as training the target. On digits that is seconds; on CIFAR-10 with the
paper's recipe (50 epochs, batch 5000) it is the field's standard, but real, price of verification.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.core.process import process_rank
from lit_unlearn.storage.specs import build, describe, fingerprint
from lit_unlearn.verification.training_recipe import TrainingRecipe

__all__ = ["RetrainedReference", "preserved_rng", "REFERENCE_FILE", "write_reference"]

REFERENCE_FILE = "retrained.ckpt"


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Training a reference inside a run must not move the run's own random streams."""
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(), os.environ.get("PL_GLOBAL_SEED"))
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is None:
            os.environ.pop("PL_GLOBAL_SEED", None)
        else:
            os.environ["PL_GLOBAL_SEED"] = states[3]


class RetrainedReference:
    def __init__(self, ckpt: str | None = None, recipe: str | dict | None = "target",
                 cache_dir: str = "runs/retrained", train_if_missing: bool = True) -> None:
        """
        Args:
            ckpt: an already retrained model (a `lit-unlearn pretrain` checkpoint or a state dict); skips training.
            recipe: how to retrain: "target" (the recipe stored in the target checkpoint), a pretrain config name
                or path (e.g. "digits_pretrain"), or a mapping {epochs, lr, weight_decay, batch_size, seed,
                data_seed, network}.
            cache_dir: where retrained references are kept, one folder per (dataset, forget set, recipe).
            train_if_missing: False makes a missing cached reference an error instead of training it.
        """
        if ckpt is None and recipe is None:
            raise UserError("RetrainedReference needs a ckpt (an existing retrained model) or a recipe to train one")
        self.ckpt, self.recipe, self.cache_dir, self.train_if_missing = ckpt, recipe, cache_dir, train_if_missing
        self.info: dict[str, Any] = {}
        self.just_trained = False  # set by the launch path when it trained this reference for the current run

    # ----- what to train -------------------------------------------------------------------------------------------
    def resolve_recipe(self, target_ckpt: str | None) -> TrainingRecipe:
        if isinstance(self.recipe, dict):
            return TrainingRecipe.from_mapping(dict(self.recipe))
        if self.recipe != "target":
            return TrainingRecipe.from_config(str(self.recipe))
        if not target_ckpt:
            raise UserError("recipe='target' reads the recipe from the target checkpoint, but the module has no "
                            "target_ckpt; give reference.recipe (a pretrain config) or reference.ckpt")
        if not Path(target_ckpt).expanduser().is_file():
            raise MissingFileError(f"target checkpoint {target_ckpt} not found (needed for its training recipe)")
        recipe = TrainingRecipe.from_checkpoint(target_ckpt)
        if recipe is None:
            raise UserError(f"{target_ckpt} holds no training recipe (it was not written by `lit-unlearn pretrain`): "
                            "give reference.recipe (a pretrain config name or path, or {epochs, lr, batch_size, "
                            "seed}) or reference.ckpt (a model you retrained on the retain set)")
        return recipe

    def cache_folder(self, recipe: TrainingRecipe, dataset, forget_indices: np.ndarray, n_train: int) -> Path:
        key = fingerprint({"recipe": recipe.as_dict(), "dataset": describe(dataset), "n_train": int(n_train),
                           "forget": np.asarray(forget_indices, dtype=np.int64).tolist()})
        return Path(self.cache_dir) / key

    # ----- the reference model -------------------------------------------------------------------------------------
    def ensure(self, module, datamodule, train: Callable, log: Callable[[str], None] = print) -> bool:
        """Train and cache the reference of this run's setting if it is not cached yet; True if trained now.
        `train(recipe, dataset, forget, network_spec, root)` runs the training (the launch path's
        `train_classifier`) and returns the trained network. Processes started together (multi-node): the first
        trains, the others wait for the file. The run's random streams are left where they were."""
        self.just_trained = False
        if self.ckpt or not self.train_if_missing:
            return False
        if getattr(datamodule, "forget_indices", None) is None and hasattr(datamodule, "setup"):
            datamodule.setup("fit")
        if any(getattr(datamodule, a, None) is None for a in ("dataset", "forget", "forget_indices", "retain_indices")):
            return False  # not an image unlearning setting: ForgettingVerification says what it needs
        target_ckpt = getattr(module, "target_ckpt", None)
        n_train = len(datamodule.forget_indices) + len(datamodule.retain_indices)
        if not self.needs_training(target_ckpt, datamodule.dataset, datamodule.forget_indices, n_train):
            return False
        recipe = self.resolve_recipe(target_ckpt)
        folder = self.cache_folder(recipe, datamodule.dataset, datamodule.forget_indices, n_train)
        if process_rank() != 0:
            _wait_for(folder / REFERENCE_FILE)
            return False
        log(f"training the retrained reference on the retain set ({recipe.epochs} epochs, the target's recipe); "
            f"cached at {folder}")
        started = time.perf_counter()
        network_spec = getattr(module, "network_spec", None)
        with preserved_rng():
            network = train(recipe, datamodule.dataset, datamodule.forget, network_spec, folder / "runs")
        write_reference(folder, network, recipe, network_spec, {
            "dataset": describe(datamodule.dataset), "forget": describe(datamodule.forget),
            "n_forget": int(len(datamodule.forget_indices)), "n_train": int(n_train),
            "train_seconds": round(time.perf_counter() - started, 2)})
        self.just_trained = True
        return True

    def needs_training(self, target_ckpt: str | None, dataset, forget_indices: np.ndarray, n_train: int) -> bool:
        """Whether the reference of this setting must still be trained (no ckpt given, none cached)."""
        if self.ckpt:
            return False
        recipe = self.resolve_recipe(target_ckpt)
        return not (self.cache_folder(recipe, dataset, forget_indices, n_train) / REFERENCE_FILE).is_file()

    def load(self, network: nn.Module, *, target_ckpt: str | None, network_spec: dict | None, dataset, forget,
             forget_indices: np.ndarray, n_train: int, log: Callable[[str], None] = print,
             device: str | torch.device = "cpu") -> nn.Module:
        """The retrained model (given, or cached by the launch path), as a network of the same architecture as
        `network` (which is not modified)."""
        import copy

        from lit_unlearn.storage.checkpoints import load_network_weights

        if self.ckpt:
            reference = copy.deepcopy(network)
            load_network_weights(reference, self.ckpt)
            self.info = {"ckpt": str(self.ckpt), "trained": False, "source": "given"}
            return reference.eval()
        recipe = self.resolve_recipe(target_ckpt)
        folder = self.cache_folder(recipe, dataset, forget_indices, n_train)
        path = folder / REFERENCE_FILE
        if not path.is_file():
            hint = ("run `lit-unlearn retrain` with this configuration, or fit through lit_unlearn.launch (it trains "
                    "the reference first)") if self.train_if_missing else "run `lit-unlearn retrain` first"
            raise MissingFileError(f"no retrained reference cached at {path}: {hint}")
        reference = build(recipe.network) if recipe.network else copy.deepcopy(network)
        _check_same_architecture(reference, network, path)
        load_network_weights(reference, str(path))
        self.info = {"ckpt": str(path), "trained": self.just_trained, "source": "cache", "recipe": recipe.as_dict()}
        return reference.eval()


def write_reference(folder: Path, network: nn.Module, recipe: TrainingRecipe, network_spec: dict | None,
                    details: dict) -> Path:
    """Store a freshly retrained reference in its cache folder: the weights in the checkpoint layout the loader
    reads (written atomically: a killed retrain never leaves a half-written reference), and reference.json."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / REFERENCE_FILE
    from lit_unlearn.storage.files import atomic_path

    with atomic_path(path) as tmp:
        torch.save({"state_dict": {f"network.{k}": v.cpu() for k, v in network.state_dict().items()},
                    "training_recipe": {**recipe.as_dict(), "network": recipe.network or network_spec}}, tmp)
    (folder / "reference.json").write_text(json.dumps({"recipe": recipe.as_dict(), **details}, indent=1, default=str))
    return path


def _wait_for(path: Path, timeout: float = 3600.0) -> None:
    deadline = time.time() + timeout
    while not path.is_file():
        if time.time() > deadline:
            raise UserError(f"waited {timeout:.0f} s for the first process to train the retrained reference "
                            f"({path} never appeared)")
        time.sleep(1.0)


def _check_same_architecture(reference: nn.Module, network: nn.Module, path: Path) -> None:
    a = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    b = {k: tuple(v.shape) for k, v in network.state_dict().items()}
    if a != b:
        diff = sorted(set(a.items()) ^ set(b.items()))[:3]
        raise UserError(f"the recipe's network ({path}) is not the unlearned network's architecture "
                        f"(first differences: {diff}); set reference.recipe.network to the target's architecture")
