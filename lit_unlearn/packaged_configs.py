"""The configs shipped with the package (`configs/` in the repository, `lit_unlearn.configs` when installed).

A packaged config may start from another: a `# extends: OTHER` line in its first lines names it, and
`config_chain` returns the chain base-first, as LightningCLI wants the `--config` files.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from lit_unlearn.errors import UserError

__all__ = ["config_chain", "describe_configs", "list_configs", "packaged_config"]


def list_configs() -> list[str]:
    """Names (without .yaml) of every packaged config."""
    return sorted(p.name.removesuffix(".yaml") for p in resources.files("lit_unlearn.configs").iterdir()
                  if p.name.endswith(".yaml"))


def packaged_config(name: str) -> str:
    """Path of a config shipped with the package (`configs/NAME.yaml` in the repository)."""
    name = name.removesuffix(".yaml")
    path = resources.files("lit_unlearn.configs") / f"{name}.yaml"
    if not path.is_file():
        known = list_configs()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UserError(f"no packaged config {name!r}; {hint}see `lit-unlearn configs` for the list")
    return str(path)


def config_chain(name: str) -> list[str]:
    """The packaged config `name` preceded by the ones it extends (a `# extends: OTHER` line near its top)."""
    chain: list[str] = []
    while name:
        path = packaged_config(name)
        if path in chain:
            raise UserError(f"packaged config {name!r} extends itself (cycle in '# extends:' lines)")
        chain.insert(0, path)
        header = Path(path).read_text().splitlines()[:5]
        name = next((ln.split(":", 1)[1].strip() for ln in header if ln.startswith("# extends:")), "")
    return chain


def describe_configs() -> list[tuple[str, str, str]]:
    """(name, one-line purpose, path) of every packaged config; the purpose is the first sentence of its header."""
    out = []
    for name in list_configs():
        path = packaged_config(name)
        header = []
        for line in Path(path).read_text().splitlines():
            if not line.startswith("#") or line.startswith(("# extends:", "# lit-unlearn", "# resume")):
                break
            header.append(line[1:].strip())
        text = " ".join(header)
        sentence = text.split(". ")[0].rstrip(".")
        out.append((name, sentence if len(sentence) <= 110 else sentence[:107] + "...", path))
    return out
