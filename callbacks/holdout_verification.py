"""Verify LLM forgetting without a retrained model: the forget set against a holdout set of the same kind that the
model never saw, by the membership attacks the literature uses, with an equivalence test
(lit_unlearn.verification.holdout_equivalence).

What it needs is what a Llama-2-7B user has: the model, the forget set, and a holdout split (TOFU's
holdout01/05/10, or a `holdout` split of your own data). No retain-only model is read, except for a report
labelled "gold standard" when one is given (`gold_standard=`).

Decide on one half, report on the other. The forget and holdout items are split once (lit_unlearn.verification.
steering_halves, seed `split_seed`) into a steering half and a reporting half:
- the steering half is what the run may read while it unlearns: `StopAtTarget` measures `holdout_band_ratio` (and
  model utility) on it at its fixed cadence, and HAMU's quota controller steers to its current holdout NLL. Every such
  measurement is a look; the report counts them.
- the reporting half is evaluated only before the first update (the target's numbers, for the table) and when
  fitting ends, after the stop rule has put back the weights it chose. The verdict, the table
  (`holdout_verification.md`), the JSON (`holdout_verification.json`) and TensorBoard's `verify/*` come from it.
Model utility (retain authors and general knowledge) is the same items in both halves: the stop rule reads it, and
the report says how many times.

The verdict (lit_unlearn.verification.full_verdict) runs every membership attack, the learned one included, each with
its own calibrated margin; with `reference_model` (the model the target was fine-tuned from) every score is taken
relative to it. The stop rule reads the verdict of the model as it is on the steering half (`steer_on="none"`), or
the full verdict, relearning and 4-bit included (`steer_on="full"`: tens of seconds per look on the tiny world, and
the report counts them). At the end the full verdict is given on the reporting half: before any attack, after
relearning (worst over the learning rates and step counts) and at 4 bits; on all attacks, and apart on the attacks
the module's objective does not read (its `reads_statistics`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.console import say
from lit_unlearn.core.errors import UserError
from lit_unlearn.callbacks.metric_source import MetricSource
from lit_unlearn.core.eval_mode import eval_mode
from lit_unlearn.core.plug_points import (
    DataFromSource,
    EntropyInForgetLoss,
    EvalSplitsSource,
    HoldoutLossSource,
    HoldoutProfileSource,
    QAFormatted,
    UnlearningRun,
    as_plug,
    require,
)

__all__ = ["HoldoutVerification", "UTILITY_METRICS", "BAND", "margins_origin", "next_steps"]

BAND = "holdout_band_ratio"
NO_HOLDOUT = ("no holdout data was given, so nothing tells whether the forget items now look like items the model "
              "never saw (the membership attacks, relearning, 4-bit); give holdout=FILE: items of the same kind and "
              "source as the forget set that the model was never trained on (at least 2 x 20 items)")
UTILITY_METRICS = ("model_utility", "model_utility_ratio")
ITEMS_PER_AUTHOR = 20  # TOFU's layout: a split's items come author by author, 20 each (steering_halves)
UTILITY_SPLITS = ("retain", "real_authors", "world_facts")


class HoldoutVerification(Callback, MetricSource, HoldoutLossSource, HoldoutProfileSource):
    kind = "tofu"

    def __init__(self, source=None, delta: float | None = None, delta_author: float | None = None, alpha: float = 0.05,
                 attacks: list[str] | None = None, n_boot: int = 2000, split_seed: int = 0,
                 items_per_author: int = ITEMS_PER_AUTHOR, template: str | None = None, max_length: int | None = None,
                 max_new_tokens: int | None = None, batch_size: int = 32, mia_convention: str = "lit-unlearn",
                 gold_standard: str | None = None, holdout_every_n_steps: int = 1,
                 reference_model: str | None = None, steer_on: str = "none", final_verdict: str = "full",
                 spec: dict | None = None, when_missing: str = "error") -> None:
        """
        Args:
            source: a TofuSource (default: the datamodule's); its eval splits must include `holdout`.
            delta: the equivalence margin δ of the pooled test: "forgotten" means every attack's interval lies in
                0.5 ± δ. None: each attack's margin calibrated for the forget level and condition
                (lit_unlearn.verification.holdout_calibration); "self": margins from the model's own holdout items
                (two sets of holdout authors against each other; needs 4 holdout authors per half).
            delta_author: the margin of the per-author tests (each forget author's items against every holdout
                item). None: the calibrated values.
            alpha: each one-sided test's level; the intervals are (1 − 2α) percentile intervals.
            attacks: membership attacks to run (default: all of lit_unlearn.metrics.membership_attacks.ATTACKS, the
                learned attack included).
            n_boot: bootstrap replicates (authors, then items within them).
            split_seed: the seed of the steering/reporting split (written in the report).
            items_per_author: rows without an `author` field are grouped into authors of this many consecutive
                items (TOFU's layout).
            max_new_tokens: the greedy answers' budget for model utility's ROUGE (None: the budget of the whole
                eval splits, as TofuEvaluation sets it, so both halves and the TOFU report measure one utility).
            gold_standard: a retain-only model's saved report ("world": the one beside the data folder), shown
                beside the verdict as a gold standard; never read by a decision.
            holdout_every_n_steps: how often the holdout NLL a forget ceiling reads (forget_ceiling='holdout') is
                measured afresh, on the steering half's holdout items, when no look of a stopping rule is as recent.
            reference_model: the model the target was fine-tuned from ("world": the world's base beside the data
                folder; a path or hub name otherwise): every attack's score is taken relative to it (difficulty
                calibration). None: raw scores, with the raw calibration.
            steer_on: what a stop rule's look reads on the steering half: "none" (the model as it is) or "full"
                (relearning and 4-bit too).
            final_verdict: "full" (before any attack, relearning, 4-bit) or "none" (the model as it is only).
            spec: VerdictSpec fields (relearning rates and steps, quantisation, `paraphrase` true or false for the
                fourth part; by default it runs where it can) to change; the calibrated margins hold only for the
                defaults.
            when_missing: "error" (no holdout data is a one-line error) or "skip" (the run goes on, and says what it
                could not check and how to supply it: the user's own job, where holdout data is optional).
        """
        super().__init__()
        from lit_unlearn.metrics.membership_attacks import ATTACKS
        from lit_unlearn.verification.full_verdict import VerdictSpec

        attacks = list(attacks or ATTACKS)
        unknown = sorted(set(attacks) - set(ATTACKS))
        if unknown or not attacks:
            raise UserError(f"HoldoutVerification: unknown attacks {unknown}; choose from {list(ATTACKS)}")
        if delta == "self":
            delta_author = "self"
        for name, value in (("delta", delta), ("delta_author", delta_author)):
            if value is not None and value != "self" and not 0 < value <= 0.5:
                raise UserError(f"HoldoutVerification: {name} must be in (0, 0.5] or 'self', got {value}")
        if when_missing not in ("error", "skip"):
            raise UserError(f"HoldoutVerification: when_missing is 'error' or 'skip', got {when_missing!r}")
        self.when_missing = when_missing
        self.skipped: str | None = None  # why the verdict does not run in this run (when_missing='skip')
        if steer_on not in ("none", "full") or final_verdict not in ("none", "full"):
            raise UserError(f"HoldoutVerification: steer_on and final_verdict are 'none' or 'full', got {steer_on!r}, "
                            f"{final_verdict!r}")
        try:
            self.spec = VerdictSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in (spec or {}).items()})
        except TypeError as err:
            raise UserError(f"HoldoutVerification(spec=...): {err}") from None
        self.reference_model, self.steer_on, self.final_verdict = reference_model, steer_on, final_verdict
        self.runner = None
        if holdout_every_n_steps < 1:
            raise UserError(f"HoldoutVerification: holdout_every_n_steps must be ≥ 1, got {holdout_every_n_steps}")
        if not 0 < alpha < 0.5 or n_boot < 100 or items_per_author < 2:
            raise UserError(f"HoldoutVerification: need 0 < alpha < 0.5, n_boot ≥ 100 and items_per_author ≥ 2 "
                            f"(got {alpha}, {n_boot}, {items_per_author})")
        self.source, self.delta, self.delta_author, self.alpha, self.attacks = source, delta, delta_author, alpha, attacks
        self.n_boot, self.split_seed, self.items_per_author = n_boot, split_seed, items_per_author
        self.template, self.max_length, self.max_new_tokens = template, max_length, max_new_tokens
        self.batch_size, self.mia_convention, self.gold_standard = batch_size, mia_convention, gold_standard
        self.holdout_every_n_steps = holdout_every_n_steps
        self.halves: dict[str, Any] | None = None     # {"forget": Halves, "holdout": Halves}
        self._groups: dict[str, list] = {}
        self._splits: dict[str, dict[str, list[dict]]] = {}
        self._evaluators: dict[str, Any] = {}
        self._budget: int | None = None  # the greedy answers' budget of the whole splits (set up in setup)
        self._source = self._tokenizer = self._formatter = None
        self.level: str | None = None
        # What the run saw, kept in checkpoints: looks at the steering half, the target's utility, the last verdict.
        self.looks = 0
        self.holdout_level: dict | None = None  # the last measurement for a ceiling (between looks)
        self.holdout_measurements = 0
        self.utility_looks = 0
        self.start_utility: float | None = None
        self.last: dict[str, Any] | None = None       # the last steering look: verdict dict, holdout NLL
        self.before: dict | None = None               # the target on the reporting half
        self.after: dict | None = None
        self.look_seconds = 0.0                       # time the looks at the steering half took

    # ----- setup -------------------------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self.halves is not None:
            return
        data, qa = as_plug(trainer.datamodule, DataFromSource), as_plug(trainer.datamodule, QAFormatted)
        source = self.source or (data.source if data else None)
        require(source, EvalSplitsSource, "HoldoutVerification", "give `source=` or use a TofuDataModule",
                structural=True)
        qa = require(qa, QAFormatted, "HoldoutVerification", "use a TofuDataModule (its QAFormatter tokenises the items)")
        self._formatter = qa.formatter
        self._source, self._tokenizer = source, qa.formatter.tokenizer
        self.level = getattr(source, "forget_level", None)
        splits = source.eval_splits()
        if not splits.get("holdout"):
            if self.when_missing == "skip":
                self._skip(trainer, NO_HOLDOUT)
                return
            raise UserError(f"HoldoutVerification needs a holdout split in {getattr(source, 'path', 'the data')}: "
                            "items of the same kind the model never saw (TOFU: holdout01/05/10; your own data: "
                            "holdout=FILE)")
        from lit_unlearn.distributed.sharded_grads import zero_stage

        if zero_stage(trainer.strategy) == 3:
            self._skip(trainer, "the weights are ZeRO-3 partitioned, and the verdict's relearning attack trains a "
                                "copy of the whole model: give the verdict on the exported model after the run "
                                "(`lit-unlearn audit --model RUN/model --forget F --holdout H`)")
            return
        # Both halves answer in the budget of the whole splits, the TOFU report's: model utility (the stop rule's
        # ratio, the reported ratio, the report's) is then one measure, whichever half's evaluator computed it.
        from lit_unlearn.data.tofu import MAX_LENGTH
        from lit_unlearn.metrics.tofu.rouge import answer_budget
        from lit_unlearn.verification.verdict_runner import VerdictRunner

        self._budget = self.max_new_tokens or answer_budget(self._tokenizer, splits)["max_new_tokens"]
        fmt = self._formatter
        self._format = {"template": self.template or getattr(fmt, "template", "plain"),
                        "max_length": self.max_length or getattr(fmt, "max_length", None) or MAX_LENGTH,
                        "input_format": getattr(fmt, "input_format", "lit-unlearn")}
        base = self.reference_model or getattr(source, "base_model", None)  # OwnData states the job's base model
        if base == "world":
            base = str(Path(getattr(source, "path", "")).parent / "base")
            if not (Path(base) / "config.json").is_file():
                raise UserError(f"HoldoutVerification(reference_model='world'): no base model at {base}")
        if self.delta == "self":
            margins = "self"
        elif self.delta is not None or self.delta_author is not None:
            if self.delta is None or self.delta_author is None:
                raise UserError("HoldoutVerification: give both delta and delta_author, or neither")
            margins = (self.delta, self.delta_author)
        else:
            margins = "calibrated"
        self.runner = VerdictRunner(self._tokenizer, splits["forget"], splits["holdout"], self.level, self.spec,
                                    mode="best" if base else "raw", base=base, margins=margins,
                                    attacks=self.attacks, split_seed=self.split_seed,
                                    items_per_author=self.items_per_author, batch_size=self.batch_size,
                                    mia_convention=self.mia_convention, gradnorm="gradnorm" in self.attacks,
                                    **self._format)
        self._groups, self.halves = self.runner.groups, self.runner.halves
        for half in ("steering", "reporting"):
            chosen = {side: getattr(self.halves[side], half) for side in ("forget", "holdout")}
            self._splits[half] = {**{side: [splits[side][i] for i in chosen[side]] for side in ("forget", "holdout")},
                                  **{k: splits[k] for k in UTILITY_SPLITS if k in splits}}

    def _skip(self, trainer, why: str) -> None:
        self.skipped = why
        if trainer.is_global_zero:
            say(f"note: no verdict in this run: {why}")

    def _authors(self, rows: list[dict], side: str) -> list:
        from lit_unlearn.verification.steering_halves import author_groups

        return author_groups(rows, side, self.items_per_author)

    def _evaluator(self, trainer, half: str):
        if half not in self._evaluators:
            from lit_unlearn.metrics import TofuEvaluator

            self._evaluators[half] = TofuEvaluator(
                self._tokenizer, self._splits[half], max_new_tokens=self._budget, batch_size=self.batch_size,
                mia_convention=self.mia_convention, gradnorm="gradnorm" in self.attacks, **self._format)
        return self._evaluators[half]

    def _passes(self, utility: bool = False) -> list[str]:
        passes = ["membership"] + (["gradnorm"] if "gradnorm" in self.attacks else [])
        return passes + (["model_utility"] if utility else [])

    def _verdict(self, report, half: str, mia: dict | None = None, reads=frozenset()):
        """The verdict of the model as it is on one half: from a half evaluator's report (its scores are the half's
        items in order), or from `mia`, whole splits' scores of another report (subset to the half)."""
        from lit_unlearn.verification.full_verdict import Scored

        if mia is None:
            mia = report.per_item["mia"]
        else:
            mia = {k: [v[i] for i in getattr(self.halves[k.split("_", 1)[0]], half)] for k, v in mia.items()
                   if k.split("_", 1)[0] in self.halves}
        everything = list(range(len(self.runner.items[half].forget)))
        return self.runner.judge({"none": Scored(mia, everything)}, half, reads, power=False).verdicts["none"]

    # ----- MetricSource (read by StopAtTarget and, through it, HAMU's quota controller) -------------------------------
    def available(self, metric: str) -> bool:
        return self.skipped is None and (metric == BAND or metric in UTILITY_METRICS)

    def reference_values(self) -> dict[str, float]:
        return {"delta": self.delta, "delta_author": self.delta_author}

    def target_values(self, trainer, pl_module, names=None) -> dict[str, float]:
        """A look at the steering half: the band of every attack's interval, and model utility if asked."""
        names = list(names or [BAND, *UTILITY_METRICS])
        utility = any(n in UTILITY_METRICS for n in names)
        report = self._evaluator(trainer, "steering").run(
            pl_module.network, pl_module.device, only=self._passes(utility) if BAND in names else ["model_utility"])
        values: dict[str, float] = {}
        if BAND in names:
            import time

            started = time.perf_counter()
            reads = _reads(pl_module)
            verdict = self._verdict(report, "steering", reads=reads)
            band, full = verdict.band_ratio, None
            if self.steer_on == "full":
                full = self.runner.verdict(pl_module.network, "steering", reads=reads, power=False)  # reads the band
                band = full.band_ratio
            self.look_seconds += time.perf_counter() - started
            holdout, entropy = report.per_item["mia"]["holdout_loss"], report.per_item["mia"]["holdout_entropy"]
            self.looks += 1
            self.last = {"step": trainer.global_step, "verdict": verdict.as_dict(),
                         "full": None if full is None else full.as_dict(),
                         "wants_more_forgetting": _oriented(verdict).wants_more_forgetting(),
                         "holdout_nll": sum(holdout) / len(holdout), "holdout_entropy": sum(entropy) / len(entropy)}
            values[BAND] = band
            self._log(trainer, verdict.scalars("verify/steering/"))
            if full is not None:
                self._log(trainer, full.scalars("verify/steering/full/"))
        if utility:
            self.utility_looks += 1
            mu = _utility(report.summary)
            if self.start_utility is None and trainer.global_step == 0:
                self.start_utility = mu
            values["model_utility"] = mu
            values["model_utility_ratio"] = None if not self.start_utility or mu is None else mu / self.start_utility
        return {n: values.get(n) for n in names}

    def forget_loss_goal(self, trainer=None, pl_module=None) -> float | None:
        """The current model's mean answer NLL on the steering half's holdout items, at the last look: how
        unfamiliar unseen items of the same kind are to this model now (plus their mean predictive entropy for a
        module whose forget objective adds it, HAMU's forget_entropy)."""
        if self.last is None:
            return None
        entropy = as_plug(pl_module, EntropyInForgetLoss)
        extra = self.last["holdout_entropy"] if entropy and entropy.forget_entropy else 0.0
        return self.last["holdout_nll"] + extra

    def holdout_loss(self, trainer=None, pl_module=None) -> float | None:
        """The mean holdout NLL alone, for methods that bound their forget objective by it
        (forget_ceiling='holdout'). Given the trainer and module, it is measured afresh when no look or measurement
        is younger than `holdout_every_n_steps` steps, so a ceiling never waits for a stopping rule's look."""
        level = self._holdout_level(trainer, pl_module)
        return None if level is None else level["holdout_nll"]

    def holdout_entropy(self, trainer=None, pl_module=None) -> float | None:
        """The model's mean predictive entropy over the answer tokens of the steering half's holdout items (as
        fresh as holdout_loss): how uncertain it is about unseen items (HAMU's forget_entropy aims there)."""
        level = self._holdout_level(trainer, pl_module)
        return None if level is None else level.get("holdout_entropy")

    def holdout_token_profile(self, trainer=None, pl_module=None) -> dict[str, list[float]] | None:
        """Quantile grids of the model's per-token surprisal −log p(y_t) and Min-K %++ score z_t over the answer
        tokens of the steering half's holdout items (as fresh as holdout_loss; _token_profile): what unseen items
        look like to the model token by token (HoldoutMatch steers each forget item's tokens there)."""
        level = self._holdout_level(trainer, pl_module, profile=True)
        keys = ("surprisal", "z", "surprisal_pooled", "z_pooled")
        return None if level is None or "z" not in level else {k: level[k] for k in keys}

    def _holdout_level(self, trainer, pl_module, profile: bool = False) -> dict | None:
        """The freshest holdout NLL and entropy of a look or a measurement; measured (holdout items only: no forget
        item, no attack, no verdict) when the freshest is holdout_every_n_steps steps old or older."""
        if self.skipped:
            return None
        fresh = max((x for x in (self.last, self.holdout_level) if x is not None), key=lambda x: x["step"],
                    default=None)
        if trainer is None or pl_module is None:
            return fresh
        step = trainer.global_step
        if fresh is not None and step - fresh["step"] < self.holdout_every_n_steps and (not profile or "z" in fresh):
            return fresh
        rows = self._splits["steering"]["holdout"]
        evaluator = self._evaluator(trainer, "steering")
        scoring = evaluator.scoring
        scoring.new_run(evaluator.share(pl_module.network)["scoring"])  # as TofuEvaluator.run: these weights' scores
        try:
            with eval_mode(pl_module.network):
                stats = scoring.stats(pl_module.network, [(r["question"], r["answer"]) for r in rows],
                                      pl_module.device)
        finally:
            scoring.new_run()  # these weights are about to change: keep nothing of theirs here
        self.holdout_measurements += 1
        self.holdout_level = {"step": step, "holdout_nll": sum(st.nll for st in stats) / len(stats),
                              "holdout_entropy": sum(-float(st.mu.double().mean()) for st in stats) / len(stats),
                              **_token_profile(stats)}
        return self.holdout_level

    def wants_more_forgetting(self) -> bool | None:
        return None if self.last is None else self.last["wants_more_forgetting"]

    # ----- the report (reporting half) ---------------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_step != 0 or self.skipped:
            return
        if self.start_utility is None:  # the target's utility: the ratio's baseline (a look at utility only)
            self.target_values(trainer, pl_module, list(UTILITY_METRICS))
        if self.before is None:
            report = self._evaluator(trainer, "reporting").run(pl_module.network, pl_module.device,
                                                               only=self._passes())
            self.before = self._verdict(report, "reporting").as_dict()

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.skipped:
            run = as_plug(pl_module, UnlearningRun)
            if run:
                run.run_report.notes.append(f"no verdict: {self.skipped}")
            return
        if self.halves is None:
            return
        import warnings

        with warnings.catch_warnings():  # no retain-only reference here by design: forget quality is not asked
            warnings.filterwarnings("ignore", message="forget quality not computed")
            report = self._evaluator(trainer, "reporting").run(pl_module.network, pl_module.device)
        reads = _reads(pl_module)
        verdict = self._verdict(report, "reporting", reads=reads)
        full = None
        if self.final_verdict == "full":
            say("== the verdict on the reporting half: relearning and 4-bit attacks ==")
            full = self.runner.verdict(pl_module.network, "reporting", reads=reads,
                                       log=lambda line: say(line))
        mu = _utility(report.summary)
        self.after = {"verdict": verdict.as_dict(), "full": None if full is None else full.as_dict(),
                      "model_utility": mu, "utility_from": _utility_label(report.summary),
                      "model_utility_ratio": None if not self.start_utility or mu is None else mu / self.start_utility,
                      "summary": report.summary,
                      # the reporting half's per-item attack scores, in the order of split.{side}.reporting
                      "per_item": {k: v for k, v in report.per_item["mia"].items() if not k.endswith("_nll")}}
        gold = self._gold_standard(trainer)
        result = self.result(gold)
        folder = trainer.log_dir or trainer.default_root_dir
        if trainer.is_global_zero:
            scalars = verdict.scalars("verify/")
            if full is not None:
                scalars.update(full.scalars("verify/full/"))
            if self.after["model_utility_ratio"] is not None:
                scalars["verify/model_utility_ratio"] = self.after["model_utility_ratio"]
            scalars["verify/looks"] = float(self.looks)
            scalars["verify/look_seconds"] = self.look_seconds
            self._log(trainer, scalars)
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / "holdout_verification.json").write_text(json.dumps(result, indent=1, default=float))
            table = holdout_table(result)
            (Path(folder) / "holdout_verification.md").write_text(table + "\n")
            say("\n" + table)
        run = as_plug(pl_module, UnlearningRun)
        if run:
            run.run_report.notes.append(f"reference-free verification (reporting half): {headline(result)}; "
                                              f"{self.looks} looks at the steering half")

    def _gold_standard(self, trainer) -> dict | None:
        """The retain-only model's verdict on the same reporting half, from its saved report (never decides)."""
        if self.gold_standard is None:
            return None
        path = Path(self.gold_standard)
        if self.gold_standard == "world":
            path = Path(getattr(self._source, "path", "")).parent / f"retain_only_{self.level}_eval.json"
        if not path.is_file():
            raise UserError(f"HoldoutVerification(gold_standard={self.gold_standard!r}): {path} not found")
        mia = (json.loads(path.read_text()).get("per_item") or {}).get("mia") or {}
        if not any(f"forget_{a}" in mia for a in self.attacks):
            return {"path": str(path), "note": "the report has no per-item attack scores (evaluate it again)"}
        return {"path": str(path), "verdict": self._verdict(None, "reporting", mia).as_dict(),
                "note": "the model as it is only (no relearning or quantisation of the gold standard here)"}

    def result(self, gold: dict | None = None) -> dict:
        return {"level": self.level, "margins_from": margins_origin(self._source, self.runner),
                "next_steps": next_steps(self.after), "delta": self.delta, "delta_author": self.delta_author, "alpha": self.alpha,
                "attacks": self.runner.attacks, "mode": self.runner.mode, "margins": _margins_label(self.runner),
                "reference_model": self.reference_model, "spec": self.runner.spec.as_dict(), "steer_on": self.steer_on,
                "looks": self.looks, "utility_looks": self.utility_looks, "look_seconds": self.look_seconds,
                "split": {side: h.as_dict() for side, h in self.halves.items()},
                "before": self.before, "after": self.after, "last_steering_look": self.last,
                "gold_standard": gold}

    @staticmethod
    def _log(trainer, scalars: dict[str, float]) -> None:
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=trainer.global_step)

    def state_dict(self) -> dict[str, Any]:
        return {"looks": self.looks, "utility_looks": self.utility_looks, "start_utility": self.start_utility,
                "last": self.last, "before": self.before, "holdout_level": self.holdout_level,
                "holdout_measurements": self.holdout_measurements, "look_seconds": self.look_seconds}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.looks, self.utility_looks = state_dict["looks"], state_dict["utility_looks"]
        self.start_utility, self.last, self.before = state_dict["start_utility"], state_dict["last"], \
            state_dict["before"]
        self.holdout_level = state_dict.get("holdout_level")
        self.holdout_measurements = state_dict.get("holdout_measurements", 0)
        self.look_seconds = state_dict.get("look_seconds", 0.0)


