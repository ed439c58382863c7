"""Presets (the packaged configs, lit_unlearn.storage.packaged_files) and the `# extends:` chain of any config.

A config may start from another: a `# extends: OTHER` line anywhere in its header comment (the `#` lines before
the first YAML line) names it, as a packaged config name or a path (relative to the config's own folder).
`config_chain` returns the chain base-first, as LightningCLI wants its `--config` files. This module imports
nothing heavy: the command line's help and `lit-unlearn configs` use it.
"""

from __future__ import annotations

from pathlib import Path

from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.storage.packaged_files import KINDS, config_kind, list_configs, packaged_config

__all__ = ["config_chain", "describe_configs", "list_configs", "packaged_config", "header_comment", "extends_of",
           "kinds_for", "check_preset"]


def header_comment(path: str | Path) -> list[str]:
    """The comment lines (without '#') before a config's first YAML line."""
    out = []
    for line in Path(path).read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if stripped:
            out.append(stripped[1:].strip())
    return out


def extends_of(path: str | Path) -> str | None:
    """What a config's `# extends:` line names (None without one)."""
    for line in header_comment(path):
        if line.startswith("extends:"):
            return line.split(":", 1)[1].strip() or None
    return None


def _resolve(name: str, relative_to: Path | None) -> str:
    """A config path: a file path (absolute, relative to the extending config's folder, or to the working
    directory), or else the name of a packaged config."""
    candidate = Path(name).expanduser()
    places = [candidate] if candidate.is_absolute() else [p for p in (relative_to and relative_to / candidate,
                                                                        candidate) if p]
    for path in places:
        if path.is_file():
            return str(path)
    if candidate.suffix in (".yaml", ".yml") or len(candidate.parts) > 1:
        where = f" (looked in {relative_to} and the working directory)" if relative_to else ""
        raise MissingFileError(f"config {name} not found{where}")
    return packaged_config(name)


def config_chain(name_or_path: str) -> list[str]:
    """The config (a packaged name or a path) preceded by every config it extends, base first."""
    chain: list[str] = []
    current: str | None = name_or_path
    folder: Path | None = None
    while current:
        path = _resolve(current, folder)
        if path in chain:
            raise UserError(f"config {current!r} extends itself (a cycle of '# extends:' lines: "
                            f"{' -> '.join(reversed(chain))} -> {path})")
        chain.insert(0, path)
        folder = Path(path).parent
        current = extends_of(path)
    return chain


def kinds_for(command: str) -> tuple[str, ...]:
    """The config kinds a command runs (lit_unlearn.storage.packaged_files.KINDS)."""
    return tuple(kind for kind, (_, commands) in KINDS.items() if command in commands)


def check_preset(name_or_path: str, command: str) -> None:
    """A packaged config name given to `command` must be of a kind it runs (a file path is the user's own)."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or len(candidate.parts) > 1 or candidate.is_file():
        return
    packaged_config(name_or_path, kinds_for(command), command)


def describe_configs(kind: str | None = None) -> list[tuple[str, str, str, str]]:
    """(name, kind, one-line purpose, path) of every packaged config (or of one kind); the purpose is the first
    sentence of its header."""
    out = []
    for name in list_configs(kind):
        path = packaged_config(name)
        header = []
        for line in header_comment(path):
            if line.startswith(("extends:", "lit-unlearn", "resume")) or not line:
                break
            header.append(line)
        text = " ".join(header)
        sentence = text.split(". ")[0].rstrip(".")
        out.append((name, config_kind(name), sentence if len(sentence) <= 110 else sentence[:107] + "...", path))
    return out
