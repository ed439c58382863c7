"""The `lit-unlearn` commands: one module per subcommand in this package, found through this registry.

A command module declares itself with `@command(...)` on its entry point and imports nothing heavy at its top, so
the dispatcher (`lit_unlearn.cli`) can import every one of them to list, document and parse them in a fraction of
a second. Adding a command is adding one file here.

Two kinds, parsed one way each (by the dispatcher, `lit_unlearn.cli`, with `lit_unlearn.launch.arguments`):
- function commands: the options are the entry point's keyword parameters (types, defaults and the docstring's
  `Args:` give `--help`; `--config FILE` reads them from YAML), parsed by jsonargparse;
- training commands: a preset's LightningCLI configs plus the user's `--config` files and `--KEY=VALUE` overrides,
  parsed by LightningCLI; the command's own options (declared as keyword parameters too, e.g. `--fresh`) and the
  shared `--preset` / `--target` are taken out first.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Command", "command", "all_commands"]


@dataclass(frozen=True)
class Command:
    name: str
    purpose: str                      # one line, shown by `lit-unlearn --help`
    run: Callable                     # the entry point
    training: bool = False            # True: LightningCLI arguments after the command's own options
    preset: str | None = None         # training commands: the default packaged config
    target: bool = False              # training commands: takes --target
    examples: tuple[str, ...] = field(default_factory=tuple)
    order: int = 100                  # position in the help listing
    positional: tuple[str, ...] = ()  # function commands: parameters also given by position (`export CKPT OUT`)


_REGISTRY: dict[str, Command] = {}


def command(name: str, purpose: str, **details) -> Callable[[Callable], Callable]:
    """Register the decorated function as `lit-unlearn NAME` (see Command for the details)."""

    def register(run: Callable) -> Callable:
        _REGISTRY[name] = Command(name, purpose, run, **details)
        return run

    return register


def all_commands() -> dict[str, Command]:
    """Every command, in help order (importing this package's modules registers them)."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (kv[1].order, kv[0])))
