"""A user's own job, made at test time the way a user has it: a small Hugging Face model folder written by
transformers (config.json, model.safetensors, tokenizer), and forget / retain / holdout files with the user's own
names and columns, in three formats (QA pairs as JSON lines, chat messages, plain documents).

The items are TOFU's real ones (the release shipped in the package): the forget set is forget01's two authors, the
holdout set holdout01's two, the retain set four other authors. The model has been fine-tuned on forget + retain
for a few steps, so the forget items are ones it saw. That model ships in tests/data/own_job_model (written by
`python tests/own_job_files.py --ship`, which saves 150 training steps per test session) with the digest of the
recipe that made it; a changed recipe makes the tests train it again and ask for the refresh."""

from __future__ import annotations

import json
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent / "data" / "own_job_model"
FILES = {"forget": "to_forget.jsonl", "retain": "keep.jsonl", "holdout": "never_seen.jsonl"}  # none of TOFU's names
COLUMNS = {"question": "prompt", "answer": "completion"}


def _items():
    from lit_unlearn.data.tofu_release import load_release

    release = load_release()
    return {"forget": release["forget01"], "retain": release["retain90"][:80], "holdout": release["holdout01"]}


def write_data(folder: Path, style: str = "qa", names: dict[str, str] | None = None) -> dict[str, Path]:
    """The three files in one style: "qa" ({prompt, completion}), "chat" ({messages}) or "text" ({body}); `names`:
    {role: file name} instead of FILES."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for role, rows in _items().items():
        path = folder / (names or FILES)[role]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for r in rows:
                if style == "qa":
                    record = {COLUMNS["question"]: r["question"], COLUMNS["answer"]: r["answer"]}
                elif style == "chat":
                    record = {"messages": [{"role": "user", "content": r["question"]},
                                           {"role": "assistant", "content": r["answer"]}]}
                else:
                    record = {"body": f"{r['question']} {r['answer']}"}
                f.write(json.dumps(record) + "\n")
        out[role] = path
    return out


def write_model(folder: Path, steps: int = 150, seed: int = 0) -> Path:
    """A tiny Llama (transformers' own classes) with a BPE tokenizer, fine-tuned briefly on forget + retain, saved
    with save_pretrained (safetensors)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lit_unlearn.data import QAFormatter, pad_collate, train_bpe_tokenizer

    items = _items()
    texts = [r["question"] + " " + r["answer"] for rows in items.values() for r in rows]
    tok = train_bpe_tokenizer(texts, folder, vocab_size=512)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=512,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    fmt, collate = QAFormatter(tok), pad_collate(tok.pad_token_id)
    seen = [fmt.encode(r["question"], r["answer"]) for r in items["forget"] + items["retain"]]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        batch = collate([seen[(step * 16 + j) % len(seen)] for j in range(16)])
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     labels=batch["labels"]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def recipe_digest() -> str:
    """What the default model depends on: the source of the recipe (this file's write_model and _items)."""
    import hashlib
    import inspect

    return hashlib.sha256((inspect.getsource(write_model) + inspect.getsource(_items)).encode()).hexdigest()[:16]


def shipped_is_current() -> bool:
    return (SHIPPED / "recipe.txt").is_file() and (SHIPPED / "recipe.txt").read_text().strip() == recipe_digest()


def model_folder(folder: Path) -> Path:
    """The default model (write_model's 150 steps, seed 0) in `folder`: the shipped copy where it is the current
    recipe's, else trained here."""
    import shutil

    if not shipped_is_current():
        return write_model(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for f in SHIPPED.iterdir():
        if f.name != "recipe.txt":
            shutil.copy2(f, folder / f.name)
    return folder


if __name__ == "__main__":
    import shutil
    import sys

    if sys.argv[1:] == ["--ship"]:
        shutil.rmtree(SHIPPED, ignore_errors=True)
        write_model(SHIPPED)
        (SHIPPED / "recipe.txt").write_text(recipe_digest() + "\n")
        print(f"wrote {SHIPPED}")
    else:
        root = Path(sys.argv[1])
        write_model(root / "my-model")
        for style in ("qa", "chat", "text"):
            write_data(root / f"data_{style}", style)
