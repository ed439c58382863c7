"""The short form of the user's own job: a model folder, data files, a method and a run root, turned into the plain
LightningCLI arguments of a packaged `own_<method>` preset (configs/unlearn/own/), so that `--print_config` shows
the whole config and a user can keep it as their YAML.

    lit-unlearn unlearn --model-dir my-llama --forget f.jsonl --retain r.jsonl --holdout h.jsonl --method hamu \
        --out runs/mine
    → --preset own_hamu --model.init_args.network.init_args.name_or_path=my-llama --data.init_args.tokenizer=...
      --data.init_args.source.init_args.forget=f.jsonl ... --trainer.logger.init_args.save_dir=runs/mine
"""

from __future__ import annotations

import json

from lit_unlearn.core.errors import UserError, did_you_mean

__all__ = ["own_methods", "own_job_arguments", "parse_columns", "SHORT_FORM"]

# the short form's options (the `unlearn` command's parameters of the same names)
SHORT_FORM = ("model_dir", "forget", "retain", "holdout", "method", "out", "data_format", "columns", "base_model",
              "setup")
SOURCE = "--data.init_args.source.init_args."


def own_methods() -> list[str]:
    """The methods the short form offers: the packaged own_<method> presets."""
    from lit_unlearn.storage.packaged_files import list_configs

    return [name.removeprefix("own_") for name in list_configs("unlearn") if name.startswith("own_")]


def setups() -> list[str]:
    from lit_unlearn.storage.packaged_files import list_configs

    return [name.removeprefix("setup_") for name in list_configs("setup")]


def parse_columns(text: str) -> dict[str, str]:
    """'question=prompt,answer=completion' (or a JSON / YAML mapping) → {"question": "prompt", ...}."""
    text = text.strip()
    if text.startswith("{"):
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = None
        if not isinstance(value, dict):
            raise UserError(f"--columns {text!r}: give ROLE=COLUMN pairs, e.g. question=prompt,answer=completion")
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        role, eq, column = pair.partition("=")
        if not eq or not role.strip() or not column.strip():
            raise UserError(f"--columns {text!r}: give ROLE=COLUMN pairs, e.g. question=prompt,answer=completion")
        out[role.strip()] = column.strip()
    return out


def own_job_arguments(model_dir: str | None, forget: str | None, retain: str | None, holdout: str | None = None,
                      method: str | None = None, out: str | None = None, data_format: str | None = None,
                      columns: str | None = None, base_model: str | None = None,
                      setup: str | None = None) -> tuple[str, list[str]] | None:
    """(the preset, the LightningCLI arguments) of the short form, or None when none of its options is given."""
    given = {k: v for k, v in locals().items() if v is not None}
    if not given:
        return None
    missing = [f"--{k}" for k in ("model_dir", "forget", "retain") if k not in given]
    if missing:
        raise UserError(f"the short form of your own job needs {', '.join(missing)} too: lit-unlearn unlearn "
                        "--model-dir DIR --forget FILE --retain FILE [--holdout FILE] [--method hamu] [--out DIR]")
    method = method or "hamu"
    methods = own_methods()
    if method not in methods:
        raise UserError(f"--method {method!r}{did_you_mean(method, methods)}; choose one of {', '.join(methods)}")
    args = [f"--model.init_args.network.init_args.name_or_path={model_dir}", f"--data.init_args.tokenizer={model_dir}",
            f"{SOURCE}forget={forget}", f"{SOURCE}retain={retain}"]
    if holdout:
        args.append(f"{SOURCE}holdout={holdout}")
    if data_format:
        args.append(f"{SOURCE}format={data_format}")
    if columns:
        args.append(f"{SOURCE}columns={json.dumps(parse_columns(columns))}")
    if base_model:
        args.append(f"{SOURCE}base_model={base_model}")
    out = out or "runs/own"
    args += [f"--trainer.default_root_dir={out}", f"--trainer.logger.init_args.save_dir={out}",
             f"--trainer.logger.init_args.name={method}"]
    if setup:
        names = setups()
        if setup not in names:
            raise UserError(f"--setup {setup!r}{did_you_mean(setup, names)}; choose one of {', '.join(names)}")
        from lit_unlearn.storage.packaged_files import packaged_config

        args = ["--config", packaged_config(f"setup_{setup}"), *args]
    return f"own_{method}", args
