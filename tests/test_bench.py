"""`lit-unlearn bench`: the config's checks, the validation criterion by brute force, and an end-to-end run on a
very small generated world (outputs, the chosen points recomputed from grid.csv, resume without rerunning)."""

import csv
import json
import warnings

import pytest

from lit_unlearn.bench import load_bench_spec, run_bench
from lit_unlearn.bench.adapters import TofuBenchmark
from lit_unlearn.core.errors import UserError
from lit_unlearn.storage.packaged_files import packaged_config


@pytest.mark.parametrize("preset", ["bench_tofu_tiny", "bench_tofu_llama2_7b", "bench_muse_tiny",
                                    "bench_muse_news_llama2_7b"])
def test_every_packaged_bench_method_builds_at_every_grid_point(preset):
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.storage.specs import build

    net = CausalLM(config=tiny_llama_config(vocab_size=64, hidden_size=16, layers=8, heads=2, kv_heads=1,
                                            intermediate_size=32), seed=0)
    spec = load_bench_spec(packaged_config(preset))
    for method in spec.methods:
        for point in method.grid_points():
            own = {k: v for k, v in point.items() if not k.startswith("distill.")}  # the stage's own keys apart
            if method.distill is not None:
                from lit_unlearn.distill import DistillSpec

                DistillSpec(**{**method.distill, **{k[8:]: v for k, v in point.items() if k.startswith("distill.")}})
            with warnings.catch_warnings(record=True) as caught:  # e.g. a HAMU quota that can never be met
                warnings.simplefilter("always")
                build({"class_path": method.class_path, "init_args": {**method.init_args, **own}}, network=net)
            said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
            assert not said, f"{preset}: {method.name} at {point}: {said}"


