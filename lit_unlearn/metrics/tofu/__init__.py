"""The TOFU evaluation: formulas, the passes, the membership attacks, aggregates and the report."""
