"""The run's vocabulary, below everything else: user errors, console output, batches, the Hub rule, the declared plug points."""
