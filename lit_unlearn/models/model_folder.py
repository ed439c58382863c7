"""Is this a Hugging Face model folder we can load without running code? Checked from its files alone (no weights
read), so that a run fails before any rank loads a 7B model: a config of a transformers causal-LM architecture with no
custom code, safetensors weights, and a tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import MissingFileError, UserError

__all__ = ["check_model_folder", "check_tokenizer_folder", "WEIGHT_FILES", "TOKENIZER_FILES"]

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")


def _local(name: Any) -> Path | None:
    """A local path (existing, or clearly meant as one), or None for a hub name."""
    from lit_unlearn.core.hub import is_hub_name

    if not isinstance(name, (str, Path)) or not str(name):
        return None
    if is_hub_name(str(name)):
        return None
    return Path(str(name)).expanduser()


def check_model_folder(name: Any, what: str = "model") -> None:
    """A Hugging Face model folder with a config of a supported causal-LM architecture and safetensors weights."""
    folder = _local(name)
    if folder is None:
        return  # a hub name: checked when it downloads
    if not folder.exists():
        raise MissingFileError(f"{what} folder {folder} not found")
    if not folder.is_dir():
        raise UserError(f"{what} {folder} is a file; give the Hugging Face model folder (save_pretrained's output)")
    if not any(folder.iterdir()):
        raise UserError(f"{what} folder {folder} is empty: copy or save_pretrained the model there")
    if not (folder / "config.json").is_file():
        raise UserError(f"{what} folder {folder} has no config.json: is it a Hugging Face model folder "
                        "(save_pretrained's output)?")
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        raw = json.loads((folder / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{folder}/config.json is not valid JSON ({err})") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if raw.get("auto_map"):
        raise UserError(f"{what} folder {folder} asks for custom code (auto_map in config.json); trust_remote_code "
                        "stays off: use a transformers-native architecture")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise UserError(f"{what} folder {folder}: model_type {model_type!r} is not a transformers causal LM "
                        f"architecture this version supports (e.g. llama, mistral, qwen2, gemma, gpt2)")
    try:
        AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except (ValueError, OSError, KeyError, TypeError) as err:
        raise UserError(f"{what} folder {folder}: its config.json cannot be read by transformers "
                        f"({str(err).splitlines()[0][:160]})") from None
    has = {p.name for p in folder.iterdir()}
    if not (has & set(WEIGHT_FILES) or any(n.endswith(".safetensors") for n in has)):
        from lit_unlearn.storage.safe_load import TRUST_ENV, trusted

        if has & set(PICKLED_WEIGHTS) and trusted():
            return
        if has & set(PICKLED_WEIGHTS):
            raise UserError(f"{what} folder {folder} holds pickled weights only (pytorch_model.bin), which can run "
                            "code when loaded: convert them to safetensors (load the model, save_pretrained with "
                            f"safe_serialization=True), or set {TRUST_ENV}=1 if you trust the file")
        raise UserError(f"{what} folder {folder} has no weights (model.safetensors or its index): copy them there")


def check_tokenizer_folder(name: Any) -> None:
    folder = _local(name)
    if folder is None:
        return
    if not folder.is_dir():
        raise MissingFileError(f"tokenizer folder {folder} not found")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise UserError(f"tokenizer folder {folder} has no tokenizer (tokenizer.json, tokenizer.model or "
                        "tokenizer_config.json): save the tokenizer beside the model (tokenizer.save_pretrained)")
