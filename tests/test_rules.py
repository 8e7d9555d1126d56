"""Update rules against float64 loops, the paper's appendix A.2/B properties, and gradcheck."""
import pytest
import torch
from torch.autograd import gradcheck

from fastnet.feature_maps import elu_plus_one, sum_normalise
from fastnet.rules import FastWeightSequence, delta_rule_step, fast_weight_sequence, gated_rule_step, sum_rule_step

torch.manual_seed(0)
T, B, H, DK, DV = 7, 3, 2, 5, 4


def naive_loop(rule, q, k, v, beta, done, W0, key_scale):
    """Independent float64 reference: explicit per-(b, h) outer products."""
    W = [[W0[b, h] for h in range(H)] for b in range(B)]
    ys = []
    for t in range(T):
        y_t = []
        for b in range(B):
            row = []
            for h in range(H):
                M, kk, vv, bb = W[b][h], k[t, b, h], v[t, b, h], beta[t, b, h]
                if done[t, b]:
                    M = torch.zeros_like(M)
                if rule == "sum":
                    M = M + torch.outer(vv, kk)
                elif rule == "delta":
                    M = M + bb * torch.outer(vv - key_scale[t, b, h] * (M @ kk), kk)
                else:
                    M = (1 - bb) * M + bb * torch.outer(vv, kk)
                W[b][h] = M
                row.append(M @ q[t, b, h])
            y_t.append(torch.stack(row))
        ys.append(torch.stack(y_t))
    return torch.stack(ys), torch.stack([torch.stack(r) for r in W])


def random_inputs(requires_grad=False):
    f64 = dict(dtype=torch.float64)
    q = torch.randn(T, B, H, DK, **f64)
    k = torch.softmax(torch.randn(T, B, H, DK, **f64), -1)
    v = torch.randn(T, B, H, DV, **f64)
    beta = torch.rand(T, B, H, **f64)
    W0 = torch.randn(B, H, DV, DK, **f64)
    scale = 0.5 + torch.rand(T, B, H, **f64)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = done[5, 0] = done[4, 1] = True  # different reset times per element
    tensors = [x.requires_grad_(requires_grad) for x in (q, k, v, beta, W0, scale)]
    return (*tensors, done)


@pytest.mark.parametrize("rule", ["sum", "delta", "gated"])
def test_sequence_matches_float64_loop_values_and_grads(rule):
    q, k, v, beta, W0, scale, done = random_inputs(requires_grad=True)
    if rule != "delta":
        scale = torch.ones_like(scale)
    y, W = fast_weight_sequence(rule, q, k, v, beta, done, W0, scale if rule == "delta" else None)
    y_ref, W_ref = naive_loop(rule, q, k, v, beta, done, W0, scale)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(W, W_ref)
    gy, gW = torch.randn_like(y), torch.randn_like(W)
    inputs = [x for x in (q, k, v, beta, W0, scale) if x.requires_grad]
    grads = torch.autograd.grad((y * gy).sum() + (W * gW).sum(), inputs, allow_unused=True)
    grads_ref = torch.autograd.grad((y_ref * gy).sum() + (W_ref * gW).sum(), inputs, allow_unused=True)
    for g, g_ref in zip(grads, grads_ref):
        if g_ref is None:
            assert g is None or g.abs().max() == 0
        else:
            torch.testing.assert_close(g, g_ref)


@pytest.mark.parametrize("rule", ["sum", "delta", "gated"])
def test_gradcheck_custom_function(rule):
    q, k, v, beta, W0, scale, done = random_inputs(requires_grad=True)
    if rule != "delta":
        scale = scale.detach().fill_(1.0)
    fn = lambda *a: FastWeightSequence.apply(rule, *a[:4], done, a[4], a[5])  # noqa: E731
    assert gradcheck(fn, (q, k, v, beta, W0, scale))


@pytest.mark.parametrize("rule", ["sum", "delta"])
def test_backward_keeps_no_per_step_fast_weights(rule):
    """Appendix F: the reversible op saves O(T·d) per head, not one W per step."""
    T_long, d = 64, 32
    q, k = torch.randn(T_long, 2, 1, d), torch.softmax(torch.randn(T_long, 2, 1, d), -1)
    v, beta = torch.randn(T_long, 2, 1, d, requires_grad=True), torch.rand(T_long, 2, 1)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x.numel()) or x, lambda x: x):
        y, _ = fast_weight_sequence(rule, q, k, v, beta)
    per_step_weights = T_long * 2 * d * d
    assert 0 < sum(saved) < per_step_weights / 4
    y.sum().backward()
    assert v.grad.abs().sum() > 0