def headline(result: dict) -> str:
    """The verdict in one line: the full verdict's, or the verdict of the model as it is when no attack was run."""
    after = result["after"]
    if after.get("full"):
        full = after["full"]
        unread = full.get("unread_band_ratio")
        extra = "" if unread is None else f"; on the attacks the method does not read: band ratio {unread:.3f}"
        return full["headline"] + extra
    v = after["verdict"]
    return (f"{'PASSED' if v['passed'] else 'FAILED'} before any attack (no relearning or quantisation run), band "
            f"ratio {v['band_ratio']:.3f} (≤ 1 passes; worst: {v['worst']})")


def holdout_table(result: dict) -> str:
    """The reference-free verification as markdown: the full verdict (every condition), then per attack the pooled
    AUC and its interval before and after (and the gold standard's, where given), each forget author's reach."""
    after, before = result["after"]["verdict"], (result.get("before") or {})
    gold = ((result.get("gold_standard") or {}).get("verdict")) or {}
    conf = f"{after['pooled']['confidence']:.0%}"
    head = ["", f"target [{conf}]", f"unlearned [{conf}]"] + (["retain-only model (gold standard)"] if gold else [])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(verdict, attack, scope="pooled"):
        part = verdict.get(scope) if scope == "pooled" else (verdict.get("authors") or {}).get(scope)
        iv = ((part or {}).get("intervals") or {}).get(attack)
        return "n/a" if iv is None else f"{iv['auc']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}]"

    def ratio(verdict, scope="pooled"):
        part = verdict.get(scope) if scope == "pooled" else (verdict.get("authors") or {}).get(scope)
        return "n/a" if not part else f"{part['band_ratio']:.3f}"

    margins = after["pooled"]["delta"]
    for attack in after["pooled"]["intervals"]:
        m = margins[attack] if isinstance(margins, dict) else margins
        line = [f"{attack} AUC (margin ±{m:.2f})", cell(before, attack), cell(after, attack)]
        rows.append("| " + " | ".join(line + ([cell(gold, attack)] if gold else [])) + " |")
    rows.append("| " + " | ".join(["band ratio, all forget items", ratio(before), ratio(after)] +
                                  ([ratio(gold)] if gold else [])) + " |")
    for author in after["authors"]:
        line = [f"band ratio, forget author {author}", ratio(before, author), ratio(after, author)]
        rows.append("| " + " | ".join(line + ([ratio(gold, author)] if gold else [])) + " |")
    ratio_row = ["band ratio (passes iff ≤ 1)", f"{before['band_ratio']:.3f}" if before else "n/a",
                 f"{after['band_ratio']:.3f}"]
    rows.append("| " + " | ".join(ratio_row + ([f"{gold['band_ratio']:.3f}"] if gold else [])) + " |")
    mu = result["after"].get("model_utility_ratio")
    n, g = after["pooled"]["n_items"], after["pooled"]["n_groups"]
    decided = result["after"].get("full") or after
    verdict_word = decided.get("decision", "forgotten" if decided["passed"] else "not forgotten").upper()
    lines = [f"## Reference-free verification: {verdict_word}", "", headline(result), ""]
    full = result["after"].get("full")
    if full:
        lines += [_full_table(full), ""]
    lines += ["### Before any attack, per attack", "",
              f"Forget vs holdout membership AUCs on the reporting half ({n['forget']} forget items of {g['forget']} "
              f"authors, {n['holdout']} holdout items of {g['holdout']} authors; split {result['split']['forget']['by']},"
              f" seed {result['split']['forget']['seed']}), scores {result.get('mode', 'raw')}"
              + (" to the base model" if result.get("mode") == "relative" else "") + ". Forgotten = every attack's "
              "interval inside 0.5 ± its margin for all forget items together and for each forget author's items"
              + (f" (margins {result.get('margins', 'calibrated')} for forget{result['level']})"
                 if result.get("level") else "") + f". Worst: {after['worst']}.", "", *rows, "",
              (f"- model utility / the target's: {mu:.3f}" if mu is not None else "- model utility: n/a")
              + (f" ({result['after']['utility_from']})" if result["after"].get("utility_from") else ""),
              f"- looks at the steering half during the run: {result['looks']} ({result.get('look_seconds', 0):.0f} s; "
              f"they read {result.get('steer_on', 'none')}; model utility read {result['utility_looks']} times, on "
              "the same items as reported)",
              *[f"- {note}" for note in after["pooled"].get("notes", [])]]
    if result.get("margins_from"):
        lines.append(f"- margins: {result['margins_from']}")
    for step in result.get("next_steps") or []:
        lines.append(f"- next: {step}")
    if gold:
        lines.append(f"- gold standard: the retain-only model ({result['gold_standard']['path']}), "
                     f"{'passes' if gold['passed'] else 'fails'} on the same half before any attack; no decision "
                     "read it")
    return "\n".join(lines)


