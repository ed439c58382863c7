"""Greedy continuations of many prompts, as the evaluations need them: batched with left padding (so every
prompt's continuation starts at the same column), prompts sorted by length (less padding per batch), and the
model's KV cache."""

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
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
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
