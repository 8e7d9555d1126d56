"""Every core: step mode equals sequence mode (values and gradients), resets, bad options."""

import pytest
import torch

from fastnet import CORES, make_core
from fastnet.registry import core_class

T, B, D = 6, 3, 5
SMALL = dict(hidden_size=16, num_layers=2, num_heads=2, head_dim=4, ff_size=24)
CONFIGS = {
    "ff": {},
    "lstm": dict(hidden_size=12),
    "gru": dict(hidden_size=12),
    "lru": dict(SMALL, num_states=6),
    "linear": SMALL,
    "delta": SMALL,
    "rec_delta": SMALL,
    "delta_rnn": SMALL,
    "delta_lstm": SMALL,
    "gated_delta": SMALL,
    "delta_product": SMALL,
    "srwm": SMALL,
    "delta:dpfp_attention": dict(SMALL, feature_map="dpfp", dpfp_nu=2, normalisation="attention"),
    "delta:gated_favor": dict(SMALL, feature_map="favor", update_rule="gated", favor_features=6),
    "linear:attention": dict(SMALL, normalisation="attention"),
    "delta:tanh": dict(SMALL, feature_map="tanh", normalisation="none"),
    "gated_delta:no_conv": dict(SMALL, conv_size=0),
    "gated_delta:conv2": dict(SMALL, conv_size=2),
    "delta_product:gated_negative_3": dict(SMALL, num_householder=3, gated=True, negative_eigenvalues=True),
    "delta_product:clock": dict(SMALL, position_features=6),
    "srwm:clock": dict(SMALL, position_features=4),
    "lstm:clock": dict(hidden_size=12, position_features=4),
    "gru:2_layers_clock": dict(hidden_size=12, num_layers=2, position_features=4),
    "lru:clock": dict(SMALL, num_states=6, position_features=4),
}


def build(key):
    name = key.split(":")[0]
    torch.manual_seed(0)
    return make_core(name, D, **CONFIGS.get(key, {})).double().eval()


RESETS = {"scattered": [(2, 0), (4, 1), (3, 2), (5, 2)],
          "first_and_back_to_back": [(0, 0), (1, 0), (2, 0), (0, 1), (3, 2), (4, 2), (T - 1, 2)]}


def inputs(resets="scattered"):
    torch.manual_seed(1)
    x = torch.randn(T, B, D, dtype=torch.float64, requires_grad=True)
    done = torch.zeros(T, B, dtype=torch.bool)
    for t, b in RESETS[resets]:
        done[t, b] = True
    return x, done


def run_sequence(core, x, done, state=None):
    y, state, aux = core(x, core.initial_state(B) if state is None else state, done)
    return y, state, aux


def run_steps(core, x, done, state=None):
    state, ys, auxes = core.initial_state(B) if state is None else state, [], []
    for t in range(T):
        y, state, aux = core(x[t:t + 1], state, done[t:t + 1])
        ys.append(y)
        auxes.append(aux)
    aux = {k: torch.stack([a[k] for a in auxes]).mean() for k in auxes[0]}
    return torch.cat(ys), state, aux


def loss_of(y, state, aux):
    torch.manual_seed(2)
    # weights drawn by shape, not randn_like: it keeps a transposed state's strides, so two equal
    # states laid out differently in memory would be weighted differently
    out = (y * torch.randn(y.shape, dtype=y.dtype)).sum() + sum((s * torch.randn(s.shape, dtype=s.dtype)).sum()
                                                               for s in state)
    return out + sum(aux.values())


@pytest.mark.parametrize("resets", list(RESETS))
@pytest.mark.parametrize("key", list(CORES) + [k for k in CONFIGS if k not in CORES])
def test_step_mode_equals_sequence_mode(key, resets):
    """From a state that an earlier stretch left (so a reset has something to clear), gradients into
    that stretch's inputs included."""
    core = build(key)
    x, done = inputs(resets)
    x0 = torch.randn(3, B, D, dtype=torch.float64, requires_grad=True)
    start = run_sequence(core, x0, torch.zeros(3, B, dtype=torch.bool))[1]
    y_seq, s_seq, aux_seq = run_sequence(core, x, done, start)
    y_step, s_step, aux_step = run_steps(core, x, done, start)
    torch.testing.assert_close(y_step, y_seq)
    for a, b in zip(s_step, s_seq):
        torch.testing.assert_close(a, b)
    params = [x, x0] + list(core.parameters())
    g_seq = torch.autograd.grad(loss_of(y_seq, s_seq, aux_seq), params, allow_unused=True, retain_graph=True)
    g_step = torch.autograd.grad(loss_of(y_step, s_step, aux_step), params, allow_unused=True)
    for a, b in zip(g_step, g_seq):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", [n for n in CORES if n != "ff"])
