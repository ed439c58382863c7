"""Checkpoints opened without running code from them.

A `.ckpt` or `.pt` file is a pickle: `torch.load(weights_only=False)` runs whatever a crafted file asks for. Every
checkpoint the project opens (resume, `export`, a target, a run's identity) goes through `load_checkpoint`, which uses
torch's restricted unpickler (`weights_only=True`) with an allow-list of the few plain types Lightning's and
DeepSpeed's checkpoints hold. Anything else is refused in one line. Loading it anyway takes an explicit opt-in that
names the risk: the environment variable `LIT_UNLEARN_TRUST_CHECKPOINT_CODE=1`, for files you made yourself.

DeepSpeed opens its own shard files with `weights_only=False`; `check_checkpoint` vets every file of a sharded
folder with the restricted unpickler first (memory-mapped: the pickle stream is read, the tensor data is not).
"""

from __future__ import annotations

import os
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError

__all__ = ["load_checkpoint", "check_checkpoint", "TRUST_ENV", "trusted", "allowed_globals"]

TRUST_ENV = "LIT_UNLEARN_TRUST_CHECKPOINT_CODE"


def trusted() -> bool:
    """Whether the user opted in to unpickling checkpoints that may run code."""
    return os.environ.get(TRUST_ENV, "").lower() in ("1", "true", "yes")


@lru_cache(maxsize=1)
def allowed_globals() -> tuple:
    """The plain types found in the checkpoints Lightning and DeepSpeed write (hyper-parameter containers, paths,
    enums and numpy scalars), beyond what torch allows by itself."""
    import collections
    import pathlib

    import numpy as np

    multiarray = getattr(getattr(np, "_core", None), "multiarray", None)  # numpy 2 (numpy 1: np.core)
    if multiarray is None:
        from numpy.core import multiarray
    found: list = [collections.defaultdict, collections.OrderedDict, pathlib.PosixPath, pathlib.WindowsPath,
                   pathlib.PurePosixPath, set, frozenset, slice, complex, np.dtype, np.ndarray, multiarray.scalar,
                   multiarray._reconstruct]
    found += [type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32", "bool")]
    for module, names in (("lightning.fabric.utilities.data", ("AttributeDict",)),
                          ("lightning.pytorch.utilities.parsing", ("AttributeDict",)),
                          ("torch.torch_version", ("TorchVersion",)),
                          ("deepspeed.runtime.zero.config", ("ZeroStageEnum",)),
                          ("deepspeed.runtime.fp16.loss_scaler", ("LossScaler", "DynamicLossScaler")),
                          ("deepspeed.utils.tensor_fragment", ("fragment_address",)),
                          ("deepspeed.checkpoint.constants", ()),
                          ("argparse", ("Namespace",)),
                          ("jsonargparse", ("Namespace",))):
        try:
            imported = __import__(module, fromlist=list(names) or ["_"])
        except Exception:  # noqa: BLE001 - an optional library (DeepSpeed) that is not installed
            continue
        found += [getattr(imported, n) for n in names if hasattr(imported, n)]
    return tuple(dict.fromkeys(g for g in found if g is not None))


def _refusal(path: Path, err: Exception) -> UserError:
    reason = " ".join(str(err).split())
    detail = reason.split("Unsupported global:")[-1].split(". ")[0].strip() if "Unsupported global" in reason \
        else reason[:120]
    return UserError(f"{path} asks to run code or build an object outside the allow-list when unpickled "
                     f"({detail}); it is refused. If you made this file yourself and trust it, set {TRUST_ENV}=1 to "
                     "load it anyway (that runs any code it holds)")


def load_checkpoint(path: str | Path, mmap: bool = False, map_location: Any = "cpu") -> Any:
    """torch.load with the restricted unpickler and the allow-list; a refused file is a one-line UserError."""
    import torch

    path = Path(path)
    try:
        with torch.serialization.safe_globals(list(allowed_globals())):
            try:
                return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
            except RuntimeError as err:
                if not mmap or "mmap" not in str(err):
                    raise
                return torch.load(path, map_location=map_location, weights_only=True)  # a legacy (non-zip) file
    except pickle.UnpicklingError as err:
        if not trusted():
            raise _refusal(path, err) from None
    import warnings

    warnings.warn(f"{TRUST_ENV}=1: unpickling {path} with code allowed", stacklevel=2)
    return torch.load(path, map_location=map_location, weights_only=False, mmap=mmap)


def check_checkpoint(path: str | Path) -> None:
    """Vet a checkpoint file, or every file of a sharded (DeepSpeed) checkpoint folder, before a library that
    unpickles it without restriction opens it."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*.pt")) if path.is_dir() else [path]
    for file in files:
        load_checkpoint(file, mmap=True)
