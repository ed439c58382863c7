"""One harness for every LLM unlearning method (`lit-unlearn bench`): the same target, retain-only references,
step budget and evaluation for all; hyper-parameters chosen per method on a validation world.

Product code, installed with the package. Not the repository's `benchmarks/` folder: those are scripts run from a
checkout that measure the project itself and write the docs that cite them (benchmarks/README.md)."""

from lit_unlearn.bench.spec import BenchSpec, MethodSpec, load_bench_spec
from lit_unlearn.bench.runner import run_bench

__all__ = ["BenchSpec", "MethodSpec", "load_bench_spec", "run_bench"]
