"""OFMU's maths on a tiny model, against a materialised Hessian and central finite differences (float64)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from helpers import flat_view
from lit_unlearn.algorithms.ofmu import cosine_partials, fd_hvp, phi_gradient_autograd, phi_gradient_fd, rho_at

BETA = 0.7


def _problem(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    shapes = [p.shape for p in net.parameters()]
    theta, unflat = flat_view(net)
    xf, yf = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    xr, yr = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8,))

    def losses(t):
        params = unflat(t)
        return (F.cross_entropy(functional_call(net, params, (xf,)), yf),
                F.cross_entropy(functional_call(net, params, (xr,)), yr))

    def phi(t):
        # Φ(θ) written directly on the flat vector: its own gradients, its own cosine.
        lf, lr = losses(t)
        gf = torch.autograd.grad(lf, t, create_graph=True)[0]
        gr = torch.autograd.grad(lr, t, create_graph=True)[0]
        return lf - BETA * torch.dot(gf, gr) / (gf.norm() * gr.norm())

    def as_list(t):
        return [t[i:j] for i, j in _bounds(shapes)]

    return theta, losses, phi, as_list


def _bounds(shapes):
    out, i = [], 0
    for s in shapes:
        out.append((i, i + s.numel()))
        i += s.numel()
    return out


def _central(f, t, v, h=1e-5):
    return (f(t + h * v) - f(t - h * v)) / (2 * h)


def _ours(theta, losses, create_graph=False):
    t = theta.clone().requires_grad_(True)
    lf, lr = losses(t)
    return t, phi_gradient_autograd(lf, lr, [t], BETA, create_graph=create_graph)


def test_phi_gradient_matches_finite_differences_of_phi():
    theta, losses, phi, _ = _problem()
    _, pg = _ours(theta, losses)
    for seed in range(3):
        v = torch.randn(theta.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        fd = _central(lambda t: phi(t.requires_grad_(True)).detach(), theta.clone(), v)
        assert torch.dot(pg.grad[0], v).item() == pytest.approx(fd.item(), rel=1e-6, abs=1e-9)


def test_cosine_gradient_matches_finite_differences():
    theta, losses, _, _ = _problem(1)
    _, pg = _ours(theta, losses)
    t = theta.clone().requires_grad_(True)
    lf, _ = losses(t)
    g_f = torch.autograd.grad(lf, t)[0]
    cos_grad = (g_f - pg.grad[0]) / BETA  # ∇Φ = g_f − β∇cos

    def cos_of(t):
        t = t.clone().requires_grad_(True)
        lf, lr = losses(t)
        gf, gr = torch.autograd.grad(lf, t)[0], torch.autograd.grad(lr, t)[0]
        return torch.dot(gf, gr) / (gf.norm() * gr.norm())

    v = torch.randn(theta.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    assert torch.dot(cos_grad, v).item() == pytest.approx(_central(cos_of, theta, v).item(), rel=1e-6)


def test_cosine_partials_are_the_gradient_of_the_cosine():
    gf, gr = torch.randn(7, dtype=torch.float64), torch.randn(7, dtype=torch.float64)
    cos, a, b = cosine_partials([gf], [gr])
    x, y = gf.clone().requires_grad_(True), gr.clone().requires_grad_(True)
    da, db = torch.autograd.grad(F.cosine_similarity(x, y, dim=0), (x, y))
    torch.testing.assert_close(a[0], da)
    torch.testing.assert_close(b[0], db)
    assert cos.item() == pytest.approx(F.cosine_similarity(gf, gr, dim=0).item())


def test_outer_hvp_autograd_and_finite_difference_match_the_materialised_hessian():
    theta, losses, phi, as_list = _problem(2)
    hessian = torch.autograd.functional.hessian(phi, theta)  # the explicit n×n matrix, only in this test
    assert hessian.shape == (theta.numel(), theta.numel())
    t, pg = _ours(theta, losses, create_graph=True)
    v = pg.grad[0].detach()
    hv_autograd = torch.autograd.grad(pg.grad[0], t, grad_outputs=v)[0]
    torch.testing.assert_close(hv_autograd, hessian @ v, rtol=1e-8, atol=1e-10)

    def grads_at(direction, step, which="both"):
        shifted = theta + (0 if direction is None else step * direction[0])
        s = shifted.clone().requires_grad_(True)
        lf, lr = losses(s)
        return [torch.autograd.grad(lf, s)[0]], [torch.autograd.grad(lr, s)[0]], lf.detach(), lr.detach()

    # Fully first-order: ∇Φ itself by differences of gradients, then H·v by differences of that.
    fd_grad = phi_gradient_fd(grads_at, BETA, h=1e-4).grad
    torch.testing.assert_close(fd_grad[0], v, rtol=1e-6, atol=1e-8)

    def phi_grad_at(direction, step):
        def shifted_grads(d2, s2, which="both"):
            base = theta + step * direction[0]
            s = (base + (0 if d2 is None else s2 * d2[0])).clone().requires_grad_(True)
            lf, lr = losses(s)
            return [torch.autograd.grad(lf, s)[0]], [torch.autograd.grad(lr, s)[0]], lf.detach(), lr.detach()

        return phi_gradient_fd(shifted_grads, BETA, h=1e-4).grad

    hv_fd = fd_hvp(phi_grad_at, [v], h=1e-3)[0]
    torch.testing.assert_close(hv_fd, hessian @ v, rtol=1e-4, atol=1e-6)


def test_beta_zero_makes_phi_the_forget_loss():
    theta, losses, _, _ = _problem(3)
    t = theta.clone().requires_grad_(True)
    lf, lr = losses(t)
    pg = phi_gradient_autograd(lf, lr, [t], beta=0.0)
    torch.testing.assert_close(pg.grad[0], torch.autograd.grad(losses(t)[0], t)[0])


def test_rho_schedules():
    assert [rho_at(k, "constant", 2.0) for k in (0, 5)] == [2.0, 2.0]
    assert [rho_at(k, "linear", 1.0, 0.5) for k in (0, 1, 4)] == [1.0, 1.5, 3.0]
    assert rho_at(3, "geometric", 2.0, 1.5) == pytest.approx(2.0 * 1.5**3)
    assert rho_at(10, "linear", 1.0, 1.0, cap=4.0) == 4.0
    assert rho_at(10**6, "geometric", 1.0, 2.0, cap=50.0) == 50.0  # no overflow on long runs
    assert math.isinf(rho_at(10**6, "geometric", 1.0, 2.0))
    with pytest.raises(ValueError, match="schedule"):
        rho_at(0, "cosine")
    with pytest.raises(ValueError, match="rate > 0"):
        rho_at(0, "geometric", 1.0, 0.0)
