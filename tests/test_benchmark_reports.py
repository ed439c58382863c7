"""The report scripts under benchmarks/ that turn bench outputs into docs tables: their arithmetic, on rows written
here by hand (each number below is worked out in the comment beside it)."""

import csv
import json

import numpy as np
import pytest

from helpers import benchmark_script as _script



def test_robustness_levels_takes_utility_against_the_same_worlds_target_and_counts_only_seeds_meeting_all_three(
        tmp_path):
    levels = _script("bench/robustness_levels")
    row = {"phase": "test", "band ratio": 0.9, "relearn band ratio": 0.9, "int4 band ratio": 0.9}
    rows = [{**row, "method": "Target", "seed": 0, "MU": 0.5, "forgotten": 0, "full band ratio": 2.0},
            {**row, "method": "Target", "seed": 1, "MU": 0.8, "forgotten": 0, "full band ratio": 2.0},
            # seed 0: MU 0.49 / 0.5 = 0.98, passes, compute 0.4: meets all; seed 1: 0.76 / 0.8 = 0.95, passes,
            # compute 0.6 > 0.5: does not
            {**row, "method": "M", "seed": 0, "MU": 0.49, "forgotten": 1, "full band ratio": 0.9, "compute share": 0.4},
            {**row, "method": "M", "seed": 1, "MU": 0.76, "forgotten": 1, "full band ratio": 0.9, "compute share": 0.6},
            {**row, "method": "M", "seed": 0, "MU": 0.49, "forgotten": 1, "full band ratio": 0.9, "phase": "validation"}]
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (summary,) = levels.summarise(levels.test_phase_rows(tmp_path))
    assert summary["seeds"] == 2 and summary["passed"] == 2
    assert summary["MU ratio"] == pytest.approx((0.98 + 0.95) / 2)
    assert summary["compute share"] == pytest.approx(0.5)
    assert summary["meets all"] == 1


def test_ofmu_budget_curve_reads_each_budgets_point_in_budget_order(tmp_path):
    curve = _script("ofmu/budget_curve")
    for epochs, (fq, mu) in {30: (0.7, 0.6), 10: (0.01, 0.65)}.items():
        folder = tmp_path / f"e{epochs}"
        folder.mkdir()
        with open(folder / "results.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, ["forget_level", "method", "hyper_parameters", "FQ (gold)", "FQ (gold) ci95",
                                        "MU", "MU ci95"])
            writer.writeheader()
            writer.writerow({"forget_level": "01", "method": "NPO", "hyper_parameters": '{"lr": 0.001}',
                             "FQ (gold)": fq, "FQ (gold) ci95": 0.1, "MU": mu, "MU ci95": 0.01})
            writer.writerow({"forget_level": "05", "method": "NPO", "hyper_parameters": "{}", "FQ (gold)": 9,
                             "FQ (gold) ci95": 0, "MU": 9, "MU ci95": 0})
    points = curve.curve({30: tmp_path / "e30", 10: tmp_path / "e10"}, "01")
    assert [(e, fq, mu) for e, fq, _, mu, _, _ in points["NPO"]] == [(10, 0.01, 0.65), (30, 0.7, 0.6)]
    assert "0.4 / 0.58" in curve.table(points, "01")  # the paper's NPO beside it
    # a budget whose run folder is gone, read from its published table: its own level's section, "mean ± ci" cells
    published = tmp_path / "e3.md"
    published.write_text("# Bench\n\n## forget01\n\n| method | hyper-parameters | MU | FQ (gold) |\n|---|---|---|---|\n"
                         "| NPO | lr=0.001 | 0.64 ± 0.02 | 3.0e-03 ± 1.0e-03 |\n\nChosen on validation:\n\n"
                         "## forget05\n\n| method | hyper-parameters | MU | FQ (gold) |\n|---|---|---|---|\n"
                         "| NPO | lr=0.001 | 0.5 | 0.9 |\n")
    points = curve.curve({30: tmp_path / "e30" / "results.csv", 3: published}, "01")
    assert [(e, fq, fqc, mu, muc) for e, fq, fqc, mu, muc, _ in points["NPO"]] == [(3, 3e-3, 1e-3, 0.64, 0.02),
                                                                                   (30, 0.7, 0.1, 0.6, 0.01)]
    assert curve.read_budget(published, "05")["NPO"]["MU ci95"] == "0"
    # a budget whose chosen point diverged on every test seed: empty CSV cells, "diverged (n/N)" in the table
    diverged = tmp_path / "e100.csv"
    diverged.write_text('forget_level,method,hyper_parameters,FQ (gold),FQ (gold) ci95,MU,MU ci95\n'
                        '01,NPO,"{""lr"": 0.001}",,,,\n')
    published.write_text(published.read_text().replace("| NPO | lr=0.001 | 0.64 ± 0.02 | 3.0e-03 ± 1.0e-03 |",
                                                       "| NPO | lr=0.001 | diverged (3/3) | n/a |"))
    points = curve.curve({10: published, 100: diverged, 30: tmp_path / "e30"}, "01")
    assert [e for e, *_ in points["NPO"]] == [10, 30, 100]
    assert all(np.isnan(points["NPO"][i][k]) for i in (0, 2) for k in (1, 3)) and points["NPO"][1][1] == 0.7
    row = curve.table(points, "01").splitlines()[2]
    assert row.count("diverged (lr=0.001)") == 2 and "0.7 ± 0.1 / 0.600 ± 0.010" in row


