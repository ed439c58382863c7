"""Known-harmless library noise, silenced where it is made (the command line's default; `--verbose` skips this).

Each entry below was seen on a plain `lit-unlearn demo` or `tofu-demo` run and says nothing the user can act
on. Lightning's info lines (accelerator, litlogger tip, "fit stopped") are turned off by raising its loggers'
level to warnings: real warnings still come through. The tool's own lines are printed by
`lit_unlearn.core.console.say` and are not affected.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

__all__ = ["silence_library_noise", "quiet_lightning", "NOISE"]

LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning", "pytorch_lightning", "DeepSpeed", "deepspeed")
_silenced = False

NOISE = (
    r".*LightningCLI's args parameter is intended to run from within Python.*",
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",
    r".*`IterableDataset` has `__len__` defined.*",
    r".*Using ModelCheckpoint with manual optimization.*",
    r".*Found \d+ module\(s\) in eval mode.*",
    r".*Total length of `\w+` across ranks is zero.*",
    r".*compute.* method of metric .* was called before the .*update.* method.*",
    r".*does not have many workers which may be a bottleneck.*",
    r".*Checkpoint directory .* exists and is not empty.*",
    r".*`weights_only` was not set.*",
    r".*The number of training batches \(\d+\) is smaller than the logging interval.*",
    r".*is deprecated and will be removed.*torch.distributed.*",
    r".*You are using a CUDA device.*",
    r".*TensorBoard support.*",
)


def quiet_lightning() -> None:
    """Lightning's info lines off (its loggers to warnings), if the command line asked for quiet. Lightning sets
    them to INFO when it is imported, which comes after the command line starts (it loads Lightning only for the
    commands that train): the launch path calls this once it has imported Lightning."""
    if _silenced:
        for name in LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def silence_library_noise() -> None:
    global _silenced
    _silenced = True
    for pattern in NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    quiet_lightning()
    # Weight-shard loading/writing bars and generation-flag notes. Importing Lightning already imports
    # transformers where it is installed, so the environment variables alone come too late: switch them off too.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    # DeepSpeed warns at import that it fell back to the CPU when it finds no GPU: say it explicitly instead (the
    # driver's device files tell without importing torch, which help and listing commands never load).
    if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl")) and \
            not os.environ.get("CUDA_VISIBLE_DEVICES"):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
