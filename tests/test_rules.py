"""Update rules against float64 loops, the paper's appendix A.2/B properties, and gradcheck."""
import pytest
import torch
from torch.autograd import gradcheck

from fastnet.feature_maps import elu_plus_one, sum_normalise
from fastnet.kernels.fast_weight import pytorch
from fastnet.rule_steps import delta_rule_step
from fastnet.rules import FastWeightSequence, delta_rule_writes, fast_weight_sequence, householder_sequence

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
@pytest.mark.parametrize("resets", [[(2, 0), (5, 0), (4, 1)],
                                    [(0, 0), (1, 0), (3, 1)]])  # the gated rule's chunk starts (0, 3), back to back
def test_gradcheck_custom_function(rule, resets):
    """gradcheck also runs backward twice on one graph: a replay must not write into its saved checkpoints."""
    q, k, v, beta, W0, scale, done = random_inputs(requires_grad=True)
    done[:] = False
    for t, b in resets:
        done[t, b] = True
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
    _, W_new = fast_weight_sequence("gated", k2[None, None, None], k2[None, None, None], v3[None, None, None],
                                    beta[None], initial_state=W)  # one write, as the sequence op makes it
    W_new = W_new[0, 0]
    torch.testing.assert_close(W_new @ k1, 0.7 * v1)
    torch.testing.assert_close(W_new @ k2, 0.7 * v2 + 0.3 * v3)


def test_sum_rule_adds_outer_product():
    k, v = torch.tensor([[[[1.0, 2.0]]]]), torch.tensor([[[[3.0, -1.0, 0.5]]]])
    W = fast_weight_sequence("sum", k, k, v)[1][0, 0]
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


# ----------------------------------------------------------------------------- Gated DeltaNet, DeltaProduct
def householder_inputs(n, gated=True, requires_grad=False, steps=T):
    """L2-normalised q, k (n keys per step), values, rates in (0, 2), log-decays, W0 and resets."""
    f64 = dict(dtype=torch.float64)
    q = torch.nn.functional.normalize(torch.randn(steps, B, H, DK, **f64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(steps, B, H, n, DK, **f64), dim=-1)
    v = torch.randn(steps, B, H, n, DV, **f64)
    beta = 2 * torch.rand(steps, B, H, n, **f64)
    g = -torch.rand(steps, B, H, **f64) if gated else None
    W0 = torch.randn(B, H, DV, DK, **f64)
    done = torch.zeros(steps, B, dtype=torch.bool)
    done[2 % steps, 0] = done[5 % steps, 0] = done[4 % steps, 1] = True
    tensors = [x.requires_grad_(requires_grad) if x is not None else None for x in (q, k, v, beta, g, W0)]
    return (*tensors, done)


def householder_matrix_loop(q, k, v, beta, g, done, W0):
    """Independent float64 reference, per (b, h) and as matrices: the Gated DeltaNet transition
    W_t = α_t W_{t-1} (I - β k kᵀ) + β v kᵀ (Yang et al. 2025, Eq. 10), applied once per key j."""
    ys, W = [], [[W0[b, h] for h in range(H)] for b in range(B)]
    eye = torch.eye(DK, dtype=torch.float64)
    for t in range(q.shape[0]):
        y_t = []
        for b in range(B):
            row = []
            for h in range(H):
                M = torch.zeros_like(W[b][h]) if done[t, b] else W[b][h]
                alpha = g[t, b, h].exp() if g is not None else 1.0
                for j in range(k.shape[3]):
                    kk, bb = k[t, b, h, j], beta[t, b, h, j]
                    M = alpha * M @ (eye - bb * torch.outer(kk, kk)) + bb * torch.outer(v[t, b, h, j], kk)
                    alpha = 1.0  # the decay acts once per step, before the first write
                W[b][h] = M
                row.append(M @ q[t, b, h])
            y_t.append(torch.stack(row))
        ys.append(torch.stack(y_t))
    return torch.stack(ys), torch.stack([torch.stack(r) for r in W])


@pytest.mark.parametrize("n,gated", [(1, True), (2, False), (3, True)])
def test_householder_sequence_matches_matrix_loop(n, gated):
    q, k, v, beta, g, W0, done = householder_inputs(n, gated)
    y, W = householder_sequence(q, k, v, beta, g, done, W0)
    y_ref, W_ref = householder_matrix_loop(q, k, v, beta, g, done, W0)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(W, W_ref)


def outputs_and_grads(fn, inputs, done, seed=0):
    """fn's (y, W_T) and the gradients of the inputs under random cotangents."""
    y, W = fn(*inputs[:5], done, inputs[5])
    gen = torch.Generator().manual_seed(seed)
    loss = (y * torch.randn(y.shape, generator=gen, dtype=y.dtype)).sum() \
        + (W * torch.randn(W.shape, generator=gen, dtype=W.dtype)).sum()
    return [y, W, *torch.autograd.grad(loss, [x for x in inputs if x is not None])]


@pytest.mark.parametrize("n,gated,steps,chunk_writes,boundary", [
    (1, True, 11, 4, 4),  # 3 chunks of 4 tokens (the last one padded)
    (2, False, 7, 6, 3),  # 3 chunks of 3 tokens
    (3, True, 5, 4, 1),  # 5 chunks of 1 token
    (2, True, 9, 64, 0),  # one chunk
])
def test_chunked_householder_matches_the_step_loop(n, gated, steps, chunk_writes, boundary):
    """The chunked form (WY representation, backward written out) against the autograd step loop, float64:
    the outputs, the final state and the gradients of q, k, v, β, g and the initial state, with resets at
    t = 0, on a chunk boundary and inside chunks, T not a multiple of the chunk, and a decay strong enough
    (g = -800) that exp(G_j - G_i), j > i, would overflow if it were formed."""
    q, k, v, beta, g, W0, done = householder_inputs(n, gated, steps=steps)
    done[0, 1] = done[boundary, 2] = True
    if gated:
        g[steps // 2, 1, 1] = -800.0
    inputs = [x.requires_grad_() if x is not None else None for x in (q, k, v, beta, g, W0)]
    got = outputs_and_grads(lambda *a: pytorch.HouseholderChunks.apply(*a, chunk_writes), inputs, done)
    want = outputs_and_grads(pytorch.householder_loop, inputs, done)
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b)


def test_chunked_householder_saves_the_inputs_and_one_state_per_chunk():
    """What the backward pass keeps: the inputs and the state entering each of the 4 chunks (64 steps of
    2 writes, 32 writes a chunk; the first is W0), where the step loop keeps states for every write."""
    q, k, v, beta, g, W0, done = householder_inputs(2, requires_grad=True, steps=64)

    def saved_numel(fn):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda x: sizes.append(x.numel()) or x, lambda x: x):
            fn(q, k, v, beta, g, done, W0)
        return sum(sizes)

    inputs = sum(x.numel() for x in (q, k, v, beta, g, done))
    assert saved_numel(lambda *a: pytorch.householder_sequence(*a, chunk_writes=32)) == inputs + 4 * W0.numel()
    assert saved_numel(pytorch.householder_loop) > 64 * 2 * W0.numel()