def test_ofmu_divergence_trace_reports_each_terms_growth_from_the_first_round_to_the_last_finite_one(monkeypatch):
    import sys
    from types import SimpleNamespace

    trace = _script("ofmu/divergence_trace")
    monkeypatch.setattr(sys, "argv", [trace.__file__, "--level", "10"])
    rows = [{"round": k, "rho": 1.1 ** k, "retain_grad_norm": 1.0, "hvp_norm": 3.0 + k,
             "penalty_norm": 2 * 1.1 ** k * (3.0 + k), "outer_step_norm": 1e-3 * (1 + 2 * 1.1 ** k * (3.0 + k)),
             "inner_shift_norm": 0.01, "forget_loss": 1.0, "retain_loss": 1.0} for k in range(12)]
    args = SimpleNamespace(seed=100, level="10", rho0=1.0, inner_steps=5, lr=1e-3, rate=1.1, out="OUT", rounds=45)
    text = trace.report(rows, "‖∇Φ‖ is nan at step 12", args, 5.0)
    # round 0 -> 11: ρ × 1.1^11 = 2.85, ‖∇²Φ·∇Φ‖ 3 -> 14 (× 4.67), the penalty 6 -> 2·2.853·14 = 79.9
    # (× 13.3)
    assert "ρ_k × 2.85, ‖∇²Φ·∇Φ‖ × 4.67, the penalty × 13.3" in text
    assert "the run ended at round 12: ‖∇Φ‖ is nan at step 12" in text
    assert "| 11 | 2.85 | 1 | 14 | 79.9 | 79.9 |" in text  # the last finite round is always shown


def test_robustness_compute_marks_a_point_only_where_all_three_targets_hold():
    compute = _script("bench/robustness_compute")
    worst = {"attack": "loss", "scope": "pooled", "condition": "relearn"}
    base = {"seed": 100, "level": "01", "before": 0.9, "relearning": 0.95, "quantisation": 0.9, "worst": worst}
    rows = [{**base, "label": "a", "passed": True, "mu_ratio": 0.95, "compute_share": 0.5},    # on both edges: meets
            {**base, "label": "b", "passed": True, "mu_ratio": 0.949, "compute_share": 0.2},   # utility short
            {**base, "label": "c", "passed": True, "mu_ratio": 1.0, "compute_share": 0.51},    # compute over
            {**base, "label": "d", "passed": False, "mu_ratio": 1.0, "compute_share": 0.1}]    # not forgotten
    assert [compute.meets_all(r) for r in rows] == [True, False, False, False]
    lines = compute.table(rows).splitlines()[2:]
    assert [line.rsplit("|", 2)[1].strip() for line in lines] == ["yes", "no", "no", "no"]
    assert "| 0.949 |" in lines[1] and "| 51% |" in lines[2] and "not forgotten (loss, pooled, relearn)" in lines[3]


def test_margin_scale_passes_a_case_iff_its_packaged_band_ratio_is_within_k():
    scale = _script("verification/margin_scale")
    cal = [{"target": {"scale": 0.1}}, {"target": {"scale": 0.3}}]  # the calibration recipe's spread: 0.2

    def row(spread, never, targets):
        cases = {f"retain_only/{h}": {"band_ratio": b} for h, b in zip(("steering", "reporting"), never)}
        cases.update({f"target/{h}": {"band_ratio": b} for h, b in zip(("steering", "reporting"), targets)})
        return ("r", 6, "01", {"target": {"scale": spread}}, {"cases": cases})

    # k = 0.22 / 0.2 = 1.1: 1.05 passes scaled only, 1.2 neither; the target at 1.92 fails both ways
    # k = 0.18 / 0.2 = 0.9: 0.95 passes packaged only; the target at 0.85 (planted) passes scaled
    text, s_cal = scale.table(cal, [row(0.22, (1.05, 1.2), (1.92, 1.92)), row(0.18, (0.95, 0.8), (0.85, 1.92))])
    assert s_cal == pytest.approx(0.2)
    lines = text.split("\n\n")[0].splitlines()
    assert "| 1.10 |" in lines[2] and "| 0/2 | 1/2 |" in lines[2] and lines[2].endswith("| 0/2 |")
    assert "| 0.90 |" in lines[3] and "| 2/2 | 1/2 |" in lines[3] and lines[3].endswith("| 1/2 |")
    assert lines[4].startswith("| all |") and "| 2/4 | 2/4 |" in lines[4] and lines[4].endswith("| 1/4 |")


