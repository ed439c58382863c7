"""Greedy continuations of many prompts, as the evaluations need them: batched with left padding (so every
prompt's continuation starts at the same column), prompts sorted by length (less padding per batch), and the
model's KV cache.

One exception: transformers' eager attention in float64 turns left-padded rows into NaN (the padded query
positions attend to nothing, and the NaN reaches the real tokens through the next layer), so every generated token
becomes the pad. For such a model, batches hold only prompts of one length: no padding, the same answers as one
prompt at a time."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

__all__ = ["greedy_continuations", "generation_budget", "COVERAGE", "attention_for_generation"]

COVERAGE = 0.95  # the default budget lets at least this share of every split's reference answers fit whole


def generation_budget(answer_lengths: dict[str, list[int]], coverage: float = COVERAGE,
                      cap: int | None = None) -> tuple[int, dict[str, float]]:
    """The fewest new tokens that let at least `coverage` of each split's reference answers (lengths in tokens)
    be generated whole, at most `cap`; and each split's share that fits in it. ROUGE-L recall of an answer cut
    short of its reference is capped below 1 by the budget, not by the model."""
    import math

    need = 1
    for lengths in answer_lengths.values():
        if lengths:
            ordered = sorted(lengths)
            need = max(need, ordered[min(len(ordered) - 1, math.ceil(coverage * len(ordered)) - 1)])
    budget = min(need, cap) if cap else need
    return budget, {k: (sum(n <= budget for n in v) / len(v) if v else 1.0) for k, v in answer_lengths.items()}


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


@contextlib.contextmanager
def attention_for_generation(network: nn.Module, implementation: str | None):
    """Generate with `implementation` ("sdpa"), the model's own attention restored afterwards. Only a float32 or
    half-precision model on eager attention is switched (training keeps eager for double backward; float64
    stays on its one-length batches). On the TOFU world's models sdpa gives the same greedy answers as eager
    (tests/test_tofu_eval_units.py compares every ROUGE value) and generates ~1.4× faster on CPU
    (benchmarks/llm_scale/tofu_eval_phases.py)."""
    config = getattr(getattr(network, "model", network), "config", None)
    current = getattr(config, "_attn_implementation", None)
    switch = (implementation is not None and current == "eager" and implementation != current
              and not any(p.dtype == torch.float64 for p in network.parameters()))
    if switch:
        config._attn_implementation = implementation
    try:
        yield
    finally:
        if switch:
            config._attn_implementation = current


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
