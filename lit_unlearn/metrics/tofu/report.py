"""The TOFU report: the summary, per-item values, notes and how they were obtained; its table and JSON; and the
reports an evaluation reads back (the retain-only model's reference, the model's own before unlearning)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from lit_unlearn.core.console import fmt
from lit_unlearn.core.errors import MissingFileError

__all__ = ["TofuReport", "HEADLINE", "summary_of", "load_reference"]

HEADLINE = ("forget_quality", "model_utility", "forget_truth_ratio", "forget/rouge", "retain/rouge")


@dataclass
class TofuReport:
    summary: dict[str, float | None]
    per_item: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mia_convention: str = "lit-unlearn"
    verification: dict | None = None  # against the retain-only model (lit_unlearn.metrics.tofu.verification)
    truncated: dict[str, list[int]] = field(default_factory=dict)  # split -> [sequences cut, sequences]
    max_length: int | None = None
    generation: dict | None = None  # {"max_new_tokens": n, "coverage": {split: share of answers ≤ n tokens}}
    evaluated_by: str | None = None  # a digest of the evaluation code (cached reports are redone when it changes)
    truncation_kept: str = "first"  # which tokens of a cut sequence were kept: "first" (TOFU) or "last" (MUSE)

    def value(self, key: str) -> float | None:
        """A summary metric, or `verification/NAME` from the verification measures."""
        if key.startswith("verification/"):
            return (self.verification or {}).get(key.split("/", 1)[1])
        return self.summary.get(key)

    def table(self) -> str:
        rows = ["| metric | value |", "|---|---|"]
        for key, value in self.summary.items():
            rows.append(f"| {key} | {fmt(value)} |")
        if self.verification:
            rows += ["", "Gold standard: against the retain-only model (a model a 7B user rarely has; reported, "
                     "never decided on):", "",
                     "| measure | this model | retain-only model | gap |", "|---|---|---|---|"]
            v = self.verification
            for label, key in (("forget quality", "forget_quality"), ("privleak", "privleak")):
                if key in v:
                    rows.append(f"| {label} | {fmt(v[key])} | {'1' if key == 'forget_quality' else '0'} | - |")
            if "forget_vs_retain_only_auc" in v:
                rows.append(f"| forget-vs-retain-only AUC (per-item NLL; raw {fmt(v['forget_vs_retain_only_auc_raw'])})"
                            f" | {fmt(v['forget_vs_retain_only_auc'])} | 0.5 | - |")
            if "model_utility" in v:
                rows.append(f"| model utility | {fmt(v['model_utility'])} | {fmt(v.get('model_utility_retain_only'))} "
                            f"| {fmt(v.get('gap/model_utility'))} |")
            if "model_utility_ratio" in v:
                rows.append(f"| model utility / the target's | {fmt(v['model_utility_ratio'])} | "
                            f"{fmt(v.get('model_utility_ratio_retain_only'))} | - |")
            for key in ("forget_truth_ratio", "forget/prob", "forget/nll", "forget/rouge", "forget/es"):
                if f"gap/{key}" in v:
                    rows.append(f"| {key} | {fmt(self.summary.get(key))} | "
                                f"{fmt(self.summary.get(key) - v[f'gap/{key}'])} | {fmt(v[f'gap/{key}'])} |")
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
        lost = ("the answers' tails were not scored" if self.truncation_kept == "first" else
                "the last max_length tokens were kept: the prompts' and texts' beginnings were dropped")
        return (f"TRUNCATED at max_length={self.max_length}: " +
                ", ".join(f"{k} {c} of {n} sequences" for k, (c, n) in cut.items()) + f" (raise max_length; {lost})")

    def save(self, path: str | Path) -> Path:
        from lit_unlearn.storage.files import atomic_write_text

        path = Path(path)
        atomic_write_text(path, json.dumps({
            "summary": self.summary, "mia_convention": self.mia_convention, "verification": self.verification,
            "max_length": self.max_length, "truncated": self.truncated, "generation": self.generation,
            "evaluated_by": self.evaluated_by, "truncation_kept": self.truncation_kept, "per_item": self.per_item,
            "notes": self.notes}, indent=1))
        return path


def summary_of(report: str | Path | dict | None) -> dict | None:
    """A report's summary: from a saved report file, a report dict, or a summary dict itself."""
    if report is None:
        return None
    if not isinstance(report, dict):
        path = Path(report)
        if not path.is_file():
            raise MissingFileError(f"baseline report {path} not found (a report saved by `lit-unlearn tofu-eval --save`)")
        report = json.loads(path.read_text())
    return report.get("summary", report)


def load_reference(reference: str | Path | dict | None) -> dict | None:
    """A reference in any format lit_unlearn.metrics.reference_formats reads (detected from the file)."""
    from lit_unlearn.metrics.reference_formats import read_reference
    from lit_unlearn.metrics.report_io import load_report

    if reference is not None and not isinstance(reference, dict) and Path(reference).exists():
        reference = read_reference(reference)
    return load_report(reference, "reference evaluation", "evaluate the retain-only (retrained) model first and "
                       "save its report (`lit-unlearn tofu-eval ... --save`)",
                       lambda d: bool(((d.get("per_item") or {}).get("forget") or {}).get("truth_ratio")),
                       "per-item forget truth ratios (per_item.forget.truth_ratio)")
