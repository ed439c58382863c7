"""`lit-unlearn unlearn`: unlearn a trained target with a packaged method config and the user's overrides."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("unlearn", "unlearn a target (preset digits_hamu; --preset NAME, --target T, any LightningCLI override)",
         training=True, preset="digits_hamu", target=True, order=30,
         examples=("lit-unlearn unlearn", "lit-unlearn unlearn --preset digits_npo",
                   'lit-unlearn unlearn --target "ua within 0.05 of retrain"',
                   "lit-unlearn unlearn --model.init_args.eta=0.02 --ckpt_path last"))
def unlearn(lightning_args: list[str], preset: str, target: str | None = None, audit: bool = False,
            distill: str | None = None) -> None:
    """Unlearn a trained target. The preset's config comes first (default digits_hamu); --config files and
    --KEY=VALUE overrides follow and win, as in LightningCLI. Each run has its own folder; --ckpt_path last resumes
    this configuration's unfinished run (docs/cluster.md).

    Args:
        audit: LLM runs on TOFU-format data: when the run has finished, the full verdict on its final weights
            beside the target and a retain-only model (relearning, 4-bit quantisation, paraphrases; `lit-unlearn
            audit`) into the run's folder
        distill: LLM runs: then distil the final weights into their shrunk and perturbed copy on retain and
            general-knowledge data (a packaged configs/distill/ name, e.g. distill_tofu, or a YAML file), into
            RUN/distill, and give the student's full verdict
    """
    from lit_unlearn.launch.runs import build_run, fit_run

    launched = fit_run(build_run(lightning_args, preset, target))
    if audit:
        from lit_unlearn.audit.after_run import audit_finished_run

        audit_finished_run(launched)
    if distill:
        from lit_unlearn.distill import distill_finished_run

        distill_finished_run(launched, distill)
