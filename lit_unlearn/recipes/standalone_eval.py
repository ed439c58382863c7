"""What `lit-unlearn tofu-eval` and `muse-eval` share: the model arguments, loading a model (an HF folder or hub
name, or a Lightning checkpoint on top of its base model), and printing / saving / logging the report."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_model_arguments", "load_model", "finish_report"]


def add_model_arguments(p: argparse.ArgumentParser, prefix: str, batch_size: int) -> None:
    import torch

    p.add_argument("--model", required=True, help="HF folder or hub name, or a .ckpt of an unlearning run")
    p.add_argument("--base", help="with a .ckpt: the HF model it was trained from (architecture)")
    p.add_argument("--tokenizer", help="tokenizer folder or hub name (default: the model's folder)")
    p.add_argument("--save", help="write the report (summary + per-item values) as JSON here")
    p.add_argument("--logdir", help=f"also log the summary as TensorBoard scalars ({prefix}/...) here")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")


def load_model(args: argparse.Namespace):
    """(network on args.device, tokenizer) from --model / --base / --tokenizer / --dtype."""
    from lit_unlearn.checkpoints import load_network_weights
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.errors import UserError
    from lit_unlearn.models import CausalLM

    if args.model.endswith(".ckpt"):
        if not args.base:
            raise UserError("--model is a Lightning checkpoint: pass --base (the HF model it was trained from)")
        network = CausalLM(name_or_path=args.base, dtype=args.dtype)
        load_network_weights(network, args.model)
        tokenizer_path = args.tokenizer or args.base
    else:
        network = CausalLM(name_or_path=args.model, dtype=args.dtype)
        tokenizer_path = args.tokenizer or args.model
    network.to(args.device)
    return network, load_tokenizer(tokenizer_path)


def finish_report(report, args: argparse.Namespace, prefix: str) -> None:
    """Print the table; with --save write the JSON, with --logdir the summary as TensorBoard scalars."""
    print(report.table())
    if args.save:
        print(f"(saved to {report.save(args.save)})")
    if args.logdir:
        from torch.utils.tensorboard import SummaryWriter

        Path(args.logdir).mkdir(parents=True, exist_ok=True)
        with SummaryWriter(args.logdir) as writer:
            for k, v in report.summary.items():
                if v is not None:
                    writer.add_scalar(f"{prefix}/{k}", v, 0)
