"""The full reference-free verdict: "forgotten" means the forget items cannot be told from unseen items of the same
kind, by any attack, before an attack on the weights, after relearning, and after 4-bit quantisation.

Three parts, each the equivalence test of lit_unlearn.verification.holdout_equivalence on one half of the items:
- before: the model as it is;
- relearning: a copy fine-tuned on some forget authors of the half (lit_unlearn.verification.relearning_probe), the
  others measured; at every learning rate of `relearn_lrs` and every step count of `relearn_steps`, the worst
  counts (UNDO's protocol takes the attacker's best case);
- quantisation: round-to-nearest weights at `quant_bits` bits (lit_unlearn.algorithms.quantize);
and a fourth where `paraphrase` is on: the model as it is, its forget items asked by their paraphrased questions
(TOFU's `paraphrased_question`; the holdout items as they are), the standard probe of whether an answer comes back
when the question is asked another way. By default it runs where every forget item has a paraphrased question and
the calibrated margins include it (benchmarks/verification/calibrate_paraphrase.py stores them).
Every condition has its own margins, calibrated on models that never saw the forget authors under that same
condition (a never-trained model also learns a little from relearning on a neighbour), per attack.

Difficulty calibration (`mode="relative"`, Watson et al., ICLR 2022): each item's score is taken relative to the
model the target was fine-tuned from (the base; Llama-2-7b-chat for a 7B user): score_model − score_base, for every
attack and feature. Item difficulty and author style, which separate forget from holdout authors in any model, cancel;
what is left is what fine-tuning changed. `mode="raw"` scores the model alone.

The learned attack (lit_unlearn.verification.learned_attack) is fitted per condition, on the items that condition
measures. A method declares the statistics its objective reads (lit_unlearn.metrics.membership_attacks); the verdict
is given on all attacks, and apart on the attacks the method does not read.

Power (lit_unlearn.verification.verdict_power): a check (an attack under a condition) that would not catch a true AUC
of 0.8 at least half the time, or whose margin is 0.5, has no power. It never makes a verdict pass: "forgotten" needs
every check inside its band, at least MIN_HOLDOUT_AUTHORS holdout authors, and in every part run at least one check
with power; where all checks pass but one of these is missing, the verdict is "undecided: too little data", with what
would decide it. A check that fails fails the verdict whatever its power (its false-alarm rate is calibrated; only a
pass needs power). Every verdict states its detectable AUC per part: the smallest true AUC its most sensitive check
catches 80 % of the time.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lit_unlearn.metrics.membership_attacks import ATTACKS, unread_attacks
from lit_unlearn.verification.holdout_equivalence import HoldoutVerdict, holdout_verdict
from lit_unlearn.verification.learned_attack import LEARNED_INPUTS, learned_attack_scores
from lit_unlearn.verification.verdict_power import (
    DETECT_RATE,
    POWER_AUC,
    POWER_RATE,
    CheckPower,
    author_share,
    authors_needed,
    check_power,
)

__all__ = ["VerdictSpec", "HalfItems", "FullVerdict", "PARTS", "PARAPHRASE", "asked_otherwise", "part_of",
           "relearn_condition", "quant_condition", "pick_scores", "condition_verdict", "attack_bands", "self_margins",
           "score_conditions", "judge", "Scored", "MODES", "SELF_MIN_AUTHORS", "MIN_HOLDOUT_AUTHORS", "DECISIONS",
           "condition_power"]

PARTS = ("before", "relearning", "quantisation", "paraphrase")
PARAPHRASE = "paraphrase"  # the condition (and part): the forget items asked by their paraphrased questions
MODES = ("best", "relative", "raw")  # best: per attack and condition, the tighter calibrated one
SELF_MIN_AUTHORS = 4  # holdout authors a half needs to give its own null: two a side
MIN_HOLDOUT_AUTHORS = 2  # with one, an author's style and membership are the same contrast: nothing can be decided
DECISIONS = ("forgotten", "not forgotten", "undecided")


def relearn_condition(lr: float, steps: int) -> str:
    return f"relearn lr={lr:g} steps={steps}"


def quant_condition(bits: int) -> str:
    return f"int{bits}"


def part_of(condition: str) -> str:
    if condition == "none":
        return "before"
    if condition == PARAPHRASE:
        return "paraphrase"
    return "relearning" if condition.startswith("relearn") else "quantisation"


def asked_otherwise(forget: Sequence[Mapping]) -> list[dict]:
    """The forget items asked by their paraphrased questions (the answers unchanged), in order."""
    from lit_unlearn.core.errors import UserError

    lacking = sum(1 for r in forget if not r.get("paraphrased_question"))
    if lacking:
        raise UserError(f"the paraphrase condition asks each forget item by its `paraphrased_question`; {lacking} of "
                        f"{len(forget)} forget items have none (TOFU's forget*_perturbed splits have it): add the "
                        "column, or set paraphrase: false")
    return [{**r, "question": r["paraphrased_question"]} for r in forget]


@dataclass(frozen=True)
class VerdictSpec:
    relearn_lrs: tuple[float, ...] = (1e-5, 1e-4, 5e-4, 1e-3)
    relearn_steps: tuple[int, ...] = (10, 100)
    relearn_batch_size: int = 8
    relearn_share: float = 0.5          # of the half's forget authors, relearned (the first ones); the rest measured
    quant_bits: int = 4
    quant_group_size: int = 128
    alpha: float = 0.05
    n_boot: int = 2000
    seed: int = 0
    learned_folds: int = 5
    learned_repeats: int = 5
    self_splits: int = 8                # random halvings of the holdout authors for a model's own null
    # the fourth part: True, False, or None (auto: where every forget item has a paraphrased question and the
    # margins are calibrated ones that include it; VerdictRunner decides, and says why where it is off)
    paraphrase: bool | None = None

    def conditions(self) -> list[str]:
        return ["none", *(relearn_condition(lr, s) for lr in self.relearn_lrs for s in sorted(self.relearn_steps)),
                quant_condition(self.quant_bits), *([PARAPHRASE] if self.paraphrase else [])]  # None: not decided

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class HalfItems:
    """One half's forget and holdout items and their authors; relearning trains on `relearn` (forget indices) and
    measures `measured`."""
    forget: list[dict]
    holdout: list[dict]
    forget_groups: list
    holdout_groups: list
    relearn: list[int]
    measured: list[int]


def pick_scores(mia: Mapping[str, Sequence[float]], base: Mapping[str, Sequence[float]] | None, side: str,
                names: Sequence[str], rows: Sequence[int] | None = None) -> dict[str, list[float]]:
    """{name: per-item scores} of one side (`{side}_{name}` keys of a scorer's output), at item positions `rows`
    (all by default), each minus the base model's score of the same item where `base` is given."""
    out = {}
    for name in names:
        key = f"{side}_{name}"
        if key not in mia or (base is not None and key not in base):
            continue
        values = list(mia[key])
        idx = range(len(values)) if rows is None else rows
        if base is None:
            out[name] = [float(values[i]) for i in idx]
        else:
            out[name] = [float(values[i]) - float(base[key][i]) for i in idx]
    return out


def _with_learned(forget: dict, holdout: dict, fg, hg, attacks, spec: VerdictSpec, notes: list[str],
                  inputs: tuple[dict, dict] | None = None):
    """The attacks' scores, the learned attack's added when asked for (fitted on `inputs`, the learned attack's own
    per-item features of both sides; default: `forget` and `holdout` themselves)."""
    f = {a: forget[a] for a in attacks if a in forget and a != "learned"}
    h = {a: holdout[a] for a in attacks if a in holdout and a != "learned"}
    if "learned" in attacks:
        fi, hi = inputs or (forget, holdout)
        f["learned"], h["learned"], kind = learned_attack_scores(fi, hi, fg, hg, spec.learned_folds,
                                                                 spec.learned_repeats, spec.seed)
        if kind == "item":
            notes.append("learned attack: fewer than 2 authors on a side, so its folds split items within "
                         "authors (it may learn an author's style; its margin is calibrated under the same split)")
    return f, h


def condition_verdict(forget: dict, holdout: dict, forget_groups, holdout_groups, attacks: Sequence[str],
                      margins: tuple[Mapping[str, float], Mapping[str, float]], spec: VerdictSpec,
                      learned_inputs: tuple[dict, dict] | None = None, judged: dict | None = None
                      ) -> tuple[HoldoutVerdict, list[str]]:
    """The verdict of one condition from both sides' per-item scores (and the learned attack's inputs). `judged`,
    where given, receives the per-item scores the verdict was decided on (the learned attack's included), so that
    anyone can recompute it with holdout_verdict alone."""
    notes: list[str] = []
    f, h = _with_learned(forget, holdout, forget_groups, holdout_groups, attacks, spec, notes, learned_inputs)
    missing = [a for a in attacks if a not in f]
    if missing:
        notes.append(f"not scored: {', '.join(missing)}")
    verdict = holdout_verdict(f, h, forget_groups, holdout_groups, {a: margins[0][a] for a in f},
                              {a: margins[1][a] for a in f}, spec.alpha, spec.n_boot, spec.seed)
    if judged is not None:
        judged.update({"forget": {a: [float(x) for x in v] for a, v in f.items()},
                       "holdout": {a: [float(x) for x in v] for a, v in h.items()},
                       "forget_groups": list(forget_groups), "holdout_groups": list(holdout_groups)})
    return verdict, notes


def attack_bands(verdict: HoldoutVerdict) -> dict[str, tuple[float, float]]:
    """{attack: (pooled reach, the largest per-author reach)}: how far each attack's intervals reach from 0.5, the
    numbers a calibration takes the largest of."""
    return {a: (iv.deviation(), max((v.intervals[a].deviation() for v in verdict.authors.values()), default=0.0))
            for a, iv in verdict.pooled.intervals.items()}


def condition_power(verdict: HoldoutVerdict, judged: Mapping[str, Any], spec: VerdictSpec) -> dict[str, CheckPower]:
    """{attack: its power} under one condition: its margins, the condition's forget and holdout authors, and the
    share of the judged scores' variance between authors (the mean of both sides' estimates where they have one)."""
    out = {}
    some_author = next(iter(verdict.authors.values()), None)
    for a in verdict.pooled.intervals:
        shares = [x for side in ("forget", "holdout")
                  if (x := author_share(judged[side][a], judged[f"{side}_groups"])) is not None]
        margin = (verdict.pooled.margin(a), 0.5 if some_author is None else some_author.margin(a))
        out[a] = check_power(judged["forget_groups"], judged["holdout_groups"], margin,
                             sum(shares) / len(shares) if shares else 0.0, spec.alpha, seed=spec.seed)
    return out


def _round_up(x: float) -> float:
    return min(0.5, math.ceil(round(x, 9) * 100) / 100)


def self_margins(holdout: Mapping[str, Sequence[float]], groups: Sequence, attacks: Sequence[str],
                 spec: VerdictSpec, learned_inputs: Mapping[str, Sequence[float]] | None = None
                 ) -> tuple[dict[str, float], dict[str, float]]:
    """A model's own null on this data: the holdout authors split at random into two sets (`self_splits` times),
    one standing for the forget side, and each attack's reach pooled and per author, the largest over the splits,
    rounded up to 0.01. `learned_inputs`: the learned attack's features of the holdout items (default: `holdout`).
    Needs SELF_MIN_AUTHORS holdout authors."""
    from lit_unlearn.core.errors import UserError

    authors = list(dict.fromkeys(groups))
    if len(authors) < SELF_MIN_AUTHORS:
        raise UserError(f"a band from the model's own holdout items needs at least {SELF_MIN_AUTHORS} holdout "
                        f"authors per half ({2 * SELF_MIN_AUTHORS} in all); this half has {len(authors)}: give a "
                        "larger holdout split, or use the calibrated margins")
    pooled = {a: 0.0 for a in attacks}
    author = {a: 0.0 for a in attacks}
    for bands in author_split_bands(holdout, groups, attacks, spec, spec.self_splits, learned_inputs):
        for a, (p, w) in bands.items():
            pooled[a], author[a] = max(pooled[a], p), max(author[a], w)
    return {a: _round_up(v) for a, v in pooled.items()}, {a: _round_up(v) for a, v in author.items()}


def author_split_bands(scores: Mapping[str, Sequence[float]], groups: Sequence, attacks: Sequence[str],
                       spec: VerdictSpec, splits: int, learned_inputs: Mapping[str, Sequence[float]] | None = None):
    """attack_bands of `splits` random halvings of authors who are all on one side (seeded by spec.seed): one set
    stands for the forget side, the other for the holdout side, so every reach is what no membership looks like on
    these authors. `learned_inputs`: the learned attack's features of the same items (default: `scores`)."""
    import numpy as np

    authors = list(dict.fromkeys(groups))
    rng = np.random.default_rng(spec.seed)
    inputs = scores if learned_inputs is None else learned_inputs
    for _ in range(splits):
        order = rng.permutation(len(authors))
        side = {authors[j]: ("f" if r < len(authors) // 2 else "h") for r, j in enumerate(order)}
        idx = {s: [i for i, g in enumerate(groups) if side[g] == s] for s in ("f", "h")}
        pick = lambda d, s: {k: [v[i] for i in idx[s]] for k, v in d.items()}  # noqa: E731
        fg, hg = [groups[i] for i in idx["f"]], [groups[i] for i in idx["h"]]
        verdict, _ = condition_verdict(pick(scores, "f"), pick(scores, "h"), fg, hg, attacks,
                                       ({a: 0.5 for a in ATTACKS},) * 2, spec, (pick(inputs, "f"), pick(inputs, "h")))
        yield attack_bands(verdict)


@dataclass
class FullVerdict:
    verdicts: dict[str, HoldoutVerdict]        # condition -> the verdict on every attack
    reads: frozenset[str]                       # the statistics the method's objective reads
    mode: str
    margins: str                                # "calibrated", "self" or "given"
    notes: list[str] = field(default_factory=list)
    measures: dict[str, dict] = field(default_factory=dict)  # condition -> extra numbers (forget NLL, items)
    judged: dict[str, dict] = field(default_factory=dict)    # condition -> the per-item scores it was decided on
    power: dict[str, dict[str, CheckPower]] = field(default_factory=dict)  # condition -> attack -> its power
    holdout_authors: int | None = None                        # in the half judged
    _missing: list[str] | None = field(default=None, repr=False, compare=False)

    def powered(self, name: str) -> list[tuple[str, str]]:
        """(condition, attack) of the part's checks that have power."""
        return [(c, a) for c, checks in self.power.items() if part_of(c) == name
                for a, p in checks.items() if p.has_power]

    def detectable_auc(self, name: str) -> tuple[float, str, str] | None:
        """(AUC, condition, attack): the smallest true AUC a check of the part with power catches DETECT_RATE of the
        time; None where no check of it has power (or power was not computed)."""
        found = [(self.power[c][a].detectable_auc, c, a) for c, a in self.powered(name)
                 if self.power[c][a].detectable_auc is not None]
        return min(found) if found else None

    def missing(self) -> list[str]:
        """What keeps a verdict whose checks all pass from being "forgotten": empty when nothing does (computed once:
        how many more authors would help is a search over simulations)."""
        if self._missing is None:
            self._missing = self._find_missing()
        return list(self._missing)

    def _find_missing(self) -> list[str]:
        out = []
        if self.holdout_authors is not None and self.holdout_authors < MIN_HOLDOUT_AUTHORS:
            out.append(f"only {self.holdout_authors} holdout author in the half judged: one author's style cannot be "
                       f"told from membership; give holdout items of at least {2 * MIN_HOLDOUT_AUTHORS} authors "
                       "(a group/author column), split into two halves")
        if not self.power:
            return out + ["the checks' power was not computed"]
        for name in PARTS:
            conditions = [c for c in self.verdicts if part_of(c) == name]
            if not conditions or self.powered(name):
                continue
            out.append(f"{name}: no check has power (none catches a true AUC of {POWER_AUC} at least "
                       f"{POWER_RATE:.0%} of the time){self._needed(conditions)}")
        return out

    def _needed(self, conditions: list[str]) -> str:
        """How many more holdout authors would give the part a check with power, if any number would."""
        judged = self.judged[conditions[0]]
        best = None
        nearest = sorted((p.rate, a) for a, p in self.power[conditions[0]].items() if min(p.margin) < 0.5)[-3:]
        for _, a in nearest:  # the three checks nearest to power: the search simulates many structures
            p = self.power[conditions[0]][a]
            k = authors_needed(judged["forget_groups"], judged["holdout_groups"], p.margin, p.author_share)
            if k is not None and (best is None or k < best[0]):
                best = (k, a)
        if best is None:
            return ("; its margins are 0.5 or too wide for any holdout size: margins from your own holdout data "
                    "(margins: self) or a larger forget set would give it power")
        per = len(judged["holdout_groups"]) // max(1, len(set(judged["holdout_groups"])))
        return (f"; about {best[0]} more holdout author{'s' if best[0] > 1 else ''} of {per} items each in this "
                f"half ({2 * best[0]} in all) would give {best[1]} power")

    @property
    def decision(self) -> str:
        """"not forgotten" where a check fails (whatever its power); "forgotten" where every check passes and each
        part has a check with power; "undecided" otherwise."""
        if self.band_ratio > 1.0:
            return "not forgotten"
        return "undecided" if self.missing() else "forgotten"

    def power_statement(self) -> list[str]:
        """Lines: per part, its detectable AUC and the checks without power."""
        if not self.power:
            return []
        lines = []
        for name in PARTS:
            conditions = [c for c in self.power if part_of(c) == name]
            if not conditions:
                continue
            checks = [(c, a) for c in conditions for a in self.power[c]]
            powered = self.powered(name)
            found = self.detectable_auc(name)
            weak = sorted({a for c, a in checks if (c, a) not in powered} - {a for _, a in powered})
            line = (f"power, {name}: {len(powered)} of {len(checks)} checks have power"
                    + (f"; detectable AUC {found[0]:.2f} ({found[2]} under {found[1]}, caught {DETECT_RATE:.0%} of "
                       "the time)" if found else "; no detectable AUC"))
            if weak:
                line += f"; no power here: {', '.join(weak)}"
            lines.append(line)
        return lines

    @property
    def attacks(self) -> list[str]:
        return list(self.verdicts["none"].pooled.intervals)

    @property
    def unread(self) -> list[str]:
        return unread_attacks(self.attacks, self.reads)

    def _worst(self, conditions, attacks=None) -> dict | None:
        best = None
        for c in conditions:
            v = self.verdicts[c] if attacks is None else self.verdicts[c].restricted(attacks)
            scope, iv = v.worst
            if best is None or v.band_ratio > best["band_ratio"]:
                best = {"condition": c, "band_ratio": v.band_ratio, "scope": scope, "attack": iv.attack,
                        "auc": iv.auc, "low": iv.low, "high": iv.high, "side": iv.side()}
        return best

    def part(self, name: str, attacks=None) -> dict | None:
        """The worst condition of a part (its band ratio, scope, attack), or None where the part was not run."""
        conditions = [c for c in self.verdicts if part_of(c) == name]
        if not conditions or (attacks is not None and not attacks):
            return None
        return self._worst(conditions, attacks)

    @property
    def band_ratio(self) -> float:
        return max(v.band_ratio for v in self.verdicts.values())

    @property
    def passed(self) -> bool:
        """Forgotten: every check inside its band, with power to have failed (see `decision`)."""
        return self.decision == "forgotten"

    @property
    def worst(self) -> dict:
        return self._worst(list(self.verdicts))

    def unread_band_ratio(self) -> float | None:
        unread = self.unread
        return None if not unread else max(v.restricted(unread).band_ratio for v in self.verdicts.values())

    def headline(self) -> str:
        """One line: FORGOTTEN, or what recovers the forget set (condition, scope and attack)."""
        w = self.worst
        decision = self.decision
        if decision == "forgotten":
            found = [f"{p} {d[0]:.2f}" for p in PARTS if (d := self.detectable_auc(p)) is not None]
            return (f"FORGOTTEN: every attack inside its band in every condition (band ratio {self.band_ratio:.3f})"
                    + (f"; detectable AUC {', '.join(found)}" if found else ""))
        if decision == "undecided":
            return (f"UNDECIDED: too little data: every attack is inside its band (band ratio {self.band_ratio:.3f}), "
                    f"but {self.missing()[0]}")
        how = "still look trained on" if w["side"] == "remembers" else "look less familiar than unseen items"
        return (f"NOT FORGOTTEN: {w['attack']} ({w['scope']}) under {w['condition']}: AUC {w['auc']:.3f} "
                f"[{w['low']:.3f}, {w['high']:.3f}], band ratio {w['band_ratio']:.3f}; the forget items {how}")

    def as_dict(self) -> dict:
        parts = {p: self.part(p) for p in PARTS}
        unread = self.unread
        detectable = {p: (None if (d := self.detectable_auc(p)) is None else
                          {"auc": d[0], "condition": d[1], "attack": d[2]}) for p in PARTS}
        return {"passed": self.passed, "decision": self.decision, "missing": self.missing(),
                "detectable_auc": detectable, "power_statement": self.power_statement(),
                "power": {c: {a: p.as_dict() for a, p in checks.items()} for c, checks in self.power.items()},
                "holdout_authors": self.holdout_authors,
                "band_ratio": self.band_ratio, "headline": self.headline(),
                "worst": self.worst, "mode": self.mode, "margins": self.margins, "reads": sorted(self.reads),
                "attacks": self.attacks, "unread_attacks": unread,
                "parts": {p: (None if v is None else {**v, "passed": v["band_ratio"] <= 1.0,
                                                      "has_power": bool(self.powered(p)) if self.power else None})
                          for p, v in parts.items()},
                "unread_parts": {p: (None if (v := self.part(p, unread)) is None else
                                     {**v, "passed": v["band_ratio"] <= 1.0}) for p in PARTS},
                "unread_band_ratio": self.unread_band_ratio(),
                "conditions": {c: v.as_dict() for c, v in self.verdicts.items()},
                "measures": self.measures, "notes": self.notes, "judged": self.judged}

    def scalars(self, prefix: str = "verify/full/") -> dict[str, float]:
        out = {f"{prefix}band_ratio": self.band_ratio, f"{prefix}passed": float(self.passed),
               f"{prefix}undecided": float(self.decision == "undecided")}
        for p in PARTS:
            w = self.part(p)
            if w is not None:
                out[f"{prefix}{p}_band_ratio"] = w["band_ratio"]
            d = self.detectable_auc(p)
            if d is not None:
                out[f"{prefix}{p}_detectable_auc"] = d[0]
        unread = self.unread_band_ratio()
        if unread is not None:
            out[f"{prefix}unread_band_ratio"] = unread
        return out

    def table(self) -> str:
        """Markdown: one row per condition (all attacks and unread attacks), then the parts."""
        unread = self.unread
        rows = ["| condition | band ratio (all attacks) | worst | AUC [interval] | band ratio (attacks the method "
                "does not read) |", "|---|---|---|---|---|"]
        for c, v in self.verdicts.items():
            scope, iv = v.worst
            u = f"{v.restricted(unread).band_ratio:.3f}" if unread else "n/a"
            rows.append(f"| {c} | {v.band_ratio:.3f} | {scope}: {iv.attack} | {iv.auc:.3f} [{iv.low:.3f}, "
                        f"{iv.high:.3f}] | {u} |")
        parts = []
        for p in PARTS:
            w, wu = self.part(p), self.part(p, unread)
            if w is None:
                continue
            parts.append(f"- {p}: {'passes' if w['band_ratio'] <= 1 else 'FAILS'} (band ratio {w['band_ratio']:.3f}, "
                         f"worst {w['attack']} under {w['condition']})"
                         + ("" if wu is None else f"; on unread attacks {wu['band_ratio']:.3f}"))
        parts += [f"- {line}" for line in self.power_statement()]
        reads = ", ".join(sorted(self.reads)) or "none declared"
        return "\n".join([f"### {self.headline()}", "",
                          f"Attacks: {', '.join(self.attacks)} ({self.mode} to the base model; margins "
                          f"{self.margins}). The method's objective reads: {reads}; attacks it does not read: "
                          f"{', '.join(unread) or 'none'}.", "", *rows, "", *parts,
                          *[f"- {n}" for n in dict.fromkeys(self.notes)]])


Scorer = Callable[[Any, list[dict], list[dict]], Mapping[str, Sequence[float]]]


@dataclass
class Scored:
    """One condition's scorer output and the forget items (indices into the half's forget items) it scored; `base`:
    the base model's scores of the same rows where the condition asks them otherwise than the half does (the
    paraphrase), so that relative scores subtract the base's score of the same question."""
    mia: Mapping[str, Sequence[float]]
    forget_idx: list[int]
    base: Mapping[str, Sequence[float]] | None = None


def score_conditions(network, half: HalfItems, scorer: Scorer, spec: VerdictSpec, relearn: Callable | None = None,
                     conditions: Sequence[str] | None = None) -> dict[str, Scored]:
    """Score the half under every condition: the model as it is, quantised, and relearned.

    scorer(network, forget_rows, holdout_rows) -> {"{side}_{attack or feature}": per-item scores};
    relearn(network, rows, lr, steps) -> iterator of (steps, relearned model) (relearning_probe.relearned with the
    data's formatter bound). Scores are what a model gives, raw; `judge` makes them relative and decides."""
    import torch

    from lit_unlearn.algorithms.quantize import quantize_model

    conditions = list(conditions or spec.conditions())
    out: dict[str, Scored] = {}
    everything = list(range(len(half.forget)))
    if "none" in conditions:
        out["none"] = Scored(scorer(network, half.forget, half.holdout), everything)
    if PARAPHRASE in conditions:
        out[PARAPHRASE] = Scored(scorer(network, asked_otherwise(half.forget), half.holdout), everything)
    quant = [c for c in conditions if part_of(c) == "quantisation"]
    if quant:
        quantized = copy.deepcopy(network)
        with torch.no_grad():
            quantize_model(quantized, spec.quant_bits, spec.quant_group_size)
        out[quant[0]] = Scored(scorer(quantized.eval(), half.forget, half.holdout), everything)
        del quantized
    wanted = [c for c in conditions if part_of(c) == "relearning"]
    if wanted:
        if relearn is None:
            raise ValueError("relearning conditions need `relearn`")
        train_rows = [half.forget[i] for i in half.relearn]
        measured_rows = [half.forget[i] for i in half.measured]
        for lr in spec.relearn_lrs:
            steps = [s for s in spec.relearn_steps if relearn_condition(lr, s) in wanted]
            for n, model in (relearn(network, train_rows, lr, steps) if steps else ()):
                out[relearn_condition(lr, n)] = Scored(scorer(model, measured_rows, half.holdout), list(half.measured))
    return {c: out[c] for c in conditions if c in out}


def judge(scored: Mapping[str, Scored], half: HalfItems, attacks: Sequence[str], margins_for: Callable[[str], Any],
          spec: VerdictSpec, base_scores: Mapping[str, Sequence[float]] | None = None, reads=frozenset(),
          margin_label: str = "calibrated", modes_for: Callable[[str], Mapping[str, str]] | None = None,
          power: bool = True) -> FullVerdict:
    """The full verdict from scored conditions. margins_for(condition) -> (pooled margins, per-author margins) by
    attack, or "self" for the model's own null (self_margins on that condition's holdout scores); base_scores: the
    base model's scorer output on the half's items; modes_for(condition) -> {attack: "relative" or "raw"} (the
    learned attack's mode is that of all its inputs); without it every attack is relative where base_scores are
    given, raw otherwise. power: compute every check's power; without it (a stop rule reading only the band ratio)
    the verdict is never "forgotten"."""
    attacks = list(attacks)
    names = list(dict.fromkeys([*attacks, *LEARNED_INPUTS]))
    notes: list[str] = []
    verdicts: dict[str, HoldoutVerdict] = {}
    measures: dict[str, dict] = {}
    judged: dict[str, dict] = {}
    powers: dict[str, dict[str, CheckPower]] = {}
    used: set[str] = set()
    for condition, s in scored.items():
        raw = {"forget": pick_scores(s.mia, None, "forget", names),  # the scorer's forget items: s.forget_idx
               "holdout": pick_scores(s.mia, None, "holdout", names)}
        rel = None
        if base_scores is not None:
            if condition == PARAPHRASE and s.base is None:
                raise ValueError("relative scores of the paraphrase need the base model's scores of the same "
                                 "questions (Scored.base)")
            base = s.base if s.base is not None else base_scores
            base_f = pick_scores(base, None, "forget", names, None if s.base is not None else s.forget_idx)
            rel = {"forget": {k: [a - b for a, b in zip(v, base_f[k])] for k, v in raw["forget"].items()
                              if k in base_f},
                   "holdout": pick_scores(s.mia, base, "holdout", names)}
        modes = dict(modes_for(condition)) if modes_for is not None else {}
        default = "relative" if rel is not None else "raw"

        def scores(side: str, name: str, mode: str):
            table = rel if mode == "relative" and rel is not None else raw
            return table[side].get(name)

        chosen = {a: modes.get(a, default) for a in attacks}
        chosen = {a: (m if rel is not None else "raw") for a, m in chosen.items()}
        used.update(chosen.values())
        f = {a: scores("forget", a, m) for a, m in chosen.items() if a != "learned"}
        h = {a: scores("holdout", a, m) for a, m in chosen.items() if a != "learned"}
        f, h = {a: v for a, v in f.items() if v is not None}, {a: v for a, v in h.items() if v is not None}
        learned_table = rel if chosen.get("learned") == "relative" and rel is not None else raw
        fg = [half.forget_groups[i] for i in s.forget_idx]
        margins = margins_for(condition)
        if isinstance(margins, str) and margins == "self":
            margins = self_margins(h, half.holdout_groups, attacks, spec, learned_table["holdout"])
        judged[condition] = {}
        verdict, more = condition_verdict(f, h, fg, half.holdout_groups, attacks, margins, spec,
                                          (learned_table["forget"], learned_table["holdout"]), judged[condition])
        verdicts[condition] = verdict
        notes.extend(more)
        if power:
            powers[condition] = condition_power(verdict, judged[condition], spec)
        nll = s.mia["forget_loss"]
        measures[condition] = {"forget_items": len(fg), "holdout_items": len(half.holdout_groups),
                               "forget_nll": sum(nll) / len(nll),
                               "holdout_nll": sum(s.mia["holdout_loss"]) / len(s.mia["holdout_loss"])}
    relearned = [c for c in scored if part_of(c) == "relearning"]
    if relearned:
        from lit_unlearn.verification.relearning_probe import same_author

        others = ("other items of the same author (a one-author forget set)"
                  if same_author(half.forget_groups, half.relearn, half.measured) else "the others")
        notes.append(f"relearning: trained on {len(half.relearn)} forget items of author(s) "
                     f"{', '.join(map(str, dict.fromkeys(half.forget_groups[i] for i in half.relearn)))}, measured on "
                     f"{len(half.measured)} items of {others}; AdamW, batch {spec.relearn_batch_size}, lr "
                     f"{', '.join(f'{lr:g}' for lr in spec.relearn_lrs)}, "
                     f"{' and '.join(str(s) for s in sorted(spec.relearn_steps))} steps; the worst counts")
    mode = used.pop() if len(used) == 1 else "relative or raw, per attack and condition as calibrated"
    return FullVerdict(verdicts, frozenset(reads), mode, margin_label, notes, measures, judged, powers,
                       len(set(half.holdout_groups)))
