"""Verified forgetting for TOFU, as for the vision side: how far a model is from the retain-only model.

`tofu_verification(summary, per_item, reference, baseline)` gives, when the retain-only model's report is known:
- forget quality and privleak (already relative to the retain-only model);
- the forget-vs-retain-only AUC: the ROC AUC of telling this model's per-item forget losses (mean answer NLL)
  from the retain-only model's, folded (max(raw, 1 − raw); 0.5 = indistinguishable) and raw (> 0.5: this model's
  forget losses are higher, over-forgetting; < 0.5: lower, still remembered) — the measure the vision side calls
  forget_vs_retrain_auc;
- model utility, the retain-only model's, and its ratio to the target's (`baseline`: the report of the model
  before unlearning), the utility a forget target keeps;
- gaps: this model's value minus the retain-only model's, for utility and the forget-side metrics.
Anything that cannot be computed from what was evaluated is left out, never guessed.
"""

from __future__ import annotations

import math
from typing import Any

from lit_unlearn.metrics.membership import distinguishability_auc

__all__ = ["tofu_verification", "GAP_METRICS", "mean_forget_nll"]

GAP_METRICS = ("model_utility", "forget_truth_ratio", "forget/prob", "forget/nll", "forget/rouge", "forget/es",
               "privleak", "mia/loss_auc", "mia/min_k_auc")


def _forget_nll(per_item: dict) -> list[float] | None:
    probs = (per_item.get("forget") or {}).get("prob")
    return None if not probs else [-math.log(max(p, 1e-300)) for p in probs]


def mean_forget_nll(report: dict | None) -> float | None:
    """A saved report's mean per-item answer NLL on the forget split: for the retain-only model's report, the
    forget loss a model that never saw the data has (HAMU's controller goal, OFMU's inner ceiling)."""
    nll = _forget_nll((report or {}).get("per_item") or {})
    return None if nll is None else sum(nll) / len(nll)


def tofu_verification(summary: dict, per_item: dict, reference: dict | None,
                      baseline: dict | None = None) -> dict[str, Any] | None:
    """The verification measures (see the module docstring); None without a reference report."""
    if reference is None:
        return None
    ref_summary = reference.get("summary") or {}
    out: dict[str, Any] = {}
    for key in ("forget_quality", "privleak"):
        if summary.get(key) is not None:
            out[key] = summary[key]
    mine, theirs = _forget_nll(per_item), _forget_nll(reference.get("per_item") or {})
    if mine and theirs:
        out["forget_vs_retain_only_auc"], out["forget_vs_retain_only_auc_raw"] = distinguishability_auc(mine, theirs)
    mu = summary.get("model_utility")
    if mu is not None:
        out["model_utility"] = mu
        if ref_summary.get("model_utility") is not None:
            out["model_utility_retain_only"] = ref_summary["model_utility"]
        start = (baseline or {}).get("model_utility")
        if start:
            out["model_utility_ratio"] = mu / start
            if ref_summary.get("model_utility") is not None:
                out["model_utility_ratio_retain_only"] = ref_summary["model_utility"] / start
    for key in GAP_METRICS:
        value, ref_value = summary.get(key), (0.0 if key == "privleak" else ref_summary.get(key))
        if value is not None and ref_value is not None:
            out[f"gap/{key}"] = value - ref_value
    return out
