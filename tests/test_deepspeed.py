"""HAMU, OFMU, the LLM baselines and the distillation stage under real sharding: DeepSpeed ZeRO-2 and ZeRO-3 with 2
CPU processes (gloo) and DDP make the same update as one process (HAMU's per-layer statistics come from local
gradient slices and one all_reduce; OFMU's finite-difference HVPs run on shards), and sharded checkpoints resume
mid-run, after a normal save or a pre-emption inside a backward pass, to the same weights as an uninterrupted run.

Each launch of 2 processes runs every method in turn (tests/ds_worker.py), and the launches are shared by the tests
below: starting the processes costs far more than the tiny runs themselves."""

import re
import sys

import pytest
import torch

from helpers import assert_same_update
from lit_unlearn.storage.checkpoint_io import checkpoint_is_loadable
from lit_unlearn.data import generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
from lit_unlearn.models import CausalLM, tiny_llama_config

pytestmark = pytest.mark.slow
pytest.importorskip("deepspeed")
WORKER = __file__.replace("test_deepspeed.py", "ds_worker.py")
METHODS = ["hamu", "ofmu", "simnpo", "idkdpo", "rmu", "graddiff", "distill", "distill_stage"]
# ZeRO-2 passes each process's share (4 retain + 2 forget items) in 2 micro-batches: the same step as one pass
MODES = {"one": [], "zero2": ["--stage", "2", "--devices", "2", "--micro-batch-size", "2"],
         "zero3": ["--stage", "3", "--devices", "2"],
         "ddp": ["--ddp", "--devices", "2"]}


class Launches:
    """Each launch runs once, on first use, and its outputs are shared by every test that reads them."""

    def __init__(self, root, env, prefork):
        self.root, self.env, self.done, self.prefork, self.output = root, env, {}, prefork, {}

    def launch(self, key, *args, expect=0):
        if key not in self.done:
            out = self.root / key
            # rank 0 forked from the pre-imported server (tests/prefork.py), and rank 1 when Lightning asks for it
            proc = self.prefork.run([sys.executable, WORKER, "--data", str(self.root / "data"), "--tokenizer",
                                     str(self.root / "tok"), "--out-dir", str(out), *args], self.root, self.env,
                                    timeout=900)
            assert proc.returncode == expect, proc.stdout[-2000:] + proc.stderr[-4000:]
            self.done[key], self.output[key] = out, proc.stdout + proc.stderr
        return self.done[key]

    def mode(self, name):
        """Every method under one mode; the ZeRO-3 launch also keeps checkpoints every 2 steps."""
        ckpt = ["--ckpt-dir", str(self.root / "zero3" / "ck")] if name == "zero3" else []
        return self.launch(name, *MODES[name], *ckpt, *[a for m in METHODS for a in ("--run", m)])

    def weights(self, mode, name):
        return torch.load(self.mode(mode) / f"{name}.pt", weights_only=True)


@pytest.fixture(scope="module")
def launches(tmp_path_factory, subprocess_env, prefork):
    root = tmp_path_factory.mktemp("ds")
    write_tofu_json(root / "data", n_authors=20, n_questions=4, seed=1)
    s = generate_fictitious_tofu(n_authors=20, n_questions=4, seed=1)
    train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in s.values() for r in rows], root / "tok",
                        vocab_size=300)
    from transformers import AutoTokenizer

    from lit_unlearn.models.hf_export import export_hf

    tok = AutoTokenizer.from_pretrained(root / "tok")  # the distillation's teacher: another tiny Llama
    export_hf(CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=1), tok, root / "teacher")
    # the shared-memory extension DeepSpeed compiles on first use stays in the user's cache across sessions
    return Launches(root, dict(subprocess_env, DS_ACCELERATOR="cpu", DS_WORKER_TEACHER=str(root / "teacher")),
                    prefork)


@pytest.fixture(scope="module")
def vocab(launches):
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(launches.root / "tok"))