def _report_shape(source: str) -> list[str]:
    """What a benchmark script does by hand that benchmarks/report.py does for every script: its own parser, its own
    --write option, or its own print-then-write tail."""
    import re

    found = []
    if "argparse.ArgumentParser(" in source:
        found.append("builds its own ArgumentParser (use report.options)")
    if re.search(r'add_argument\(\s*"--write"', source) and "action=\"store_true\"" not in source:
        found.append("declares --write itself (report.options has it)")
    if re.search(r"if args\.write:\n\s+.*write_text\(", source):
        found.append("writes its report by hand (use report.publish)")
    return found


def test_every_benchmark_script_states_its_options_and_writes_its_report_through_the_shared_helper():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    scripts = sorted(folder.glob("*/*.py"))
    assert len(scripts) >= 30  # the scripts live in folders named like the findings they write
    found = {str(p.relative_to(folder)): hits for p in scripts if (hits := _report_shape(p.read_text()))}
    assert not found, found
    planted = ('def main():\n    ap = argparse.ArgumentParser()\n    ap.add_argument("--write")\n    args = ap.parse_args()\n'
               '    if args.write:\n        Path(args.write).write_text(text)\n')
    assert len(_report_shape(planted)) == 3


def _planted_case(seed: int, reach: dict, auc: float = 0.5) -> dict:
    """A paraphrase case of two halves whose every attack reaches `reach[condition]` pooled and per author, with
    per-item scores for the power simulation."""
    rng = np.random.default_rng(seed)
    groups = [i // 10 for i in range(20)]
    attacks = ("loss", "zlib")
    conditions = {}
    for condition, r in reach.items():
        entry = {"pooled": {a: r for a in attacks}, "authors": {a: {"0": r, "1": r / 2} for a in attacks},
                 "auc": {a: auc for a in attacks}, "bands": {a: [r, r] for a in attacks},
                 "items": {side: {a: rng.normal(size=20).tolist() for a in attacks} for side in ("forget", "holdout")}}
        raw = {**entry, "bands": {a: [r + 0.05, r + 0.05] for a in attacks}}  # raw scoring: 0.05 wider
        conditions[condition] = {"relative": entry, "raw": raw}
    half = {"forget_groups": groups, "holdout_groups": groups, "conditions": conditions}
    return {"seed": seed, "halves": {"steering": half, "reporting": half}}


def test_paraphrase_margins_take_the_calibration_worlds_largest_reach_and_are_stored_beside_the_others(tmp_path):
    """The largest calibration reach under the paraphrased questions, times the smallest inflation at which every
    world left out passes (here 1.00: the largest reach is held by two worlds), in the tighter mode (relative, by
    0.05); a never-trained test world inside it passes and a target beyond it fails; the store merges it into the
    packaged calibration and leaves every other condition's margins as they were."""
    import json

    para = _script("verification/calibrate_paraphrase")
    cal = [_planted_case(i, {"none": 0.2, "paraphrase": r}) for i, r in enumerate((0.3, 0.31, 0.31, 0.25))]
    tst = {"retain_only": [_planted_case(10, {"none": 0.2, "paraphrase": 0.3})],
           "target": [_planted_case(11, {"none": 0.45, "paraphrase": 0.45}, auc=0.95)]}
    packaged = {"none": {a: [0.25, 0.5, "relative"] for a in ("loss", "zlib")}}
    r = para.level_report(cal, tst, packaged, sims=20)
    assert r["inflation"]["chosen"] == 1.0
    assert r["margins"]["best"]["paraphrase"] == {a: [0.31, 0.31, "relative"] for a in ("loss", "zlib")}
    assert r["margins"]["raw"]["paraphrase"]["loss"] == [0.36, 0.36]
    assert r["rates"] == {"retain_only": [2, 2], "target": [0, 2]}
    # the packaged margins of the model as it is (0.25 pooled) fail the never-trained model's paraphrase (0.3)
    assert r["with_none_margins"] == {"retain_only": [0, 2], "target": [0, 2]}
    path = tmp_path / "calibration.json"
    before = {"margins": {"01": {m: {"none": {"loss": [0.2, 0.4]}} for m in ("relative", "raw", "best")}},
              "rule": "kept"}
    path.write_text(json.dumps(before))
    para.store({"levels": {"01": r}, "rule": para.RULE, "command": "c"}, path)
    after = json.loads(path.read_text())
    assert after["margins"]["01"]["best"]["none"] == {"loss": [0.2, 0.4]} and after["rule"] == "kept"
    assert after["margins"]["01"]["best"]["paraphrase"]["zlib"] == [0.31, 0.31, "relative"]
    assert after["paraphrase"]["summary"]["01"]["rates"]["target"] == [0, 2]


def test_a_reports_generated_by_line_pastes_back_as_the_same_arguments(monkeypatch):
    """The command a script writes above its table keeps an argument holding spaces or brackets whole."""
    import shlex
    import sys
    from pathlib import Path

    report = _script("report")
    script = Path(report.__file__).parent / "ofmu" / "budget_curve.py"
    args = ["--methods", "OFMU (rho per epoch),GA", "--out", "runs/a b"]
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    assert shlex.split(report.command()) == ["python", "benchmarks/ofmu/budget_curve.py", *args]
