"""lit-unlearn: machine unlearning (HAMU and baselines) as PyTorch Lightning trainers."""

__version__ = "0.1.0"
