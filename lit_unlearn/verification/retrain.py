"""The gold standard of unlearning: the target's architecture, trained with the target's recipe on D_r alone.

`RetrainedReference` gives an unlearning run its retrained model:
- `ckpt=PATH`: a model the user retrained already (a `lit-unlearn pretrain` checkpoint or a state dict);
- otherwise it trains one with `recipe` ("target": the recipe stored in the target checkpoint; a pretrain
  config name/path; or a mapping) on the training set minus the forget set, and caches it under `cache_dir`,
  keyed by (dataset, forget indices, recipe): every later run with the same setting loads it.

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

from lit_unlearn.errors import MissingFileError, UserError
from lit_unlearn.specs import build, describe, fingerprint
from lit_unlearn.verification.recipe import TrainingRecipe

__all__ = ["RetrainedReference", "train_classifier", "preserved_rng"]


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


def train_classifier(recipe: TrainingRecipe, dataset, forget=None, network_spec: dict | None = None,
                     save_to: str | Path | None = None, progress: bool = False, device: str | torch.device = "cpu"):
    """Train a classifier with `recipe` on `dataset`'s training split (minus `forget`, when given), exactly as
    `lit-unlearn pretrain` does (seed_everything(seed), build the network, AdamW, seeded shuffling, one optimizer
    step per batch), as a plain loop: it runs inside any process, also one rank of a distributed run, without
    starting a second Trainer. Returns the trained SupervisedModule (its `network` is the model)."""
    from lightning.fabric.utilities.seed import seed_everything

    from lit_unlearn.data.datamodules import ClassificationDataModule
    from lit_unlearn.modules.classifier import SupervisedModule
    from lit_unlearn.algorithms.losses import mean_nll
    from lit_unlearn.batches import logits_and_labels

    spec = recipe.network or network_spec
    if spec is None:
        raise UserError("the training recipe does not say which network to build: give recipe.network "
                        "(class_path/init_args) or train the target with `lit-unlearn pretrain`")
    seed_everything(recipe.seed, verbose=False)
    module = SupervisedModule(build(spec), lr=recipe.lr, weight_decay=recipe.weight_decay)
    module.network_spec = spec
    dm = ClassificationDataModule(dataset, batch_size=recipe.batch_size, seed=recipe.data_seed, forget=forget)
    dm.setup("fit")
    network = module.network.to(device).train()
    optimizer = module.configure_optimizers()
    loader = dm.train_dataloader()
    bar = _progress(progress, recipe.epochs * len(loader))
    for _ in range(recipe.epochs):
        for batch in loader:
            optimizer.zero_grad()
            loss = mean_nll(*logits_and_labels(network, [t.to(device) for t in batch]))
            if not torch.isfinite(loss):
                raise FloatingPointError(f"retraining diverged (loss {loss.item()}): check the recipe's lr")
            loss.backward()
            optimizer.step()
            bar.update(1)
    bar.close()
    network.eval()
    if save_to is not None:
        save_to = Path(save_to)
        save_to.parent.mkdir(parents=True, exist_ok=True)
        tmp = save_to.with_name(save_to.name + ".tmp")
        torch.save({"state_dict": {f"network.{k}": v.cpu() for k, v in network.state_dict().items()},
                    "training_recipe": {**recipe.as_dict(), "network": spec}}, tmp)
        os.replace(tmp, save_to)  # atomic: a killed retrain never leaves a half-written reference in the cache
    return module


def _progress(enabled: bool, total: int):
    import sys

    from tqdm.auto import tqdm

    return tqdm(total=total, desc="retraining", disable=not (enabled and sys.stdout.isatty()), leave=False,
                file=sys.stdout)


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
    def load(self, network: nn.Module, *, target_ckpt: str | None, network_spec: dict | None, dataset, forget,
             forget_indices: np.ndarray, n_train: int, log: Callable[[str], None] = print,
             device: str | torch.device = "cpu") -> nn.Module:
        """The retrained model, as a network of the same architecture as `network` (which is not modified)."""
        import copy

        from lit_unlearn.checkpoints import load_network_weights

        if self.ckpt:
            reference = copy.deepcopy(network)
            load_network_weights(reference, self.ckpt)
            self.info = {"ckpt": str(self.ckpt), "trained": False, "source": "given"}
            return reference.eval()
        recipe = self.resolve_recipe(target_ckpt)
        folder = self.cache_folder(recipe, dataset, forget_indices, n_train)
        path = folder / "retrained.ckpt"
        trained = False
        if not path.is_file():
            if not self.train_if_missing:
                raise MissingFileError(f"no retrained reference cached at {path}; run `lit-unlearn retrain` first "
                                       "or allow train_if_missing")
            log(f"training the retrained reference on the retain set ({recipe.epochs} epochs, the target's recipe); "
                f"cached at {folder}")
            started = time.perf_counter()
            with preserved_rng():
                train_classifier(recipe, dataset, forget, network_spec=network_spec, save_to=path, progress=True,
                                 device=device)
            (folder / "reference.json").write_text(json.dumps({
                "recipe": recipe.as_dict(), "dataset": describe(dataset), "forget": describe(forget),
                "n_forget": int(len(forget_indices)), "n_train": int(n_train),
                "train_seconds": round(time.perf_counter() - started, 2)}, indent=1, default=str))
            trained = True
        reference = build(recipe.network) if recipe.network else copy.deepcopy(network)
        _check_same_architecture(reference, network, path)
        load_network_weights(reference, str(path))
        self.info = {"ckpt": str(path), "trained": trained, "source": "cache", "recipe": recipe.as_dict()}
        return reference.eval()


def _check_same_architecture(reference: nn.Module, network: nn.Module, path: Path) -> None:
    a = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    b = {k: tuple(v.shape) for k, v in network.state_dict().items()}
    if a != b:
        diff = sorted(set(a.items()) ^ set(b.items()))[:3]
        raise UserError(f"the recipe's network ({path}) is not the unlearned network's architecture "
                        f"(first differences: {diff}); set reference.recipe.network to the target's architecture")
