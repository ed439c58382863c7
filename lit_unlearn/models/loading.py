"""Loading a causal LM for evaluation: an HF folder or hub name, or a Lightning checkpoint of an unlearning run on
top of the HF model it was trained from, with its tokenizer (what `lit-unlearn tofu-eval` and `muse-eval` take)."""

from __future__ import annotations

__all__ = ["load_causal_lm", "default_device"]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_causal_lm(model: str, base: str | None = None, tokenizer: str | None = None, dtype: str = "float32",
                   device: str | None = None):
    """(network on `device`, tokenizer) from a model (HF folder or hub name, or a .ckpt with `base`)."""
    from lit_unlearn.storage.checkpoints import load_network_weights
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.models.causal_lm import CausalLM

    if model.endswith(".ckpt"):
        if not base:
            raise UserError("--model is a Lightning checkpoint: pass --base (the HF model it was trained from)")
        network = CausalLM(name_or_path=base, dtype=dtype)
        load_network_weights(network, model)
        tokenizer_path = tokenizer or base
    else:
        network = CausalLM(name_or_path=model, dtype=dtype)
        tokenizer_path = tokenizer or model
    network.to(device or default_device())
    return network, load_tokenizer(tokenizer_path)
