"""Did the model forget enough? The retrained gold standard, the measures against it, and forget targets."""

from lit_unlearn.core.eval_mode import eval_mode
from lit_unlearn.verification.classifier import CLASSIFIER_METRICS, ClassifierVerifier, Measures
from lit_unlearn.verification.retrained_reference import RetrainedReference
from lit_unlearn.verification.training_recipe import TrainingRecipe
from lit_unlearn.verification.targets import METRICS, ForgetTarget

__all__ = ["CLASSIFIER_METRICS", "METRICS", "ClassifierVerifier", "ForgetTarget", "Measures", "RetrainedReference",
           "TrainingRecipe", "eval_mode"]
