"""What differs between the bench's benchmarks (TOFU, MUSE): the worlds, the data module, the evaluation, the
table's columns, the validation criterion and the figure's axes. The runner is the same for both."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError

__all__ = ["World", "TofuBenchmark", "MuseBenchmark", "get_benchmark", "verification_columns", "full_verdict_columns"]


class World:
    """A target, its data and its retain-only (retrained) reference report(s), by forget level; `base`: the model the
    target was fine-tuned from, where known (the verdict then scores relative to it)."""

    def __init__(self, name: str, data: str, tokenizer: Any, target: str, references: dict[str, str],
                 template: str = "plain", network_args: dict | None = None, max_length: int = 512,
                 base: str | None = None) -> None:
        self.name, self.data, self.tokenizer, self.target = name, data, tokenizer, target
        self.references, self.template, self.network_args = references, template, network_args or {}
        self.max_length, self.base = max_length, base


def verification_columns(runner, mia: dict, reads=frozenset()) -> dict[str, float]:
    """The reference-free verification's columns of the model as it is, from the membership scores of the whole
    splits, split and judged as HoldoutVerification does it: both halves' band ratio and verdict, and on the reporting
    half the attack farthest over its margin, its AUC and (1 − 2α) interval."""
    from lit_unlearn.verification.full_verdict import Scored

    out = {}
    for half, prefix in (("steering", "verify/steering_"), ("reporting", "verify/")):
        mine = {k: [v[i] for i in getattr(runner.halves[k.split("_", 1)[0]], half)] for k, v in mia.items()
                if k.split("_", 1)[0] in runner.halves}
        everything = list(range(len(runner.items[half].forget)))
        verdict = runner.judge({"none": Scored(mine, everything)}, half, reads, power=False).verdicts["none"]
        out[f"{prefix}band_ratio"], out[f"{prefix}passed"] = verdict.band_ratio, float(verdict.passed)
        if half == "reporting":
            scope, worst = verdict.worst
            out["verify/worst_auc"], out["verify/worst_auc_low"], out["verify/worst_auc_high"] = \
                worst.auc, worst.low, worst.high
            out["verify/worst_attack"] = f"{scope}: {worst.attack}"
    return out


def full_verdict_columns(verdict) -> dict[str, Any]:
    """The full verdict's columns: passed, each part's band ratio, what fails it, and the verdict on the attacks the
    method does not read."""
    out: dict[str, Any] = {"verify/full/passed": float(verdict.passed), "verify/full/decision": verdict.decision,
                           "verify/full/band_ratio": verdict.band_ratio}
    found = verdict.detectable_auc("before")
    out["verify/full/detectable_auc"] = None if found is None else found[0]
    for part, key in (("relearning", "relearn"), ("quantisation", "int4"), ("paraphrase", "paraphrase")):
        w = verdict.part(part)
        out[f"verify/full/{key}"] = None if w is None else w["band_ratio"]
    w = verdict.worst
    out["verify/full/fails_on"] = (f"{w['attack']} ({w['scope']}), {w['condition']}"
                                   if verdict.decision == "not forgotten" else "-")
    out["verify/full/unread_band_ratio"] = verdict.unread_band_ratio()
    return out


def _best(rows: list[dict], key, ok) -> dict | None:
    good = [r for r in rows if ok(r)]
    return max(good, key=key) if good else None


class _Benchmark:
    criteria: dict[str, str] = {}
    progress: tuple[str, ...] = ()        # the columns every run's log line shows
    table_columns: tuple[str, ...] = ()   # results.md's columns (empty: all)
    superseded_by_audit: tuple[str, ...] = ()  # of those, the ones the full verdict's columns replace
    terms: dict[str, str] = {}            # each shown column's meaning, written under the table

    def criterion_for(self, selection: str = "verdict") -> str:
        """The validation rule as the report states it."""
        return self.criterion if selection == "verdict" else self.criteria[selection]

    def __init__(self) -> None:
        self._evaluators: dict[tuple[str, str], Any] = {}

    def method_args(self, world: World, level: str, init_args: dict) -> dict:
        """A method's init_args with what only the world knows filled in."""
        return init_args

    def forget_size(self, world: World, level: str) -> int | None:
        """How many items the level's forget set has (an epoch budget's unit); None where it does not apply."""
        return None

    def audit(self, world: World, level: str, network, spec, out: Path, reads=frozenset()) -> dict:
        return {}


