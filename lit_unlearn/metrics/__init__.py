"""TOFU / membership-inference metrics: pure definitions (tofu_math), torchmetrics Metrics, the evaluator."""

from lit_unlearn.metrics.tofu.evaluator import HEADLINE, TofuEvaluator, TofuReport
from lit_unlearn.metrics.tofu.torch_metrics import (
    AnswerProbability,
    ForgetQuality,
    MembershipAUC,
    NormalisedProbability,
    PerItem,
    RougeLRecall,
    TruthRatio,
)

__all__ = ["HEADLINE", "AnswerProbability", "ForgetQuality", "MembershipAUC", "NormalisedProbability", "PerItem",
           "RougeLRecall", "TofuEvaluator", "TofuReport", "TruthRatio"]