def _full_table(full: dict) -> str:
    """The full verdict's rows, from its as_dict()."""
    rows = ["| condition | band ratio (all attacks) | worst | AUC [interval] | band ratio (attacks the method does "
            "not read) |", "|---|---|---|---|---|"]
    unread = full["unread_attacks"]
    for condition, v in full["conditions"].items():
        iv = v["pooled"]["intervals"]
        scope, attack = v["worst"].split(": ")
        part = v["pooled"] if scope == "pooled" else v["authors"][scope.removeprefix("author ")]
        w = part["intervals"][attack]
        u = "n/a"
        if unread:
            reach = [v["pooled"]["intervals"][a] for a in unread if a in iv]
            u_ratios = [_reach(x) / _margin(v["pooled"], x["attack"]) for x in reach]
            for author in v["authors"].values():
                u_ratios += [_reach(author["intervals"][a]) / _margin(author, a) for a in unread
                             if a in author["intervals"]]
            u = f"{max(u_ratios):.3f}" if u_ratios else "n/a"
        rows.append(f"| {condition} | {v['band_ratio']:.3f} | {v['worst']} | {w['auc']:.3f} [{w['low']:.3f}, "
                    f"{w['high']:.3f}] | {u} |")
    parts = []
    for name, p in full["parts"].items():
        if p is None:
            continue
        pu = (full.get("unread_parts") or {}).get(name)
        parts.append(f"- {name}: {'passes' if p['passed'] else 'FAILS'} (band ratio {p['band_ratio']:.3f}; worst "
                     f"{p['scope']}: {p['attack']} under {p['condition']})"
                     + ("" if pu is None else f"; attacks the method does not read: {pu['band_ratio']:.3f}"))
    parts += [f"- {line}" for line in full.get("power_statement") or []]
    parts += [f"- undecided: {line}" for line in full.get("missing") or [] if full.get("decision") == "undecided"]
    reads = ", ".join(full["reads"]) or "none"
    return "\n".join(["### The full verdict (reporting half)", "",
                      f"Attacks: {', '.join(full['attacks'])}. The method's objective reads: {reads}; the attacks it "
                      f"does not read: {', '.join(unread) or 'none'}.", "", *rows, "", *parts,
                      *[f"- {n}" for n in dict.fromkeys(full["notes"])]])


