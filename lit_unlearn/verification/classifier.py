"""Measuring a classifier against the retrained gold standard: UA/RA/TA, MIA-efficacy, forget-vs-retrain AUC,
Avg. Gap (the vision-unlearning literature's protocol; the maths is in lit_unlearn.metrics.membership).

    verifier = ClassifierVerifier(datamodule.eval_sets)
    ref = verifier.measure(retrained_network)                       # once per setting
    verifier.measure(unlearned_network, reference=ref)              # {"ua": …, "forget_vs_retrain_auc": …, …}

`measure(..., only=...)` computes just what the named metrics need (e.g. D_f alone for the AUC), so a stopping
rule can evaluate often.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lit_unlearn.core.eval_mode import eval_mode
from lit_unlearn.metrics.metric_units import units_of
from lit_unlearn.metrics.membership import avg_gap, distinguishability_auc, mia_efficacy, output_features

__all__ = ["CLASSIFIER_METRICS", "ClassifierVerifier", "Measures"]

# metric -> the eval splits it needs, and the ones that compare with the retrained model (metric_units)
CLASSIFIER_METRICS: dict[str, tuple[str, ...]] = {n: u.splits for n, u in units_of("classifier").items()}
REFERENCE_METRICS = tuple(units_of("classifier", needs_reference=True))


@dataclass
class Measures:
    """A model's numbers: scalars by metric name, and per-split features (kept for the retrain-relative ones)."""

    scalars: dict[str, float]
    features: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)


class ClassifierVerifier:
    def __init__(self, eval_sets: Mapping[str, Dataset], batch_size: int = 512, mia_feature: str = "confidence") -> None:
        missing = [s for s in ("forget", "retain", "test") if s not in eval_sets]
        if missing:
            raise ValueError(f"verification needs eval sets forget, retain and test; missing {missing}")
        self.eval_sets, self.batch_size, self.mia_feature = dict(eval_sets), batch_size, mia_feature
        # MIA shadow members are the first |test| retain examples: only those are scored when MIA alone is asked.
        self._n_shadow = len(eval_sets["test"])

    @torch.no_grad()
    def logits(self, network: nn.Module, split: str, device, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        ds = self.eval_sets[split]
        n = len(ds) if limit is None else min(limit, len(ds))
        outs, labels = [], []
        with eval_mode(network):
            for start in range(0, n, self.batch_size):
                idx = np.arange(start, min(start + self.batch_size, n))
                x, y = ds.get_batch(idx) if hasattr(ds, "get_batch") else \
                    next(iter(DataLoader(torch.utils.data.Subset(ds, idx.tolist()), batch_size=len(idx))))
                outs.append(network(x.to(device)).double().cpu().numpy())
                labels.append(np.asarray(y.cpu().numpy(), dtype=np.int64))
        return np.concatenate(outs), np.concatenate(labels)

    def measure(self, network: nn.Module, device=None, reference: Measures | None = None,
                initial_forget_loss: float | None = None, only: Iterable[str] | None = None) -> Measures:
        device = device or next(network.parameters()).device
        wanted = list(CLASSIFIER_METRICS) if only is None else list(only)
        unknown = [m for m in wanted if m not in CLASSIFIER_METRICS]
        if unknown:
            raise ValueError(f"unknown classifier metrics {unknown}; known: {sorted(CLASSIFIER_METRICS)}")
        splits = {s for m in wanted for s in CLASSIFIER_METRICS[m] if s in self.eval_sets}
        # Only MIA needs retain examples beyond the shadow slice; RA and Avg. Gap need the whole retain set.
        whole_retain = any(m in wanted for m in ("retain_acc", "ra", "retain_loss", "avg_gap"))
        feats: dict[str, dict[str, np.ndarray]] = {}
        for split in sorted(splits):
            limit = None if split != "retain" or whole_retain else self._n_shadow
            feats[split] = output_features(*self.logits(network, split, device, limit))
        s: dict[str, float] = {}
        for split, f in feats.items():
            s[f"{split}_acc"] = float(f["correctness"].mean())
            s[f"{split}_loss"] = float(f["loss"].mean())
        if "forget" in feats:
            s["ua"] = 1.0 - s["forget_acc"]
            s["forget_loss_median"] = float(np.median(feats["forget"]["loss"]))
            if initial_forget_loss is not None:
                s["delta_forget_loss"] = s["forget_loss"] - initial_forget_loss
        if "retain" in feats and whole_retain:
            s["ra"] = s["retain_acc"]
        else:
            s.pop("retain_acc", None), s.pop("retain_loss", None)  # only the shadow slice was scored
        if "test" in feats:
            s["ta"] = s["test_acc"]
        if {"retain", "test", "forget"} <= feats.keys():
            s["mia_efficacy"] = mia_efficacy(feats["retain"], feats["test"], feats["forget"], self.mia_feature)
        if reference is not None:
            self._relative(s, feats, reference)
        return Measures(s, feats)

    @staticmethod
    def _relative(s: dict[str, float], feats: dict, reference: Measures) -> None:
        ref = reference.features.get("forget")
        if "forget" in feats and ref is not None:
            s["forget_vs_retrain_auc"], s["forget_vs_retrain_auc_raw"] = distinguishability_auc(
                feats["forget"]["loss"], ref["loss"])
            s["forget_vs_retrain_auc_entropy"] = distinguishability_auc(feats["forget"]["entropy"], ref["entropy"])[0]
        if all(k in s for k in ("ua", "ra", "ta", "mia_efficacy")):
            s["avg_gap"] = avg_gap(s, reference.scalars)
