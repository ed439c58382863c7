"""`lit-unlearn tofu-eval`: the TOFU table (FQ, MU, FTR, ROUGE, MIA) of one model, optionally saved as the
reference for forget quality and logged to TensorBoard.

    lit-unlearn tofu-eval --model runs/tofu/retrain --data runs/tofu/data --save runs/tofu/retrain_eval.json
    lit-unlearn tofu-eval --model runs/tofu/hamu/checkpoints/last.ckpt --base runs/tofu/target \
        --data runs/tofu/data --reference runs/tofu/retrain_eval.json --logdir runs/tofu/eval
    lit-unlearn tofu-eval --model open-unlearning/tofu_Llama-2-7b-chat-hf_full \
        --tokenizer meta-llama/Llama-2-7b-chat-hf --data locuslab/TOFU --template llama2
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="lit-unlearn tofu-eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="HF folder or hub name, or a .ckpt of an unlearning run")
    p.add_argument("--base", help="with a .ckpt: the HF model it was trained from (architecture)")
    p.add_argument("--tokenizer", help="tokenizer folder or hub name (default: the model's folder)")
    p.add_argument("--data", required=True, help="TOFU hub name (locuslab/TOFU) or a local folder of split files")
    p.add_argument("--forget-level", default="10", choices=["01", "05", "10"])
    p.add_argument("--template", default="plain", choices=["plain", "llama2", "chat"])
    p.add_argument("--reference", help="the retrained model's saved report, for forget quality")
    p.add_argument("--require-reference", action="store_true", help="fail instead of reporting FQ as missing")
    p.add_argument("--save", help="write the report (summary + per-item values) as JSON here")
    p.add_argument("--logdir", help="also log the summary as TensorBoard scalars (tofu/...) here")
    p.add_argument("--mia-convention", default="lit-unlearn", choices=["lit-unlearn", "open-unlearning"],
                   help="how Min-K%%, Min-K%%++, zlib, ES/EM and privleak's fallback are computed (docs/llm.md)")
    p.add_argument("--input-format", default="lit-unlearn", choices=["lit-unlearn", "open-unlearning"],
                   help="tokenisation of the template: ours, or open-unlearning's (to set numbers beside its tables)")
    p.add_argument("--no-gradnorm", action="store_true", help="skip the gradient-norm MIA (a backward pass per item)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cuda" if _cuda() else "cpu")
    args = p.parse_args(argv)

    from lit_unlearn.checkpoints import load_network_weights
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    if args.model.endswith(".ckpt"):
        if not args.base:
            raise SystemExit("--model is a Lightning checkpoint: pass --base (the HF model it was trained from)")
        network = CausalLM(name_or_path=args.base, dtype=args.dtype)
        load_network_weights(network, args.model)
        tokenizer_path = args.tokenizer or args.base
    else:
        network = CausalLM(name_or_path=args.model, dtype=args.dtype)
        tokenizer_path = args.tokenizer or args.model
    tokenizer = load_tokenizer(tokenizer_path)
    network.to(args.device)
    source = TofuSource(args.data, args.forget_level)
    report = TofuEvaluator(tokenizer, source.eval_splits(), template=args.template, max_new_tokens=args.max_new_tokens,
                           batch_size=args.batch_size, reference=args.reference,
                           require_reference=args.require_reference, mia_convention=args.mia_convention,
                           input_format=args.input_format, gradnorm=not args.no_gradnorm).run(network, args.device)
    print(report.table())
    if args.save:
        print(f"(saved to {report.save(args.save)})")
    if args.logdir:
        from torch.utils.tensorboard import SummaryWriter

        Path(args.logdir).mkdir(parents=True, exist_ok=True)
        with SummaryWriter(args.logdir) as writer:
            for k, v in report.summary.items():
                if v is not None:
                    writer.add_scalar(f"tofu/{k}", v, 0)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