def orthonormal_pair(d=6):
    Q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64))
    return Q[:, 0], Q[:, 1]


def test_appendix_b_delta_rule_keeps_unrelated_association():
    k1, k2 = orthonormal_pair()
    v1, v2, v3 = torch.randn(3, 4, dtype=torch.float64)
    W = (torch.outer(v1, k1) + torch.outer(v2, k2))[None, None]
    beta = torch.tensor([[0.3]], dtype=torch.float64)
    W_new = delta_rule_step(W, k2[None, None], v3[None, None], beta)[0, 0]
    torch.testing.assert_close(W_new @ k1, v1, rtol=0, atol=1e-12)
    torch.testing.assert_close(W_new @ k2, 0.7 * v2 + 0.3 * v3)


def test_appendix_b_gated_rule_scales_unrelated_association():
    k1, k2 = orthonormal_pair()
    v1, v2, v3 = torch.randn(3, 4, dtype=torch.float64)
    W = (torch.outer(v1, k1) + torch.outer(v2, k2))[None, None]
    beta = torch.tensor([[0.3]], dtype=torch.float64)
    W_new = gated_rule_step(W, k2[None, None], v3[None, None], beta)[0, 0]
    torch.testing.assert_close(W_new @ k1, 0.7 * v1)
    torch.testing.assert_close(W_new @ k2, 0.7 * v2 + 0.3 * v3)


def test_sum_rule_step_adds_outer_product():
    k, v = torch.tensor([[[1.0, 2.0]]]), torch.tensor([[[3.0, -1.0, 0.5]]])
    W = sum_rule_step(torch.zeros(1, 1, 3, 2), k, v)[0, 0]
    torch.testing.assert_close(W, torch.tensor([[3.0, 6.0], [-1.0, -2.0], [0.5, 1.0]]))


def test_appendix_a2_sum_normalised_keys_balance_write_and_remove():
    """Eq. 51: the write weight k_i equals the total remove weight Σ_j k_i k_j iff Σ_j k_j = 1.

    Consequence: if every column of W already holds v, writing v (β = 1) changes nothing."""
    k = sum_normalise(elu_plus_one(torch.randn(8, dtype=torch.float64)), eps=0.0)
    torch.testing.assert_close(k * k.sum(), k)  # Σ_j k_i k_j = k_i
    v = torch.randn(5, dtype=torch.float64)
    W = v[:, None].expand(5, 8).clone()[None, None]
    one = torch.ones(1, 1, dtype=torch.float64)
    torch.testing.assert_close(delta_rule_step(W, k[None, None], v[None, None], one), W)
    k_raw = elu_plus_one(torch.randn(8, dtype=torch.float64))  # unnormalised: unbalanced
    assert not torch.allclose(delta_rule_step(W, k_raw[None, None], v[None, None], one), W)


def test_bad_rule_and_missing_beta():
    q = torch.zeros(2, 1, 1, 4)
    with pytest.raises(ValueError, match="sum, delta|'sum', 'delta'"):
        fast_weight_sequence("hebb", q, q, q)
    with pytest.raises(ValueError, match="beta"):
        fast_weight_sequence("delta", q, q, q)


def test_attention_normalisation_matches_eqs_26_to_28():
    from fastnet.layers import FastWeightLayer

    layer = FastWeightLayer(8, H, DK, "delta", "elu", "attention", 1, 1).double()
    q, k, v, beta, _, _, done = random_inputs()
    q, k = elu_plus_one(q), elu_plus_one(k)
    z0 = torch.zeros(B, H, DK, dtype=torch.float64)
    W0 = torch.zeros(B, H, DV, DK, dtype=torch.float64)
    y, W, z = layer._attention_normalised(q, k, v, beta, done, (W0, z0))
    for b in range(B):
        for h in range(H):
            M, zz = torch.zeros(DV, DK, dtype=torch.float64), torch.zeros(DK, dtype=torch.float64)
            for t in range(T):
                if done[t, b]:
                    M, zz = torch.zeros_like(M), torch.zeros_like(zz)
                kk, qq = k[t, b, h], q[t, b, h]
                v_bar = M @ kk / (zz @ kk) if zz.abs().sum() > 0 else torch.zeros(DV, dtype=torch.float64)  # Eq. 27
                M = M + beta[t, b, h] * torch.outer(v[t, b, h] - v_bar, kk)  # Eq. 24
                zz = zz + kk  # Eq. 26
                torch.testing.assert_close(y[t, b, h], M @ qq / (zz @ qq + 1e-5))  # Eq. 28
            torch.testing.assert_close(W[b, h], M)
            torch.testing.assert_close(z[b, h], zz)