def start_weights(vocab, method, teacher=None):
    net = CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0)
    if method == "distill_stage":  # the stage as users run it starts from its teacher's weights
        net = CausalLM(name_or_path=str(teacher))
    if method.startswith("distill"):  # the student starts as the worker's start shrunk half-way to noise
        from lit_unlearn.modules import DistillRobustifyModule

        net = DistillRobustifyModule(net, teacher=str(teacher), alpha=0.5, lr=1e-3, seed=0).network
    start = {n: p.detach() for n, p in net.named_parameters()}
    if method in ("idkdpo", "rmu"):  # the worker moves the weights away from the frozen reference first
        g = torch.Generator().manual_seed(1)
        start = {n: p + 0.02 * torch.randn(p.shape, generator=g) for n, p in start.items()}
    if method == "rmu":  # only the down projections of layers 0..1 move
        start = {n: p for n, p in start.items() if re.search(r"layers\.[01]\.mlp\.down_proj", n)}
    return start


@pytest.mark.parametrize("mode", ["zero2", "zero3", "ddp"])
@pytest.mark.parametrize("method", METHODS)
def test_two_processes_make_one_process_update(launches, vocab, method, mode):
    """HAMU (4 steps), OFMU with finite-difference HVPs and a linear ρ schedule (4 rounds), and SimNPO, IdkDPO,
    RMU and GradDiff with AdamW (2 steps; DeepSpeed wraps the client optimizer as in the 7B benches), and the
    distillation stage (4 steps, AdamW, a cosine schedule, the frozen teacher outside the module tree; and the stage
    as users run it, its strategy from its config, the student gathered and exported) end where one process ends.
    Under ZeRO-3 the frozen reference is sharded: each of the 2 ranks holds half of it. Under ZeRO-2 each rank passes
    its share in 2 micro-batches (gradient accumulation: its partition slices read out and summed)."""
    single, sharded = launches.weights("one", method), launches.weights(mode, method)
    if method == "ofmu":
        assert single.pop("__rho__").item() == sharded.pop("__rho__").item() == pytest.approx(0.2 + 0.3 * 3)
    if mode == "zero3" and method != "distill_stage":  # every parameter is partitioned between passes, so every
        # forward gathers, as at 7B (the stage's run takes the same config; it saves only its exported model)
        assert sharded.pop("__persistent_share__").item() == 0.0
    if "__reference_share__" in single:
        assert single.pop("__reference_share__").item() == 1.0
        share = sharded.pop("__reference_share__").item()
        assert share == pytest.approx(0.5, abs=0.01) if mode == "zero3" else share == 1.0
    if method.startswith("distill"):  # every rank reads the whole batch: the token count is one process's
        assert single.pop("__units__").item() == sharded.pop("__units__").item() > 0
    start = start_weights(vocab, method, launches.root / "teacher")
    one = {k: v for k, v in single.items() if k in start}
    tol = 1e-3 if method == "ofmu" else 1e-4  # finite differences in float32 amplify reduction noise
    compared, moved = assert_same_update(one, {k: sharded[k] for k in one}, start, tol)
    assert compared == len(one) and moved == compared  # every tensor moved


@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_cpu_deepspeed_never_builds_its_shared_memory_extension(launches, mode):
    """CPUDeepSpeedStrategy keeps DeepSpeed from compiling its shm_comm extension (about 76 CPU-s on a clean
    machine; gloo carries the collectives). DeepSpeed prints this line whenever it builds or loads it."""
    launches.mode(mode)
    assert "shm_comm_op built successfully" not in launches.output[mode]


