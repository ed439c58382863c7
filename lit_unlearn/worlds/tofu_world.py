"""A TOFU world built from the real release (lit_unlearn.data.tofu_release), small enough for a CPU.

The authors. TOFU's 200 fictitious authors, 20 questions each, of which the world keeps 40: the 20 authors of
`retain_perturbed` (authors 0-19; model utility's retain numbers are measured on them) and the 20 authors of
`forget10` (180-199). The forget levels are TOFU's own splits: forget01 = the last 2 authors (40 items), forget05 =
the last 10 (200), forget10 = all 20 (400); their perturbed splits, the holdout authors (holdout01/05/10: other
fictitious authors, never trained on) and the general-knowledge sets (real authors, world facts) are TOFU's too.

The models, TOFU's way: the retain and forget authors are learned together, in one fine-tune. A model trained
from scratch has no pretraining, so a shared base stands in for it: a tiny Llama trained on 40 *other* TOFU
authors (20-59, in none of the world's splits: the language and layout of author biographies) and the general-
knowledge sets. The base never sees the world's retain, forget or holdout authors. The target is the base
fine-tuned on `full` (retain + forget authors) and each retain-only model the base fine-tuned on its retain split
(retain99/95/90), with the same recipe; both fine-tunings keep the general-knowledge sets in the mix, so model
utility's knowledge part measures what the base learned and kept (memorised short answers: it is high for every
model), its retain part what the fine-tune taught. Original question-answer pairs only, loss on the answer;
paraphrases and perturbed answers are for evaluation only.

The tokenizer is a BPE trained once on every question and answer of the release (all 200 authors, the holdout
authors and the general-knowledge sets, each text once), like a pretrained tokenizer: forget and holdout authors
are tokenised alike, so a membership attack cannot tell them apart by how their names were split.

World seeds change the models' initialisation and the order of their batches. A world lives in a folder keyed by
its seed and a hash of everything that makes it (`world_key`: the recipe, the release files and the source that
builds it), so a changed recipe or builder makes a new world instead of reusing a stale one. Everything is made
once and reused; every model is trained through the launch path (resumable, pre-emption safe).
"""

from __future__ import annotations

import json
import textwrap
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lit_unlearn.worlds.tiny_llama import TINY_SIZE, tiny_network_spec, train_tiny_llama

__all__ = ["TofuWorldRecipe", "TofuWorld", "prepare_tofu_world", "RETAIN_AUTHORS", "FORGET_AUTHORS", "LEVELS",
           "PRETRAIN_AUTHORS", "write_world_data", "tokenizer_corpus", "world_key", "world_folder"]

RETAIN_AUTHORS = tuple(range(20))            # retain_perturbed's authors
FORGET_AUTHORS = tuple(range(180, 200))      # forget10's authors (forget05: the last 10, forget01: the last 2)
PRETRAIN_AUTHORS = tuple(range(20, 60))      # the base's "pretraining": authors in none of the world's splits
PRETRAIN_SPLIT = "pretraining"
LEVELS = {"01": 2, "05": 10, "10": 20}       # forget authors per level
KNOWLEDGE = ("real_authors", "world_facts")


@dataclass(frozen=True)
class TofuWorldRecipe:
    """How a world's tiny models are made. The defaults build a world (tokenizer, base, target, one retain-only
    model and its report) in about 2.5 minutes on 2 CPU cores; docs/guide/llm.md has what they measure."""

    vocab_size: int = 1024
    size: dict = field(default_factory=lambda: dict(TINY_SIZE))
    base_epochs: int = 6
    epochs: int = 8
    lr: float = 1.5e-3
    batch_size: int = 8                 # small batches: a model from scratch learns per update, not per item
    warmup_fraction: float = 0.05       # linear warm-up, then cosine decay to 0
    gradient_clip: float = 1.0
    knowledge_repeat: int = 2           # the general-knowledge sets' short answers, twice per epoch
    max_length: int = 512
    eval_max_new_tokens: int | None = None  # ROUGE budget: None covers ≥ 95 % of every split's answers


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
    splits = {"full": _items(RETAIN_AUTHORS + FORGET_AUTHORS), PRETRAIN_SPLIT: _items(PRETRAIN_AUTHORS)}
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
        "pretraining_authors": list(PRETRAIN_AUTHORS),
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


