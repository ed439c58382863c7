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

__all__ = ["main"]


def main(argv: list[str]) -> None:
    from lit_unlearn.recipes.standalone_eval import add_model_arguments, finish_report, load_model

    p = argparse.ArgumentParser(prog="lit-unlearn tofu-eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p, "tofu", batch_size=32)
    p.add_argument("--data", required=True, help="TOFU hub name (locuslab/TOFU) or a local folder of split files")
    p.add_argument("--forget-level", default="10", choices=["01", "05", "10"])
    p.add_argument("--template", default="plain", choices=["plain", "llama2", "chat"])
    p.add_argument("--reference", help="the retrained model's saved report, for forget quality")
    p.add_argument("--require-reference", action="store_true", help="fail instead of reporting FQ as missing")
    p.add_argument("--mia-convention", default="lit-unlearn", choices=["lit-unlearn", "open-unlearning"],
                   help="how Min-K%%, Min-K%%++, zlib, ES/EM and privleak's fallback are computed (docs/llm.md)")
    p.add_argument("--input-format", default="lit-unlearn", choices=["lit-unlearn", "open-unlearning"],
                   help="tokenisation of the template: ours, or open-unlearning's (to set numbers beside its tables)")
    p.add_argument("--no-gradnorm", action="store_true", help="skip the gradient-norm MIA (a backward pass per item)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    args = p.parse_args(argv)

    from lit_unlearn.data import TofuSource
    from lit_unlearn.metrics import TofuEvaluator

    network, tokenizer = load_model(args)
    source = TofuSource(args.data, args.forget_level)
    report = TofuEvaluator(tokenizer, source.eval_splits(), template=args.template, max_new_tokens=args.max_new_tokens,
                           batch_size=args.batch_size, reference=args.reference,
                           require_reference=args.require_reference, mia_convention=args.mia_convention,
                           input_format=args.input_format, gradnorm=not args.no_gradnorm).run(network, args.device)
    finish_report(report, args, "tofu")
