"""`lit-unlearn tofu-eval`: the TOFU table of one model, optionally saved as the reference for forget quality."""

from __future__ import annotations

from typing import Literal

from lit_unlearn.commands import command


@command("tofu-eval", "the TOFU table (forget quality, model utility, ROUGE, MIA) of one model", order=60,
         examples=("lit-unlearn tofu-eval --model runs/tofu/world/retain_only_01 --data runs/tofu/world/data "
                   "--level 01 --save runs/tofu/ref.json",
                   "lit-unlearn tofu-eval --model runs/tofu/hamu/latest/checkpoints/last.ckpt --base "
                   "runs/tofu/world/target --data runs/tofu/world/data --level 01 --reference "
                   "runs/tofu/world/retain_only_01_eval.json --logdir runs/tofu/eval",
                   "lit-unlearn tofu-eval --model open-unlearning/tofu_Llama-2-7b-chat-hf_full "
                   "--tokenizer meta-llama/Llama-2-7b-chat-hf --data locuslab/TOFU --template llama2"))
def tofu_eval(model: str, data: str, base: str | None = None, tokenizer: str | None = None,
              level: Literal["01", "05", "10"] = "01", template: Literal["plain", "llama2", "chat"] = "plain",
              reference: str | None = None, require_reference: bool = False,
              mia_convention: Literal["lit-unlearn", "open-unlearning"] = "lit-unlearn",
              input_format: Literal["lit-unlearn", "open-unlearning"] = "lit-unlearn", gradnorm: bool = True,
              max_new_tokens: int | None = None, batch_size: int = 32, max_length: int = 512,
              dtype: Literal["float32", "bfloat16", "float16"] = "float32", device: str | None = None,
              save: str | None = None, format: Literal["lit-unlearn", "open-unlearning"] = "lit-unlearn",
              logdir: str | None = None) -> None:
    """The TOFU table (FQ, MU, FTR, ROUGE, MIA) of one model, optionally saved as the reference for forget quality
    and logged to TensorBoard.

    Args:
        model: HF folder or hub name, or a .ckpt of an unlearning run
        data: TOFU hub name (locuslab/TOFU) or a local folder of split files
        base: with a .ckpt: the HF model it was trained from (architecture)
        tokenizer: tokenizer folder or hub name (default: the model's folder)
        level: the forget level: forget01 (2 authors), forget05 (10) or forget10 (20), as in `audit` and
            `tofu-demo`
        template: QA template
        reference: the retain-only model's evaluation, for forget quality: a lit-unlearn report, the TOFU authors'
            per-item logs (a folder with eval_log_forget.json ...) or open-unlearning's TOFU_EVAL.json (detected)
        require_reference: fail instead of reporting forget quality as missing
        mia_convention: how Min-K%, Min-K%++, zlib, ES/EM and privleak's fallback are computed (docs/guide/llm.md)
        input_format: tokenisation of the template: ours, or open-unlearning's (to set numbers beside its tables)
        gradnorm: run the gradient-norm MIA (a backward pass per forget/holdout item; --no-gradnorm skips it)
        max_new_tokens: greedy generation length for ROUGE (default: enough for ≥ 95 % of each split's answers,
            at most TOFU's 200)
        batch_size: evaluation batch size
        max_length: longest scored sequence (prompt + answer; TOFU's 512): longer ones are cut, counted per split
            in the table and the JSON, and warned about
        dtype: the model's parameter dtype
        device: cpu or cuda (default: cuda when available)
        save: write the report (summary + per-item values) as JSON here; with --format open-unlearning, a folder
            for TOFU_EVAL.json and TOFU_SUMMARY.json
        format: lit-unlearn's report, or open-unlearning's TOFU_EVAL.json / TOFU_SUMMARY.json layout
        logdir: also log the summary as TensorBoard scalars (tofu/...) here
    """
    import time

    from lit_unlearn.data import TofuSource
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.metrics.report_io import finish_report
    from lit_unlearn.models.loading import load_causal_lm

    network, tok = load_causal_lm(model, base, tokenizer, dtype, device)
    source = TofuSource(data, level)
    started = time.perf_counter()
    report = TofuEvaluator(tok, source.eval_splits(), template=template, max_new_tokens=max_new_tokens,
                           max_length=max_length,
                           batch_size=batch_size, reference=reference, require_reference=require_reference,
                           mia_convention=mia_convention, input_format=input_format,
                           gradnorm=gradnorm).run(network, device)
    seconds = time.perf_counter() - started
    if format == "open-unlearning":
        if not save:
            raise UserError("--format open-unlearning writes TOFU_EVAL.json and TOFU_SUMMARY.json: give --save FOLDER")
        import json
        from pathlib import Path

        from lit_unlearn.metrics.reference_formats import open_unlearning_logs

        logs, summary = open_unlearning_logs(report)
        Path(save).mkdir(parents=True, exist_ok=True)
        (Path(save) / "TOFU_EVAL.json").write_text(json.dumps(logs, indent=4, default=float))
        (Path(save) / "TOFU_SUMMARY.json").write_text(json.dumps(summary, indent=4, default=float))
        save = str(Path(save) / "lit_unlearn_report.json")
    finish_report(report, "tofu", save, logdir)
    print(f"(evaluated in {seconds:.2f} s)")
