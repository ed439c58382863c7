"""What the TOFU evaluation scores is never cut silently: sequences past max_length are counted per split (by brute
force here) and reported in the table, the JSON and a warning; and float64 models on eager attention generate
the same answers batched as one prompt at a time (left padding turns their rows into NaN otherwise)."""

import copy
import json
import warnings

import pytest
import torch

from lit_unlearn.data import QAFormatter, train_bpe_tokenizer
from lit_unlearn.data.tofu_release import load_release
from lit_unlearn.metrics import TofuEvaluator
from lit_unlearn.metrics.generation import greedy_continuations, padding_breaks
from lit_unlearn.models import CausalLM, tiny_llama_config


@pytest.fixture(scope="module")
def real_splits(tmp_path_factory):
    """TOFU's forget01 (with perturbed answers), holdout01 and 20 retain_perturbed items, and a small BPE."""
    release = load_release()
    splits = {"forget": release["forget01_perturbed"], "holdout": release["holdout01"],
              "retain": release["retain_perturbed"][:20]}
    texts = [r["question"] + " " + a for rows in splits.values() for r in rows
             for a in [r["answer"], r.get("paraphrased_answer", ""), *r.get("perturbed_answer", [])] if a]
    tok = train_bpe_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=300)
    return splits, tok


def _length(tok, question, answer):
    """Brute force: the plain template's prompt (with BOS) + " answer" + EOS, in tokens."""
    prompt = [tok.bos_token_id] + tok(f"Question: {question}\nAnswer:", add_special_tokens=False)["input_ids"]
    return len(prompt) + len(tok(" " + answer.strip(), add_special_tokens=False)["input_ids"]) + 1


@pytest.mark.slow  # two full evaluations on the real splits (~5 s): main command only, not the 1-minute fast tier
def test_truncated_sequences_are_counted_per_split_reported_and_warned(real_splits, tmp_path):
    splits, tok = real_splits
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=0)
    lengths = {}
    for name, rows in splits.items():
        pairs = [(r["question"], r["answer"]) for r in rows]
        if name != "holdout":
            pairs += [(r["question"], r["paraphrased_answer"]) for r in rows]
            pairs += [(r["question"], a) for r in rows for a in r["perturbed_answer"]]
        lengths[name] = [_length(tok, q, a) for q, a in pairs]
    cut = sorted(lengths["forget"])[len(lengths["forget"]) // 2]  # about half of the forget sequences are cut
    expected = {name: [sum(n > cut for n in ns), len(ns)] for name, ns in lengths.items()}
    assert all(0 < c < n for c, n in expected.values()), expected  # the check can tell cut from not cut
    with pytest.warns(UserWarning, match=rf"TRUNCATED at max_length={cut}: forget \d+ of 280 sequences"):
        report = TofuEvaluator(tok, splits, max_length=cut, max_new_tokens=2, gradnorm=False).run(net)
    assert report.truncated == expected and report.max_length == cut
    assert f"TRUNCATED at max_length={cut}" in report.table()
    saved = json.loads(report.save(tmp_path / "r.json").read_text())
    assert saved["truncated"] == expected and saved["max_length"] == cut
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # nothing cut at TOFU's 512: no warning
        warnings.filterwarnings("ignore", message="forget quality not computed")
        full = TofuEvaluator(tok, splits, max_new_tokens=2, gradnorm=False).run(net)
    assert full.max_length == 512 and all(c == 0 for c, _ in full.truncated.values())
    assert "no sequence longer than max_length=512" in full.table()
    assert full.summary["forget/nll"] != report.summary["forget/nll"]  # cutting changed what was scored


def test_formatter_rejects_a_length_that_is_not_one():
    from lit_unlearn.core.errors import UserError

    tok = type("Tok", (), {"pad_token_id": 0})()
    with pytest.raises(UserError, match="max_length must be an integer > 1"):
        QAFormatter(tok, max_length="512")


def test_scorings_of_one_tokenizer_share_its_encodings_and_each_reports_its_cut_pairs(real_splits):
    """Every TeacherForcedScoring of one tokenizer object and format tokenises a pair once: each one's encoding equals
    a fresh tokenisation (per template, length and input format) and each one's formatter notes the pairs cut at
    max_length, wherever they were first encoded; an added token starts a new memo."""
    from lit_unlearn.metrics.tofu.scoring import TeacherForcedScoring

    splits, tok = real_splits
    pairs = [(r["question"], r["answer"]) for r in splits["forget"]] + [("", "a plain document"), ("Who?", "x " * 80)]
    cut = 8 + max(len(QAFormatter(tok, "llama2").prompt_ids(q)) for q, _ in pairs)  # cuts answers, never a prompt
    for template, length, input_format in (("plain", cut, "lit-unlearn"), ("llama2", 512, "lit-unlearn"),
                                           ("plain", cut, "open-unlearning")):
        first, second = (TeacherForcedScoring(QAFormatter(tok, template, length, input_format=input_format),
                                              tok.pad_token_id, 8) for _ in range(2))
        for pair in pairs:
            first.encode(pair)
        fresh = QAFormatter(tok, template, length, input_format=input_format)  # no memo: the brute force
        calls = []
        encode = second.formatter.encode
        second.formatter.encode = lambda q, a: calls.append(q) or encode(q, a)
        for pair in pairs:
            got, want = second.encode(pair), fresh.encode(*pair)
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
        assert calls == []  # every pair from the memo
        assert second.formatter.truncated == first.formatter.truncated == fresh.truncated
        assert second.truncated(pairs) == len(fresh.truncated) and (length == 512) == (not fresh.truncated)
    tok = copy.deepcopy(tok)  # the module's tokenizer stays as it is
    before = TeacherForcedScoring(QAFormatter(tok), tok.pad_token_id, 8).encode(("Who wrote it?", "Zorblax Q"))
    tok.add_tokens(["Zorblax"])
    after = TeacherForcedScoring(QAFormatter(tok), tok.pad_token_id, 8).encode(("Who wrote it?", "Zorblax Q"))
    assert len(after["input_ids"]) < len(before["input_ids"])


def _until_eos(ids, eos):
    ids = ids.tolist()
    return ids[:ids.index(eos) + 1] if eos in ids else ids


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_float64_generation_batched_equals_one_prompt_at_a_time(attention):
    net = CausalLM(config=tiny_llama_config(vocab_size=64), seed=0, attn_implementation=attention).double().eval()
    assert padding_breaks(net) == (attention == "eager")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 64, (n,), generator=g).tolist() for n in (3, 9, 5, 12, 9, 3, 7)]
    batched = greedy_continuations(net, prompts, 0, 8, 4, "cpu", eos_token_id=2)
    alone = greedy_continuations(net, prompts, 0, 8, 1, "cpu", eos_token_id=2)
    assert [_until_eos(b, 2) for b in batched] == [_until_eos(a, 2) for a in alone]
    assert any(len(_until_eos(a, 2)) > 1 and a[0] != 0 for a in alone)  # real answers, not pads
    if attention == "eager":  # the reason for the rule: left-padded float64 eager attention produces NaN
        ids, mask = torch.tensor([[0, 0, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]])
        with torch.no_grad():
            assert net(ids, mask)[0, -1].isnan().all()
