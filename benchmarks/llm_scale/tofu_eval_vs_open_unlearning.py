"""`lit-unlearn tofu-eval` against open-unlearning's TOFU evaluator, side by side on the same model and the real TOFU
splits, the same metric set in open-unlearning's conventions; rounds alternate, medians and their ratio printed.

    benchmarks/llm_scale/tofu_eval_vs_open_unlearning.sh OPEN_UNLEARNING_CHECKOUT [--level 10] [--rounds 3] [--world DIR]

What it sets up (idempotent, inside the checkout and a scratch folder; nothing else is touched):
- open-unlearning's extra packages (hydra-core 1.3.2, lm-eval 0.4.13 whose import `src/evals/__init__.py` needs, and
  what they import) into CHECKOUT/.lit-unlearn-deps, without dependencies, so that both tools run on this
  environment's torch and transformers. (open-unlearning pins lm-eval 0.4.8, which fails under transformers 5.)
- the world's split files as a local dataset folder with one config per split, which each of open-unlearning's
  TOFU dataset configs reads through a Hydra override of its `path`;
- `configs/model/lit_unlearn_tiny.yaml`: the world's model in float32 on CPU, eager attention, and the
  question/answer tags `--input-format open-unlearning` uses.

Both evaluate: truth ratio, probability, ROUGE (greedy, 200 new tokens) on forget, retain, real authors and world
facts; model utility; extraction strength, exact memorisation; the loss, zlib, Min-K%, Min-K%++ and gradnorm
attacks and privleak against the fallback AUC (no retain-only reference on either side, so forget quality is
n/a on both). lit-unlearn also reports ES/EM on every split, which costs it nothing extra.

Timed: the whole process (wall clock), and the evaluation alone: for lit-unlearn `TofuEvaluator.run` (the
command prints it), for open-unlearning the span from its first "Evaluating" log line to its last result line.
Every number both report is compared; the largest difference is printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py

REPO = Path(__file__).resolve().parents[2]
COMMIT = "d3d7cf9"
DEPS = ["hydra-core==1.3.2", "omegaconf==2.3.0", "antlr4-python3-runtime==4.9.3", "hydra_colorlog==1.2.0",
        "colorlog", "lm-eval==0.4.13", "requests", "urllib3", "certifi", "charset_normalizer", "idna", "sacrebleu",
        "portalocker", "tabulate", "colorama", "lxml"]
EXTRA_METRICS = "[exact_memorization,mia_min_k_plus_plus,mia_min_k,mia_loss,mia_zlib,mia_gradnorm]"
# open-unlearning's summary key -> lit-unlearn's, for the comparison of values
SAME = {"forget_truth_ratio": "forget/truth_ratio", "forget_Q_A_Prob": "forget/prob", "forget_Q_A_ROUGE": "forget/rouge",
        "model_utility": "model_utility", "extraction_strength": "forget/es", "exact_memorization": "forget/em",
        "mia_loss": "mia/loss_auc", "mia_zlib": "mia/zlib_auc", "mia_min_k": "mia/min_k_auc",
        "mia_min_k_plus_plus": "mia/min_k_plus_plus_auc", "mia_gradnorm": "mia/gradnorm_auc", "privleak": "privleak"}
MODEL_YAML = """model_args:
  pretrained_model_name_or_path: {model}
  attn_implementation: eager
  torch_dtype: float32
tokenizer_args:
  pretrained_model_name_or_path: {tokenizer}
template_args:
  apply_chat_template: False
  user_start_tag: "Question: "
  user_end_tag: "\\n"
  asst_start_tag: "Answer: "
  asst_end_tag: "\\n"
"""


def set_up(checkout: Path, world: Path, scratch: Path) -> tuple[dict, list[str]]:
    """The environment and the Hydra overrides open-unlearning runs with."""
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    if not head.startswith(COMMIT):
        print(f"note: the checkout is at {head or '?'}, this benchmark was written against {COMMIT}")
    deps = checkout / ".lit-unlearn-deps"
    if not (deps / "hydra").is_dir() or not (deps / "lm_eval").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(deps), "--no-deps", *DEPS],
                       check=True)
    data = scratch / "tofu_local"
    data.mkdir(parents=True, exist_ok=True)
    names = sorted(p.stem for p in (world / "data").glob("*.json"))
    for name in names:
        link = data / f"{name}.json"
        if not link.exists():
            link.symlink_to((world / "data" / f"{name}.json").resolve())
    (data / "README.md").write_text("---\nconfigs:\n" + "".join(
        f"- config_name: {n}\n  data_files: {n}.json\n" for n in names) + "---\n")
    (checkout / "configs/model/lit_unlearn_tiny.yaml").write_text(
        MODEL_YAML.format(model=(world / "target").resolve(), tokenizer=(world / "tokenizer").resolve()))
    env = dict(os.environ, PYTHONPATH=f"{deps}:{checkout / 'src'}", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    return env, [str(data.resolve())]


def open_unlearning_command(level: str, world: Path, task: str) -> list[str]:
    return [sys.executable, "src/eval.py", "experiment=eval/tofu/default", "model=lit_unlearn_tiny",
            f"forget_split=forget{level}", f"holdout_split=holdout{level}", f"task_name={task}",
            "model.model_args.device_map=cpu", f"model.model_args.pretrained_model_name_or_path={(world / 'target').resolve()}",
            f"+eval/tofu_metrics={EXTRA_METRICS}", "eval.tofu.overwrite=true"]


def data_overrides(checkout: Path, env: dict, level: str, world: Path, data: str) -> list[str]:
    """`...hf_args.path=DATA` for every TOFU dataset node of the composed config."""
    import yaml

    out = subprocess.run(open_unlearning_command(level, world, "compose") + ["--cfg", "job"], cwd=checkout, env=env,
                         capture_output=True, text=True, check=True).stdout
    cfg = yaml.safe_load("\n".join(line for line in out.splitlines() if not line.startswith("[")))
    found: list[str] = []

    def walk(node, path):
        if isinstance(node, dict):
            hf = node.get("hf_args")
            if isinstance(hf, dict) and hf.get("path") == "locuslab/TOFU":
                found.append(".".join(path + ["hf_args", "path"]) + f"={data}")
            for k, v in node.items():
                walk(v, path + [str(k)])
    walk(cfg, [])
    if not found:
        sys.exit("no TOFU dataset found in open-unlearning's composed config: is this its checkout?")
    return found


def _log_span(log: str) -> float:
    """Seconds from open-unlearning's first "Evaluating" line to its last "Result for metric" line."""
    stamps = []
    for line in re.sub(r"\x1b\[[0-9;]*m", "", log).splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", line)
        if m and ("Evaluating" in line or "Result for metric" in line):
            stamps.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return (stamps[-1] - stamps[0]).total_seconds()


