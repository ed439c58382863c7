"""Where the TOFU evaluation's time goes, and the evaluator's speed levers measured side by side on one model.

    python benchmarks/llm_scale/tofu_eval_phases.py [--world DIR] [--level 10] [--rounds 3]

Phases of one `TofuEvaluator.run` (open-unlearning's conventions and 200 new tokens, as
benchmarks/llm_scale/tofu_eval_vs_open_unlearning.sh runs it), each pass timed where it runs: teacher-forced scoring,
generation, ROUGE, the gradient-norm pass, the per-split and membership maths; and the imports of the
`tofu-eval` process (measured in a fresh interpreter).

Levers, each against its alternative in alternating rounds, with the largest difference in what it produces:
- scoring batches: batch_size rows of length-sorted pairs (the default) against a token budget (batch_size ×
  max_length padded tokens per batch);
- generation attention: sdpa (the default for an eager model) against eager; the greedy answers must be equal;
- scoring attention: sdpa against eager (not the default: per-item NLLs move by more than 1e-6);
- gradnorm: per-sample gradients through torch.func (vmap of grad over length-sorted chunks of 4 padded items)
  against the evaluator's loop of one backward pass per item (the default).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py


def main() -> None:
    ap = options(__doc__, full=True, write=False)
    ap.add_argument("--world", default=None, help="a TOFU world folder (default: seed 0's, built if missing)")
    ap.add_argument("--level", default="10", choices=("01", "05", "10"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    started = time.perf_counter()
    import_probe = ("import time; t = time.perf_counter(); from lit_unlearn.commands.tofu_eval import tofu_eval; "
                    "from lit_unlearn.data import TofuSource; from lit_unlearn.metrics import TofuEvaluator; "
                    "from lit_unlearn.models.loading import load_causal_lm; import rouge_score.rouge_scorer; "
                    "import sys; print(time.perf_counter() - t, 'lightning.pytorch' in sys.modules)")
    probes = [subprocess.run([sys.executable, "-c", import_probe], capture_output=True, text=True, check=True)
              .stdout.split() for _ in range(args.rounds)]
    import_seconds = statistics.median(float(p[0]) for p in probes)

    from lit_unlearn.data import TofuSource
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.metrics.tofu import evaluator as tofu_eval, rouge as tofu_rouge, scoring as tofu_scoring
    from lit_unlearn.metrics.tofu.scoring import split_pairs
    from lit_unlearn.models.loading import load_causal_lm

    if args.world:
        world = Path(args.world)
    else:
        from lit_unlearn.worlds.tofu_world import prepare_tofu_world

        world = prepare_tofu_world("runs/tofu/worlds", seed=0, log=print).folder
    network, tok = load_causal_lm(str(world / "target"), None, None, "float32", None)
    network.eval()
    splits = TofuSource(str(world / "data"), args.level).eval_splits()
    settings = {"max_new_tokens": 200, "mia_convention": "open-unlearning", "input_format": "open-unlearning"}

    # ---- phases of full runs -----------------------------------------------------------------------------------
    seconds: dict[str, float] = {}

    def timed(owner, name, key):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - t
        setattr(owner, name, wrapper)
        return original

    patched = [(tofu_scoring.TeacherForcedScoring, "score", "teacher-forced scoring"),
               (tofu_rouge.GreedyAnswers, "answers", "generation"), (tofu_eval, "gradient_norms", "gradnorm pass"),
               (tofu_eval, "rouge_scores", "ROUGE"), (tofu_eval, "split_scores", "split maths"),
               (tofu_eval, "membership_scores", "membership maths")]
    originals = [timed(*p) for p in patched]
    phases, totals = [], []
    for _ in range(args.rounds):
        seconds.clear()
        t = time.perf_counter()
        TofuEvaluator(tok, splits, **settings).run(network)
        totals.append(time.perf_counter() - t)
        phases.append(dict(seconds))
    for (owner, name, _), original in zip(patched, originals):
        setattr(owner, name, original)
    n_items = sum(len(r) for r in splits.values())
    print(f"TOFU forget{args.level} ({n_items} items), {world.name}'s target, median of {args.rounds} runs")
    print("| phase | seconds |\n|---|---|")
    print(f"| imports of the tofu-eval process (Lightning imported: {probes[0][1]}) | {import_seconds:.2f} |")
    for key in [p[2] for p in patched]:
        print(f"| {key} | {statistics.median(p.get(key, 0.0) for p in phases):.2f} |")
    print(f"| the whole run | {statistics.median(totals):.2f} |")

    # ---- levers ------------------------------------------------------------------------------------------------
    pairs = [p for name in splits if name != "holdout" for p in split_pairs(name, splits[name])]
    questions = [r["question"] for name, rows in splits.items() if name != "holdout" for r in rows]
    config = network.model.config

    def score(budget: bool, attention: str):
        ev = TofuEvaluator(tok, splits, **settings)
        if budget:  # as many rows as fit batch_size × max_length padded tokens
            ev.scoring.batch_tokens = ev.scoring.batch_size * ev.formatter.max_length
        for p in pairs:
            ev.scoring.encode(p)
        config._attn_implementation = attention
        t = time.perf_counter()
        ev.scoring.score(network, pairs, "cpu")
        config._attn_implementation = "eager"
        return time.perf_counter() - t, [ev.scoring._stats[p].nll for p in pairs]

    def generate(attention: str | None):
        ev = TofuEvaluator(tok, splits, generation_attention=attention, **settings)
        t = time.perf_counter()
        answers = ev.answers.answers(network, questions, "cpu")
        return time.perf_counter() - t, answers

    mia_pairs = [(r["question"], r["answer"]) for name in ("forget", "holdout") for r in splits[name]]

    def gradnorm(vectorised: bool):
        ev = TofuEvaluator(tok, splits, **settings)
        for p in mia_pairs:
            ev.scoring.encode(p)
        t = time.perf_counter()
        out = (_gradnorm_vmap(network, ev.scoring, mia_pairs) if vectorised else
               tofu_eval.gradient_norms(network, ev.scoring, mia_pairs, "cpu").tolist())
        return time.perf_counter() - t, out

    levers = [("scoring batches", lambda: score(True, "eager"), lambda: score(False, "eager"),
               "token budget", "32 rows"),
              ("generation attention", lambda: generate(None), lambda: generate("sdpa"), "eager", "sdpa"),
              ("scoring attention", lambda: score(False, "eager"), lambda: score(False, "sdpa"), "eager", "sdpa"),
              ("gradnorm", lambda: gradnorm(False), lambda: gradnorm(True), "per-item loop", "torch.func vmap")]
    print(f"\nLevers ({len(pairs)} scored sequences, {len(questions)} generated answers), median of "
          f"{args.rounds} alternating rounds")
    print("| lever | before | after | after / before | largest difference |\n|---|---|---|---|---|")
    for name, before, after, label_b, label_a in levers:
        tb, ta, outs = [], [], {}
        for r in range(args.rounds):
            for which, fn in ((("b", before), ("a", after)) if r % 2 == 0 else (("a", after), ("b", before))):
                t, out = fn()
                (tb if which == "b" else ta).append(t)
                outs[which] = out
        if name.startswith("generation"):
            diff = f"{sum(x != y for x, y in zip(outs['a'], outs['b']))} of {len(questions)} answers differ"
        else:
            what = "per-item gradient norm" if name == "gradnorm" else "per-item NLL"
            diff = f"{max(abs(x - y) for x, y in zip(outs['a'], outs['b'])):.1e} ({what})"
        mb, ma = statistics.median(tb), statistics.median(ta)
        print(f"| {name} | {label_b}: {mb:.2f} s | {label_a}: {ma:.2f} s | {ma / mb:.2f} | {diff} |")
    print(f"\n({time.perf_counter() - started:.0f} s in all)")


def _gradnorm_vmap(network, scoring, pairs, chunk: int = 4) -> list[float]:
    """The gradnorm attack's scores (mean over parameter tensors of ‖∇ mean answer NLL‖₂) from per-sample
    gradients: torch.func.vmap of grad over padded, length-sorted chunks."""
    import torch
    from torch.func import functional_call, grad, vmap

    from lit_unlearn.algorithms.losses import IGNORE_INDEX

    params = {n: q.detach() for n, q in network.named_parameters()}

    def loss_one(p, ids, mask, labels):
        logits = functional_call(network, p, (ids[None],), {"attention_mask": mask[None]})[0, :-1]
        target = labels[1:]
        valid = (target != IGNORE_INDEX).to(torch.float32)
        lp = torch.log_softmax(logits.float(), -1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return -(lp * valid).sum() / valid.sum()

    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0, 0))
    order = sorted(range(len(pairs)), key=lambda i: len(scoring.encode(pairs[i])["input_ids"]))
    out = [0.0] * len(pairs)
    for c in range(0, len(order), chunk):
        idx = order[c:c + chunk]
        b = scoring.batch([pairs[i] for i in idx], "cpu")
        g = per_sample(params, b["input_ids"], b["attention_mask"], b["labels"])
        norms = torch.stack([v.flatten(1).float().norm(dim=1) for v in g.values()], 1).mean(1)
        for i, n in zip(idx, norms.tolist()):
            out[i] = n
    return out


if __name__ == "__main__":
    main()
