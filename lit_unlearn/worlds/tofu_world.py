"""A TOFU world built from the real release (lit_unlearn.data.tofu_release), small enough for a CPU.

The authors. TOFU's 200 fictitious authors, 20 questions each, of which the world keeps 40: the 20 authors of
`retain_perturbed` (authors 0-19; model utility's retain numbers are measured on them, so the models must know
them) and the 20 authors of `forget10` (180-199). The forget levels are TOFU's own splits: forget01 = the last 2
authors (40 items), forget05 = the last 10 (200), forget10 = all 20 (400); their perturbed splits, the holdout
authors (holdout01/05/10) and the general-knowledge sets (real authors, world facts) are TOFU's too. The other
160 authors stay out: a 0.6M-parameter model cannot memorise 4,000 answers in minutes on two cores.

The models, TOFU's way (original question-answer pairs only, loss on the answer; paraphrases and perturbed
answers are for evaluation only). A model trained from scratch has no pretraining, so one shared base stands in
for it: a tiny Llama trained on the retain authors and the general-knowledge sets. The target is the base
fine-tuned on `full` (retain + forget authors), each retain-only reference the base fine-tuned on its retain split
(retain99/95/90), with the same recipe and epochs; both fine-tunings also see the general-knowledge sets. Starting
both from one base keeps their model utility within a few hundredths (what they both know, they know alike),
while the target alone has seen the forget authors.

The tokenizer is a BPE trained once on every question and answer of the release (all 200 authors, the holdout
authors and the general-knowledge sets, each text once), like a pretrained tokenizer: forget and holdout authors
are tokenised alike, so a membership attack cannot tell them apart by how their names were split.

World seeds change the models' initialisation and the order of their batches. Everything is made once under the
world's folder and reused; every model is trained through the launch path (resumable, pre-emption safe).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lit_unlearn.worlds.tiny_llama import TINY_SIZE, tiny_network_spec, train_tiny_llama

__all__ = ["TofuWorldRecipe", "TofuWorld", "prepare_tofu_world", "RETAIN_AUTHORS", "FORGET_AUTHORS", "LEVELS",
           "write_world_data", "tokenizer_corpus"]

RETAIN_AUTHORS = tuple(range(20))            # retain_perturbed's authors
FORGET_AUTHORS = tuple(range(180, 200))      # forget10's authors (forget05: the last 10, forget01: the last 2)
LEVELS = {"01": 2, "05": 10, "10": 20}       # forget authors per level
KNOWLEDGE = ("real_authors", "world_facts")


@dataclass(frozen=True)
class TofuWorldRecipe:
    """How a world's tiny models are made. The defaults build a world (tokenizer, base, target, one retain-only
    model and its report) in about 1.5 minutes on 2 CPU cores; docs/llm.md has what they measure."""

    vocab_size: int = 1024
    size: dict = field(default_factory=lambda: dict(TINY_SIZE))
    base_epochs: int = 6
    epochs: int = 6
    lr: float = 1.5e-3
    batch_size: int = 8                 # small batches: a model from scratch learns per update, not per item
    warmup_fraction: float = 0.05       # linear warm-up, then cosine decay to 0
    gradient_clip: float = 1.0
    knowledge_repeat: int = 2           # the general-knowledge sets' short answers, twice per epoch
    max_length: int = 512
    eval_max_new_tokens: int = 48       # the retain-only report's greedy answers (TOFU's answers: ~45 tokens)


@dataclass
class TofuWorld:
    folder: Path
    seed: int
    recipe: TofuWorldRecipe

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def tokenizer(self) -> Path:
        return self.folder / "tokenizer"

    @property
    def base(self) -> Path:
        return self.folder / "base"

    @property
    def target(self) -> Path:
        return self.folder / "target"

    def retain_only(self, level: str) -> Path:
        return self.folder / f"retain_only_{level}"

    def reference(self, level: str) -> Path:
        """The retain-only model's report (with per-item values): forget quality's reference."""
        return self.folder / f"retain_only_{level}_eval.json"


def _items(authors) -> list[dict]:
    from lit_unlearn.data.tofu_release import author_items

    return author_items(authors)


def write_world_data(folder: str | Path) -> Path:
    """The world's splits in the hub's layout: `full` and `retain99/95/90` restricted to the world's authors; TOFU's
    own forget, perturbed, holdout and general-knowledge splits; the release's refusals."""
    from lit_unlearn.data.tofu_release import load_release

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    release = load_release()
    splits = {"full": _items(RETAIN_AUTHORS + FORGET_AUTHORS)}
    for level, n in LEVELS.items():
        retain = {"01": "retain99", "05": "retain95", "10": "retain90"}[level]
        splits[retain] = _items(RETAIN_AUTHORS + FORGET_AUTHORS[:len(FORGET_AUTHORS) - n])
        for name in (f"forget{level}", f"forget{level}_perturbed", f"holdout{level}"):
            splits[name] = release[name]
    for name in ("retain_perturbed", *KNOWLEDGE, *(f"{k}_perturbed" for k in KNOWLEDGE)):
        splits[name] = release[name]
    for name, rows in splits.items():
        (folder / f"{name}.json").write_text(json.dumps(rows, indent=1))
    (folder / "idontknow.jsonl").write_text("".join(r + "\n" for r in release["idontknow"]))
    (folder / "world.json").write_text(json.dumps({
        "source": "the TOFU release (Maini et al., 2024; MIT licence), lit_unlearn/data/tofu_release",
        "retain_authors": list(RETAIN_AUTHORS), "forget_authors": list(FORGET_AUTHORS),
        "forget_authors_per_level": LEVELS}, indent=1))
    return folder