def _reach(iv: dict) -> float:
    return max(0.5 - iv["low"], iv["high"] - 0.5)


def _margin(part: dict, attack: str) -> float:
    d = part["delta"]
    return d[attack] if isinstance(d, dict) else d


def _oriented(verdict):
    """The verdict on the attacks whose side says which way to go (a controller reads it; entropy spread does not
    say whether an item was remembered)."""
    from lit_unlearn.metrics.membership_attacks import ORIENTED

    kept = [a for a in verdict.pooled.intervals if a in ORIENTED]
    return verdict.restricted(kept) if kept else verdict


def _reads(pl_module) -> frozenset[str]:
    """The statistics the module's forget objective declares it reads (every one for a module that is not an
    UnlearningModule)."""
    from lit_unlearn.metrics.membership_attacks import STATISTICS
    from lit_unlearn.modules.unlearning import UnlearningModule

    if isinstance(pl_module, UnlearningModule):
        return pl_module.reads_statistics
    return frozenset(STATISTICS) - {"learned"}


def _margins_label(runner) -> str:
    return runner.margins if isinstance(runner.margins, str) else "given"


def _spread(values: list, positions, n: int) -> list:
    """A half's values placed at their items' positions in the whole split (None elsewhere)."""
    out = [None] * n
    for v, i in zip(values, positions):
        out[i] = v
    return out


