"""`lit-unlearn muse-eval`: the MUSE table (VerbMem, KnowMem on D_f and D_r, PrivLeak, ES, EM) of one model,
optionally saved as the reference for PrivLeak and logged to TensorBoard.

    lit-unlearn muse-eval --model muse-bench/MUSE-news_retrain --tokenizer meta-llama/Llama-2-7b-hf \
        --data muse-bench/MUSE-News --save runs/muse/retrain_eval.json
    lit-unlearn muse-eval --model runs/muse/npo/version_0/checkpoints/last.ckpt --base muse-bench/MUSE-news_target \
        --tokenizer meta-llama/Llama-2-7b-hf --data muse-bench/MUSE-News --reference runs/muse/retrain_eval.json
"""

from __future__ import annotations

import argparse

__all__ = ["main"]


def main(argv: list[str]) -> None:
    from lit_unlearn.recipes.standalone_eval import add_model_arguments, finish_report, load_model

    p = argparse.ArgumentParser(prog="lit-unlearn muse-eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p, "muse", batch_size=8)
    p.add_argument("--data", required=True, help="muse-bench/MUSE-News, muse-bench/MUSE-Books, or a local folder")
    p.add_argument("--reference", help="the retrained model's saved report (PrivLeak's AUC_retrain)")
    p.add_argument("--retrain-auc", type=float, help="AUC_retrain as a number instead (MUSE News, Min-40%%: 0.4772)")
    p.add_argument("--verbmem-max-new-tokens", type=int, default=128)
    p.add_argument("--knowmem-max-new-tokens", type=int, default=32)
    args = p.parse_args(argv)

    from lit_unlearn.data import MuseSource
    from lit_unlearn.metrics.muse_eval import MuseEvaluator

    network, tokenizer = load_model(args)
    report = MuseEvaluator(tokenizer, MuseSource(args.data), args.verbmem_max_new_tokens,
                           args.knowmem_max_new_tokens, args.batch_size, args.reference,
                           args.retrain_auc).run(network, args.device)
    finish_report(report, args, "muse")
