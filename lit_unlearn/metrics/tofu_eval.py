"""Run the TOFU evaluation of a causal LM: per-item scores, the headline table, and the reference file.

    report = TofuEvaluator(tokenizer, eval_splits).run(network)           # eval_splits: TofuSource.eval_splits()
    report.save("runs/tofu/retrain_eval.json")                           # the retrained model: the reference
    TofuEvaluator(tokenizer, splits, reference="runs/tofu/retrain_eval.json").run(unlearned).table()

Forget quality compares the unlearned model's per-item forget truth ratios with the retrained model's. Without
a reference it is reported as missing, loudly (a warning, "n/a" in the table, `forget_quality: null` in JSON),
never silently; `require_reference=True` makes it an error.

Under data parallelism each process scores items rank::world_size and the torchmetrics states gather them.

Scoring is one teacher-forced pass per distinct (question, answer) of a split, answer variants batched together
and sorted by length, and only per-token scalars are kept (log p(y_t), the moments of log p for Min-K%++, and
whether the argmax is y_t): no logits leave the batch. The membership pass reuses the forget answers' pass.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from lit_unlearn.errors import MissingFileError, UserError
from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.console import fmt
from lit_unlearn.batches import logits_and_labels
from lit_unlearn.data.tofu import MAX_LENGTH, QAFormatter, pad_collate
from lit_unlearn.eval_mode import eval_mode
from lit_unlearn.metrics import tofu_math
from lit_unlearn.metrics.generation import generation_budget, greedy_continuations
from lit_unlearn.metrics.mia_convention import MIAConvention, get_convention
from lit_unlearn.metrics.tofu_verification import tofu_verification
from lit_unlearn.metrics.tofu_metrics import (
    AnswerProbability,
    ForgetQuality,
    MembershipAUC,
    NormalisedProbability,
    ItemMean,
    RougeLRecall,
    TruthRatio,
    rank_and_world,
)

__all__ = ["TofuEvaluator", "TofuReport", "HEADLINE", "TARGET_METRICS", "PASSES"]

_fmt = fmt

HEADLINE = ("forget_quality", "model_utility", "forget_truth_ratio", "forget/rouge", "retain/rouge")
# A target metric (lit_unlearn.verification.targets) -> (summary key, splits to score, generate?, membership?).
# Everything but model utility needs scoring passes only, so a stopping rule can evaluate often.
TARGET_METRICS = {
    "forget_quality": ("forget_quality", ("forget",), False, False),
    "forget_truth_ratio": ("forget_truth_ratio", ("forget",), False, False),
    "forget_prob": ("forget/prob", ("forget",), False, False),
    "forget_loss_tofu": ("forget/nll", ("forget",), False, False),
    "privleak": ("privleak", (), False, True),
    "model_utility": ("model_utility", None, True, False),
    # from the report's verification (lit_unlearn.metrics.tofu_verification)
    "forget_vs_retain_only_auc": ("verification/forget_vs_retain_only_auc", ("forget",), False, False),
    "model_utility_ratio": ("verification/model_utility_ratio", None, True, False),
}
# Passes a caller may ask for by name besides target metrics: the membership attacks' per-item scores on forget and
# holdout (the reference-free verification), and with them the gradient-norm attack (a backward pass per item).
PASSES = {"membership": (None, (), False, True), "gradnorm": (None, (), False, True)}
TOFU_MAX_NEW_TOKENS = 200  # TOFU's own generation length, the automatic budget's cap
KNOWLEDGE = ("real_authors", "world_facts")  # truth ratio and probability against the original answer
MIA_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus")  # from the scoring pass; gradnorm and reference apart


@dataclass
class AnswerStats:
    """One (question, answer)'s scores: scalars and per-answer-token scalars (no logits)."""
    nll: float          # mean NLL over every answer token (TOFU's length-normalised loss)
    logp: Tensor        # [n] log p(y_t)
    mu: Tensor          # [n] E_p[log p] at each position (Min-K%++)
    var: Tensor         # [n] Var_p[log p]
    correct: Tensor     # [n] argmax == y_t (extraction strength, exact memorisation)
    label_ids: Tensor   # [n] the answer tokens (zlib on decoded text)

    def scored(self, drop_last: bool) -> "AnswerStats":
        """Without the last answer token (EOS), as open-unlearning's token-wise scores are."""
        if not drop_last:
            return self
        return AnswerStats(self.nll, self.logp[:-1], self.mu[:-1], self.var[:-1], self.correct[:-1],
                           self.label_ids[:-1])


