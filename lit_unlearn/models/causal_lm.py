"""`transformers` causal LMs as plain nn.Modules that LightningCLI can build from a config.

    CausalLM(name_or_path="meta-llama/Llama-2-7b-chat-hf", dtype="bfloat16", gradient_checkpointing=True)
    CausalLM(name_or_path="runs/tofu/target_model")          # a local save_pretrained folder
    CausalLM(config=tiny_llama_config(vocab_size=1024))      # randomly initialised (tests, the offline demo)

forward(input_ids, attention_mask) returns the logits. `lora={"r": 8, "alpha": 16, "target_modules": [...]}`
wraps the model with peft so only the adapters train (the HAMU paper's Llama-2 setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lit_unlearn.core.errors import UserError

__all__ = ["CausalLM", "tiny_llama_config", "LLAMA_LORA_TARGETS"]

LLAMA_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def tiny_llama_config(vocab_size: int = 1024, hidden_size: int = 64, layers: int = 2, heads: int = 4,
                      kv_heads: int = 2, intermediate_size: int = 128, max_positions: int = 256) -> dict[str, Any]:
    """A LlamaConfig small enough to train on CPU in seconds (same architecture as Llama-2, scaled down)."""
    return {"model_type": "llama", "vocab_size": vocab_size, "hidden_size": hidden_size,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "intermediate_size": intermediate_size, "max_position_embeddings": max_positions,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 0}


class CausalLM(nn.Module):
    def __init__(self, name_or_path: str | None = None, config: dict[str, Any] | None = None,
                 dtype: str = "float32", gradient_checkpointing: bool = False, lora: dict[str, Any] | None = None,
                 attn_implementation: str | None = "eager", seed: int = 0) -> None:
        """
        Args:
            name_or_path: HF hub name or local folder (AutoModelForCausalLM.from_pretrained).
            config: instead of weights, a config dict (with model_type) for a randomly initialised model.
            dtype: "float32", "bfloat16" or "float16" parameters.
            gradient_checkpointing: recompute activations in backward (memory for compute; large models).
            lora: peft LoraConfig arguments (r, alpha, dropout, target_modules); None trains every weight.
            attn_implementation: "eager" (needed for double backward, e.g. OFMU's autograd HVP), "sdpa", ...
            seed: initialisation seed for a config-built model.
        """
        super().__init__()
        from transformers import AutoConfig, AutoModelForCausalLM

        if (name_or_path is None) == (config is None):
            raise UserError("give exactly one of name_or_path (pretrained weights) or config (random init)")
        if dtype not in DTYPES:
            raise UserError(f"dtype={dtype!r}: choose one of {sorted(DTYPES)}")
        kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
        if name_or_path is not None:
            from lit_unlearn.core.hub import hub_error, is_hub_name, resolve_pretrained

            from lit_unlearn.storage.safe_load import trusted

            name_or_path = resolve_pretrained(name_or_path, "model")
            # safetensors only (no pickle), no Python from the model folder; pickled weights behind the opt-in
            kwargs.update(trust_remote_code=False, use_safetensors=None if trusted() else True)
            try:
                self.model, info = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=DTYPES[dtype],
                                                                        output_loading_info=True, **kwargs)
            except OSError as err:
                if is_hub_name(name_or_path):
                    raise hub_error("model", name_or_path, err) from err
                raise
            if info.get("missing_keys") or info.get("mismatched_keys"):  # weights of another architecture
                bad = list(info.get("missing_keys") or []) + [k[0] for k in info.get("mismatched_keys") or []]
                raise UserError(f"model {name_or_path}: its weights do not fit its config.json "
                                f"({len(bad)} weights missing or of another shape, e.g. {bad[0]}); the folder "
                                "mixes two models")
        else:
            cfg = dict(config)
            hf_config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
            torch.manual_seed(seed)
            self.model = AutoModelForCausalLM.from_config(hf_config, dtype=DTYPES[dtype], **kwargs)
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            self.model.config.use_cache = False
        if lora:
            from peft import LoraConfig, get_peft_model

            spec = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": LLAMA_LORA_TARGETS}
            spec.update({"lora_alpha" if k == "alpha" else "lora_dropout" if k == "dropout" else k: v
                         for k, v in lora.items()})
            self.model = get_peft_model(self.model, LoraConfig(task_type="CAUSAL_LM", **spec))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    @torch.no_grad()
    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None, max_new_tokens: int = 200,
                 **kwargs: Any) -> Tensor:
        """Greedy continuation (TOFU's ROUGE protocol); returns only the new tokens."""
        out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                                  max_new_tokens=max_new_tokens, **kwargs)
        return out[:, input_ids.shape[1]:]

    def save_pretrained(self, folder: str | Path) -> None:
        self.model.save_pretrained(str(folder))
