"""Verification against the retrained model: target grammar, the verifier's numbers against direct computation,
the cached retrained reference, and the stopping callback (stop step, closest weights, feasibility of the
controller, state)."""

import copy

import numpy as np
import pytest
import torch
from helpers import digits_dm, quick_trainer
from sklearn.metrics import roc_auc_score

from lit_unlearn.callbacks import ForgettingVerification, QuotaController, StopAtTarget
from lit_unlearn.data import ClassForget, DigitsSource
from lit_unlearn.core.errors import UserError
from lit_unlearn.models import CifarResNet
from lit_unlearn.modules import GradDiffModule, HAMUModule
from lit_unlearn.verification import ClassifierVerifier, ForgetTarget, RetrainedReference, TrainingRecipe
from lit_unlearn.launch.runs import Launched, fit_run, train_classifier
from lit_unlearn.verification.targets import parse_targets

NET = {"class_path": "lit_unlearn.models.CifarResNet", "init_args": {"depth": 8, "num_classes": 10, "in_channels": 1}}
RECIPE = TrainingRecipe(epochs=2, lr=1e-3, batch_size=128, seed=0, network=NET)


# ----- targets -----------------------------------------------------------------------------------------------------
def test_target_grammar_and_semantics():
    t = ForgetTarget.parse("forget_acc <= 0.05")
    assert (t.metric, t.op, t.value) == ("forget_acc", "<=", 0.05) and not t.needs_reference
    assert t.met(0.05) and not t.met(0.06)
    assert t.distance(0.0) == pytest.approx(0.05)  # overshoot past the threshold
    auc = ForgetTarget.parse("forget_vs_retrain_auc <= 0.6")
    assert auc.needs_reference and auc.distance(0.55) == pytest.approx(0.05)  # distance to the ideal 0.5
    band = ForgetTarget.parse("ua within 0.05 of retrain")
    ref = {"ua": 1.0}
    assert band.met(0.96, ref) and not band.met(0.94, ref) and band.distance(0.96, ref) == pytest.approx(0.04)
    pct = ForgetTarget.parse("forget_loss_median within 25% of retrain")
    assert pct.met(7.5, {"forget_loss_median": 6.0}) and not pct.met(7.6, {"forget_loss_median": 6.0})
    assert ForgetTarget.parse("delta_forget_loss>=2").met(2.0)
    with pytest.raises(UserError, match="did you mean 'forget_acc'"):
        ForgetTarget.parse("forget_accc <= 0.1")
    with pytest.raises(UserError, match="cannot read the target"):
        ForgetTarget.parse("forget_acc about 0.1")
    with pytest.raises(UserError, match="needs the retrained model"):
        band.met(0.9, None)
    both = parse_targets("avg_gap <= 0.03 and forget_vs_retrain_auc <= 0.6")
    assert [t.metric for t in both] == ["avg_gap", "forget_vs_retrain_auc"]
    with pytest.raises(UserError, match="mixes classifier and TOFU"):
        parse_targets("ua <= 0.5 and forget_quality >= 0.1")


# ----- the verifier ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    source, root = DigitsSource(seed=0), tmp_path_factory.mktemp("nets")
    target = train_classifier(RECIPE, source, root=root / "target")
    retrained = train_classifier(RECIPE, source, ClassForget(0), root=root / "retrained")
    return target.network.eval(), retrained.network.eval()