def _restore_order(values: list[float], world: int) -> list[float]:
    """Per-item values gathered from rank::world shards (rank 0's, then rank 1's, ...) back in item order."""
    n = len(values)
    order = [i for r in range(world) for i in range(r, n, world)]
    out = [0.0] * n
    for j, i in enumerate(order):
        out[i] = values[j]
    return out


@dataclass
class TofuReport:
    summary: dict[str, float | None]
    per_item: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mia_convention: str = "lit-unlearn"
    verification: dict | None = None  # against the retain-only model (lit_unlearn.metrics.tofu_verification)
    truncated: dict[str, list[int]] = field(default_factory=dict)  # split -> [sequences cut, sequences]
    max_length: int | None = None
    generation: dict | None = None  # {"max_new_tokens": n, "coverage": {split: share of answers ≤ n tokens}}
    evaluated_by: str | None = None  # a digest of the evaluation code (cached reports are redone when it changes)

    def value(self, key: str) -> float | None:
        """A summary metric, or `verification/NAME` from the verification measures."""
        if key.startswith("verification/"):
            return (self.verification or {}).get(key.split("/", 1)[1])
        return self.summary.get(key)

    def table(self) -> str:
        rows = ["| metric | value |", "|---|---|"]
        for key, value in self.summary.items():
            rows.append(f"| {key} | {_fmt(value)} |")
        if self.verification:
            rows += ["", "Gold standard: against the retain-only model (a model a 7B user rarely has; reported, "
                     "never decided on):", "",
                     "| measure | this model | retain-only model | gap |", "|---|---|---|---|"]
            v = self.verification
            for label, key in (("forget quality", "forget_quality"), ("privleak", "privleak")):
                if key in v:
                    rows.append(f"| {label} | {_fmt(v[key])} | {'1' if key == 'forget_quality' else '0'} | - |")
            if "forget_vs_retain_only_auc" in v:
                rows.append(f"| forget-vs-retain-only AUC (per-item NLL; raw {_fmt(v['forget_vs_retain_only_auc_raw'])})"
                            f" | {_fmt(v['forget_vs_retain_only_auc'])} | 0.5 | - |")
            if "model_utility" in v:
                rows.append(f"| model utility | {_fmt(v['model_utility'])} | {_fmt(v.get('model_utility_retain_only'))} "
                            f"| {_fmt(v.get('gap/model_utility'))} |")
            if "model_utility_ratio" in v:
                rows.append(f"| model utility / the target's | {_fmt(v['model_utility_ratio'])} | "
                            f"{_fmt(v.get('model_utility_ratio_retain_only'))} | - |")
            for key in ("forget_truth_ratio", "forget/prob", "forget/nll", "forget/rouge", "forget/es"):
                if f"gap/{key}" in v:
                    rows.append(f"| {key} | {_fmt(self.summary.get(key))} | "
                                f"{_fmt(self.summary.get(key) - v[f'gap/{key}'])} | {_fmt(v[f'gap/{key}'])} |")
        notes = [f"MIA / memorisation convention: {self.mia_convention}", self.truncation_note()]
        if self.generation:
            cover = ", ".join(f"{k} {v:.0%}" for k, v in self.generation["coverage"].items())
            notes.append(f"ROUGE from greedy answers of up to {self.generation['max_new_tokens']} new tokens "
                         f"(reference answers that fit: {cover})")
        notes += self.notes
        return "\n".join(rows + [""] + [f"- {n}" for n in notes])

    def truncation_note(self) -> str:
        cut = {k: v for k, v in self.truncated.items() if v[0]}
        if not cut:
            return f"no sequence longer than max_length={self.max_length}"
        return (f"TRUNCATED at max_length={self.max_length}: " +
                ", ".join(f"{k} {c} of {n} sequences" for k, (c, n) in cut.items()) +
                " (raise max_length; the answers' tails were not scored)")

    def save(self, path: str | Path) -> Path:
        from lit_unlearn.files import atomic_write_text

        path = Path(path)
        atomic_write_text(path, json.dumps({
            "summary": self.summary, "mia_convention": self.mia_convention, "verification": self.verification,
            "max_length": self.max_length, "truncated": self.truncated, "generation": self.generation,
            "evaluated_by": self.evaluated_by, "per_item": self.per_item, "notes": self.notes}, indent=1))
        return path




