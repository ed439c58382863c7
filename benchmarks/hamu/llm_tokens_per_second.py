"""Tokens per second of a HAMU step vs a GradDiff step on the tiny Llama (CPU), measured side by side.

Both trainers run the same two forward/backward passes over the same (retain, forget) token batches; HAMU
adds the per-tensor statistics, the closed form and the in-place combine. Target: GradDiff/HAMU tokens/s
ratio ≤ 1.05 (HAMU at most 5 % slower), with diagnostics at Lightning's default interval (every 50 steps).

    python benchmarks/hamu/llm_tokens_per_second.py [--steps 12] [--rounds 3] [--batch 32]
"""

from __future__ import annotations

import sys
from pathlib import Path
import logging
import statistics
import tempfile
import warnings

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from lit_unlearn.data import TofuDataModule, TofuSource, generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import GradDiffModule, HAMUModule
from lit_unlearn.worlds.tiny_llama import TINY_SIZE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py


class TokenTimer(Callback):
    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        import time

        self._t = time.perf_counter()
        self._tokens = sum(int(b["attention_mask"].sum()) for b in batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        import time

        self.rates.append(self._tokens / (time.perf_counter() - self._t))


def rates(make_module, dm_factory, steps: int, log_every: int) -> list[float]:
    timer = TokenTimer()
    module = make_module()
    module.run_report.enabled = False
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, callbacks=[timer], log_every_n_steps=log_every)
    trainer.fit(module, dm_factory())
    return timer.rates[2:]  # drop warm-up steps


def main() -> None:
    parser = options(__doc__, full=True, write=False)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--log-every", type=int, default=50,
                        help="Trainer log_every_n_steps (HAMU computes its ~20 diagnostics on those steps; 1 = worst case)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    folder = tempfile.mkdtemp()
    write_tofu_json(f"{folder}/data")
    splits = generate_fictitious_tofu()
    tok = train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in splits.values() for r in rows],
                              vocab_size=512)

    def net():
        return CausalLM(config=tiny_llama_config(vocab_size=len(tok), **TINY_SIZE), seed=0)

    def dm():
        return TofuDataModule(TofuSource(f"{folder}/data"), tok, retain_batch_size=args.batch,
                              forget_batch_size=args.batch)

    makers = {"hamu": lambda: HAMUModule(net(), eta=1e-4, quota=5e-5),
              "graddiff": lambda: GradDiffModule(net(), lr=1e-4)}
    measured = {k: [] for k in makers}
    for _ in range(args.rounds):  # interleaved: drift in machine load hits both alike
        for name, make in makers.items():
            measured[name] += rates(make, dm, args.steps, args.log_every)
    med = {k: statistics.median(v) for k, v in measured.items()}
    params = sum(p.numel() for p in net().parameters())
    print(f"tiny Llama ({params:,} parameters), batch {args.batch}+{args.batch} QA pairs, "
          f"{len(measured['hamu'])} timed steps each, log_every_n_steps={args.log_every}, "
          f"{torch.get_num_threads()} threads")
    for k, v in med.items():
        print(f"  {k:9s} median {v:9.0f} tokens/s")
    ratio = med["graddiff"] / med["hamu"]
    print(f"GradDiff/HAMU tokens/s ratio: {ratio:.3f} (target ≤ 1.05: {'met' if ratio <= 1.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
