"""Time the command line's help paths side by side with `import lightning` (the cost they must not pay).

    python benchmarks/own_job/help_paths.py [--rounds 5]

Prints, per path, the median wall time of a fresh process over the rounds (alternating paths within a round),
and its ratio to a bare `import lightning.pytorch`. Target: every help path <= 1.5 s.
"""

import statistics
import subprocess
import sys
from pathlib import Path
import time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py


def main() -> None:
    ap = options(__doc__, write=False)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from lit_unlearn.commands import all_commands

    paths = {"lit-unlearn --help": ["-m", "lit_unlearn", "--help"], "lit-unlearn configs": ["-m", "lit_unlearn", "configs"]}
    paths.update({f"lit-unlearn {name} --help": ["-m", "lit_unlearn", name, "--help"] for name in all_commands()})
    paths["import lightning.pytorch (reference)"] = ["-c", "import lightning.pytorch"]
    times = {k: [] for k in paths}
    for _ in range(args.rounds):
        for name, argv in paths.items():
            t = time.perf_counter()
            subprocess.run([sys.executable, *argv], capture_output=True, check=True)
            times[name].append(time.perf_counter() - t)
    ref = statistics.median(times["import lightning.pytorch (reference)"])
    print(f"| path | median s ({args.rounds} rounds) | / import lightning | <= 1.5 s |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"| {name} | {m:.2f} | {m / ref:.2f} | {'yes' if m <= 1.5 else 'NO'} |")


if __name__ == "__main__":
    main()
