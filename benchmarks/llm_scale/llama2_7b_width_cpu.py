"""Llama-2-7B's real width on CPU: the packaged tofu_llama2_7b_* configs under DeepSpeed ZeRO-2 and ZeRO-3 with 2
CPU processes, the depth cut to 1-2 layers. Not part of the test suite (about 27 minutes on 2 cores at one layer,
most of it gloo moving the full model between the 2 processes over loopback; docs/guide/llm.md).

    python benchmarks/llm_scale/llama2_7b_width_cpu.py [--layers 1] [--steps 3] [--out runs/width7b] [--write FILE]
    python benchmarks/llm_scale/llama2_7b_width_cpu.py --quick        HAMU under ZeRO-3 only, 2 steps, 8 evaluation items

Width: hidden 4096, intermediate 11008, 32 heads, vocabulary 32000 (Llama-2-7B's), random initialisation, fp32
(CPU has no bf16 training path in DeepSpeed here). Data: the real TOFU release shipped with the package (forget10 /
retain90), tokenised with a BPE trained on the release itself (it saturates at 16,467 tokens: every word of the
release is one token, so ids fill half of the 32000-row embedding; compute and memory are those of vocabulary 32000).
One retain and one forget sequence per rank per step (the configs' batch sizes scaled to 2 ranks).

Each run is `build_run(preset + overrides)` then `fit_run`, the path `lit-unlearn unlearn --preset ...` takes; the
overrides are the width, CPU DeepSpeed (the packaged strategy's own ZeRO settings, stage as stated), fp32, the
local data and no TOFU evaluation callback (measured on its own below). Measured, side by side, in one run:
- per method and stage (OFMU in its packaged LoRA form under DDP; its full-parameter ZeRO-3 form with --ofmu):
  seconds per step (median of the steps after the first) and peak RSS per rank, split into
  the peak while the engine is built and the peak during the steps (the kernel's high-water mark is reset
  between the two);
- the memory model (benchmarks/llm_scale/llama2_7b_memory.py, `rank_memory`) against every measured training peak;
- HAMU's extra memory over GradDiff (same optimizer: plain SGD, so the difference is HAMU's own working set);
- a sharded ZeRO-3 checkpoint: save time, size on disk, and an exact resume (per-rank partition hashes after one
  more step, against the uninterrupted run);
- `lit-unlearn export` of that checkpoint: peak RSS against one fp32 copy of the weights, and the exported folder's
  logits against the run's own on a real TOFU item (transformers alone, in a fresh process);
- the TOFU evaluator on 64 real TOFU items at this width: items per second for scoring and generation, peak RSS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options, publish  # benchmarks/report.py

HERE = Path(__file__).resolve().parents[1]  # benchmarks/, where report.py is
GB = 1024**3
WIDTH = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
         "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
RANKS = 2
EVAL_ITEMS = RANKS  # the run's before/after loss table: one item per rank and split (TofuDataModule eval_items)
STARTED = time.time()  # this process's start, for the launch's time split


# ----- the runs ------------------------------------------------------------------------------------------------------
def jobs(args) -> list[dict]:
    """Every run, in launch order: each packaged preset at its own ZeRO stage (HAMU has both), GradDiff beside HAMU
    at both stages (the comparison for HAMU's extra memory), and the checkpointed HAMU ZeRO-3 run's resume."""
    graddiff = {"class_path": "lit_unlearn.modules.GradDiffModule",
                "init_args": {"lr": 1.0e-4, "optimizer": "sgd", "retain_weight": 1.0, "forget_weight": 1.0}}
    matrix = [("hamu", "tofu_llama2_7b_hamu_zero3", 3, None),
              ("graddiff", "tofu_llama2_7b_hamu_zero3", 3, graddiff),
              ("hamu", "tofu_llama2_7b_hamu_zero2", 2, None),
              ("graddiff", "tofu_llama2_7b_hamu_zero2", 2, graddiff),
              # NPO and RMU with the configs' AdamW need ~12 GiB per rank at one layer: two ranks exceed 24 GiB
              # (--adamw runs them as packaged where memory allows); plain SGD keeps their frozen reference.
              ("npo", "tofu_llama2_7b_npo", 3, None if args.adamw else {"init_args": {"optimizer": "sgd"}}),
              ("rmu", "tofu_llama2_7b_rmu", 3, {"init_args": {"layer": args.layers - 1,
                                                              **({} if args.adamw else {"optimizer": "sgd"})}}),
              # OFMU as packaged with LoRA adapters under DDP (stage 0): its working set is the adapters'
              ("ofmu", "tofu_llama2_7b_ofmu_lora", 0, {"init_args": {"inner_steps": args.ofmu_inner_steps}})]
    if args.ofmu:  # 12 fp32 slices of the parameters: ~21 GiB per rank at one layer (benchmarks/llm_scale/llama2_7b_memory.py)
        matrix.append(("ofmu", "tofu_llama2_7b_ofmu_zero3", 3, {"init_args": {"inner_steps": args.ofmu_inner_steps}}))
    if args.quick:
        matrix = matrix[:1]
    out = []
    for method, preset, stage, model in matrix:
        name = f"{method}_zero{stage}" if stage else f"{method}_ddp_lora"
        if args.methods and method not in args.methods and name not in args.methods:
            continue
        checkpoint = method == "hamu" and stage == 3  # the sharded checkpoint, its resume and its export
        job = {"name": name, "method": method, "preset": preset, "stage": stage, "model": model,
               "steps": args.steps if checkpoint else args.baseline_steps, "checkpoint_every": int(checkpoint)}
        out.append(job)
        if checkpoint:
            out.append({**job, "name": job["name"] + "_resumed", "resume_from": job["name"],
                        "checkpoint_every": 0, "resume_step": job["steps"] - 1})
    return out


def strategy_config(preset: str, stage: int) -> dict:
    """The packaged config's own DeepSpeed settings at `stage`, on CPU in fp32 (no bf16 block) with one sequence
    per rank per side."""
    strategy = None
    for config in preset_files(preset):
        strategy = config.get("trainer", {}).get("strategy", strategy)
    config = json.loads(json.dumps(strategy["init_args"]["config"]))
    config.pop("bf16", None)
    config["zero_optimization"]["stage"] = stage
    if stage != 3:
        config["zero_optimization"].pop("stage3_gather_16bit_weights_on_model_save", None)
    config["train_micro_batch_size_per_gpu"] = 1
    config["zero_allow_untested_optimizer"] = True  # plain SGD (NPO and RMU below); DeepSpeed tests only Adam-likes
    return config


def override_yaml(job: dict, args, assets: Path, out: Path) -> Path:
    """The overrides of one run, as a config file given after the preset (later configs win)."""
    import yaml

    network = {"class_path": "lit_unlearn.models.CausalLM",
               "init_args": {"name_or_path": None, "config": {**WIDTH, "num_hidden_layers": args.layers},
                             "dtype": "float32", "gradient_checkpointing": True, "attn_implementation": "sdpa",
                             "seed": 0}}
    callbacks = []
    if job["method"] == "ofmu":
        callbacks.append({"class_path": "lit_unlearn.callbacks.RhoScheduler",
                          "init_args": {"schedule": "geometric", "rho0": 0.01, "rate": 1.05, "cap": 1.0}})
    if job["checkpoint_every"]:
        callbacks.append({"class_path": "lit_unlearn.callbacks.FinalCheckpoint",
                          "init_args": {"filename": "{step}", "every_n_train_steps": job["checkpoint_every"],
                                        "save_top_k": -1, "save_last": False}})
    lora = preset_model_args(job["preset"]).get("network", {}).get("init_args", {}).get("lora")
    if lora:  # the config's adapters, on the width-sized base
        network["init_args"]["lora"] = lora
    model = {"init_args": {"network": network}}
    if job["model"]:
        model = {**job["model"], "init_args": {**job["model"].get("init_args", {}), "network": network}}
    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": RANKS, "precision": "32-true", "max_steps": job["steps"],
                    "logger": False, "enable_progress_bar": False, "log_every_n_steps": 1,
                    "default_root_dir": str(out / "runs" / job["name"]),
                    "enable_checkpointing": bool(job["checkpoint_every"]),
                    "strategy": {"class_path": "lit_unlearn.distributed.cpu_deepspeed.CPUDeepSpeedStrategy",
                                 "init_args": {"config": strategy_config(job["preset"], job["stage"])}}
                    if job["stage"] else "ddp",
                    "callbacks": callbacks},
        "data": {"init_args": {"source": {"class_path": "lit_unlearn.data.TofuSource",
                                          "init_args": {"path": str(assets / "tofu"), "forget_level": "10"}},
                               "tokenizer": str(assets / "tokenizer"), "retain_batch_size": RANKS,
                               "forget_batch_size": RANKS, "eval_batch_size": 1, "eval_items": EVAL_ITEMS}},
        "model": model,
    }
    path = out / "jobs" / f"{job['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# ----- inside each rank ----------------------------------------------------------------------------------------------
def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux ≥ 4.0)


def _watch_peak(record: dict, main_thread: int, stop) -> None:
    """Where the training peak happens: every 10 ms, when the resident size is a new high, the main thread's stack
    (what holds the memory then is what the memory model must account for)."""
    import traceback

    high = 0
    while not stop.wait(0.01):
        rss = _status_kb("VmRSS")
        if rss > high:
            high = rss
            frame = sys._current_frames().get(main_thread)
            if frame is not None:
                record["peak_sampled_kb"] = rss
                record["peak_stack"] = [f"{Path(f.filename).name}:{f.lineno} {f.name}"
                                        for f in traceback.extract_stack(frame)[-14:]]


def tensor_census(min_elements: int = 1 << 20) -> dict:
    """The large tensors alive in this process, by distinct storage: their bytes and shapes (what the resident size
    is made of, beside the interpreter and the libraries)."""
    import gc

    import torch

    seen, shapes = {}, {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.Tensor) or obj.numel() < min_elements or obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
            ptr = storage.data_ptr()
        except Exception:  # noqa: BLE001  (meta tensors, freed storages)
            continue
        key = f"{tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
        seen.setdefault(ptr, [storage.nbytes(), set()])[1].add(key)
        shapes[key] = shapes.get(key, 0) + 1
    resident = {ptr: resident_bytes(ptr, size) for ptr, (size, _) in seen.items()}
    return {"bytes": sum(size for size, _ in seen.values()), "storages": len(seen), "shapes": shapes,
            "resident_bytes": sum(r for r in resident.values() if r is not None),
            "by_storage": sorted(([size, resident[ptr], sorted(keys)] for ptr, (size, keys) in seen.items()),
                                 key=lambda row: row[0], reverse=True)}


def resident_bytes(ptr: int, nbytes: int) -> int | None:
    """How much of [ptr, ptr + nbytes) is in memory (mincore): allocated-but-untouched pages are not."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    start = ptr - ptr % page
    length = ptr + nbytes - start
    pages = (length + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(length), vec) != 0:
        return None
    return bytes(vec).count(1) * page


def census_inside(target: str, record: dict) -> None:
    """Wrap `module:Class.method` so that each call records `tensor_census()` on entry and on return (the last
    call's census is kept): what holds the memory where the sampled peak sits."""
    import importlib

    module, _, qual = target.partition(":")
    cls_name, _, method = qual.partition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    original = getattr(cls, method)

    def wrapped(*a, **k):
        record[f"census_enter_{method}"] = tensor_census()
        out = original(*a, **k)
        record[f"census_exit_{method}"] = tensor_census()
        return out

    setattr(cls, method, wrapped)


def meter(job: dict, out: Path, probe_ids):
    """A callback that records the build peak, step times, the training peak, the final partitions' hashes, the final
    logits of one item, and checkpoint save times (Lightning is imported only inside the ranks)."""
    from lightning.pytorch.callbacks import Callback

    class _Meter(Callback):
        def __init__(self):
            self.record = {"job": job["name"], "step_s": [], "save_s": []}

        def setup(self, trainer, pl_module, stage):
            self.record["process_start_to_setup_s"] = time.time() - STARTED
            if os.environ.get("WIDTH_CENSUS_AT"):  # diagnosis: the large tensors alive inside a DeepSpeed method
                census_inside(os.environ["WIDTH_CENSUS_AT"], self.record)
            strategy = trainer.strategy
            save = strategy.save_checkpoint
            record = self.record

            def timed_save(*a, **k):
                t = time.perf_counter()
                save(*a, **k)
                record["save_s"].append(time.perf_counter() - t)

            strategy.save_checkpoint = timed_save

        def on_train_start(self, trainer, pl_module):
            import torch

            self.record["process_start_to_train_start_s"] = time.time() - STARTED
            self.record["build_peak_kb"] = _status_kb("VmHWM")
            self.record["rss_at_start_kb"] = _status_kb("VmRSS")
            params = list(pl_module.parameters())
            self.record["local_param_elements"] = sum(
                p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in params)
            self.record["network_elements"] = sum(getattr(p, "ds_numel", p.numel())
                                                  for p in pl_module.network.parameters())
            self.record["threads"] = torch.get_num_threads()
            self.record["tensors_at_start"] = tensor_census()
            _reset_peak()
            self._stop = threading.Event()
            threading.Thread(target=_watch_peak, args=(self.record, threading.get_ident(), self._stop),
                             daemon=True).start()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self._t = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.record["step_s"].append(time.perf_counter() - self._t)

        def on_train_end(self, trainer, pl_module):
            import torch

            self._stop.set()
            self.record["train_peak_kb"] = _status_kb("VmHWM")
            self.record["process_start_to_train_end_s"] = time.time() - STARTED
            self.record["global_step"] = trainer.global_step
            digest = hashlib.sha256()
            for name, p in pl_module.network.named_parameters():
                local = p.ds_tensor if hasattr(p, "ds_tensor") else p.data
                digest.update(name.encode())
                digest.update(local.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            self.record["weights_sha256"] = digest.hexdigest()
            finite = all(torch.isfinite(p.ds_tensor if hasattr(p, "ds_tensor") else p).all().item()
                         for p in pl_module.network.parameters())
            self.record["finite"] = bool(finite)
            network = pl_module.network
            was = network.training
            network.eval()
            with torch.no_grad():  # every rank runs the forward (ZeRO-3 gathers each layer's weights)
                logits = network(probe_ids)
            network.train(was)
            if trainer.is_global_zero:
                torch.save(logits.detach().clone(), out / "results" / f"{job['name']}_logits.pt")
            rank = trainer.global_rank
            (out / "results" / f"{job['name']}_rank{rank}.json").write_text(json.dumps(self.record, indent=1))

    return _Meter()


def formatter(assets: Path):
    """The 7B configs' question-answer encoding (llama2 template) with the release's tokenizer."""
    from lit_unlearn.data.qa_format import QAFormatter
    from lit_unlearn.data.tokenizer import load_tokenizer

    return QAFormatter(load_tokenizer(str(assets / "tokenizer")), "llama2")


def probe_item(assets: Path):
    """One real TOFU forget10 question and answer, encoded as the runs train on it, as a batch of one."""
    from lit_unlearn.data.tofu_source import TofuSource

    row = TofuSource(str(assets / "tofu"), forget_level="10").eval_splits()["forget"][0]
    return formatter(assets).encode(row["question"], row["answer"])["input_ids"][None]


def record_baseline(out: Path, job: dict) -> None:
    """This rank's resident memory before anything is built: the interpreter, torch, Lightning, DeepSpeed and
    transformers imported (the memory model's process baseline)."""
    import deepspeed  # noqa: F401
    import lightning.pytorch  # noqa: F401
    import transformers  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    rank = int(os.environ.get("LOCAL_RANK", 0))
    (out / "results" / f"{job['name']}_baseline_rank{rank}.json").write_text(json.dumps(
        {"rss_kb": _status_kb("VmRSS"), "s": time.time() - STARTED}))


def worker(job: dict, args) -> None:
    """One run: the packaged preset plus this benchmark's overrides, through the command line's builder."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from lit_unlearn.launch.runs import build_run, fit_run

    out = Path(args.out)
    overrides = out / "jobs" / f"{job['name']}.yaml"
    argv = ["--config", str(overrides)]
    if "resume_from" in job:
        folder = Path((out / "results" / f"{job['resume_from']}_checkpoint.txt").read_text().strip())
        argv += ["--ckpt_path", str(folder.parent / f"step={job['resume_step']}.ckpt")]
    record_baseline(out, job)
    launched = build_run(argv, preset=job["preset"])
    probe_ids = torch.load(out / "results" / "probe_ids.pt")  # written once by the parent
    launched.trainer.callbacks.append(meter(job, out, probe_ids))
    fit_run(launched)
    from lit_unlearn.distributed import release_process_group

    release_process_group()  # gloo's group torn down before exit (a DDP rank otherwise aborts at interpreter exit)
    if launched.trainer.is_global_zero and job["checkpoint_every"]:
        folder = launched.run.checkpoints / f"step={job['steps']}.ckpt"
        (out / "results" / f"{job['name']}_checkpoint.txt").write_text(str(folder))


# ----- the parent ----------------------------------------------------------------------------------------------------
def prepare_assets(out: Path, layers: int) -> Path:
    """The release's forget10/retain90 splits, the release's own BPE, and a config-only Hugging Face folder of the
    architecture (what `lit-unlearn export --base` reads for a network built from a config)."""
    assets = out / "assets"
    if not (assets / "tokenizer" / "tokenizer.json").is_file():
        from lit_unlearn.data import train_bpe_tokenizer
        from lit_unlearn.data.tofu_release import write_release
        from lit_unlearn.worlds.tofu_world import tokenizer_corpus

        write_release(assets / "tofu")
        train_bpe_tokenizer(tokenizer_corpus(), assets / "tokenizer", vocab_size=WIDTH["vocab_size"])
    from transformers import AutoConfig

    from lit_unlearn.data.tokenizer import load_tokenizer

    cfg = dict(WIDTH, num_hidden_layers=layers)
    AutoConfig.for_model(cfg.pop("model_type"), **cfg).save_pretrained(str(assets / "base"))
    load_tokenizer(str(assets / "tokenizer")).save_pretrained(str(assets / "base"))
    return assets


def max_sequence(assets: Path) -> int:
    """The longest training sequence in tokens (the activation term of the memory model)."""
    from lit_unlearn.data.tofu_source import TofuSource

    fmt = formatter(assets)
    forget, retain = TofuSource(str(assets / "tofu"), forget_level="10").forget_retain()
    return max(len(fmt.encode(r["question"], r["answer"])["input_ids"]) for r in forget + retain)


def child_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


def run_job(job: dict, args) -> dict:
    out = Path(args.out)
    (out / "jobs" / f"{job['name']}.json").write_text(json.dumps(job))
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", job["name"], "--out", str(out),
                           "--layers", str(args.layers)], env=child_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        why = ": killed, out of memory?" if proc.returncode in (-9, 137) else ""
        print(f"  {job['name']} failed (exit {proc.returncode}{why})", flush=True)
        return {"job": job, "failed": proc.returncode, "launch_wall_s": wall}
    return collect(job, out, wall)


def collect(job: dict, out: Path, wall: float) -> dict:
    ranks = [{**json.loads((out / "results" / f"{job['name']}_rank{r}.json").read_text()),
              "baseline": json.loads((out / "results" / f"{job['name']}_baseline_rank{r}.json").read_text())}
             for r in range(RANKS)]
    return {"job": job, "ranks": ranks, "launch_wall_s": wall}


def measure_export(out: Path, checkpoint: str) -> dict:
    """`lit-unlearn export` in a fresh process: its own peak RSS, wall time, and the folder's size."""
    code = ("import json,resource,sys,time;from lit_unlearn.cli import main;t=time.perf_counter();"
            "rc=main(sys.argv[1:]);print(json.dumps({'wall_s':time.perf_counter()-t,"
            "'peak_kb':resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))")
    target = out / "exported"
    proc = subprocess.run([sys.executable, "-c", code, "export", checkpoint, str(target), "--base",
                           str(out / "assets" / "base")], env=child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit("export failed")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["bytes"] = sum(f.stat().st_size for f in target.rglob("*.safetensors"))
    return result


def compare_exported_logits(out: Path, job: str) -> float:
    """Max |Δlogit| of the exported folder (transformers alone, a fresh process) against the run's final logits."""
    code = ("import sys,torch;from transformers import AutoModelForCausalLM;"
            "m=AutoModelForCausalLM.from_pretrained(sys.argv[1],dtype=torch.float32,attn_implementation='sdpa').eval();"
            "ids=torch.load(sys.argv[2]);ref=torch.load(sys.argv[3])\n"
            "with torch.no_grad(): got=m(input_ids=ids).logits\n"
            "print(float((got-ref).abs().max()))")
    ids = out / "results" / "probe_ids.pt"
    proc = subprocess.run([sys.executable, "-c", code, str(out / "exported"), str(ids),
                           str(out / "results" / f"{job}_logits.pt")], env=child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit("loading the exported folder failed")
    return float(proc.stdout.strip().splitlines()[-1])


def measure_evaluation(out: Path, layers: int, items: int, max_new_tokens: int) -> dict:
    """The TOFU evaluator on `items` real forget10 items at this width (a fresh process, one thread per core)."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--eval-worker", "--out", str(out),
                           "--layers", str(layers), "--eval-items", str(items), "--max-new-tokens",
                           str(max_new_tokens)], env=dict(child_env(), OMP_NUM_THREADS="2"), capture_output=True,
                          text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit("evaluation failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def eval_worker(args) -> None:
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))  # both cores: nothing else runs now
    from lit_unlearn.data.tofu_source import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    assets = Path(args.out) / "assets"
    tokenizer = load_tokenizer(str(assets / "tokenizer"))
    network = CausalLM(config={**WIDTH, "num_hidden_layers": args.layers}, attn_implementation="sdpa").eval()
    items = TofuSource(str(assets / "tofu"), forget_level="10").eval_splits()["forget"][: args.eval_items]
    ev = TofuEvaluator(tokenizer, {"forget": items}, max_new_tokens=args.max_new_tokens, batch_size=16,
                       template="llama2")
    pairs = [(r["question"], a) for r in items for a in [r["answer"], r["paraphrased_answer"], *r["perturbed_answer"]]]
    _reset_peak()
    t = time.perf_counter()
    ev.scoring.new_run()
    ev.scoring.score(network, pairs, "cpu")
    scoring_s = time.perf_counter() - t
    t = time.perf_counter()
    ev.answers.answers(network, [r["question"] for r in items], "cpu")
    generation_s = time.perf_counter() - t
    weights = sum(p.numel() * p.element_size() for p in network.parameters())
    print(json.dumps({"items": len(items), "pairs": len(pairs), "max_new_tokens": args.max_new_tokens,
                      "scoring_pairs_per_s": len(pairs) / scoring_s, "scoring_items_per_s": len(items) / scoring_s,
                      "generation_items_per_s": len(items) / generation_s, "peak_kb": _status_kb("VmHWM"),
                      "weights_bytes": weights, "threads": torch.get_num_threads()}))


def modelled(run: dict, layers: int, seq: int) -> float:
    """benchmarks/llm_scale/llama2_7b_memory.py's peak for this run, over the rank's own measured process baseline."""
    from llama2_7b_memory import Setting, rank_memory

    from llama2_7b_memory import llama_parameters

    job = run["job"]
    baseline = max(r["baseline"]["rss_kb"] for r in run["ranks"]) * 1024
    cfg = {**WIDTH, "num_hidden_layers": layers}
    overrides = (job.get("model") or {}).get("init_args", {})
    preset = preset_model_args(job["preset"])
    optimizer = overrides.get("optimizer", preset.get("optimizer", "sgd"))
    decay = float(overrides.get("weight_decay", preset.get("weight_decay", 0.0))) > 0
    trainable = None
    if job["method"] == "rmu":  # trainable ".*" up to layer ℓ: the embedding and layers 0..ℓ (head and norm frozen)
        parts = llama_parameters({**cfg, "num_hidden_layers": overrides.get("layer", layers - 1) + 1})
        trainable = parts["embedding"] + parts["layers"]
    return rank_memory(Setting(cfg, job["stage"], RANKS, job["method"], weight_bytes=4, micro_batch=1, seq=seq,
                               baseline=baseline, gloo=True, optimizer=optimizer, weight_decay=decay,
                               trainable=trainable))


def preset_files(preset: str) -> list[dict]:
    """The packaged config and the bases it `# extends:`, parsed, base first (later ones win)."""
    import yaml

    from lit_unlearn.launch.presets import config_chain

    return [yaml.safe_load(Path(path).read_text()) or {} for path in config_chain(preset)]


def preset_model_args(preset: str) -> dict:
    """The packaged config's model init_args (its optimizer and weight decay), through its `# extends:` chain."""
    args: dict = {}
    for config in preset_files(preset):
        model = config.get("model", {})
        if model.get("class_path", "") and model.get("class_path") != args.get("__class__"):
            args = {"__class__": model.get("class_path")}
        args.update(model.get("init_args", {}))
    return args


def summary(report: dict) -> str:
    """The tables, as markdown."""
    layers = report["layers"]
    finished = [r for r in report["runs"] if "ranks" in r]
    if not finished:
        failed = ", ".join(f"{r['job']['name']} (exit {r['failed']})" for r in report["runs"])
        return f"No run finished: {failed}\n"
    n = finished[0]["ranks"][0]["network_elements"]
    lines = [f"Llama-2-7B width (hidden 4096, intermediate 11008, 32 heads, vocabulary 32000), {layers} layer(s): "
             f"{n:,} parameters; fp32, DeepSpeed on 2 CPU processes (one thread each), one retain and one forget "
             f"sequence of real TOFU forget10/retain90 items per rank per step.", "",
             "| run | s/step (first) | s/step (after) | peak RSS/rank while building | peak RSS/rank in steps | "
             "model | measured/model | finite |", "|---|---|---|---|---|---|---|---|"]
    peaks = {}
    for run in report["runs"]:
        job = run["job"]
        label = job["name"] + (" (SGD)" if (job.get("model") or {}).get("init_args", {}).get("optimizer") == "sgd"
                               and job["method"] in ("npo", "rmu") else "")
        if "failed" in run:
            lines.append(f"| {label} | failed (exit {run['failed']}) | | | | | | |")
            continue
        ranks = run["ranks"]
        steps = ranks[0]["step_s"]
        after = statistics.median(steps[1:]) if len(steps) > 1 else float("nan")
        build = max(r["build_peak_kb"] for r in ranks) * 1024
        train = max(r["train_peak_kb"] for r in ranks) * 1024
        if not job["stage"]:  # DDP with LoRA: outside the ZeRO memory model
            lines.append(f"| {label} | {steps[0]:.1f} | {after:.1f} | {build / GB:.2f} GiB | {train / GB:.2f} GiB | "
                         f"not modelled (DDP, LoRA) | | {all(r['finite'] for r in ranks)} |")
            continue
        model = modelled(run, layers, report["seq"])
        peaks[job["name"]] = (train, model)
        lines.append(f"| {label} | {steps[0]:.1f} | {after:.1f} | {build / GB:.2f} GiB | {train / GB:.2f} GiB | "
                     f"{model['peak'] / GB:.2f} GiB ({model['peak phase']}) | {train / model['peak']:.2f} | "
                     f"{all(r['finite'] for r in ranks)} |")
    lines.append("")
    copy = 4 * n / RANKS
    for stage in (2, 3):
        hamu, gd = peaks.get(f"hamu_zero{stage}"), peaks.get(f"graddiff_zero{stage}")
        if hamu and gd:
            lines.append(f"- HAMU's extra memory over GradDiff (both plain SGD), ZeRO-{stage}: "
                         f"{(hamu[0] - gd[0]) / GB:+.2f} GiB per rank; one fp32 gradient copy of the rank's slice is "
                         f"{copy / GB:.2f} GiB ({(hamu[0] - gd[0]) / copy:.2f} copies).")
    if "checkpoint" in report:
        c = report["checkpoint"]
        lines.append(f"- Sharded ZeRO-3 checkpoint (HAMU): {c['bytes'] / GB:.2f} GiB on disk; save "
                     f"{statistics.median(c['save_s']):.2f} s (median of {len(c['save_s'])}); resumed from the "
                     f"step before the last, the weights after one more step are bit-equal on every rank: "
                     f"{all(c['resume_bit_equal'])} ({c['resume_bit_equal']}).")
    if "export" in report:
        e = report["export"]
        lines.append(f"- `lit-unlearn export` of that checkpoint: {e['wall_s']:.1f} s, peak RSS "
                     f"{e['peak_kb'] * 1024 / GB:.2f} GiB against one fp32 copy of the weights {4 * n / GB:.2f} GiB "
                     f"({e['peak_kb'] * 1024 / (4 * n):.2f}×); {e['bytes'] / GB:.2f} GiB of safetensors; loaded by "
                     f"transformers alone, its logits on a real TOFU item differ from the run's by at most "
                     f"{e['max_abs_logit_diff']:.1e}.")
    if "evaluation" in report:
        v = report["evaluation"]
        lines.append(f"- TOFU evaluator, {v['items']} real forget10 items ({v['pairs']} teacher-forced answer pairs; "
                     f"generation {v['max_new_tokens']} new tokens), one process with {v['threads']} threads: scoring "
                     f"{v['scoring_items_per_s']:.2f} items/s ({v['scoring_pairs_per_s']:.2f} pairs/s), generation "
                     f"{v['generation_items_per_s']:.2f} items/s, peak RSS {v['peak_kb'] * 1024 / GB:.2f} GiB "
                     f"(the weights: {v['weights_bytes'] / GB:.2f} GiB).")
    kept = [r["job"]["name"] for r in report["runs"] if r.get("launch_wall_s") != r.get("launch_wall_s")]
    lines.append(f"- Wall time of this invocation: {report['wall_s'] / 60:.1f} min"
                 + (f" (runs kept from an earlier one, not counted: {', '.join(kept)})." if kept else "."))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = options(__doc__, full=True)
    ap.add_argument("--layers", type=int, default=1, help="depth (Llama-2-7B has 32)")
    ap.add_argument("--steps", type=int, default=3, help="steps of the checkpointed HAMU ZeRO-3 run")
    ap.add_argument("--baseline-steps", type=int, default=2, help="steps of every other run (the first is warm-up)")
    ap.add_argument("--ofmu", action="store_true", help="also OFMU (needs ~2 × 20 GiB at one layer)")
    ap.add_argument("--ofmu-inner-steps", type=int, default=1, help="the packaged config's T is 5")
    ap.add_argument("--adamw", action="store_true", help="NPO and RMU with the configs' AdamW (~2 × 12 GiB)")
    ap.add_argument("--keep", action="store_true", help="keep finished runs of an earlier invocation in OUT")
    ap.add_argument("--methods", nargs="*", help="a subset of hamu graddiff ofmu npo rmu, or runs such as hamu_zero2")
    ap.add_argument("--quick", action="store_true", help="HAMU under ZeRO-3 only, 2 steps, 8 evaluation items")
    ap.add_argument("--eval-items", type=int, default=64, help="0: no evaluator measurement")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--out", default="runs/width7b")
    ap.add_argument("--summarise", action="store_true", help="only print (and --write) the tables of OUT/report.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--eval-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    args.out = str(out)
    if args.worker:
        return worker(json.loads((out / "jobs" / f"{args.worker}.json").read_text()), args)
    if args.eval_worker:
        return eval_worker(args)
    if args.summarise:
        report = json.loads((out / "report.json").read_text())
        report.setdefault("seq", max_sequence(out / "assets"))
        return write_summary(report, args)
    if args.quick:
        args.steps = 2
        args.eval_items = min(args.eval_items, 8)
    import shutil

    for sub in ("exported",) if args.keep else ("runs", "results", "jobs", "exported"):
        shutil.rmtree(out / sub, ignore_errors=True)
    (out / "results").mkdir(parents=True, exist_ok=True)
    assets = prepare_assets(out, args.layers)
    import torch

    torch.save(probe_item(assets), out / "results" / "probe_ids.pt")
    started = time.perf_counter()
    results = []
    for job in jobs(args):
        override_yaml(job, args, assets, out)
        done = [out / "results" / f"{job['name']}_rank{r}.json" for r in range(RANKS)]
        if args.keep and all(f.exists() for f in done):
            print(f"[{time.perf_counter() - started:6.0f} s] {job['name']}: kept from an earlier run", flush=True)
            results.append(collect(job, out, float("nan")))
            continue
        shutil.rmtree(out / "runs" / job["name"], ignore_errors=True)
        print(f"[{time.perf_counter() - started:6.0f} s] {job['name']} ...", flush=True)
        results.append(run_job(job, args))
        (out / "report.json").write_text(json.dumps({"layers": args.layers, "runs": results}, indent=1))
    report = {"layers": args.layers, "steps": args.steps, "runs": results, "seq": max_sequence(assets)}
    checkpointed = next((r for r in results if r["job"]["checkpoint_every"]), None)
    if checkpointed is not None:
        name = checkpointed["job"]["name"]
        folder = (out / "results" / f"{name}_checkpoint.txt").read_text().strip()
        resumed = next(r for r in results if r["job"].get("resume_from") == name)
        report["checkpoint"] = {
            "folder": folder, "bytes": sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file()),
            "save_s": checkpointed["ranks"][0]["save_s"],
            "resume_bit_equal": [a["weights_sha256"] == b["weights_sha256"]
                                 for a, b in zip(checkpointed["ranks"], resumed["ranks"])]}
        print(f"[{time.perf_counter() - started:6.0f} s] export ...", flush=True)
        report["export"] = measure_export(out, folder)
        report["export"]["max_abs_logit_diff"] = compare_exported_logits(out, name)
    kept_eval = out / "results" / "evaluation.json"
    if args.eval_items and args.keep and kept_eval.exists() and \
            json.loads(kept_eval.read_text())["items"] == args.eval_items:
        report["evaluation"] = json.loads(kept_eval.read_text())
    elif args.eval_items:
        print(f"[{time.perf_counter() - started:6.0f} s] TOFU evaluation ...", flush=True)
        report["evaluation"] = measure_evaluation(out, args.layers, args.eval_items, args.max_new_tokens)
        kept_eval.write_text(json.dumps(report["evaluation"]))
    report["wall_s"] = time.perf_counter() - started
    (out / "report.json").write_text(json.dumps(report, indent=1))
    write_summary(report, args)


def write_summary(report: dict, args) -> None:
    publish(summary(report), args.write, f"<!-- python benchmarks/llm_scale/llama2_7b_width_cpu.py --layers {report['layers']} "
                                         f"--steps {report['steps']} --write {args.write} -->\n")


if __name__ == "__main__":
    main()
