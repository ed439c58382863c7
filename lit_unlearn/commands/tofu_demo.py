"""`lit-unlearn tofu-demo`: the offline TOFU job: a world built from the real TOFU release, then unlearning with the
TOFU table and its verification against the retain-only model."""

from __future__ import annotations

from lit_unlearn.commands import command

ROOT = "runs/tofu"  # the packaged tofu_tiny_* configs read runs/tofu/world


@command("tofu-demo", "offline TOFU from the real release: tiny target and retain-only model, unlearning, TOFU table",
         training=True, preset="tofu_tiny_hamu", target=True, order=55,
         examples=("lit-unlearn tofu-demo", "lit-unlearn tofu-demo --seed 1",
                   "lit-unlearn tofu-demo --preset tofu_tiny_npo", "lit-unlearn tofu-demo --generated"))
def tofu_demo(lightning_args: list[str], preset: str, target: str | None = None, seed: int = 0,
              fresh: bool = False, generated: bool = False, worlds: str = f"{ROOT}/worlds") -> None:
    """The offline TOFU job (about 3 minutes on 2 CPU cores from nothing): a world built from the real TOFU release
    shipped with the package (40 of its authors, its forget, perturbed, holdout and general-knowledge splits), a
    tiny Llama target fine-tuned on all of them and a retain-only model fine-tuned without the forget authors (both
    from one shared base), the retain-only model's report (forget quality's reference), then unlearning of TOFU's
    forget01 with the TOFU table and its verification before and after. The default (HAMU with the quota
    controller) stops at "forget_quality >= 0.05 and model_utility_ratio >= 0.9" and ends on the closest weights.
    Worlds are kept per seed under runs/tofu/worlds/ (--worlds) and runs/tofu/world points at the one in use.

    Args:
        seed: the world seed (the models' initialisation and batch order) and the unlearning run's seed
        fresh: build the world's models and reports again
        generated: use the generated fictitious-author stand-in instead of the real release (runs/tofu/generated)
        worlds: where worlds are built and cached, one folder per seed (share one across projects)
    """
    from lit_unlearn.console import say
    from lit_unlearn.launch.runs import build_run, fit_run

    overrides = [f"--seed_everything={seed}", f"--data.init_args.seed={seed}"]
    if generated:  # 40 generated authors × 8 questions: only forget10 (4 authors) is large enough to test
        from lit_unlearn.worlds.generated_tofu import prepare_generated_tofu

        folder, level = prepare_generated_tofu(f"{ROOT}/generated/seed{seed}", fresh, seed=seed,
                                               log=say)["data"].parent, "10"
        overrides.append(f"--data.init_args.source.init_args.forget_level={level}")
    else:
        from lit_unlearn.worlds.tofu_world import prepare_tofu_world

        folder, level = prepare_tofu_world(f"{worlds}/seed{seed}", seed=seed, levels=("01",), fresh=fresh,
                                           log=say).folder, "01"
    _point_world(folder)
    say(f"== unlearning forget{level} with {preset} (seed {seed}) ==")
    fit_run(build_run([*overrides, *lightning_args], preset, target))
    say(f"TensorBoard: tensorboard --logdir {ROOT}")


def _point_world(folder) -> None:
    """runs/tofu/world → the world in use (a relative symbolic link, swapped atomically)."""
    import os
    from pathlib import Path

    Path(ROOT).mkdir(parents=True, exist_ok=True)  # the worlds may live elsewhere (--worlds)
    link = Path(ROOT) / "world"
    tmp = Path(ROOT) / f".world-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(folder, ROOT), target_is_directory=True)
    os.replace(tmp, link)
