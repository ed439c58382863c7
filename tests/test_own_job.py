"""The user's own job, end to end, as the README states it: a Hugging Face model folder written by transformers at
test time, and forget / retain / holdout files with the user's names and columns (tests/own_job_files.py).

- The README's own-data commands (read from the README, so they cannot drift) run HAMU and OFMU and give the verdict,
  a Hugging Face folder that plain transformers loads with the run's final weights, and TensorBoard logs.
- Chat messages and plain documents go through the same command.
- A SIGTERM mid-run, then the resume command the run prints (the README's: the command plus --ckpt_path last),
  ends on the weights of an uninterrupted run; a SIGTERM as the final verdict starts ends the run at once, and its
  resume command gives the verdict without training again.
- A run's config from `--print_config` is a plain LightningCLI config that runs as `--config`.
Runs are called in this process except where the process is the point (a signal, its exit code)."""

from __future__ import annotations

import json
import re
import shlex
import signal
from pathlib import Path

import pytest
import torch

from conftest import REPO, shared_folder
from helpers import cli_here, cli_process
from own_job_files import COLUMNS, model_folder, shipped_is_current, write_data

pytestmark = pytest.mark.slow
# Test-size runs: the README's commands plus fewer steps and smaller batches (the commands themselves are unchanged).
QUICK = ["--trainer.max_steps=4", "--data.init_args.retain_batch_size=8", "--data.init_args.forget_batch_size=8",
         "--trainer.enable_progress_bar=false"]


def readme_commands() -> list[list[str]]:
    """The `lit-unlearn unlearn` commands of the README's own-job block, as argument lists."""
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- own-job:begin -->", 1)[1].split("<!-- own-job:end -->", 1)[0]
    joined = block.replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in joined.splitlines() if line.strip().startswith("lit-unlearn unlearn")]


def readme_files(command: list[str]) -> dict[str, str]:
    """{role: path} the command names (--forget, --retain, --holdout), and --model-dir."""
    out = {}
    for i, arg in enumerate(command):
        if arg in ("--forget", "--retain", "--holdout", "--model-dir"):
            out[arg[2:].replace("-", "_")] = command[i + 1]
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A folder laid out as the README's commands expect: the model folder and the data files they name (QA pairs
    with the README's column names), plus chat and plain-text variants."""
    from filelock import FileLock

    folder = shared_folder(tmp_path_factory, "own_job")
    with FileLock(str(folder / ".lock")):
        files = readme_files(readme_commands()[0])
        if not (folder / files["model_dir"] / "model.safetensors").is_file():
            model_folder(folder / files["model_dir"])
            assert COLUMNS == {"question": "prompt", "answer": "completion"}  # the README's --columns
            write_data(folder, "qa", {r: files[r] for r in ("forget", "retain", "holdout")})
            write_data(folder / "chat", "chat")
            write_data(folder / "text", "text")
    return folder


def test_the_shipped_model_is_the_current_recipes():
    """Else the job fixture trains it each session (correct, but 150 steps slower)."""
    assert shipped_is_current(), "tests/own_job_files.py's recipe changed: run `python tests/own_job_files.py --ship`"


def finished_run(out: Path, method: str) -> dict:
    runs = [json.loads(p.read_text()) for p in sorted((out / method).glob("version_*/run.json"))]
    finished = [r for r in runs if r["status"] == "finished"]
    assert finished, runs
    return finished[-1]


def network_state(ckpt: str) -> dict:
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    return {k.removeprefix("network.model."): v for k, v in state.items() if k.startswith("network.model.")}


