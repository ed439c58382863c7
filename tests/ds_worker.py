"""Run several unlearning methods on a tiny Llama in one launch, in one process or under CPU DeepSpeed ZeRO-2/3
or DDP with 2 processes (Lightning re-launches this script per rank), and save each run's full final weights
(rank 0). One launch serves many checks: starting 2 processes costs far more than a few tiny steps.

    python tests/ds_worker.py --data D --tokenizer T --out-dir O --run hamu [--run ofmu ...]
                              [--stage 2|3 | --ddp] [--devices 2] [--ckpt-dir C] [--preempt-at K]
    --run NAME[=METHOD][@RESUME]   a run named NAME (default METHOD = NAME), optionally resumed from RESUME;
                                   its weights go to O/NAME.pt and its checkpoints to C/NAME/
"""

import argparse
import os
import time
import warnings

import lightning.pytorch as pl
import torch

from lit_unlearn.callbacks.preemption import Preempted
from lit_unlearn.data import TofuDataModule, TofuSource
from lit_unlearn.distributed import release_process_group
from lit_unlearn.distributed.gathered_weights import gathered_weights
from lit_unlearn.models import CausalLM, tiny_llama_config

# 4 steps with a checkpoint every 2 give the mid-run resume point; baselines take 2
STEPS = {"hamu": 4, "ofmu": 4, "distill": 4}


def build_module(method, vocab):
    net = CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0)
    if method == "ofmu":
        from lit_unlearn.modules import OFMUModule

        module = OFMUModule(net, inner_steps=1, inner_lr=0.05, beta=0.3, outer_lr=0.05, rho=0.5,
                            hvp="finite_difference", fd_step=1e-2)
    elif method == "simnpo":
        from lit_unlearn.modules import SimNPOModule

        module = SimNPOModule(net, lr=0.05, optimizer="sgd", weight_decay=0.0)
    elif method == "idkdpo":
        from lit_unlearn.modules import IdkDPOModule

        module = IdkDPOModule(net, lr=0.01, optimizer="sgd", weight_decay=0.0)
    elif method == "graddiff":  # AdamW, as the 7B benches run it: DeepSpeed wraps the client optimizer
        from lit_unlearn.modules import GradDiffModule

        module = GradDiffModule(net, lr=1e-3, retain_weight=1.0, forget_weight=1.0, optimizer="adamw",
                                weight_decay=0.01)
    elif method == "rmu":
        from lit_unlearn.modules import RMUModule

        module = RMUModule(net, lr=0.05, layer=1, steering=6.5, retain_weight=3.0, optimizer="sgd")
    elif method == "distill":  # the distillation stage: the student starts half-way to noise, the teacher is frozen
        from lit_unlearn.modules import DistillRobustifyModule

        return DistillRobustifyModule(net, teacher=teacher_folder(), alpha=0.5, lr=1e-3, seed=0)  # no run report
    elif method == "hamu":
        from lit_unlearn.modules import HAMUModule

        module = HAMUModule(net, eta=0.05, quota=0.01)
    else:
        raise SystemExit(f"unknown method {method!r}")
    if method in ("idkdpo", "rmu"):  # the frozen reference's weights are moved away from the start
        with torch.no_grad():
            g = torch.Generator().manual_seed(1)
            for p in net.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=g))
    module.run_report.enabled = False
    return module


def teacher_folder():
    """The distillation's teacher: a Hugging Face folder the test writes beside the data."""
    return os.environ["DS_WORKER_TEACHER"]


def distill_data(args, tok):
    from lit_unlearn.distill import DistillSpec
    from lit_unlearn.distill.stage import distillation_data

    return distillation_data(TofuSource(args.data), tok, DistillSpec(batch_size=8))


def zero_config(args):
    """The DeepSpeed config of --stage. Under ZeRO-3 no parameter stays gathered between passes
    (stage3_param_persistence_threshold 0), as a 7B model's large ones do not: DeepSpeed's default (1e5 elements) is
    above every parameter of the tiny model, which would keep them all whole and leave the gathers untested."""
    zero = {"stage": args.stage}
    if args.stage == 3:
        zero["stage3_param_persistence_threshold"] = 0
        # DeepSpeed keeps a parameter gathered if it is used again within this many parameters' worth of the recorded
        # trace, and finds out by walking the trace after every submodule until that many are passed. Its default,
        # 1e9, covers a seventh of Llama-2-7B but the tiny model hundreds of times over, so every release walked the
        # whole trace (OFMU's is long): an OFMU-only ZeRO-3 launch took 60 s with it and 36 s without (wall, beside
        # another job). 0 ends the walk at once: a parameter is gathered again at its next use instead of kept; the
        # update is the same.
        zero["stage3_max_reuse_distance"] = 0
    return {"zero_optimization": zero, "gradient_clipping": 0.0, "zero_allow_untested_optimizer": True,
            "train_micro_batch_size_per_gpu": 1}