# What a world is made by: the source of these modules and objects (module or module:object), with the release
# archive and the recipe, keys its models; the evaluation package keys the retain-only reports.
BUILD_SOURCES = ("lit_unlearn.worlds.tofu_world:write_world_data", "lit_unlearn.worlds.tofu_world:tokenizer_corpus",
                 "lit_unlearn.worlds.tofu_world:_finetune_data", "lit_unlearn.worlds.tofu_world:_train",
                 "lit_unlearn.worlds.tofu_world:_build_models", "lit_unlearn.worlds.tiny_llama",
                 "lit_unlearn.data.tofu_release:load_release", "lit_unlearn.data.tofu_release:author_items",
                 "lit_unlearn.data.tofu:QAFormatter", "lit_unlearn.data.tofu:TokenizedQA",
                 "lit_unlearn.data.tofu:pad_collate", "lit_unlearn.data.tofu:QAFinetuneDataModule",
                 "lit_unlearn.data.tokenizer", "lit_unlearn.data.bucketed_batches",
                 "lit_unlearn.models.causal_lm:CausalLM", "lit_unlearn.models.causal_lm:tiny_llama_config",
                 "lit_unlearn.modules.classifier:SupervisedModule")
REPORT_SOURCES = ("lit_unlearn.metrics",)


def _without_imports(text: str) -> bytes:
    """Source text less its import statements: where a helper lives is not what a world is built by, so moving a
    module between folders keeps every world's key."""
    import ast

    lines = text.splitlines()
    tree = ast.parse(textwrap.dedent(text))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for i in range(node.lineno - 1, node.end_lineno):
                lines[i] = ""
    return "\n".join(line for line in lines if line.strip()).encode()


def _source_digest(names) -> str:
    import hashlib
    import importlib
    import inspect

    digest = hashlib.sha256()
    for name in names:
        module_name, _, attr = name.partition(":")
        module = importlib.import_module(module_name)
        if attr:
            text = _without_imports(inspect.getsource(getattr(module, attr)))
        elif module.__file__.endswith("__init__.py"):  # a package: every module in it, wherever it sits inside
            folder = Path(module.__file__).parent
            text = b"".join(sorted(_without_imports(f.read_text()) for f in folder.rglob("*.py")))
        else:
            text = _without_imports(Path(module.__file__).read_text())
        digest.update(name.encode() + b"\0" + text)
    if any(n.startswith("lit_unlearn.data.tofu_release") for n in names):  # the data itself
        from importlib import resources

        digest.update((resources.files("lit_unlearn.data") / "tofu_release" / "tofu.tar.xz").read_bytes())
    return digest.hexdigest()


