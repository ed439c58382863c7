"""`lit-unlearn unlearn`: unlearn a trained model, from a packaged preset, your YAML, or the short form of your own
job (a model folder, data files, a method and a run root)."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("unlearn", "unlearn a model: your own (--model-dir, --forget, --retain, --holdout, --method) or a preset",
         training=True, preset="digits_hamu", target=True, order=30,
         examples=("lit-unlearn unlearn --model-dir my-llama --forget forget.jsonl --retain retain.jsonl "
                   "--holdout holdout.jsonl --method hamu --out runs/mine",
                   "lit-unlearn unlearn --model-dir my-llama --forget f.jsonl --retain r.jsonl --print_config "
                   "> my_job.yaml",
                   "lit-unlearn unlearn --config my_job.yaml --ckpt_path last",
                   "lit-unlearn unlearn --preset tofu_tiny_hamu",
                   "lit-unlearn unlearn --model.init_args.eta=0.02 --ckpt_path last"))
def unlearn(lightning_args: list[str], preset: str, target: str | None = None, model_dir: str | None = None,
            forget: str | None = None, retain: str | None = None, holdout: str | None = None,
            method: str | None = None, out: str | None = None, data_format: str | None = None,
            columns: str | None = None, base_model: str | None = None, setup: str | None = None,
            audit: bool = False, distill: str | None = None) -> None:
    """Unlearn a trained model. Your own job in one line: --model-dir (a Hugging Face folder), --forget and
    --retain files (JSON, JSONL, parquet, CSV or a saved dataset), --holdout for the verdict, --method and --out;
    the packaged own_METHOD preset takes them (`--print_config` shows the whole config). Otherwise the preset's config
    comes first (default digits_hamu, unless a --config file names what it extends with `# extends:`); --config
    files and --KEY=VALUE overrides follow and win, as in LightningCLI.
    Each run has its own folder; --ckpt_path last resumes this configuration's unfinished run.

    Args:
        model_dir: your model: a Hugging Face folder (config.json, safetensors weights, tokenizer) or hub name
        forget: the data to forget: a file or saved-dataset folder
        retain: the data to keep
        holdout: items of the same kind the model never saw: the verdict compares the forget set with them
        method: hamu (default), ofmu, hamu_holdout_match, graddiff, npo, simnpo, rmu, ga, idkdpo
        out: the run root (default runs/own): runs go to OUT/METHOD/version_N
        data_format: qa (default), chat (a messages column) or text (plain documents)
        columns: your column names, e.g. question=prompt,answer=completion
        base_model: the model yours was fine-tuned from: the verdict scores relative to it
        setup: hardware settings: gpu (one GPU, bf16) or zero3 (DeepSpeed ZeRO-3 on every GPU)
        audit: LLM runs on TOFU-format data: when the run has finished, the full verdict on its final weights
            beside the target and a retain-only model (relearning, 4-bit quantisation, paraphrases; `lit-unlearn
            audit`) into the run's folder
        distill: LLM runs: then distil the final weights into their shrunk and perturbed copy on retain and
            general-knowledge data (a packaged configs/distill/ name, e.g. distill_tofu, or a YAML file), into
            RUN/distill, and give the student's full verdict
    """
    from lit_unlearn.launch.own_job import own_job_arguments
    from lit_unlearn.launch.runs import build_run, fit_run

    own = own_job_arguments(model_dir, forget, retain, holdout, method, out, data_format, columns, base_model, setup)
    if own is not None:
        preset, args = own
        lightning_args = [*args, *lightning_args]
    launched = fit_run(build_run(lightning_args, preset, target))
    if audit:
        from lit_unlearn.audit.after_run import audit_finished_run

        audit_finished_run(launched)
    if distill:
        from lit_unlearn.distill import distill_finished_run

        distill_finished_run(launched, distill)
