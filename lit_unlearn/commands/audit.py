"""`lit-unlearn audit`: does an unlearned model's forgetting survive relearning, quantisation and paraphrased
questions? Measured against holdout data, beside the target and a retain-only model where one exists."""

from __future__ import annotations

from typing import Literal

from lit_unlearn.commands import command


@command("audit", "the full verdict on an unlearned model: relearning, 4-bit quantisation, every attack",
         order=58, examples=("lit-unlearn audit --model runs/mine/hamu/latest/model --forget data/forget.jsonl "
                             "--holdout data/holdout.jsonl --columns question=prompt,answer=completion --target my-model",
                             "lit-unlearn audit --model runs/tofu/hamu/latest/model --data runs/tofu/world/data "
                             "--target runs/tofu/world/target --retain-only runs/tofu/world/retain_only_01 "
                             "--reference-model runs/tofu/world/base",
                             "lit-unlearn audit --model OUT --data locuslab/TOFU --level 10 --template llama2"))
def audit(model: str, data: str | None = None, level: Literal["01", "05", "10"] = "01", forget: str | None = None,
          holdout: str | None = None, columns: str | None = None, data_format: str | None = None,
          target: str | None = None,
          retain_only: str | None = None, base: str | None = None, reference_model: str | None = None,
          tokenizer: str | None = None,
          preset: str = "audit_tofu", config: str | None = None, out: str = "runs/audit",
          template: Literal["plain", "llama2", "chat"] = "plain", device: str | None = None) -> None:
    """Attack an unlearned model the ways the literature brings "forgotten" knowledge back, and measure each time
    whether its forget items can be told from holdout items by any membership attack, the learned one included (the
    full reference-free verdict, on the reporting half): relearning on some forget authors at four learning rates
    and two step counts (measured on the others; the worst counts), round-to-nearest 4-bit weights, and, as a probe
    beside the verdict, TOFU's paraphrased questions. The target (the upper bound) and, if given, a retain-only model
    (the gold standard) are judged alike. Prints one verdict naming the attack that recovers the forget set; writes
    OUT/audit.{md,json} and TensorBoard audit/* under OUT/tensorboard.

    Args:
        model: the unlearned model: a Hugging Face folder (every LLM run writes one in its run folder, `model/`) or
            hub name, or a .ckpt of an unlearning run with --base
        data: TOFU-format data: a local folder of split files or a hub name (locuslab/TOFU); or --forget and
            --holdout for your own files
        level: with --data: the forget level (forget01/05/10 and holdout01/05/10)
        forget: your forget file (as `lit-unlearn unlearn --forget` takes it)
        holdout: your holdout file: items of the same kind the model never saw
        columns: your column names, e.g. question=prompt,answer=completion
        data_format: qa (default), chat or text
        target: the model before unlearning (same forms), attacked alike as the upper bound
        retain_only: a model trained without the forget set, attacked alike as the gold standard (optional)
        base: with a .ckpt model: the Hugging Face model it was trained from
        reference_model: the model the target was fine-tuned from (a folder or hub name; Llama-2-7b-chat for TOFU's
            7B target): every score is taken relative to it, with the calibration of relative scores; without it the
            scores are raw
        tokenizer: tokenizer folder or hub name (default: the model's)
        preset: a packaged audit config (its attacks' settings)
        config: an audit config file instead (see configs/audit/audit_tofu.yaml)
        out: output folder
        template: QA template
        device: cpu or cuda (default: cuda when available)
    """
    from lit_unlearn.audit import load_audit_spec, run_audit
    from lit_unlearn.data import TofuSource
    from lit_unlearn.models.loading import default_device, load_causal_lm
    from lit_unlearn.storage.packaged_files import packaged_config

    from lit_unlearn.core.errors import UserError

    spec = load_audit_spec(config or packaged_config(preset, ("audit",), "audit"))
    if (data is None) == (forget is None):
        raise UserError("give the data either as --data (TOFU's layout) or as --forget and --holdout (your files)")
    if forget is not None:
        from dataclasses import replace

        from lit_unlearn.data.own_data import OwnData
        from lit_unlearn.launch.own_job import parse_columns

        source = OwnData(forget=forget, holdout=holdout, columns=parse_columns(columns) if columns else None,
                         format=data_format or "qa")
        if holdout is None:
            raise UserError("the audit compares the forget items with holdout items: give --holdout FILE")
        if spec.paraphrase and not all(r.get("paraphrased_question") for r in source.rows("forget")):
            print("note: the forget data has no paraphrased_question column: the paraphrase probe is skipped")
            spec = replace(spec, paraphrase=False)
    else:
        source = TofuSource(data, level)
    device = device or default_device()
    network, tok = load_causal_lm(model, base, tokenizer, device=device)
    subjects = {"unlearned": network}
    for name, path in (("target", target), ("retain-only", retain_only)):
        if path is not None:
            subjects[name] = load_causal_lm(path, base, tokenizer, device=device)[0]
    reference = None
    if reference_model is not None:
        reference = load_causal_lm(reference_model, None, tokenizer, device=device)[0]
    report = run_audit(subjects, tok, source, spec, out, device=device, template=template,
                       reference_model=reference)
    print(report.table())
    print(f"AUDIT: {report.results['unlearned']['verdict']['headline']}")
    print(f"(written to {out}/audit.md, {out}/audit.json; TensorBoard: {out}/tensorboard)")