def world_key(seed: int, recipe: TofuWorldRecipe | None = None) -> str:
    """A short hash of everything that makes a world's models: the recipe, the seed, the release files and the
    source that builds them. Two worlds with one key are the same world."""
    import hashlib

    recipe = recipe or TofuWorldRecipe()
    authors = {"retain": RETAIN_AUTHORS, "forget": FORGET_AUTHORS, "pretraining": PRETRAIN_AUTHORS, "levels": LEVELS,
               "knowledge": KNOWLEDGE}
    blob = json.dumps({"recipe": asdict(recipe), "seed": seed, "authors": authors,
                       "source": _source_digest(BUILD_SOURCES)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def world_folder(root: str | Path, seed: int = 0, recipe: TofuWorldRecipe | None = None) -> Path:
    """Where the world of `seed` and `recipe` lives under `root`: root/seed{S}-{world_key}."""
    return Path(root) / f"seed{seed}-{world_key(seed, recipe)}"


def _report_is_current(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("evaluated_by") == _source_digest(REPORT_SOURCES)[:12]
    except (json.JSONDecodeError, AttributeError):
        return False


def prepare_tofu_world(root: str | Path, seed: int = 0, levels=("01",), recipe: TofuWorldRecipe | None = None,
                       fresh: bool = False, log=print) -> TofuWorld:
    """Data, tokenizer, base, target, and the retain-only model of each forget level with its report, each made
    once in the world's folder under `root` (`world_folder`; fresh=True makes them again). Several processes may
    prepare one world at once: a file lock makes one of them build it and the others wait and read it."""
    from filelock import FileLock

    recipe = recipe or TofuWorldRecipe()
    folder = world_folder(root, seed, recipe)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        return _prepare(TofuWorld(folder, seed, recipe), [str(lv).zfill(2) for lv in levels], fresh, log)


def _prepare(world: TofuWorld, levels: list[str], fresh: bool, log) -> TofuWorld:
    import shutil

    if fresh and world.folder.exists():
        shutil.rmtree(world.folder)
        world.folder.mkdir(parents=True)
    if not fresh:  # seed 0 of the default recipe ships prebuilt: the builder then makes only what it lacks
        from lit_unlearn.worlds.prebuilt_world import install_prebuilt

        if copied := install_prebuilt(world.folder):
            log(f"== the TOFU world (seed {world.seed}) in {world.folder}: {', '.join(copied)} copied from the "
                "world shipped with the package (the same builder and recipe; --fresh builds them here) ==")
    tokenizer = _build_models(world, levels, log)
    _build_reports(world, levels, tokenizer, log)
    return world


def _build_models(world: TofuWorld, levels: list[str], log):
    """Data, tokenizer, base, target and the retain-only models of `levels` (what is missing of them)."""
    from lit_unlearn.data import train_bpe_tokenizer
    from lit_unlearn.data.tofu import FORGET_SPLITS
    from lit_unlearn.data.tokenizer import load_tokenizer

    if not (world.data / "full.json").is_file():
        write_world_data(world.data)
    if not (world.tokenizer / "tokenizer.json").is_file():
        log(f"== the TOFU world (seed {world.seed}) in {world.folder}: tokenizer ==")
        train_bpe_tokenizer(tokenizer_corpus(), world.tokenizer, vocab_size=world.recipe.vocab_size)
    tokenizer = load_tokenizer(str(world.tokenizer))
    knowledge = list(KNOWLEDGE)
    if not (world.base / "config.json").is_file():
        log("== the shared base (other TOFU authors and general knowledge: stands in for pretraining) ==")
        _train(world, world.base, tokenizer, [PRETRAIN_SPLIT, *knowledge], world.recipe.base_epochs, None, log,
               "base")
    if not (world.target / "config.json").is_file():
        log("== the target: the base fine-tuned on full (retain and forget authors together) ==")
        _train(world, world.target, tokenizer, ["full", *knowledge], world.recipe.epochs, world.base, log, "target")
    for level in levels:
        retain_split = FORGET_SPLITS[level][1]
        if not (world.retain_only(level) / "config.json").is_file():
            log(f"== the retain-only model of forget{level}: the base fine-tuned on {retain_split} ==")
            _train(world, world.retain_only(level), tokenizer, [retain_split, *knowledge], world.recipe.epochs,
                   world.base, log, f"retain-only ({retain_split})")
    return tokenizer


def _build_reports(world: TofuWorld, levels: list[str], tokenizer, log) -> None:
    """Each retain-only model's full report (per-item values of every metric and attack), redone when the
    evaluation code changes: the gold standard of reports, never read by a default decision."""
    from lit_unlearn.data import TofuSource

    for level in levels:
        if _report_is_current(world.reference(level)):
            continue
        log(f"== evaluating the retain-only model of forget{level} (the gold-standard report) ==")
        from lit_unlearn.metrics import TofuEvaluator
        from lit_unlearn.models import CausalLM

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reference itself has no reference
            report = TofuEvaluator(tokenizer, TofuSource(str(world.data), level).eval_splits(),
                                   max_length=world.recipe.max_length,
                                   max_new_tokens=world.recipe.eval_max_new_tokens).run(
                CausalLM(name_or_path=str(world.retain_only(level))))
        report.evaluated_by = _source_digest(REPORT_SOURCES)[:12]
        report.save(world.reference(level))
