"""Local folder or HF hub name? One rule for models, tokenizers and datasets, and errors that say which.

A name that exists on disk is a local folder or file. Otherwise it must look like a hub name ("owner/name",
one slash): anything else, e.g. "runs/tofu/tokenizer" that was never written, is a missing folder, reported as
such rather than as a malformed hub repo id.
"""

from __future__ import annotations

import re
from pathlib import Path

from lit_unlearn.errors import MissingFileError, UserError

__all__ = ["resolve_pretrained", "is_hub_name", "hub_error"]

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_name(name: str) -> bool:
    return bool(_HUB_NAME.fullmatch(str(name))) and not Path(name).expanduser().exists()


def resolve_pretrained(name: str, what: str, hint: str = "") -> str:
    """`name` as a local path if it exists, as a hub name if it looks like one; else a clear error."""
    path = Path(str(name)).expanduser()
    if path.exists():
        return str(path)
    if _HUB_NAME.fullmatch(str(name)):
        return str(name)
    raise MissingFileError(f"{what} {name!r}: no such folder (and not a hub name like owner/name)"
                           + (f"; {hint}" if hint else ""))


def hub_error(what: str, name: str, err: Exception) -> UserError:
    """A hub download that failed (offline machine, private or misspelled repo) as one clear message."""
    return UserError(f"could not load {what} {name!r} from the Hugging Face hub ({type(err).__name__}: "
                     f"{str(err).splitlines()[0][:160]}); check the name, log in for gated models, or download it "
                     "and pass the local folder")