def test_verifier_matches_a_direct_computation(nets):
    target, retrained = nets
    dm = digits_dm()
    dm.setup("fit")
    v = ClassifierVerifier(dm.eval_sets)
    ref = v.measure(retrained)
    m = v.measure(target, reference=ref, initial_forget_loss=0.0).scalars

    def direct(net, split):
        ds = dm.eval_sets[split]
        with torch.no_grad():
            logits = net(ds.images).double()
        loss = torch.nn.functional.cross_entropy(logits, ds.labels, reduction="none").numpy()
        return loss, (logits.argmax(1) == ds.labels).double().numpy()

    fl, fa = direct(target, "forget")
    rl, _ = direct(retrained, "forget")
    assert m["ua"] == pytest.approx(1 - fa.mean()) and m["forget_loss"] == pytest.approx(fl.mean())
    assert m["ra"] == pytest.approx(direct(target, "retain")[1].mean())
    assert m["ta"] == pytest.approx(direct(target, "test")[1].mean())
    raw = roc_auc_score(np.r_[np.zeros(len(rl)), np.ones(len(fl))], np.r_[rl, fl])
    assert m["forget_vs_retrain_auc_raw"] == pytest.approx(raw, abs=1e-12)
    assert m["forget_vs_retrain_auc"] == pytest.approx(max(raw, 1 - raw), abs=1e-12)
    assert m["avg_gap"] == pytest.approx(np.mean([abs(m[k] - ref.scalars[k]) for k in ("ua", "ra", "ta", "mia_efficacy")]))
    # The retrained model never saw class 0: its MIA-efficacy on D_f is high, the target's low.
    assert ref.scalars["mia_efficacy"] > 0.8 > m["mia_efficacy"]
    # A partial measurement computes only what is asked, and agrees.
    only = v.measure(target, reference=ref, only=["forget_vs_retrain_auc"]).scalars
    assert only["forget_vs_retrain_auc"] == m["forget_vs_retrain_auc"] and "ra" not in only


def test_reference_is_trained_once_per_setting_and_cached(tmp_path):
    from types import SimpleNamespace

    dm = digits_dm()
    dm.setup("fit")
    module = SimpleNamespace(target_ckpt=None, network_spec=None)
    trained = []

    def train(recipe, dataset, forget, network_spec, root):
        trained.append(root)
        return train_classifier(recipe, dataset, forget, network_spec, root).network

    def ensure_retrained(reference, module, datamodule):
        return reference.ensure(module, datamodule, train)

    network = CifarResNet(depth=8, num_classes=10, in_channels=1)
    ref = RetrainedReference(recipe={"epochs": 1, "network": NET}, cache_dir=str(tmp_path))
    kw = dict(target_ckpt=None, network_spec=None, dataset=dm.dataset, forget=dm.forget,
              forget_indices=dm.forget_indices, n_train=len(dm.forget_indices) + len(dm.retain_indices), log=print)
    with pytest.raises(UserError, match="no retrained reference cached"):
        ref.load(network, **kw)  # loading never trains: the launch path does, before the run
    assert ensure_retrained(ref, module, dm)
    a = ref.load(network, **kw)
    assert ref.info["trained"] and len(list(tmp_path.iterdir())) == 1
    assert not ensure_retrained(ref, module, dm)  # cached
    b = ref.load(network, **kw)
    assert not ref.info["trained"]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    other = SimpleNamespace(dataset=dm.dataset, forget=dm.forget, forget_indices=dm.forget_indices[:-1],
                            retain_indices=dm.retain_indices)  # another forget set is another reference
    assert ensure_retrained(ref, module, other)
    ref.load(network, **{**kw, "forget_indices": other.forget_indices,
                         "n_train": len(other.forget_indices) + len(other.retain_indices)})
    assert len(list(tmp_path.iterdir())) == 2 and len(trained) == 2
    with pytest.raises(UserError, match="no target_ckpt"):
        RetrainedReference(cache_dir=str(tmp_path)).load(network, **kw)
    with pytest.raises(UserError, match="unknown training-recipe keys"):
        RetrainedReference(recipe={"epochz": 1}, cache_dir=str(tmp_path)).load(network, **kw)


# ----- the stopping callback ---------------------------------------------------------------------------------------
def _module(nets, cls=HAMUModule, **kw):
    target, _ = nets
    net = copy.deepcopy(target)
    module = cls(net, **kw)
    module.run_report.enabled = False
    return module


