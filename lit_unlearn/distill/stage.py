"""The distillation stage: the unlearned model (the teacher, frozen) distilled into a shrunk and perturbed copy of
itself on the retain split and the general-knowledge sets, never the forget set, through the launch path (its own run
folder, resume, pre-emption safety; TensorBoard `distill/*`), then the student's full verdict.

The compute it costs is counted in token passes (lit_unlearn.modules.distill_robustify) against the retain-only
fine-tune it stands in for: `finetune_epochs` epochs over the same retain and general-knowledge items, 3 units per
token; both sums come from the data itself, so the printed share is what the runs read, not an estimate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lit_unlearn.algorithms.token_passes import training_units
from lit_unlearn.core.console import say
from lit_unlearn.distill.spec import DistillSpec

__all__ = ["distill_model", "distill_finished_run", "finetune_units", "distillation_data"]


def distillation_data(source, tokenizer, spec: DistillSpec, template: str = "plain", max_length: int = 512):
    """The retain split of `source`'s forget level and the general-knowledge sets (never a forget split)."""
    from lit_unlearn.data import QAFinetuneDataModule
    from lit_unlearn.data.tofu import FORGET_SPLITS
    from lit_unlearn.core.errors import UserError

    retain = FORGET_SPLITS[source.forget_level][1]
    splits = [retain, *spec.splits]
    if any(s.startswith("forget") for s in splits):
        raise UserError(f"distill: the data must not hold the forget set, got splits {splits}")
    return QAFinetuneDataModule(source, tokenizer, splits=tuple(splits), template=template, max_length=max_length,
                                batch_size=spec.batch_size, seed=spec.seed,
                                repeats={k: spec.knowledge_repeat for k in spec.splits}, length_buckets=8)


def finetune_units(data, epochs: float) -> tuple[int, int]:
    """(tokens in one epoch of `data`, the token-pass units of `epochs` epochs of fine-tuning on it: 3 per token)."""
    data.setup("fit")
    tokens = sum(len(data.train_set[i]["input_ids"]) for i in range(len(data.train_set)))
    return tokens, int(training_units(tokens, epochs))


def distill_model(teacher: str | Path, source, tokenizer, spec: DistillSpec, out: str | Path, base: str | None = None,
                  template: str = "plain", max_length: int = 512) -> dict:
    """Distil the model in `teacher` (a Hugging Face folder) into its shrunk and perturbed copy; the student is
    written to OUT/model. Returns the compute counts and where the student is."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from lit_unlearn.distributed.gathered_weights import gathered_weights
    from lit_unlearn.launch.runs import RunSpec, launch
    from lit_unlearn.models import CausalLM
    from lit_unlearn.models.hf_export import export_hf
    from lit_unlearn.modules import DistillRobustifyModule

    out = Path(out)
    data = distillation_data(source, tokenizer, spec, template, max_length)
    tokens, ft_units = finetune_units(data, spec.finetune_epochs)
    steps = max(1, math.ceil(spec.epochs * len(data.train_set) / spec.batch_size))
    model = DistillRobustifyModule(CausalLM(name_or_path=str(teacher)), teacher=str(teacher), alpha=spec.alpha,
                                   beta=spec.beta, init=spec.init, base=base, lr=spec.lr,
                                   lr_schedule=spec.lr_schedule, warmup_fraction=spec.warmup_fraction,
                                   temperature=spec.temperature, targets=spec.targets, positions=spec.positions,
                                   label_weight=spec.label_weight, seed=spec.seed, finetune_units=ft_units)
    identity = {"distill": spec.as_dict(), "teacher": str(Path(teacher).resolve()), "base": base,
                "data": getattr(source, "path", None), "level": source.forget_level}
    say(f"== distilling {teacher} into its shrunk and perturbed copy (alpha {spec.alpha}, {spec.init}; {steps} steps "
        f"over {', '.join(data.splits)}) ==")
    # every rank reads the same bucketed batch: several processes shard the memory (ZeRO), the step is one batch's
    trainer = {**spec.trainer, "max_steps": steps, "max_epochs": -1, "limit_val_batches": 0,
               "log_every_n_steps": min(5, steps),  # a short run logs its last step too
               "logger": TensorBoardLogger(save_dir=str(out), name="tensorboard")}
    launched = launch(RunSpec(out / "run", model, data, seed=spec.seed, identity=identity, progress=True,
                              trainer=trainer))
    student = launched.model
    with gathered_weights(student.network):  # every rank takes part; rank zero writes
        if launched.trainer.is_global_zero:
            export_hf(student.network, tokenizer, out / "model")
    launched.trainer.strategy.barrier("distill-export")  # no rank reads the student before it is written
    result = {"spec": spec.as_dict(), "steps": steps, "units": student.units(), "finetune_units": ft_units,
              "compute_share": student.units() / ft_units, "tokens_per_epoch": tokens,
              "model": str(out / "model"), "teacher": str(teacher)}
    if launched.trainer.is_global_zero:
        (out / "distill.json").write_text(json.dumps(result, indent=1))
    say(f"distillation: {student.units():,} token-pass units, {result['compute_share']:.0%} of the retain-only "
        f"fine-tune's {ft_units:,} ({spec.finetune_epochs} epochs over the same data)")
    return result


def distill_finished_run(launched, config: str | None = None) -> dict:
    """The stage after a finished LLM unlearning run: its final weights (`model/` in the run folder) distilled into
    their shrunk and perturbed copy in RUN/distill, then the student's full verdict on the reporting half, judged as
    the run's HoldoutVerification judged the teacher. `config`: a packaged distill config's name (configs/distill/)
    or a YAML file; None: distill_tofu."""
    from lit_unlearn.distill.spec import load_distill_spec
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.models import CausalLM
    from lit_unlearn.storage.packaged_files import packaged_config

    name = config or "distill_tofu"
    spec = load_distill_spec(name if name.endswith(".yaml") else packaged_config(name, ("distill",)))
    source = getattr(launched.datamodule, "source", None)
    run = launched.run
    if source is None or run is None or not (Path(run.path) / "model" / "config.json").is_file():
        raise UserError("--distill distils an LLM unlearning run's final model (a TofuDataModule run that wrote "
                        "model/)")
    dm = launched.datamodule
    world = Path(getattr(source, "path", "")).parent
    base = str(world / "base") if (world / "base" / "config.json").is_file() else None
    out = Path(run.path) / "distill"
    result = distill_model(Path(run.path) / "model", source, dm.tokenizer, spec, out, base=base,
                           template=getattr(dm.formatter, "template", "plain"),
                           max_length=getattr(dm.formatter, "max_length", 512))
    if spec.verdict:
        from lit_unlearn.callbacks import HoldoutVerification

        hv = next((cb for cb in launched.trainer.callbacks if isinstance(cb, HoldoutVerification)), None)
        if hv is None or hv.runner is None:
            raise UserError("--distill judges the student as the run judged the teacher: the run needs a "
                            "HoldoutVerification callback")
        # the student's objective reads no forget item; what the chain read is the unlearning method's
        verdict = hv.runner.verdict(CausalLM(name_or_path=result["model"]).eval(), "reporting",
                                    reads=launched.model.reads_statistics, log=say)
        result["verdict"] = verdict.as_dict()
        (out / "verdict.md").write_text(verdict.table() + "\n")
        (out / "distill.json").write_text(json.dumps(result, indent=1, default=float))
        say(f"DISTILLED: {verdict.headline()} ({result['compute_share']:.0%} of the retain-only fine-tune's compute)")
    return result
