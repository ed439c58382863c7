"""LightningModules: the target trainer, HAMU, and the baselines (one file per method)."""

from lit_unlearn.modules.base_answers import BaseAnswersModule
from lit_unlearn.modules.base_distill import BaseDistillModule
from lit_unlearn.modules.cir import CIRModule
from lit_unlearn.modules.classifier import ClassifierModule, SupervisedModule
from lit_unlearn.modules.distill_robustify import DistillRobustifyModule
from lit_unlearn.modules.ft import FTModule
from lit_unlearn.modules.ga import GAModule
from lit_unlearn.modules.graddiff import GradDiffModule
from lit_unlearn.modules.hamu import HAMUModule
from lit_unlearn.modules.holdout_match import HoldoutMatchModule
from lit_unlearn.modules.idkdpo import IdkDPOModule
from lit_unlearn.modules.kl import KLModule
from lit_unlearn.modules.npo import NPOModule
from lit_unlearn.modules.objective import ObjectiveUnlearningModule
from lit_unlearn.modules.ofmu import OFMUModule
from lit_unlearn.modules.rmu import RMUModule
from lit_unlearn.modules.scrub import SCRUBModule
from lit_unlearn.modules.simnpo import SimNPOModule
from lit_unlearn.modules.unlearning import UnlearningModule

__all__ = ["BaseAnswersModule", "BaseDistillModule", "CIRModule", "ClassifierModule", "DistillRobustifyModule", "FTModule",
           "GAModule", "GradDiffModule", "HAMUModule", "HoldoutMatchModule", "IdkDPOModule", "KLModule", "NPOModule",
           "ObjectiveUnlearningModule", "OFMUModule", "RMUModule", "SCRUBModule", "SimNPOModule", "SupervisedModule",
           "UnlearningModule"]
