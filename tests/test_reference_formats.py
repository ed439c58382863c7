"""References in the formats users already have: the TOFU authors' per-item logs (aggregated as the authors do,
written out here from their published formula), open-unlearning's TOFU_EVAL.json (read, and written by
`tofu-eval --format open-unlearning`), each detected from the file; a reference covering fewer items is compared
on the common ones, and the report says so."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lit_unlearn.metrics.reference_formats import detect_format, open_unlearning_logs, read_reference

LOGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tofu-published-logs"
needs_logs = pytest.mark.skipif(not LOGS.is_dir(), reason="no copy of the TOFU authors' logs on this machine")


def _authors_aggregation(folder):
    """The TOFU authors' aggregate_eval_stat, written out: (forget truth ratios as their KS test sees them, the nine
    model-utility numbers)."""
    from scipy.stats import hmean

    def load(name):
        d = json.loads((folder / name).read_text())
        return {k: [d[k][i] for i in sorted(d[k], key=int)] for k in ("avg_gt_loss", "avg_paraphrased_loss",
                                                                       "average_perturb_loss", "rougeL_recall")}

    nine = []
    for name in ("eval_log.json", "eval_real_author_wo_options.json", "eval_real_world_wo_options.json"):
        d = load(name)
        true = np.exp(-np.array(d["avg_gt_loss"]))
        if name == "eval_log.json":
            prob = true.mean()
        else:
            false = np.exp(-np.array(d["average_perturb_loss"]))
            prob = np.mean(true / (true + false.sum(-1)))
        stat = np.exp(np.array(d["average_perturb_loss"]).mean(-1) - np.array(d["avg_paraphrased_loss"]))
        nine += [prob, np.mean(d["rougeL_recall"]), np.mean(np.maximum(0, 1 - 1 / stat))]
    forget = load("eval_log_forget.json")
    ks_values = np.exp(np.array(forget["average_perturb_loss"]).mean(-1) - np.array(forget["avg_paraphrased_loss"]))
    return ks_values, hmean(nine)


@needs_logs
def test_the_authors_logs_aggregate_as_the_authors_aggregate_them():
    from scipy.stats import ks_2samp

    full, retain = LOGS / "llama2-7b_full_wd0", LOGS / "llama2-7b_retain90_wd0"
    assert detect_format(full) == "tofu-logs" and detect_format(full / "eval_log_forget.json") == "tofu-logs"
    ours_full, ours_retain = read_reference(full), read_reference(retain)
    ks_full, mu_full = _authors_aggregation(full)
    ks_retain, mu_retain = _authors_aggregation(retain)
    assert ours_full["summary"]["model_utility"] == pytest.approx(mu_full, rel=1e-12)
    assert ours_retain["summary"]["model_utility"] == pytest.approx(mu_retain, rel=1e-12)
    # their KS runs on exp(perturbed − paraphrased) = 1/TR: a monotone map of ours, so the same p-value
    fq = ks_2samp(ours_full["per_item"]["forget"]["truth_ratio"], ours_retain["per_item"]["forget"]["truth_ratio"])
    assert fq.pvalue == pytest.approx(ks_2samp(ks_full, ks_retain).pvalue, rel=1e-12)
    assert fq.pvalue < 1e-15 and 0.6 < mu_full < 0.65  # the fine-tuned model against the retain-only one
    assert ours_full["n_items"] == {"forget": 300}


@needs_logs
@pytest.mark.slow  # scores 2800 sequences (~4 s): main command only, not the 1-minute fast tier
def test_an_evaluation_against_the_authors_logs_uses_the_items_both_cover_and_says_so(tmp_path):
    """The shipped release's forget10 (400 items) scored by a small model against the authors' retain90 logs
    (the first 300): forget quality is the KS test on those 300, and the report notes it."""
    import warnings

    from scipy.stats import ks_2samp

    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tofu_release import write_release
    from lit_unlearn.data.tokenizer import train_bpe_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM, tiny_llama_config

    data = write_release(tmp_path / "tofu")
    forget = TofuSource(str(data), "10").eval_splits()["forget"]
    tok = train_bpe_tokenizer([r["question"] + " " + r["answer"] for r in forget], vocab_size=2000)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok), hidden_size=16, layers=1, intermediate_size=32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = TofuEvaluator(tok, {"forget": forget}, reference=str(LOGS / "llama2-7b_retain90_wd0")).run(
            net, only=["forget_quality"])
    ours = report.per_item["forget"]["truth_ratio"]
    theirs = read_reference(LOGS / "llama2-7b_retain90_wd0")["per_item"]["forget"]["truth_ratio"]
    assert len(ours) == 400 and len(theirs) == 300
    assert report.summary["forget_quality"] == pytest.approx(ks_2samp(ours[:300], theirs).pvalue, rel=1e-12)
    assert any("first 300 forget items" in n for n in report.notes)
    holdout_like = [dict(r, question="Who is nobody?") for r in forget]  # another split: refused, not compared
    from lit_unlearn.core.errors import UserError

    with pytest.raises(UserError, match="forget item 0 is not this data's"):  # when made: before any scoring
        TofuEvaluator(tok, {"forget": holdout_like}, reference=str(LOGS / "llama2-7b_retain90_wd0"))


def _report():
    from lit_unlearn.metrics.tofu.evaluator import TofuReport

    rng = np.random.default_rng(0)
    tr = rng.uniform(0.2, 2.0, 40).tolist()
    summary = {"forget_quality": 0.31, "forget_truth_ratio": float(np.mean(np.minimum(tr, 1 / np.array(tr)))),
               "model_utility": 0.62, "forget/prob": 0.4, "mia/min_k_auc": 0.55, "privleak": -3.0}
    return TofuReport(summary, {"forget": {"truth_ratio": tr, "prob": rng.uniform(0, 1, 40).tolist()}})


def test_open_unlearnings_layout_round_trips_as_a_reference(tmp_path):
    report = _report()
    logs, summary = open_unlearning_logs(report)
    assert logs["forget_truth_ratio"]["value_by_index"]["3"] == {"score": report.per_item["forget"]["truth_ratio"][3]}
    assert logs["forget_Q_A_Prob"]["value_by_index"]["0"] == {"prob": report.per_item["forget"]["prob"][0]}
    assert summary == {"forget_quality": 0.31, "forget_truth_ratio": report.summary["forget_truth_ratio"],
                       "model_utility": 0.62, "forget_Q_A_Prob": 0.4, "mia_min_k": 0.55, "privleak": -3.0}
    (tmp_path / "TOFU_EVAL.json").write_text(json.dumps(logs))
    for where in (tmp_path / "TOFU_EVAL.json", tmp_path):
        assert detect_format(where) == "open-unlearning"
        back = read_reference(where)
        assert back["per_item"]["forget"]["truth_ratio"] == report.per_item["forget"]["truth_ratio"]
        assert back["summary"]["model_utility"] == 0.62 and back["summary"]["mia/min_k_auc"] == 0.55
    ours = tmp_path / "ours.json"
    report.save(ours)
    assert detect_format(ours) == "lit-unlearn" and read_reference(ours)["summary"]["forget_quality"] == 0.31


def test_tofu_eval_writes_open_unlearnings_files(tmp_path):
    from helpers import cli_here, tiny_tofu

    from lit_unlearn.models import CausalLM, tiny_llama_config

    splits, tok = tiny_tofu(tmp_path, seed=0)
    CausalLM(config=tiny_llama_config(vocab_size=len(tok), hidden_size=16, layers=1, intermediate_size=32)) \
        .save_pretrained(tmp_path / "model")
    tok.save_pretrained(str(tmp_path / "model"))
    proc = cli_here(["tofu-eval", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "data"),
                     "--no-gradnorm", "--max-new-tokens", "4", "--format", "open-unlearning", "--save",
                     str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    logs = json.loads((tmp_path / "out/TOFU_EVAL.json").read_text())
    summary = json.loads((tmp_path / "out/TOFU_SUMMARY.json").read_text())
    ours = json.loads((tmp_path / "out/lit_unlearn_report.json").read_text())
    assert summary["model_utility"] == pytest.approx(ours["summary"]["model_utility"])
    assert [v["score"] for v in logs["forget_truth_ratio"]["value_by_index"].values()] == \
        ours["per_item"]["forget"]["truth_ratio"]
    assert all(math.isfinite(v) for v in summary.values())
    bad = cli_here(["tofu-eval", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "data"), "--format",
                    "open-unlearning"], tmp_path)
    assert bad.returncode == 2 and "give --save FOLDER" in bad.stderr
