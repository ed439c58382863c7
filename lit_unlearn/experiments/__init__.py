"""The experiment suite that reruns the papers' comparisons (`lit-unlearn experiment`)."""

from lit_unlearn.experiments.claims import STUDIES, load_config, run_suite
from lit_unlearn.experiments.runs import RunResult, build, train_target, unlearning_run

__all__ = ["STUDIES", "RunResult", "build", "load_config", "run_suite", "train_target", "unlearning_run"]
