"""The audit of one unlearned model, beside the target (the upper bound) and a retain-only model where one exists
(the gold standard: a model that never saw the forget data).

Each subject gets the full reference-free verdict on the reporting half of the forget and holdout items
(lit_unlearn.verification.full_verdict): before any attack, after relearning on some forget authors (the others
measured, never trained on) at every learning rate and step count, and at 4 bits, every attack with its own
calibrated margin; the verdict names the attack that recovers the forget set. The forget items asked with TOFU's
paraphrased questions are the verdict's fourth part where its margins are calibrated, and elsewhere a probe beside
it that the verdict does not count. The model is "robust" when its full verdict
passes: the margins are already calibrated on never-trained models under each attack, so no other bound applies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from lit_unlearn.audit.spec import AuditSpec
from lit_unlearn.core.console import say

__all__ = ["run_audit", "AuditReport"]


@dataclass
class AuditReport:
    spec: dict
    level: str | None
    subjects: dict[str, str]                 # name -> where the model came from
    results: dict[str, dict]                 # subject -> {"verdict": FullVerdict.as_dict(), "paraphrase": ...}
    robust: bool | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"spec": self.spec, "level": self.level, "subjects": self.subjects, "results": self.results,
                "robust": self.robust, "notes": self.notes}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1, default=float))
        return path

    def scalars(self) -> dict[str, float]:
        out = {}
        for subject, r in self.results.items():
            key = subject.split(" ")[0].replace("-", "_")
            v = r["verdict"]
            out[f"audit/{key}/band_ratio"] = v["band_ratio"]
            for part, w in v["parts"].items():
                if w is not None:
                    out[f"audit/{key}/{part}/band_ratio"] = w["band_ratio"]
            if r.get("paraphrase") is not None:
                out[f"audit/{key}/paraphrase/band_ratio"] = r["paraphrase"]["band_ratio"]
        out["audit/robust"] = float(bool(self.robust))
        return out

    def table(self) -> str:
        subjects = list(self.results)
        head = ["condition", *[f"{s}: band ratio" for s in subjects], "unlearned: worst"]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        conditions = list(self.results["unlearned"]["verdict"]["conditions"])
        for c in conditions:
            cells = [c]
            for s in subjects:
                v = self.results[s]["verdict"]["conditions"].get(c)
                cells.append("n/a" if v is None else f"{v['band_ratio']:.3f}")
            cells.append(self.results["unlearned"]["verdict"]["conditions"][c]["worst"])
            rows.append("| " + " | ".join(cells) + " |")
        if all(self.results[s].get("paraphrase") for s in subjects):
            rows.append("| paraphrased questions (a probe; not in the verdict) | " + " | ".join(
                f"{self.results[s]['paraphrase']['band_ratio']:.3f}" for s in subjects) + " | " +
                self.results["unlearned"]["paraphrase"]["worst"] + " |")
        u = self.results["unlearned"]["verdict"]
        word = "ROBUST" if self.robust else ("UNDECIDED" if u.get("decision") == "undecided" else "NOT ROBUST")
        lines = [f"## Audit: {word}", "", u["headline"], "",
                 f"The full verdict on the reporting half, every attack ({', '.join(u['attacks'])}; scores "
                 f"{u['mode']}{' to the base model' if u['mode'] == 'relative' else ''}) with its margin ({u['margins']})"
                 " for the condition. Band ratio ≤ 1: the forget items cannot be told from holdout items.", "", *rows,
                 ""]
        for s in subjects:
            v = self.results[s]["verdict"]
            unread = v.get("unread_band_ratio")
            lines.append(f"- {s}: {v['headline']}" + ("" if unread is None or s != "unlearned" else
                                                       f"; attacks its objective does not read: {unread:.3f}"))
        lines += [f"- unlearned, {line}" for line in u.get("power_statement") or []]
        lines += [f"- {n}" for n in dict.fromkeys(self.notes)]
        return "\n".join(lines)


def run_audit(subjects: dict, tokenizer, source, spec: AuditSpec, out: str | Path, device=None,
              template: str = "plain", reference_model=None, reads=frozenset(), log=say) -> AuditReport:
    """Audit `subjects` ({"unlearned": network, "target": network, "retain-only": network}; the first is the one
    judged; `reads`: the statistics its objective reads) on `source`'s forget and holdout splits; `reference_model`:
    the model the target was fine-tuned from (scores relative to it; None: raw). The report is also written to `out`
    (audit.{md,json} and TensorBoard audit/*)."""
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.reporting.tensorboard import write_scalars
    from lit_unlearn.verification.verdict_runner import VerdictRunner

    out = Path(out)
    splits = source.eval_splits()
    if not splits.get("holdout"):
        raise UserError("the audit measures forget against holdout items: the data has no holdout split")
    level = getattr(source, "forget_level", None)
    runner = VerdictRunner(tokenizer, splits["forget"], splits["holdout"], level, spec.verdict_spec(),
                           mode="best" if reference_model is not None else "raw", base=reference_model,
                           margins=spec.margins(), attacks=spec.attacks, split_seed=spec.split_seed,
                           template=template, device=device)
    items = runner.items["reporting"]
    paraphrased = None
    if spec.paraphrase and not runner.spec.paraphrase:  # where the verdict has the part, it is counted there
        from lit_unlearn.verification.full_verdict import asked_otherwise

        paraphrased = asked_otherwise(items.forget)
    results: dict[str, dict] = {}
    for name, network in subjects.items():
        if network is None:
            continue
        log(f"== audit: {name} ==")
        if device is not None:
            network = network.to(device)
        network = network.eval()
        mine = reads if name == "unlearned" else frozenset()
        verdict = runner.verdict(network, "reporting", reads=mine, log=log)
        results[name] = {"verdict": verdict.as_dict()}
        if paraphrased is not None:
            probe = runner.probe_verdict(network, "reporting", paraphrased, mine)
            results[name]["paraphrase"] = {"band_ratio": probe.band_ratio, "passed": probe.passed,
                                           "worst": probe.as_dict()["worst"]}
    report = AuditReport(spec.as_dict(), level,
                         {name: getattr(net, "source_path", "given") for name, net in subjects.items()
                          if net is not None}, results)
    report.robust = bool(results["unlearned"]["verdict"]["passed"])
    if paraphrased is not None:
        report.notes.append("paraphrase: forget answers scored under paraphrased questions against holdout answers "
                            "under their original ones (TOFU has no paraphrased holdout questions); the retain-only "
                            "model's band ratio shows what that shift alone gives")
    report.save(out / "audit.json")
    table = report.table()
    (out / "audit.md").write_text(table + "\n")
    write_scalars(out / "tensorboard", report.scalars(), text={"audit/table": table})
    return report
