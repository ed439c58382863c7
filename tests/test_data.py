import pickle

import numpy as np
import pytest
import torch

from lit_unlearn.data import (
    ArrayDataset,
    Cifar10Source,
    ClassForget,
    DigitsSource,
    IndexForget,
    MixtureForget,
    PairedBatchStream,
    RandomForget,
    ResumableDataLoader,
    UnlearningDataModule,
)


def _ds(n, offset=0):
    return ArrayDataset(torch.arange(offset, offset + n, dtype=torch.float32).view(n, 1, 1, 1), torch.zeros(n))


def _ids(batch):
    return batch[0].flatten().long().tolist()


def test_every_step_pairs_full_batches_and_longer_side_covers_its_data_once():
    stream = PairedBatchStream(_ds(50), _ds(7, offset=1000), retain_batch_size=8, forget_batch_size=3, seed=1)
    assert len(stream) == 7  # ceil(50/8)=7 vs ceil(7/3)=3
    batches = [stream.batch(k) for k in range(len(stream))]
    assert all(len(_ids(r)) == 8 and len(_ids(f)) == 3 for r, f in batches)
    retain_seen = [i for r, _ in batches for i in _ids(r)]
    assert set(range(50)) <= set(retain_seen)  # 56 positions: all 50 once, 6 from the next permutation
    forget_seen = [i - 1000 for _, f in batches for i in _ids(f)]
    # The shorter side cycles through fresh permutations: each block of 7 positions is a permutation.
    for c in range(len(forget_seen) // 7):
        assert sorted(forget_seen[7 * c:7 * c + 7]) == list(range(7))


def test_shuffling_is_seeded_independent_and_changes_with_epoch():
    a = PairedBatchStream(_ds(40), _ds(40), 10, 10, seed=3)
    b = PairedBatchStream(_ds(40), _ds(40), 10, 10, seed=3)
    r0, f0 = a.global_indices(0, epoch=0)
    assert np.array_equal(r0, b.global_indices(0, epoch=0)[0])  # reproducible
    assert not np.array_equal(r0, f0)  # retain and forget use independent permutations
    assert not np.array_equal(r0, a.global_indices(0, epoch=1)[0])  # new order each epoch
    c = PairedBatchStream(_ds(40), _ds(40), 10, 10, seed=4)
    assert not np.array_equal(r0, c.global_indices(0, epoch=0)[0])


def test_rank_slices_reassemble_the_global_batch_at_any_world_size():
    single = PairedBatchStream(_ds(64), _ds(16), 8, 4, seed=0, rank=0, world_size=1)
    ranks = [PairedBatchStream(_ds(64), _ds(16), 8, 4, seed=0, rank=r, world_size=2) for r in range(2)]
    for step in range(len(single)):
        r1, f1 = single.local_indices(step)
        parts = [s.local_indices(step) for s in ranks]
        assert sorted(np.concatenate([p[0] for p in parts])) == sorted(r1)
        assert sorted(np.concatenate([p[1] for p in parts])) == sorted(f1)
        assert len(parts[0][0]) == len(parts[1][0]) == 4
    bad = PairedBatchStream(_ds(64), _ds(16), 8, 3, rank=0, world_size=2)
    with pytest.raises(ValueError, match="not divisible by the world size"):
        bad.local_indices(0)


def test_loader_resumes_mid_epoch_and_workers_keep_the_order():
    def loader(workers=0):
        s = PairedBatchStream(_ds(60), _ds(9, 500), 6, 3, seed=7)
        return ResumableDataLoader(s, num_workers=workers)

    straight = loader()
    full = [(_ids(r), _ids(f)) for r, f in straight]
    second_epoch = [(_ids(r), _ids(f)) for r, f in straight]  # the same loader continues with epoch 1
    assert len(full) == len(second_epoch) == 10 and full != second_epoch
    first = loader()
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    assert (state["total"], state["epoch"], state["consumed"]) == (4, 0, 4)
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [(_ids(r), _ids(f)) for r, f in resumed]
    assert rest == full[4:]
    # After the partial epoch, the next pass is the whole of epoch 1: nothing replayed, nothing skipped.
    assert [(_ids(r), _ids(f)) for r, f in resumed] == second_epoch
    # An abandoned pass (a run stopped at max_steps) is continued, not restarted, by the next iteration.
    it = iter(first)
    assert [(_ids(r), _ids(f)) for r, f in [next(it) for _ in range(2)]] == full[4:6]
    older = loader()
    older.load_state_dict({"epoch": 1, "consumed": 3, "seed": 7})  # a state without "total"
    assert older.position == (1, 3)
    with_workers = [(_ids(r), _ids(f)) for r, f in loader(workers=2)]
    assert with_workers == full
    wrong_seed = loader()
    with pytest.raises(ValueError, match="seed"):
        wrong_seed.load_state_dict({**state, "seed": 99})


def test_batch_larger_than_dataset_uses_the_full_set():
    with pytest.warns(UserWarning, match="exceeds the forget set"):
        s = PairedBatchStream(_ds(20), _ds(3), 5, 8)
    assert len(_ids(s.batch(0)[1])) == 3


def test_forget_set_builders():
    labels = np.repeat(np.arange(5), 20)  # 100 examples, 20 per class
    f, r = ClassForget(2).split(labels)
    assert np.all(labels[f] == 2) and f.size == 20 and r.size == 80
    f, r = RandomForget(fraction=0.1, seed=0).split(labels)
    assert f.size == 10 and np.array_equal(f, RandomForget(fraction=0.1, seed=0).split(labels)[0])
    for rho in (0.0, 0.25, 0.5, 0.75):
        f, r = MixtureForget(forget_class=1, rho=rho, size=20, seed=0).split(labels)
        assert f.size == 20
        assert (labels[f] != 1).sum() == round(rho * 20)  # ρN drawn from the other classes
        assert np.intersect1d(f, r).size == 0 and f.size + r.size == 100
    # ρ-mixture at ρ = 0 with the default size is class forgetting.
    assert np.array_equal(MixtureForget(1, 0.0).split(labels)[0], ClassForget(1).split(labels)[0])


def test_forget_split_errors_say_what_is_wrong():
    labels = np.repeat(np.arange(3), 4)
    with pytest.raises(ValueError, match="no training examples"):
        ClassForget(7).split(labels)
    with pytest.raises(ValueError, match="forget set is empty"):
        IndexForget([]).split(labels)
    with pytest.raises(ValueError, match="both the forget and the retain set"):
        IndexForget([0, 1], retain=[1, 2, 3]).split(labels)
    with pytest.raises(ValueError, match="retain set is empty"):
        IndexForget(list(range(12))).split(labels)
    with pytest.raises(ValueError, match="rho"):
        MixtureForget(0, rho=1.5)
    with pytest.raises(ValueError, match="only 4 exist"):
        MixtureForget(0, rho=0.0, size=6).split(labels)
    with pytest.raises(ValueError, match="forget set is empty"):
        PairedBatchStream(_ds(3), _ds(0), 2, 2)


def test_unlearning_datamodule_on_digits():
    dm = UnlearningDataModule(DigitsSource(seed=0), ClassForget(3), retain_batch_size=64, forget_batch_size=16)
    dm.setup()
    assert set(dm.eval_split_names) == {"forget", "retain", "test", "test_forget_class", "test_other_classes"}
    assert torch.all(dm.eval_sets["forget"].labels == 3) and not torch.any(dm.eval_sets["retain"].labels == 3)
    assert len(dm.eval_sets["forget"]) + len(dm.eval_sets["retain"]) == len(DigitsSource(seed=0).load().train)
    retain, forget = next(iter(dm.train_dataloader()))
    assert retain[0].shape == (64, 1, 8, 8) and forget[0].shape == (16, 1, 8, 8)
    assert torch.all(forget[1] == 3)


def _write_cifar_fixture(folder, n_per_file=4):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for k, name in enumerate(files):
        data = rng.integers(0, 256, size=(n_per_file, 3072), dtype=np.uint8)
        labels = [(k + j) % 10 for j in range(n_per_file)]
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode()}, fh)
    return files


def test_cifar10_loader_reads_the_python_pickles(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar_fixture(folder)
    splits = Cifar10Source(str(tmp_path)).load()  # the parent folder works too
    assert splits.train.images.shape == (20, 3, 32, 32) and splits.test.images.shape == (4, 3, 32, 32)
    with open(folder / "data_batch_1", "rb") as fh:
        raw = pickle.load(fh, encoding="bytes")
    # Row-major CIFAR layout: the first 1024 bytes are the red channel; standardised with CIFAR's mean/std.
    red = raw[b"data"][0, :1024].reshape(32, 32).astype(np.float32) / 255.0
    np.testing.assert_allclose(splits.train.images[0, 0].numpy(), (red - 0.4914) / 0.2470, rtol=1e-5)
    assert splits.train.labels[:4].tolist() == raw[b"labels"]


def test_cifar10_missing_files_give_instructions(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
        Cifar10Source(str(tmp_path / "nowhere")).load()
