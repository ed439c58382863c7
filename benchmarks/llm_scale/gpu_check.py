"""The GPU check: Llama-2-7B-scale measurements on one GPU, offline, in a few minutes (benchmarks/llm_scale/gpu_check.sh).

    python benchmarks/llm_scale/gpu_check.py [--out DIR]          one 80-140 GB GPU, no network (random-init weights)
    python benchmarks/llm_scale/gpu_check.py --dry-run            the same code on CPU with a tiny Llama (CI runs this)

Measured, side by side in one run:
1. HAMU vs GradDiff on the Llama-2-7B architecture (random init, bf16, sequences of 512 tokens built from the
   generated TOFU-format QA set): step time and torch.cuda.max_memory_allocated, on a plain single GPU and under
   DeepSpeed ZeRO-3 with one process;
2. one OFMU round (T = 5, finite-difference HVPs) on a 1.1B Llama (7B does not fit one GPU: OFMU keeps ~12 fp32
   copies of the parameters);
3. the TOFU evaluator's throughput (items/s) for scoring and for generation, on the 7B architecture.

Prints a table and the ratios, writes gpu_check.json beside the computed memory table (memory_computed.json, the
same accounting as benchmarks/llm_scale/llama2_7b_memory.py for one GPU), and exits non-zero if HAMU's peak memory exceeds
GradDiff's by more than one fp32 gradient copy or if any step is non-finite.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py

GB = 1024**3
LLAMA2_7B = {"vocab_size": 32000, "hidden_size": 4096, "layers": 32, "heads": 32, "kv_heads": 32,
             "intermediate_size": 11008, "max_positions": 4096}
LLAMA_1B = {"vocab_size": 32000, "hidden_size": 2048, "layers": 22, "heads": 32, "kv_heads": 4,
            "intermediate_size": 5632, "max_positions": 2048}
TINY = {"vocab_size": 512, "hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 128,
        "max_positions": 256}


def settings(dry_run: bool) -> dict:
    if dry_run:
        return {"model": TINY, "ofmu_model": TINY, "seq": 64, "batch": 2, "steps": 3, "warmup": 1,
                "eval_items": 8, "max_new_tokens": 8, "dtype": "float32", "device": "cpu"}
    return {"model": LLAMA2_7B, "ofmu_model": LLAMA_1B, "seq": 512, "batch": 4, "steps": 5, "warmup": 2,
            "eval_items": 64, "max_new_tokens": 64, "dtype": "bfloat16", "device": "cuda"}


# ----- data: TOFU-format QA from the generator, packed into sequences of the configs' length -------------------------
class PackedQA(torch.utils.data.Dataset):
    """Question/answer encodings concatenated up to `seq` tokens (loss on the answer tokens, as in training)."""

    def __init__(self, rows, formatter, seq: int, n: int) -> None:
        from lit_unlearn.algorithms.losses import IGNORE_INDEX

        enc = [formatter.encode(r["question"], r["answer"]) for r in rows]
        self.items, i = [], 0
        for _ in range(n):
            ids, labels = [], []
            while len(ids) < seq:
                e = enc[i % len(enc)]
                ids += e["input_ids"].tolist()
                labels += e["labels"].tolist()
                i += 1
            self.items.append({"input_ids": torch.tensor(ids[:seq]), "labels": torch.tensor(labels[:seq])})
        assert any(x != IGNORE_INDEX for x in self.items[0]["labels"].tolist())

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def datamodule(folder: Path, tokenizer, seq: int, batch: int):
    from lit_unlearn.data import PairedDataModule, TofuSource
    from lit_unlearn.data.tofu import QAFormatter, pad_collate

    class PackedTofu(PairedDataModule):
        def build(self):
            src = TofuSource(str(folder))
            fmt = QAFormatter(tokenizer, "plain", max_length=seq)
            forget, retain = src.forget_retain()
            return PackedQA(retain, fmt, seq, 8 * batch), PackedQA(forget, fmt, seq, 8 * batch), {}

    dm = PackedTofu(retain_batch_size=batch, forget_batch_size=batch)
    dm.collate_fn = pad_collate(tokenizer.pad_token_id)
    return dm


# ----- measurements -------------------------------------------------------------------------------------------------
class StepProbe:
    """Step times, finiteness and peak memory of a short fit; `profile`: a torch.profiler table of the last step."""

    def __init__(self, warmup: int, profile: bool = False, last_step: int | None = None) -> None:
        from lightning.pytorch.callbacks import Callback

        probe = self

        class _CB(Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                    if probe.setup_peak is None:  # the setup's peak (model, strategy, optimizer) apart from the steps'
                        probe.setup_peak = torch.cuda.max_memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                if profile and trainer.global_step + 1 == last_step:
                    probe._profiler = profiler()
                    probe._profiler.__enter__()
                probe._t = time.perf_counter()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                if probe._profiler is not None:  # not timed: the profiler slows the step it watches
                    probe._profiler.__exit__(None, None, None)
                    probe.profile = profile_table(probe._profiler)
                    probe._profiler = None
                elif trainer.global_step > warmup:
                    probe.times.append(time.perf_counter() - probe._t)
                finite = all(torch.isfinite(p).all().item() for p in pl_module.parameters() if p.numel())
                probe.finite = probe.finite and finite

        self.callback, self.times, self.finite, self.setup_peak = _CB(), [], True, None
        self._profiler, self.profile = None, None


def profiler():
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else []))


def profile_table(prof, rows: int = 25) -> dict:
    """The ops of one profiled step by self time on the device (the CPU in a dry run), as text and as records."""
    device = torch.cuda.is_available()
    key = "self_device_time_total" if device else "self_cpu_time_total"
    events = prof.key_averages()
    top = sorted(events, key=lambda e: getattr(e, key, 0) or 0, reverse=True)[:rows]
    records = [{"op": e.key, "calls": e.count, "self_ms": (getattr(e, key, 0) or 0) / 1e3} for e in top]
    total = sum((getattr(e, key, 0) or 0) for e in events) / 1e3
    return {"by": key, "total_self_ms": total, "top": records}


def run_method(name: str, make_module, dm, s: dict, strategy=None, profile: bool = False) -> dict:
    import lightning.pytorch as pl

    max_steps = s["warmup"] + s["steps"] + (1 if profile else 0)
    probe = StepProbe(s["warmup"], profile, max_steps)
    free_device_memory()
    start = torch.cuda.memory_allocated() if torch.cuda.is_available() else float("nan")
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    module = make_module()
    module.run_report.enabled = False
    trainer = pl.Trainer(max_steps=max_steps, accelerator="gpu" if s["device"] == "cuda" else "cpu",
                         devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
                         callbacks=[probe.callback], log_every_n_steps=50,
                         **({"strategy": strategy} if strategy is not None else {}))
    trainer.fit(module, dm)
    steps_peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else float("nan")
    setup_peak = probe.setup_peak if probe.setup_peak is not None else float("nan")
    peak = max(steps_peak, setup_peak) if torch.cuda.is_available() else float("nan")
    med = sorted(probe.times)[len(probe.times) // 2] if probe.times else float("nan")
    # start_bytes: what earlier runs left allocated (a leak shows here, and inflates this run's peak)
    out = {"method": name, "median_step_s": med, "peak_bytes": peak, "setup_peak_bytes": setup_peak,
           "steps_peak_bytes": steps_peak, "start_bytes": start, "finite": probe.finite,
           "steps_timed": len(probe.times)}
    if probe.profile is not None:
        out["profile"] = probe.profile
    del trainer, module
    free_device_memory()
    return out


def free_device_memory() -> None:
    """Drop what finished (or failed) runs still reference: Lightning and DeepSpeed keep reference cycles."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def deepspeed_strategy(dry_run: bool):
    config = {"zero_optimization": {"stage": 3}, "gradient_clipping": 0.0, "zero_allow_untested_optimizer": True,
              "train_micro_batch_size_per_gpu": 1}
    if dry_run:
        from lit_unlearn.distributed.cpu_deepspeed import CPUDeepSpeedStrategy

        return CPUDeepSpeedStrategy(config=config)
    from lit_unlearn.distributed import DeepSpeedStrategy

    return DeepSpeedStrategy(config={**config, "bf16": {"enabled": True}})