def _token_profile(stats) -> dict[str, list[float]]:
    """Quantile grids of per-token surprisal and Min-K %++ z over the scored answers: the holdout items' barycenter
    (each item's quantile function, averaged over items; keys surprisal, z) and the pooled tokens' quantiles
    (surprisal_pooled, z_pooled). lit_unlearn.algorithms.token_profile's convention: every answer token,
    standardised_logprob's σ."""
    import torch

    from lit_unlearn.algorithms.token_profile import barycenter_grid, quantile_grid, standardised_logprob

    surprisal = [-st.logp.double() for st in stats]
    z = [standardised_logprob(st.logp.double(), st.mu.double(), st.var.double()) for st in stats]
    return {"surprisal": barycenter_grid(surprisal), "z": barycenter_grid(z),
            "surprisal_pooled": quantile_grid(torch.cat(surprisal)), "z_pooled": quantile_grid(torch.cat(z))}


def margins_origin(source, runner) -> str:
    """Where the verdict's margins come from, in words: they are a calibration recipe's, not the user's model's."""
    if runner is None:
        return ""
    label = _margins_label(runner)
    if label == "given":
        return "given in the config (delta, delta_author)"
    if label == "self":
        return "the model's own holdout items (two sets of holdout groups against each other)"
    from lit_unlearn.data.own_data import LEVEL_ITEMS

    n = len(runner.groups["forget"])
    groups = len(set(runner.groups["forget"]))
    level = runner.level
    own = type(source).__name__ == "OwnData"
    where = (f"calibrated on never-trained tiny Llama models of the TOFU world at forget{level} "
             f"({LEVEL_ITEMS.get(level, '?')} items, {LEVEL_ITEMS.get(level, 0) // 20} authors)")
    if own:
        where += (f", the level nearest your forget set ({n} items, {groups} groups): they are that recipe's margins, "
                  "not measured on your model; a model far from it (another size, schedule or data) may pass or fail "
                  "them by more than their calibration shows")
    return where


