"""Any checkpoint of an LLM run as a Hugging Face folder that other tools load: `lit-unlearn export CKPT OUT`.

What it reads:
- a Lightning checkpoint file (one process, DDP, or a stop rule's final weights);
- a DeepSpeed ZeRO-2/3 sharded checkpoint folder, consolidated into full fp32 tensors one at a time (DeepSpeed's
  lazy consolidation), without the GPUs or the world size the run used;
- a LoRA run: merged into the base weights, or with `adapter=True` saved as a peft adapter.
The architecture and tokenizer come from the run's own record of its network (`network_spec`, in every unlearning
checkpoint) or from `base` (a Hugging Face folder or hub name).

Memory: full models are streamed tensor by tensor into safetensors shards of at most `max_shard_size` bytes (the
files are written directly in the safetensors format, header first, from the tensors' shapes), so the peak is the
consolidated source (the fp32 partitions of every rank: one copy of the weights, for a sharded checkpoint) plus one
tensor. A LoRA merge builds the model once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError

__all__ = ["export_checkpoint", "checkpoint_tensors", "parse_size"]

HF_PREFIX = "model."  # lit_unlearn.models.CausalLM keeps the transformers model as `.model`


def parse_size(text: str | int) -> int:
    """'5GB', '500MB', '2e9' or a number of bytes."""
    if isinstance(text, int):
        return text
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "B": 1}
    t = str(text).strip().upper()
    for unit, factor in units.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * factor)
    return int(float(t))


def _is_deepspeed_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "latest").is_file() or any(path.glob("*/*zero_pp_rank_*")))


def checkpoint_tensors(path: str | Path) -> tuple[Iterator[tuple[str, Any]], dict]:
    """(name → tensor of the module's state, one at a time; the checkpoint's extra state such as network_spec)
    of a Lightning checkpoint file or a DeepSpeed sharded folder. Truncated or foreign checkpoints are refused.
    A DeepSpeed folder gives lazy tensors (shape and dtype known, `.contiguous()` gathers the rank fragments); a
    Lightning file gives memory-mapped ones."""
    from lit_unlearn.storage.checkpoint_io import checkpoint_is_loadable

    path = Path(path)
    if not path.exists():
        raise UserError(f"checkpoint {path} not found")
    if not checkpoint_is_loadable(path):
        what = "a sharded checkpoint folder without its completion marker (the save was interrupted)" \
            if path.is_dir() else "truncated or not a checkpoint"
        raise UserError(f"checkpoint {path} cannot be exported: {what}; use an earlier checkpoint of the run")
    if path.is_dir():
        if not _is_deepspeed_folder(path):
            raise UserError(f"{path} is a folder but not a DeepSpeed checkpoint (no `latest` tag or rank files)")
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        from lit_unlearn.storage.safe_load import check_checkpoint

        check_checkpoint(path)  # DeepSpeed unpickles its shards unrestricted: vet them first
        lazy = get_fp32_state_dict_from_zero_checkpoint(str(path), lazy_mode=True)
        extra = _deepspeed_client_state(path)
        return iter(lazy.items()), extra  # materialised one at a time by the writer (`.contiguous()`)
    from lit_unlearn.storage.safe_load import load_checkpoint

    blob = load_checkpoint(path, mmap=True)
    if not isinstance(blob, dict) or "state_dict" not in blob:
        raise UserError(f"{path} is not a Lightning checkpoint (no state_dict)")
    extra = {k: v for k, v in blob.items() if k not in ("state_dict", "optimizer_states")}
    return iter(blob["state_dict"].items()), extra


def _deepspeed_client_state(folder: Path) -> dict:
    """The Lightning state a DeepSpeed checkpoint keeps beside the shards (hyper-parameters, network_spec)."""
    from lit_unlearn.storage.safe_load import load_checkpoint

    files = sorted(folder.glob("*/*model_states.pt"))
    if not files:
        return {}
    state = load_checkpoint(files[0])
    return {k: v for k, v in state.items() if k not in ("module", "optimizer", "lr_scheduler")}


def _network_name(name: str) -> str | None:
    """A module state name relative to the module's `network` (None: not part of it, e.g. a frozen reference);
    DeepSpeed and Lightning may put wrapper prefixes before it."""
    parts = name.split(".")
    return ".".join(parts[parts.index("network") + 1:]) if "network" in parts else None


def _hf_name(name: str) -> str | None:
    """A module state name as the transformers model's own (None: not part of the network)."""
    rest = _network_name(name)
    return rest[len(HF_PREFIX):] if rest is not None and rest.startswith(HF_PREFIX) else None


