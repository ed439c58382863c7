"""End-to-end recipes (data → target → reference → unlearning → report) behind the `lit-unlearn` shortcuts."""
