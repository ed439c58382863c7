"""Greedy continuations of many prompts, as the evaluations need them: batched with left padding (so every
prompt's continuation starts at the same column), prompts sorted by length (less padding per batch), and the
model's KV cache.

One exception: transformers' eager attention in float64 turns left-padded rows into NaN (the padded query
positions attend to nothing, and the NaN reaches the real tokens through the next layer), so every generated token
becomes the pad. For such a model, batches hold only prompts of one length: no padding, the same answers as one
prompt at a time."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["greedy_continuations"]


@torch.no_grad()
def greedy_continuations(network: nn.Module, prompts: list[list[int]], pad_token_id: int, max_new_tokens: int,
                         batch_size: int, device, eos_token_id: int | None = None) -> list[Tensor]:
    """The new tokens for each prompt (in the prompts' order). `network.generate` returns only new tokens
    (lit_unlearn.models.CausalLM does); without eos_token_id the model's generation config decides."""
    out: list[Tensor] = [torch.empty(0, dtype=torch.long)] * len(prompts)
    eos = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for idx in _batches(order, [len(p) for p in prompts], batch_size, padding_breaks(network)):
        n = max(len(prompts[j]) for j in idx)
        ids = torch.full((len(idx), n), pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, j in enumerate(idx):
            ids[row, n - len(prompts[j]):], mask[row, n - len(prompts[j]):] = torch.tensor(prompts[j]), 1
        gen = network.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                               use_cache=True, pad_token_id=pad_token_id, **eos)
        for row, j in enumerate(idx):
            out[j] = gen[row].cpu()
    return out


def padding_breaks(network: nn.Module) -> bool:
    """True for a float64 model on transformers' eager attention, where left-padded rows go NaN."""
    config = getattr(getattr(network, "model", network), "config", None)
    eager = getattr(config, "_attn_implementation", None) == "eager"
    return eager and any(p.dtype == torch.float64 for p in network.parameters())


def _batches(order: list[int], lengths: list[int], batch_size: int, same_length: bool) -> list[list[int]]:
    """Consecutive chunks of the length-sorted order; with same_length, a chunk never mixes prompt lengths."""
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < batch_size and (not same_length or lengths[out[-1][0]] == lengths[i]):
            out[-1].append(i)
        else:
            out.append([i])
    return out
