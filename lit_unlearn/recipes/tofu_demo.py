"""The offline TOFU job: fictitious authors → tokenizer → target and retain-only models → unlearning → table.

    lit-unlearn tofu-demo [--preset tofu_tiny_hamu] [--fresh] [LightningCLI overrides...]     (writes runs/tofu)

Everything goes under runs/tofu (the packaged tofu_tiny_* configs read from there):
1. writes the generated fictitious-author set (TOFU format) to OUT/data and trains a BPE tokenizer on it;
2. fine-tunes a tiny random Llama on everything (the target, OUT/target) and on the retain split only (the
   retrain reference, OUT/retrain); both also learn the general-knowledge sets and the paraphrased phrasing of
   the facts they are allowed to know, which stands in for pretraining;
3. evaluates the reference and stores its per-item values (OUT/retrain_eval.json, needed for forget quality);
4. unlearns the target with the packaged config (HAMU by default) through LightningCLI, with the TOFU
   evaluation callback: TensorBoard logs and tofu_results.{md,json} under OUT/<method>/version_N.
Steps 1-3 are skipped when their outputs exist (--fresh redoes them).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import lightning.pytorch as pl

__all__ = ["prepare_tofu_assets", "run_tofu_demo", "TINY_SIZE"]

TINY_SIZE = {"hidden_size": 128, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 256}


def _corpus(data: Path) -> list[str]:
    """The tokenizer's training text: every distinct question + answer variant once (the splits overlap, and
    counting a text once per file would merge forget authors' names more than holdout authors')."""
    import json

    texts = {r["question"] + " " + a: None for f in sorted(data.glob("*.json")) for r in json.loads(f.read_text())
             for a in [r["answer"], r.get("paraphrased_answer", ""), *r.get("perturbed_answer", [])] if a}
    return list(texts)


def train_tiny_llama(out: Path, tokenizer, data, epochs: int, lr: float, seed: int) -> None:
    """Train a fresh tiny Llama (TINY_SIZE) on `data` (a DataModule or a DataLoader of token batches) with AdamW,
    and save it with its tokenizer to `out`."""
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.modules import SupervisedModule

    pl.seed_everything(seed, verbose=False)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tokenizer), **TINY_SIZE), seed=seed)
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_model_summary=False,
                         enable_progress_bar=False, accelerator="cpu", devices=1)
    trainer.fit(SupervisedModule(net, lr=lr), data)
    net.save_pretrained(out)
    tokenizer.save_pretrained(str(out))


def _finetune(out: Path, data: Path, tokenizer, rows_from: tuple[str, ...], keep: set[str] | None, epochs: int,
              lr: float, seed: int) -> None:
    """Fine-tune a fresh tiny Llama on the named splits plus paraphrases of the allowed facts."""
    from lit_unlearn.data import QAFinetuneDataModule, TofuSource

    source = TofuSource(str(data))
    paraphrases = [{"question": r["question"], "answer": r["paraphrased_answer"]}
                   for r in source.load_split("full_perturbed") if keep is None or r["question"] in keep]
    dm = QAFinetuneDataModule(source, tokenizer, splits=rows_from, batch_size=32, seed=seed, extra_rows=paraphrases)
    train_tiny_llama(out, tokenizer, dm, epochs, lr, seed)


def reference_paths(out: str | Path, forget_level: str = "10") -> tuple[Path, Path]:
    """(retain-only model folder, its saved report) for a forget level; forget10's keep their original names."""
    out = Path(out)
    suffix = "" if forget_level == "10" else f"_{forget_level}"
    return out / f"retrain{suffix}", out / f"retrain_eval{suffix}.json"