# What the bench measured (docs/findings/bench.md, docs/findings/hamu.md), by the part of the verdict that failed.
NEXT_STEPS = {
    "before": "the attacks still tell the forget items from holdout items on the model as it is: unlearn longer or "
              "with a larger quota/learning rate, and read the stop rule's looks in TensorBoard (verify/steering/*)",
    "relearning": "relearning brings the forget set back (every method on the bench failed here): HAMU over "
                  "HoldoutMatch's objective (--method hamu_holdout_match) resisted it best there (band ratio "
                  "1.00-1.06 at forget01 against 1.42-1.61), at 0.87-0.89 x utility",
    "quantisation": "4-bit rounding brings the forget set back: the update is smaller than the rounding step; "
                    "unlearn with a larger step, or check the model you ship at the precision you ship it",
    "paraphrase": "asked another way, the forget answers come back: the method forgot the question's wording, not "
                  "the fact; add paraphrased questions to the forget set",
}


def next_steps(after: dict | None) -> list[str]:
    """What to try when the verdict says "not forgotten", from the parts that failed."""
    if not after:
        return []
    full = after.get("full")
    if full is None:
        return [] if after["verdict"]["passed"] else [NEXT_STEPS["before"]]
    out = []
    for name, part in (full.get("parts") or {}).items():
        if part is not None and not part["passed"] and name in NEXT_STEPS:  # the full verdict's PARTS
            out.append(NEXT_STEPS[name])
    return out


def _utility(summary: dict) -> float | None:
    """TOFU's model utility, or on data without its general-knowledge sets the harmonic mean of the utility numbers
    there are (lit_unlearn.metrics.tofu.formulas.utility_of)."""
    from lit_unlearn.metrics.tofu.formulas import utility_of

    return utility_of(summary)[0]


def _utility_label(summary: dict) -> str | None:
    from lit_unlearn.metrics.tofu.formulas import MODEL_UTILITY_KEYS, utility_of

    keys = utility_of(summary)[1]
    if not keys or len(keys) == len(MODEL_UTILITY_KEYS):
        return None
    return f"the harmonic mean of {', '.join(keys)}: the data has no other utility sets"
