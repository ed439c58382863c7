"""Why the gradient-norm attack recognises gradient-ascent unlearning: the same ascent on the forget set with plain
SGD and with Adam, stopped when the forget loss reaches the holdout authors' level, then the forget items'
predictive entropy, top-token probability and gradient norm beside the holdout items', and every attack's AUC.

    python benchmarks/hamu/gradient_ascent_geometry.py [--seed 0] [--worlds runs/tofu/worlds]

On the TOFU world's target (forget01). Ascent on the mean answer NLL of all 40 forget items, gradients clipped to
norm 1, until that NLL passes the target's mean holdout NLL (minus 0.2); SGD at lr 0.02 and Adam at lr 3e-4.
"""

from __future__ import annotations

import sys
from pathlib import Path
import statistics
import warnings

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py


def main() -> None:
    ap = options(__doc__, write=False)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from lit_unlearn.core.batches import logits_and_labels
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tofu import QAFormatter, pad_collate
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(args.worlds, seed=args.seed, levels=("01",), log=print)
    tok = load_tokenizer(str(world.tokenizer))
    fmt, collate = QAFormatter(tok), pad_collate(tok.pad_token_id)
    splits = TofuSource(str(world.data), "01").eval_splits()
    evaluator = TofuEvaluator(tok, {"forget": splits["forget"], "holdout": splits["holdout"]})
    batch = collate([fmt.encode(r["question"], r["answer"]) for r in splits["forget"]])

    def answer_stats(net, rows):
        ent, top = [], []
        with torch.no_grad():
            for r in rows:
                b = collate([fmt.encode(r["question"], r["answer"])])
                logits, labels = logits_and_labels(net, b)
                keep = labels[0] != -100
                logp = torch.log_softmax(logits[0][keep].float(), -1)
                ent.append(float(-(logp.exp() * logp).sum(-1).mean()))
                top.append(float(logp.exp().max(-1).values.mean()))
        return statistics.mean(ent), statistics.mean(top)

    target = CausalLM(name_or_path=str(world.target)).eval()
    holdout_nll = statistics.mean(evaluator.run(target, only=["membership"]).per_item["mia"]["holdout_loss"])
    print(f"target: mean holdout NLL {holdout_nll:.2f}; ascent stops at {holdout_nll - 0.2:.2f}")
    print("| ascent | steps | forget NLL | entropy forget / holdout | top-token prob forget / holdout | "
          "gradient norm forget / holdout | loss AUC | Min-K% AUC | Min-K%++ AUC | gradnorm AUC |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make, lr in (("SGD", torch.optim.SGD, 0.02), ("Adam", torch.optim.Adam, 3e-4)):
        torch.manual_seed(args.seed)
        net = CausalLM(name_or_path=str(world.target))
        opt = make(net.parameters(), lr=lr)
        for step in range(1, 1001):
            logits, labels = logits_and_labels(net, batch)
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)
            opt.zero_grad()
            (-loss).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            if loss.item() > holdout_nll - 0.2:
                break
        net.eval()
        report = evaluator.run(net, only=["membership", "gradnorm"])
        mia, s = report.per_item["mia"], report.summary
        (ef, tf), (eh, th) = answer_stats(net, splits["forget"]), answer_stats(net, splits["holdout"])
        print(f"| {name} (lr {lr:g}) | {step} | {statistics.mean(mia['forget_loss']):.2f} | {ef:.2f} / {eh:.2f} | "
              f"{tf:.2f} / {th:.2f} | {statistics.mean(mia['forget_gradnorm']):.2f} / "
              f"{statistics.mean(mia['holdout_gradnorm']):.2f} | {s['mia/loss_auc']:.3f} | {s['mia/min_k_auc']:.3f} | "
              f"{s['mia/min_k_plus_plus_auc']:.3f} | {s['mia/gradnorm_auc']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