def test_reset_forgets_the_past(name):
    """After done, an element's outputs do not depend on anything before the reset."""
    core = build(name)
    x, done = inputs()
    y1, _, _ = run_sequence(core, x, done)
    x2 = x.detach().clone()
    x2[:2, 0] += torch.randn(2, D, dtype=torch.float64)  # element 0 resets at t=2
    y2, _, _ = run_sequence(core, x2, done)
    torch.testing.assert_close(y1[2:, 0], y2[2:, 0])
    assert not torch.allclose(y1[:2, 0], y2[:2, 0])
    torch.testing.assert_close(y1[:, 1:], y2[:, 1:])  # other elements untouched


@pytest.mark.parametrize("name", [n for n in CORES if n != "ff"])
def test_memory_carries_information(name):
    """Without resets, early inputs change later outputs (the core is not memoryless)."""
    core = build(name)
    x, _ = inputs()
    no_done = torch.zeros(T, B, dtype=torch.bool)
    y1, _, _ = run_sequence(core, x, no_done)
    x2 = x.detach().clone()
    x2[0] += 1.0
    y2, _, _ = run_sequence(core, x2, no_done)
    assert not torch.allclose(y1[-1], y2[-1])


def test_unknown_core_lists_choices():
    with pytest.raises(ValueError) as err:
        make_core("transformer", 4)
    assert all(name in str(err.value) for name in CORES)


@pytest.mark.parametrize("options,match", [
    (dict(feature_map="relu"), "unknown feature map 'relu'; valid feature maps: elu, dpfp, favor"),
    (dict(heads=4), "valid options"),
    (dict(update_rule="hebb"), "unknown update rule 'hebb'; valid update rules: sum, delta, gated"),
    (dict(normalisation=True), "unknown normalisation True; valid normalisations: sum, attention, none"),
    (dict(hidden_size=0), "positive"),
])
def test_bad_options_raise_value_error(options, match):
    with pytest.raises(ValueError, match=match):
        make_core("delta", 4, **options)


def test_bad_input_size():
    with pytest.raises(ValueError, match="input_size"):
        make_core("lstm", 0)


def test_registry_entries_resolve():
    for name in CORES:
        assert hasattr(core_class(name), "Config")


def test_default_sizes_are_the_papers_atari_sizes():
    core = make_core("delta", 10)
    c = core.config
    assert (c.num_layers, c.num_heads, c.head_dim, c.ff_size, c.hidden_size) == (2, 4, 32, 512, 128)
    assert core.initial_state(2)[0].shape == (2, 4, 32, 32)
    assert make_core("lstm", 10).output_size == 256


def test_srwm_resets_to_its_learned_w0():
    """srwm's fast weights restart from the learned W_0 (Irie et al. 2022), not from zero: right after a
    reset, the first layer's output heads are the first d rows of W_0 x_t (a zero W would give 0), and
    W_0 gets a gradient through the steps after the reset."""
    from fastnet.kernels.srwm.pytorch import srwm_step

    core = build("srwm")
    layer = core.layers[0]
    with torch.no_grad():
        layer.W0.add_(torch.randn_like(layer.W0))  # a W_0 moved away from its initialisation, as if learned
    x, done = inputs()
    state = tuple(s + torch.randn_like(s) for s in core.initial_state(B))  # a mid-episode state
    _, state_after, _ = core(x, state, done)
    # element 2 resets at t=5 (its last step): its final layer-0 state holds exactly one write from W_0
    h = core.norms[0](core.input_proj(x[5, 2]))
    heads = layer.proj(h).view(SMALL["num_heads"], SMALL["head_dim"])
    y, update = srwm_step(layer.W0.unsqueeze(0), heads.unsqueeze(0))
    torch.testing.assert_close(state_after[0][2], update[0])
    torch.testing.assert_close(y[0], torch.einsum("hrd,hd->hr", layer.W0, heads)[:, :SMALL["head_dim"]])
    assert y.abs().max() > 1e-3
    (grad,) = torch.autograd.grad(state_after[0][2].sum(), layer.W0)
    assert grad.abs().sum() > 0


def test_srwm_zero_state_is_w0_not_zero_weights():
    """The all-zero state means W = W_0: the core's first output differs from one whose W_0 is zeroed."""
    core = build("srwm")
    x, done = inputs()
    y1, _, _ = run_sequence(core, x, done)
    for layer in core.layers:
        with torch.no_grad():
            layer.W0.zero_()
    y2, _, _ = run_sequence(core, x, done)
    assert not torch.allclose(y1[0], y2[0])


