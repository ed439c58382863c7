"""The world's retain-only fine-tune on another schedule: its own data (the level's retain split and the general
knowledge sets), learning rate, warm-up, cosine decay and clipping, from a chosen start (the base by default) for a
chosen number of epochs. At the recipe's epochs from the base it is the gold standard; fewer epochs give the curve
of a model that never saw the forget set against its compute, the line a robust-unlearning stage has to beat; from
another start it is a repair on the retain set."""

from __future__ import annotations

import math
from pathlib import Path

from lit_unlearn.worlds.tiny_llama import tiny_network_spec, train_tiny_llama
from lit_unlearn.worlds.tofu_world import KNOWLEDGE, TofuWorld, _finetune_data

__all__ = ["finetune_on_retain"]


def finetune_on_retain(world: TofuWorld, level: str, out: str | Path, epochs: float, tokenizer,
                       init_from: str | Path | None = None, lr: float | None = None) -> Path:
    """Fine-tune `init_from` (default: the world's base) on the level's retain data for `epochs` (whole epochs:
    the recipe's cosine schedule spans them) and save it to `out`; a finished folder is reused."""
    from lit_unlearn.data.tofu import FORGET_SPLITS
    from lit_unlearn.core.errors import UserError

    out = Path(out)
    if epochs <= 0 or epochs != math.floor(epochs):
        raise UserError(f"finetune_on_retain: epochs={epochs}: a positive whole number (the schedule spans them)")
    if (out / "config.json").is_file():
        return out
    r = world.recipe
    start = Path(init_from) if init_from is not None else world.base
    data = _finetune_data(world, [FORGET_SPLITS[level][1], *KNOWLEDGE], world.seed)
    network = tiny_network_spec(len(tokenizer), world.seed, r.size, r.max_length, init_from=str(start))
    train_tiny_llama(out, tokenizer, data, int(epochs), lr or r.lr, world.seed, network=network,
                     identity={"data": data, "start": str(start.resolve()), "epochs": epochs, "lr": lr or r.lr},
                     module_args={"lr_schedule": "cosine", "warmup_fraction": r.warmup_fraction},
                     trainer={"gradient_clip_val": r.gradient_clip}, root=out.parent / ".runs" / out.name)
    return out
