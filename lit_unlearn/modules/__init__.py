from lit_unlearn.modules.classifier import ClassifierModule
from lit_unlearn.modules.graddiff import GradDiffModule
from lit_unlearn.modules.hamu import HAMUModule
from lit_unlearn.modules.unlearning import UnlearningModule

__all__ = ["ClassifierModule", "GradDiffModule", "HAMUModule", "UnlearningModule"]
