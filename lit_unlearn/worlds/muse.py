"""Offline MUSE assets: the generated news stand-in, a tokenizer, a tiny Llama target trained on every article,
a retrained model trained without the forget articles, and the retrained model's MUSE report (PrivLeak's
reference). Each is made once under OUT and reused.

The tiny models also learn QA about the people whose articles they see, in KnowMem's few-shot prompt shape: a
model with no pretraining has no other way to answer KnowMem's few-shot questions (MUSE's 7B target brings that
from pretraining). The retrained model sees neither the forget articles nor their QA.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from lit_unlearn.storage.specs import fingerprint

__all__ = ["prepare_muse_assets"]


def _qa_lines(rows: list[dict], icl: list[dict]) -> list[str]:
    """QA in the exact shape KnowMem prompts with: the few-shot head, then the question and its answer."""
    head = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in icl)
    return [f"{head}Question: {r['question']}\nAnswer: {r['answer']}" for r in rows]


def _train(out: Path, texts: list[str], tokenizer, epochs: int, lr: float, seed: int, max_length: int) -> None:
    from lit_unlearn.data import TextWindows, pad_collate
    from lit_unlearn.worlds.tiny_llama import tiny_network_spec, train_tiny_llama

    loader = DataLoader(TextWindows(texts, tokenizer, max_length), batch_size=16, shuffle=True,
                        collate_fn=pad_collate(tokenizer.pad_token_id), generator=torch.Generator().manual_seed(seed))
    identity = {"world": "muse", "texts": fingerprint(texts), "epochs": epochs, "max_length": max_length}
    train_tiny_llama(out, tokenizer, loader, epochs, lr, seed, identity=identity,
                     network=tiny_network_spec(len(tokenizer), seed, max_positions=256))


def prepare_muse_assets(out: str | Path = "runs/muse", seed: int = 0, epochs: int = 40, lr: float = 3e-3,
                        max_length: int = 256, verbmem_max_new_tokens: int = 64, knowmem_max_new_tokens: int = 16,
                        log=print, **sizes) -> dict[str, Path]:
    """sizes: generate_fictitious_muse's n_forget / n_retain / n_holdout / n_icl."""
    import warnings

    from lit_unlearn.data import MuseSource, train_bpe_tokenizer, write_muse_json
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics.muse.evaluator import MuseEvaluator
    from lit_unlearn.models import CausalLM

    out = Path(out)
    paths = {"data": out / "data", "tokenizer": out / "tokenizer", "target": out / "target",
             "retrain": out / "retrain", "reference": out / "retrain_eval.json"}
    if not (paths["data"] / "raw" / "forget.json").is_file():
        log(f"== writing the generated MUSE stand-in to {paths['data']} ==")
        write_muse_json(paths["data"], seed=seed, **sizes)
    source = MuseSource(str(paths["data"]))
    raw = {s: source.texts("raw", s) for s in ("forget", "retain1", "retain2", "holdout")}
    qa = {s: source.load("knowmem", s) for s in ("forget_qa", "retain_qa")}
    icl = source.load("knowmem", "retain_qa_icl")
    if not (paths["tokenizer"] / "tokenizer.json").is_file():
        texts = [t for split in raw.values() for t in split] + _qa_lines(qa["forget_qa"] + qa["retain_qa"], icl)
        train_bpe_tokenizer(texts, paths["tokenizer"], vocab_size=512)
    tokenizer = load_tokenizer(str(paths["tokenizer"]))
    if not (paths["target"] / "config.json").is_file():
        log(f"== training the target on every article ({epochs} epochs) ==")
        _train(paths["target"], raw["forget"] + raw["retain1"] + raw["retain2"] +
               _qa_lines(qa["forget_qa"] + qa["retain_qa"], icl), tokenizer, epochs, lr, seed, max_length)
    if not (paths["retrain"] / "config.json").is_file():
        log("== training the retrained model without the forget articles ==")
        _train(paths["retrain"], raw["retain1"] + raw["retain2"] + _qa_lines(qa["retain_qa"], icl), tokenizer, epochs,
               lr, seed, max_length)
    if not paths["reference"].is_file():
        log("== evaluating the retrained model (PrivLeak's reference) ==")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = MuseEvaluator(tokenizer, source, verbmem_max_new_tokens, knowmem_max_new_tokens,
                                   max_length=max_length).run(CausalLM(name_or_path=str(paths["retrain"])))
        report.save(paths["reference"])
    return paths
