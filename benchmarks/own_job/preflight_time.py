"""Time to the error on the own-data path: each bad input (a missing file, an overlap, an empty model folder, ...)
against a good run of one step without holdout data (start-up, the model load, one step, the export), the cost the
checks used to come after (they fired once every rank had loaded the model). Both as a user meets them: `lit-unlearn unlearn` processes, side by side in one run,
on a tiny Llama written by transformers (at 7B the model load the preflight spares is minutes, not seconds).

    python benchmarks/own_job/preflight_time.py [--repeats 2]
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the test-time job maker


def main() -> None:
    parser = options(__doc__, write=False)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from own_job_files import write_data, write_model

    tmp = Path(tempfile.mkdtemp())
    write_model(tmp / "model", steps=5)
    files = write_data(tmp / "data")
    (tmp / "empty_model").mkdir()
    rows = (files["forget"]).read_text().splitlines()
    (tmp / "overlap.jsonl").write_text("\n".join((files["retain"]).read_text().splitlines() + rows[:1]) + "\n")
    base = {"model-dir": tmp / "model", "forget": files["forget"], "retain": files["retain"], "holdout": files["holdout"]}
    cases = {"good run": {"holdout": None},
             "missing forget file": {"forget": tmp / "nope.jsonl"},
             "forget/retain overlap": {"retain": tmp / "overlap.jsonl"},
             "empty model folder": {"model-dir": tmp / "empty_model"}}
    results = {}
    for case, change in cases.items():
        argv = [a for k, v in {**base, **change}.items() if v is not None for a in (f"--{k}", str(v))]
        command = [sys.executable, "-m", "lit_unlearn.cli", "unlearn", *argv, "--columns",
                   "question=prompt,answer=completion", "--method", "graddiff", "--out", str(tmp / "runs"),
                   "--trainer.max_steps=1", "--trainer.enable_progress_bar=false"]
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp)
            times.append(time.perf_counter() - started)
            if case != "good run":
                assert proc.returncode == 2, proc.stderr[-2000:]
            shutil.rmtree(tmp / "runs", ignore_errors=True)
        results[case] = statistics.median(times)
    good = results.pop("good run")
    print(f"| case | seconds to the error | / a good run's {good:.1f} s |")
    print("|---|---|---|")
    for case, seconds in results.items():
        print(f"| {case} | {seconds:.1f} | {seconds / good:.2f} |")
    print(json.dumps({"good_run_s": good, **results}))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
