"""Objects from `{class_path, init_args}` specs (the LightningCLI / YAML form) and back to a plain description.

`build` instantiates a spec, nested specs inside init_args too. `describe` turns a configured object (a data
source, a forget spec) into a JSON-able description, used to key caches such as the retrained reference's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lit_unlearn.errors import UserError

__all__ = ["build", "describe", "fingerprint", "namespace_to_dict"]


def build(spec: dict[str, Any], **overrides: Any) -> Any:
    """Instantiate {class_path, init_args}; nested specs inside init_args are built too."""
    from lightning.pytorch.cli import instantiate_class

    if not isinstance(spec, dict) or "." not in str(spec.get("class_path", "")):
        raise UserError(f"expected a mapping with a dotted class_path (and optional init_args), got {spec!r}")
    args = {k: build(v) if isinstance(v, dict) and "class_path" in v else v
            for k, v in (spec.get("init_args") or {}).items()}
    args.update(overrides)
    return instantiate_class((), {"class_path": spec["class_path"], "init_args": args})


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value.expanduser().resolve())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):  # numpy / torch arrays
        return value.tolist()
    return describe(value)


def describe(obj: Any) -> dict[str, Any]:
    """{"class": module.Qualname, "args": public attributes} of a configured object, JSON-able. A string
    attribute naming an existing local path is resolved, so the same files always give the same description."""
    args = {}
    for key, value in sorted(vars(obj).items()):
        if key.startswith("_"):
            continue
        if isinstance(value, str) and value and Path(value).expanduser().exists():
            value = Path(value)
        args[key] = _plain(value)
    return {"class": f"{type(obj).__module__}.{type(obj).__qualname__}", "args": args}


def fingerprint(value: Any, length: int = 16) -> str:
    """A short stable hash of a JSON-able value (sorted keys)."""
    blob = json.dumps(_plain(value), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def namespace_to_dict(value: Any) -> Any:
    """A jsonargparse Namespace (as LightningCLI holds its config) as plain dicts and lists."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: namespace_to_dict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [namespace_to_dict(v) for v in value]
    return value