def test_packaged_bench_configs_load_and_bad_ones_say_what_to_fix(tmp_path):
    spec = load_bench_spec(packaged_config("bench_tofu_tiny"))
    assert {m.name for m in spec.methods} >= {"GA", "GradDiff", "NPO", "SimNPO", "IdkDPO", "RMU", "HAMU", "OFMU"}
    assert spec.forget_levels == ["01", "05", "10"] and spec.data["kind"] == "world" and len(spec.seeds) >= 3
    assert spec.epochs and spec.audit and spec.validation_level == "all"  # a budget per level, chosen per level
    ofmu = next(m for m in spec.methods if m.name == "OFMU")
    assert ofmu.epochs and ofmu.epochs < spec.epochs  # its rounds cost ~10 gradients each
    assert "outer_clip" not in ofmu.init_args and "forget_ceiling" not in ofmu.init_args  # the paper's form
    assert any(m.init_args.get("forget_ceiling") == "holdout" for m in spec.methods)  # the variant, its own row
    big = load_bench_spec(packaged_config("bench_tofu_llama2_7b"))
    assert big.data["kind"] == "tofu" and set(big.data["references"]) == {"01", "05", "10"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: {GA: {init_args: {lr: 1}}}\n")
    with pytest.raises(UserError, match="class_path"):
        load_bench_spec(bad)
    bad.write_text("methods: {GA: {class_path: lit_unlearn.modules.GAModule}}\nforget_level: ['10']\n")
    with pytest.raises(UserError, match="unknown bench keys"):
        load_bench_spec(bad)
    bad.write_text("methods: {GA: {class_path: lit_unlearn.modules.GAModule, step: 3}}\n")
    with pytest.raises(UserError, match=r"GA: unknown keys \['step'\].*steps"):
        load_bench_spec(bad)
    bad.write_text("methods: {GA: {class_path: lit_unlearn.modules.GAModule}}\nforget_levels: ['20']\n")
    with pytest.raises(UserError, match="forget_levels"):
        load_bench_spec(bad)
    # the paraphrase part refuses before any run: without the full verdict, or without its calibrated margins
    bad.write_text("methods: {GA: {class_path: lit_unlearn.modules.GAModule}}\nparaphrase: true\n")
    with pytest.raises(UserError, match="set audit: true"):
        run_bench(load_bench_spec(bad), tmp_path / "never", log=lambda *a: None)
    from lit_unlearn.verification.holdout_calibration import calibration

    if "paraphrase" not in calibration()["margins"]["01"]["best"]:
        bad.write_text("methods: {GA: {class_path: lit_unlearn.modules.GAModule}}\nparaphrase: true\naudit: true\n")
        with pytest.raises(UserError, match="calibrate_paraphrase.py"):
            run_bench(load_bench_spec(bad), tmp_path / "never", log=lambda *a: None)
    assert not (tmp_path / "never").exists()


def test_select_point_is_the_smallest_steering_band_ratio_above_the_utility_floor():
    band = "band ratio (steering)"
    rows = [{"point": {"lr": 1}, band: 0.8, "MU": 0.50}, {"point": {"lr": 2}, band: 1.2, "MU": 0.80},
            {"point": {"lr": 3}, band: 1.4, "MU": 0.95}, {"point": {"lr": 4}, band: None, "MU": 0.99}]
    for floor in (0.0, 0.5, 0.7, 0.9, 0.95, 1.5):
        ok = [r for r in rows if r["MU"] >= floor * 1.0 and r[band] is not None]
        expected = min(ok, key=lambda r: r[band])["point"] if ok else max(rows, key=lambda r: r["MU"])["point"]
        assert TofuBenchmark().select(rows, {"MU": 1.0}, floor)[0] == expected


@pytest.mark.slow
def test_a_runs_log_line_shows_columns_it_has_values_for_with_utility_and_forget_quality():
    """With the audit on, the table's first columns are the verdict's, which a validation run never has: its log
    line once read "forgotten n/a decision n/a" for every grid point."""
    from lit_unlearn.bench.adapters import MuseBenchmark
    from lit_unlearn.bench.runner import _shown

    validation = {c: None for c in TofuBenchmark.columns} | {"verified": 0.0, "band ratio": 1.7, "MU": 0.62,
                                                               "FQ (gold)": 3e-4}
    assert _shown(TofuBenchmark(), validation) == ["verified", "band ratio", "MU", "FQ (gold)"]
    audited = validation | {"forgotten": 0.0, "decision": "not forgotten"}
    assert _shown(TofuBenchmark(), audited) == ["forgotten", "decision", "MU", "FQ (gold)"]
    assert _shown(MuseBenchmark(), {"VerbMem_f": 0.1, "KnowMem_f": 0.2, "KnowMem_r": 0.3}) == \
        ["VerbMem_f", "KnowMem_f", "KnowMem_r"]


def test_a_small_bench_end_to_end_and_resume(tmp_path):
    cfg = tmp_path / "bench.yaml"
    cfg.write_text(f"""
out_dir: {tmp_path / 'out'}
data: {{kind: generated, seed: 0, validation_seed: 1, n_authors: 10, epochs: 4}}
forget_levels: ["10"]
seeds: [0, 1]
epochs: 2
batch_size: 8
max_new_tokens: 4
methods:
  GA: {{class_path: lit_unlearn.modules.GAModule, init_args: {{optimizer: adamw}}, grid: {{lr: [1.0e-4, 1.0e-2]}}}}
  IdkDPO: {{class_path: lit_unlearn.modules.IdkDPOModule, needs_refusals: true, steps: 1, grid: {{lr: [1.0e-3]}}}}
  HoldoutMatch:
    class_path: lit_unlearn.modules.HoldoutMatchModule
    init_args: {{optimizer: adamw}}
    steps: 1
    callbacks: [{{class_path: lit_unlearn.callbacks.HoldoutVerification,
                 init_args: {{n_boot: 100, items_per_author: 8, final_verdict: none}}}}]
    grid: {{lr: [1.0e-3]}}
""")
    spec = load_bench_spec(cfg)
    results = run_bench(spec, log=lambda *a: None)
    out = results.parent
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    # validation: target + 2 GA points + 1 IdkDPO point + 1 HoldoutMatch point; test: (target + 3 methods) x 2 seeds
    assert len(runs) == 5 + 8
    # a method's callbacks run with it (HoldoutMatch fails without the holdout measurement), one per run
    assert len(list((out / "runs").glob("HoldoutMatch-*/version_0/holdout_verification.json"))) == 3
    # the budget: 2 epochs over forget10's 8 items at batch 8 is 2 steps; IdkDPO's own budget wins
    assert {r["steps"] for r in runs if r["method"] == "GA"} == {2} and {r["steps"] for r in runs
                                                                       if r["method"] == "IdkDPO"} == {1}
    assert "(2 epochs over each forget set, batch 8" in results.read_text().splitlines()[0]  # the budget as run
    assert all(r["band ratio"] is not None and r["verified"] in (0.0, 1.0) for r in runs)
    from lit_unlearn.verification.holdout_calibration import calibrated_margins

    for r in runs:  # the worst attack's interval is the one the band ratio reads: its reach over that attack's margin
        reach = max(0.5 - r["worst AUC low"], r["worst AUC high"] - 0.5)
        assert r["worst AUC low"] <= r["worst AUC"] <= r["worst AUC high"]
        scope, attack = r["worst attack"].split(": ")
        pooled, author = calibrated_margins(r["level"], "raw", "none")  # the generated world has no base model
        assert r["band ratio"] == pytest.approx(reach / (pooled if scope == "pooled" else author)[attack]), r
    grid = list(csv.DictReader((out / "grid.csv").open()))
    for method in ("GA", "IdkDPO", "HoldoutMatch"):
        mine = [r for r in runs if r["phase"] == "validation" and r["method"] == method]
        target_mu = next(r for r in runs if r["phase"] == "validation" and r["method"] == "Target")["MU"]
        point = TofuBenchmark().select(mine, {"MU": target_mu}, spec.utility_floor)[0]
        assert [json.loads(g["hyper_parameters"]) for g in grid if g["method"] == method and g["chosen"] == "True"] \
            == [point]
        assert all(r["point"] == point for r in runs if r["phase"] == "test" and r["method"] == method)
    table = list(csv.DictReader((out / "results.csv").open()))
    assert [r["method"] for r in table] == ["Target", "GA", "IdkDPO", "HoldoutMatch"] and \
        all(r["seeds"] == "2" for r in table)
    ga = [r for r in runs if r["phase"] == "test" and r["method"] == "GA"]
    assert float(table[1]["MU"]) == pytest.approx(sum(r["MU"] for r in ga) / 2)
    from scipy import stats  # the interval over seeds, against scipy's

    half = stats.t.ppf(0.975, 1) * stats.sem([r["seconds"] for r in ga])  # 0 when both seeds took equal time
    assert float(table[1]["seconds ci95"]) == pytest.approx(half)
    from lit_unlearn.bench.results import t_half_width  # and on values that differ, against scipy's interval
    low, high = stats.t.interval(0.95, 2, loc=2.0, scale=stats.sem([1.0, 2.0, 3.0]))
    assert t_half_width(1.0, 3) == pytest.approx((high - low) / 2) and t_half_width(1.0, 1) is None
    assert float(table[1]["seconds"]) == pytest.approx(sum(r["seconds"] for r in ga) / 2)  # wall time per method
    assert (out / "figure.png").stat().st_size > 0 and "## forget10" in results.read_text()
    assert _table_head(results) == ["method", "hyper-parameters", "verified", "band ratio", "worst attack", "MU",
                                    "FQ (gold)", "seconds"]  # the reader's columns; results.csv has every one
    assert _terms(results) == _table_head(results)[2:]  # each defined under the table
    before = (out / "runs.jsonl").read_text()
    run_bench(spec, log=lambda *a: None)  # everything is read back: nothing reruns
    assert (out / "runs.jsonl").read_text() == before
    spec.seeds, spec.grid_seed = [1], 0  # a job of one test seed (`--seeds 1`) shares the grid run at seed 0
    run_bench(spec, log=lambda *a: None)
    assert (out / "runs.jsonl").read_text() == before
    spec.seeds, spec.grid_seed = [0, 1], None

    # the audit switched on afterwards (--audit): each finished test run is judged from its saved final model, none
    # is trained again, and the reads of the module that made it are those the verdict sets apart
    folders = sorted(p.relative_to(out) for p in (out / "runs").glob("*/version_*"))
    spec.audit, spec.seeds = True, [0]  # one test seed is enough here
    run_bench(spec, only=["HoldoutMatch"], log=lambda *a: None)
    assert sorted(p.relative_to(out) for p in (out / "runs").glob("*/version_*")) == folders
    lines = (out / "runs.jsonl").read_text()
    assert lines.startswith(before)
    added = [json.loads(x) for x in lines[len(before):].splitlines()]
    assert sorted((r["method"], r["seed"]) for r in added) == [("HoldoutMatch", 0), ("Target", 0)]
    assert all(r["phase"] == "test" and r["forgotten"] in (0.0, 1.0) and r["relearn band ratio"] is not None
               for r in added)
    matched = [r for r in added if r["method"] == "HoldoutMatch"]  # it reads the surprisal: set apart
    assert all(r["unread band ratio"] is not None and r["unread band ratio"] <= r["full band ratio"]
               for r in matched)
    assert len(list((out / "runs").glob("audit-*/verdict.json"))) == 2
    run_bench(spec, only=["HoldoutMatch"], log=lambda *a: None)  # audited rows are read back as they are
    assert (out / "runs.jsonl").read_text() == lines
    # the full verdict's columns take the first verification's place in the table
    assert _table_head(results)[2:5] == ["decision", "full band ratio", "fails on"]  # (detectable AUC: none here)
    assert "verified" not in _table_head(results) and _terms(results) == _table_head(results)[2:]


def _table_head(results) -> list[str]:
    head = next(line for line in results.read_text().splitlines() if line.startswith("| method |"))
    return [c.strip() for c in head.strip("|").split("|")]


def _terms(results) -> list[str]:
    text = results.read_text().split("Terms:", 1)[1]
    return [line.split("**")[1] for line in text.splitlines() if line.startswith("- **")]


def test_seeds_on_the_command_line_keep_the_configs_grid_seed(tmp_path, monkeypatch):
    """`--seeds 2` runs test seed 2 against the grid the config's first seed ran, so jobs of one seed each can share
    an output folder; the grid's seed would otherwise follow the first seed given and run the whole grid again."""
    import lit_unlearn.bench as bench_package
    from lit_unlearn.commands.bench import bench

    seen = []

    def fake_run_bench(spec, out, only, log):
        seen.append((spec.seeds, spec.grid_seed))
        (tmp_path / "results.md").write_text("table")
        return tmp_path / "results.md"

    monkeypatch.setattr(bench_package, "run_bench", fake_run_bench)
    bench(preset="bench_tofu_ofmu_paper", seeds="2")
    bench(preset="bench_tofu_ofmu_paper")
    assert seen == [([2], 0), ([0, 1, 2], None)]


@pytest.mark.slow
def test_a_small_muse_bench_end_to_end(tmp_path):
    cfg = tmp_path / "bench.yaml"
    cfg.write_text(f"""
benchmark: muse
out_dir: {tmp_path / 'out'}
data: {{kind: generated, seed: 0, validation_seed: 1, n_forget: 2, n_retain: 3, n_holdout: 2, epochs: 2,
        max_length: 64}}
seeds: [0]
steps: 2
batch_size: 4
max_new_tokens: 4
methods:
  NPO: {{class_path: lit_unlearn.modules.NPOModule, init_args: {{optimizer: adamw}}, grid: {{lr: [1.0e-4, 1.0e-2]}}}}
""")
    spec = load_bench_spec(cfg)
    results = run_bench(spec, log=lambda *a: None)
    runs = [json.loads(x) for x in (results.parent / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 3 + 2  # validation: target + 2 points; test: target + NPO
    assert all(r[c] is not None for r in runs for c in ("VerbMem_f", "KnowMem_f", "KnowMem_r", "ES", "EM"))
    val = [r for r in runs if r["phase"] == "validation" and r["method"] == "NPO"]
    target = next(r for r in runs if r["phase"] == "validation" and r["method"] == "Target")
    ok = [r for r in val if r["KnowMem_r"] >= 0.9 * target["KnowMem_r"] and r["PrivLeak"] is not None]
    expected = (min(ok, key=lambda r: abs(r["PrivLeak"])) if ok else max(val, key=lambda r: r["KnowMem_r"]))["point"]
    assert next(r for r in runs if r["phase"] == "test" and r["method"] == "NPO")["point"] == expected
    text = results.read_text()
    assert "MUSE forget set" in text and "| NPO |" in text and (results.parent / "figure.png").is_file()
    assert set(_terms(results)) == set(_table_head(results)[2:]) >= {"VerbMem_f", "KnowMem_r", "seconds"}


def test_a_grid_only_bench_writes_its_grid_without_a_table_to_draw(tmp_path):
    """forget_levels: [] beside a validation_level runs the validation grid alone (its rows serve later benches on
    the same OUT): the outputs are written without test rows; drawing the empty summary figure once crashed."""
    from lit_unlearn.bench.results import write_outputs
    from lit_unlearn.bench.spec import BenchSpec, MethodSpec

    spec = BenchSpec(methods=[MethodSpec("OFMU", "lit_unlearn.modules.OFMUModule")], forget_levels=[],
                     validation_level="01")
    rows = [{"world": "world_validation", "method": m, "point": p, "level": "01", "seed": 0, "phase": "validation",
             "MU": mu, "band ratio": 1.5, "FQ (gold)": 1e-3} for m, p, mu in
            (("Target", {}, 0.66), ("OFMU", {"rho": 0.1}, 0.65))]
    results = write_outputs(spec, TofuBenchmark(), tmp_path, rows, {("OFMU", "01"): ({"rho": 0.1}, "why")},
                            "world_validation", ["OFMU"])
    assert results.is_file() and not (tmp_path / "figure.png").exists()
    grid = list(csv.DictReader((tmp_path / "grid.csv").open()))
    assert [(g["method"], g["chosen"]) for g in grid] == [("Target", "False"), ("OFMU", "True")]


def test_the_table_reads_each_methods_test_runs_at_its_chosen_point_only(tmp_path):
    """Two configs on one OUT (the paper's grid and one extended downward) leave GA's test runs at two points; each
    table averages the runs at the point its own config chose, never both."""
    from lit_unlearn.bench.results import write_outputs
    from lit_unlearn.bench.spec import BenchSpec, MethodSpec

    spec = BenchSpec(methods=[MethodSpec("GA", "lit_unlearn.modules.GAModule")], forget_levels=["10"], seeds=[0, 1])
    rows = [{"world": f"world_seed{s}", "method": m, "point": p, "level": "10", "seed": s, "phase": "test", "MU": mu,
             "band ratio": 2.0, "FQ (gold)": 1e-3} for s in (0, 1) for m, p, mu in
            (("Target", {}, 0.66), ("GA", {"lr": 1e-4}, 0.0), ("GA", {"lr": 1e-5}, 0.62))]
    for lr, mu in ((1e-4, 0.0), (1e-5, 0.62)):
        write_outputs(spec, TofuBenchmark(), tmp_path, rows, {("GA", "10"): ({"lr": lr}, "why")}, "v", ["GA"])
        table = {r["method"]: r for r in csv.DictReader((tmp_path / "results.csv").open())}
        assert table["GA"]["seeds"] == "2" and float(table["GA"]["MU"]) == mu
        assert json.loads(table["GA"]["hyper_parameters"]) == {"lr": lr} and table["Target"]["seeds"] == "2"


def test_a_point_that_diverged_on_every_test_seed_reads_diverged_in_the_table_not_n_a(tmp_path):
    """OFMU's paper form at 30 epochs diverged on every test seed: its row said "n/a" in every column, with no word
    of why. A method diverged on all seeds says "diverged (N/N)" (a term defined under the table); one diverged on
    some seeds keeps the other seeds' means, and a line under the table says how many diverged."""
    from lit_unlearn.bench.results import write_outputs
    from lit_unlearn.bench.spec import BenchSpec, MethodSpec

    spec = BenchSpec(methods=[MethodSpec(m, "lit_unlearn.modules.GAModule") for m in ("OFMU", "GA")],
                     forget_levels=["05"], seeds=[0, 1, 2])
    nan = {"MU": None, "band ratio": None, "FQ (gold)": None, "diverged": "the forget loss is nan at step 9"}
    ok = {"MU": 0.6, "band ratio": 2.0, "FQ (gold)": 1e-3}
    rows = [{"world": f"world_seed{s}", "method": m, "point": {"rho": 1e-3}, "level": "05", "seed": s,
             "phase": "test", **values} for s in (0, 1, 2) for m, values in
            (("Target", ok), ("OFMU", nan), ("GA", nan if s == 0 else ok))]
    chosen = {("OFMU", "05"): ({"rho": 1e-3}, "why"), ("GA", "05"): ({"rho": 1e-3}, "why")}
    text = write_outputs(spec, TofuBenchmark(), tmp_path, rows, chosen, "v", ["OFMU", "GA"]).read_text()
    lines = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert lines["OFMU"].count("diverged (3/3)") == 3 and "n/a" not in lines["OFMU"]
    assert "diverged" not in lines["GA"] and "0.6 |" in lines["GA"] and "diverged" not in lines["Target"]
    assert "- **diverged (N/N)**:" in text and "- GA (forget05) diverged on 1/3 test seeds" in text


def test_the_figures_draw_every_method_however_many_the_bench_has(tmp_path):
    """The packaged TOFU bench has 11 rows (10 methods and the target): more than one 10-colour palette."""
    from lit_unlearn.bench.results import _figure, _pareto

    methods = ["Target"] + [f"method {i}" for i in range(14)]
    rows = [{"method": m, "level": "01", "phase": phase, "point": {"lr": 1}, "MU": 0.5 + i / 100, "band ratio": 1.2,
             "MU std": 0.01, "band ratio std": 0.02} for i, m in enumerate(methods) for phase in ("validation", "test")]
    chosen = {(m, "01"): ({"lr": 1}, "why") for m in methods[1:]}
    pareto = _pareto(rows, "01", chosen, "w", tmp_path / "pareto.png", "MU", "band ratio", False, str)
    figure = _figure([r for r in rows if r["phase"] == "test"], tmp_path / "figure.png", "MU", "band ratio", False,
                     str)
    assert (tmp_path / "pareto.png").stat().st_size > 0 and (tmp_path / "figure.png").stat().st_size > 0
    # the Pareto plot: one edge colour per method (the grid and the test seeds of a method share it)
    edge = {}
    for handle, label in zip(*pareto.axes[0].get_legend_handles_labels()):
        edge.setdefault(label.rsplit(" (", 1)[0], set()).add(tuple(handle.get_edgecolor()[0]))
    assert set(edge) == set(methods) and all(len(c) == 1 for c in edge.values())
    assert len({next(iter(c)) for c in edge.values()}) == len(methods)  # 15 methods, 15 colours
    # the summary figure: one (colour, marker) pair per method
    seen = {}
    for handle, label in zip(*figure.axes[0].get_legend_handles_labels()):
        line = handle.lines[0] if hasattr(handle, "lines") else handle
        seen.setdefault(label, set()).add((line.get_color(), line.get_marker()))
    assert set(seen) == set(methods) and all(len(v) == 1 for v in seen.values())
    assert len({next(iter(v)) for v in seen.values()}) == len(methods)


def test_a_method_whose_name_holds_commas_can_be_chosen_on_the_command_line():
    """`--methods` splits at commas, except inside a configured name ("OFMU (separate clip, holdout ceiling)")."""
    from lit_unlearn.bench.spec import split_method_names

    names = ["GA", "OFMU", "OFMU (separate clip, holdout ceiling)", "NPO"]
    assert split_method_names("GA,OFMU (separate clip, holdout ceiling), NPO", names) == \
        ["GA", "OFMU (separate clip, holdout ceiling)", "NPO"]
    assert split_method_names("OFMU,GA", names) == ["OFMU", "GA"]  # a prefix of a longer name is itself
    assert split_method_names("Foo,OFMU (separate clip", names) == ["Foo", "OFMU (separate clip"]  # left to the error


def test_the_papers_selection_reads_forget_quality_and_the_report_says_so(tmp_path):
    """selection: forget_quality (the OFMU paper's reproduction) picks the largest FQ among points keeping utility;
    the packaged paper config parses; an unknown rule is a one-line error."""
    from lit_unlearn.bench.adapters import TofuBenchmark
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.storage.packaged_files import packaged_config

    spec = load_bench_spec(packaged_config("bench_tofu_ofmu_paper", ("bench",), "bench"))
    assert spec.selection == "forget_quality" and {m.name for m in spec.methods} == {
        "GA", "GradDiff", "NPO", "RMU", "OFMU", "OFMU (rho per epoch)", "OFMU (clipped)"}
    per_epoch = next(m for m in spec.methods if m.name == "OFMU (rho per epoch)")
    assert [c["init_args"].get("per") for c in per_epoch.callbacks] == ["forget_epoch"]
    rows = [{"point": {"lr": 1}, "MU": 0.60, "FQ (gold)": 0.40, "band ratio (steering)": 1.5},
            {"point": {"lr": 2}, "MU": 0.64, "FQ (gold)": 0.10, "band ratio (steering)": 0.9},
            {"point": {"lr": 3}, "MU": 0.20, "FQ (gold)": 0.90, "band ratio (steering)": 1.0}]
    bench = TofuBenchmark()
    assert bench.select(rows, {"MU": 0.66}, 0.9, "forget_quality")[0] == {"lr": 1}
    assert bench.select(rows, {"MU": 0.66}, 0.9)[0] == {"lr": 2}  # the default rule reads the verdict
    assert "forget quality" in bench.criterion_for("forget_quality")
    bad = tmp_path / "bad.yaml"
    bad.write_text("selection: fq\nmethods: {GA: {class_path: lit_unlearn.modules.GAModule}}\n")
    with pytest.raises(UserError, match="selection 'fq': choose one of"):
        load_bench_spec(bad)


def test_the_low_lr_config_is_the_papers_bench_with_three_grids_extended_downward():
    """bench_tofu_ofmu_paper_low_lr differs from bench_tofu_ofmu_paper only in GA's, GradDiff's and RMU's grids, each
    the main grid plus smaller rates: same names and init_args, so in one OUT the main grid's runs are its runs."""
    from dataclasses import asdict

    from lit_unlearn.storage.packaged_files import packaged_config

    main, low = (load_bench_spec(packaged_config(name, ("bench",), "bench"))
                 for name in ("bench_tofu_ofmu_paper", "bench_tofu_ofmu_paper_low_lr"))
    assert {k: v for k, v in asdict(low).items() if k != "methods"} == \
        {k: v for k, v in asdict(main).items() if k != "methods"}
    by_name = {m.name: m for m in main.methods}
    assert [m.name for m in low.methods] == ["GA", "GradDiff", "RMU"]
    for m in low.methods:
        theirs = by_name[m.name]
        assert (m.class_path, m.init_args, m.callbacks) == (theirs.class_path, theirs.init_args, theirs.callbacks)
        assert set(theirs.grid["lr"]) < set(m.grid["lr"]) and min(m.grid["lr"]) < min(theirs.grid["lr"])


def test_a_grid_point_that_diverges_is_a_row_not_a_crash(tmp_path):
    """GA by SGD at an absurd rate drives the weights to inf within its budget: the bench records the point as
    diverged (no numbers, the error's first line), never chooses it, goes on to the test worlds, and does not run it
    again when resumed; nor does it run again what another bench on its OUT finished meanwhile."""
    cfg = tmp_path / "bench.yaml"
    cfg.write_text(f"""
out_dir: {tmp_path / 'out'}
data: {{kind: generated, seed: 0, validation_seed: 1, n_authors: 10, epochs: 4}}
forget_levels: ["10"]
seeds: [0]
epochs: 3
batch_size: 4
max_new_tokens: 4
methods:
  GA: {{class_path: lit_unlearn.modules.GAModule, init_args: {{optimizer: sgd}}, grid: {{lr: [1.0e-4, 1.0e+38]}}}}
""")
    spec = load_bench_spec(cfg)
    seen = []
    results = run_bench(spec, log=seen.append)
    out = results.parent
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    bad = [r for r in runs if r.get("diverged")]
    assert [r["point"] for r in bad] == [{"lr": 1e38}]
    assert "the forget loss is nan" in bad[0]["diverged"] or "the forget loss is inf" in bad[0]["diverged"]
    assert all(bad[0][c] is None for c in ("MU", "FQ (gold)"))
    test = [r for r in runs if r["phase"] == "test" and r["method"] == "GA"]
    assert [r["point"] for r in test] == [{"lr": 1e-4}] and not test[0].get("diverged")
    assert any("diverged: " in line for line in seen)
    grid = list(csv.DictReader((out / "grid.csv").open()))
    assert [g["diverged"] for g in grid if g["method"] == "GA"] == ["", bad[0]["diverged"]]
    run_bench(spec, log=lambda *a: None)  # resumed: every row read back, none run again
    assert len((out / "runs.jsonl").read_text().splitlines()) == len(runs)

    # Two benches may share one OUT (other methods, other seeds): a run missing from runs.jsonl when this bench
    # started, there by the time it reaches it, was finished by the other bench, and is read back, not run again.
    done_file = out / "runs.jsonl"
    lines = done_file.read_text().splitlines()
    tests = [x for x in lines if json.loads(x)["phase"] == "test"]
    assert len(tests) == 2  # the target's and GA's
    done_file.write_text("".join(x + "\n" for x in lines if x not in tests))

    def other_bench_finishes(line):  # the other bench appends its test rows while this one is still on the grid,
        if line.startswith("== every method"):  # and is caught writing one more line
            with done_file.open("a") as f:
                f.write("".join(x + "\n" for x in tests) + '{"world": "world_se')
        seen.append(line)

    seen = []
    run_bench(spec, log=other_bench_finishes)
    assert done_file.read_text().splitlines()[:-1] == [x for x in lines if x not in tests] + tests  # nothing ran again
    assert not [x for x in seen if x.lstrip().startswith("test ")], seen


def test_a_signal_between_runs_stops_the_bench_with_128_plus_it_and_says_how_to_go_on(tmp_path, monkeypatch,
                                                                                       capsys):
    """Outside a run's training (building worlds, evaluating a finished run) the signal's default action used to end
    the bench without a word; now it says how to go on and exits as a pre-empted run does, handlers put back."""
    import os
    import signal

    import lit_unlearn.bench.runner as runner

    class SignalledWhileBuildingWorlds:  # the plumbing only: the signal lands where a world would be built
        def worlds(self, spec, out, log):
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("the signal did not stop the bench")

    monkeypatch.setattr(runner, "get_benchmark", lambda name: SignalledWhileBuildingWorlds())
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        run_bench(load_bench_spec(packaged_config("bench_tofu_tiny")), tmp_path / "b")
    assert stopped.value.code == 128 + signal.SIGTERM
    said = capsys.readouterr().out
    assert "bench interrupted by SIGTERM between runs" in said and str(tmp_path / "b" / "runs.jsonl") in said
    assert "run the same command again" in said
    assert signal.getsignal(signal.SIGTERM) is before
