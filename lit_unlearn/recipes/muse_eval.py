"""`lit-unlearn muse-eval`: the MUSE table (VerbMem, KnowMem on D_f and D_r, PrivLeak, ES, EM) of one model,
optionally saved as the reference for PrivLeak and logged to TensorBoard.

    lit-unlearn muse-eval --model muse-bench/MUSE-news_retrain --tokenizer meta-llama/Llama-2-7b-hf \
        --data muse-bench/MUSE-News --save runs/muse/retrain_eval.json
    lit-unlearn muse-eval --model runs/muse/npo/version_0/checkpoints/last.ckpt --base muse-bench/MUSE-news_target \
        --tokenizer meta-llama/Llama-2-7b-hf --data muse-bench/MUSE-News --reference runs/muse/retrain_eval.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="lit-unlearn muse-eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="HF folder or hub name, or a .ckpt of an unlearning run")
    p.add_argument("--base", help="with a .ckpt: the HF model it was trained from (architecture)")
    p.add_argument("--tokenizer", help="tokenizer folder or hub name (default: the model's folder)")
    p.add_argument("--data", required=True, help="muse-bench/MUSE-News, muse-bench/MUSE-Books, or a local folder")
    p.add_argument("--reference", help="the retrained model's saved report (PrivLeak's AUC_retrain)")
    p.add_argument("--retrain-auc", type=float, help="AUC_retrain as a number instead (MUSE News, Min-40%%: 0.4772)")
    p.add_argument("--save", help="write the report (summary + per-item values) as JSON here")
    p.add_argument("--logdir", help="also log the summary as TensorBoard scalars (muse/...) here")
    p.add_argument("--verbmem-max-new-tokens", type=int, default=128)
    p.add_argument("--knowmem-max-new-tokens", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cuda" if _cuda() else "cpu")
    args = p.parse_args(argv)

    from lit_unlearn.checkpoints import load_network_weights
    from lit_unlearn.data import MuseSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.errors import UserError
    from lit_unlearn.metrics.muse_eval import MuseEvaluator
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
    report = MuseEvaluator(load_tokenizer(tokenizer_path), MuseSource(args.data), args.verbmem_max_new_tokens,
                           args.knowmem_max_new_tokens, args.batch_size, args.reference,
                           args.retrain_auc).run(network, args.device)
    print(report.table())
    if args.save:
        print(f"(saved to {report.save(args.save)})")
    if args.logdir:
        from torch.utils.tensorboard import SummaryWriter

        Path(args.logdir).mkdir(parents=True, exist_ok=True)
        with SummaryWriter(args.logdir) as writer:
            for k, v in report.summary.items():
                if v is not None:
                    writer.add_scalar(f"muse/{k}", v, 0)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
