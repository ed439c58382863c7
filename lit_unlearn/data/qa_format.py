"""Question-answer pairs as token sequences: the prompt template, the loss on answer tokens only, and padding.

`template="plain"` gives "Question: …\nAnswer: …", "llama2" the Llama-2 chat form "[INST] … [/INST] …", "chat" the
tokenizer's own chat template. `input_format="lit-unlearn"` (default) tokenises the prompt and " answer" separately
and appends EOS, so the answer tokens never depend on the prompt; `input_format="open-unlearning"` tokenises
prompt + answer as one string with open-unlearning's template tags (plain: "Question: …\nAnswer: …", llama2:
"[INST] … [/INST]…" with no space before the answer), as its published numbers were produced (docs/guide/llm.md,
"Differences").

A row with an empty question is a plain document (lit_unlearn.data.own_data's "text" format): no template, BOS then
the text then EOS, and every token is trained and scored.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.core.errors import UserError

__all__ = ["QAFormatter", "TokenizedQA", "pad_collate", "MAX_LENGTH", "TEMPLATES", "INPUT_FORMATS",
           "OPEN_UNLEARNING_TAGS"]

TEMPLATES = ("plain", "llama2", "chat")
INPUT_FORMATS = ("lit-unlearn", "open-unlearning")
# open-unlearning's template tags (configs/model/*.yaml): user start, user end, assistant start.
OPEN_UNLEARNING_TAGS = {"plain": ("Question: ", "\n", "Answer: "), "llama2": ("[INST] ", " [/INST]", "")}


MAX_LENGTH = 512  # TOFU's and open-unlearning's: every TOFU answer fits with a Llama tokenizer


class QAFormatter:
    def __init__(self, tokenizer, template: str = "plain", max_length: int = MAX_LENGTH,
                 input_format: str = "lit-unlearn") -> None:
        if template not in TEMPLATES:
            raise UserError(f"template={template!r}: choose one of {TEMPLATES}")
        if input_format not in INPUT_FORMATS:
            raise UserError(f"input_format={input_format!r}: choose one of {INPUT_FORMATS}")
        if tokenizer.pad_token_id is None:
            raise UserError("the tokenizer has no pad token: set tokenizer.pad_token (e.g. to the eos token)")
        if not (isinstance(max_length, int) and max_length > 1):
            raise UserError(f"max_length must be an integer > 1, got {max_length!r}")
        self.tokenizer, self.template, self.max_length = tokenizer, template, max_length
        self.input_format = input_format
        self.truncated: set[tuple[str, str]] = set()  # (question, answer) pairs cut at max_length

    def prompt(self, question: str) -> str:
        if self.template == "plain":
            return f"Question: {question}\nAnswer:"
        if self.template == "llama2":
            return f"[INST] {question} [/INST]"
        return self.tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                                  add_generation_prompt=True)

    def prompt_ids(self, question: str) -> list[int]:
        tok = self.tokenizer
        if not question:  # a plain document: nothing but BOS before its text
            return [tok.bos_token_id] if tok.bos_token_id is not None else []
        if self.input_format == "open-unlearning":
            return self._open_unlearning(question, None)[1]
        ids = tok(self.prompt(question), add_special_tokens=False)["input_ids"]
        return ([tok.bos_token_id] if tok.bos_token_id is not None and self.template != "chat" else []) + ids

    def _open_unlearning(self, question: str, answer: str | None) -> tuple[list[int], list[int]]:
        """(prompt + answer ids, prompt ids) as open-unlearning's preprocess_chat_instance makes them."""
        tok = self.tokenizer
        if self.template == "chat":
            user = [{"role": "user", "content": question}]
            prompt = list(tok.apply_chat_template(user, tokenize=True, add_generation_prompt=True))
            if answer is None:
                return prompt, prompt
            full = list(tok.apply_chat_template(user + [{"role": "assistant", "content": answer}], tokenize=True,
                                                add_generation_prompt=False))
            return full, prompt
        start, end, assistant = OPEN_UNLEARNING_TAGS[self.template]
        text = start + question + end + assistant
        prompt = self._cut(text, question, answer)
        return (prompt if answer is None else self._cut(text + answer, question, answer)), prompt

    def _cut(self, text: str, question: str, answer: str | None) -> list[int]:
        """The tokenizer's ids of text, truncated at max_length as open-unlearning does, noting any cut."""
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if len(ids) <= self.max_length:
            return ids
        self.truncated.add((question, answer or ""))
        return self.tokenizer(text, add_special_tokens=True, max_length=self.max_length, truncation=True)["input_ids"]

    def encode(self, question: str, answer: str) -> dict[str, Tensor]:
        """input_ids = prompt + " answer" + eos; labels = IGNORE_INDEX on the prompt (loss on the answer only)."""
        tok = self.tokenizer
        if self.input_format == "open-unlearning" and question:
            ids, prompt = self._open_unlearning(question, answer)
            if tok.eos_token_id is not None and ids[-1] != tok.eos_token_id:
                ids = ids + [tok.eos_token_id]
            if len(prompt) >= len(ids):
                raise UserError(f"max_length={self.max_length} leaves no answer token for question {question[:60]!r}")
            labels = [IGNORE_INDEX] * len(prompt) + ids[len(prompt):]
            return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}
        prompt = self.prompt_ids(question)
        answer_ids = tok((" " if question else "") + answer.strip(), add_special_tokens=False)["input_ids"]
        if tok.eos_token_id is not None:
            answer_ids = answer_ids + [tok.eos_token_id]
        ids = prompt + answer_ids
        if len(ids) > self.max_length:
            self.truncated.add((question, answer))
            ids = ids[: self.max_length]
        n_prompt = min(len(prompt), len(ids))
        if n_prompt >= len(ids):
            raise UserError(f"max_length={self.max_length} leaves no answer token for question {question[:60]!r}")
        labels = [IGNORE_INDEX] * n_prompt + ids[n_prompt:]
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}


