"""Small shared pieces for the module tests."""

import atexit
import os
import shutil
import tempfile

import lightning.pytorch as pl
import torch

from lit_unlearn.data import ClassForget, DigitsSource, UnlearningDataModule


_scratch = {}


def scratch_dir():
    """A fresh folder under this process's scratch root, which is removed when the process that made it exits (a
    forked child inherits the exit hook, so the hook checks the pid: a child's exit must not remove its parent's)."""
    if os.getpid() not in _scratch:
        root = tempfile.mkdtemp(prefix="lit-unlearn-test-")
        _scratch[os.getpid()] = root
        atexit.register(lambda pid=os.getpid(): os.getpid() == pid and shutil.rmtree(root, ignore_errors=True))
    return tempfile.mkdtemp(dir=_scratch[os.getpid()])


def quick_trainer(steps, **kw):
    """A Trainer without logger, checkpoints, progress bar or sanity check (tests pass what they need); what a run
    writes (its results table, trajectory.png) goes to a fresh scratch folder, never the working directory, and is
    removed when the test process ends."""
    kw.setdefault("logger", False)
    kw.setdefault("enable_checkpointing", False)
    kw.setdefault("default_root_dir", scratch_dir())
    return pl.Trainer(max_steps=steps, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, log_every_n_steps=1, **kw)


def digits_dm(retain_batch_size=64, forget_batch_size=32, **kw):
    return UnlearningDataModule(DigitsSource(seed=0), ClassForget(0), retain_batch_size=retain_batch_size,
                                forget_batch_size=forget_batch_size, **kw)


def first_pair(dm):
    """The first (retain, forget) batch pair a fit on `dm` sees."""
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def tiny_mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))


def flat_view(net):
    """(θ as one flat vector, unflat(t) → {name: tensor} for torch.func.functional_call): losses written as
    functions of a single parameter vector, for materialised Hessians and reference reimplementations."""
    names = [n for n, _ in net.named_parameters()]
    shapes = [p.shape for p in net.parameters()]
    theta = torch.cat([p.detach().reshape(-1) for p in net.parameters()])

    def unflat(t):
        out, i = {}, 0
        for n, s in zip(names, shapes):
            out[n] = t[i:i + s.numel()].reshape(s)
            i += s.numel()
        return out

    return theta, unflat


def assert_same_update(a, b, start, tol):
    """Tensor by tensor, b lies within tol·‖a − start‖ (+1e-9) of a: the same update from `start`. Skips entries
    named "__…" (run metadata), integer tensors and BatchNorm running statistics. Returns (compared, moved)."""
    compared = moved = 0
    for k in a:
        if k.startswith("__") or not a[k].is_floating_point() or "running" in k:
            continue
        update = (a[k] - start[k]).norm()
        assert (a[k] - b[k]).norm() <= tol * update + 1e-9, k
        compared += 1
        moved += bool(update > 0)
    return compared, moved


def tiny_tofu(folder, seed, extra_texts=()):
    """A 20-author × 4-question generated TOFU set written to folder/data, and a 400-token BPE tokenizer trained on
    every question with each of its answer variants (and `extra_texts`, e.g. refusals): (splits, tokenizer)."""
    from lit_unlearn.data import generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json

    write_tofu_json(folder / "data", n_authors=20, n_questions=4, seed=seed)
    splits = generate_fictitious_tofu(n_authors=20, n_questions=4, seed=seed)
    texts = [r["question"] + " " + a for rows in splits.values() for r in rows
             for a in [r["answer"], *r.get("perturbed_answer", []), r.get("paraphrased_answer", "")] if a]
    return splits, train_bpe_tokenizer([*texts, *extra_texts], folder / "tok", vocab_size=400)


