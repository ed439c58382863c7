"""Files shipped with the package: the configs (`configs/` in the repository, `lit_unlearn.configs` when
installed). Only the standard library is imported here: the command line's help reads it."""

from __future__ import annotations

import difflib
from importlib import resources

from lit_unlearn.errors import UserError

__all__ = ["list_configs", "packaged_config"]


def list_configs() -> list[str]:
    """Names (without .yaml) of every packaged config."""
    return sorted(p.name.removesuffix(".yaml") for p in resources.files("lit_unlearn.configs").iterdir()
                  if p.name.endswith(".yaml"))


def packaged_config(name: str) -> str:
    """Path of a config shipped with the package (`configs/NAME.yaml` in the repository)."""
    name = name.removesuffix(".yaml")
    path = resources.files("lit_unlearn.configs") / f"{name}.yaml"
    if not path.is_file():
        close = difflib.get_close_matches(name, list_configs(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UserError(f"no packaged config {name!r}; {hint}see `lit-unlearn configs` for the list")
    return str(path)
