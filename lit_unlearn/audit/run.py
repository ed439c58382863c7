"""The audit of one unlearned model, beside the target (the upper bound) and a retain-only model where one exists
(the gold standard: a model that never saw the forget data also "relearns" a little from K steps).

The forget authors are split once: the first `relearn_share` of them (in split order) are the relearning part,
the others the measured part, which no attack ever trains on. Every condition is measured on the measured part
against every holdout item with the reference-free verification (each membership attack's AUC with its
author bootstrap interval, pooled and per author), plus ROUGE-L recall of greedy answers and the truth
ratio on the measured part:
- none: the model as it is;
- relearn: fine-tuned for `relearn_steps` steps on the relearning part (AdamW, through the launch path);
- int8 / int4: round-to-nearest weight quantisation, group-wise (lit_unlearn.algorithms.quantize);
- paraphrase: the measured part's questions replaced by TOFU's `paraphrased_question`.
Robust: in every condition, the unlearned model's band ratio (how far the attacks' intervals reach from 0.5 over
the calibrated margins, pooled and per forget author; lit_unlearn.verification.holdout_equivalence.HoldoutVerdict)
stays within 1, or within the retain-only model's band ratio under the same condition where that model is given
(whichever is larger).
"""

from __future__ import annotations

import functools

import copy
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_unlearn.audit.spec import AuditSpec
from lit_unlearn.console import fmt, say

__all__ = ["run_audit", "AuditReport", "CONDITIONS"]

_fmt = functools.partial(fmt, spec=".3f")  # this table's number format

CONDITIONS = ("none", "relearn", "int8", "int4", "paraphrase")


@dataclass
class AuditReport:
    spec: dict
    level: str | None
    delta: tuple[float, float]               # (pooled, per author)
    split: dict                              # {"relearn": authors, "measured": authors, items per part}
    subjects: dict[str, str]                 # name -> where the model came from
    results: dict[str, dict[str, dict]]      # subject -> condition -> measures
    robust: bool | None = None
    notes: list[str] = field(default_factory=list)

    def bound(self, condition: str) -> float:
        """The band ratio the unlearned model must stay within under `condition`."""
        gold = self.results.get("retain-only", {}).get(condition)
        return max(1.0, gold["band_ratio"]) if gold else 1.0

    def as_dict(self) -> dict:
        return {"spec": self.spec, "level": self.level, "delta": self.delta, "split": self.split,
                "subjects": self.subjects, "results": self.results, "robust": self.robust, "notes": self.notes,
                "bounds": {c: self.bound(c) for c in self.results.get("unlearned", {})}}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1, default=float))
        return path

    def scalars(self) -> dict[str, float]:
        out = {}
        for subject, conditions in self.results.items():
            key = subject.split(" ")[0].replace("-", "_")
            for condition, m in conditions.items():
                for name in ("band_ratio", "rouge", "truth_ratio", "forget_nll"):
                    if m.get(name) is not None:
                        out[f"audit/{key}/{condition}/{name}"] = m[name]
        out["audit/robust"] = float(bool(self.robust))
        return out

    def table(self) -> str:
        subjects = list(self.results)
        head = ["condition", *[f"{s}: band ratio" for s in subjects], "bound", "unlearned", "worst",
                *[f"{s}: ROUGE" for s in subjects], *[f"{s}: truth ratio" for s in subjects]]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for condition in self.results["unlearned"]:
            u = self.results["unlearned"][condition]
            cells = [condition, *[_fmt(self.results[s].get(condition, {}).get("band_ratio")) for s in subjects],
                     _fmt(self.bound(condition)), "robust" if u["passed"] else "RECOVERED", u["worst"],
                     *[_fmt(self.results[s].get(condition, {}).get("rouge")) for s in subjects],
                     *[_fmt(self.results[s].get(condition, {}).get("truth_ratio")) for s in subjects]]
            rows.append("| " + " | ".join(cells) + " |")
        s = self.spec
        verdict = "ROBUST" if self.robust else "NOT ROBUST"
        lines = [f"## Audit: {verdict}", "",
                 f"Measured on forget authors {self.split['measured']} ({self.split['measured_items']} items) "
                 f"against every holdout item ({self.split['holdout_items']}); relearning trains on forget authors "
                 f"{self.split['relearn']} ({self.split['relearn_items']} items) only. Band ratio: how far every "
                 f"membership attack's {1 - 2 * s['alpha']:.0%} interval reaches from AUC 0.5, over δ = "
                 f"{self.delta[0]:.2f} (all measured items) and δ_author = {self.delta[1]:.2f} (each author); bound = "
                 "max(1, the retain-only model's band ratio under the same condition, where given).", "", *rows, "",
                 f"- relearn: {s['relearn_steps']} AdamW steps, lr {s['relearn_lr']:g}, batch "
                 f"{s['relearn_batch_size']}; quantisation: round-to-nearest, groups of {s['quant_group_size']}, "
                 f"{' and '.join(f'{b}-bit' for b in s['quant_bits'])}; paraphrase: TOFU's paraphrased_question",
                 *[f"- {n}" for n in self.notes]]
        return "\n".join(lines)




