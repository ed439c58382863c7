"""Run the TOFU evaluation of a causal LM: per-item scores, the headline table, and the reference file.

    report = TofuEvaluator(tokenizer, eval_splits).run(network)           # eval_splits: TofuSource.eval_splits()
    report.save("runs/tofu/retrain_eval.json")                           # the retrained model: the reference
    TofuEvaluator(tokenizer, splits, reference="runs/tofu/retrain_eval.json").run(unlearned).table()

Forget quality compares the unlearned model's per-item forget truth ratios with the retrained model's. Without
a reference it is reported as missing, loudly (a warning, "n/a" in the table, `forget_quality: null` in JSON),
never silently; `require_reference=True` makes it an error.

Under data parallelism each process scores items rank::world_size and the torchmetrics states gather them.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

from lit_unlearn.errors import MissingFileError, UserError
from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.batches import logits_and_labels
from lit_unlearn.data.tofu import QAFormatter, pad_collate
from lit_unlearn.metrics import tofu_math
from lit_unlearn.metrics.tofu_metrics import (
    AnswerProbability,
    ForgetQuality,
    MembershipAUC,
    NormalisedProbability,
    ItemMean,
    RougeLRecall,
    TruthRatio,
)

__all__ = ["TofuEvaluator", "TofuReport", "HEADLINE", "TARGET_METRICS"]

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
}
KNOWLEDGE = ("real_authors", "world_facts")  # truth ratio and probability against the original answer
MIA_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus")


@dataclass
class TofuReport:
    summary: dict[str, float | None]
    per_item: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = ["| metric | value |", "|---|---|"]
        for key, value in self.summary.items():
            rows.append(f"| {key} | {'n/a' if value is None else f'{value:.4g}'} |")
        return "\n".join(rows + [""] + [f"- {n}" for n in self.notes])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"summary": self.summary, "per_item": self.per_item, "notes": self.notes}, indent=1))
        return path


def _load_reference(reference: str | Path | dict | None) -> dict | None:
    if reference is None:
        return None
    where = "the reference" if isinstance(reference, dict) else str(reference)
    if isinstance(reference, dict):
        data = reference
    else:
        path = Path(reference)
        if not path.is_file():
            raise MissingFileError(f"reference evaluation {path} not found: evaluate the retain-only (retrained) "
                                   "model first and save its report (`lit-unlearn tofu-eval ... --save`)")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UserError(f"reference evaluation {path} is not JSON ({err.msg}); save one with "
                            "`lit-unlearn tofu-eval ... --save`") from None
    tr = ((data.get("per_item") or {}).get("forget") or {}).get("truth_ratio") if isinstance(data, dict) else None
    if not tr:
        raise UserError(f"{where} has no per-item forget truth ratios (per_item.forget.truth_ratio): it is not a "
                        "report saved by `lit-unlearn tofu-eval --save` from data with TOFU's perturbed splits")
    return data


class TofuEvaluator:
    def __init__(self, tokenizer, eval_splits: dict[str, list[dict]], template: str = "plain", max_length: int = 256,
                 max_new_tokens: int = 200, batch_size: int = 32, reference: str | Path | dict | None = None,
                 require_reference: bool = False, min_k: float = 0.4) -> None:
        if "forget" not in eval_splits:
            raise UserError("the TOFU evaluation needs a 'forget' split (with perturbed answers)")
        self.formatter = QAFormatter(tokenizer, template, max_length)
        self.tokenizer, self.splits = tokenizer, eval_splits
        self.max_new_tokens, self.batch_size, self.min_k = max_new_tokens, batch_size, min_k
        self.reference = _load_reference(reference)
        if require_reference and self.reference is None:
            raise UserError("require_reference=True but no reference evaluation of the retrained model was given")
        self._collate = pad_collate(tokenizer.pad_token_id)

    # ----- model passes -------------------------------------------------------------------------------------------
    def _batches(self, pairs: list[tuple[str, str]]):
        for i in range(0, len(pairs), self.batch_size):
            yield self._collate([self.formatter.encode(q, a) for q, a in pairs[i:i + self.batch_size]])

    @torch.no_grad()
    def _answer_stats(self, network: nn.Module, pairs: list[tuple[str, str]], device) -> tuple[Tensor, list[Tensor],
                                                                                                list[Tensor]]:
        """Per pair: mean answer-token NLL, and the answer tokens' log-probs and logits (for the MIA scores)."""
        nlls, token_logps, token_logits = [], [], []
        for batch in self._batches(pairs):
            batch = {k: v.to(device) for k, v in batch.items()}
            logits, labels = logits_and_labels(network, batch)
            logp = torch.log_softmax(logits.float(), -1)
            valid = labels != IGNORE_INDEX
            picked = logp.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
            for i in range(labels.shape[0]):
                lp = picked[i][valid[i]]
                nlls.append(-lp.mean())
                token_logps.append(lp.cpu())
                token_logits.append(logits[i][valid[i]].float().cpu())
        return torch.stack(nlls).cpu().double(), token_logps, token_logits

    def _nll(self, network, pairs, device) -> Tensor:
        return self._answer_stats(network, pairs, device)[0]

    @torch.no_grad()
    def _generate(self, network: nn.Module, questions: list[str], device) -> list[str]:
        tok, out = self.tokenizer, []
        for i in range(0, len(questions), self.batch_size):
            prompts = [self.formatter.prompt_ids(q) for q in questions[i:i + self.batch_size]]
            n = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), n), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, p in enumerate(prompts):  # left padding: generation continues right after each prompt
                ids[j, n - len(p):], mask[j, n - len(p):] = torch.tensor(p), 1
            gen = network.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=self.max_new_tokens,
                                   pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            out += [tok.decode(g, skip_special_tokens=True).strip() for g in gen]
        return out

    # ----- the evaluation -----------------------------------------------------------------------------------------
    def run(self, network: nn.Module, device: torch.device | str | None = None,
            only: list[str] | None = None) -> TofuReport:
        """The full report, or with `only` (target metric names, see TARGET_METRICS) just what they need."""
        device = device or next(network.parameters()).device
        if only is not None:
            unknown = [m for m in only if m not in TARGET_METRICS]
            if unknown:
                raise ValueError(f"unknown TOFU target metrics {unknown}; known: {sorted(TARGET_METRICS)}")
            needs = [TARGET_METRICS[m] for m in only]
            splits = None if any(n[1] is None for n in needs) else {x for n in needs for x in n[1]}
            generate = any(n[2] for n in needs)
            membership = any(n[3] for n in needs) or splits is None
        else:
            splits, generate, membership = None, True, True
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() \
            else (0, 1)
        was_training = network.training
        network.eval()
        summary: dict[str, float | None] = {}
        per_item: dict[str, dict[str, list[float]]] = {}
        notes: list[str] = []
        try:
            for name, rows in self.splits.items():
                if name == "holdout" or (splits is not None and name not in splits):
                    continue
                mine = rows[rank::world]
                per_item[name] = self._score_split(network, name, mine, device, summary, world, generate)
            if membership:
                self._membership(network, device, rank, world, summary, notes)
        finally:
            network.train(was_training)
        self._aggregate(summary, per_item, notes, partial=only is not None)
        return TofuReport(summary, per_item, notes)

    def _score_split(self, network, name, rows, device, summary, world, generate=True) -> dict[str, list[float]]:
        has_perturbed = bool(rows) and "perturbed_answer" in rows[0]
        knowledge = name in KNOWLEDGE
        nll = self._nll(network, [(r["question"], r["answer"]) for r in rows], device)
        out: dict[str, list[float]] = {}
        if has_perturbed:
            k = len(rows[0]["perturbed_answer"])
            if any(len(r["perturbed_answer"]) != k for r in rows):
                raise UserError(f"split {name!r}: every item needs the same number of perturbed answers")
            flat = [(r["question"], a) for r in rows for a in r["perturbed_answer"]]
            nll_pert = self._nll(network, flat, device).reshape(len(rows), k)
            correct_key = "answer" if knowledge or "paraphrased_answer" not in rows[0] else "paraphrased_answer"
            nll_correct = nll if correct_key == "answer" else \
                self._nll(network, [(r["question"], r[correct_key]) for r in rows], device)
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
        if not generate:
            return out
        rouge = RougeLRecall()
        rouge.update(self._generate(network, [r["question"] for r in rows], device), [r["answer"] for r in rows])
        summary[f"{name}/rouge"] = rouge.compute().item()
        out["rouge"] = rouge.per_item().tolist()
        return out

    def _membership(self, network, device, rank, world, summary, notes) -> None:
        holdout = self.splits.get("holdout")
        if not holdout:
            notes.append("membership inference: no holdout split, MIA AUCs not computed")
            return
        metrics = {a: MembershipAUC() for a in MIA_ATTACKS}
        for rows, is_holdout in ((self.splits["forget"][rank::world], False), (holdout[rank::world], True)):
            pairs = [(r["question"], r["answer"]) for r in rows]
            nll, logps, logits = self._answer_stats(network, pairs, device)
            scores = {"loss": nll,
                      "zlib": torch.tensor([tofu_math.zlib_score(n.item(), r["answer"]) for n, r in zip(nll, rows)]),
                      "min_k": torch.tensor([tofu_math.min_k_score(lp, self.min_k) for lp in logps]),
                      "min_k_plus_plus": torch.tensor([tofu_math.min_k_plus_plus_score(lp, lg, self.min_k)
                                                       for lp, lg in zip(logps, logits)])}
            for a, m in metrics.items():
                m.update(scores[a], is_holdout)
        for a, m in metrics.items():
            summary[f"mia/{a}_auc"] = m.compute().item()

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
                summary["forget_quality"] = tofu_math.forget_quality(per_item["forget"]["truth_ratio"],
                                                                     ref["per_item"]["forget"]["truth_ratio"])
            ref_auc = (ref or {}).get("summary", {}).get("mia/min_k_auc")
            if ref_auc is not None and summary.get("mia/min_k_auc") is not None and not math.isclose(ref_auc, 1.0):
                summary["privleak"] = tofu_math.privleak(summary["mia/min_k_auc"], ref_auc)
            return
        if ref is None:
            summary["forget_quality"] = None
            msg = ("forget quality not computed: no reference evaluation of the retain-only (retrained) model; "
                   "evaluate it with `lit-unlearn tofu-eval --save REF.json` and pass reference=REF.json")
            notes.append(msg)
            warnings.warn(msg, stacklevel=3)
        else:
            ref_tr = ref["per_item"]["forget"]["truth_ratio"]
            fq = ForgetQuality(ref_tr)
            fq.values = [torch.tensor(per_item["forget"]["truth_ratio"], dtype=torch.float64)]
            summary["forget_quality"] = fq.compute().item()
            ref_auc = ref["summary"].get("mia/min_k_auc")
            if ref_auc is not None and summary.get("mia/min_k_auc") is not None and not math.isclose(ref_auc, 1.0):
                summary["privleak"] = tofu_math.privleak(summary["mia/min_k_auc"], ref_auc)
        ordered = {k: summary.get(k) for k in HEADLINE}
        ordered.update({k: v for k, v in summary.items() if k not in ordered})
        summary.clear()
        summary.update(ordered)
