"""Files shipped with the package: the configs (`configs/` in the repository, `lit_unlearn.configs` when
installed), laid out by kind, then by model and task within a kind:

    configs/pretrain/NAME.yaml             training a target: `lit-unlearn pretrain --preset NAME`
    configs/unlearn/TASK/NAME.yaml         unlearning runs: `lit-unlearn unlearn|retrain|tofu-demo --preset NAME`
    configs/base/NAME.yaml                 shared settings, only named by other configs' `# extends:` lines
    configs/bench/NAME.yaml                `lit-unlearn bench --preset NAME`
    configs/experiment/NAME.yaml           `lit-unlearn experiment --preset NAME`
    configs/audit/NAME.yaml                `lit-unlearn audit --preset NAME`
    configs/distill/NAME.yaml              the distillation stage: `lit-unlearn unlearn|tofu-demo --distill NAME`
    configs/setup/setup_NAME.yaml          hardware settings: `lit-unlearn unlearn ... --setup NAME`

A config is named by its file name alone (names are unique across the tree), and a command accepts only the
kinds it runs. Only the standard library is imported here: the command line's help reads it.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources

from lit_unlearn.core.errors import UserError

__all__ = ["KINDS", "list_configs", "config_kind", "packaged_config", "commands_of"]

# kind -> (what it is, the commands that run it)
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pretrain": ("trains a target", ("pretrain",)),
    "unlearn": ("an unlearning run", ("unlearn", "retrain", "tofu-demo")),
    "base": ("shared settings for `# extends:`", ()),
    "bench": ("a benchmark of every LLM method", ("bench",)),
    "experiment": ("an experiment suite", ("experiment",)),
    "audit": ("the attacks of an audit", ("audit",)),
    "distill": ("the distillation stage after unlearning", ("unlearn", "tofu-demo")),
    "setup": ("hardware settings", ()),
}


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[str, str, str]]:
    """{name: (kind, task or "", path)} of every packaged config."""
    out: dict[str, tuple[str, str, str]] = {}
    root = resources.files("lit_unlearn.configs")

    def walk(folder, parts):
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.name.startswith(("_", ".")):
                walk(entry, parts + [entry.name])
            elif entry.name.endswith(".yaml") and parts and parts[0] in KINDS:
                name = entry.name.removesuffix(".yaml")
                if name in out:
                    raise RuntimeError(f"two packaged configs are named {name!r}: {out[name][2]} and {entry}")
                out[name] = (parts[0], "/".join(parts[1:]), str(entry))

    walk(root, [])
    return dict(sorted(out.items()))


def list_configs(kind: str | None = None) -> list[str]:
    """Names (without .yaml) of every packaged config, or of one kind."""
    return [name for name, (k, _, _) in _index().items() if kind is None or k == kind]


def config_kind(name: str) -> str | None:
    entry = _index().get(name.removesuffix(".yaml"))
    return None if entry is None else entry[0]


def commands_of(name: str) -> tuple[str, ...]:
    """The commands that run a packaged config."""
    kind = config_kind(name)
    return () if kind is None else KINDS[kind][1]


def packaged_config(name: str, kinds: tuple[str, ...] | None = None, command: str | None = None) -> str:
    """Path of a config shipped with the package; with `kinds`, only one of those kinds (the command's)."""
    name = name.removesuffix(".yaml")
    entry = _index().get(name)
    if entry is None:
        pool = list_configs() if kinds is None else [n for k in kinds for n in list_configs(k)]
        close = difflib.get_close_matches(name, pool, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UserError(f"no packaged config {name!r}; {hint}see `lit-unlearn configs` for the list")
    kind, _, path = entry
    if kinds is not None and kind not in kinds:
        runs = KINDS[kind][1]
        who = f"`lit-unlearn {runs[0]} --preset {name}` runs it" if runs else "name it in a `# extends:` line"
        raise UserError(f"{name!r} is {KINDS[kind][0]} (configs/{kind}/), not a config for "
                        f"`lit-unlearn {command or 'this command'}`: {who}")
    return path
