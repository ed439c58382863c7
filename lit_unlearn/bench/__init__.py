"""One harness for every LLM unlearning method (`lit-unlearn bench`): the same target, retain-only references,
step budget and evaluation for all; hyper-parameters chosen per method on a validation world."""

from lit_unlearn.bench.spec import BenchSpec, MethodSpec, load_bench_spec
from lit_unlearn.bench.runner import run_bench

__all__ = ["BenchSpec", "MethodSpec", "load_bench_spec", "run_bench"]
