"""Preflight: everything a run needs is checked from its config before any weights load, any folder is made or any
process group forms, so a 7B job fails in seconds, not after every rank has loaded the model.

    notes = preflight(config)     # a LightningCLI config as a plain dict; raises a one-line UserError

Checked, in this order:
- hardware: the GPUs asked for exist, DeepSpeed is installed where a strategy names it, and the global batches
  divide over every process;
- model: the model folder has a config of a transformers causal-LM architecture, runs no remote code, and its weights
  are safetensors (pickled weights only behind lit_unlearn.storage.safe_load's opt-in);
- data: every file exists, parses, has its columns and is non-empty; forget and retain share no item (a source with a
  `check()` method: OwnData, a local TofuSource); the tokenizer folder holds a tokenizer;
- references: every file an evaluation reads at the end (a retain-only report, a base model, a gold standard);
- output: the run root can be written (nothing is created to find out);
- hardware: the GPUs asked for exist, and DeepSpeed is installed where a strategy names it.

Every check reads only the files and the config, the same on every rank: under several processes each rank fails at
the same check with the same line, so none waits on another that exited. `notes` say what the run will skip.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import MissingFileError, UserError

from lit_unlearn.models.model_folder import check_model_folder, check_tokenizer_folder

__all__ = ["preflight", "check_writable", "check_hardware", "check_data"]

NETWORKS = ("lit_unlearn.models.CausalLM", "lit_unlearn.models.causal_lm.CausalLM")


def _init_args(node: Any) -> dict:
    return (node or {}).get("init_args") or {} if isinstance(node, dict) else {}


def _class(node: Any) -> str:
    return str(node.get("class_path", "")) if isinstance(node, dict) else ""


def check_writable(root: Any, what: str = "output folder") -> None:
    """`root` can be created and written, judged from its nearest existing ancestor; nothing is created."""
    path = Path(str(root or ".")).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{what} {path}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{what} {path} cannot be written ({probe} is not writable): choose another run root")


def _device_count(accelerator: str) -> int:
    import torch

    if accelerator in ("gpu", "cuda", "auto"):
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return 0


def check_hardware(trainer: dict) -> None:
    """The accelerator and devices asked for exist here; DeepSpeed is installed where a strategy needs it."""
    accelerator = str(trainer.get("accelerator") or "auto").lower()
    devices = trainer.get("devices", "auto")
    strategy = trainer.get("strategy")
    strategy_name = (_class(strategy) if isinstance(strategy, dict) else str(strategy or "")).lower()
    if "deepspeed" in strategy_name and importlib.util.find_spec("deepspeed") is None:
        raise UserError("the strategy is DeepSpeed, which is not installed here: pip install deepspeed==0.19.8 "
                        "(bash scripts/bootstrap.sh --gpu installs it), or choose another strategy")
    if accelerator in ("gpu", "cuda", "mps"):
        have = _device_count(accelerator)
        want = devices if isinstance(devices, int) else len(devices) if isinstance(devices, (list, tuple)) else \
            int(devices) if str(devices).lstrip("-").isdigit() else None
        if have == 0:
            raise UserError(f"the run asks for {accelerator.upper()}s (trainer.accelerator={accelerator}) but this "
                            "machine has none: run on a GPU machine, or set --trainer.accelerator=cpu")
        if want is not None and want > have:
            raise UserError(f"the run asks for {want} {accelerator.upper()}s per node (trainer.devices) but this "
                            f"machine has {have}: set --trainer.devices={have} or fewer")


def _world_size(trainer: dict) -> int | None:
    """devices × num_nodes, where the config says it in numbers (None: 'auto' and the like)."""
    devices, nodes = trainer.get("devices", "auto"), trainer.get("num_nodes", 1) or 1
    if isinstance(devices, (list, tuple)):
        devices = len(devices)
    elif str(devices).lstrip("-").isdigit():
        devices = int(devices)
        if devices == -1:
            devices = _device_count(str(trainer.get("accelerator") or "auto").lower()) or None
    else:
        return None
    return None if devices is None else devices * int(nodes)


def check_batches(trainer: dict, data: dict) -> list[str]:
    """The global batches split evenly over every process, and each process's share into equal micro-batches of at
    most `micro_batch_size` items (gradients summed before the step); a note says each process's work per step."""
    from lit_unlearn.data.micro_batches import micro_batch_parts

    world = _world_size(trainer)
    args = _init_args(data)
    sizes = {name: args.get(name) for name in ("retain_batch_size", "forget_batch_size")}
    for name, size in sizes.items():
        if world and isinstance(size, int) and size % world:
            raise UserError(f"data.init_args.{name}={size} is a global batch, split over {world} processes (devices x "
                            f"num_nodes): make it a multiple of {world}")
    if not all(isinstance(v, int) for v in sizes.values()):
        return []
    r, f = (sizes[k] // (world or 1) for k in ("retain_batch_size", "forget_batch_size"))
    micro = args.get("micro_batch_size")
    parts = micro_batch_parts(r, f, micro if isinstance(micro, int) else None) if world else 1
    notes = []
    if world and world > 1:
        notes.append(f"each of the {world} processes computes {r} retain + {f} forget items per step (the global "
                     f"{sizes['retain_batch_size']} + {sizes['forget_batch_size']})")
    if parts > 1:
        notes.append(f"each process passes its share in {parts} micro-batches of {r // parts} retain + {f // parts} "
                     f"forget items (micro_batch_size {micro}), their gradients summed before each step")
    return notes


def check_data(data: dict) -> list[str]:
    """The datamodule's source files and tokenizer (see the module docstring); notes on what will be skipped."""
    from lit_unlearn.storage.specs import build

    args = _init_args(data)
    notes: list[str] = []
    source = args.get("source")
    if isinstance(source, dict) and _class(source):
        cls_path = _class(source)
        module, _, name = cls_path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return notes  # the config parser reports a bad class path itself
        if hasattr(cls, "check"):
            notes += build(source).check() or []
    if "tokenizer" in args and isinstance(args["tokenizer"], (str, Path)):
        check_tokenizer_folder(args["tokenizer"])
    elif "tokenizer" in args and args["tokenizer"] is None and source is not None:
        raise UserError("no tokenizer: give data.init_args.tokenizer (usually your model folder; the short form "
                        "--model-dir sets it)")
    return notes


# callback -> the init arguments that name a file it reads when fitting ends ("world": the world's own, checked there)
REFERENCE_FILES = {"TofuEvaluation": ("reference",), "HoldoutVerification": ("gold_standard",)}


def _references(callbacks: list) -> None:
    """Files an evaluation callback reads when fitting ends (a retain-only report, a base model, a gold standard)."""
    for cb in callbacks or []:
        args, name = _init_args(cb), _class(cb).rsplit(".", 1)[-1]
        for key in REFERENCE_FILES.get(name, ()):
            value = args.get(key)
            if isinstance(value, str) and value != "world" and not Path(value).expanduser().is_file():
                hint = " (make it first: docs/guide/own-model.md, 'A retain-only reference')" if key == "reference" \
                    else ""
                raise MissingFileError(f"{name}({key}=...): {value} not found; it is read when the run ends{hint}")
        if name == "HoldoutVerification" and args.get("reference_model") not in (None, "world"):
            check_model_folder(args["reference_model"], f"{name}(reference_model=...)")


def preflight(config: dict) -> list[str]:
    """Check a run's config before anything heavy happens (module docstring); returns notes on what it will skip."""
    trainer = config.get("trainer") or {}
    check_hardware(trainer)
    network = _init_args(config.get("model")).get("network")
    if _class(network) in NETWORKS:
        name = _init_args(network).get("name_or_path")
        if name is not None:
            check_model_folder(name)
        elif _init_args(network).get("config") is None:
            raise UserError("no model: give --model-dir DIR (your Hugging Face model folder), or "
                            "model.init_args.network.init_args.name_or_path in your YAML")
    notes = check_batches(trainer, config.get("data") or {})
    notes += check_data(config.get("data") or {})
    _references(trainer.get("callbacks") or [])
    logger = trainer.get("logger")
    loggers = logger if isinstance(logger, list) else [logger]
    roots = [_init_args(lg).get("save_dir") for lg in loggers if isinstance(lg, dict)]
    for root in [trainer.get("default_root_dir"), *roots]:
        if root:
            check_writable(root)
    return notes