def cli_here(args, cwd, check=False):
    """`lit-unlearn ARGS` run in this process from folder `cwd`, as a CompletedProcess (returncode, stdout, stderr):
    for tests of what the command says or of a run whose process is not the point, where a new process would only
    add its start-up (about 5 CPU-s of imports). check: a non-zero exit fails the test, with the output."""
    import contextlib
    import io
    import os
    import subprocess

    from lit_unlearn.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(args))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        os.chdir(before)
    if check and code != 0:
        raise AssertionError(f"lit-unlearn {' '.join(map(str, args))} failed ({code}):\n{out.getvalue()[-3000:]}\n"
                             f"{err.getvalue()[-5000:]}")
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def gradient_ascent_on_forget(world, lr: float, steps: int, level: str = "01"):
    """The TOFU world's target after `steps` full-batch steps of plain gradient ascent (Adam, `lr`) on the answers of
    its forget split: a shallowly or (at a high lr) over-forgotten model, written out without any trainer."""
    import torch

    from lit_unlearn.core.batches import logits_and_labels
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.qa_format import QAFormatter, pad_collate
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM

    torch.manual_seed(0)
    net = CausalLM(name_or_path=str(world.target))
    tok = load_tokenizer(str(world.tokenizer))
    fmt, collate = QAFormatter(tok), pad_collate(tok.pad_token_id)
    forget = TofuSource(str(world.data), level).load_split(f"forget{level}")
    batch = collate([fmt.encode(r["question"], r["answer"]) for r in forget])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(steps):
        logits, labels = logits_and_labels(net, batch)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)
        opt.zero_grad()
        (-loss).backward()
        opt.step()
    return net


def cli_process(args, cwd, env, check=True, prefork=None):
    """`lit-unlearn ARGS` as a real process: a fresh interpreter (the one running the tests, not whatever
    `lit-unlearn` is on PATH: CI does not activate the venv), or a child forked from the pre-imported server where
    `prefork` (the fixture, tests/prefork.py) is given. check: a non-zero exit fails the test, with the output."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "lit_unlearn.cli", *args]
    if prefork is not None:
        proc = prefork.run(command, cwd=cwd, env=env, timeout=600)
    else:
        proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"lit-unlearn {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


class PlantedDistribution:
    """A causal LM that answers the given (question, answer) items with every answer token's probability unchanged
    and the rest of each next-token distribution tempered: log q(y_t) = log p(y_t), and the other tokens share
    1 − p(y_t) in proportion to p(v)^(1/T). Every per-token surprisal (so the loss, zlib and Min-K %), the answer NLL's
    gradient and its norm are the wrapped model's; the predictive entropy, the ranks and Min-K %++'s moments are not.
    Built with torch.nn.Module as a base at call time (tests import helpers without torch)."""

    def __new__(cls, network, formatter, rows, temperature: float):
        import torch
        from torch import nn

        class Planted(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = network
                self.temperature = temperature
                self.planted = {tuple(formatter.encode(r["question"], r["answer"])["input_ids"].tolist())
                                for r in rows}
                self.config = getattr(network, "config", None)

            def forward(self, input_ids, attention_mask=None, **kwargs):
                logits = self.inner(input_ids, attention_mask=attention_mask, **kwargs)
                logits = getattr(logits, "logits", logits)
                lengths = (attention_mask.sum(-1) if attention_mask is not None else
                           torch.full((input_ids.shape[0],), input_ids.shape[1]))
                rows_hit = [i for i in range(input_ids.shape[0])
                            if tuple(input_ids[i, :int(lengths[i])].tolist()) in self.planted]
                if not rows_hit:
                    return logits
                out = logits.clone()
                for i in rows_hit:
                    n = int(lengths[i])
                    lp = torch.log_softmax(logits[i, :n - 1].double(), -1)           # positions predicting 1..n-1
                    nxt = input_ids[i, 1:n]
                    target = lp.gather(-1, nxt[:, None])                             # log p(y_t), kept
                    mask = torch.zeros_like(lp, dtype=torch.bool).scatter_(-1, nxt[:, None], True)
                    tempered = torch.log_softmax((lp / self.temperature).masked_fill(mask, -torch.inf), -1)
                    rest = torch.log1p(-target.exp().clamp(max=1 - 1e-12))          # log(1 − p(y_t))
                    new = torch.where(mask, target, rest + tempered)
                    out[i, :n - 1] = new.to(out.dtype)
                return out

        return Planted()


def benchmark_script(name):
    """benchmarks/NAME.py (NAME as "folder/script") as a module, loaded as `python benchmarks/NAME.py` runs it: with
    benchmarks/ on the path (the scripts import benchmarks/report.py and each other through it) and registered
    (dataclasses look their module up)."""
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    module_name = name.replace("/", ".")
    spec = importlib.util.spec_from_file_location(module_name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