def _base_of(extra: dict, base: str | None) -> tuple[str, dict | None]:
    spec = extra.get("network_spec") or {}
    init = spec.get("init_args", {}) if isinstance(spec, dict) else {}
    base = base or init.get("name_or_path")
    if not base:
        raise UserError("the checkpoint does not record which Hugging Face model it started from (a network built "
                        "from a config): give --base FOLDER with the architecture's config and tokenizer")
    return str(base), init.get("lora")


def export_checkpoint(checkpoint: str | Path, out: str | Path, base: str | None = None, tokenizer: str | None = None,
                      adapter: bool = False, max_shard_size: str | int = "5GB") -> Path:
    """Write `checkpoint` as a Hugging Face folder at `out` (see the module docstring)."""
    from transformers import AutoConfig

    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.storage.files import replace_folder
    from lit_unlearn.core.hub import resolve_pretrained

    tensors, extra = checkpoint_tensors(checkpoint)
    base, lora = _base_of(extra, base)
    base = resolve_pretrained(base, "base model")
    out = Path(out)
    tmp = out.with_name(f".{out.name}.partial")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    tok = load_tokenizer(tokenizer or base)
    if lora:
        _export_lora(tensors, base, lora, tmp, adapter)
    else:
        config = AutoConfig.from_pretrained(base)
        written = _write_shards(((n, t) for n, t in ((_hf_name(k), v) for k, v in tensors) if n is not None),
                                tmp, parse_size(max_shard_size), tied=getattr(config, "tie_word_embeddings", False))
        if not written:
            raise UserError(f"checkpoint {checkpoint} holds no causal-LM network weights (network.model.*): it is "
                            "not from an LLM run")
        config.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    (tmp / "export.json").write_text(json.dumps({"checkpoint": str(checkpoint), "base": base, "lora": lora,
                                                 "adapter": adapter}, indent=1, default=str))
    return replace_folder(tmp, out)


SAFETENSORS_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16", "float64": "F64", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def _nbytes(source) -> int:
    import math

    return math.prod(source.shape) * source.dtype.itemsize


def _write_safetensors(path: Path, entries: list[tuple[str, Any]]) -> None:
    """A safetensors file written tensor by tensor: the header is made from the sources' shapes and dtypes, then
    each source is materialised, written and released, so one tensor is in memory at a time."""
    import torch

    header: dict[str, Any] = {}
    offset = 0
    for name, source in entries:
        size = _nbytes(source)
        header[name] = {"dtype": SAFETENSORS_DTYPES[str(source.dtype).removeprefix("torch.")],
                        "shape": list(source.shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format aligns the data to 8 bytes
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for _, source in entries:
            tensor = source.contiguous().detach().to("cpu").reshape(-1)
            f.write(tensor.view(torch.uint8).numpy().data)
            del tensor


def _write_shards(named, folder: Path, limit: int, tied: bool) -> int:
    """Stream (name, tensor) into model.safetensors, or model-0000k-of-0000n.safetensors with an index when the
    total passes `limit`. Shards are planned from the tensors' shapes and written tensor by tensor, so besides the
    source one tensor is in memory at a time. Returns how many tensors were written."""
    entries = [(name, source) for name, source in named if not (tied and name == "lm_head.weight")]
    # (tied: transformers rebuilds lm_head.weight from the input embeddings)
    shards: list[list[tuple[str, Any]]] = [[]]
    size = total = 0
    for name, source in entries:
        nbytes = _nbytes(source)
        if shards[-1] and size + nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append((name, source))
        size += nbytes
        total += nbytes
    if not entries:
        return 0
    if len(shards) == 1:
        _write_safetensors(folder / "model.safetensors", shards[0])
        return len(entries)
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        _write_safetensors(folder / file, shard)
        weight_map.update({name: file for name, _ in shard})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return len(entries)


def _export_lora(tensors, base: str, lora: dict, folder: Path, adapter: bool) -> None:
    """A LoRA run: its weights into the same peft model, then merged (or saved as the adapter alone)."""
    import torch

    from lit_unlearn.models.causal_lm import CausalLM

    network = CausalLM(name_or_path=base, lora=lora)
    state = {_network_name(name): t.contiguous() for name, t in tensors if _network_name(name) is not None}
    result = network.load_state_dict(state, strict=False)
    if result.missing_keys:
        raise UserError(f"the checkpoint does not match a LoRA model of {base}: missing {result.missing_keys[:3]}")
    with torch.no_grad():
        if adapter:
            network.model.save_pretrained(str(folder))
        else:
            network.model.merge_and_unload().save_pretrained(str(folder), safe_serialization=True)