def test_the_readme_commands_run_hamu_and_ofmu_to_a_verdict_a_hf_folder_and_tensorboard(job, subprocess_env, prefork):
    """HAMU's run, a process of its own, is also pre-empted as its final verdict starts (after training there is no
    step boundary to wait for, and at 7B the verdict takes minutes before a cluster's SIGKILL): it ends at once with
    128 + 15 and no verdict, its last checkpoint at the final step; the printed resume command then restores it there
    (no step trained again) and gives the verdict checked below."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForCausalLM

    commands = readme_commands()
    methods = [c[c.index("--method") + 1] for c in commands]
    assert methods == ["hamu", "ofmu"]
    for command, method in zip(commands, methods):
        if method == "hamu":
            proc = _preempted_at_the_final_verdict_then_resumed([*command, *QUICK], job, subprocess_env, prefork)
        else:
            proc = cli_here([*command, *QUICK, "--model.init_args.inner_steps=2"], job, check=True)
        assert "Reference-free verification:" in proc.stdout and "- margins: calibrated" in proc.stdout
        out = job / command[command.index("--out") + 1]
        run = finished_run(out, method)
        folder = Path(run["final_model"])
        verdict = json.loads((folder.parent / "holdout_verification.json").read_text())
        full = verdict["after"]["full"]
        assert full["parts"]["relearning"] is not None  # the full verdict, relearning included
        assert full["decision"] in ("forgotten", "not forgotten", "undecided") and full["power"]["none"]
        assert "- power, before: " in proc.stdout and "- power, relearning: " in proc.stdout  # stated, every part
        assert "not measured on your model" in verdict["margins_from"]
        hf = AutoModelForCausalLM.from_pretrained(folder)  # plain transformers, nothing of lit-unlearn
        final = network_state(run["final_checkpoint"])
        mine = hf.state_dict()
        assert set(final) <= set(mine) and all(torch.equal(final[k], mine[k]) for k in final)
        events = EventAccumulator(str(folder.parent)).Reload()
        assert any(t.startswith("verify/") for t in events.Tags()["scalars"])


def _preempted_at_the_final_verdict_then_resumed(command: list[str], job: Path, env: dict, prefork):
    out = job / command[command.index("--out") + 1] / command[command.index("--method") + 1]
    cut = cli_process([*command, "--trainer.callbacks+=signal_injector.SignalAtFinalVerdict"], job, env,
                      check=False, prefork=prefork)
    assert cut.returncode == 128 + signal.SIGTERM, cut.stdout[-3000:] + cut.stderr[-3000:]
    steps = int(next(a for a in command if a.startswith("--trainer.max_steps=")).split("=")[1])
    assert f"received SIGTERM after training (step {steps})" in cut.stdout
    assert "Reference-free verification:" not in cut.stdout  # stopped, not finished
    folder = max(out.glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "interrupted" and record["interrupted_at_step"] == steps
    last = torch.load(folder / "checkpoints/last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == steps  # the resume point: training's end
    hint = re.search(r"resume with: lit-unlearn (.*)$", cut.stdout, re.M)
    resumed = cli_process([a for a in shlex.split(hint.group(1)) if "SignalAtFinalVerdict" not in a], job, env,
                          prefork=prefork)
    assert f"resuming {folder.relative_to(job)}" in resumed.stdout, resumed.stdout[:3000]  # at its last step: no training
    return resumed


@pytest.mark.parametrize("style, options", [("chat", ["--data-format", "chat"]),
                                            ("text", ["--data-format", "text", "--columns", "text=body"])])
def test_chat_messages_and_plain_documents_take_the_same_command(job, style, options):
    """Without --holdout the run says what it could not check and how to supply it, and still finishes."""
    data = job / style
    proc = cli_here(["unlearn", "--model-dir", str(job / "my-model"), "--forget", str(data / "to_forget.jsonl"),
                     "--retain", str(data / "keep.jsonl"), *options, "--method", "graddiff", "--out",
                     str(job / f"runs_{style}"), "--trainer.max_steps=2", *QUICK[1:]], job, check=True)
    assert "no holdout data was given" in proc.stdout and "give holdout=FILE" in proc.stdout
    run = finished_run(job / f"runs_{style}", "graddiff")
    assert Path(run["final_model"], "model.safetensors").is_file()


def test_sigterm_mid_run_then_the_printed_resume_command_ends_on_the_uninterrupted_weights(job, subprocess_env,
                                                                                           prefork, tmp_path):
    """HAMU, the default method, whose κ₂ stop keeps a count across steps: the resumed run must restore it too."""
    base = ["unlearn", "--model-dir", str(job / "my-model"), "--forget", str(job / "data/forget.jsonl"), "--retain",
            str(job / "data/retain.jsonl"), "--columns", "question=prompt,answer=completion", "--method", "hamu",
            "--trainer.max_steps=6", *QUICK[1:]]
    straight = cli_here([*base, "--out", str(tmp_path / "straight")], tmp_path, check=True)
    assert straight.returncode == 0
    interrupted = [*base, "--out", str(tmp_path / "cut"), "--trainer.callbacks+=signal_injector.SignalAt",
                   "--trainer.callbacks.step=1", "--trainer.callbacks.signal_name=TERM"]
    killed = cli_process(interrupted, tmp_path, subprocess_env, check=False, prefork=prefork)
    assert killed.returncode == 128 + signal.SIGTERM, killed.stderr[-3000:]
    hint = re.search(r"resume with: lit-unlearn (.*)$", killed.stdout, re.M)
    assert hint and hint.group(1).endswith("--ckpt_path last"), killed.stdout[-2000:]
    assert "--ckpt_path last" in (REPO / "README.md").read_text()  # what the README tells a user to add
    resumed = cli_process(shlex.split(hint.group(1)), tmp_path, subprocess_env, prefork=prefork)
    assert "resum" in resumed.stdout.lower()
    a_run, b_run = finished_run(tmp_path / "straight", "hamu"), finished_run(tmp_path / "cut", "hamu")
    assert a_run["global_step"] == b_run["global_step"] >= 2
    a, b = network_state(a_run["final_checkpoint"]), network_state(b_run["final_checkpoint"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_print_config_gives_a_plain_config_that_runs_as_the_same_job(job, tmp_path):
    command = readme_commands()[0]
    printed = cli_here([*command, "--print_config"], job, check=True).stdout
    import yaml

    config = yaml.safe_load(printed)
    assert config["data"]["init_args"]["source"]["class_path"] == "lit_unlearn.data.OwnData"
    assert config["data"]["init_args"]["source"]["init_args"]["columns"] == COLUMNS
    assert config["model"]["class_path"] == "lit_unlearn.modules.HAMUModule"
    (tmp_path / "my_job.yaml").write_text(printed)
    proc = cli_here(["unlearn", "--config", str(tmp_path / "my_job.yaml"), "--trainer.max_steps=1",
                     "--print_config"], job, check=True)
    assert yaml.safe_load(proc.stdout)["data"] == config["data"]


# ----- bad input: one line, exit code 2, nothing left on disk ---------------------------------------------------------
def _own(job, out, **files):
    """The short form on the job's QA files, with any role's file replaced."""
    roles = {"forget": job / "data/forget.jsonl", "retain": job / "data/retain.jsonl",
             "holdout": job / "data/holdout.jsonl", "model_dir": job / "my-model", **files}
    return ["unlearn", *[a for k, v in roles.items() for a in (f"--{k.replace('_', '-')}", str(v))], "--columns",
            "question=prompt,answer=completion", "--out", str(out)]


def _bad_inputs(job, tmp: Path) -> dict[str, tuple[list[str], str]]:
    """{case: (arguments, what the one line must say)}."""
    import shutil

    good = [json.loads(line) for line in (job / "data/forget.jsonl").read_text().splitlines()]
    (tmp / "empty.jsonl").write_text("")
    (tmp / "broken.jsonl").write_text(json.dumps(good[0]) + "\n{not json\n")
    mixed = [dict(r) for r in good]
    mixed[3]["completion"] = 42
    (tmp / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed))
    retain = (job / "data/retain.jsonl").read_text().splitlines()
    (tmp / "overlap.jsonl").write_text("\n".join(retain + [json.dumps({"prompt": good[5]["prompt"].upper(),
                                                                        "completion": good[5]["completion"]})]) + "\n")
    (tmp / "empty_model").mkdir()
    shutil.copytree(job / "my-model", tmp / "no_tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp / "no_tokenizer" / name).unlink()
    shutil.copytree(job / "my-model", tmp / "t5")
    config = json.loads((tmp / "t5/config.json").read_text())
    (tmp / "t5/config.json").write_text(json.dumps({**config, "model_type": "t5"}))  # an encoder-decoder
    (tmp / "a_file").write_text("")
    out = tmp / "runs"
    return {
        "missing file": (_own(job, out, forget=tmp / "nope.jsonl"), "nope.jsonl not found"),
        "empty file": (_own(job, out, retain=tmp / "empty.jsonl"), "holds no records"),
        "unparseable file": (_own(job, out, holdout=tmp / "broken.jsonl"), "line 2 is not valid JSON"),
        "missing column": (_own(job, out)[:-4] + ["--columns", "question=query,answer=completion", "--out", str(out)],
                           "has no column 'query'"),
        "mixed types": (_own(job, out, forget=tmp / "mixed.jsonl"), "record 3 is a int"),
        "forget/retain overlap": (_own(job, out, retain=tmp / "overlap.jsonl"), "1 forget item(s) also stand in the "
                                                                               "retain set (0 exact, 1 equal after"),
        "empty model folder": (_own(job, out, model_dir=tmp / "empty_model"), "empty_model is empty"),
        "missing tokenizer": (_own(job, out, model_dir=tmp / "no_tokenizer"), "has no tokenizer"),
        "unsupported architecture": (_own(job, out, model_dir=tmp / "t5"), "model_type 't5' is not a "
                                                                             "transformers causal LM"),
        "more GPUs than present": (_own(job, out) + ["--setup", "gpu"], "this machine has none"),
        "unwritable output": (_own(job, tmp / "a_file" / "runs"), "a_file is a file, not a folder"),
        "global batch over 3 processes": (_own(job, out) + ["--trainer.accelerator=cpu", "--trainer.devices=3",
                                                            "--trainer.strategy=ddp"], "make it a multiple of 3"),
        "micro-batches that do not split": (_own(job, out) + ["--data.init_args.micro_batch_size=5"],
                                            "equal micro-batches of at most 5"),
    }


def test_bad_input_on_the_own_data_path_is_one_line_exit_2_and_nothing_on_disk(job, tmp_path):
    for case, (args, needle) in _bad_inputs(job, tmp_path).items():
        out = Path(args[args.index("--out") + 1])
        proc = cli_here(args, tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (case, proc.returncode, proc.stderr[-2000:])
        assert needle in lines[0], (case, lines[0])
        assert not out.exists() or not any(out.rglob("*")), (case, list(out.rglob("*")))


def test_under_two_processes_every_rank_fails_the_same_check_and_none_hangs(job, tmp_path, subprocess_env):
    """Two ranks started as a launcher (torchrun, srun) starts them: each runs the preflight on the same files,
    so both exit with the same one line instead of one waiting at a collective for the other."""
    import socket
    import subprocess
    import sys

    args, needle = _bad_inputs(job, tmp_path)["forget/retain overlap"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(subprocess_env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                   LOCAL_RANK=str(rank), NODE_RANK="0", LOCAL_WORLD_SIZE="2", GROUP_RANK="0", TORCHELASTIC_RUN_ID="t")
        procs.append(subprocess.Popen([sys.executable, "-m", "lit_unlearn.cli", *args, "--trainer.accelerator=cpu",
                                       "--trainer.devices=2", "--trainer.strategy=ddp"], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=120)  # a hung rank fails here
        assert proc.returncode == 2 and needle in err, (rank, proc.returncode, err[-2000:])


def test_the_job_under_zero3_on_two_cpu_processes_exports_the_one_process_update(job, subprocess_env, prefork,
                                                                                  tmp_path):
    """--setup zero3 with the GPU parts swapped for CPU ones (gloo, float32), each process's share passed in two
    micro-batches: the verdict and the target stop say they wait for the exported model, and the export gathers
    the partitions into the same weights one process reaches in one pass."""
    from transformers import AutoModelForCausalLM

    from helpers import assert_same_update

    command = [*readme_commands()[0][:-2], "--method", "graddiff", "--trainer.max_steps=2", *QUICK[1:]]
    cpu = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.precision=32-true",
           "--model.init_args.network.init_args.dtype=float32",
           "--model.init_args.network.init_args.gradient_checkpointing=false",
           "--trainer.strategy.class_path=lit_unlearn.distributed.cpu_deepspeed.CPUDeepSpeedStrategy",
           "--trainer.strategy.init_args.config=" + json.dumps(
               {"zero_optimization": {"stage": 3}, "gradient_clipping": 0.0, "zero_allow_untested_optimizer": True,
                "train_micro_batch_size_per_gpu": 1})]
    at = command.index("--holdout")  # the one-process run is read for its weights only: no verdict needed
    one = cli_here([*command[:at], *command[at + 2:], "--out", str(tmp_path / "one")], job, check=True)
    zero3 = cli_process([*command, "--out", str(tmp_path / "zero3"), "--setup", "zero3", *cpu,
                         "--data.init_args.micro_batch_size=2"], job, subprocess_env, prefork=prefork)
    assert "no verdict in this run: the weights are ZeRO-3 partitioned" in zero3.stdout
    assert "each of the 2 processes computes 4 retain + 4 forget items per step (the global 8 + 8)" in zero3.stdout
    assert "in 2 micro-batches of 2 retain + 2 forget items (micro_batch_size 2)" in zero3.stdout
    assert "lit-unlearn audit" in zero3.stdout and one.returncode == 0
    start = AutoModelForCausalLM.from_pretrained(job / "my-model").state_dict()
    a = AutoModelForCausalLM.from_pretrained(finished_run(tmp_path / "one", "graddiff")["final_model"]).state_dict()
    b = AutoModelForCausalLM.from_pretrained(finished_run(tmp_path / "zero3", "graddiff")["final_model"]).state_dict()
    compared, moved = assert_same_update(a, b, start, tol=1e-3)
    assert compared == len(a) and moved > compared // 2
    # the verdict the run pointed at, on the exported model, from the user's own files (one relearning condition
    # and given margins: the own-file path is under test here; the README test gives the calibrated full verdict)
    files = readme_files(command)
    (tmp_path / "quick_audit.yaml").write_text("relearn_lrs: [1.0e-3]\nrelearn_steps: [10]\ndelta: 0.3\n"
                                               "delta_author: 0.4\nn_boot: 200\n")
    audit = cli_here(["audit", "--model", finished_run(tmp_path / "zero3", "graddiff")["final_model"], "--forget",
                      files["forget"], "--holdout", files["holdout"], "--columns", "question=prompt,answer=completion",
                      "--target", files["model_dir"], "--out", str(tmp_path / "audit"), "--device", "cpu",
                      "--config", str(tmp_path / "quick_audit.yaml")], job, check=True)
    assert "AUDIT: " in audit.stdout and "paraphrase probe is skipped" in audit.stdout
    assert json.loads((tmp_path / "audit/audit.json").read_text())["results"]["target"]["verdict"]["parts"]


@pytest.mark.parametrize("name, strategy", [("llama2_7b_one_gpu", None), ("llama2_7b_zero3", "DeepSpeedStrategy")])
def test_the_example_yamls_are_the_job_for_one_gpu_and_for_zero3(name, strategy, tmp_path):
    """About 20 lines each; they extend own_hamu (the default preset is not beneath them), and on a machine without
    GPUs they stop at the first check, in one line."""
    import yaml

    path = REPO / "examples" / f"{name}.yaml"
    assert len(path.read_text().splitlines()) <= 25
    config = yaml.safe_load(cli_here(["unlearn", "--config", str(path), "--print_config"], tmp_path,
                                     check=True).stdout)
    assert config["model"]["class_path"] == "lit_unlearn.modules.HAMUModule"
    assert config["model"]["init_args"]["network"]["init_args"]["name_or_path"] == "/models/my-llama-2-7b"
    assert config["model"]["init_args"]["target_ckpt"] is None  # nothing of the digits preset
    assert config["data"]["init_args"]["source"]["init_args"]["holdout"] == "/data/me/holdout.jsonl"
    if strategy:
        assert config["trainer"]["strategy"]["class_path"].endswith(strategy)
    if not torch.cuda.is_available():
        proc = cli_here(["unlearn", "--config", str(path)], tmp_path)
        assert proc.returncode == 2 and "this machine has none" in proc.stderr