def prepare_tofu_assets(out: str | Path = "runs/tofu", fresh: bool = False, epochs: int = 30, lr: float = 3e-3,
                        forget_level: str = "10", seed: int = 0, log=print, n_authors: int = 40,
                        max_new_tokens: int = 48) -> dict[str, Path]:
    """Data, tokenizer, target, and the retain-only reference of `forget_level` with its report (each made once)."""
    from lit_unlearn.data import TofuSource, train_bpe_tokenizer, write_tofu_json
    from lit_unlearn.data.tofu import FORGET_SPLITS
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    out = Path(out)
    retrain, reference = reference_paths(out, forget_level)
    paths = {"data": out / "data", "tokenizer": out / "tokenizer", "target": out / "target",
             "retrain": retrain, "reference": reference}
    if fresh:
        for p in paths.values():
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    if not (paths["data"] / "full.json").is_file():
        log(f"== writing the fictitious-author QA set (TOFU format) to {paths['data']} ==")
        write_tofu_json(paths["data"], seed=seed, n_authors=n_authors)
    if not (paths["tokenizer"] / "tokenizer.json").is_file():
        train_bpe_tokenizer(_corpus(paths["data"]), paths["tokenizer"], vocab_size=512)
    from lit_unlearn.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(paths["tokenizer"]))
    source = TofuSource(str(paths["data"]), forget_level)
    _, retain_split = FORGET_SPLITS[forget_level]
    knowledge = ("real_authors", "world_facts")
    if not (paths["target"] / "config.json").is_file():
        log(f"== fine-tuning the target on all authors ({epochs} epochs) ==")
        _finetune(paths["target"], paths["data"], tokenizer, ("full", *knowledge), None, epochs, lr, seed)
    if not (paths["retrain"] / "config.json").is_file():
        log(f"== fine-tuning the retain-only reference on {retain_split} ==")
        keep = {r["question"] for r in source.load_split(retain_split)}
        _finetune(paths["retrain"], paths["data"], tokenizer, (retain_split, *knowledge), keep, epochs, lr, seed)
    if not paths["reference"].is_file():
        log("== evaluating the reference (its per-item values make forget quality computable) ==")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reference itself has no reference
            report = TofuEvaluator(tokenizer, source.eval_splits(), max_new_tokens=max_new_tokens).run(
                CausalLM(name_or_path=str(paths["retrain"])))
        report.save(paths["reference"])
    return paths


HELP = """usage: lit-unlearn tofu-demo [--preset NAME] [--fresh] [--target TARGET] [--KEY=VALUE ...]

The offline TOFU job (about a minute on CPU): a generated fictitious-author QA set in TOFU's format, a tokenizer
trained on it, a tiny Llama fine-tuned on everything (the target) and on the retain split (the retain-only
reference, evaluated once so forget quality can be computed), then unlearning of forget10 with the TOFU table
before and after. Everything goes under runs/tofu; steps already done are reused (--fresh redoes them).

options:
  --preset NAME      the unlearning config (default tofu_tiny_hamu; tofu_tiny_{ga,graddiff,kl,npo,simnpo,idkdpo,rmu,ft,ofmu})
  --fresh            regenerate the data, tokenizer, target and reference
  --target TARGET    stop at a TOFU target, e.g. "forget_quality >= 0.1" (scored every few steps, no generation)
  --KEY=VALUE        LightningCLI overrides, e.g. --trainer.max_steps=40
"""


def run_tofu_demo(argv: list[str]) -> None:
    from lit_unlearn.console import say
    from lit_unlearn.errors import UserError
    from lit_unlearn.recipes.fit import build_run, fit_run

    if any(a in ("-h", "--help") for a in argv):
        print(HELP)
        return
    out, fresh, preset, rest = "runs/tofu", False, "tofu_tiny_hamu", []  # the packaged configs point here
    i = 0
    while i < len(argv):
        if argv[i] == "--fresh":
            fresh, i = True, i + 1
        elif argv[i] == "--preset":
            if i + 1 >= len(argv):
                raise UserError("--preset needs a config name, e.g. tofu_tiny_npo")
            preset, i = argv[i + 1], i + 2
        else:
            rest.append(argv[i])
            i += 1
    prepare_tofu_assets(out, fresh, log=say)
    say(f"== unlearning forget10 with {preset} ==")
    fit_run(*build_run(["--preset", preset, *rest], preset))
    say(f"TensorBoard: tensorboard --logdir {out}")