def test_householder_sequence_takes_bfloat16_on_the_cpu():
    """The triangular solve runs in float32 for bf16 inputs (the CPU solver has no bf16)."""
    q, k, v, beta, g, W0, done = householder_inputs(2)
    y, W = householder_sequence(q.bfloat16(), k.bfloat16(), v.bfloat16(), beta.bfloat16(), g.bfloat16(), done,
                                W0.bfloat16())
    y_ref, W_ref = householder_sequence(q, k, v, beta, g, done, W0)
    assert y.dtype == W.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), y_ref, rtol=0.05, atol=0.05)
    torch.testing.assert_close(W.double(), W_ref, rtol=0.05, atol=0.05)


def test_gated_delta_with_alpha_one_is_delta_with_l2_keys():
    """g = 0 (α = 1) and n_h = 1: exactly the delta rule (Eqs. 20-25) with L2-normalised keys."""
    q, k, v, beta, _, W0, done = householder_inputs(1, requires_grad=True)
    beta = beta / 2
    y, W = householder_sequence(q, k, v, beta, torch.zeros(T, B, H, dtype=torch.float64), done, W0)
    y_delta, W_delta = fast_weight_sequence("delta", q, k[:, :, :, 0], v[:, :, :, 0], beta[..., 0], done, W0)
    torch.testing.assert_close(y, y_delta)
    torch.testing.assert_close(W, W_delta)
    grads = torch.autograd.grad(y.sum() + W.sum(), (q, k, v, W0))
    grads_delta = torch.autograd.grad(y_delta.sum() + W_delta.sum(), (q, k, v, W0))
    for a, b in zip(grads, grads_delta):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("gated", [False, True])
def test_delta_product_is_gated_delta_on_a_longer_sequence(gated):
    """DeltaProduct with n_h keys per step equals Gated DeltaNet over the n_h·T writes (decay and
    reset on each step's first write) read at every n_h-th position."""
    n = 3
    q, k, v, beta, g, W0, done = householder_inputs(n, gated)
    y, W = householder_sequence(q, k, v, beta, g, done, W0)
    first = torch.zeros(n, dtype=torch.bool)
    first[0] = True
    long = dict(
        q=q.repeat_interleave(n, dim=0), k=k.transpose(1, 3).flatten(0, 1).transpose(1, 2).unsqueeze(3),
        v=v.transpose(1, 3).flatten(0, 1).transpose(1, 2).unsqueeze(3),
        beta=beta.permute(0, 3, 1, 2).flatten(0, 1).unsqueeze(-1),
        g=None if g is None else (g.unsqueeze(1) * first[:, None, None]).flatten(0, 1),
        done=(done.unsqueeze(1) & first[:, None]).flatten(0, 1))
    y_long, W_long = householder_sequence(long["q"], long["k"], long["v"], long["beta"], long["g"], long["done"], W0)
    torch.testing.assert_close(y, y_long[n - 1::n])
    torch.testing.assert_close(W, W_long)


