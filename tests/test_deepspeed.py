"""HAMU under real sharding: DeepSpeed ZeRO-2 and ZeRO-3 with 2 CPU processes (gloo) make the same update as
one process (the per-layer statistics come from local gradient slices and one all_reduce), DDP too, and a
sharded checkpoint resumes mid-epoch to the same weights as an uninterrupted run."""

import re
import subprocess
import sys

import pytest
import torch

from helpers import assert_same_update
from lit_unlearn.checkpoint_io import checkpoint_is_loadable
from lit_unlearn.data import generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
from lit_unlearn.models import CausalLM, tiny_llama_config

pytestmark = pytest.mark.slow
pytest.importorskip("deepspeed")
WORKER = __file__.replace("test_deepspeed.py", "ds_worker.py")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    write_tofu_json(root / "data", n_authors=20, n_questions=4, seed=1)
    s = generate_fictitious_tofu(n_authors=20, n_questions=4, seed=1)
    tok = train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in s.values() for r in rows], root / "tok",
                              vocab_size=300)
    return root, len(tok)


def run(root, out, *extra, env=None):
    proc = subprocess.run([sys.executable, WORKER, "--data", str(root / "data"), "--tokenizer", str(root / "tok"),
                           "--out", str(out), *extra], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return torch.load(out, weights_only=True)


@pytest.fixture
def ds_env(subprocess_env, tmp_path_factory):
    env = dict(subprocess_env, DS_ACCELERATOR="cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(tmp_path_factory.getbasetemp() / "torch_extensions"))
    return env


def _assert_same_update(a, b, start, tol):
    compared, moved = assert_same_update(a, b, start, tol)
    assert compared == len([k for k in a if not k.startswith("__")]) and moved == compared  # every tensor moved


@pytest.mark.parametrize("steps", [3])
def test_zero2_zero3_and_ddp_match_one_process(assets, tmp_path, ds_env, steps):
    root, vocab = assets
    start = {n: p.detach() for n, p in CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0).named_parameters()}
    single = run(root, tmp_path / "one.pt", "--steps", str(steps), env=ds_env)
    for extra in (["--stage", "2"], ["--stage", "3"], ["--ddp"]):
        sharded = run(root, tmp_path / "two.pt", "--steps", str(steps), "--devices", "2", *extra, env=ds_env)
        _assert_same_update(single, sharded, start, tol=1e-4)


def test_ofmu_finite_difference_under_ddp_matches_one_process(assets, tmp_path, ds_env):
    root, vocab = assets
    start = {n: p.detach() for n, p in CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0).named_parameters()}
    single = run(root, tmp_path / "one.pt", "--method", "ofmu", env=ds_env)
    ddp = run(root, tmp_path / "two.pt", "--method", "ofmu", "--devices", "2", "--ddp", env=ds_env)
    _assert_same_update(single, ddp, start, tol=1e-3)  # finite differences in float32 amplify reduction noise


@pytest.mark.parametrize("stage", ["2", "3"])
def test_ofmu_finite_difference_under_zero_matches_one_process(assets, tmp_path, ds_env, stage):
    """OFMU on sharded weights and gradient slices (3 rounds, 2 processes) makes one process's update."""
    root, vocab = assets
    start = {n: p.detach() for n, p in CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0).named_parameters()}
    ofmu = ["--method", "ofmu", "--steps", "3", "--rho-schedule", "--inner-steps", "1"]
    single = run(root, tmp_path / "one.pt", *ofmu, env=ds_env)
    sharded = run(root, tmp_path / "zero.pt", *ofmu, "--stage", stage, "--devices", "2", env=ds_env)
    assert single.pop("__rho__").item() == sharded.pop("__rho__").item() == pytest.approx(0.2 + 0.3 * 2)
    _assert_same_update(single, sharded, start, tol=1e-3)  # finite differences in float32 amplify reduction noise


ALL_MODES = [["--stage", "2"], ["--stage", "3"], ["--ddp"]]


@pytest.mark.parametrize("method, modes", [("simnpo", ALL_MODES), ("idkdpo", ALL_MODES), ("rmu", ALL_MODES),
                                           ("graddiff", ALL_MODES)])