def _measure(network, tokenizer, rows, holdout, groups, holdout_groups, spec: AuditSpec,
             delta: tuple[float, float], device, template: str) -> dict[str, Any]:
    """One condition's measures on the measured part (rows) against the holdout items."""
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.verification.holdout_equivalence import holdout_verdict

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no reference: forget quality is not what the audit asks
        report = TofuEvaluator(tokenizer, {"forget": rows, "holdout": holdout}, template=template,
                               max_new_tokens=spec.max_new_tokens, gradnorm="gradnorm" in spec.attacks).run(
            network, device)
    mia = report.per_item["mia"]
    attacks = [a for a in spec.attacks if f"forget_{a}" in mia]
    verdict = holdout_verdict({a: mia[f"forget_{a}"] for a in attacks}, {a: mia[f"holdout_{a}"] for a in attacks},
                              groups, holdout_groups, delta[0], delta[1], spec.alpha, spec.n_boot, seed=spec.seed)
    nll = mia["forget_loss"]
    return {"band_ratio": verdict.band_ratio, "passed": verdict.passed, "worst": verdict.as_dict()["worst"],
            "auc": {a: iv.auc for a, iv in verdict.pooled.intervals.items()},
            "interval": {a: [iv.low, iv.high] for a, iv in verdict.pooled.intervals.items()},
            "rouge": report.summary.get("forget/rouge"), "truth_ratio": report.summary.get("forget/truth_ratio"),
            "forget_nll": sum(nll) / len(nll)}


def _relearned(network, tokenizer, source, rows, spec: AuditSpec, root: Path, label: str):
    """A copy of `network` fine-tuned on `rows` for spec.relearn_steps steps, through the launch path (a run
    folder of its own: an interrupted audit resumes it)."""
    from lit_unlearn.data import QAFinetuneDataModule
    from lit_unlearn.launch.runs import RunSpec, launch
    from lit_unlearn.modules import SupervisedModule

    model = SupervisedModule(copy.deepcopy(network).cpu(), lr=spec.relearn_lr)
    data = QAFinetuneDataModule(source, tokenizer, splits=(), extra_rows=[{"question": r["question"],
                                                                            "answer": r["answer"]} for r in rows],
                                batch_size=spec.relearn_batch_size, seed=spec.seed)
    identity = {"audit_relearn": label, "spec": spec.as_dict(), "rows": [r["question"] for r in rows]}
    launched = launch(RunSpec(root / "relearn" / label, model, data, seed=spec.seed, identity=identity,
                              trainer={"max_steps": spec.relearn_steps, "max_epochs": -1, "limit_val_batches": 0}))
    return launched.model.network.eval()