class TofuBenchmark(_Benchmark):
    name = "tofu"
    # The reference-free verification first (the criterion and the verdict); the retain-only model's measures after
    # it, labelled as the gold standard; the audit's band ratios when the bench runs it.
    # The full verdict (before any attack, relearning, 4-bit) first: "forgotten" and what fails it; then the verdict
    # before any attack per half, the retain-only model's measures labelled as the gold standard.
    columns = {"forgotten": "verify/full/passed", "decision": "verify/full/decision",
               "detectable AUC": "verify/full/detectable_auc", "full band ratio": "verify/full/band_ratio",
               "fails on": "verify/full/fails_on", "verified": "verify/passed", "band ratio": "verify/band_ratio",
               "worst attack": "verify/worst_attack", "worst AUC": "verify/worst_auc",
               "worst AUC low": "verify/worst_auc_low", "worst AUC high": "verify/worst_auc_high",
               "band ratio (steering)": "verify/steering_band_ratio",
               "relearn band ratio": "verify/full/relearn", "int4 band ratio": "verify/full/int4",
               "paraphrase band ratio": "verify/full/paraphrase",
               "unread band ratio": "verify/full/unread_band_ratio", "MU": "model_utility",
               "compute share": "compute/share",
               "FQ (gold)": "forget_quality", "AUC vs retain-only (gold)": "verification/forget_vs_retain_only_auc",
               "FTR": "forget_truth_ratio", "ES": "forget/es", "forget ROUGE": "forget/rouge"}
    optional = ("paraphrase band ratio",)  # shown where the verdict ran that part (VerdictSpec.paraphrase)
    # results.md shows what a reader compares methods by; results.csv keeps every column. The first verification's
    # columns give way to the full verdict's where the audit ran.
    table_columns = ("decision", "full band ratio", "fails on", "detectable AUC", "verified", "band ratio",
                     "worst attack", "MU", "FQ (gold)", "seconds")
    superseded_by_audit = ("verified", "band ratio", "worst attack")
    terms = {
        "decision": "the full verdict on the reporting half (docs/guide/verdict.md): forgotten, not forgotten, or "
                    "undecided (too little data to decide), with how many seeds gave each",
        "full band ratio": "the full verdict's band ratio: the widest reach from 0.5 of any attack's AUC interval "
                           "(forget against holdout items), divided by that attack's calibrated margin, over every "
                           "condition (as it is, relearned, at 4 bits, paraphrased); at most 1 passes",
        "fails on": "where the verdict is \"not forgotten\": the attack (pooled, or one author's items) and the "
                    "condition that reach furthest, with how many seeds",
        "detectable AUC": "the smallest true forget-against-holdout AUC the verdict fails 80 % of the time, before "
                          "any attack on the weights",
        "verified": "whether the verdict before any attack on the weights passes on the reporting half (the mean "
                    "over seeds: the share that pass)",
        "band ratio": "that verdict's band ratio (as above, the model as it is)",
        "worst attack": "the attack (pooled, or one author's items) that reaches furthest there",
        "MU": "TOFU's model utility: the harmonic mean of the answer probability, ROUGE-L and truth ratio on the "
              "retain, real-author and world-fact items",
        "FQ (gold)": "TOFU's forget quality: the p-value of a KS test between the forget items' truth ratios under "
                     "this model and under the retain-only model (the gold standard; no decision reads it)",
        "seconds": "wall time a run: unlearning and the evaluation (and the audit where it ran with the run)",
    }
    figure = ("MU", "band ratio", False)  # x, y, log y
    progress = ("MU", "FQ (gold)")  # shown in every run's log line beside its first columns
    criterion = ("the smallest band ratio of the reference-free verification on the steering half among points "
                 "keeping model utility >= {floor:g} x the target's (no retain-only model read)")
    criteria = {"forget_quality": "the largest forget quality against the validation world's retain-only model (the "
                                  "papers' criterion) among points keeping model utility >= {floor:g} x the target's"}

    def levels(self, spec) -> list[str]:
        return list(spec.forget_levels)

    @staticmethod
    def level_title(level: str) -> str:
        return f"forget{level}"

    def worlds(self, spec, out: Path, log) -> tuple[dict[int, World], World]:
        """({seed: test world}, validation world). The real TOFU world is built once per seed (the seed is the
        world's: its models' initialisation and batch order); the other kinds have one test world."""
        data = spec.data
        if data.get("kind", "world") == "world":
            from lit_unlearn.worlds.tofu_world import TofuWorldRecipe

            recipe = TofuWorldRecipe(**(data.get("recipe") or {}))
            tests = {seed: self._real(out / f"world_seed{seed}", seed, spec.forget_levels, recipe, log)
                     for seed in spec.seeds}
            val_seed = int(data.get("validation_seed", 100))
            return tests, self._real(out / "world_validation", val_seed, self.validation_levels(spec), recipe, log)
        if data.get("kind") == "generated":
            size = {"n_authors": int(data.get("n_authors", 40)), "epochs": int(data.get("epochs", 30))}
            test = self._generated(out / "world_test", int(data.get("seed", 0)), spec.forget_levels, spec, log,
                                   **size)
            val = self._generated(out / "world_validation", int(data.get("validation_seed", 1)),
                                  self.validation_levels(spec), spec, log, **size)
            return {seed: test for seed in spec.seeds}, val
        if data.get("kind") != "tofu":
            raise UserError(f"a TOFU bench's data.kind is 'world', 'generated' or 'tofu', got {data.get('kind')!r}")
        from lit_unlearn.data.tokenizer import load_tokenizer

        refs = {str(k).zfill(2): v for k, v in (data.get("references") or {}).items()}
        missing = [lv for lv in spec.forget_levels if lv not in refs]
        if missing:
            raise UserError(f"bench data.references has no retain-only report for forget levels {missing}: "
                            "evaluate each retain model with `lit-unlearn tofu-eval --save` and list the files")
        world = World("tofu", data.get("path", "locuslab/TOFU"), load_tokenizer(data["tokenizer"]), data["target"],
                      refs, spec.template, data.get("network_args"), int(data.get("max_length", 512)),
                      base=data.get("base"))
        return {seed: world for seed in spec.seeds}, world

    def validation_levels(self, spec) -> list[str]:
        """The levels the grid is chosen at: each forget level on its own ("all"), or one for every level."""
        return list(spec.forget_levels) if spec.validation_level == "all" else [spec.validation_level]

    @staticmethod
    def _real(folder: Path, seed: int, levels: list[str], recipe, log) -> World:
        from lit_unlearn.data.tokenizer import load_tokenizer
        from lit_unlearn.worlds.tofu_world import prepare_tofu_world

        world = prepare_tofu_world(folder, seed=seed, levels=levels, recipe=recipe,
                                   log=lambda msg: log(f"[{folder.name}] {msg.strip('= ')}"))
        return World(folder.name, str(world.data), load_tokenizer(str(world.tokenizer)), str(world.target),
                     {lv: str(world.reference(lv)) for lv in levels}, max_length=recipe.max_length,
                     base=str(world.base))

    @staticmethod
    def _generated(folder: Path, seed: int, levels: list[str], spec, log, n_authors: int, epochs: int) -> World:
        from lit_unlearn.data.tokenizer import load_tokenizer
        from lit_unlearn.worlds.generated_tofu import prepare_generated_tofu

        refs = {}
        for level in levels:
            paths = prepare_generated_tofu(folder, seed=seed, forget_level=level, max_new_tokens=spec.max_new_tokens,
                                        n_authors=n_authors, epochs=epochs,
                                        log=lambda msg: log(f"[{folder.name}] {msg.strip('= ')}"))
            refs[level] = str(paths["reference"])
        return World(folder.name, str(paths["data"]), load_tokenizer(str(paths["tokenizer"])), str(paths["target"]),
                     refs)

    def datamodule(self, world: World, level: str, seed: int, spec, method):
        from lit_unlearn.data import TofuDataModule, TofuSource

        refusals = Path(world.data) / "idontknow.jsonl"  # TOFU's own, where the world has them
        return TofuDataModule(TofuSource(world.data, level), world.tokenizer, template=world.template,
                              max_length=world.max_length, retain_batch_size=spec.batch_size,
                              forget_batch_size=spec.batch_size, seed=seed,
                              alternate_answers=(str(refusals) if refusals.is_file() else "generated")
                              if method.needs_refusals else None)

    def method_args(self, world: World, level: str, init_args: dict) -> dict:
        """forget_ceiling "holdout" (read from a run's HoldoutVerification in a plain run; the bench evaluates
        outside the run) becomes the number: the target's mean answer NLL on this level's holdout items."""
        if init_args.get("forget_ceiling") != "holdout":
            return init_args
        key = ("holdout_nll", world.name, level)
        if key not in self._evaluators:
            from lit_unlearn.data import TofuSource
            from lit_unlearn.metrics import TofuEvaluator
            from lit_unlearn.models import CausalLM

            splits = TofuSource(world.data, level).eval_splits()
            report = TofuEvaluator(world.tokenizer, {k: splits[k] for k in ("forget", "holdout")},
                                   template=world.template, max_length=world.max_length, gradnorm=False).run(
                CausalLM(name_or_path=world.target, **world.network_args), only=["membership"])
            values = report.per_item["mia"]["holdout_loss"]
            self._evaluators[key] = sum(values) / len(values)
        return {**init_args, "forget_ceiling": round(self._evaluators[key], 6)}

    def forget_size(self, world: World, level: str) -> int:
        from lit_unlearn.data import TofuSource

        return len(TofuSource(world.data, level).load_split(f"forget{level}"))

    def runner(self, world: World, level: str, spec):
        """The verdict's runner of a world and level (one: the data is split and the base scored once)."""
        key = ("runner", world.name, level)
        if key not in self._evaluators:
            from lit_unlearn.data import TofuSource
            from lit_unlearn.verification.full_verdict import VerdictSpec
            from lit_unlearn.verification.verdict_runner import VerdictRunner

            splits = TofuSource(world.data, level).eval_splits()
            per_author = 20 if spec.data.get("kind", "world") != "generated" else int(spec.data.get("n_questions", 8))
            self._evaluators[key] = VerdictRunner(
                world.tokenizer, splits["forget"], splits["holdout"], level, VerdictSpec(paraphrase=spec.paraphrase),
                mode="best" if world.base else "raw", base=world.base, items_per_author=per_author,
                template=world.template, max_length=world.max_length)
        return self._evaluators[key]

    def evaluate(self, world: World, level: str, network, spec, reads=frozenset()) -> dict:
        from lit_unlearn.data import TofuSource
        from lit_unlearn.metrics import TofuEvaluator

        key = (world.name, level)
        if key not in self._evaluators:  # one per world and level: the data is read and tokenised once
            self._evaluators[key] = TofuEvaluator(world.tokenizer, TofuSource(world.data, level).eval_splits(),
                                                  template=world.template, max_new_tokens=spec.max_new_tokens,
                                                  max_length=world.max_length, reference=world.references[level])
        evaluator = self._evaluators[key]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = evaluator.run(network)
        out = {**report.summary, **{f"verification/{k}": v for k, v in (report.verification or {}).items()}}
        return {**out, **verification_columns(self.runner(world, level, spec), report.per_item["mia"], reads)}

    def audit(self, world: World, level: str, network, spec, out: Path, reads=frozenset()) -> dict:
        """The full verdict on the reporting half: before any attack, after relearning, at 4 bits, and asked by the
        paraphrased questions where the verdict runs that part."""
        verdict = self.runner(world, level, spec).verdict(network, "reporting", reads=reads)
        out.mkdir(parents=True, exist_ok=True)
        (out / "verdict.json").write_text(json.dumps(verdict.as_dict(), indent=1, default=float))
        (out / "verdict.md").write_text(verdict.table() + "\n")
        return full_verdict_columns(verdict)

    def select(self, rows: list[dict], target: dict, floor: float, selection: str = "verdict"
               ) -> tuple[dict, str]:
        if selection == "forget_quality":  # the papers' criterion: it reads the retain-only model
            best = _best(rows, lambda r: (r["FQ (gold)"], r["MU"]),
                         lambda r: r["MU"] is not None and r.get("FQ (gold)") is not None
                         and r["MU"] >= floor * target["MU"])
            if best:
                return best["point"], (f"largest forget quality (against the validation world's retain-only model) "
                                       f"with MU >= {floor:g} x target's")
            best = max(rows, key=lambda r: r["MU"] if r["MU"] is not None else -math.inf)
            return best["point"], f"no point kept MU >= {floor:g} x target's: max MU"
        best = _best(rows, lambda r: (-r["band ratio (steering)"], r["MU"]),
                     lambda r: r["MU"] is not None and r.get("band ratio (steering)") is not None
                     and r["MU"] >= floor * target["MU"])
        if best:
            return best["point"], f"smallest steering band ratio with MU >= {floor:g} x target's"
        best = max(rows, key=lambda r: r["MU"] if r["MU"] is not None else -math.inf)
        return best["point"], f"no point kept MU >= {floor:g} x target's: max MU"


