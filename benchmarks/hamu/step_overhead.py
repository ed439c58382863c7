"""HAMU step time vs GradDiff step time on ResNet-20 (CPU), measured side by side in one run.

Both trainers do the same two forward/backward passes on the same batches; HAMU adds three reductions per
parameter tensor (float64), an O(#blocks) closed form and one fused combine. Target: ratio ≤ 1.05, with
diagnostics at Lightning's default interval (every 50 steps; --log-every 1 is the worst case).

    python benchmarks/hamu/step_overhead.py [--steps 15] [--rounds 3] [--batch 128]
"""

from __future__ import annotations

import sys
from pathlib import Path
import statistics
import time
import warnings

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from lit_unlearn.data import ArrayDataset, PairedDataModule
from lit_unlearn.models import resnet20
from lit_unlearn.modules import GradDiffModule, HAMUModule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py


class SyntheticCifar(PairedDataModule):
    def __init__(self, n: int, batch: int) -> None:
        super().__init__(retain_batch_size=batch, forget_batch_size=batch, seed=0)
        self.n = n

    def build(self):
        g = torch.Generator().manual_seed(0)
        make = lambda: ArrayDataset(torch.randn(self.n, 3, 32, 32, generator=g),  # noqa: E731
                                    torch.randint(0, 10, (self.n,), generator=g))
        return make(), make(), {}


class StepTimer(Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args) -> None:
        self._t = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.times.append(time.perf_counter() - self._t)


def time_steps(make_module, steps: int, batch: int, log_every: int = 50) -> list[float]:
    timer = StepTimer()
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, callbacks=[timer],
                         log_every_n_steps=log_every)
    trainer.fit(make_module(), SyntheticCifar(n=batch * steps, batch=batch))
    return timer.times[2:]  # drop warm-up steps


def main() -> None:
    parser = options(__doc__, full=True, write=False)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--log-every", type=int, default=50, help="diagnostics interval (1: every step, worst case)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    def net():
        torch.manual_seed(0)
        return resnet20()

    makers = {
        "hamu": lambda: HAMUModule(net(), eta=1e-4, quota=5e-5),
        "graddiff": lambda: GradDiffModule(net(), lr=1e-4),
    }
    times = {k: [] for k in makers}
    for _ in range(args.rounds):  # interleaved, so drift in machine load hits both alike
        for name, make in makers.items():
            times[name] += time_steps(make, args.steps, args.batch, args.log_every)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"ResNet-20, batch {args.batch}+{args.batch}, {len(times['hamu'])} timed steps each, "
          f"log_every_n_steps={args.log_every}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for k, v in med.items():
        print(f"  {k:9s} median step {v * 1e3:8.1f} ms")
    ratio = med["hamu"] / med["graddiff"]
    print(f"HAMU/GradDiff step-time ratio: {ratio:.3f} (target ≤ 1.05: {'met' if ratio <= 1.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
