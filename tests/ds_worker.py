"""Run HAMU on a tiny Llama for a few steps, in one process or under CPU DeepSpeed ZeRO-2/3 with 2 processes
(Lightning re-launches this script per rank), then save the full final weights (rank 0).

    python tests/ds_worker.py --data D --tokenizer T --out W.pt --steps 1 [--stage 2|3 --devices 2]
                              [--ckpt-dir C --stop-at K] [--resume C]
"""

import argparse
import os
import warnings

import lightning.pytorch as pl
import torch

from lit_unlearn.callbacks.preemption import Preempted
from lit_unlearn.data import TofuDataModule, TofuSource
from lit_unlearn.distributed import release_process_group
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import HAMUModule


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--ddp", action="store_true", help="plain DDP instead of DeepSpeed")
    ap.add_argument("--method", default="hamu", choices=["hamu", "ofmu", "simnpo", "idkdpo", "rmu", "graddiff"])
    ap.add_argument("--ckpt-dir")
    ap.add_argument("--resume")
    ap.add_argument("--preempt-at", type=int, help="send SIGUSR1 inside the backward pass of this step")
    ap.add_argument("--rho-schedule", action="store_true", help="OFMU: a linear RhoScheduler")
    ap.add_argument("--inner-steps", type=int, default=2, help="OFMU: T")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=0)
    if args.method == "ofmu":
        from lit_unlearn.modules import OFMUModule

        module = OFMUModule(net, inner_steps=args.inner_steps, inner_lr=0.05, beta=0.3, outer_lr=0.05, rho=0.5,
                            hvp="finite_difference", fd_step=1e-2)
    elif args.method == "simnpo":
        from lit_unlearn.modules import SimNPOModule

        module = SimNPOModule(net, lr=0.05, optimizer="sgd", weight_decay=0.0)
    elif args.method == "idkdpo":
        from lit_unlearn.modules import IdkDPOModule

        module = IdkDPOModule(net, lr=0.01, optimizer="sgd", weight_decay=0.0)
    elif args.method == "graddiff":  # AdamW, as the 7B benches run it: DeepSpeed wraps the client optimizer
        from lit_unlearn.modules import GradDiffModule

        module = GradDiffModule(net, lr=1e-3, retain_weight=1.0, forget_weight=1.0, optimizer="adamw",
                                weight_decay=0.01)
    elif args.method == "rmu":
        from lit_unlearn.modules import RMUModule

        module = RMUModule(net, lr=0.05, layer=1, steering=6.5, retain_weight=3.0, optimizer="sgd")
    else:
        module = HAMUModule(net, eta=0.05, quota=0.01)
    if args.method in ("idkdpo", "rmu"):  # the frozen reference's weights are moved away from the start
        with torch.no_grad():
            g = torch.Generator().manual_seed(1)
            for p in net.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=g))
    module.run_report.enabled = False
    alternates = "generated" if args.method == "idkdpo" else None
    dm = TofuDataModule(TofuSource(args.data), tok, retain_batch_size=8, forget_batch_size=4,
                        alternate_answers=alternates)
    kwargs = {}
    if args.stage:
        from lit_unlearn.distributed.cpu_deepspeed import CPUDeepSpeedStrategy

        kwargs["strategy"] = CPUDeepSpeedStrategy(config={
            "zero_optimization": {"stage": args.stage}, "gradient_clipping": 0.0,
            "zero_allow_untested_optimizer": True, "train_micro_batch_size_per_gpu": 1})
    if args.ddp:
        kwargs["strategy"] = "ddp"
    callbacks = []
    if args.ckpt_dir:
        from lit_unlearn.callbacks import FinalCheckpoint

        callbacks.append(FinalCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=2, save_top_k=-1,
                                         filename="{step}", save_last=False))
    if args.rho_schedule:
        from lit_unlearn.callbacks import RhoScheduler

        callbacks.append(RhoScheduler(schedule="linear", rho0=0.2, rate=0.3, cap=None))
    if args.preempt_at is not None:
        from signal_injector import SignalAt

        from lit_unlearn.callbacks.preemption import Preemption

        callbacks += [Preemption(requeue=False), SignalAt(args.preempt_at, "backward")]
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=args.devices, logger=False,
                         default_root_dir=args.ckpt_dir,
                         enable_checkpointing=bool(args.ckpt_dir), callbacks=callbacks, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0, **kwargs)
    try:
        trainer.fit(module, dm, ckpt_path=args.resume)
    except Preempted:  # every rank stopped at the same step boundary
        release_process_group()
        raise
    params = list(module.network.parameters())
    if args.stage == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(params):
            state = {n: p.detach().clone() for n, p in module.network.named_parameters()}
    else:
        state = {n: p.detach().clone() for n, p in module.network.named_parameters()}
    if args.method == "ofmu":
        state["__rho__"] = torch.tensor(module.rho)
    reference = getattr(module, "_reference", None)
    if reference is not None:  # the share of the frozen reference this rank holds (ZeRO-3 shards it)
        local = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in reference.parameters())
        state["__reference_share__"] = torch.tensor(local / sum(getattr(p, "ds_numel", p.numel())
                                                                for p in reference.parameters()))
    if trainer.is_global_zero:
        torch.save(state, args.out)
    release_process_group()


if __name__ == "__main__":
    main()
