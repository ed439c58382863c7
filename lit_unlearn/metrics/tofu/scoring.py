"""The teacher-forced pass of the TOFU evaluation and the metrics read from it alone.

`TeacherForcedScoring` scores (question, answer) pairs: one forward pass per distinct pair, every requested pair of
every split in one length-sorted batch stream, and only per-token scalars kept (log p(y_t), the moments of log p
for Min-K%++, and whether the argmax is y_t): no logits leave the batch. Each pair is tokenised once per
tokenizer and format, for all its evaluators (the data never changes), and scored once per run (the weights change
between runs), so the split metrics and the membership attacks share it.

`split_scores` is the unit for one split: truth ratio, answer probability, mean answer NLL, extraction strength
and exact memorisation. ES and EM are teacher-forced (the argmax at each answer position), as open-unlearning
computes them, so they need no generation.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.core.batches import logits_and_labels
from lit_unlearn.data.qa_format import QAFormatter, pad_collate
from lit_unlearn.core.errors import UserError
from lit_unlearn.metrics.tofu import formulas as tofu_math
from lit_unlearn.metrics.mia_convention import MIAConvention
from lit_unlearn.metrics.tofu.torch_metrics import AnswerProbability, ItemMean, NormalisedProbability, TruthRatio

__all__ = ["AnswerStats", "TeacherForcedScoring", "nll_only_pairs", "split_pairs", "split_scores", "KNOWLEDGE"]

KNOWLEDGE = ("real_authors", "world_facts")  # truth ratio and probability against the original answer

Pair = tuple[str, str]


@dataclass
class AnswerStats:
    """One (question, answer)'s scores: scalars and per-answer-token scalars (no logits)."""
    nll: float          # mean NLL over every answer token (TOFU's length-normalised loss)
    logp: Tensor        # [n] log p(y_t)
    mu: Tensor | None   # [n] E_p[log p] at each position (Min-K%++); None when scored for the NLL only
    var: Tensor | None  # [n] Var_p[log p]
    correct: Tensor | None  # [n] argmax == y_t (extraction strength, exact memorisation)
    label_ids: Tensor   # [n] the answer tokens (zlib on decoded text)
    rank: Tensor | None = None  # [n] how many vocabulary tokens are likelier than y_t (0: the argmax; token rank)

    def scored(self, drop_last: bool) -> "AnswerStats":
        """Without the last answer token (EOS), as open-unlearning's token-wise scores are."""
        if not drop_last:
            return self
        cut = (lambda t: None if t is None else t[:-1])  # noqa: E731
        return AnswerStats(self.nll, self.logp[:-1], cut(self.mu), cut(self.var), cut(self.correct),
                           self.label_ids[:-1], cut(self.rank))


def nll_only_pairs(name: str, rows: list[dict]) -> set[Pair]:
    """The split's pairs whose NLL is all that is read (paraphrased and perturbed answers), minus its answers."""
    pairs = split_pairs(name, rows)
    return set(pairs[len(rows):]) - set(pairs[:len(rows)])


def split_pairs(name: str, rows: list[dict]) -> list[Pair]:
    """The (question, answer) sequences a split is scored on: the answers, then (with perturbed answers) the
    correct answers (paraphrased, or the answer itself for the general-knowledge sets) and the perturbed ones."""
    pairs = [(r["question"], r["answer"]) for r in rows]
    if name != "holdout" and rows and "perturbed_answer" in rows[0]:
        key = "answer" if name in KNOWLEDGE or "paraphrased_answer" not in rows[0] else "paraphrased_answer"
        pairs += [(r["question"], r[key]) for r in rows] + \
            [(r["question"], a) for r in rows for a in r["perturbed_answer"]]
    return pairs


_ENCODINGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _shared_encodings(formatter: QAFormatter) -> dict:
    """{pair: (its encoding, whether max_length cut it)}, shared by every scoring of the formatter's tokenizer object
    and settings: a run's evaluators (the TOFU report, the verdict's halves, the stop rule's looks) score the same
    items, and tokenising them again cost about 3 % of a tiny demo's CPU time (docs/findings/own-job.md). Kept
    beside the tokenizer object (gone with it); its vocabulary size is part of the key (an added token changes how a
    text splits)."""
    try:
        key = (formatter.template, formatter.max_length, formatter.input_format, len(formatter.tokenizer))
        return _ENCODINGS.setdefault(formatter.tokenizer, {}).setdefault(key, {})
    except TypeError:  # a tokenizer without a size or a weak reference: this scoring's own
        return {}


class TeacherForcedScoring:
    """The teacher-forced pass: AnswerStats per (question, answer), computed once per run."""

    def __init__(self, formatter: QAFormatter, pad_token_id: int, batch_size: int,
                 batch_tokens: int | None = None) -> None:
        """Batches are runs of the length-sorted pairs (little padding): batch_size rows each by default;
        batch_tokens instead fills each batch with as many rows as fit in that many padded tokens (fewer, fuller
        batches of short sequences). Measured on CPU, batch_size rows was the faster of the two
        (benchmarks/llm_scale/tofu_eval_phases.py: 1.46× slower with a budget of batch_size × max_length at
        forget10)."""
        self.formatter, self.batch_size = formatter, batch_size
        self.batch_tokens = batch_tokens
        self._collate = pad_collate(pad_token_id)
        self._encoded = _shared_encodings(formatter)  # the data never changes: tokenise once
        self._stats: dict[Pair, AnswerStats] = {}     # one run's scores (cleared per run)

    def encode(self, pair: Pair) -> dict[str, Tensor]:
        if pair not in self._encoded:
            before = len(self.formatter.truncated)
            self._encoded[pair] = (self.formatter.encode(*pair), len(self.formatter.truncated) > before)
        encoded, cut = self._encoded[pair]
        if cut:  # cut where another evaluator's formatter encoded it: this one reports it too
            self.formatter.truncated.add(pair)
        return encoded

    def batch(self, pairs: list[Pair], device) -> dict[str, Tensor]:
        return {k: v.to(device) for k, v in self._collate([self.encode(p) for p in pairs]).items()}

    def new_run(self, shared: dict | None = None) -> None:
        """Forget the scores: the weights changed. `shared`: the scores of the current weights kept for every
        evaluator of this network (lit_unlearn.metrics.weights_memo), read and filled from now on."""
        self._stats = {} if shared is None else shared

    @torch.no_grad()
    def score(self, network: nn.Module, pairs: list[Pair], device, nll_only: set[Pair] | frozenset = frozenset()) -> None:
        """Score every pair not yet scored in this run, all in one stream of length-sorted batches. Pairs in
        `nll_only` (paraphrased and perturbed answers: the truth ratio reads only their NLL) skip the per-token
        vocabulary statistics; a later request for their full stats scores them again."""
        todo = sorted({p for p in pairs if p not in self._stats}, key=lambda p: len(self.encode(p)["input_ids"]))
        for chunk in self._batches(todo):
            logits, labels = logits_and_labels(network, self.batch(chunk, device))
            valid = labels != IGNORE_INDEX
            # Only answer positions go through the vocabulary-sized maths (the prompt and padding never do).
            logp = torch.log_softmax(logits[valid].float(), -1)  # [answer tokens in the batch, V]
            del logits
            target = labels[valid]
            picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()
            counts = valid.sum(-1).tolist()
            full = torch.tensor([p not in nll_only for p in chunk], device=valid.device).repeat_interleave(
                torch.tensor(counts, device=valid.device))
            moments = None
            if bool(full.any()):  # E_p[log p], Var_p[log p], the argmax and y_t's rank, on the full pairs only
                lp_full = logp[full]
                prob = lp_full.exp()
                mu = (prob * lp_full).sum(-1)
                var = (prob * lp_full.square()).sum(-1) - mu.square()
                rank = (lp_full > lp_full.gather(-1, target[full].unsqueeze(-1))).sum(-1)
                moments = (mu.cpu(), var.cpu(), (lp_full.argmax(-1) == target[full]).cpu(), rank.cpu())
                del prob, lp_full
            del logp
            target = target.cpu()
            a = f = 0
            for pair, n in zip(chunk, counts):
                lp = picked[a:a + n]
                nll = float(-lp.double().mean())
                if pair in nll_only:
                    self._stats[pair] = AnswerStats(nll, lp, None, None, None, target[a:a + n])
                else:
                    mu, var, correct, rank = (m[f:f + n] for m in moments)
                    self._stats[pair] = AnswerStats(nll, lp, mu, var, correct, target[a:a + n], rank)
                    f += n
                a += n

    def _batches(self, todo: list[Pair]) -> list[list[Pair]]:
        """Consecutive runs of the length-sorted pairs: batch_size of them, or as many as fit batch_tokens padded
        tokens (rows × the longest)."""
        if self.batch_tokens is None:
            return [todo[i:i + self.batch_size] for i in range(0, len(todo), self.batch_size)]
        out: list[list[Pair]] = []
        for p in todo:
            n = len(self.encode(p)["input_ids"])
            if out and (len(out[-1]) + 1) * n <= self.batch_tokens:
                out[-1].append(p)
            else:
                out.append([p])
        return out

    def stats(self, network: nn.Module, pairs: list[Pair], device, nll_only=frozenset()) -> list[AnswerStats]:
        """Every pair's AnswerStats (scoring those this run has not scored yet, or only by NLL when their full
        stats are asked for now)."""
        stale = {p for p in pairs if p not in nll_only and p in self._stats and self._stats[p].mu is None}
        for p in stale:
            del self._stats[p]
        self.score(network, pairs, device, nll_only)
        return [self._stats[p] for p in pairs]

    def truncated(self, pairs: list[Pair]) -> int:
        """How many of these pairs were cut at max_length."""
        for p in pairs:
            self.encode(p)
        return sum(p in self.formatter.truncated for p in pairs)


