"""MUSE: the layout (generated stand-in, local loading, hub errors), the metrics against MUSE's own per-item loops
written out (one prompt at a time, rouge-score, scikit-learn's roc_curve/auc), unlearning batches, the callback."""

import json

import numpy as np
import pytest
import torch
from rouge_score import rouge_scorer
from sklearn.metrics import auc as area, roc_curve

from lit_unlearn.data import MuseDataModule, MuseSource, generate_fictitious_muse, train_bpe_tokenizer, write_muse_json
from lit_unlearn.data.muse import MUSE_LAYOUT
from lit_unlearn.core.errors import UserError
from lit_unlearn.metrics.tofu import formulas as tofu_math
from lit_unlearn.metrics.muse.evaluator import MuseEvaluator
from lit_unlearn.models import CausalLM, tiny_llama_config


@pytest.fixture(scope="module")
def muse(tmp_path_factory):
    folder = write_muse_json(tmp_path_factory.mktemp("muse") / "data", n_forget=4, n_retain=6, n_holdout=4, seed=0)
    layout = generate_fictitious_muse(n_forget=4, n_retain=6, n_holdout=4, seed=0)
    texts = [t for split in layout["raw"].values() for t in split] + \
        [q["question"] + " " + q["answer"] for rows in layout["knowmem"].values() for q in rows]
    tok = train_bpe_tokenizer(texts, folder.parent / "tok", vocab_size=400)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=1)
    net.eval()
    return folder, tok, net


def test_stand_in_has_muse_layout_and_forget_holdout_are_disjoint(muse):
    folder, _, _ = muse
    source = MuseSource(str(folder))
    for config, splits in MUSE_LAYOUT.items():
        for split in splits:
            assert source.load(config, split), (config, split)
    forget, holdout = set(source.texts("raw", "forget")), set(source.texts("raw", "holdout"))
    assert forget and holdout and not forget & holdout
    assert source.texts("privleak", "forget") == source.texts("raw", "forget")
    v = source.load("verbmem", "forget")[0]
    assert (v["prompt"] + " " + v["gt"]) in forget
    scal = [set(source.texts("scal", f"forget_{k}")) for k in range(1, 5)]
    sust = [set(source.texts("sust", f"forget_{k}")) for k in range(1, 5)]
    assert all(a < b for a, b in zip(scal, scal[1:])) and scal[-1] == forget  # growing, ending at the forget set
    assert set().union(*sust) == forget and sum(map(len, sust)) == len(forget)  # disjoint successive requests


def test_sources_say_what_is_wrong(tmp_path):
    (tmp_path / "verbmem").mkdir()
    (tmp_path / "verbmem" / "forget.json").write_text(json.dumps([{"prompt": "a"}]))
    with pytest.raises(UserError, match="gt"):
        MuseSource(str(tmp_path)).load("verbmem", "forget")
    with pytest.raises(UserError, match="no config"):
        MuseSource(str(tmp_path)).load("rawtext", "forget")
    assert not MuseSource(str(tmp_path)).has("knowmem", "forget_qa")
    with pytest.raises(UserError, match="scal"):
        MuseDataModule(MuseSource(str(tmp_path)), _Tok(), forget="raw/forget_2")


class _Tok:
    pad_token_id = 0


def _generate_one(net, ids, max_new_tokens):
    with torch.no_grad():
        return net.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, pad_token_id=0)[0].tolist()


def test_metrics_equal_muse_loops_written_out(muse, tmp_path):
    folder, tok, net = muse
    source = MuseSource(str(folder))
    ev = MuseEvaluator(tok, source, verbmem_max_new_tokens=12, knowmem_max_new_tokens=6, batch_size=3,
                       retrain_auc=0.5)
    report = ev.run(net)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    enc = lambda text: bos + tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    # VerbMem, one prompt at a time as MUSE does
    verb = []
    for r in source.load("verbmem", "forget"):
        out = tok.decode(_generate_one(net, enc(r["prompt"]), 12), skip_special_tokens=True)
        gt = tok.decode(enc(r["gt"])[:12], skip_special_tokens=True)
        verb.append(scorer.score(gt, out)["rougeL"].fmeasure * 100)
    assert max(verb) > 0, "a degenerate check: no overlap at all"
    np.testing.assert_allclose(report.per_item["verbmem"]["rouge_l_f1"], verb, atol=1e-9)
    assert report.summary["verbmem_f"] == pytest.approx(np.mean(verb))
    # KnowMem on the forget QA with the few-shot head
    icl = source.load("knowmem", "forget_qa_icl")
    head = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in icl)
    know = []
    for r in source.load("knowmem", "forget_qa"):
        out = tok.decode(_generate_one(net, enc(head + f"Question: {r['question']}\nAnswer: "), 6),
                         skip_special_tokens=True)
        for stop in ("\n\n", "\nQuestion", "Question:"):
            out = out.split(stop)[0]
        know.append(scorer.score(r["answer"], out)["rougeL"].fmeasure * 100)
    assert report.summary["knowmem_f"] == pytest.approx(np.mean(know))
    # PrivLeak: Min-40% over every token after BOS, AUC from roc_curve(y, -score) with holdout as members
    def min40(text):
        ids = torch.tensor([enc(text)])
        with torch.no_grad():
            logp = torch.log_softmax(net(ids)[0].double(), -1)
        lp = [logp[i, t].item() for i, t in enumerate(ids[0, 1:].tolist())]
        return -np.mean(np.sort(lp)[:int(len(lp) * 0.4)])
    f = [min40(t) for t in source.texts("privleak", "forget")]
    h = [min40(t) for t in source.texts("privleak", "holdout")]
    fpr, tpr, _ = roc_curve(np.array([0] * len(f) + [1] * len(h)), -np.array(f + h))
    assert report.summary["privleak/auc"] == pytest.approx(area(fpr, tpr), abs=1e-9)
    assert report.summary["privleak"] == pytest.approx((area(fpr, tpr) - 0.5) / 0.5 * 100, abs=1e-6)
    # ES / EM of the ground truth tokens, teacher-forced
    es = []
    for r in source.load("verbmem", "forget"):
        p, c = enc(r["prompt"]), tok(r["gt"], add_special_tokens=False)["input_ids"][:12]
        with torch.no_grad():
            pred = net(torch.tensor([p + c]))[0].argmax(-1)[len(p) - 1:len(p) - 1 + len(c)]
        es.append(tofu_math.extraction_strength(pred == torch.tensor(c)))
    np.testing.assert_allclose(report.per_item["verbmem"]["es"], es, atol=1e-12)
    # the report is a reference for the next one
    path = report.save(tmp_path / "ref.json")
    again = MuseEvaluator(tok, source, verbmem_max_new_tokens=4, knowmem_max_new_tokens=2, reference=path).run(net)
    assert again.summary["privleak"] == pytest.approx(0.0, abs=1e-9)


