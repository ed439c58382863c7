"""HAMU's statistics and step at the edges of floating point: nearly and exactly colinear gradients, huge and tiny
norms, low-precision gradients. References: exact rational arithmetic (fractions) for small vectors, float64
recomputation of the applied update for large ones."""

from fractions import Fraction

import numpy as np
import pytest
import torch

from lit_unlearn.algorithms import Branch, allocate_quota, combine_arithmetic, combine_into, hamu_step, tensor_stats
from lit_unlearn.algorithms.hamu import colinear_tolerance


def applied_delta64(step, grads_f, grads_r, precise=True, precision="auto"):
    """The update the module applies (combine in float32 or the gradients' dtype, float64 where ill-conditioned),
    in float64. precise=False: every combination in the gradients' own dtype."""
    out = [g.clone() for g in grads_f]
    work = combine_arithmetic(grads_f[0].dtype, step.conditioning.tolist(), precision) if precise else None
    combine_into(out, out, grads_r, step.coef_f.tolist(), step.coef_r.tolist(), work)
    return [o.double() for o in out]


def issue_reproducer(dtype=torch.float32, sin=2.5e-4 / 0.5):
    g = torch.Generator().manual_seed(13)
    d = 36864
    gr = torch.randn(d, generator=g, dtype=torch.float64)
    o = torch.randn(d, generator=g, dtype=torch.float64)
    o -= (o @ gr) / (gr @ gr) * gr
    gf = (0.5 * gr / gr.norm() + 0.5 * sin * o / o.norm()).to(dtype)
    return (0.3 * gr / gr.norm()).to(dtype), gf


def test_the_issue_reproducer_keeps_the_trust_region():
    gr, gf = issue_reproducer()
    st = hamu_step(*tensor_stats([gr], [gf]), eta=1e-2, quota=7.5e-4, clip_norm=None, sizes=torch.tensor([36864.]))
    exact = (st.coef_f * gf.double() + st.coef_r * gr.double()).norm() / st.radius
    assert exact.item() <= 1 + 1e-6  # was 2.43 with float32 statistics
    applied = applied_delta64(st, [gf], [gr])[0].norm() / st.radius
    assert applied.item() <= 1 + 1e-6
    assert st.solution.branch.item() == Branch.CORRECTED  # sin θ = 5e-4 is resolvable in float64


def exact_perp_fraction(a, b):
    """‖a⊥‖²/‖a‖² with a⊥ = a − (a·b/‖b‖²)b, in exact rational arithmetic."""
    fa, fb = [Fraction(float(x)) for x in a], [Fraction(float(x)) for x in b]
    aa, bb, ab = sum(x * x for x in fa), sum(x * x for x in fb), sum(x * y for x, y in zip(fa, fb))
    return (aa - ab * ab / bb) / aa


@pytest.mark.parametrize("dtype,precision", [(torch.float32, "auto"), (torch.bfloat16, "auto"),
                                             (torch.float16, "auto"), (torch.bfloat16, "float64")])
def test_near_colinear_gradients_get_the_exact_branch_and_stay_in_the_ball(dtype, precision):
    rng = np.random.default_rng(0)
    n = 64
    for sin in [0.0, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1, 0.5]:
        for _ in range(4):
            base = rng.normal(size=n)
            other = rng.normal(size=n)
            other -= other @ base / (base @ base) * base
            gr = torch.tensor(rng.uniform(0.2, 2.0) * base / np.linalg.norm(base)).to(dtype)
            gf = torch.tensor(base / np.linalg.norm(base) + sin * other / np.linalg.norm(other)).to(dtype)
            stats = tensor_stats([gr], [gf])
            ref = tensor_stats([gr.double()], [gf.double()])
            for s, r in zip(stats, ref):  # float64 statistics of the low-precision tensors, bit for bit
                assert torch.equal(s, r)
            quota = float(rng.uniform(1e-4, 5e-3))
            st = hamu_step(*stats, eta=0.05, quota=quota, clip_norm=None, sizes=torch.tensor([float(n)]))
            branch = st.solution.branch.item()
            if branch in (Branch.COLINEAR, Branch.CORRECTED):
                # The decision agrees with exact arithmetic wherever the exact value is clear of the tolerance.
                perp = exact_perp_fraction(gr.double().numpy(), gf.double().numpy())
                tol = colinear_tolerance(n).item()
                if perp > 100 * tol:
                    assert branch == Branch.CORRECTED, (sin, dtype)
                elif perp < tol / 100:
                    assert branch == Branch.COLINEAR, (sin, dtype)
            delta = applied_delta64(st, [gf], [gr], precision=precision)[0]
            r = st.radius.item()
            assert delta.norm().item() <= r * (1 + 1e-6) + 1e-300, (sin, dtype, branch)
            if st.solution.feasible.item():  # the quota, up to rounding δ into the gradients' dtype
                u = torch.finfo(dtype).eps / 2
                slack = 4 * u * max(st.conditioning.item(), 1.0) * np.linalg.norm(gf.double()) * r
                assert (gf.double() @ delta).item() >= quota - slack - 1e-12


def test_exactly_colinear_float32_tensors_take_the_colinear_branch():
    gr, gf = torch.tensor([0.4074]), torch.tensor([0.7341])
    st = hamu_step(*tensor_stats([gr], [gf]), eta=1.0, quota=0.05, clip_norm=None, sizes=torch.tensor([1.0]))
    assert st.solution.branch.item() in (Branch.COLINEAR, Branch.DIRECT)
    assert st.solution.branch.item() != Branch.CORRECTED  # was coef_f = 364, coef_r = −656
    assert abs(st.coef_f.item()) < 1 and abs(st.coef_r.item()) < 1


