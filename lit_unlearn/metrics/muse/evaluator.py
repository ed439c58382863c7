"""Run the MUSE evaluation of a causal LM: VerbMem, KnowMem on D_f and D_r, PrivLeak, and ES / EM.

    report = MuseEvaluator(tokenizer, MuseSource("muse-bench/MUSE-News")).run(network)
    report.save("runs/muse/retrain_eval.json")                   # the retrained model: PrivLeak's reference
    MuseEvaluator(tokenizer, source, reference="runs/muse/retrain_eval.json").run(unlearned).table()

As MUSE computes them (metrics/{verbmem,knowmem,privleak}.py):
- verbmem_f: ROUGE-L F1 × 100 between the greedy 128-token continuation of each verbmem prompt and the first 128
  tokens of its ground truth (BOS counted, as MUSE tokenises it with special tokens);
- knowmem_f / knowmem_r: ROUGE-L F1 × 100 of greedy 32-token answers to the forget / retain QA after a few-shot
  prompt ("Question: q\\nAnswer: a\\n\\n" per ICL pair), cut at the next "Question";
- privleak: (AUC − AUC_retrain)/AUC_retrain × 100 with the Min-40% AUC between privleak/forget (label 0) and
  privleak/holdout (label 1), score −Min-40% (k·n rounded down), over every token after BOS;
- forget/es, forget/em: extraction strength and exact memorisation of the verbmem ground truth, teacher-forced.
Without a reference report, privleak is missing (a note), unless `retrain_auc` gives MUSE's published value.

Under data parallelism each process takes items rank::world and the metric states gather them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from lit_unlearn.data.muse import MuseSource
from lit_unlearn.core.eval_mode import eval_mode
from lit_unlearn.core.errors import UserError
from lit_unlearn.metrics.muse import formulas as muse_math
from lit_unlearn.metrics.tofu import formulas as tofu_math
from lit_unlearn.metrics.tofu.evaluator import TofuReport
from lit_unlearn.metrics.generation import greedy_continuations
from lit_unlearn.metrics.tofu.torch_metrics import ItemMean, MembershipAUC, rank_and_world

__all__ = ["MuseEvaluator"]

HEADLINE = ("verbmem_f", "knowmem_f", "knowmem_r", "privleak")


def _load_reference(reference) -> dict | None:
    from lit_unlearn.metrics.report_io import load_report

    return load_report(reference, "MUSE reference", "evaluate the retrained model first (`lit-unlearn muse-eval ... "
                       "--save`)", lambda d: (d.get("summary") or {}).get("privleak/auc") is not None, "privleak/auc")


class MuseEvaluator:
    def __init__(self, tokenizer, source: MuseSource, verbmem_max_new_tokens: int = 128,
                 knowmem_max_new_tokens: int = 32, batch_size: int = 8, reference: str | Path | dict | None = None,
                 retrain_auc: float | None = None, min_k: float = 0.4, max_length: int = 2048) -> None:
        self.tokenizer, self.source = tokenizer, source
        self.verbmem_tokens, self.knowmem_tokens = verbmem_max_new_tokens, knowmem_max_new_tokens
        self.batch_size, self.min_k, self.max_length = batch_size, min_k, max_length
        self.reference = _load_reference(reference)
        self.retrain_auc = retrain_auc
        self._truncated: dict[str, list[int]] = {}  # part -> [sequences cut, sequences] (this process's)
        if tokenizer.pad_token_id is None:
            raise UserError("the tokenizer has no pad token: set tokenizer.pad_token (e.g. to the eos token)")

    # ----- token helpers -------------------------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        """As MUSE tokenises (special tokens added: BOS for Llama)."""
        tok = self.tokenizer
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return ([tok.bos_token_id] if tok.bos_token_id is not None else []) + ids

    def _last(self, ids: list[int], part: str) -> list[int]:
        """The last max_length tokens of a sequence (the prompt's end, the question, is what must stay), counted."""
        counts = self._truncated.setdefault(part, [0, 0])
        counts[1] += 1
        if len(ids) > self.max_length:
            counts[0] += 1
            return ids[-self.max_length:]
        return ids

    def _generate(self, network: nn.Module, prompts: list[list[int]], max_new_tokens: int, device) -> list[str]:
        tok = self.tokenizer
        new = greedy_continuations(network, prompts, tok.pad_token_id, max_new_tokens, self.batch_size, device)
        return [tok.decode(g, skip_special_tokens=True, clean_up_tokenization_spaces=True) for g in new]

    @torch.no_grad()
    def _token_logprobs(self, network: nn.Module, seqs: list[tuple[list[int], int]], device):
        """Per sequence (ids, n_scored): log p and argmax-correctness of its last n_scored tokens."""
        out = []
        for i in range(0, len(seqs), self.batch_size):
            chunk = seqs[i:i + self.batch_size]
            n = max(len(s) for s, _ in chunk)
            ids = torch.full((len(chunk), n), self.tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, (s, _) in enumerate(chunk):
                ids[row, :len(s)], mask[row, :len(s)] = torch.tensor(s), 1
            scored = torch.zeros((len(chunk), n - 1), dtype=torch.bool)
            for row, (s, k) in enumerate(chunk):
                scored[row, len(s) - 1 - k:len(s) - 1] = True
            logits = network(ids.to(device), attention_mask=mask.to(device))
            logits = getattr(logits, "logits", logits)[:, :-1]
            scored = scored.to(device)
            # Only the scored positions go through the vocabulary-sized maths (never padding, nor the prompt).
            logp = torch.log_softmax(logits[scored].float(), -1)
            target = ids[:, 1:].to(device)[scored]
            picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()
            correct = (logp.argmax(-1) == target).cpu()
            start = 0
            for _, k in chunk:
                out.append((picked[start:start + k], correct[start:start + k]))
                start += k
        return out

    # ----- the evaluation ------------------------------------------------------------------------------------------
    def run(self, network: nn.Module, device: torch.device | str | None = None) -> TofuReport:
        device = device or next(network.parameters()).device
        rank, world = rank_and_world()
        summary: dict[str, float | None] = {}
        per_item: dict[str, dict[str, list[float]]] = {}
        notes: list[str] = []
        self._truncated = {}
        with eval_mode(network):  # every submodule gets its own mode back
            self._verbmem(network, device, rank, world, summary, per_item)
            for name, qa, icl in (("knowmem_f", "forget_qa", "forget_qa_icl"),
                                  ("knowmem_r", "retain_qa", "retain_qa_icl")):
                if self.source.has("knowmem", qa):
                    self._knowmem(network, device, rank, world, name, qa, icl, summary, per_item)
                else:
                    summary[name] = None
                    notes.append(f"{name}: the data has no knowmem/{qa} (MUSE-Books has none)")
            self._privleak(network, device, rank, world, summary, per_item, notes)
        ordered = {k: summary.get(k) for k in HEADLINE}
        ordered.update({k: v for k, v in summary.items() if k not in ordered})
        truncated = {part: self._gathered(c) for part, c in self._truncated.items()}
        report = TofuReport(ordered, per_item, notes, "muse", truncated=truncated, max_length=self.max_length,
                            truncation_kept="last")
        if any(c for c, _ in truncated.values()):
            warnings.warn(report.truncation_note(), stacklevel=2)
        return report

    @staticmethod
    def _gathered(counts: list[int]) -> list[int]:
        """[cut, sequences] summed over processes."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            t = torch.tensor(counts, dtype=torch.long)
            torch.distributed.all_reduce(t)
            return t.tolist()
        return list(counts)

    def _verbmem(self, network, device, rank, world, summary, per_item) -> None:
        rows = self.source.load("verbmem", "forget")[rank::world]
        prompts = [self._ids(r["prompt"]) for r in rows]
        gt_ids = [self._ids(r["gt"])[:self.verbmem_tokens] for r in rows]
        gts = [self.tokenizer.decode(g, skip_special_tokens=True, clean_up_tokenization_spaces=True) for g in gt_ids]
        outputs = self._generate(network, prompts, self.verbmem_tokens, device)
        rouge = ItemMean()
        rouge.update(torch.tensor(muse_math.rouge_l_f1(outputs, gts), dtype=torch.float64) * 100)
        summary["verbmem_f"] = rouge.compute().item()
        # ES / EM of the ground truth's tokens (after BOS) given the prompt, teacher-forced.
        tok = self.tokenizer
        seqs = []
        for p, r in zip(prompts, rows):
            cont = tok(r["gt"], add_special_tokens=False)["input_ids"][:self.verbmem_tokens]
            seqs.append((self._last(p + cont, "verbmem"), min(len(cont), self.max_length - 1)))
        stats = self._token_logprobs(network, seqs, device)
        es, em = ItemMean(), ItemMean()
        es.update(torch.tensor([tofu_math.extraction_strength(c) for _, c in stats], dtype=torch.float64))
        em.update(torch.tensor([tofu_math.exact_memorization(c) for _, c in stats], dtype=torch.float64))
        summary["forget/es"], summary["forget/em"] = es.compute().item(), em.compute().item()
        per_item["verbmem"] = {"rouge_l_f1": rouge.per_item().tolist(), "es": es.per_item().tolist(),
                               "em": em.per_item().tolist()}

    def _knowmem(self, network, device, rank, world, name, qa, icl, summary, per_item) -> None:
        rows = self.source.load("knowmem", qa)[rank::world]
        shots = self.source.load("knowmem", icl) if self.source.has("knowmem", icl) else []
        head = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
        prompts = [self._last(self._ids(head + f"Question: {r['question']}\nAnswer: "), name) for r in rows]
        answers = [muse_math.cut_at_stop(o) for o in self._generate(network, prompts, self.knowmem_tokens, device)]
        rouge = ItemMean()
        rouge.update(torch.tensor(muse_math.rouge_l_f1(answers, [r["answer"] for r in rows]),
                                  dtype=torch.float64) * 100)
        summary[name] = rouge.compute().item()
        per_item[name] = {"rouge_l_f1": rouge.per_item().tolist()}

    def _privleak(self, network, device, rank, world, summary, per_item, notes) -> None:
        auc = MembershipAUC()
        for split, is_holdout in (("forget", False), ("holdout", True)):
            texts = self.source.texts("privleak", split)[rank::world]
            seqs = []
            for t in texts:
                ids = self._last(self._ids(t), "privleak")
                seqs.append((ids, len(ids) - 1))
            scores = [tofu_math.min_k_score(lp, self.min_k, "floor") for lp, _ in
                      self._token_logprobs(network, seqs, device)]
            auc.update(-torch.tensor(scores, dtype=torch.float64), is_holdout)  # MUSE's score: −Min-K%
        value = auc.compute().item()
        summary["privleak/auc"] = value
        ref = (self.reference or {}).get("summary", {}).get("privleak/auc", self.retrain_auc)
        if ref is None:
            summary["privleak"] = None
            msg = ("privleak not computed: no reference (evaluate the retrained model with `lit-unlearn muse-eval "
                   "--save REF.json` and pass reference=REF.json, or give retrain_auc)")
            notes.append(msg)
            warnings.warn(msg, stacklevel=3)
        elif ref == 0:
            summary["privleak"] = None  # MUSE's formula divides by AUC_retrain
            notes.append("privleak not computed: the reference's AUC is 0 (too few privleak texts to rank?)")
        else:
            summary["privleak"] = muse_math.muse_privleak(value, ref)
