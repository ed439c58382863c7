"""The bench's YAML: which methods (with a small grid each), forget levels, seeds, budget, where the data is.

    methods:
      NPO: {class_path: lit_unlearn.modules.NPOModule, init_args: {optimizer: adamw}, grid: {lr: [3e-4, 1e-3]}}
    forget_levels: ["01", "05", "10"]
    seeds: [0, 1]
    steps: 40

`benchmark: tofu` (default) or `muse`. `data.kind: generated` (the offline default) builds a test world (data seed `data.seed`) and a separate validation
world (`data.validation_seed`): the grid is scored on the validation world only. `data.kind: tofu` reads real TOFU
(hub or folder) with a given target and one saved retain-only report per forget level; `data.kind: muse` reads
MUSE with a given target and the retrained model's saved report.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_unlearn.errors import UserError

__all__ = ["MethodSpec", "BenchSpec", "load_bench_spec"]

LEVELS = ("01", "05", "10")


@dataclass
class MethodSpec:
    name: str
    class_path: str
    init_args: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    needs_refusals: bool = False

    def grid_points(self) -> list[dict[str, Any]]:
        """Every combination of the grid's values (one empty point when there is no grid)."""
        keys = sorted(self.grid)
        return [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]


@dataclass
class BenchSpec:
    methods: list[MethodSpec]
    forget_levels: list[str] = field(default_factory=lambda: list(LEVELS))
    seeds: list[int] = field(default_factory=lambda: [0])
    steps: int = 40
    batch_size: int = 32
    max_new_tokens: int = 32
    validation_level: str = "10"
    utility_floor: float = 0.9
    out_dir: str = "runs/bench_tofu"
    data: dict[str, Any] = field(default_factory=lambda: {"kind": "generated", "seed": 0, "validation_seed": 1})
    trainer: dict[str, Any] = field(default_factory=dict)
    template: str = "plain"
    benchmark: str = "tofu"    # or "muse" (one forget set; forget_levels is not used)


def load_bench_spec(path: str | Path) -> BenchSpec:
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw.get("methods"), dict) or not raw["methods"]:
        raise UserError(f"{path}: a bench config needs `methods:` (name -> class_path, init_args, grid)")
    methods = []
    for name, m in raw.pop("methods").items():
        if "class_path" not in (m or {}):
            raise UserError(f"{path}: method {name} needs a class_path (e.g. lit_unlearn.modules.NPOModule)")
        methods.append(MethodSpec(name, m["class_path"], dict(m.get("init_args") or {}),
                                  {k: list(v) for k, v in (m.get("grid") or {}).items()},
                                  bool(m.get("needs_refusals", False))))
    unknown = set(raw) - set(BenchSpec.__dataclass_fields__)
    if unknown:
        raise UserError(f"{path}: unknown bench keys {sorted(unknown)}; known: "
                        f"{sorted(k for k in BenchSpec.__dataclass_fields__ if k != 'methods')}")
    spec = BenchSpec(methods=methods, **raw)
    spec.forget_levels = [str(x).zfill(2) for x in spec.forget_levels]
    bad = [x for x in spec.forget_levels if x not in LEVELS]
    if bad:
        raise UserError(f"{path}: forget_levels {bad} are not TOFU's; use {list(LEVELS)}")
    return spec
