"""Reference reports in the formats users already have, detected from the file (no flag), read into the shape of a
lit-unlearn report ({"summary", "per_item", "notes"}); and lit-unlearn reports written in open-unlearning's layout.

Read:
- a lit-unlearn report (`tofu-eval --save`, a world's retain-only report): as it is;
- the TOFU authors' per-item logs: a folder with `eval_log_forget.json` (forget), `eval_log.json` (retain),
  `eval_real_author_wo_options.json`, `eval_real_world_wo_options.json`, each a dict of metric → {"0": value, ...};
  the forget truth ratios are exp(avg_paraphrased_loss − mean(average_perturb_loss)) per item, model utility their
  aggregation (`tofu_logs_summary`);
- open-unlearning's `TOFU_EVAL.json`: metric → {"agg_value", "value_by_index": {"0": {...}}}; the forget truth
  ratios are `forget_truth_ratio.value_by_index[i].score`.
Items are in the split's order in every format; a reference covering fewer items (the TOFU authors' logs: the first
300 of each split) is compared on the common ones, and the report says so.

Write: `open_unlearning_logs(report)` gives TOFU_EVAL.json (per metric: agg_value and value_by_index) and
TOFU_SUMMARY.json (per metric: agg_value) under open-unlearning's metric names, so its tools read our results.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["detect_format", "read_reference", "tofu_logs_summary", "open_unlearning_logs", "OPEN_UNLEARNING_NAMES",
           "FORMATS"]

FORMATS = ("lit-unlearn", "tofu-logs", "open-unlearning")
TOFU_LOG_FILES = {"forget": "eval_log_forget.json", "retain": "eval_log.json",
                  "real_authors": "eval_real_author_wo_options.json", "world_facts": "eval_real_world_wo_options.json"}
# our summary key -> (open-unlearning metric name, the per-item key its value_by_index uses, our per-item key)
OPEN_UNLEARNING_NAMES = {
    "forget_quality": ("forget_quality", None, None),
    "forget_truth_ratio": ("forget_truth_ratio", "score", ("forget", "truth_ratio")),
    "forget/prob": ("forget_Q_A_Prob", "prob", ("forget", "prob")),
    "forget/rouge": ("forget_Q_A_ROUGE", "rougeL_recall", ("forget", "rouge")),
    "retain/prob": ("retain_Q_A_Prob", "prob", ("retain", "prob")),
    "retain/rouge": ("retain_Q_A_ROUGE", "rougeL_recall", ("retain", "rouge")),
    "retain/truth_ratio": ("retain_Truth_Ratio", "score", ("retain", "truth_ratio")),
    "real_authors/prob": ("ra_Q_A_Prob_normalised", "prob", ("real_authors", "prob")),
    "real_authors/rouge": ("ra_Q_A_ROUGE", "rougeL_recall", ("real_authors", "rouge")),
    "real_authors/truth_ratio": ("ra_Truth_Ratio", "score", ("real_authors", "truth_ratio")),
    "world_facts/prob": ("wf_Q_A_Prob_normalised", "prob", ("world_facts", "prob")),
    "world_facts/rouge": ("wf_Q_A_ROUGE", "rougeL_recall", ("world_facts", "rouge")),
    "world_facts/truth_ratio": ("wf_Truth_Ratio", "score", ("world_facts", "truth_ratio")),
    "model_utility": ("model_utility", None, None),
    "forget/es": ("extraction_strength", "score", ("forget", "es")),
    "forget/em": ("exact_memorization", "score", ("forget", "em")),
    "privleak": ("privleak", None, None),
    "mia/loss_auc": ("mia_loss", None, None),
    "mia/zlib_auc": ("mia_zlib", None, None),
    "mia/min_k_auc": ("mia_min_k", None, None),
    "mia/min_k_plus_plus_auc": ("mia_min_k_plus_plus", None, None),
    "mia/gradnorm_auc": ("mia_gradnorm", None, None),
}


def detect_format(path: str | Path) -> str:
    """Which format a reference is in, from what the file (or folder) holds."""
    from lit_unlearn.core.errors import UserError

    path = Path(path)
    if path.is_dir():
        if (path / TOFU_LOG_FILES["forget"]).is_file():
            return "tofu-logs"
        if (path / "TOFU_EVAL.json").is_file():
            return "open-unlearning"
        raise UserError(f"reference folder {path} holds neither the TOFU authors' logs ({TOFU_LOG_FILES['forget']}, "
                        "...) nor open-unlearning's TOFU_EVAL.json")
    data = _json(path)
    if isinstance(data, dict) and isinstance(data.get("forget_truth_ratio"), dict) and \
            "value_by_index" in data["forget_truth_ratio"]:
        return "open-unlearning"
    if isinstance(data, dict) and "avg_paraphrased_loss" in data and "average_perturb_loss" in data:
        return "tofu-logs"  # one log file given: its folder holds the others
    return "lit-unlearn"


def _json(path: Path) -> Any:
    from lit_unlearn.core.errors import UserError

    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"reference {path} is not JSON (line {err.lineno}: {err.msg})") from None


def _by_index(values: dict) -> list:
    """A {"0": v, "1": v, ...} mapping as a list in index order."""
    return [values[k] for k in sorted(values, key=int)]


def _truth_ratios(log: dict) -> list[float]:
    para = _by_index(log["avg_paraphrased_loss"])
    pert = _by_index(log["average_perturb_loss"])
    return [math.exp(p - sum(q) / len(q)) for p, q in zip(para, pert)]


def tofu_logs_summary(folder: str | Path) -> dict[str, float]:
    """The TOFU authors' aggregation of their logs: per split probability (normalised against the perturbed answers
    for real authors and world facts), ROUGE-L recall, truth ratio (forget: mean min(TR, 1/TR); others: mean
    max(0, 1 − TR)), and model utility, the harmonic mean of the nine retain / real-authors / world-facts numbers."""
    from scipy.stats import hmean

    folder = Path(folder)
    out: dict[str, float] = {}
    for split, name in TOFU_LOG_FILES.items():
        path = folder / name
        if not path.is_file():
            continue
        log = _json(path)
        gt = [math.exp(-v) for v in _by_index(log["avg_gt_loss"])]
        if split in ("real_authors", "world_facts"):
            pert = [sum(math.exp(-q) for q in v) for v in _by_index(log["average_perturb_loss"])]
            prob = [g / (g + p) for g, p in zip(gt, pert)]
        else:
            prob = gt
        tr = _truth_ratios(log)  # for real authors and world facts their "paraphrased" loss is the answer's own
        out[f"{split}/prob"] = sum(prob) / len(prob)
        out[f"{split}/rouge"] = sum(_by_index(log["rougeL_recall"])) / len(gt)
        if split == "forget":
            out[f"{split}/truth_ratio"] = sum(min(t, 1 / t) for t in tr) / len(tr)
        else:
            out[f"{split}/truth_ratio"] = sum(max(0.0, 1 - t) for t in tr) / len(tr)
    nine = [out.get(f"{s}/{m}") for s in ("retain", "real_authors", "world_facts") for m in ("prob", "rouge",
                                                                                          "truth_ratio")]
    if all(v is not None for v in nine):
        out["model_utility"] = float(hmean(nine))
    if "forget/truth_ratio" in out:
        out["forget_truth_ratio"] = out["forget/truth_ratio"]
    return out


def read_reference(path: str | Path) -> dict:
    """A reference in any of FORMATS, as a lit-unlearn report dict (with "format" and "n_items")."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "lit-unlearn":
        data = _json(path)
        data.setdefault("format", fmt)
        return data
    if fmt == "tofu-logs":
        folder = path if path.is_dir() else path.parent
        forget = _json(folder / TOFU_LOG_FILES["forget"])
        tr = _truth_ratios(forget)
        questions = [g[0] for g in _by_index(forget["generated_text"])] if "generated_text" in forget else None
        return {"format": fmt, "source": str(folder), "summary": tofu_logs_summary(folder),
                "per_item": {"forget": {"truth_ratio": tr}}, "prompts": {"forget": questions},
                "n_items": {"forget": len(tr)}, "notes": [f"reference: the TOFU authors' logs in {folder}"]}
    folder_file = path / "TOFU_EVAL.json" if path.is_dir() else path
    data = _json(folder_file)
    tr = [v["score"] for v in _by_index(data["forget_truth_ratio"]["value_by_index"])]
    summary = {ours: data[name]["agg_value"] for ours, (name, _, _) in OPEN_UNLEARNING_NAMES.items()
               if isinstance(data.get(name), dict) and "agg_value" in data[name]}
    return {"format": fmt, "source": str(folder_file), "summary": summary, "per_item": {"forget": {"truth_ratio": tr}},
            "n_items": {"forget": len(tr)}, "notes": [f"reference: open-unlearning's {folder_file}"]}


def open_unlearning_logs(report) -> tuple[dict, dict]:
    """(TOFU_EVAL.json, TOFU_SUMMARY.json) of a TofuReport in open-unlearning's layout and metric names."""
    logs: dict[str, dict] = {}
    for ours, (name, item_key, per_item) in OPEN_UNLEARNING_NAMES.items():
        value = report.summary.get(ours)
        if value is None:
            continue
        entry: dict[str, Any] = {"agg_value": value}
        values = (report.per_item.get(per_item[0]) or {}).get(per_item[1]) if per_item else None
        if values:
            entry["value_by_index"] = {str(i): {item_key: v} for i, v in enumerate(values)}
        logs[name] = entry
    logs = dict(sorted(logs.items()))
    return logs, {name: entry["agg_value"] for name, entry in logs.items()}