def evaluator_throughput(network, tokenizer, folder: Path, s: dict) -> dict:
    from lit_unlearn.data import TofuSource
    from lit_unlearn.metrics import TofuEvaluator

    splits = TofuSource(str(folder)).eval_splits()
    items = splits["forget"][: s["eval_items"]]
    ev = TofuEvaluator(tokenizer, {"forget": items}, max_new_tokens=s["max_new_tokens"], batch_size=16)
    device = s["device"]
    pairs = [(r["question"], a) for r in items for a in [r["answer"], r["paraphrased_answer"], *r["perturbed_answer"]]]
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t = time.perf_counter()
    ev.scoring.new_run()
    ev.scoring.score(network, pairs, device)
    sync()
    scoring = len(pairs) / (time.perf_counter() - t)
    t = time.perf_counter()
    ev.answers.answers(network, [r["question"] for r in items], device)
    sync()
    generation = len(items) / (time.perf_counter() - t)
    return {"scoring_pairs_per_s": scoring, "generation_items_per_s": generation, "pairs": len(pairs),
            "items": len(items), "max_new_tokens": s["max_new_tokens"]}


def computed_memory(n_params: int, cfg: dict, s: dict) -> dict:
    """benchmarks/llm_scale/llama2_7b_memory.py's accounting for one GPU at this run's batch and sequence length (ZeRO-3 in
    one process: its `rank_memory` terms; the plain runs: weights and the two gradients, plus HAMU's copy)."""
    from llama2_7b_memory import Setting, rank_memory

    b, seq, h = s["batch"], s["seq"], cfg["hidden_size"]
    act = cfg["layers"] * 2 * b * seq * h + 34 * b * seq * h + 5 * b * cfg["heads"] * seq * seq
    logits = 4 * b * seq * cfg["vocab_size"]
    arch = {"vocab_size": cfg["vocab_size"], "hidden_size": h, "intermediate_size": cfg["intermediate_size"],
            "num_hidden_layers": cfg["layers"], "num_attention_heads": cfg["heads"],
            "num_key_value_heads": cfg["kv_heads"]}
    zero3 = rank_memory(Setting(arch, 3, 1, "hamu", weight_bytes=2 if s["dtype"] == "bfloat16" else 4,
                                micro_batch=b, seq=seq, baseline=0.0))
    return {"parameters": n_params, "activations_gb": act / GB, "logits_gb": logits / GB,
            # GradDiff takes the same two backward passes as HAMU: bf16 weights, the g_r it keeps, g_f
            "plain_graddiff_gb": (3 * 2 * n_params + act + logits) / GB,
            "plain_hamu_gb": (3 * 2 * n_params + act + logits) / GB,
            "zero3_one_gpu_hamu_gb": zero3["peak"] / GB}


