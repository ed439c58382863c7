"""The TOFU report's aggregates, from what the passes' units wrote: model utility, forget quality (against the
retain-only model's per-item truth ratios) and privleak (against its Min-K% AUC). No model pass of its own."""

from __future__ import annotations

import math
import warnings

from lit_unlearn.core.errors import UserError
from lit_unlearn.metrics.tofu import formulas as tofu_math
from lit_unlearn.metrics.mia_convention import MIAConvention
from lit_unlearn.metrics.tofu.report import HEADLINE

__all__ = ["aggregate", "check_forget_items", "common_forget_items", "privleak"]


def aggregate(summary: dict, per_item: dict, notes: list[str], reference: dict | None, convention: MIAConvention,
              forget_rows: list[dict], partial: bool = False) -> None:
    """Add model utility, forget quality and privleak to summary (in place); a full report is then ordered with
    the headline first. `partial`: only what the evaluated passes allow, without notes for the rest."""
    summary["forget_truth_ratio"] = summary.get("forget/truth_ratio")
    try:
        summary["model_utility"] = tofu_math.model_utility(summary)
    except KeyError as err:
        summary["model_utility"] = None
        if not partial:
            notes.append(f"model utility not computed: missing {err.args[0]}")
    if partial:
        if reference is not None and "truth_ratio" in per_item.get("forget", {}):
            mine, theirs = common_forget_items(per_item["forget"]["truth_ratio"], reference, forget_rows, notes)
            summary["forget_quality"] = tofu_math.forget_quality(mine, theirs)
        privleak(summary, notes, reference, convention)
        return
    if reference is None:
        summary["forget_quality"] = None
        msg = ("forget quality not computed: no reference evaluation of the retain-only (retrained) model; "
               "evaluate it with `lit-unlearn tofu-eval --save REF.json` and pass reference=REF.json")
        notes.append(msg)
        warnings.warn(msg, stacklevel=3)
    else:
        mine, ref_tr = common_forget_items(per_item["forget"]["truth_ratio"], reference, forget_rows, notes)
        summary["forget_quality"] = tofu_math.forget_quality(mine, ref_tr)  # both lists already gathered
        if reference.get("format", "lit-unlearn") != "lit-unlearn":
            notes.append(f"reference read from {reference['format']} format: {reference.get('source')}")
        ref_convention = reference.get("mia_convention", "lit-unlearn")
        if ref_convention != convention.name:
            notes.append(f"the reference report used the {ref_convention} MIA convention, this one "
                         f"{convention.name}: privleak compares AUCs computed differently")
    privleak(summary, notes, reference, convention)
    ordered = {k: summary.get(k) for k in HEADLINE}
    ordered.update({k: v for k, v in summary.items() if k not in ordered})
    summary.clear()
    summary.update(ordered)


def common_forget_items(mine: list[float], reference: dict, forget_rows: list[dict],
                        notes: list[str]) -> tuple[list[float], list[float]]:
    """This report's and the reference's per-item forget truth ratios on the items both cover: the first ones
    in split order (the TOFU authors' logs cover the first 300 of a split). Where the reference recorded its
    prompts, the common items' questions must be among them."""
    theirs = reference["per_item"]["forget"]["truth_ratio"]
    k = min(len(mine), len(theirs))
    check_forget_items(reference, forget_rows)
    if len(mine) != len(theirs):
        notes.append(f"forget quality on the first {k} forget items, the ones both cover (the reference has "
                     f"{len(theirs)}, this data {len(mine)})")
    return mine[:k], theirs[:k]


def check_forget_items(reference: dict, forget_rows: list[dict]) -> None:
    """Where the reference recorded its prompts, the forget items both cover must be the same questions, in order.
    Checked when an evaluator is made, so a wrong split fails before any scoring, and again when aggregating."""
    prompts = ((reference.get("prompts") or {}).get("forget") or [])[:len(forget_rows)]
    for i, prompt in enumerate(prompts):
        question = forget_rows[i]["question"]
        if prompt and question not in prompt:
            raise UserError(f"the reference's forget item {i} is not this data's ({prompt[:60]!r} vs "
                            f"{question[:60]!r}): evaluate on the same forget split (--level)")


def privleak(summary: dict, notes: list[str], reference: dict | None, convention: MIAConvention) -> None:
    """Min-K% AUC relative to the retain-only model's. Without a reference: omitted (ours), or against the
    convention's fallback AUC (open-unlearning: 0.5), with a note either way."""
    auc = summary.get("mia/min_k_auc")
    if auc is None:
        return
    ref_auc = ((reference or {}).get("summary") or {}).get("mia/min_k_auc")
    if ref_auc is None and convention.privleak_fallback_auc is not None:
        ref_auc = convention.privleak_fallback_auc
        notes.append(f"privleak against a fallback retain AUC of {ref_auc} (no reference report), as "
                     "open-unlearning reports it")
    if ref_auc is None or (convention.privleak_eps == 0 and math.isclose(ref_auc, 1.0)):
        return
    summary["privleak"] = tofu_math.privleak(auc, ref_auc, convention.privleak_eps)
