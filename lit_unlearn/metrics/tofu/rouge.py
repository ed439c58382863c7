"""The generation pass of the TOFU evaluation and its metric: ROUGE-L recall of greedy answers.

The answers' budget is decided once per evaluator from the reference answers' lengths (the fewest new tokens that
let ≥ 95 % of every generated split's answers fit whole, at most TOFU's 200) or given; the report states it with
the share of each split it covers.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.data.qa_format import QAFormatter
from lit_unlearn.metrics.generation import attention_for_generation, generation_budget, greedy_continuations
from lit_unlearn.metrics.tofu.torch_metrics import RougeLRecall

__all__ = ["GreedyAnswers", "answer_budget", "rouge_scores", "TOFU_MAX_NEW_TOKENS"]

TOFU_MAX_NEW_TOKENS = 200  # TOFU's own generation length, the automatic budget's cap


class GreedyAnswers:
    """The generation pass: greedy answers to a split's questions (batched, length-sorted, KV cache)."""

    def __init__(self, tokenizer, formatter: QAFormatter, splits: dict[str, list[dict]], batch_size: int,
                 max_new_tokens: int | None = None, attention: str | None = "sdpa") -> None:
        self.tokenizer, self.formatter, self.splits = tokenizer, formatter, splits
        self.batch_size, self.max_new_tokens, self.attention = batch_size, max_new_tokens, attention
        self._budget: dict | None = None
        self.cache: dict[str, str] = {}  # question -> answer of the current weights (set per run; weights_memo)

    def budget(self) -> dict:
        """{"max_new_tokens": n, "coverage": {split: share of its reference answers that fit in n tokens}}."""
        if self._budget is None:
            self._budget = answer_budget(self.tokenizer, self.splits, self.max_new_tokens)
        return self._budget

    def settings(self) -> tuple:
        """What the answers depend on besides the weights and the question."""
        return (self.budget()["max_new_tokens"], self.batch_size, self.attention)

    def answers(self, network: nn.Module, questions: list[str], device) -> list[str]:
        """Greedy answers; questions the current weights already answered (`cache`) are not generated again."""
        tok = self.tokenizer
        todo = list(dict.fromkeys(q for q in questions if q not in self.cache))
        if todo:
            with attention_for_generation(network, self.attention):
                new = greedy_continuations(network, [self.formatter.prompt_ids(q) for q in todo], tok.pad_token_id,
                                           self.budget()["max_new_tokens"], self.batch_size, device,
                                           tok.eos_token_id)
            self.cache.update((q, tok.decode(g, skip_special_tokens=True).strip()) for q, g in zip(todo, new))
        return [self.cache[q] for q in questions]


def answer_budget(tokenizer, splits: dict[str, list[dict]], max_new_tokens: int | None = None) -> dict:
    """The greedy answers' budget for these splits (the holdout is never generated) and each split's coverage."""
    lengths = {name: [len(tokenizer(r["answer"], add_special_tokens=False)["input_ids"]) for r in rows]
               for name, rows in splits.items() if name != "holdout"}
    budget, coverage = generation_budget(lengths, cap=TOFU_MAX_NEW_TOKENS)
    if max_new_tokens is not None:
        budget = max_new_tokens
        coverage = {k: sum(n <= budget for n in v) / max(1, len(v)) for k, v in lengths.items()}
    return {"max_new_tokens": budget, "coverage": coverage}


def rouge_scores(name: str, rows: list[dict], answers: list[str], summary: dict) -> dict[str, list[float]]:
    """ROUGE-L recall of each generated answer against the item's answer; the mean into summary."""
    rouge = RougeLRecall()
    rouge.update(answers, [r["answer"] for r in rows])
    summary[f"{name}/rouge"] = rouge.compute().item()
    return {"rouge": rouge.per_item().tolist()}
