"""Objects from `{class_path, init_args}` specs (the LightningCLI / YAML form) and back to a plain description.

`build` instantiates a spec, nested specs inside init_args too. `describe` turns a configured object (a data
source, a forget spec) into a JSON-able description, used to key caches such as the retrained reference's.
`read_spec_file` and `dataclass_spec` are the one YAML loader of the project's own spec files (bench, experiment
suite, audit, distillation): a missing file, a file that is not a mapping and an unknown key are one-line errors.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError

__all__ = ["build", "describe", "fingerprint", "namespace_to_dict", "read_spec_file", "dataclass_spec",
           "check_keys"]


def read_spec_file(path: str | Path, what: str, example: str = "") -> dict[str, Any]:
    """The YAML mapping in `path` (an empty file is {}), or a one-line error naming `what` the file should be."""
    import yaml

    from lit_unlearn.core.errors import MissingFileError

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{what} {path} not found (packaged ones: `lit-unlearn configs`)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a {what} is a mapping of keys" + (f" (see {example})" if example else ""))
    return data


def check_keys(data: dict, known, where: str) -> None:
    """A one-line error for the first key of `data` not in `known`, with the closest known one."""
    from lit_unlearn.core.errors import did_you_mean

    known = list(known)
    for key in data:
        if key not in known:
            raise UserError(f"{where}: unknown key {key!r}{did_you_mean(key, known)}; known: {', '.join(known)}")


def dataclass_spec(cls, path: str | Path | None, what: str):
    """A dataclass of spec fields from a YAML file (None: the defaults)."""
    from dataclasses import fields

    if path is None:
        return cls()
    data = read_spec_file(path, what)
    check_keys(data, [f.name for f in fields(cls)], str(path))
    return cls(**data)


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