class TokenizedQA(Dataset):
    def __init__(self, rows: list[dict], formatter: QAFormatter, answer_key: str = "answer",
                 alternates: list[str] | None = None, seed: int = 0) -> None:
        """alternates: answers of which each item gets one (drawn once, seeded) as alt_input_ids / alt_labels."""
        if not rows:
            raise UserError("empty QA split")
        missing = [k for k in ("question", answer_key) if k not in rows[0]]
        if missing:
            raise UserError(f"QA rows need columns {missing}; got {sorted(rows[0])}")
        self.rows = rows
        self.items = [formatter.encode(r["question"], r[answer_key]) for r in rows]
        if alternates:
            # Drawn once per item (open-unlearning draws per access): the same pairs in every epoch and on resume.
            picks = torch.randint(len(alternates), (len(rows),), generator=torch.Generator().manual_seed(seed))
            for item, r, k in zip(self.items, rows, picks.tolist()):
                alt = formatter.encode(r["question"], alternates[k])
                item["alt_input_ids"], item["alt_labels"] = alt["input_ids"], alt["labels"]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.items[i]


def pad_collate(pad_id: int):
    """Right-pad a list of {input_ids, labels} to the longest; attention_mask marks the real tokens. Alternate
    answers (alt_input_ids / alt_labels) are padded the same way, to their own longest, with alt_attention_mask."""
    def pad(items: list[dict[str, Tensor]], prefix: str) -> dict[str, Tensor]:
        n = max(len(it[f"{prefix}input_ids"]) for it in items)
        ids = torch.full((len(items), n), pad_id, dtype=torch.long)
        labels = torch.full((len(items), n), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(items), n), dtype=torch.long)
        for i, it in enumerate(items):
            k = len(it[f"{prefix}input_ids"])
            ids[i, :k], labels[i, :k], mask[i, :k] = it[f"{prefix}input_ids"], it[f"{prefix}labels"], 1
        return {f"{prefix}input_ids": ids, f"{prefix}attention_mask": mask, f"{prefix}labels": labels}

    def collate(items: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        batch = pad(items, "")
        if "alt_input_ids" in items[0]:
            batch.update(pad(items, "alt_"))
        return batch

    return collate
