"""`lit-unlearn tofu-demo`: the offline TOFU job: a world built from the real TOFU release, then unlearning verified
against holdout authors (no retrained model), with the TOFU table and the retain-only model as a gold standard."""

from __future__ import annotations

from typing import Literal

from lit_unlearn.commands import command

ROOT = "runs/tofu"  # the packaged tofu_tiny_* configs read runs/tofu/world
DEFAULT_PRESET = "tofu_tiny_holdout_match"
# The default's settings chosen at a level (docs/findings/tofu-world.md), run whenever the preset is the default's name; to run the
# forget01 settings at forget10: --model.init_args.lr=1e-3 --trainer.max_steps=150.
LEVEL_PRESETS = {"10": "tofu_tiny_holdout_match_10"}


@command("tofu-demo", "offline TOFU from the real release: tiny target, unlearning verified against holdout authors",
         training=True, preset=DEFAULT_PRESET, target=True, order=55,
         examples=("lit-unlearn tofu-demo", "lit-unlearn tofu-demo --seed 1", "lit-unlearn tofu-demo --level 05",
                   "lit-unlearn tofu-demo --preset tofu_tiny_hamu", "lit-unlearn tofu-demo --generated"))
def tofu_demo(lightning_args: list[str], preset: str, target: str | None = None, seed: int = 0,
              level: Literal["01", "05", "10"] = "01", fresh: bool = False, generated: bool = False,
              worlds: str = f"{ROOT}/worlds", audit: bool = False, distill: str | None = None) -> None:
    """The offline TOFU job (2 min 54 s from nothing on a 2-core AVX2 machine, 5 min 14 s with --fresh; measured in
    docs/findings/tofu-world.md): a world built from the real TOFU release
    shipped with the package (40 of its authors, its forget, perturbed, holdout and general-knowledge splits), a
    tiny Llama target fine-tuned on the retain and forget authors together, a retain-only model (the gold
    standard, for the report only), then unlearning of TOFU's forget01 (--level) verified against TOFU's holdout
    authors: membership attacks cannot tell forget from holdout items (an equivalence test on the half of the items
    no decision read). The default (HoldoutMatch: each forget item's per-token surprisal and Min-K %++ scores
    steered to the holdout items', the retain set kept) stops at "holdout_band_ratio <= 1 and model_utility_ratio
    >= 0.95" and ends on the closest weights (at --level 10, tofu_tiny_holdout_match_10: half the rate, up to 300
    steps); `--preset tofu_tiny_hamu` runs HAMU instead. Worlds are cached
    under runs/tofu/worlds/ (--worlds, one folder per seed and recipe) and runs/tofu/world points at the one in use;
    the world of seed 0 ships prebuilt with the package and is copied there, not trained.

    Args:
        seed: the world seed (the models' initialisation and batch order) and the unlearning run's seed
        level: the forget level: forget01 (2 authors), forget05 (10) or forget10 (20)
        fresh: build the world's models and reports here, again (seed 0's too, instead of the prebuilt copy)
        generated: use the generated fictitious-author stand-in instead of the real release (runs/tofu/generated)
        worlds: where worlds are built and cached (share one across projects)
        audit: then the full verdict on the result beside the world's target and retain-only model (relearning,
            4-bit quantisation, paraphrases; `lit-unlearn audit`), into the run's folder
        distill: then distil the result into its shrunk and perturbed copy (a configs/distill/ name, e.g.
            distill_tofu, or a YAML file) into RUN/distill, and give the student's full verdict
    """
    from lit_unlearn.core.console import say
    from lit_unlearn.launch.runs import build_run, fit_run

    overrides = [f"--seed_everything={seed}", f"--data.init_args.seed={seed}"]
    if generated:  # 40 generated authors × 8 questions: only forget10 (4 authors) is large enough to test
        from lit_unlearn.worlds.generated_tofu import prepare_generated_tofu

        folder, level = prepare_generated_tofu(f"{ROOT}/generated/seed{seed}", fresh, seed=seed,
                                               log=say)["data"].parent, "10"
        overrides.append(f"--data.init_args.source.init_args.forget_level={level}")
    else:
        from lit_unlearn.worlds.tofu_world import prepare_tofu_world

        folder = prepare_tofu_world(worlds, seed=seed, levels=(level,), fresh=fresh, log=say).folder
        overrides.append(f"--data.init_args.source.init_args.forget_level={level}")
    _point_world(folder)
    if preset == DEFAULT_PRESET and level in LEVEL_PRESETS:
        preset = LEVEL_PRESETS[level]
    say(f"== unlearning forget{level} with {preset} (seed {seed}) ==")
    launched = fit_run(build_run([*overrides, *lightning_args], preset, target))
    if audit:
        from lit_unlearn.audit.after_run import audit_finished_run

        audit_finished_run(launched)
    if distill:
        from lit_unlearn.distill import distill_finished_run

        distill_finished_run(launched, distill)
    say(f"TensorBoard: tensorboard --logdir {ROOT}")


def _point_world(folder) -> None:
    """runs/tofu/world → the world in use (a relative symbolic link, swapped atomically)."""
    import os
    from pathlib import Path

    from lit_unlearn.storage.files import atomic_symlink

    Path(ROOT).mkdir(parents=True, exist_ok=True)  # the worlds may live elsewhere (--worlds)
    atomic_symlink(Path(ROOT) / "world", os.path.relpath(folder, ROOT))
