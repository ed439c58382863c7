"""Local folder or HF hub name? One rule for models, tokenizers and datasets, and errors that say which.

A name that exists on disk is a local folder or file. Otherwise it must look like a hub name ("owner/name",
one slash): anything else, e.g. "runs/tofu/tokenizer" that was never written, is a missing folder, reported as
such rather than as a malformed hub repo id.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from lit_unlearn.core.errors import MissingFileError, UserError

__all__ = ["resolve_pretrained", "is_hub_name", "hub_error", "offline"]

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_name(name: str) -> bool:
    return bool(_HUB_NAME.fullmatch(str(name))) and not Path(name).expanduser().exists()


def resolve_pretrained(name: str, what: str, hint: str = "") -> str:
    """`name` as a local path if it exists, as a hub name if it looks like one and the hub can be asked; else a
    one-line error naming the folder (no download attempts and retries first)."""
    path = Path(str(name)).expanduser()
    if path.exists():
        return str(path)
    tail = f"; {hint}" if hint else ""
    if _HUB_NAME.fullmatch(str(name)):
        owner = Path(str(name)).parts[0]
        if Path(owner).is_dir():  # "runs/nonexist" where ./runs exists: a local path that is not there
            raise MissingFileError(f"{what} {name!r}: no such folder ({owner}/ exists here, so this is a local path, "
                                   f"not a hub name){tail}")
        if offline():
            raise MissingFileError(f"{what} {name!r}: no such folder, and the Hugging Face hub cannot be reached "
                                   f"(offline) to look for a repo of that name{tail}")
        return str(name)
    raise MissingFileError(f"{what} {name!r}: no such folder (and not a hub name like owner/name){tail}")


def offline() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set, or huggingface.co unreachable within 3 s (asked once)."""
    import os

    if any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    return not _hub_reachable()


@functools.lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    import socket

    try:
        with socket.create_connection(("huggingface.co", 443), timeout=3):
            return True
    except OSError:
        return False


def hub_error(what: str, name: str, err: Exception) -> UserError:
    """A hub download that failed (offline machine, private or misspelled repo) as one clear message."""
    return UserError(f"could not load {what} {name!r} from the Hugging Face hub ({type(err).__name__}: "
                     f"{str(err).splitlines()[0][:160]}); check the name, log in for gated models, or download it "
                     "and pass the local folder")