def test_muse_batches_train_and_the_callback_logs(muse, tmp_path):
    import lightning.pytorch as pl

    from lit_unlearn.callbacks import MuseEvaluation
    from lit_unlearn.modules import NPOModule

    folder, tok, _ = muse
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=2)
    fold = MuseDataModule(MuseSource(str(folder)), tok, max_length=24, forget="sust/forget_2")
    fold.setup()
    assert len(fold.forget_set) < len(MuseDataModule(MuseSource(str(folder)), tok, max_length=24).build()[1])
    dm = MuseDataModule(MuseSource(str(folder)), tok, max_length=24, retain_batch_size=4, forget_batch_size=4)
    dm.setup()
    assert all(len(item["input_ids"]) <= 24 for item in dm.forget_set.items)
    cb = MuseEvaluation(retrain_auc=0.5, verbmem_max_new_tokens=4, knowmem_max_new_tokens=2, evaluate_at_start=True)
    trainer = pl.Trainer(max_steps=2, max_epochs=-1, logger=False, enable_checkpointing=False, callbacks=[cb],
                         enable_progress_bar=False, accelerator="cpu", default_root_dir=str(tmp_path),
                         limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(NPOModule(net, lr=1e-2, optimizer="adamw"), dm)
    assert (tmp_path / "muse_start.json").is_file() and (tmp_path / "muse_results.json").is_file()
    start = json.loads((tmp_path / "muse_start.json").read_text())["summary"]
    end = cb.last_report.summary
    assert end["forget/em"] is not None and end["verbmem_f"] is not None
    assert start["privleak/auc"] != end["privleak/auc"] or start["forget/em"] != end["forget/em"]


def test_sequences_past_max_length_keep_their_last_tokens_and_are_counted(muse):
    """Every cut is counted per part (by brute force here), warned about and said in the table; what is scored is
    the last max_length tokens: privleak's Min-40% of a cut text equals that of its tail scored whole."""
    folder, tok, net = muse
    source = MuseSource(str(folder))
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    enc = lambda text: bos + tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    texts = source.texts("privleak", "forget") + source.texts("privleak", "holdout")
    cut = sorted(len(enc(t)) for t in texts)[len(texts) // 2]  # about half the privleak texts are longer
    with pytest.warns(UserWarning, match="TRUNCATED"):
        report = MuseEvaluator(tok, source, verbmem_max_new_tokens=4, knowmem_max_new_tokens=2,
                               retrain_auc=0.5, max_length=cut).run(net)
    assert report.truncated["privleak"] == [sum(len(enc(t)) > cut for t in texts), len(texts)]
    assert 0 < report.truncated["privleak"][0] < len(texts)
    prompts = [enc(r["prompt"]) + tok(r["gt"], add_special_tokens=False)["input_ids"][:4]
               for r in source.load("verbmem", "forget")]
    assert report.truncated["verbmem"] == [sum(len(p) > cut for p in prompts), len(prompts)]
    assert "last max_length tokens were kept" in report.table()
    # what was scored is each text's last `cut` tokens: privleak's AUC from Min-40% of those tails, brute force
    def min40_of_tail(text):
        ids = enc(text)[-cut:]
        with torch.no_grad():
            logp = torch.log_softmax(net(torch.tensor([ids]))[0].double(), -1)
        lp = [logp[i, t].item() for i, t in enumerate(ids[1:])]
        return -np.mean(np.sort(lp)[:int(len(lp) * 0.4)])
    f = [min40_of_tail(t) for t in source.texts("privleak", "forget")]
    h = [min40_of_tail(t) for t in source.texts("privleak", "holdout")]
    fpr, tpr, _ = roc_curve(np.array([0] * len(f) + [1] * len(h)), -np.array(f + h))
    assert report.summary["privleak/auc"] == pytest.approx(area(fpr, tpr), abs=1e-9)
