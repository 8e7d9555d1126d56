"""The parallel scan against its step loop, and the LRU layer against Eq. 7 written out in float64."""
import math

import pytest
import torch

from fastnet import make_core
from fastnet.lru import LRULayer
from fastnet.scan import linear_scan, linear_scan_reference


@pytest.mark.parametrize("T", [1, 2, 3, 5, 8, 13, 64, 100])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_the_scan_equals_the_step_loop_with_resets(T, dtype):
    torch.manual_seed(T)
    a = torch.rand(T, 3, 4, dtype=torch.float64) * (torch.rand(T, 3, 1) > 0.2)  # zeros: resets
    u, h0 = torch.randn(T, 3, 4, dtype=dtype), torch.randn(3, 4, dtype=dtype)
    if dtype.is_complex:
        a = a * torch.exp(1j * torch.rand(T, 3, 4, dtype=torch.float64))
    else:
        a = a * 1.5  # |a| > 1 too: the scan must not assume a decay
    a, u, h0 = (t.to(dtype).requires_grad_() for t in (a, u, h0))
    h, h_ref = linear_scan(a, u, h0), linear_scan_reference(a, u, h0)
    torch.testing.assert_close(h, h_ref)
    weights = torch.randn(h.shape, dtype=dtype)
    grads = torch.autograd.grad((h * weights).real.sum(), (a, u, h0))
    for g, g_ref in zip(grads, torch.autograd.grad((h_ref * weights).real.sum(), (a, u, h0))):
        torch.testing.assert_close(g, g_ref)


def test_the_scan_passes_gradcheck():
    torch.manual_seed(0)
    a = (torch.rand(7, 2, 3, dtype=torch.float64) * torch.exp(1j * torch.rand(7, 2, 3, dtype=torch.float64)))
    u, h0 = torch.randn(7, 2, 3, dtype=torch.complex128), torch.randn(2, 3, dtype=torch.complex128)
    assert torch.autograd.gradcheck(linear_scan, tuple(t.requires_grad_() for t in (a, u, h0)))


def test_the_scan_of_a_hand_worked_example():
    a = torch.tensor([0.5, 2.0, 0.0, 3.0, 1.0])
    u = torch.tensor([1.0, 1.0, 4.0, 1.0, -13.0])
    # h = 0.5*2+1 = 2; 2*2+1 = 5; reset: 4; 3*4+1 = 13; 13-13 = 0 (5 steps: chunks of 3 and 2)
    assert linear_scan(a, u, torch.tensor(2.0)).tolist() == [2.0, 5.0, 4.0, 13.0, 0.0]


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="one shape and dtype"):
        linear_scan(torch.ones(4, 3), torch.ones(4, 2), torch.zeros(2))


def eq7_by_hand(layer: LRULayer, x, done, h0):
    """h_t = Λ h_{t-1} + γ (B x_t) (Λ zeroed at a reset), y_t = Re(C h_t) + D x_t, one complex step at a time."""
    lam = torch.exp(-torch.exp(layer.nu_log.double()) + 1j * torch.exp(layer.theta_log.double()))
    gamma = torch.exp(layer.gamma_log.double())
    B = torch.complex(layer.B[:, 0].double(), layer.B[:, 1].double())  # [N, H]
    C = torch.complex(layer.C[..., 0].double(), -layer.C[..., 1].double())  # [H, N]: stored as (Re C, -Im C)
    h, ys = h0, []
    for t in range(x.shape[0]):
        h = torch.where(done[t].unsqueeze(-1), 0, lam * h) + gamma * (x[t].to(torch.complex128) @ B.T)
        ys.append((h @ C.T).real + layer.D.double() * x[t])
    return torch.stack(ys), h


def test_the_layer_is_eq7():
    torch.manual_seed(0)
    layer = LRULayer(5, 7, r_min=0.5, r_max=0.99, max_phase=math.pi)
    x, done = torch.randn(9, 3, 5), torch.zeros(9, 3, dtype=torch.bool)
    done[4, 1] = done[0, 2] = True
    h0 = torch.randn(3, 7, dtype=torch.complex64)
    y, (h,) = layer(x, (torch.view_as_real(h0),), done)
    y_ref, h_ref = eq7_by_hand(layer, x.double(), done, h0.to(torch.complex128))
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.view_as_complex(h).to(torch.complex128), h_ref, rtol=1e-5, atol=1e-5)


def test_the_initial_eigenvalues_lie_on_the_ring_and_gamma_normalises():
    torch.manual_seed(0)
    layer = LRULayer(8, 4096, r_min=0.6, r_max=0.9, max_phase=0.5)
    lam = layer.decay().detach()
    assert 0.6 - 1e-6 <= lam.abs().min() and lam.abs().max() <= 0.9 + 1e-6
    assert 0.0 <= lam.angle().min() and lam.angle().max() <= 0.5 + 1e-6
    # uniform on the ring's area: half of it lies inside sqrt((0.6² + 0.9²) / 2)
    assert abs((lam.abs() < math.sqrt((0.36 + 0.81) / 2)).float().mean().item() - 0.5) < 0.03
    torch.testing.assert_close(torch.exp(layer.gamma_log) ** 2, 1 - lam.abs() ** 2)


@pytest.mark.parametrize("options,match", [(dict(r_min=0.9, r_max=0.5), "r_min < r_max"),
                                           (dict(r_max=1.0), "r_max < 1"), (dict(num_states=0), "num_states")])
def test_bad_options_raise_value_error(options, match):
    with pytest.raises(ValueError, match=match):
        make_core("lru", 4, **options)
