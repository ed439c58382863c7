"""Figures and TensorBoard extras a run writes besides its scalars."""
