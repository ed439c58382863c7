"""MUSE's metric definitions as pure functions (Shi et al. 2024; github.com/swj0419/muse_bench, metrics/)."""

from __future__ import annotations

from collections.abc import Sequence

from lit_unlearn.metrics.tofu.formulas import rouge_l_scorer

__all__ = ["rouge_l_f1", "cut_at_stop", "muse_privleak", "KNOWMEM_STOPS"]

KNOWMEM_STOPS = ("\n\n", "\nQuestion", "Question:")


def rouge_l_f1(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-L F1 (rouge-score, no stemming), per item, as MUSE's RougeEvalLogger."""
    scorer = rouge_l_scorer(False)
    return [scorer.score(ref, pred)["rougeL"].fmeasure for pred, ref in zip(predictions, references)]


def cut_at_stop(text: str, stops: Sequence[str] = KNOWMEM_STOPS) -> str:
    """The answer before the model starts the next few-shot turn (MUSE cuts at each stop string in turn)."""
    for stop in stops:
        text = text.split(stop)[0]
    return text


def muse_privleak(auc: float, auc_retrain: float) -> float:
    """(AUC − AUC_retrain) / AUC_retrain · 100, with MUSE's AUC (forget = non-member 0, holdout = member 1,
    score = −Min-K%): a model that memorised the forget set scores AUC ≈ 0 and privleak ≈ −100.

    The same formula as TOFU's privleak (lit_unlearn.metrics.tofu.formulas.privleak) once the labels are flipped: TOFU's
    AUC puts forget items on the other side (forget = 0, holdout = 1, score = NLL-like), so MUSE's AUC is 1 − TOFU's
    and ((1 − A) − (1 − A_r)) / (1 − A_r) is the same number. One implementation, two conventions for the input."""
    from lit_unlearn.metrics.tofu.formulas import privleak

    return privleak(1.0 - auc, 1.0 - auc_retrain)