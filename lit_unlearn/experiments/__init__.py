"""The experiment suite that reruns the papers' comparisons (`lit-unlearn experiment`)."""

from lit_unlearn.experiments.suite import STUDIES, load_config, run_suite
from lit_unlearn.experiments.unlearning_run import RunResult, build, train_target, unlearning_run

__all__ = ["STUDIES", "RunResult", "build", "load_config", "run_suite", "train_target", "unlearning_run"]
