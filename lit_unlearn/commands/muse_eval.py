"""`lit-unlearn muse-eval`: the MUSE table of one model, optionally saved as the reference for PrivLeak."""

from __future__ import annotations

from typing import Literal

from lit_unlearn.commands import command


@command("muse-eval", "the MUSE table (VerbMem, KnowMem, PrivLeak, ES, EM) of one model", order=70,
         examples=("lit-unlearn muse-eval --model muse-bench/MUSE-news_retrain --tokenizer meta-llama/Llama-2-7b-hf "
                   "--data muse-bench/MUSE-News --save runs/muse/retrain_eval.json",
                   "lit-unlearn muse-eval --model runs/muse/npo/version_0/checkpoints/last.ckpt --base "
                   "muse-bench/MUSE-news_target --data muse-bench/MUSE-News --reference runs/muse/retrain_eval.json"))
def muse_eval(model: str, data: str, base: str | None = None, tokenizer: str | None = None,
              reference: str | None = None, retrain_auc: float | None = None, verbmem_max_new_tokens: int = 128,
              knowmem_max_new_tokens: int = 32, batch_size: int = 8, max_length: int = 2048,
              dtype: Literal["float32", "bfloat16", "float16"] = "float32", device: str | None = None,
              save: str | None = None, logdir: str | None = None) -> None:
    """The MUSE table (VerbMem, KnowMem on D_f and D_r, PrivLeak, ES, EM) of one model, optionally saved as the
    reference for PrivLeak and logged to TensorBoard.

    Args:
        model: HF folder or hub name, or a .ckpt of an unlearning run
        data: muse-bench/MUSE-News, muse-bench/MUSE-Books, or a local folder
        base: with a .ckpt: the HF model it was trained from (architecture)
        tokenizer: tokenizer folder or hub name (default: the model's folder)
        reference: the retrained model's saved report (PrivLeak's AUC_retrain)
        retrain_auc: AUC_retrain as a number instead (MUSE News, Min-40%: 0.4772)
        verbmem_max_new_tokens: VerbMem continuation length
        knowmem_max_new_tokens: KnowMem answer length
        batch_size: evaluation batch size
        max_length: longest scored sequence (MUSE's 2048; longer texts keep their last tokens)
        dtype: the model's parameter dtype
        device: cpu or cuda (default: cuda when available)
        save: write the report as JSON here
        logdir: also log the summary as TensorBoard scalars (muse/...) here
    """
    from lit_unlearn.data import MuseSource
    from lit_unlearn.metrics.muse.evaluator import MuseEvaluator
    from lit_unlearn.metrics.report_io import finish_report
    from lit_unlearn.models.loading import load_causal_lm

    network, tok = load_causal_lm(model, base, tokenizer, dtype, device)
    report = MuseEvaluator(tok, MuseSource(data), verbmem_max_new_tokens, knowmem_max_new_tokens, batch_size,
                           reference, retrain_auc, max_length=max_length).run(network, device)
    finish_report(report, "muse", save, logdir)
