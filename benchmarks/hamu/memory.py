"""HAMU's extra memory over GradDiff, in units of one gradient copy, on ResNet-20 and on the tiny Llama (CPU).

Both trainers hold g_r and g_f during the second backward pass; HAMU adds the float64 statistics (chunked) and,
for nearly colinear blocks only, a float64 combine. Peak memory is read from the torch profiler's memory events
(the running sum of every allocation and free during one step, after a warm-up step), so the two methods are
measured the same way in one run. Target: extra ≤ 1.0 gradient copy.

    python benchmarks/hamu/memory.py
"""

from __future__ import annotations

import logging
import warnings

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from lit_unlearn.modules import GradDiffModule, HAMUModule


class PeakMemory(Callback):
    """Profiles the memory of training step `step` and records its peak (bytes above the step's start)."""

    def __init__(self, step: int = 2) -> None:
        self.step, self.peak, self._prof = step, None, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._prof is None or self.peak is not None:
            return
        self._prof.__exit__(None, None, None)
        # Each allocation is an op's *self* memory (nested ops would count it again); frees are "[memory]" events
        # with negative sizes. The running sum in time order is the live memory.
        events = sorted((e for e in self._prof.events() if e.self_cpu_memory_usage),
                        key=lambda e: e.time_range.start)
        live = peak = 0
        for e in events:
            live += e.self_cpu_memory_usage
            peak = max(peak, live)
        self.peak = peak


def peak_bytes(make_module, make_dm) -> int:
    probe = PeakMemory()
    module = make_module()
    module.run_report.enabled = False
    pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, limit_val_batches=0, callbacks=[probe], log_every_n_steps=50).fit(
        module, make_dm())
    return probe.peak


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    from lit_unlearn.data import ClassForget, DigitsSource, UnlearningDataModule
    from lit_unlearn.models import CifarResNet

    cases = {}

    def resnet():
        return CifarResNet(depth=20, num_classes=10, in_channels=1)

    cases["ResNet-20 (digits, 128+128)"] = (resnet, lambda: UnlearningDataModule(
        DigitsSource(seed=0), ClassForget(0), retain_batch_size=128, forget_batch_size=128))

    import tempfile

    from lit_unlearn.data import TofuDataModule, TofuSource, generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.worlds.tiny_llama import TINY_SIZE

    folder = tempfile.mkdtemp()
    write_tofu_json(f"{folder}/data")
    splits = generate_fictitious_tofu()
    tok = train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in splits.values() for r in rows],
                              vocab_size=512)
    cases["tiny Llama (TOFU, 16+16)"] = (
        lambda: CausalLM(config=tiny_llama_config(vocab_size=len(tok), **TINY_SIZE), seed=0),
        lambda: TofuDataModule(TofuSource(f"{folder}/data"), tok, retain_batch_size=16, forget_batch_size=16))
    print("peak memory of one step (torch profiler, CPU), HAMU vs GradDiff; unit = one gradient copy")
    for name, (net, dm) in cases.items():
        grad_bytes = sum(p.numel() * p.element_size() for p in net().parameters())
        hamu = peak_bytes(lambda: HAMUModule(net(), eta=1e-2, quota=1e-4), dm)
        graddiff = peak_bytes(lambda: GradDiffModule(net(), lr=1e-4), dm)
        extra = (hamu - graddiff) / grad_bytes
        print(f"  {name:28s} gradient copy {grad_bytes / 2**20:6.2f} MiB | peak HAMU {hamu / 2**20:8.2f} MiB, "
              f"GradDiff {graddiff / 2**20:8.2f} MiB | extra {extra:+.2f} copies (target ≤ 1.0: "
              f"{'met' if extra <= 1.0 else 'NOT met'})")


if __name__ == "__main__":
    main()