class MuseBenchmark(_Benchmark):
    name = "muse"
    columns = {"VerbMem_f": "verbmem_f", "KnowMem_f": "knowmem_f", "KnowMem_r": "knowmem_r", "PrivLeak": "privleak",
               "ES": "forget/es", "EM": "forget/em"}
    figure = ("KnowMem_r", "VerbMem_f", False)
    progress = ("KnowMem_r", "VerbMem_f")
    terms = {
        "VerbMem_f": "ROUGE-L F1 x 100 of the greedy 128-token continuation of each forget text's prompt against its "
                     "ground truth (verbatim memorisation; MUSE's formula)",
        "KnowMem_f": "ROUGE-L F1 x 100 of greedy answers to the forget set's questions after a few-shot prompt",
        "KnowMem_r": "the same on the retain set's questions (utility)",
        "PrivLeak": "(AUC - AUC of the retrained model) / the retrained model's AUC x 100, the Min-40 % attack's AUC "
                    "between forget and holdout texts; near 0 is no leak",
        "ES": "extraction strength of the verbatim forget texts, teacher-forced",
        "EM": "exact memorisation of the verbatim forget texts, teacher-forced",
        "seconds": "wall time a run: unlearning and the evaluation",
    }
    criterion = ("the smallest |PrivLeak| among points keeping KnowMem_r >= {floor:g} x the target's (MUSE: no "
                 "privacy leak, utility preserved)")

    def levels(self, spec) -> list[str]:
        return ["forget"]  # MUSE's one forget set (the scal / sust folds are not benched)

    def validation_levels(self, spec) -> list[str]:
        return ["forget"]

    @staticmethod
    def level_title(level: str) -> str:
        return "MUSE forget set"

    def worlds(self, spec, out: Path, log) -> tuple[dict[int, World], World]:
        """({seed: test world}, validation world): one test world for every seed."""
        data = spec.data
        if data.get("kind", "generated") == "generated":
            size = {k: int(data[k]) for k in ("n_forget", "n_retain", "n_holdout") if k in data}
            test = self._generated(out / "world_test", int(data.get("seed", 0)), spec, log, data, size)
            return ({seed: test for seed in spec.seeds},
                    self._generated(out / "world_validation", int(data.get("validation_seed", 1)), spec, log, data,
                                    size))
        if data.get("kind") != "muse":
            raise UserError(f"a MUSE bench's data.kind is 'generated' or 'muse', got {data.get('kind')!r}")
        from lit_unlearn.data.tokenizer import load_tokenizer

        if not data.get("reference"):
            raise UserError("bench data.reference: the retrained model's report (`lit-unlearn muse-eval --save`)")
        world = World("muse", data.get("path", "muse-bench/MUSE-News"), load_tokenizer(data["tokenizer"]),
                      data["target"], {"forget": data["reference"]}, network_args=data.get("network_args"))
        return {seed: world for seed in spec.seeds}, world

    @staticmethod
    def _generated(folder: Path, seed: int, spec, log, data: dict, size: dict) -> World:
        from lit_unlearn.data.tokenizer import load_tokenizer
        from lit_unlearn.worlds.muse import prepare_muse_assets

        paths = prepare_muse_assets(folder, seed=seed, epochs=int(data.get("epochs", 40)),
                                    verbmem_max_new_tokens=spec.max_new_tokens,
                                    knowmem_max_new_tokens=max(1, spec.max_new_tokens // 4),
                                    log=lambda msg: log(f"[{folder.name}] {msg.strip('= ')}"), **size)
        return World(folder.name, str(paths["data"]), load_tokenizer(str(paths["tokenizer"])), str(paths["target"]),
                     {"forget": str(paths["reference"])})

    def datamodule(self, world: World, level: str, seed: int, spec, method):
        from lit_unlearn.data import MuseDataModule, MuseSource

        if method.needs_refusals:
            raise UserError(f"{method.name} needs refusal answers to QA items; MUSE trains on raw text")
        return MuseDataModule(MuseSource(world.data), world.tokenizer, max_length=int(spec.data.get("max_length", 256)),
                              retain_batch_size=spec.batch_size, forget_batch_size=spec.batch_size, seed=seed)

    def evaluate(self, world: World, level: str, network, spec, reads=frozenset()) -> dict:
        from lit_unlearn.data import MuseSource
        from lit_unlearn.metrics.muse.evaluator import MuseEvaluator

        key = (world.name, level)
        if key not in self._evaluators:  # one per world: the data is read once
            self._evaluators[key] = MuseEvaluator(world.tokenizer, MuseSource(world.data), spec.max_new_tokens,
                                                  max(1, spec.max_new_tokens // 4), reference=world.references[level],
                                                  max_length=int(spec.data.get("max_length", 2048)))
        return self._evaluators[key].run(network).summary

    def select(self, rows: list[dict], target: dict, floor: float, selection: str = "verdict"
               ) -> tuple[dict, str]:
        if selection != "verdict":
            raise UserError("MUSE's bench chooses by |PrivLeak| (selection: verdict); forget quality is TOFU's")
        best = _best(rows, lambda r: (-abs(r["PrivLeak"]), r["KnowMem_r"]),
                     lambda r: r["KnowMem_r"] is not None and r["PrivLeak"] is not None
                     and r["KnowMem_r"] >= floor * target["KnowMem_r"])
        if best:
            return best["point"], f"min |PrivLeak| with KnowMem_r >= {floor:g} x target's"
        best = max(rows, key=lambda r: r["KnowMem_r"] if r["KnowMem_r"] is not None else -math.inf)
        return best["point"], f"no point kept KnowMem_r >= {floor:g} x target's: max KnowMem_r"


BENCHMARKS = {"tofu": TofuBenchmark, "muse": MuseBenchmark}


def get_benchmark(name: str):
    if name not in BENCHMARKS:
        raise UserError(f"benchmark={name!r}: choose one of {sorted(BENCHMARKS)}")
    return BENCHMARKS[name]()