@pytest.fixture(scope="module")
def resumed(launches):
    """HAMU, OFMU and the distillation stage (its token count included) resumed under ZeRO-3 from the straight
    run's step-2 checkpoints, and HAMU resumed from the hpc checkpoint a pre-emption inside step 1's backward pass
    wrote (the launch exits 138)."""
    ck = launches.mode("zero3") / "ck"
    pre = launches.root / "pre"
    launches.launch("preempt", *MODES["zero3"], "--ckpt-dir", str(pre), "--preempt-at", "1", "--run", "hamu",
                    expect=138)
    runs = [f"hamu=hamu@{ck / 'hamu' / 'step=2.ckpt'}", f"ofmu=ofmu@{ck / 'ofmu' / 'step=2.ckpt'}",
            f"hamu_hpc=hamu@{pre / 'hamu' / 'hpc_ckpt_1.ckpt'}", f"distill=distill@{ck / 'distill' / 'step=2.ckpt'}"]
    return launches.launch("resumed", *MODES["zero3"], *[a for r in runs for a in ("--run", r)]), ck, pre


@pytest.mark.parametrize("name, method", [("hamu", "hamu"), ("ofmu", "ofmu"), ("hamu_hpc", "hamu"),
                                          ("distill", "distill")])
def test_zero3_checkpoints_resume_mid_run_exactly(launches, resumed, name, method):
    out, ck, pre = resumed
    assert (ck / method / "step=2.ckpt").is_dir()  # a sharded (per-rank) checkpoint folder
    assert checkpoint_is_loadable(ck / method / "step=2.ckpt")  # its completion marker was written last
    assert checkpoint_is_loadable(pre / "hamu" / "hpc_ckpt_1.ckpt")  # pre-emption saved at the step boundary
    straight = launches.weights("zero3", method)
    again = torch.load(out / f"{name}.pt", weights_only=True)
    for k in straight:
        assert torch.equal(straight[k], again[k]), k


def test_a_zero3_sharded_checkpoint_exports_to_a_hugging_face_folder_with_the_same_logits(launches, vocab, tmp_path):
    """`lit-unlearn export` consolidates the 2-process ZeRO-3 run's sharded checkpoint (HAMU, step 4) on one CPU
    process into safetensors that plain transformers loads, and its logits on real TOFU items equal those of the
    run's final weights (gathered by the run itself) to 1e-6; sharding the files changes nothing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers import cli_here
    from lit_unlearn.data.tofu import QAFormatter, pad_collate
    from lit_unlearn.data.tofu_release import release_split

    ckpt = launches.mode("zero3") / "ck" / "hamu" / "step=4.ckpt"
    base = tmp_path / "base"  # the architecture the worker built from a config, with its tokenizer
    CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0).save_pretrained(base)
    AutoTokenizer.from_pretrained(launches.root / "tok").save_pretrained(str(base))
    final = CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0)
    final.load_state_dict({k: v for k, v in launches.weights("zero3", "hamu").items() if not k.startswith("__")})
    tok = AutoTokenizer.from_pretrained(str(base))
    rows = release_split("forget01")[:8]
    batch = pad_collate(tok.pad_token_id)([QAFormatter(tok).encode(r["question"], r["answer"]) for r in rows])
    with torch.no_grad():
        expected = final(batch["input_ids"], attention_mask=batch["attention_mask"])
    for name, shard in (("one", "5GB"), ("sharded", "200KB")):
        proc = cli_here(["export", str(ckpt), str(tmp_path / name), "--base", str(base), "--max-shard-size", shard],
                        tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        files = sorted(p.name for p in (tmp_path / name).glob("*.safetensors"))
        assert (len(files) == 1) == (name == "one") and (name == "one" or
                                                       (tmp_path / name / "model.safetensors.index.json").is_file())
        model = AutoModelForCausalLM.from_pretrained(tmp_path / name).eval()
        with torch.no_grad():
            got = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    interrupted = tmp_path / "half.ckpt"
    import shutil

    shutil.copytree(ckpt, interrupted)
    next(interrupted.glob("CHECKPOINT_COMPLETE*")).unlink()  # a save that never finished
    proc = cli_here(["export", str(interrupted), str(tmp_path / "no"), "--base", str(base)], tmp_path)
    assert proc.returncode == 2 and "without its completion marker" in proc.stderr and not (tmp_path / "no").exists()