def causal_conv_loop(x, weight, buffer, done):
    """Independent reference of the convolution of gated_delta and delta_product: per step, batch element
    and tap, the input it reads, left out when it comes before the element's last reset; autograd."""
    T, B, _ = x.shape
    K = weight.shape[1]
    seq = torch.cat([buffer.transpose(0, 1), x])  # seq[K - 1 + s]: the input of step s (s < 0: the buffer)

    def start(b, t):  # the last reset of element b at or before step t
        return max([s for s in range(t + 1) if done[s, b]], default=-K)

    out = torch.stack([torch.stack([sum(weight[:, K - 1 - j] * seq[K - 1 + t - j, b] for j in range(K)
                                        if t - j >= start(b, t)) for b in range(B)]) for t in range(T)])
    keep = torch.tensor([[float(s >= start(b, T - 1)) for s in range(T - K + 1, T)] for b in range(B)])
    return out, seq[-(K - 1):].transpose(0, 1) * keep.to(x.dtype).unsqueeze(-1)


@pytest.mark.parametrize("T,K", [(7, 4), (2, 4), (5, 2)])
def test_causal_conv_matches_a_loop_values_and_grads(T, K):
    """The convolution's written-out backward against autograd through an explicit loop, float64, with
    resets at t = 0, inside the first K-1 steps and later, and T < K-1 (the buffer outlives the sequence)."""
    from fastnet.layers import causal_conv

    torch.manual_seed(3)
    B, C = 3, 5
    x = torch.randn(T, B, C, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(C, K, dtype=torch.float64, requires_grad=True)
    buffer = torch.randn(B, K - 1, C, dtype=torch.float64, requires_grad=True)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[0, 0] = done[1, 1] = done[T - 1, 1] = True
    out, new_buffer = causal_conv(x, weight, buffer, done)
    out_ref, buffer_ref = causal_conv_loop(x, weight, buffer, done)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(new_buffer, buffer_ref)
    cotangents = torch.randn_like(out), torch.randn_like(new_buffer)
    grads = torch.autograd.grad((out * cotangents[0]).sum() + (new_buffer * cotangents[1]).sum(), (x, weight, buffer))
    grads_ref = torch.autograd.grad((out_ref * cotangents[0]).sum() + (buffer_ref * cotangents[1]).sum(),
                                    (x, weight, buffer))
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda *a: causal_conv(*a, done), (x, weight, buffer))


def test_the_clock_counts_the_steps_since_each_reset():
    """steps_since_reset against a loop; the core's clock state carries the count across calls."""
    from fastnet.position import steps_since_reset

    done = torch.zeros(7, 3, dtype=torch.bool)
    done[0, 0] = done[3, 1] = done[2, 2] = done[5, 2] = True
    before = torch.tensor([4.0, 5.0, 2.0])
    expected = torch.empty(7, 3)
    for b in range(3):
        count = before[b].item()
        for t in range(7):
            count = 0.0 if done[t, b] else count
            expected[t, b] = count
            count += 1
    torch.testing.assert_close(steps_since_reset(before, done), expected)

    core = make_core("delta", D, **SMALL, position_features=4)
    state = core.initial_state(3)
    for start, end in [(0, 3), (3, 7)]:
        _, state, _ = core(torch.randn(end - start, 3, D), state, done[start:end])
    torch.testing.assert_close(state[-1][:, 0], steps_since_reset(torch.zeros(3), done)[-1] + 1)


def test_sinusoidal_features_by_hand():
    """size 4: ω = (1, 10000^(-1/2)) = (1, 0.01)."""
    from fastnet.position import sinusoidal_features

    got = sinusoidal_features(torch.tensor([2.0], dtype=torch.float64), 4)
    want = torch.tensor([[2.0, 0.02, 2.0, 0.02]], dtype=torch.float64)
    torch.testing.assert_close(got, torch.cat([want[:, :2].sin(), want[:, 2:].cos()], -1))


@pytest.mark.parametrize("name,options", [("delta", SMALL), ("lstm", dict(hidden_size=12))])
@pytest.mark.parametrize("features", [0, 4])
def test_the_clock_reaches_the_output(name, options, features):
    """Two elements see the same inputs from a zero state, one at step 0, one at step 10:
    their outputs differ with position features, and only then."""
    torch.manual_seed(0)
    core = make_core(name, D, **options, position_features=features).double()
    state = core.initial_state(2, "cpu")
    if features:
        state = (*state[:-1], torch.tensor([[0.0], [10.0]], dtype=torch.float64))
    x = torch.randn(3, 1, D, dtype=torch.float64).expand(3, 2, D)
    y, _, _ = core(x, state, torch.zeros(3, 2, dtype=torch.bool))
    assert torch.allclose(y[:, 0], y[:, 1]) == (features == 0)


@pytest.mark.parametrize("name", ["delta", "lstm"])
def test_position_features_must_be_even(name):
    with pytest.raises(ValueError, match="position_features"):
        make_core(name, D, position_features=3)