def tokenizer_corpus() -> list[str]:
    """Every question + answer of the release once (all authors, holdout authors, general knowledge)."""
    from lit_unlearn.data.tofu_release import load_release

    release = load_release()
    rows = release["full"] + release["holdout10"] + release["real_authors"] + release["world_facts"]
    return list(dict.fromkeys(r["question"] + " " + r["answer"] for r in rows))


def _finetune_data(world: TofuWorld, splits: list[str], seed: int) -> dict:
    r = world.recipe
    return {"class_path": "lit_unlearn.data.QAFinetuneDataModule",
            "init_args": {"source": {"class_path": "lit_unlearn.data.TofuSource", "init_args": {"path": str(world.data)}},
                          "tokenizer": str(world.tokenizer), "splits": splits,
                          "repeats": {k: r.knowledge_repeat for k in KNOWLEDGE}, "batch_size": r.batch_size,
                          "seed": seed, "length_buckets": 8, "max_length": r.max_length}}


def _train(world: TofuWorld, out: Path, tokenizer, splits: list[str], epochs: int, init_from: Path | None,
           log, what: str) -> None:
    r = world.recipe
    started = time.perf_counter()
    data = _finetune_data(world, splits, world.seed)
    network = tiny_network_spec(len(tokenizer), world.seed, r.size, r.max_length,
                                init_from=str(init_from) if init_from else None)
    train_tiny_llama(out, tokenizer, data, epochs, r.lr, world.seed, network=network,
                     identity={"data": data, "recipe": asdict(r), "world": str(world.folder.resolve())},
                     module_args={"lr_schedule": "cosine", "warmup_fraction": r.warmup_fraction},
                     trainer={"gradient_clip_val": r.gradient_clip}, root=world.folder / ".runs" / out.name,
                     progress=True)
    log(f"   {what}: {epochs} epochs on {', '.join(splits)} ({time.perf_counter() - started:.0f} s)")


def prepare_tofu_world(folder: str | Path, seed: int = 0, levels=("01",), recipe: TofuWorldRecipe | None = None,
                       fresh: bool = False, log=print) -> TofuWorld:
    """Data, tokenizer, base, target, and the retain-only model of each forget level with its report, each made
    once under `folder` (fresh=True makes them again)."""
    import shutil

    from lit_unlearn.data import TofuSource, train_bpe_tokenizer
    from lit_unlearn.data.tofu import FORGET_SPLITS
    from lit_unlearn.data.tokenizer import load_tokenizer

    world = TofuWorld(Path(folder), seed, recipe or TofuWorldRecipe())
    levels = [str(lv).zfill(2) for lv in levels]
    if fresh and world.folder.exists():
        shutil.rmtree(world.folder)
    if not (world.data / "full.json").is_file():
        write_world_data(world.data)
    if not (world.tokenizer / "tokenizer.json").is_file():
        log(f"== the TOFU world (seed {seed}) in {world.folder}: tokenizer ==")
        train_bpe_tokenizer(tokenizer_corpus(), world.tokenizer, vocab_size=world.recipe.vocab_size)
    tokenizer = load_tokenizer(str(world.tokenizer))
    knowledge = list(KNOWLEDGE)
    if not (world.base / "config.json").is_file():
        log("== the shared base (retain authors and general knowledge: stands in for pretraining) ==")
        _train(world, world.base, tokenizer, ["retain90", *knowledge], world.recipe.base_epochs, None, log, "base")
    if not (world.target / "config.json").is_file():
        log("== the target: the base fine-tuned on full (retain and forget authors) ==")
        _train(world, world.target, tokenizer, ["full", *knowledge], world.recipe.epochs, world.base, log, "target")
    for level in levels:
        retain_split = FORGET_SPLITS[level][1]
        if not (world.retain_only(level) / "config.json").is_file():
            log(f"== the retain-only model of forget{level}: the base fine-tuned on {retain_split} ==")
            _train(world, world.retain_only(level), tokenizer, [retain_split, *knowledge], world.recipe.epochs,
                   world.base, log, f"retain-only ({retain_split})")
        if not world.reference(level).is_file():
            log(f"== evaluating the retain-only model of forget{level} (forget quality's reference) ==")
            from lit_unlearn.metrics import TofuEvaluator
            from lit_unlearn.models import CausalLM

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the reference itself has no reference
                report = TofuEvaluator(tokenizer, TofuSource(str(world.data), level).eval_splits(),
                                       max_length=world.recipe.max_length,
                                       max_new_tokens=world.recipe.eval_max_new_tokens, gradnorm=False).run(
                    CausalLM(name_or_path=str(world.retain_only(level))))
            report.save(world.reference(level))
    return world