def main() -> int:
    ap = options(__doc__, full=True, write=False)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny Llama: checks the script end to end")
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results")
    ap.add_argument("--only", action="append", default=None, metavar="PART",
                    help="run only this part (repeatable): 'single graddiff', 'single hamu', 'single hamu_fused', "
                         "'single hamu_f64', 'OFMU round', 'TOFU evaluator', 'zero3 graddiff', 'zero3 hamu'")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one extra step of each single-GPU run (not timed; the table goes to the JSON)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from lit_unlearn.core.quiet import silence_library_noise

    silence_library_noise()
    for name in ("lightning.pytorch", "lightning.fabric", "DeepSpeed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    s = settings(args.dry_run)
    if not args.dry_run and not torch.cuda.is_available():
        print("no GPU: run with --dry-run on CPU", file=sys.stderr)
        return 2
    if args.dry_run:
        from lit_unlearn.algorithms import fused_passes

        fused_passes.BACKEND = "eager"  # the dry run checks this script: the fused passes' arithmetic, uncompiled
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        for k in ("MASTER_ADDR", "MASTER_PORT"):
            os.environ.setdefault(k, "127.0.0.1" if k == "MASTER_ADDR" else "29517")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from lit_unlearn.data import generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.modules import GradDiffModule, HAMUModule, OFMUModule

    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp()) / "tofu"
    write_tofu_json(folder)
    splits = generate_fictitious_tofu()
    tokenizer = train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in splits.values() for r in rows],
                                    vocab_size=512)

    def llama(cfg):
        spec = tiny_llama_config(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"], layers=cfg["layers"],
                                 heads=cfg["heads"], kv_heads=cfg["kv_heads"],
                                 intermediate_size=cfg["intermediate_size"], max_positions=cfg["max_positions"])
        # initialised where it runs: a 7B random init on the host takes minutes of the check's budget
        with torch.device(s["device"]):
            return CausalLM(config=spec, dtype=s["dtype"], gradient_checkpointing=not args.dry_run,
                            attn_implementation="sdpa" if not args.dry_run else "eager", seed=0)

    dm = lambda: datamodule(folder, tokenizer, s["seq"], s["batch"])  # noqa: E731
    n_params = sum(p.numel() for p in llama(s["model"]).parameters()) if args.dry_run else 6_738_415_616
    grad_fp32 = 4 * n_params
    results: dict = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (dry run)",
                     "settings": {k: v for k, v in s.items() if k not in ("model", "ofmu_model")},
                     "model": s["model"], "parameters": n_params, "runs": []}
    # ZeRO-3 in one process keeps an fp32 master copy, fp32 gradients and HAMU's g_r copy: ~95 GB at 7B, which
    # fits a 139 GB GPU but not an 80 GB one; there the ZeRO-3 comparison runs on the 1.1B model (recorded).
    big_gpu = torch.cuda.is_available() and torch.cuda.get_device_properties(0).total_memory >= 120 * GB
    zero3_model = s["model"] if args.dry_run or big_gpu else s["ofmu_model"]
    results["zero3_model"] = zero3_model
    problems: list[str] = []

    def save() -> None:  # after every measurement: a check cut short by its time limit keeps what it measured
        results["problems"] = problems
        results["seconds"] = time.perf_counter() - started
        (out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))

    def attempt(what: str, fn) -> None:  # one failing part (say, ZeRO-3 on this driver) must not hide the others
        if args.only and what not in args.only:
            return
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - recorded as a problem, the exit status says so
            problems.append(f"{what}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
            print(f"  {what}: FAILED ({problems[-1]})", flush=True)
        free_device_memory()  # outside the handler: while it runs, the traceback still holds the failed run's frames
        save()

    def pair(label, strategy, cfg, name, make):
        if strategy and not args.only and not (args.dry_run and name == "graddiff"):
            # Each ZeRO-3 fit in a process of its own: on the GPU, DeepSpeed's engine kept ~100 GB allocated after
            # GradDiff's fit, and HAMU's fit that followed in the same process ran out of memory (alone: 107 GB).
            # The dry run checks both paths: GradDiff's fit in this process, HAMU's in its own.
            r = in_own_process(f"{label} {name}")
        else:
            r = run_method(name, make, dm(), s, deepspeed_strategy(args.dry_run) if strategy else None,
                           profile=args.profile and not strategy)
        r["setting"] = label
        results["runs"].append(r)
        print(f"  {label:7s} {name:9s} median step {r['median_step_s'] * 1e3:9.1f} ms, peak "
              f"{r['peak_bytes'] / GB:7.2f} GB (setup {r['setup_peak_bytes'] / GB:.2f}, steps "
              f"{r['steps_peak_bytes'] / GB:.2f}), finite {r['finite']}", flush=True)

    def in_own_process(part: str) -> dict:
        import socket
        import subprocess

        folder = Path(tempfile.mkdtemp())
        cmd = [sys.executable, str(Path(__file__).resolve()), "--only", part, "--out", str(folder)]
        with socket.socket() as s:  # a port of its own: a fit in this process may still hold the default one
            s.bind(("127.0.0.1", 0))
            env = dict(os.environ, MASTER_PORT=str(s.getsockname()[1]))
        proc = subprocess.run(cmd + (["--dry-run"] if args.dry_run else []), text=True, env=env)
        part_results = json.loads((folder / "gpu_check.json").read_text())
        if proc.returncode != 0 and part_results["problems"]:
            raise RuntimeError(part_results["problems"][0])
        return part_results["runs"][0]

    def pairs(label, strategy, cfg):
        methods = {"graddiff": lambda: GradDiffModule(llama(cfg), lr=1e-5, freeze_batchnorm=False),
                   "hamu": lambda: HAMUModule(llama(cfg), eta=1e-4, quota=5e-5, freeze_batchnorm=False)}
        if not strategy:  # beside the default: the fused passes (opt-in), and the earlier float64 combination
            methods["hamu_fused"] = lambda: HAMUModule(llama(cfg), eta=1e-4, quota=5e-5, freeze_batchnorm=False,
                                                       fused_passes=True)
            methods["hamu_f64"] = lambda: HAMUModule(llama(cfg), eta=1e-4, quota=5e-5, freeze_batchnorm=False,
                                                     combine_precision="float64")
        for name, make in methods.items():
            attempt(f"{label} {name}", lambda: pair(label, strategy, cfg, name, make))

    pairs("single", None, s["model"])

    def ofmu_round():
        ofmu = run_method("ofmu", lambda: OFMUModule(llama(s["ofmu_model"]), inner_steps=5, inner_lr=1e-5, beta=0.1,
                                                     outer_lr=1e-5, rho=0.1, hvp="finite_difference", fd_step=1e-2,
                                                     inner_clip_norm=1.0, outer_clip_norm=1.0,
                                                     freeze_batchnorm=False),
                          dm(), {**s, "steps": 1, "warmup": 0})
        ofmu["setting"] = "single (1.1B)" if not args.dry_run else "single (tiny)"
        results["runs"].append(ofmu)
        print(f"  OFMU round (T = 5): {ofmu['median_step_s']:.2f} s, peak {ofmu['peak_bytes'] / GB:.2f} GB, "
              f"finite {ofmu['finite']}", flush=True)

    def evaluator():
        network = llama(s["model"]).to(s["device"])
        results["evaluator"] = evaluator_throughput(network, tokenizer, folder, s)
        print(f"  TOFU evaluator: scoring {results['evaluator']['scoring_pairs_per_s']:.1f} answer pairs/s, "
              f"generation {results['evaluator']['generation_items_per_s']:.2f} items/s "
              f"({s['max_new_tokens']} new tokens)", flush=True)

    attempt("OFMU round", ofmu_round)
    attempt("TOFU evaluator", evaluator)
    pairs("zero3", "deepspeed", zero3_model)

    by = {(r["setting"], r["method"]): r for r in results["runs"]}
    for setting in ("single", "zero3"):
        if (setting, "hamu") not in by or (setting, "graddiff") not in by:
            continue
        h, g = by[(setting, "hamu")], by[(setting, "graddiff")]
        copy = grad_fp32 if setting == "single" or zero3_model is s["model"] else 4 * 1_100_048_384
        results[f"{setting}_step_ratio"] = h["median_step_s"] / g["median_step_s"]
        results[f"{setting}_extra_memory_fp32_copies"] = (h["steps_peak_bytes"] - g["steps_peak_bytes"]) / copy
        for variant, what in (("hamu_fused", "fused passes"), ("hamu_f64", "every bf16 block combined in float64")):
            if (setting, variant) in by:
                results[f"{setting}_step_ratio_{variant}"] = by[(setting, variant)]["median_step_s"] / g[
                    "median_step_s"]
                print(f"{setting}: HAMU ({what}) / GradDiff step time "
                      f"{results[f'{setting}_step_ratio_{variant}']:.3f}")
        print(f"{setting}: HAMU/GradDiff step time {results[f'{setting}_step_ratio']:.3f}; HAMU − GradDiff "
              f"steps' peak memory {results[f'{setting}_extra_memory_fp32_copies']:+.3f} fp32 gradient copies")
        if h["steps_peak_bytes"] - g["steps_peak_bytes"] > copy:
            problems.append(f"{setting}: HAMU's peak memory exceeds GradDiff's by more than one fp32 gradient copy")
    problems += [f"{r['setting']} {r['method']}: a non-finite step" for r in results["runs"] if not r["finite"]]
    save()
    (out / "memory_computed.json").write_text(json.dumps(computed_memory(n_params, s["model"], s), indent=1))
    print(f"written: {out / 'gpu_check.json'} and {out / 'memory_computed.json'} ({results['seconds']:.0f} s)")
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