def split_scores(name: str, rows: list[dict], stats: list[AnswerStats], convention: MIAConvention,
                 summary: dict) -> dict[str, list[float]]:
    """The split's teacher-forced metrics from the stats of `split_pairs(name, rows)`: per-item values returned,
    the (process-gathered) means written to summary as `{name}/{metric}`."""
    has_perturbed = bool(rows) and "perturbed_answer" in rows[0]
    out: dict[str, list[float]] = {}
    nll = torch.tensor([st.nll for st in stats[:len(rows)]], dtype=torch.float64)
    if has_perturbed:
        k = len(rows[0]["perturbed_answer"])
        if any(len(r["perturbed_answer"]) != k for r in rows):
            raise UserError(f"split {name!r}: every item needs the same number of perturbed answers")
        nll_correct = torch.tensor([st.nll for st in stats[len(rows):2 * len(rows)]], dtype=torch.float64)
        nll_pert = torch.tensor([st.nll for st in stats[2 * len(rows):]], dtype=torch.float64).reshape(len(rows), k)
        tr = TruthRatio("forget" if name == "forget" else "true")
        tr.update(nll_correct, nll_pert)
        summary[f"{name}/truth_ratio"] = tr.compute().item()
        out["truth_ratio"] = tr.per_item().tolist()
        if name in KNOWLEDGE:
            prob = NormalisedProbability()
            prob.update(nll, nll_pert)
        else:
            prob = AnswerProbability()
            prob.update(nll)
    else:
        prob = AnswerProbability()
        prob.update(nll)
    summary[f"{name}/prob"] = prob.compute().item()
    out["prob"] = prob.per_item().tolist()
    mean_nll = ItemMean()  # mean answer NLL, gathered over processes like the other per-item values
    mean_nll.update(nll)
    summary[f"{name}/nll"] = mean_nll.compute().item()
    for key, fn in (("es", lambda c: tofu_math.extraction_strength(c, convention.es_no_suffix_is_last)),
                    ("em", tofu_math.exact_memorization)):
        metric = ItemMean()
        metric.update(torch.tensor([fn(st.scored(convention.drop_last_token).correct) for st in stats[:len(rows)]],
                                   dtype=torch.float64))
        summary[f"{name}/{key}"] = metric.compute().item()
        out[key] = metric.per_item().tolist()
    return out
