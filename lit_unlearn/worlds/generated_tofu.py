"""The generated TOFU stand-in (fictitious authors written by lit_unlearn.data.fictitious_authors): data →
tokenizer → target and retain-only models → the retain-only model's report. Kept as an option beside the world
built from the real TOFU release (lit_unlearn.worlds.tofu_world).

Everything goes under OUT:
1. the generated fictitious-author set (TOFU format) in OUT/data and a BPE tokenizer trained on it;
2. a tiny random Llama fine-tuned on everything (the target, OUT/target) and on the retain split only
   (OUT/retain_only_{level});
   both also learn the general-knowledge sets and the paraphrased phrasing of the facts they are allowed to know,
   which stands in for pretraining;
3. the retain-only model's report with per-item values (OUT/retain_only_{level}_eval.json, forget quality's
   reference; the same layout as the real TOFU world's, so the tofu_tiny_* configs' reference="world" finds it).
Each step is skipped when its output exists (fresh=True redoes them).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lit_unlearn.worlds.tiny_llama import tiny_network_spec, train_tiny_llama

__all__ = ["prepare_generated_tofu", "reference_paths"]


def _corpus(data: Path) -> list[str]:
    """The tokenizer's training text: every distinct question + answer variant once (the splits overlap, and
    counting a text once per file would merge forget authors' names more than holdout authors')."""
    import json

    texts = {r["question"] + " " + a: None for f in sorted(data.glob("*.json")) for r in json.loads(f.read_text())
             for a in [r["answer"], r.get("paraphrased_answer", ""), *r.get("perturbed_answer", [])] if a}
    return list(texts)


def _finetune(out: Path, data: Path, tokenizer, rows_from: tuple[str, ...], keep: set[str] | None, epochs: int,
              lr: float, seed: int) -> None:
    """Fine-tune a fresh tiny Llama on the named splits plus paraphrases of the allowed facts."""
    from lit_unlearn.data import QAFinetuneDataModule, TofuSource

    source = TofuSource(str(data))
    paraphrases = [{"question": r["question"], "answer": r["paraphrased_answer"]}
                   for r in source.load_split("full_perturbed") if keep is None or r["question"] in keep]
    dm = QAFinetuneDataModule(source, tokenizer, splits=rows_from, batch_size=32, seed=seed, extra_rows=paraphrases)
    identity = {"world": "generated", "data": str(data.resolve()), "splits": list(rows_from), "epochs": epochs,
                "paraphrases_kept": None if keep is None else sorted(keep)}
    train_tiny_llama(out, tokenizer, dm, epochs, lr, seed, identity=identity,
                     network=tiny_network_spec(len(tokenizer), seed, max_positions=256))


def reference_paths(out: str | Path, forget_level: str = "10") -> tuple[Path, Path]:
    """(retain-only model folder, its saved report) for a forget level."""
    out = Path(out)
    return out / f"retain_only_{forget_level}", out / f"retain_only_{forget_level}_eval.json"


def prepare_generated_tofu(out: str | Path = "runs/tofu", fresh: bool = False, epochs: int = 30, lr: float = 3e-3,
                        forget_level: str = "10", seed: int = 0, log=print, n_authors: int = 40,
                        max_new_tokens: int = 48) -> dict[str, Path]:
    """Data, tokenizer, target, and the retain-only reference of `forget_level` with its report (each made once)."""
    from lit_unlearn.data import TofuSource, train_bpe_tokenizer, write_tofu_json
    from lit_unlearn.data.tofu import FORGET_SPLITS
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    out = Path(out)
    retain_only, reference = reference_paths(out, forget_level)
    paths = {"data": out / "data", "tokenizer": out / "tokenizer", "target": out / "target",
             "retain_only": retain_only, "reference": reference}
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
    if not (paths["retain_only"] / "config.json").is_file():
        log(f"== fine-tuning the retain-only reference on {retain_split} ==")
        keep = {r["question"] for r in source.load_split(retain_split)}
        _finetune(paths["retain_only"], paths["data"], tokenizer, (retain_split, *knowledge), keep, epochs, lr, seed)
    if not paths["reference"].is_file():
        log("== evaluating the reference (its per-item values make forget quality computable) ==")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reference itself has no reference
            report = TofuEvaluator(tokenizer, source.eval_splits(), max_new_tokens=max_new_tokens).run(
                CausalLM(name_or_path=str(paths["retain_only"])))
        report.save(paths["reference"])
    return paths
