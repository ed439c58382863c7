"""TOFU metrics as torchmetrics Metrics: per-item values are `cat` states, so under data parallelism each
process scores its share of the items and `compute()` sees all of them (the same numbers at any world size).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from lit_unlearn.metrics.tofu import formulas as tofu_math

__all__ = ["rank_and_world", "PerItem", "ItemMean", "AnswerProbability", "NormalisedProbability", "TruthRatio", "RougeLRecall",
           "ForgetQuality", "MembershipAUC"]


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes (0, 1 without a process group): it scores items
    rank::world."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class PerItem(Metric):
    """Keeps one float per item; `per_item()` returns all of them (gathered across processes)."""

    full_state_update = False
    higher_is_better = None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("values", default=[], dist_reduce_fx="cat")

    def _add(self, values: Tensor) -> None:
        self.values.append(values.detach().double().reshape(-1))

    def per_item(self) -> Tensor:
        """Every item's value, from all processes (a no-op gather in a single process)."""
        if self._is_synced:  # inside compute(): the states are already gathered
            return self._read()
        with self.sync_context(should_sync=True, should_unsync=True):
            return self._read()

    def _read(self) -> Tensor:
        values = self.values
        if isinstance(values, list):
            return dim_zero_cat(values) if values else torch.zeros(0, dtype=torch.float64)
        return values.clone()

    def compute(self) -> Tensor:
        values = self.per_item()
        if values.numel() == 0:
            raise ValueError(f"{type(self).__name__}: no items were scored")
        return values.mean()


class ItemMean(PerItem):
    """Mean of any per-item value (e.g. the answer NLL)."""

    def update(self, values: Tensor) -> None:
        self._add(values)


class AnswerProbability(PerItem):
    """Mean of exp(−mean answer-token NLL) (TOFU's Q_A_Prob)."""

    def update(self, nll: Tensor) -> None:
        self._add(tofu_math.probability(nll))


class NormalisedProbability(PerItem):
    """Mean of p_true / (p_true + Σ p_perturbed) (real authors, world facts)."""

    def update(self, nll_true: Tensor, nll_perturbed: Tensor) -> None:
        self._add(tofu_math.normalised_probability(nll_true, nll_perturbed))


class TruthRatio(PerItem):
    """Per-item TR = p_wrong / p_correct; aggregated as "forget" (mean min(TR, 1/TR)) or "true" (mean max(0, 1−TR))."""

    def __init__(self, aggregation: str = "true", **kwargs) -> None:
        super().__init__(**kwargs)
        if aggregation not in ("forget", "true"):
            raise ValueError(f"aggregation={aggregation!r}: choose 'forget' or 'true'")
        self.aggregation = aggregation

    def update(self, nll_correct: Tensor, nll_perturbed: Tensor) -> None:
        self._add(tofu_math.truth_ratio(nll_correct, nll_perturbed))

    def compute(self) -> Tensor:
        tr = self.per_item()
        if tr.numel() == 0:
            raise ValueError("TruthRatio: no items were scored")
        agg = tofu_math.forget_truth_ratio if self.aggregation == "forget" else tofu_math.true_truth_ratio
        return torch.tensor(agg(tr), dtype=torch.float64)


class RougeLRecall(PerItem):
    """Mean ROUGE-L recall (stemmed) of generated answers against the gold answers."""

    def update(self, predictions: Sequence[str], references: Sequence[str]) -> None:
        self._add(torch.tensor(tofu_math.rouge_l_recall(predictions, references), dtype=torch.float64))


class ForgetQuality(TruthRatio):
    """KS-test p-value between this model's per-item forget truth ratios and the retrained model's."""

    higher_is_better = True

    def __init__(self, reference_truth_ratios: Sequence[float], **kwargs) -> None:
        super().__init__(aggregation="forget", **kwargs)
        if len(reference_truth_ratios) == 0:
            raise ValueError("ForgetQuality needs the retrained model's per-item forget truth ratios")
        self.reference = [float(x) for x in reference_truth_ratios]

    def compute(self) -> Tensor:
        return torch.tensor(tofu_math.forget_quality(self.per_item().tolist(), self.reference), dtype=torch.float64)


class MembershipAUC(Metric):
    """ROC AUC of a membership-inference score between forget (label 0) and holdout (label 1) items."""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("labels", default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, is_holdout: bool) -> None:
        scores = scores.detach().double().reshape(-1)
        self.scores.append(scores)
        self.labels.append(torch.full_like(scores, float(is_holdout)))

    def compute(self) -> Tensor:
        scores, labels = (dim_zero_cat(x) if isinstance(x, list) else x for x in (self.scores, self.labels))
        if not (labels == 0).any() or not (labels == 1).any():
            raise ValueError("MembershipAUC needs both forget and holdout items")
        return torch.tensor(tofu_math.auc(scores[labels == 0].tolist(), scores[labels == 1].tolist()),
                            dtype=torch.float64)