def _summary_of(report: str | Path | dict | None) -> dict | None:
    """A report's summary: from a saved report file, a report dict, or a summary dict itself."""
    if report is None:
        return None
    if not isinstance(report, dict):
        path = Path(report)
        if not path.is_file():
            raise MissingFileError(f"baseline report {path} not found (a report saved by `lit-unlearn tofu-eval --save`)")
        report = json.loads(path.read_text())
    return report.get("summary", report)


def _load_reference(reference: str | Path | dict | None) -> dict | None:
    """A reference in any format lit_unlearn.metrics.reference_formats reads (detected from the file)."""
    from lit_unlearn.metrics.reference_formats import read_reference
    from lit_unlearn.metrics.report_io import load_report

    if reference is not None and not isinstance(reference, dict) and Path(reference).exists():
        reference = read_reference(reference)
    return load_report(reference, "reference evaluation", "evaluate the retain-only (retrained) model first and "
                       "save its report (`lit-unlearn tofu-eval ... --save`)",
                       lambda d: bool(((d.get("per_item") or {}).get("forget") or {}).get("truth_ratio")),
                       "per-item forget truth ratios (per_item.forget.truth_ratio)")


class TofuEvaluator:
    def __init__(self, tokenizer, eval_splits: dict[str, list[dict]], template: str = "plain",
                 max_length: int = MAX_LENGTH,
                 max_new_tokens: int | None = None, batch_size: int = 32, reference: str | Path | dict | None = None,
                 require_reference: bool = False, min_k: float = 0.4, mia_convention: str = "lit-unlearn",
                 input_format: str = "lit-unlearn", gradnorm: bool = True, gradnorm_p: float = 2.0,
                 baseline: str | Path | dict | None = None) -> None:
        """
        Args:
            max_length: sequences (prompt + answer) longer than this are cut, counted per split in the report and
                warned about (TOFU's and open-unlearning's 512 by default).
            max_new_tokens: the greedy answers' budget for ROUGE; None: the fewest tokens that let ≥ 95 % of every
                generated split's reference answers fit whole, at most TOFU's 200 (stated in the report).
            mia_convention: "lit-unlearn" or "open-unlearning" (Min-K%, Min-K%++, zlib, ES/EM and privleak's
                fallback computed exactly as open-unlearning does; docs/llm.md lists the differences).
            input_format: "lit-unlearn" or "open-unlearning" (its tokenisation of the template).
            gradnorm: run the gradient-norm MIA (one backward pass per forget/holdout item).
            baseline: the report (or its summary) of the model before unlearning: model utility is then also
                given as a ratio to its value in the verification measures.
        """
        if "forget" not in eval_splits:
            raise UserError("the TOFU evaluation needs a 'forget' split (with perturbed answers)")
        self.formatter = QAFormatter(tokenizer, template, max_length, input_format=input_format)
        self.tokenizer, self.splits = tokenizer, eval_splits
        self.max_new_tokens, self.batch_size, self.min_k = max_new_tokens, batch_size, min_k
        self.convention: MIAConvention = get_convention(mia_convention)
        self.gradnorm, self.gradnorm_p = gradnorm, gradnorm_p
        self.reference = _load_reference(reference)
        self.baseline = _summary_of(baseline)
        if require_reference and self.reference is None:
            raise UserError("require_reference=True but no reference evaluation of the retrained model was given")
        self._collate = pad_collate(tokenizer.pad_token_id)
        self._encoded: dict[tuple[str, str], dict[str, Tensor]] = {}  # the data never changes: tokenise once
        self._stats: dict[tuple[str, str], AnswerStats] = {}          # one run's scores (cleared per run)
        self._warned = False  # the truncation warning, once per evaluator
        self._truncated: dict[str, list[int]] = {}  # split -> [sequences cut, sequences]
        self._generation: dict | None = None

    # ----- model passes -------------------------------------------------------------------------------------------
    def _encode(self, pair: tuple[str, str]) -> dict[str, Tensor]:
        if pair not in self._encoded:
            self._encoded[pair] = self.formatter.encode(*pair)
        return self._encoded[pair]

    @torch.no_grad()
    def _answer_stats(self, network: nn.Module, pairs: list[tuple[str, str]], device) -> list[AnswerStats]:
        """Every pair's AnswerStats; pairs not yet scored in this run go through the model, sorted by length."""
        todo = sorted({p for p in pairs if p not in self._stats}, key=lambda p: len(self._encode(p)["input_ids"]))
        for i in range(0, len(todo), self.batch_size):
            chunk = todo[i:i + self.batch_size]
            batch = {k: v.to(device) for k, v in self._collate([self._encode(p) for p in chunk]).items()}
            logits, labels = logits_and_labels(network, batch)
            valid = labels != IGNORE_INDEX
            # Only answer positions go through the vocabulary-sized maths (the prompt and padding never do).
            logp = torch.log_softmax(logits[valid].float(), -1)  # [answer tokens in the batch, V]
            target = labels[valid]
            picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            prob = logp.exp()
            mu = (prob * logp).sum(-1)
            var = (prob * logp.square()).sum(-1) - mu.square()
            correct = logp.argmax(-1) == target
            del logp, prob
            bounds = valid.sum(-1).cumsum(0).tolist()
            for j, pair in enumerate(chunk):
                a, b = (bounds[j - 1] if j else 0), bounds[j]
                lp = picked[a:b].cpu()
                self._stats[pair] = AnswerStats(float(-lp.double().mean()), lp, mu[a:b].cpu(), var[a:b].cpu(),
                                                correct[a:b].cpu(), target[a:b].cpu())
        return [self._stats[p] for p in pairs]

    def _nll(self, network, pairs, device) -> Tensor:
        return torch.tensor([s.nll for s in self._answer_stats(network, pairs, device)], dtype=torch.float64)

    def _grad_norms(self, network: nn.Module, pairs: list[tuple[str, str]], device) -> Tensor:
        """Gradient-norm MIA scores: per item, the mean over parameter tensors of ‖∇ mean answer NLL‖_p."""
        params = [q for q in network.parameters() if q.requires_grad]
        enabled = []
        if not params:  # a frozen model (e.g. evaluated standalone): differentiate w.r.t. its float weights
            enabled = [q for q in network.parameters() if q.is_floating_point()]
            for q in enabled:
                q.requires_grad_(True)
            params = enabled
        drop_last = self.convention.drop_last_token
        out = []
        try:
            for pair in pairs:
                batch = {k: v.to(device) for k, v in self._collate([self._encode(pair)]).items()}
                with torch.enable_grad():
                    logits, labels = logits_and_labels(network, batch)
                    valid = (labels != IGNORE_INDEX)[0]
                    lp = torch.log_softmax(logits[0][valid].float(), -1).gather(
                        -1, labels[0][valid].unsqueeze(-1)).squeeze(-1)
                    lp = lp[:-1] if drop_last and lp.numel() > 1 else lp
                    grads = torch.autograd.grad(-lp.mean(), params, allow_unused=True)
                norms = [g.detach().float().norm(p=self.gradnorm_p) for g in grads if g is not None]
                out.append(torch.stack(norms).mean().item())
        finally:
            for q in enabled:
                q.requires_grad_(False)
        return torch.tensor(out, dtype=torch.float64)

    def generation(self) -> dict:
        """The ROUGE answers' budget and the share of each generated split's reference answers it covers."""
        if self._generation is None:
            lengths = {name: [len(self.tokenizer(r["answer"], add_special_tokens=False)["input_ids"]) for r in rows]
                       for name, rows in self.splits.items() if name != "holdout"}
            budget, coverage = generation_budget(lengths, cap=TOFU_MAX_NEW_TOKENS)
            if self.max_new_tokens is not None:
                budget = self.max_new_tokens
                coverage = {k: sum(n <= budget for n in v) / max(1, len(v)) for k, v in lengths.items()}
            self._generation = {"max_new_tokens": budget, "coverage": coverage}
        return self._generation

    def _generate(self, network: nn.Module, questions: list[str], device) -> list[str]:
        """Greedy answers (batched, length-sorted, KV cache)."""
        tok = self.tokenizer
        new = greedy_continuations(network, [self.formatter.prompt_ids(q) for q in questions], tok.pad_token_id,
                                   self.generation()["max_new_tokens"], self.batch_size, device, tok.eos_token_id)
        return [tok.decode(g, skip_special_tokens=True).strip() for g in new]

    # ----- the evaluation -----------------------------------------------------------------------------------------
    def run(self, network: nn.Module, device: torch.device | str | None = None,
            only: list[str] | None = None) -> TofuReport:
        """The full report, or with `only` (target metric names, see TARGET_METRICS) just what they need."""
        device = device or next(network.parameters()).device
        if only is not None:
            known = {**TARGET_METRICS, **PASSES}
            unknown = [m for m in only if m not in known]
            if unknown:
                raise ValueError(f"unknown TOFU target metrics {unknown}; known: {sorted(known)}")
            needs = [known[m] for m in only]
            splits = None if any(n[1] is None for n in needs) else {x for n in needs for x in n[1]}
            generate = any(n[2] for n in needs)
            membership = any(n[3] for n in needs) or splits is None
        else:
            splits, generate, membership = None, True, True
        rank, world = rank_and_world()
        summary: dict[str, float | None] = {}
        per_item: dict[str, dict[str, list[float]]] = {}
        notes: list[str] = []
        self._stats = {}  # the weights changed since the last run
        try:
            with eval_mode(network):  # every submodule gets its own mode back (frozen BatchNorm stays frozen)
                for name, rows in self.splits.items():
                    if name == "holdout" or (splits is not None and name not in splits):
                        continue
                    mine = rows[rank::world]
                    per_item[name] = self._score_split(network, name, mine, device, summary, world, generate)
                if membership:
                    self._membership(network, device, rank, world, summary, per_item, notes, full=only is None,
                                     gradnorm=only is None or "gradnorm" in only)
        finally:
            self._stats = {}
        self._aggregate(summary, per_item, notes, partial=only is not None)
        verification = tofu_verification(summary, per_item, self.reference, self.baseline)
        report = TofuReport(summary, per_item, notes, self.convention.name, verification,
                            self._truncation(list(per_item) + (["holdout"] if "mia" in per_item else [])),
                            self.formatter.max_length, self.generation() if generate else None)
        if any(c for c, _ in report.truncated.values()) and not self._warned:
            self._warned = True
            warnings.warn(report.truncation_note(), stacklevel=2)
        return report

    def _truncation(self, names: list[str]) -> dict[str, list[int]]:
        """[sequences cut at max_length, sequences] of each evaluated split, over all of its items (every rank)."""
        for name in names:  # the data never changes: counted once per split, read back on later runs
            if name in self.splits and name not in self._truncated:
                pairs = self._split_pairs(name, self.splits[name])
                for p in pairs:
                    self._encode(p)
                self._truncated[name] = [sum(p in self.formatter.truncated for p in pairs), len(pairs)]
        return {name: list(self._truncated[name]) for name in names if name in self._truncated}

    def _split_pairs(self, name: str, rows: list[dict]) -> list[tuple[str, str]]:
        """The (question, answer) sequences a split is scored on: the answers, then (with perturbed answers) the
        correct answers (paraphrased, or the answer itself for the general-knowledge sets) and the perturbed ones."""
        pairs = [(r["question"], r["answer"]) for r in rows]
        if name != "holdout" and rows and "perturbed_answer" in rows[0]:
            key = "answer" if name in KNOWLEDGE or "paraphrased_answer" not in rows[0] else "paraphrased_answer"
            pairs += [(r["question"], r[key]) for r in rows] + \
                [(r["question"], a) for r in rows for a in r["perturbed_answer"]]
        return pairs

    def _score_split(self, network, name, rows, device, summary, world, generate=True) -> dict[str, list[float]]:
        has_perturbed = bool(rows) and "perturbed_answer" in rows[0]
        knowledge = name in KNOWLEDGE
        if has_perturbed:
            k = len(rows[0]["perturbed_answer"])
            if any(len(r["perturbed_answer"]) != k for r in rows):
                raise UserError(f"split {name!r}: every item needs the same number of perturbed answers")
        pairs = self._split_pairs(name, rows)
        stats = self._answer_stats(network, pairs, device)  # every variant of the split in one batched pass
        nll = torch.tensor([st.nll for st in stats[:len(rows)]], dtype=torch.float64)
        out: dict[str, list[float]] = {}
        if has_perturbed:
            nll_correct = torch.tensor([st.nll for st in stats[len(rows):2 * len(rows)]], dtype=torch.float64)
            nll_pert = torch.tensor([st.nll for st in stats[2 * len(rows):]], dtype=torch.float64).reshape(len(rows), k)
            tr = TruthRatio("forget" if name == "forget" else "true")
            tr.update(nll_correct, nll_pert)
            summary[f"{name}/truth_ratio"] = tr.compute().item()
            out["truth_ratio"] = tr.per_item().tolist()
            prob = NormalisedProbability() if knowledge else AnswerProbability()
            prob.update(nll, nll_pert) if knowledge else prob.update(nll)
        else:
            prob = AnswerProbability()
            prob.update(nll)
        summary[f"{name}/prob"] = prob.compute().item()
        out["prob"] = prob.per_item().tolist()
        mean_nll = ItemMean()  # mean answer NLL, gathered over processes like the other per-item values
        mean_nll.update(nll)
        summary[f"{name}/nll"] = mean_nll.compute().item()
        conv = self.convention
        for key, fn in (("es", lambda c: tofu_math.extraction_strength(c, conv.es_no_suffix_is_last)),
                        ("em", tofu_math.exact_memorization)):
            metric = ItemMean()
            metric.update(torch.tensor([fn(st.scored(conv.drop_last_token).correct) for st in stats[:len(rows)]],
                                       dtype=torch.float64))
            summary[f"{name}/{key}"] = metric.compute().item()
            out[key] = metric.per_item().tolist()
        if not generate:
            return out
        rouge = RougeLRecall()
        rouge.update(self._generate(network, [r["question"] for r in rows], device), [r["answer"] for r in rows])
        summary[f"{name}/rouge"] = rouge.compute().item()
        out["rouge"] = rouge.per_item().tolist()
        return out

    def _attack_scores(self, rows: list[dict], stats: list[AnswerStats]) -> dict[str, Tensor]:
        conv, k = self.convention, self.min_k
        scored = [st.scored(conv.drop_last_token) for st in stats]
        if conv.zlib_text == "answer":
            texts = [r["answer"] for r in rows]
        else:
            texts = [self.tokenizer.decode(st.label_ids.tolist(), skip_special_tokens=True) for st in stats]
        as_tensor = lambda xs: torch.tensor(xs, dtype=torch.float64)  # noqa: E731
        return {"loss": as_tensor([st.nll for st in stats]),
                "zlib": as_tensor([tofu_math.zlib_score(st.nll, t) for st, t in zip(stats, texts)]),
                "min_k": as_tensor([tofu_math.min_k_score(st.logp, k, conv.k_rounding) for st in scored]),
                "min_k_plus_plus": as_tensor([tofu_math.min_k_plus_plus_from_moments(
                    st.logp, st.mu, st.var, k, conv.k_rounding, conv.var_floor) for st in scored])}

    def _membership(self, network, device, rank, world, summary, per_item, notes, full: bool = True,
                    gradnorm: bool = True) -> None:
        """Forget (members: label 0) vs holdout (label 1) AUCs of the loss, zlib, Min-K%, Min-K%++ attacks; in a
        full report also gradnorm and the reference attack, and the per-item NLLs a later run's reference MIA
        needs (in item order)."""
        holdout = self.splits.get("holdout")
        if not holdout:
            notes.append("membership inference: no holdout split, MIA AUCs not computed")
            return
        attacks = list(MIA_ATTACKS)
        run_gradnorm = gradnorm and self.gradnorm
        if run_gradnorm and any(hasattr(q, "ds_id") for q in network.parameters()):
            run_gradnorm = False
            notes.append("gradnorm MIA not computed: the parameters are ZeRO-3 partitioned (evaluate the saved "
                         "model with `lit-unlearn tofu-eval` for it)")
        attacks += ["gradnorm"] if run_gradnorm else []
        ref_nll = self._reference_nll() if full else None
        if full and self.reference is not None and ref_nll is None:
            notes.append("reference MIA not computed: the reference report has no per-item forget/holdout NLLs "
                         "(save it again with this version)")
        attacks += ["reference"] if ref_nll is not None else []
        metrics = {a: MembershipAUC() for a in attacks}
        item_scores: dict[str, ItemMean] = {}
        for split, all_rows, is_holdout in (("forget", self.splits["forget"], False), ("holdout", holdout, True)):
            rows = all_rows[rank::world]
            pairs = [(r["question"], r["answer"]) for r in rows]
            stats = self._answer_stats(network, pairs, device)
            scores = self._attack_scores(rows, stats)
            # not an attack: each item's mean predictive entropy over its answer tokens (−E_p[log p]), which a
            # forget objective that aims at the unseen items' level reads (HAMU's forget_entropy)
            item_scores[f"{split}_entropy"] = ItemMean()
            item_scores[f"{split}_entropy"].update(torch.tensor([-float(st.mu.double().mean()) for st in stats],
                                                                dtype=torch.float64))
            if run_gradnorm:
                scores["gradnorm"] = self._grad_norms(network, pairs, device)
            if ref_nll is not None:
                ref = ref_nll[split]
                if len(ref) != len(all_rows):
                    raise UserError(f"the reference report scored {len(ref)} {split} items, this data has "
                                    f"{len(all_rows)}: evaluate the retain-only model on the same data")
                mine = torch.tensor(ref[rank::world], dtype=torch.float64)
                scores["reference"] = scores["loss"] - mine
            for a, m in metrics.items():
                m.update(scores[a], is_holdout)
                item_scores[f"{split}_{a}"] = ItemMean()
                item_scores[f"{split}_{a}"].update(scores[a])
        for a, m in metrics.items():
            summary[f"mia/{a}_auc"] = m.compute().item()
        # Every attack's per-item scores in item order: the reference-free verification resamples them by author,
        # and a later run's reference attack reads the NLLs (`{split}_nll`, the loss attack's scores).
        mia = {key: _restore_order(m.per_item().tolist(), world) for key, m in item_scores.items()}
        mia.update({f"{split}_nll": mia[f"{split}_loss"] for split in ("forget", "holdout")})
        per_item["mia"] = mia

    def _reference_nll(self) -> dict[str, list[float]] | None:
        mia = ((self.reference or {}).get("per_item") or {}).get("mia") or {}
        if not mia.get("forget_nll") or not mia.get("holdout_nll"):
            return None
        return {"forget": mia["forget_nll"], "holdout": mia["holdout_nll"]}

    def _aggregate(self, summary, per_item, notes, partial: bool = False) -> None:
        summary["forget_truth_ratio"] = summary.get("forget/truth_ratio")
        try:
            summary["model_utility"] = tofu_math.model_utility(summary)
        except KeyError as err:
            summary["model_utility"] = None
            if not partial:
                notes.append(f"model utility not computed: missing {err.args[0]}")
        ref = self.reference
        if partial:
            if ref is not None and "truth_ratio" in per_item.get("forget", {}):
                mine, theirs = self._common_forget_items(per_item["forget"]["truth_ratio"], notes)
                summary["forget_quality"] = tofu_math.forget_quality(mine, theirs)
            self._privleak(summary, notes)
            return
        if ref is None:
            summary["forget_quality"] = None
            msg = ("forget quality not computed: no reference evaluation of the retain-only (retrained) model; "
                   "evaluate it with `lit-unlearn tofu-eval --save REF.json` and pass reference=REF.json")
            notes.append(msg)
            warnings.warn(msg, stacklevel=3)
        else:
            mine, ref_tr = self._common_forget_items(per_item["forget"]["truth_ratio"], notes)
            fq = ForgetQuality(ref_tr)
            fq.values = [torch.tensor(mine, dtype=torch.float64)]
            summary["forget_quality"] = fq.compute().item()
            if ref.get("format", "lit-unlearn") != "lit-unlearn":
                notes.append(f"reference read from {ref['format']} format: {ref.get('source')}")
            ref_convention = ref.get("mia_convention", "lit-unlearn")
            if ref_convention != self.convention.name:
                notes.append(f"the reference report used the {ref_convention} MIA convention, this one "
                             f"{self.convention.name}: privleak compares AUCs computed differently")
        self._privleak(summary, notes)
        ordered = {k: summary.get(k) for k in HEADLINE}
        ordered.update({k: v for k, v in summary.items() if k not in ordered})
        summary.clear()
        summary.update(ordered)

    def _common_forget_items(self, mine: list[float], notes: list[str]) -> tuple[list[float], list[float]]:
        """This report's and the reference's per-item forget truth ratios on the items both cover: the first ones
        in split order (the TOFU authors' logs cover the first 300 of a split). Where the reference recorded its
        prompts, the common items' questions must be among them."""
        theirs = self.reference["per_item"]["forget"]["truth_ratio"]
        k = min(len(mine), len(theirs))
        prompts = ((self.reference.get("prompts") or {}).get("forget") or [])[:k]
        for i, prompt in enumerate(prompts):
            question = self.splits["forget"][i]["question"]
            if prompt and question not in prompt:
                raise UserError(f"the reference's forget item {i} is not this data's ({prompt[:60]!r} vs "
                                f"{question[:60]!r}): evaluate on the same forget split (--forget-level)")
        if len(mine) != len(theirs):
            notes.append(f"forget quality on the first {k} forget items, the ones both cover (the reference has "
                         f"{len(theirs)}, this data {len(mine)})")
        return mine[:k], theirs[:k]

    def _privleak(self, summary, notes) -> None:
        """Min-K% AUC relative to the retain-only model's. Without a reference: omitted (ours), or against the
        convention's fallback AUC (open-unlearning: 0.5), with a note either way."""
        auc = summary.get("mia/min_k_auc")
        if auc is None:
            return
        ref_auc = ((self.reference or {}).get("summary") or {}).get("mia/min_k_auc")
        conv = self.convention
        if ref_auc is None and conv.privleak_fallback_auc is not None:
            ref_auc = conv.privleak_fallback_auc
            notes.append(f"privleak against a fallback retain AUC of {ref_auc} (no reference report), as "
                         "open-unlearning reports it")
        if ref_auc is None or (conv.privleak_eps == 0 and math.isclose(ref_auc, 1.0)):
            return
        summary["privleak"] = tofu_math.privleak(auc, ref_auc, conv.privleak_eps)