def run_audit(subjects: dict[str, Any], tokenizer, source, spec: AuditSpec, out: str | Path, device=None,
              template: str = "plain", log=say) -> AuditReport:
    """Audit `subjects` ({"unlearned": network, "target": network, "retain-only": network}; the first is the one
    judged) on `source`'s forget and holdout splits; the report is also written to `out` (audit.{md,json} and
    TensorBoard audit/*)."""
    import torch

    from lit_unlearn.algorithms.quantize import quantize_model
    from lit_unlearn.errors import UserError
    from lit_unlearn.tensorboard import write_scalars
    from lit_unlearn.verification.steering_halves import author_groups

    out = Path(out)
    splits = source.eval_splits()
    if not splits.get("holdout"):
        raise UserError("the audit measures forget against holdout items: the data has no holdout split")
    forget, holdout = splits["forget"], splits["holdout"]
    groups, holdout_groups = author_groups(forget, "forget"), author_groups(holdout, "holdout")
    authors = list(dict.fromkeys(groups))
    if len(authors) < 2:
        raise UserError("relearning needs at least 2 forget authors (one to relearn, one to measure)")
    n_relearn = min(len(authors) - 1, max(1, math.floor(spec.relearn_share * len(authors))))
    relearn_authors = set(authors[:n_relearn])
    part = {"relearn": [i for i, g in enumerate(groups) if g in relearn_authors],
            "measured": [i for i, g in enumerate(groups) if g not in relearn_authors]}
    measured = [forget[i] for i in part["measured"]]
    measured_groups = [groups[i] for i in part["measured"]]
    level = getattr(source, "forget_level", None)
    if spec.delta is None or spec.delta_author is None:
        from lit_unlearn.verification.holdout_calibration import calibrated_delta

        calibrated = calibrated_delta(level)
    delta = (spec.delta if spec.delta is not None else calibrated[0],
             spec.delta_author if spec.delta_author is not None else calibrated[1])
    paraphrased = None
    if spec.paraphrase:
        if not all(r.get("paraphrased_question") for r in measured):
            raise UserError("paraphrase probe: the forget split has no `paraphrased_question` (TOFU's "
                            "forget*_perturbed splits have it); set paraphrase: false")
        paraphrased = [{**r, "question": r["paraphrased_question"]} for r in measured]
    device = device or "cpu"
    results: dict[str, dict[str, dict]] = {}
    for name, network in subjects.items():
        if network is None:
            continue
        log(f"== audit: {name} ==")
        network = network.to(device).eval()
        measure = lambda net, rows=measured: _measure(net, tokenizer, rows, holdout, measured_groups,  # noqa: E731
                                                      holdout_groups, spec, delta, device, template)
        res = {"none": measure(network)}
        res["relearn"] = measure(_relearned(network, tokenizer, source, [forget[i] for i in part["relearn"]], spec,
                                            out, name.split(" ")[0]).to(device))
        for bits in spec.quant_bits:
            quantized = copy.deepcopy(network)
            with torch.no_grad():
                quantize_model(quantized, bits, spec.quant_group_size)
            res[f"int{bits}"] = measure(quantized)
        if paraphrased is not None:
            res["paraphrase"] = measure(network, paraphrased)
        results[name] = res
    report = AuditReport(spec.as_dict(), level, delta,
                         {"relearn": sorted(relearn_authors), "measured": list(dict.fromkeys(measured_groups)),
                          "relearn_items": len(part["relearn"]), "measured_items": len(part["measured"]),
                          "holdout_items": len(holdout)},
                         {name: getattr(net, "source_path", "given") for name, net in subjects.items() if net is not None},
                         results)
    for condition, m in report.results["unlearned"].items():
        m["passed"] = m["band_ratio"] <= report.bound(condition)
    report.robust = all(m["passed"] for m in report.results["unlearned"].values())
    if len(set(measured_groups)) < 4:
        report.notes.append(f"{len(set(measured_groups))} measured forget author(s): the intervals resample items "
                            "within authors only (optimistic); the bound's δ is calibrated for the verification's "
                            "halves, not this split")
    if paraphrased is not None:
        report.notes.append("paraphrase: forget answers scored under paraphrased questions against holdout answers "
                            "under their original ones (TOFU has no paraphrased holdout questions); the retain-only "
                            "model's band ratio shows what that shift alone gives")
    report.save(out / "audit.json")
    table = report.table()
    (out / "audit.md").write_text(table + "\n")
    write_scalars(out / "tensorboard", report.scalars(), text={"audit/table": table})
    return report
