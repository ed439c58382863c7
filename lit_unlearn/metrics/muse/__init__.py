"""The MUSE evaluation: its formulas and the evaluator."""
