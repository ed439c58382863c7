"""Run the TOFU evaluation of a causal LM: per-item scores, the headline table, and the reference file.

    report = TofuEvaluator(tokenizer, eval_splits).run(network)           # eval_splits: TofuSource.eval_splits()
    report.save("runs/tofu/retrain_eval.json")                           # the retrained model: the reference
    TofuEvaluator(tokenizer, splits, reference="runs/tofu/retrain_eval.json").run(unlearned).table()

The evaluation is three kinds of per-item pass and the metric units that read them:

| pass | unit | metrics |
|---|---|---|
| teacher-forced scoring (`tofu_scoring`) | `split_scores` | truth ratio, probability, NLL, ES, EM per split |
| greedy generation (`tofu_rouge`) | `rouge_scores` | ROUGE-L recall per split |
| scoring of forget and holdout answers; a backward pass per item for gradnorm (`tofu_mia`) | `membership_scores` | the MIA AUCs and per-item attack scores |
| none (`tofu_aggregate`) | `aggregate` | model utility, forget quality, privleak |

Each target metric declares the passes it needs (`TARGET_METRICS`), a request's passes are their union, and a
pass shared by several metrics runs once: a stop rule that asks for the attacks pays for no generation.

Forget quality compares the unlearned model's per-item forget truth ratios with the retrained model's. Without
a reference it is reported as missing, loudly (a warning, "n/a" in the table, `forget_quality: null` in JSON),
never silently; `require_reference=True` makes it an error.

Under data parallelism each process scores items rank::world_size and the torchmetrics states gather them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from lit_unlearn.data.qa_format import MAX_LENGTH, QAFormatter
from lit_unlearn.distributed.sharded_grads import zero3_partitioned
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.eval_mode import eval_mode
from lit_unlearn.metrics.metric_units import EVERY_SPLIT, METRIC_UNITS, Passes
from lit_unlearn.metrics.mia_convention import MIAConvention, get_convention
from lit_unlearn.metrics.tofu.aggregate import aggregate, check_forget_items
from lit_unlearn.metrics.tofu.torch_metrics import rank_and_world
from lit_unlearn.metrics.tofu.mia import gradient_norms, membership_scores, reference_attack, reference_nll
from lit_unlearn.metrics.tofu.report import HEADLINE, TofuReport, load_reference, summary_of
from lit_unlearn.metrics.tofu.rouge import GreedyAnswers, rouge_scores
from lit_unlearn.metrics.tofu.scoring import TeacherForcedScoring, nll_only_pairs, split_pairs, split_scores
from lit_unlearn.metrics.tofu.verification import tofu_verification

__all__ = ["TofuEvaluator", "TofuReport", "HEADLINE", "TARGET_METRICS", "PASSES", "Passes"]

# A target metric (lit_unlearn.metrics.metric_units) -> (report key, the passes it needs): the evaluator's units.
TARGET_METRICS = {name: (u.report_key, u.passes) for name, u in METRIC_UNITS.items()
                  if u.kind == "tofu" and u.passes is not None}
# Passes a caller may ask for by name besides target metrics: the membership attacks' per-item scores on forget and
# holdout (the reference-free verification), and with them the gradient-norm attack (a backward pass per item).
PASSES = {"membership": Passes(membership=True), "gradnorm": Passes(membership=True, gradnorm=True)}
EVERYTHING = Passes(score=frozenset({EVERY_SPLIT}), generate=frozenset({EVERY_SPLIT}), membership=True,
                    gradnorm=True)


class TofuEvaluator:
    def __init__(self, tokenizer, eval_splits: dict[str, list[dict]], template: str = "plain",
                 max_length: int = MAX_LENGTH,
                 max_new_tokens: int | None = None, batch_size: int = 32, reference: str | Path | dict | None = None,
                 require_reference: bool = False, min_k: float = 0.4, mia_convention: str = "lit-unlearn",
                 input_format: str = "lit-unlearn", gradnorm: bool = True, gradnorm_p: float = 2.0,
                 baseline: str | Path | dict | None = None, generation_attention: str | None = "sdpa") -> None:
        """
        Args:
            max_length: sequences (prompt + answer) longer than this are cut, counted per split in the report and
                warned about (TOFU's and open-unlearning's 512 by default).
            max_new_tokens: the greedy answers' budget for ROUGE; None: the fewest tokens that let ≥ 95 % of every
                generated split's reference answers fit whole, at most TOFU's 200 (stated in the report).
            mia_convention: "lit-unlearn" or "open-unlearning" (Min-K%, Min-K%++, zlib, ES/EM and privleak's
                fallback computed exactly as open-unlearning does; docs/guide/llm.md lists the differences).
            input_format: "lit-unlearn" or "open-unlearning" (its tokenisation of the template).
            gradnorm: run the gradient-norm MIA (one backward pass per forget/holdout item).
            baseline: the report (or its summary) of the model before unlearning: model utility is then also
                given as a ratio to its value in the verification measures.
            generation_attention: the attention greedy answers are generated with when the model is on eager
                ("sdpa": the same answers, faster; None: the model's own). Scoring always uses the model's own:
                sdpa moves per-item NLLs by up to 3e-6 there.
        """
        if "forget" not in eval_splits:
            raise UserError("the TOFU evaluation needs a 'forget' split (with perturbed answers)")
        self.formatter = QAFormatter(tokenizer, template, max_length, input_format=input_format)
        self.tokenizer, self.splits = tokenizer, eval_splits
        self.min_k = min_k
        self.convention: MIAConvention = get_convention(mia_convention)
        self.gradnorm, self.gradnorm_p = gradnorm, gradnorm_p
        self.reference = load_reference(reference)
        self.baseline = summary_of(baseline)
        if require_reference and self.reference is None:
            raise UserError("require_reference=True but no reference evaluation of the retrained model was given")
        if self.reference is not None:
            check_forget_items(self.reference, eval_splits["forget"])
        self.scoring = TeacherForcedScoring(self.formatter, tokenizer.pad_token_id, batch_size)
        self.answers = GreedyAnswers(tokenizer, self.formatter, eval_splits, batch_size, max_new_tokens,
                                     generation_attention)
        self._warned = False  # the truncation warning, once per evaluator
        self._truncated: dict[str, list[int]] = {}  # split -> [sequences cut, sequences]
        self._gradnorm_cache: dict = {}  # pair -> gradient norm of the current run's weights

    def generation(self) -> dict:
        """The ROUGE answers' budget and the share of each generated split's reference answers it covers."""
        return self.answers.budget()

    def passes(self, only: list[str] | None = None) -> Passes:
        """What a run evaluates: everything, or the union of what the named metrics and passes need."""
        if only is None:
            wanted = EVERYTHING if self.gradnorm else Passes(**{**EVERYTHING.__dict__, "gradnorm": False})
        else:
            known = {**TARGET_METRICS, **PASSES}
            unknown = [m for m in only if m not in known]
            if unknown:
                raise ValueError(f"unknown TOFU target metrics {unknown}; known: {sorted(known)}")
            wanted = Passes()
            for m in only:
                wanted = wanted | (PASSES[m] if m in PASSES else TARGET_METRICS[m][1])
            wanted = Passes(wanted.score, wanted.generate, wanted.membership, wanted.gradnorm and self.gradnorm)
        return wanted.resolved(list(self.splits))

    # ----- the evaluation -----------------------------------------------------------------------------------------
    def run(self, network: nn.Module, device: torch.device | str | None = None,
            only: list[str] | None = None) -> TofuReport:
        """The full report, or with `only` (target metric names, see TARGET_METRICS) just what they need."""
        device = device or next(network.parameters()).device
        plan = self.passes(only)
        rank, world = rank_and_world()
        summary: dict[str, float | None] = {}
        per_item: dict[str, dict[str, list[float]]] = {}
        notes: list[str] = []
        mine = {name: rows[rank::world] for name, rows in self.splits.items()}
        membership = plan.membership and self._has_holdout(notes)
        shared = self.share(network)  # what other evaluators already computed on these same weights
        self.scoring.new_run(shared["scoring"])
        self.answers.cache, self._gradnorm_cache = shared["answers"], shared["gradnorm"]
        try:
            with eval_mode(network):  # every submodule gets its own mode back (frozen BatchNorm stays frozen)
                # One teacher-forced stream over every pair any unit needs.
                pairs = [p for name in self.splits if name in plan.score for p in split_pairs(name, mine[name])]
                answers = {(r["question"], r["answer"]) for name in self.splits if name in plan.score
                           for r in mine[name]}
                if membership:
                    answers |= {(r["question"], r["answer"]) for name in ("forget", "holdout") for r in mine[name]}
                nll_only = {p for name in self.splits if name in plan.score
                            for p in nll_only_pairs(name, mine[name])} - answers
                self.scoring.score(network, pairs + sorted(answers), device, nll_only)
                for name in self.splits:
                    if name in plan.score:
                        stats = self.scoring.stats(network, split_pairs(name, mine[name]), device, nll_only)
                        per_item[name] = split_scores(name, mine[name], stats, self.convention, summary)
                    if name in plan.generate:
                        answers = self.answers.answers(network, [r["question"] for r in mine[name]], device)
                        per_item.setdefault(name, {}).update(rouge_scores(name, mine[name], answers, summary))
                if membership:
                    per_item["mia"] = self._membership(network, device, plan, mine, rank, world, summary, notes,
                                                       full=only is None)
        finally:
            self.scoring.new_run()  # these weights may change next: nothing of theirs is read without a new share()
            self.answers.cache, self._gradnorm_cache = {}, {}
        aggregate(summary, per_item, notes, self.reference, self.convention, self.splits["forget"],
                  partial=only is not None)
        verification = tofu_verification(summary, per_item, self.reference, self.baseline)
        report = TofuReport(summary, per_item, notes, self.convention.name, verification,
                            self._truncation(list(per_item) + (["holdout"] if "mia" in per_item else [])),
                            self.formatter.max_length, self.generation() if plan.generate else None)
        if any(c for c, _ in report.truncated.values()) and not self._warned:
            self._warned = True
            warnings.warn(report.truncation_note(), stacklevel=2)
        return report

    def share(self, network: nn.Module) -> dict[str, dict]:
        """Stores for this run's scores, answers and gradient norms: the network's memo for its current weights
        (lit_unlearn.metrics.weights_memo), under keys of everything else they depend on; fresh where none is
        kept (several processes)."""
        from lit_unlearn.metrics.weights_memo import memo_for

        memo = memo_for(network)
        if memo is None:
            return {"scoring": {}, "answers": {}, "gradnorm": {}}
        f, tok = self.formatter, self.tokenizer
        text = (getattr(tok, "name_or_path", None), len(tok), f.template, f.max_length, f.input_format)
        differentiated = tuple(n for n, q in network.named_parameters() if q.requires_grad)
        return {"scoring": memo.store(("scoring", text, self.scoring.batch_size, self.scoring.batch_tokens)),
                "answers": memo.store(("answers", text, self.answers.settings())),
                "gradnorm": memo.store(("gradnorm", text, self.gradnorm_p, self.convention.drop_last_token,
                                        differentiated))}

    def _has_holdout(self, notes: list[str]) -> bool:
        if self.splits.get("holdout"):
            return True
        notes.append("membership inference: no holdout split, MIA AUCs not computed")
        return False

    def _membership(self, network, device, plan: Passes, mine, rank, world, summary, notes, full: bool) -> dict:
        """The membership unit's inputs: the answers' stats from the scoring pass, gradnorm from its own pass (not
        on ZeRO-3 partitioned weights), the reference attack in a full report when the reference has NLLs."""
        run_gradnorm = plan.gradnorm
        if run_gradnorm and zero3_partitioned(network):
            run_gradnorm = False
            notes.append("gradnorm MIA not computed: the parameters are ZeRO-3 partitioned (evaluate the saved "
                         "model with `lit-unlearn tofu-eval` for it)")
        ref_nll = reference_nll(self.reference) if full else None
        if full and self.reference is not None and ref_nll is None:
            notes.append("reference MIA not computed: the reference report has no per-item forget/holdout NLLs "
                         "(save it again with this version)")
        sides, extra = {}, {}
        for split in ("forget", "holdout"):
            rows = mine[split]
            pairs = [(r["question"], r["answer"]) for r in rows]
            stats = self.scoring.stats(network, pairs, device)
            sides[split] = (rows, stats, len(self.splits[split]))
            extra[split] = {}
            if run_gradnorm:
                extra[split]["gradnorm"] = gradient_norms(network, self.scoring, pairs, device, self.gradnorm_p,
                                                          self.convention.drop_last_token, self._gradnorm_cache)
            if ref_nll is not None:
                loss = torch.tensor([st.nll for st in stats], dtype=torch.float64)
                extra[split]["reference"] = reference_attack(ref_nll, split, len(self.splits[split]), loss, rank,
                                                             world)
        return membership_scores(sides, extra, self.convention, self.min_k, self.tokenizer, world, summary)

    def _truncation(self, names: list[str]) -> dict[str, list[int]]:
        """[sequences cut at max_length, sequences] of each evaluated split, over all of its items (every rank)."""
        for name in names:  # the data never changes: counted once per split, read back on later runs
            if name in self.splits and name not in self._truncated:
                pairs = split_pairs(name, self.splits[name])
                self._truncated[name] = [self.scoring.truncated(pairs), len(pairs)]
        return {name: list(self._truncated[name]) for name in names if name in self._truncated}