def test_stops_at_the_first_met_evaluation_and_ends_on_the_closest_weights(nets, tmp_path):
    """forget_loss rises monotonically under GradDiff; with patience 3 the run goes 3 evaluations past the first
    met one, and must end on the first met weights (the least overshoot), equal to a plain run of that length."""
    threshold = 1.0
    probe = []

    class Probe(StopAtTarget):  # records the true full-set forget loss after every step
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            probe.append(self.source.target_values(trainer, pl_module, ["forget_loss"])["forget_loss"])
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    stop = Probe(f"forget_loss >= {threshold}", every_n_steps=2, patience=3)
    module = _module(nets, GradDiffModule, lr=0.002)
    quick_trainer(60, callbacks=[stop], limit_val_batches=0).fit(module, digits_dm(seed=0))
    evaluated = list(range(2, len(probe) + 1, 2))
    first = next(s for s in evaluated if probe[s - 1] >= threshold)
    assert stop.first_met_step == first
    assert stop.stopped_step == first + 2 * 3 == module.global_step
    assert stop.ended_on_step == first and module.run_report.ended_on_step == first
    # The final weights are those after `first` steps of an identical run.
    replay = _module(nets, GradDiffModule, lr=0.002)
    quick_trainer(first, limit_val_batches=0).fit(replay, digits_dm(seed=0))
    for (k, a), b in zip(module.network.state_dict().items(), replay.network.state_dict().values()):
        assert torch.equal(a, b), k


def test_a_target_never_met_ends_on_the_closest_and_says_so(nets):
    stop = StopAtTarget("forget_acc <= 0.0", every_n_steps=3)
    module = _module(nets, GradDiffModule, lr=1e-4)  # far too small to forget anything in 9 steps
    quick_trainer(9, callbacks=[stop], limit_val_batches=0).fit(module, digits_dm())
    assert stop.first_met_step is None and "not met" in stop.summary()
    closest = min(r["distance"] for r in stop.history)
    assert stop.ended_on_step == max(r["step"] for r in stop.history if r["distance"] == closest)  # ties: latest


def test_bad_targets_say_what_is_wrong(nets, tmp_path):
    with pytest.raises(UserError, match="retrained reference"):
        module = _module(nets, eta=0.05, quota=1e-3)
        quick_trainer(2, callbacks=[StopAtTarget("ua within 0.05 of retrain")]).fit(module, digits_dm())
    with pytest.raises(UserError, match="already met before unlearning"):
        module = _module(nets, eta=0.05, quota=1e-3)
        quick_trainer(2, callbacks=[StopAtTarget("retain_acc >= 0.5")], limit_val_batches=0).fit(module, digits_dm())
    with pytest.raises(UserError, match="unknown target metric"):
        StopAtTarget("forget_quallity >= 0.1")


def test_quota_controller_keeps_every_step_feasible_and_steers_to_the_goal(nets, tmp_path):
    goal = 3.0
    seen = []

    class Watch(QuotaController):
        def quota(self, request):
            q, eta = super().quota(request)
            seen.append((q, eta, self.last["quota_limit"], request))
            return q, eta

    ctl = Watch(horizon=5, goal=goal)
    module = _module(nets, eta=0.05, quota=1e-3)
    steps = []
    module.register_update_guard(lambda step: steps.append(step) or True)
    quick_trainer(40, callbacks=[ctl], limit_val_batches=0).fit(module, digits_dm())
    assert len(seen) == 40
    for (q, eta, limit, _), step in zip(seen, steps):
        assert q <= 0.9 * limit + 1e-15 and eta <= 0.05
        assert step.branch_counts()["infeasible"] == 0
    losses = [r.loss_forget for *_, r in seen]
    assert max(losses) < 1.5 * goal and losses[-1] > 0.5 * goal  # approached, not overshot far
    assert ctl.state_dict()["goal"] == goal


def test_verification_reports_before_after_and_retrained(nets, tmp_path):
    dm = digits_dm()
    module = _module(nets, eta=0.05, quota=1e-3)
    module.run_report.enabled = True
    ref = RetrainedReference(recipe={"epochs": 2, "network": NET}, cache_dir=str(tmp_path / "cache"))
    ver = ForgettingVerification(reference=ref)
    trainer = quick_trainer(6, callbacks=[ver], limit_val_batches=0, default_root_dir=str(tmp_path))
    fit_run(Launched(trainer, module, dm))  # the launch path trains the reference first
    v = module.run_report.verification
    for key in ("forget_vs_retrain_auc", "mia_efficacy", "mia_efficacy_retrain", "ua", "ua_retrain", "avg_gap"):
        assert v[key] is not None, key
    assert v["ua_before"] < 0.02 and v["ua_retrain"] == pytest.approx(1.0)  # the target knew class 0; the retrained never saw it
    assert module.run_report.reference_eval["forget"]["acc"] == pytest.approx(0.0)
