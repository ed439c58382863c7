"""One object that gives the full verdict (lit_unlearn.verification.full_verdict) on a model, for the training
callback, the audit, the bench and the calibration alike: the forget and holdout items split into halves, the scorer
(the TOFU evaluator's membership passes), the relearning probe bound to the data's format, the base model's scores for
difficulty calibration (computed once), and the margins (calibrated, the model's own, or given)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lit_unlearn.core.errors import UserError
from lit_unlearn.metrics.membership_attacks import ATTACKS
from lit_unlearn.verification.full_verdict import (
    MODES,
    PARAPHRASE,
    FullVerdict,
    HalfItems,
    Scored,
    VerdictSpec,
    asked_otherwise,
    judge,
    score_conditions,
)

__all__ = ["VerdictRunner", "DEFAULT_ATTACKS", "make_half", "resolve_paraphrase"]

DEFAULT_ATTACKS = tuple(ATTACKS)


def make_half(forget: list[dict], holdout: list[dict], forget_groups: list, holdout_groups: list, halves: dict,
              half: str, share: float) -> HalfItems:
    """One half's items (halves: {"forget": Halves, "holdout": Halves}), with its relearned and measured forget
    items (lit_unlearn.verification.relearning_probe.relearn_split on the half's forget authors)."""
    from lit_unlearn.verification.relearning_probe import relearn_split

    f_idx, h_idx = getattr(halves["forget"], half), getattr(halves["holdout"], half)
    fg = [forget_groups[i] for i in f_idx]
    relearn, measured = relearn_split(fg, share)
    return HalfItems([forget[i] for i in f_idx], [holdout[i] for i in h_idx], fg,
                     [holdout_groups[i] for i in h_idx], relearn, measured)


def resolve_paraphrase(spec: VerdictSpec, forget: list[dict], level: str | None, margins) -> tuple[VerdictSpec, str]:
    """The spec with `paraphrase` decided (None: on where every forget item has a paraphrased question and the
    margins are calibrated ones that include it), and a line saying why the part does not run where it does not."""
    from dataclasses import replace

    if spec.paraphrase is not None:
        return spec, "" if spec.paraphrase else "paraphrase: not asked for (spec paraphrase: false)"
    if not all(r.get("paraphrased_question") for r in forget):
        why = "the forget items have no `paraphrased_question`; add that column to run it"
    elif margins != "calibrated":
        why = "the margins are not the calibrated ones, which alone hold a reworded question's shift"
    else:
        from lit_unlearn.verification.holdout_calibration import calibration, margin_key

        known = calibration().get("margins", {}).get(level, {}).get("best", {})
        why = "" if margin_key(PARAPHRASE) in known else (
            f"no calibrated margins for it at forget{level} (benchmarks/verification/calibrate_paraphrase.py)")
    return replace(spec, paraphrase=not why), why and f"paraphrase: not run: {why}"


class VerdictRunner:
    def __init__(self, tokenizer, forget: list[dict], holdout: list[dict], level: str | None,
                 spec: VerdictSpec | None = None, mode: str = "best", base=None,
                 margins: str | tuple[Mapping[str, float], Mapping[str, float]] = "calibrated",
                 attacks: Sequence[str] | None = None, split_seed: int = 0, items_per_author: int = 20,
                 template: str = "plain", max_length: int = 512, batch_size: int = 32,
                 mia_convention: str = "lit-unlearn", input_format: str = "lit-unlearn", gradnorm: bool = True,
                 device=None) -> None:
        """
        Args:
            mode: "relative" (every score minus the base model's on the same item), "raw", or "best" (per attack and
                condition, the one whose calibrated margins are tighter; relative margins and raw ones otherwise).
            base: the model the target was fine-tuned from (a network or a path), needed by "relative" and "best".
            margins: "calibrated" (the packaged calibration of `level`), "self" (the model's own holdout items, two
                author sets against each other) or (pooled, per author) margins by attack.
        """
        from lit_unlearn.verification.steering_halves import author_groups, split_halves

        if mode not in MODES:
            raise UserError(f"verdict mode {mode!r}: choose one of {MODES}")
        if mode in ("relative", "best") and base is None:
            raise UserError(f"the {mode!r} verdict scores items against the model the target was fine-tuned from: "
                            "give its path (reference_model=...), or use mode='raw'")
        self.attacks = list(attacks or DEFAULT_ATTACKS)
        unknown = sorted(set(self.attacks) - set(ATTACKS))
        if unknown:
            raise UserError(f"unknown attacks {unknown}; choose from {list(ATTACKS)}")
        if not gradnorm and "gradnorm" in self.attacks:
            self.attacks.remove("gradnorm")
        self.tokenizer, self.level, self.mode, self.base = tokenizer, level, mode, base
        self.margins = margins
        self.spec, self.paraphrase_note = resolve_paraphrase(spec or VerdictSpec(), forget, level, margins)
        self.template, self.max_length, self.batch_size = template, max_length, batch_size
        self.mia_convention, self.input_format, self.gradnorm, self.device = (mia_convention, input_format, gradnorm,
                                                                              device)
        self.groups = {"forget": author_groups(forget, "forget", items_per_author),
                       "holdout": author_groups(holdout, "holdout", items_per_author)}
        self.halves = {side: split_halves(self.groups[side], split_seed) for side in self.groups}
        self.items = {half: make_half(forget, holdout, self.groups["forget"], self.groups["holdout"], self.halves,
                                      half, self.spec.relearn_share) for half in ("steering", "reporting")}
        self._base_scores: dict[str, Any] = {}
        self._evaluators: dict = {}
        self._formatter = None
        if margins == "calibrated":  # fail now, not after training
            from lit_unlearn.verification.holdout_calibration import calibrated_margins

            for condition in self.spec.conditions():
                calibrated_margins(level, mode, condition, self.attacks)

    # ----- scoring -------------------------------------------------------------------------------------------------
    def _evaluator(self, forget: list[dict], holdout: list[dict]):
        from lit_unlearn.metrics import TofuEvaluator

        key = (tuple(r["question"] for r in forget), tuple(r["question"] for r in holdout))
        if key not in self._evaluators:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._evaluators[key] = TofuEvaluator(
                    self.tokenizer, {"forget": forget, "holdout": holdout}, template=self.template,
                    max_length=self.max_length, batch_size=self.batch_size, mia_convention=self.mia_convention,
                    input_format=self.input_format, gradnorm=self.gradnorm)
        return self._evaluators[key]

    def scorer(self, network, forget: list[dict], holdout: list[dict]) -> dict[str, list[float]]:
        import warnings

        device = self.device or next(network.parameters()).device
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = self._evaluator(forget, holdout).run(network, device,
                                                          only=["gradnorm" if self.gradnorm else "membership"])
        return report.per_item["mia"]

    def relearn(self, network, rows: list[dict], lr: float, steps: Sequence[int]):
        from lit_unlearn.verification.relearning_probe import relearned

        if self._formatter is None:
            from lit_unlearn.data.qa_format import QAFormatter

            self._formatter = QAFormatter(self.tokenizer, self.template, self.max_length,
                                          input_format=self.input_format)
        return relearned(network, self._formatter, self.tokenizer.pad_token_id, rows, lr, steps,
                         self.spec.relearn_batch_size, self.spec.seed, self.device)

    def _base_network(self):
        if isinstance(self.base, str):
            from lit_unlearn.models import CausalLM

            self.base = CausalLM(name_or_path=self.base)
        return self.base.eval()

    def base_scores(self, half: str):
        """The base model's scores on the half's items (computed once), or None in raw mode."""
        if self.mode == "raw":
            return None
        if half not in self._base_scores:
            items = self.items[half]
            self._base_scores[half] = self.scorer(self._base_network(), items.forget, items.holdout)
        return self._base_scores[half]

    def probe_verdict(self, network, half: str, forget_rows: list[dict], reads=frozenset()):
        """The verdict of the model as it is when the half's forget items are asked otherwise (`forget_rows`, one per
        forget item of the half, in order: TOFU's paraphrased questions), judged with the margins of the model as
        it is; in relative mode the base model is scored on the same rows."""
        items = self.items[half]
        if len(forget_rows) != len(items.forget):
            raise ValueError(f"{len(forget_rows)} probe rows for {len(items.forget)} forget items")
        mia = self.scorer(network, forget_rows, items.holdout)
        base = None
        if self.mode != "raw":
            base = self.scorer(self._base_network(), forget_rows, items.holdout)
        label = self.margins if isinstance(self.margins, str) else "given"
        return judge({"none": Scored(mia, list(range(len(forget_rows))))}, items, self.attacks,
                     lambda c: self.margins_for(c), self.spec, base, reads, label,
                     self.modes_for, power=False).verdicts["none"]

    def base_paraphrase_scores(self, half: str):
        """The base model's scores of the half's forget items asked by their paraphrased questions (computed once),
        or None in raw mode."""
        if self.mode == "raw":
            return None
        key = f"{half}/{PARAPHRASE}"
        if key not in self._base_scores:
            items = self.items[half]
            self._base_scores[key] = self.scorer(self._base_network(), asked_otherwise(items.forget), items.holdout)
        return self._base_scores[key]

    def score(self, network, half: str, conditions: Sequence[str] | None = None) -> dict[str, Scored]:
        was_training = network.training
        network.eval()
        try:
            scored = score_conditions(network, self.items[half], self.scorer, self.spec, self.relearn, conditions)
        finally:
            network.train(was_training)
        if PARAPHRASE in scored:
            scored[PARAPHRASE].base = self.base_paraphrase_scores(half)
        return scored

    # ----- deciding ------------------------------------------------------------------------------------------------
    def margins_for(self, condition: str, mode: str | None = None):
        if isinstance(self.margins, str) and self.margins == "self":
            return "self"
        if isinstance(self.margins, str):
            from lit_unlearn.verification.holdout_calibration import calibrated_margins

            return calibrated_margins(self.level, mode or self.mode, condition, self.attacks)
        pooled, author = self.margins
        return ({a: pooled[a] if isinstance(pooled, Mapping) else pooled for a in self.attacks},
                {a: author[a] if isinstance(author, Mapping) else author for a in self.attacks})

    def modes_for(self, condition: str, mode: str | None = None) -> dict[str, str]:
        """{attack: "relative" or "raw"} of a condition: the calibration's choice in "best" mode (relative where
        margins are not the calibrated ones), else the mode itself."""
        mode = mode or self.mode
        if mode == "best":
            if self.margins == "calibrated":
                from lit_unlearn.verification.holdout_calibration import calibrated_modes

                return calibrated_modes(self.level, condition)
            return {a: "relative" for a in self.attacks}
        return {a: mode for a in self.attacks}

    def judge(self, scored: Mapping[str, Scored], half: str, reads=frozenset(), mode: str | None = None,
              power: bool = True) -> FullVerdict:
        mode = mode or self.mode
        label = self.margins if isinstance(self.margins, str) else "given"
        verdict = judge(scored, self.items[half], self.attacks, lambda c: self.margins_for(c, mode), self.spec,
                        self.base_scores(half) if mode != "raw" else None, reads, label,
                        lambda c: self.modes_for(c, mode), power)
        if self.paraphrase_note and len(scored) > 1:  # a full verdict: say why its fourth part did not run
            verdict.notes.append(self.paraphrase_note)
        return verdict

    def verdict(self, network, half: str = "reporting", conditions: Sequence[str] | None = None,
                reads=frozenset(), log=None, power: bool = True) -> FullVerdict:
        """power=False: the bands only (a stop rule's look); such a verdict is never "forgotten"."""
        verdict = self.judge(self.score(network, half, conditions), half, reads, power=power)
        if log is not None:
            for condition, v in verdict.verdicts.items():
                scope, iv = v.worst
                log(f"   {condition}: band ratio {v.band_ratio:.3f} (worst {scope}: {iv.attack}, AUC {iv.auc:.3f})")
        return verdict