def test_negative_eigenvalues_reflect_the_key_direction():
    """β = 2 (the top of DeltaProduct's 2σ range) with v = 0 is the Householder reflection I - 2kkᵀ:
    the association stored under k flips sign, one under an orthogonal key stays."""
    k1, k2 = orthonormal_pair(DK)
    v1, v2 = torch.randn(2, DV, dtype=torch.float64)
    W = (torch.outer(v1, k1) + torch.outer(v2, k2))[None, None]
    zeros = torch.zeros(1, 1, 1, 1, DV, dtype=torch.float64)
    two = torch.full((1, 1, 1, 1), 2.0, dtype=torch.float64)
    _, W_new = householder_sequence(k1[None, None, None], k2[None, None, None, None], zeros, two, None,
                                    torch.zeros(1, 1, dtype=torch.bool), W)
    torch.testing.assert_close(W_new[0, 0] @ k2, -v2)
    torch.testing.assert_close(W_new[0, 0] @ k1, v1)


# ----------------------------------------------------------------------------- SRWM
def srwm_loop(x, W0, done, D0):
    """Independent float64 reference of Irie et al. (2022), Eqs. 5-8, per (b, h), holding the full W
    and setting it to W0 at a reset."""
    d = x.shape[-1]
    W = [[W0[h] + D0[b, h] for h in range(x.shape[2])] for b in range(x.shape[1])]
    ys = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for b in range(x.shape[1]):
            for h in range(x.shape[2]):
                M = W0[h] if done[t, b] else W[b][h]
                o = M @ x[t, b, h]  # Eq. 5
                y, k, q, beta = o[:d], o[d:2 * d], o[2 * d:3 * d], o[3 * d:]
                pk, pq = torch.softmax(k, 0), torch.softmax(q, 0)
                rates = torch.cat([torch.sigmoid(beta[i]).expand(n) for i, n in enumerate((d, d, d, 4))])
                W[b][h] = M + torch.outer(rates * (M @ pq - M @ pk), pk)  # Eqs. 6-8
                ys[t, b, h] = y
    return ys, torch.stack([torch.stack([W[b][h] - W0[h] for h in range(len(W[b]))]) for b in range(len(W))])


def test_srwm_reference_matches_loop():
    from fastnet.kernels.srwm.pytorch import srwm_reference

    d = 3
    x = torch.randn(T, B, H, d, dtype=torch.float64)
    W0 = torch.randn(H, 3 * d + 4, d, dtype=torch.float64)
    D0 = torch.randn(B, H, 3 * d + 4, d, dtype=torch.float64) * 0.3
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = done[5, 0] = done[0, 1] = True
    y, D = srwm_reference(x, W0, done, D0)
    y_ref, D_ref = srwm_loop(x, W0, done, D0)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(D, D_ref)


@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_writes_matches_a_write_loop(gated):
    """The one-shot WY form equals N explicit (gated) delta writes into W_0 = 0, values and gradients,
    including decays strong enough that exp(G_j - G_i) for j > i would overflow if it were formed."""
    N, B, dk, dv = 9, 3, 5, 4
    f64 = dict(dtype=torch.float64, requires_grad=True)
    k = torch.nn.functional.normalize(torch.randn(N, B, dk, dtype=torch.float64), dim=-1).requires_grad_()
    v, beta = torch.randn(N, B, dv, **f64), (2 * torch.rand(N, B, dtype=torch.float64)).requires_grad_()
    g = None
    if gated:
        g = -torch.rand(N, B, dtype=torch.float64)
        g[4, 1] = -800.0  # exp(800) overflows float64
        g.requires_grad_()
    W = torch.zeros(B, dv, dk, dtype=torch.float64)
    for i in range(N):
        if gated:
            W = g[i].exp()[:, None, None] * W
        u = beta[i, :, None] * (v[i] - torch.einsum("bvk,bk->bv", W, k[i]))
        W = W + u[:, :, None] * k[i, :, None, :]
    W_shot = delta_rule_writes(k, v, beta, g)
    torch.testing.assert_close(W_shot, W)
    cotangent = torch.randn_like(W)
    inputs = [x for x in (k, v, beta, g) if x is not None]
    for a, b in zip(torch.autograd.grad((W_shot * cotangent).sum(), inputs),
                    torch.autograd.grad((W * cotangent).sum(), inputs)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b)