def main() -> None:
    ap = options(__doc__, full=True, write=False)
    ap.add_argument("checkout", help="an open-unlearning checkout (git clone ...; git checkout d3d7cf9)")
    ap.add_argument("--level", default="10", choices=("01", "05", "10"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--world", default=None, help="a TOFU world folder (default: seed 0's, built if missing)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    args = ap.parse_args()
    checkout = Path(args.checkout).resolve()
    if args.world:
        world = Path(args.world)
    else:
        from lit_unlearn.worlds.tofu_world import prepare_tofu_world

        world = prepare_tofu_world("runs/tofu/worlds", seed=0, log=print).folder
    scratch = Path(tempfile.mkdtemp(prefix="tofu_eval_vs_ou_"))
    env, (data,) = set_up(checkout, world, scratch)
    env["OMP_NUM_THREADS"] = str(args.threads)
    overrides = data_overrides(checkout, env, args.level, world, data)
    ours_env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    ours_cmd = [sys.executable, "-m", "lit_unlearn", "tofu-eval", "--model", str(world / "target"), "--data",
                str(world / "data"), "--level", args.level, "--mia-convention", "open-unlearning",
                "--input-format", "open-unlearning", "--max-new-tokens", "200"]
    times: dict[str, list[float]] = {"ours": [], "ours_eval": [], "ou": [], "ou_eval": []}
    ours_summary = theirs = None
    for r in range(args.rounds):
        for who in (("ours", "ou") if r % 2 == 0 else ("ou", "ours")):  # alternate who goes first
            started = time.perf_counter()
            if who == "ours":
                save = scratch / f"ours_{r}.json"
                proc = subprocess.run(ours_cmd + ["--save", str(save)], cwd=REPO, env=ours_env, capture_output=True,
                                      text=True)
                if proc.returncode:
                    sys.exit("lit-unlearn tofu-eval failed:\n" + proc.stderr[-3000:])
                times["ours"].append(time.perf_counter() - started)
                times["ours_eval"].append(float(re.search(r"evaluated in ([\d.]+) s", proc.stdout).group(1)))
                ours_summary = json.loads(save.read_text())["summary"]
            else:
                task = f"lit_unlearn_bench_{r}"
                shutil.rmtree(checkout / "saves" / "eval" / task, ignore_errors=True)  # its log appends otherwise
                proc = subprocess.run(open_unlearning_command(args.level, world, task) + overrides, cwd=checkout,
                                      env=env, capture_output=True, text=True)
                if proc.returncode:
                    sys.exit("open-unlearning failed:\n" + proc.stderr[-3000:])
                times["ou"].append(time.perf_counter() - started)
                out = checkout / "saves" / "eval" / task
                times["ou_eval"].append(_log_span((out / "eval.log").read_text()))
                theirs = json.loads((out / "TOFU_SUMMARY.json").read_text())
            print(f"round {r + 1} {who}: {time.perf_counter() - started:.1f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    diffs = {ou_key: abs(theirs[ou_key] - ours_summary[key]) for ou_key, key in SAME.items()
             if theirs.get(ou_key) is not None and ours_summary.get(key) is not None}
    print(f"\nTOFU forget{args.level}, the seed-0 world's target, {args.threads} thread(s), median of {args.rounds} "
          "alternating rounds")
    print("| | lit-unlearn | open-unlearning | ratio |\n|---|---|---|---|")
    print(f"| whole process | {med['ours']:.1f} s | {med['ou']:.1f} s | **{med['ours'] / med['ou']:.2f}** |")
    print(f"| evaluation alone | {med['ours_eval']:.1f} s | {med['ou_eval']:.1f} s | "
          f"**{med['ours_eval'] / med['ou_eval']:.2f}** |")
    worst = max(diffs, key=diffs.get)
    print(f"\n{len(diffs)} metrics both report; largest difference {diffs[worst]:.2e} ({worst})")
    print("rounds (s): " + json.dumps({k: [round(x, 1) for x in v] for k, v in times.items()}))


if __name__ == "__main__":
    main()
