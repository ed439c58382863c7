"""Lightning callbacks (installed as `lit_unlearn.callbacks`)."""

from lit_unlearn.callbacks.final_checkpoint import FinalCheckpoint
from lit_unlearn.callbacks.kappa_early_stopping import KappaEarlyStopping

__all__ = ["FinalCheckpoint", "KappaEarlyStopping"]
