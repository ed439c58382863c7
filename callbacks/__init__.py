"""Lightning callbacks (installed as `lit_unlearn.callbacks`)."""

from lit_unlearn.callbacks.final_checkpoint import FinalCheckpoint
from lit_unlearn.callbacks.forgetting_verification import ForgettingVerification
from lit_unlearn.callbacks.holdout_verification import HoldoutVerification
from lit_unlearn.callbacks.interpolate_toward_base import InterpolateTowardBase
from lit_unlearn.callbacks.kappa_early_stopping import KappaEarlyStopping
from lit_unlearn.callbacks.metric_source import MetricSource
from lit_unlearn.callbacks.muse_evaluation import MuseEvaluation
from lit_unlearn.callbacks.quota_controller import QuotaController
from lit_unlearn.callbacks.evaluation_callback import EvaluationCallback
from lit_unlearn.callbacks.rho_schedule import RhoScheduler
from lit_unlearn.callbacks.stop_at_target import StopAtTarget
from lit_unlearn.callbacks.tofu_evaluation import TofuEvaluation
from lit_unlearn.callbacks.trajectory_recorder import TrajectoryRecorder

__all__ = ["FinalCheckpoint", "ForgettingVerification", "HoldoutVerification", "InterpolateTowardBase",
           "KappaEarlyStopping", "MetricSource", "MuseEvaluation", "QuotaController", "EvaluationCallback",
           "RhoScheduler", "StopAtTarget", "TofuEvaluation", "TrajectoryRecorder"]