def test_llm_baselines_under_sharding_match_one_process(assets, tmp_path, ds_env, method, modes):
    """SimNPO, IdkDPO, RMU and GradDiff with AdamW (the optimizer DeepSpeed wraps in the 7B benches; 2 steps) make
    one process's update under ZeRO-2/3 and DDP; under ZeRO-3 the frozen reference is sharded: each of the 2
    ranks holds half of it."""
    root, vocab = assets
    single = run(root, tmp_path / "one.pt", "--method", method, "--steps", "2", env=ds_env)
    start = {n: p.detach() for n, p in CausalLM(config=tiny_llama_config(vocab_size=vocab), seed=0).named_parameters()}
    if method in ("idkdpo", "rmu"):
        g = torch.Generator().manual_seed(1)
        start = {n: p + 0.02 * torch.randn(p.shape, generator=g) for n, p in start.items()}
    if method == "rmu":  # only the down projections of layers 0..1 move
        start = {n: p for n, p in start.items() if re.search(r"layers\.[01]\.mlp\.down_proj", n)}
    for extra in modes:
        sharded = run(root, tmp_path / "two.pt", "--method", method, "--steps", "2", "--devices", "2", *extra,
                      env=ds_env)
        if "__reference_share__" in single:
            assert single["__reference_share__"].item() == 1.0
            share = sharded.pop("__reference_share__").item()
            assert share == pytest.approx(0.5, abs=0.01) if extra == ["--stage", "3"] else share == 1.0
        one = {k: v for k, v in single.items() if k in start}
        _assert_same_update(one, {k: sharded[k] for k in one}, start, tol=1e-4)


def test_ofmu_zero3_resumes_mid_schedule_exactly(assets, tmp_path, ds_env):
    root, _ = assets
    common = ["--method", "ofmu", "--steps", "4", "--stage", "3", "--devices", "2", "--rho-schedule", "--inner-steps", "1"]
    straight = run(root, tmp_path / "a.pt", *common, "--ckpt-dir", str(tmp_path / "ck"), env=ds_env)
    resumed = run(root, tmp_path / "b.pt", *common, "--resume", str(tmp_path / "ck" / "step=2.ckpt"), env=ds_env)
    for k in straight:
        assert torch.equal(straight[k], resumed[k]), k


def test_zero3_checkpoint_resumes_mid_epoch_exactly(assets, tmp_path, ds_env):
    root, _ = assets
    common = ["--steps", "4", "--stage", "3", "--devices", "2"]
    straight = run(root, tmp_path / "a.pt", *common, "--ckpt-dir", str(tmp_path / "ck"), env=ds_env)
    assert (tmp_path / "ck" / "step=2.ckpt").is_dir()  # a sharded (per-rank) checkpoint folder
    assert checkpoint_is_loadable(tmp_path / "ck" / "step=2.ckpt")  # its completion marker was written last
    resumed = run(root, tmp_path / "b.pt", *common, "--resume", str(tmp_path / "ck" / "step=2.ckpt"), env=ds_env)
    for k in straight:
        assert torch.equal(straight[k], resumed[k]), k
    # Pre-empted inside a backward pass (2 ranks): the hpc checkpoint is taken at the step boundary, and resuming
    # from it ends bit-equal to the uninterrupted run.
    proc = subprocess.run([sys.executable, WORKER, "--data", str(root / "data"), "--tokenizer", str(root / "tok"),
                           "--out", str(tmp_path / "c.pt"), *common, "--ckpt-dir", str(tmp_path / "pre"),
                           "--preempt-at", "1"], capture_output=True, text=True, timeout=600, env=ds_env)
    assert proc.returncode == 138, proc.stdout[-2000:] + proc.stderr[-3000:]
    hpc = tmp_path / "pre" / "hpc_ckpt_1.ckpt"
    assert checkpoint_is_loadable(hpc)
    again = run(root, tmp_path / "d.pt", *common, "--resume", str(hpc), env=ds_env)
    for k in straight:
        assert torch.equal(straight[k], again[k]), k
