"""The bench's YAML: which methods (with a small grid each), forget levels, seeds, budget, where the data is.

    methods:
      NPO: {class_path: lit_unlearn.modules.NPOModule, init_args: {optimizer: adamw}, grid: {lr: [3e-4, 1e-3]}}
    forget_levels: ["01", "05", "10"]
    seeds: [0, 1, 2]
    epochs: 5               # the budget: epochs over each level's forget set (or `steps:`, one count for all;
                            # a method may set its own `steps:` or `epochs:`)
    audit: true             # also attack every test run's result (lit-unlearn audit's columns)

`benchmark: tofu` (default) or `muse`. TOFU data:
- `data.kind: world` (the offline default): the TOFU world built from the real release (lit_unlearn.worlds.
  tofu_world), one test world per seed (its models' seed) and a validation world (`data.validation_seed`); the grid
  is scored on the validation world only, at `validation_level` (one level, or "all": each level on its own);
- `data.kind: generated`: the generated fictitious-author stand-in, a test world (`data.seed`) and a validation
  world (`data.validation_seed`);
- `data.kind: tofu`: real TOFU (hub or folder) with a given target and one saved retain-only report per forget
  level (the 7B benches); `data.max_length` (default 512) is the longest scored sequence.
`data.kind: muse` reads MUSE with a given target and the retrained model's saved report.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError
from lit_unlearn.storage.specs import read_spec_file

__all__ = ["MethodSpec", "BenchSpec", "load_bench_spec", "split_method_names"]

LEVELS = ("01", "05", "10")
SELECTIONS = ("verdict", "forget_quality")


@dataclass
class MethodSpec:
    name: str
    class_path: str
    init_args: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    needs_refusals: bool = False
    steps: int | None = None    # this method's step budget when it differs from the bench's (e.g. OFMU's rounds)
    epochs: float | None = None  # or its budget in epochs over the forget set
    callbacks: list[dict[str, Any]] = field(default_factory=list)  # {class_path, init_args} the method reads
    # the distillation stage after the method (DistillSpec fields; grid keys `distill.FIELD` vary them), or None
    distill: dict[str, Any] | None = None

    def grid_points(self) -> list[dict[str, Any]]:
        """Every combination of the grid's values (one empty point when there is no grid)."""
        keys = sorted(self.grid)
        return [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]


@dataclass
class BenchSpec:
    methods: list[MethodSpec]
    forget_levels: list[str] = field(default_factory=lambda: list(LEVELS))
    seeds: list[int] = field(default_factory=lambda: [0])
    grid_seed: int | None = None        # the validation runs' seed (None: the first of `seeds`); `--seeds` keeps
                                        # the config's, so test seeds can run as separate jobs on one OUT
    steps: int = 40
    epochs: float | None = None         # the budget in epochs over each level's forget set (wins over steps)
    audit: bool = False                 # the full verdict on every test run (TOFU): relearning, 4-bit, all attacks
    paraphrase: bool | None = None      # its fourth part, the paraphrased questions (None: where calibrated)
    batch_size: int = 32
    max_new_tokens: int | None = None   # None: enough for ≥ 95 % of each split's reference answers
    validation_level: str = "all"   # a forget level, or "all" (the grid chosen at every level on its own)
    utility_floor: float = 0.9
    # how the validation world chooses a method's point: "verdict" (the smallest steering band ratio; reads no
    # retain-only model) or "forget_quality" (the largest forget quality against the validation world's retain-only
    # model: the OFMU and NPO papers' own criterion, for reproducing their tables; the report says which)
    selection: str = "verdict"
    out_dir: str = "runs/bench_tofu"
    data: dict[str, Any] = field(default_factory=lambda: {"kind": "world", "validation_seed": 100})
    trainer: dict[str, Any] = field(default_factory=dict)
    template: str = "plain"
    benchmark: str = "tofu"    # or "muse" (one forget set; forget_levels is not used)


def load_bench_spec(path: str | Path) -> BenchSpec:
    raw = read_spec_file(path, "bench config", "configs/bench/bench_tofu_tiny.yaml")
    if not isinstance(raw.get("methods"), dict) or not raw["methods"]:
        raise UserError(f"{path}: a bench config needs `methods:` (name -> class_path, init_args, grid)")
    methods = []
    for name, m in raw.pop("methods").items():
        if "class_path" not in (m or {}):
            raise UserError(f"{path}: method {name} needs a class_path (e.g. lit_unlearn.modules.NPOModule)")
        if unknown := set(m) - {"class_path", "init_args", "grid", "needs_refusals", "steps", "epochs", "callbacks",
                                "distill"}:
            raise UserError(f"{path}: method {name}: unknown keys {sorted(unknown)}; known: class_path, init_args, "
                            "grid, needs_refusals, steps, epochs, callbacks, distill")
        callbacks = list(m.get("callbacks") or [])
        if any(not isinstance(c, dict) or "class_path" not in c for c in callbacks):
            raise UserError(f"{path}: method {name}: callbacks must be a list of {{class_path, init_args}}")
        distill = m.get("distill")
        if distill is not None:
            from lit_unlearn.distill import DistillSpec

            try:
                DistillSpec(**dict(distill))
            except TypeError as err:
                raise UserError(f"{path}: method {name}: distill: {err}") from None
        methods.append(MethodSpec(name, m["class_path"], dict(m.get("init_args") or {}),
                                  {k: list(v) for k, v in (m.get("grid") or {}).items()},
                                  bool(m.get("needs_refusals", False)), m.get("steps"), m.get("epochs"), callbacks,
                                  None if distill is None else dict(distill)))
    unknown = set(raw) - set(BenchSpec.__dataclass_fields__)
    if unknown:
        raise UserError(f"{path}: unknown bench keys {sorted(unknown)}; known: "
                        f"{sorted(k for k in BenchSpec.__dataclass_fields__ if k != 'methods')}")
    spec = BenchSpec(methods=methods, **raw)
    if spec.selection not in SELECTIONS:
        raise UserError(f"{path}: selection {spec.selection!r}: choose one of {SELECTIONS}")
    spec.forget_levels = [str(x).zfill(2) for x in spec.forget_levels]
    bad = [x for x in spec.forget_levels if x not in LEVELS]
    if bad:
        raise UserError(f"{path}: forget_levels {bad} are not TOFU's; use {list(LEVELS)}")
    if spec.validation_level != "all":
        spec.validation_level = str(spec.validation_level).zfill(2)
        if spec.benchmark == "tofu" and spec.validation_level not in LEVELS:
            raise UserError(f"{path}: validation_level {spec.validation_level!r}: a TOFU level {list(LEVELS)} or 'all'")
    return spec


def split_method_names(text: str, names: list[str]) -> list[str]:
    """A comma-separated choice of methods, where a name may itself hold commas ("OFMU (separate clip, holdout
    ceiling)"): at each position the longest configured name that ends at a comma or the end wins; a piece that no
    name matches is kept as written up to the next comma, for the caller's unknown-method error."""
    chosen, rest = [], text.strip()
    while rest:
        piece = max((n for n in names if rest == n or rest.startswith(n + ",")), key=len,
                    default=rest.split(",", 1)[0])
        chosen.append(piece.strip())
        rest = rest[len(piece):].lstrip(",").lstrip()
    return [c for c in chosen if c]