def test_huge_finite_gradients_are_clipped_not_an_error():
    rng = np.random.default_rng(1)
    gr = torch.tensor(rng.normal(size=100) * 5e19, dtype=torch.float32)  # norm ≈ 5e20: squares overflow fp32
    gf = torch.tensor(rng.normal(size=100) * 1e20, dtype=torch.float32)
    assert torch.isfinite(gr).all() and not torch.isfinite((gr * gr).sum())
    st = hamu_step(*tensor_stats([gr], [gf]), eta=0.1, quota=0.01, clip_norm=1.0)
    assert torch.isfinite(st.coef_f).all() and torch.isfinite(st.coef_r).all()
    delta = applied_delta64(st, [gf], [gr])[0]
    assert delta.norm().item() <= 0.1 * (1 + 1e-6)  # R = η·‖clipped g_r‖ = η


def test_tiny_forget_gradient_is_infeasible_not_a_free_direct_step():
    gr = torch.tensor([0.6, -0.8], dtype=torch.float32)
    gf = torch.tensor([3e-20, 1e-20], dtype=torch.float32)  # ‖g_f‖² underflows in float32
    st = hamu_step(*tensor_stats([gr], [gf]), eta=0.1, quota=1e-3, clip_norm=1.0)
    assert st.quota.item() == pytest.approx(1e-3)  # the quota is not lost to an underflow
    assert st.solution.branch.item() == Branch.INFEASIBLE


def test_norm_product_allocation_is_finite_over_the_whole_float64_range():
    rr = torch.tensor([1e-300, 1e300, 1.0], dtype=torch.float64)
    ff = torch.tensor([1e-300, 1e300, 4.0], dtype=torch.float64)
    q = allocate_quota(1.0, rr, ff, torch.zeros(3, dtype=torch.float64), "norm_product")
    assert torch.isfinite(q).all()
    w = [Fraction(1, 10**300), Fraction(10**300), Fraction(2)]  # sqrt(rr)·sqrt(ff), exactly
    expected = [float(x / sum(w)) for x in w]
    np.testing.assert_allclose(q.numpy(), expected, rtol=1e-12, atol=1e-300)


def test_statistics_of_large_tensors_are_chunked_float64():
    from lit_unlearn.algorithms import blocks

    rng = np.random.default_rng(2)
    a = torch.tensor(rng.normal(size=blocks.STATS_CHUNK * 2 + 17), dtype=torch.float32)
    b = torch.tensor(rng.normal(size=a.numel()), dtype=torch.float32)
    rr, ff, rf = tensor_stats([a], [b])
    ref = np.dot(a.double().numpy().astype(np.longdouble), b.double().numpy().astype(np.longdouble))
    assert rf.item() == pytest.approx(float(ref), rel=1e-12)


def test_float32_to_bf16_truncation_rounds_toward_zero_bit_for_bit():
    from lit_unlearn.algorithms.blocks import _round_into

    rng = np.random.default_rng(3)
    x = torch.tensor(np.concatenate([
        rng.normal(size=20000) * 10.0 ** rng.integers(-40, 38, size=20000),  # every exponent, both signs
        rng.normal(size=2000).astype(np.float32).view(np.uint32).__and__(0xFFFF0000).view(np.float32),  # bf16 values
        [0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38],
    ]).astype(np.float32))
    got = _round_into(x, torch.bfloat16)
    ref = _round_into(x.double(), torch.bfloat16)  # round to nearest, then step toward zero where it grew
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))
    back = got.double()
    assert (back.abs() <= x.double().abs()).all()
    up = torch.nextafter(got, torch.where(x >= 0, torch.inf, -torch.inf).to(torch.bfloat16)).double()
    assert (up.abs() > x.double().abs()).all()  # and the bf16 value one step further out would have grown


def test_auto_and_float64_combinations_agree_to_one_bf16_step_and_never_grow_past_the_float32_bound():
    from lit_unlearn.algorithms import blocks

    g = torch.Generator().manual_seed(4)
    n = blocks.STATS_CHUNK + 1001  # the chunked path, with a ragged last chunk
    gf = torch.randn(n, generator=g).to(torch.bfloat16)
    gr = torch.randn(n, generator=g).to(torch.bfloat16)
    a, b = -0.731, 0.298
    exact = gf.double() * a + gr.double() * b
    auto, wide = gf.clone(), gf.clone()
    combine_into([auto], [auto], [gr], [a], [b], [torch.float32])
    combine_into([wide], [wide], [gr], [a], [b], [torch.float64])
    bound = 2 * (torch.finfo(torch.float32).eps / 2) * (abs(a) * gf.double().abs() + abs(b) * gr.double().abs())
    assert (auto.double().abs() <= exact.abs() + bound).all()
    assert (wide.double().abs() <= exact.abs()).all()
    steps = (auto.view(torch.int16).int() - wide.view(torch.int16).int()).abs()
    assert steps.max().item() <= 1 and (steps == 0).float().mean().item() > 0.999


def test_combine_precision_choice():
    cond = [1.0, 3.0, 1e3]
    assert combine_arithmetic(torch.bfloat16, cond, "auto") == [torch.float32, torch.float32, torch.float64]
    assert combine_arithmetic(torch.bfloat16, cond, "float64") == [torch.float64] * 3
    assert combine_arithmetic(torch.float32, cond, "float64") == [torch.float32, torch.float32, torch.float64]
    with pytest.raises(ValueError, match="choose one of"):
        combine_arithmetic(torch.float32, cond, "float16")
