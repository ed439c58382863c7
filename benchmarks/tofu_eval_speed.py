"""TOFU evaluation throughput (items/s, scoring and generation) of today's evaluator against the evaluator as it
was before batching every answer variant, measured side by side on the same model and data.

"Before" is reproduced here as a subclass (`PerVariantEvaluator`): one scoring pass per answer variant (answer,
paraphrase, perturbed), the forget answers scored again for membership inference, a float32 copy of every
answer's logits kept per item, and generation batches in data order. "Now" is `TofuEvaluator`: one length-sorted
pass over each split's distinct (question, answer) pairs, reused by the membership pass, per-token scalars only,
and length-sorted generation with the KV cache. The script also checks that both give the same numbers.

    python benchmarks/tofu_eval_speed.py [--folder runs/tofu] [--rounds 3] [--max-new-tokens 48] [--vocab 0]

--vocab V > 0 evaluates a random tiny Llama with a V-token output layer instead (e.g. 32000, Llama-2's), to show
the memory the logits copies cost at a real vocabulary.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.batches import logits_and_labels
from lit_unlearn.metrics import TofuEvaluator
from lit_unlearn.metrics.tofu_eval import AnswerStats


class TimedGeneration(TofuEvaluator):
    """Accumulates the time spent generating, so scoring time = run time − generation time."""

    gen_seconds = 0.0
    kept_bytes = 0

    def _generate(self, network, questions, device):
        t = time.perf_counter()
        out = super()._generate(network, questions, device)
        self.gen_seconds += time.perf_counter() - t
        return out

    def _answer_stats(self, network, pairs, device):
        stats = super()._answer_stats(network, pairs, device)
        self.kept_bytes = max(self.kept_bytes, sum(sum(t.numel() * t.element_size() for t in
                                                       (s.logp, s.mu, s.var, s.correct, s.label_ids))
                                                   for s in self._stats.values()))
        return stats


class PerVariantEvaluator(TimedGeneration):
    """The evaluator before this change: a pass per variant, no reuse, logits copies, unsorted batches."""

    @torch.no_grad()
    def _answer_stats(self, network, pairs, device):
        out, kept = [], 0
        for i in range(0, len(pairs), self.batch_size):
            chunk = pairs[i:i + self.batch_size]
            batch = {k: v.to(device) for k, v in
                     self._collate([self.formatter.encode(q, a) for q, a in chunk]).items()}  # re-tokenised
            logits, labels = logits_and_labels(network, batch)
            logp = torch.log_softmax(logits.float(), -1)
            valid = labels != IGNORE_INDEX
            picked = logp.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
            for j in range(labels.shape[0]):
                m = valid[j]
                token_logits = logits[j][m].float().cpu()  # kept for Min-K%++, as before
                kept += token_logits.numel() * 4
                p = torch.log_softmax(token_logits, -1)
                mu = (p.exp() * p).sum(-1)
                var = (p.exp() * p.square()).sum(-1) - mu.square()
                lp = picked[j][m].cpu()
                out.append(AnswerStats(float(-lp.double().mean()), lp, mu, var,
                                       (logp[j][m].argmax(-1) == labels[j][m]).cpu(), labels[j][m].cpu()))
        self.kept_bytes = max(self.kept_bytes, kept * (1 + len(self.splits)))  # a split's copies coexist
        return out

    @torch.no_grad()
    def _generate(self, network, questions, device):
        t = time.perf_counter()
        tok, out = self.tokenizer, []
        for i in range(0, len(questions), self.batch_size):
            prompts = [self.formatter.prompt_ids(q) for q in questions[i:i + self.batch_size]]
            n = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), n), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, p in enumerate(prompts):
                ids[j, n - len(p):], mask[j, n - len(p):] = torch.tensor(p), 1
            gen = network.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=self.max_new_tokens,
                                   pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            out += [tok.decode(g, skip_special_tokens=True).strip() for g in gen]
        self.gen_seconds += time.perf_counter() - t
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", default="runs/tofu", help="the tofu-demo assets (made here if missing)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=0)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(max(1, torch.get_num_threads()))

    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.worlds.generated_tofu import prepare_generated_tofu
    from lit_unlearn.worlds.tiny_llama import TINY_SIZE

    paths = prepare_generated_tofu(args.folder, log=lambda *a: None)
    tok = load_tokenizer(str(paths["tokenizer"]))
    splits = TofuSource(str(paths["data"])).eval_splits()
    if args.vocab:
        net = CausalLM(config=tiny_llama_config(vocab_size=args.vocab, **TINY_SIZE), seed=0)
    else:
        net = CausalLM(name_or_path=str(paths["target"]))
    net.eval()
    n_items = sum(len(r) for r in splits.values())
    n_questions = sum(len(r) for name, r in splits.items() if name != "holdout")

    def measure(cls):
        times, gens, report, kept = [], [], None, 0
        for _ in range(args.rounds):
            ev = cls(tok, splits, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, gradnorm=False)
            t = time.perf_counter()
            report = ev.run(net)
            times.append(time.perf_counter() - t)
            gens.append(ev.gen_seconds)
            kept = ev.kept_bytes
        total, gen = statistics.median(times), statistics.median(gens)
        return {"total": total, "gen": gen, "score": total - gen, "report": report, "kept": kept}

    before, now = measure(PerVariantEvaluator), measure(TimedGeneration)
    diffs = [abs(before["report"].summary[k] - v) for k, v in now["report"].summary.items()
             if v is not None and before["report"].summary.get(k) is not None]
    print(f"TOFU evaluation, {n_items} items ({n_questions} generated), median of {args.rounds} rounds, "
          f"{'random tiny Llama, vocab ' + str(args.vocab) if args.vocab else 'the tofu-demo target'}")
    print("| | before (per variant) | now (batched) | speed-up |")
    print("|---|---|---|---|")
    for key, label, items in (("score", "scoring items/s", n_items), ("gen", "generation items/s", n_questions),
                              ("total", "whole evaluation items/s", n_items)):
        b, n = items / before[key], items / now[key]
        print(f"| {label} | {b:.1f} | {n:.1f} | {n / b:.2f}x |")
    print(f"| per-item tensors kept (MB) | {before['kept'] / 1e6:.2f} | {now['kept'] / 1e6:.2f} | |")
    print(f"largest difference between the two reports' summary values: {max(diffs):.2e}")


if __name__ == "__main__":
    main()
