"""Train a small byte-level BPE tokenizer (HF `tokenizers`) on a text corpus and wrap it for `transformers`.

Offline runs have no hub tokenizer to download; this builds one on the QA set itself and saves it where
`AutoTokenizer.from_pretrained(folder)` reloads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["train_bpe_tokenizer", "load_tokenizer", "SPECIAL_TOKENS"]

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def train_bpe_tokenizer(texts: Iterable[str], folder: str | Path | None = None, vocab_size: int = 1024):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    wrapped.padding_side = "right"
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        wrapped.save_pretrained(str(folder))
    return wrapped


def load_tokenizer(name_or_path: str):
    """AutoTokenizer from a local folder or a hub name, with a pad token (the eos token when it has none);
    a missing folder or a failed download is one clear error."""
    from transformers import AutoTokenizer

    from lit_unlearn.core.hub import hub_error, is_hub_name, resolve_pretrained

    name = resolve_pretrained(str(name_or_path), "tokenizer",
                              "`lit-unlearn tofu-demo` writes runs/tofu/tokenizer; or give a hub name")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except OSError as err:
        if is_hub_name(name):
            raise hub_error("tokenizer", name, err) from err
        raise
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