def strategy(args):
    if args.stage:
        from lit_unlearn.distributed.cpu_deepspeed import CPUDeepSpeedStrategy

        return CPUDeepSpeedStrategy(config=zero_config(args))
    return "ddp" if args.ddp else "auto"


def stage_run(args, tok, name):
    """The distillation stage as users run it (lit_unlearn.distill.distill_model: the launch path, the strategy
    from the config's `trainer`, the student gathered and exported); saves the exported student's weights."""
    from lit_unlearn.distill import DistillSpec, distill_model

    if args.stage:  # as a config writes it
        chosen = {"class_path": "lit_unlearn.distributed.cpu_deepspeed.CPUDeepSpeedStrategy", "init_args": {
            "config": zero_config(args)}}
    else:
        chosen = strategy(args)  # "ddp" or "auto"
    spec = DistillSpec(alpha=0.5, lr=1e-3, epochs=0.3, batch_size=8, seed=0,
                       trainer={"accelerator": "cpu", "devices": args.devices, "strategy": chosen,
                                "enable_model_summary": False})
    result = distill_model(teacher_folder(), TofuSource(args.data), tok, spec, os.path.join(args.out_dir, name))
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:  # the exported folder, read back as any tool would
        state = {n: p.detach().clone() for n, p in CausalLM(name_or_path=result["model"]).named_parameters()}
        state["__units__"] = torch.tensor(result["units"])
        torch.save(state, os.path.join(args.out_dir, f"{name}.pt"))


def one_run(args, tok, name, method, resume):
    if method == "distill_stage":
        return stage_run(args, tok, name)
    pl.seed_everything(0, verbose=False)
    module = build_module(method, len(tok))
    if method == "distill":
        dm = distill_data(args, tok)
    else:
        dm = TofuDataModule(TofuSource(args.data), tok, retain_batch_size=8, forget_batch_size=4,
                            alternate_answers="generated" if method == "idkdpo" else None,
                            micro_batch_size=args.micro_batch_size)
    ckpt_dir = os.path.join(args.ckpt_dir, name) if args.ckpt_dir else None
    callbacks = []
    if ckpt_dir:
        from lit_unlearn.callbacks import FinalCheckpoint

        callbacks.append(FinalCheckpoint(dirpath=ckpt_dir, every_n_train_steps=2, save_top_k=-1,
                                         filename="{step}", save_last=False))
    if method == "ofmu":
        from lit_unlearn.callbacks import RhoScheduler

        callbacks.append(RhoScheduler(schedule="linear", rho0=0.2, rate=0.3, cap=None))
    if args.preempt_at is not None:
        from signal_injector import SignalAt

        from lit_unlearn.callbacks.preemption import Preemption

        callbacks += [Preemption(requeue=False), SignalAt(args.preempt_at, "backward")]
    trainer = pl.Trainer(max_steps=STEPS.get(method, 2), accelerator="cpu", devices=args.devices, logger=False,
                         default_root_dir=ckpt_dir, enable_checkpointing=bool(ckpt_dir), callbacks=callbacks,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, strategy=strategy(args))
    trainer.fit(module, dm, ckpt_path=resume)
    with gathered_weights(module.network):  # whole under ZeRO-3
        state = {n: p.detach().clone() for n, p in module.network.named_parameters()}
    if method == "ofmu":
        state["__rho__"] = torch.tensor(module.rho)
    if args.stage == 3:  # the share of parameters ZeRO-3 keeps whole between passes (none: see zero_config)
        params = list(module.network.parameters())
        state["__persistent_share__"] = torch.tensor(sum(bool(getattr(p, "ds_persist", True)) for p in params)
                                                     / len(params))
    if method == "distill":
        state["__units__"] = torch.tensor(module.units())
    reference = getattr(module, "_reference", None)
    if reference is not None:  # the share of the frozen reference this rank holds (ZeRO-3 shards it)
        local = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in reference.parameters())
        state["__reference_share__"] = torch.tensor(local / sum(getattr(p, "ds_numel", p.numel())
                                                                for p in reference.parameters()))
    if trainer.is_global_zero:
        torch.save(state, os.path.join(args.out_dir, f"{name}.pt"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--run", action="append", required=True, help="NAME[=METHOD][@RESUME]")
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--ddp", action="store_true", help="plain DDP instead of DeepSpeed")
    ap.add_argument("--micro-batch-size", type=int, help="each process's share in micro-batches of this many items")
    ap.add_argument("--ckpt-dir")
    ap.add_argument("--preempt-at", type=int, help="send SIGUSR1 inside the backward pass of this step")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.makedirs(args.out_dir, exist_ok=True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    try:
        for spec in args.run:  # the process group, once made by the first fit, serves the later ones
            spec, _, resume = spec.partition("@")
            name, _, method = spec.partition("=")
            start = time.perf_counter()
            one_run(args, tok, name, method or name, resume or None)
            print(f"ds_worker: {name} took {time.perf_counter() - start:.1f} s", flush=True)
    except Preempted:  # every rank stopped at the same step boundary
        release_process_group()
        raise
    release_process_group()


if __name__ == "__main__":
    main()
