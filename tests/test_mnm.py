"""Tests of the Metalearned Neural Memory cores (fastnet/mnm.py).

References are computed independently here: autograd for the write gradient, an
explicit MLP loop for the memory, and per-element fresh runs for resets.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fastnet import make_core
from fastnet.mnm import MNMGCore, MNMPCore, memory_forward, memory_gradient

CORES = ["mnm_g", "mnm_p"]
SMALL = dict(controller_size=9, memory_size=6, num_heads=2, output_size=5)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small_core(name: str, input_size: int = 4, seed: int = 0, **cfg) -> torch.nn.Module:
    torch.manual_seed(seed)
    return make_core(name, input_size, **{**SMALL, **cfg}).double()


def mlp(weights: list[torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
    """Reference memory: tanh hidden layers, identity output, no biases."""
    z = keys
    for i, m in enumerate(weights):
        z = torch.einsum("boi,bni->bno", m, z)
        if i < len(weights) - 1:
            z = torch.tanh(z)
    return z


def random_state(core: torch.nn.Module, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    """A nonzero state reached by running the core on random input."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, batch, 4, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        _, state, _ = core(x, core.initial_state(batch), torch.zeros(3, batch, dtype=torch.bool))
    return state


def memory_weights(core: torch.nn.Module, state: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    return [m0 + dm for m0, dm in zip(core.memory_init(), state[3:])]


def split_interaction(core: torch.nn.Module, h: torch.Tensor):
    """Eq. 1 done by hand: [k^r_1..H; k^w_1..H; v^w_1..H; beta'] then beta = sigmoid."""
    heads, d = core.config.num_heads, core.config.memory_size
    out = torch.tanh(h @ core.interaction.weight.T + core.interaction.bias)
    kr, kw, vw, bp = out.split([heads * d, heads * d, heads * d, d], dim=-1)
    beta = torch.sigmoid(bp @ core.rate.weight.T + core.rate.bias).squeeze(-1)
    return kr.reshape(-1, heads, d), kw.reshape(-1, heads, d), vw.reshape(-1, heads, d), beta


# --------------------------------------------------------------------------- analytic gradient


def test_analytic_gradient_equals_autograd():
    gen = torch.Generator().manual_seed(0)
    shapes = [(7, 5), (6, 7), (4, 6)]  # distinct sizes catch transposition mistakes
    weights = [torch.randn(3, *s, generator=gen, dtype=torch.float64, requires_grad=True) for s in shapes]
    keys = torch.randn(3, 2, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    values = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)

    loss = ((mlp(weights, keys) - values) ** 2).mean(dim=(1, 2)).sum()  # per-batch L^up, summed
    expected = torch.autograd.grad(loss, weights, create_graph=True)
    got = memory_gradient(weights, memory_forward(weights, keys), values)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)

    # Second order: the analytic gradient must carry the same graph as autograd's.
    probe = [torch.randn(g.shape, generator=gen, dtype=torch.float64) for g in got]
    inputs = [keys, values, *weights]
    d_got = torch.autograd.grad(sum((g * p).sum() for g, p in zip(got, probe)), inputs)
    d_exp = torch.autograd.grad(sum((g * p).sum() for g, p in zip(expected, probe)), inputs)
    for a, b in zip(d_got, d_exp):
        torch.testing.assert_close(a, b)


def test_write_matches_equations_3_and_4():
    """One step's change of the state's memory is -beta * (Eq. 3 gradient | Eq. 4 rule)."""
    for name in CORES:
        core = small_core(name)
        state = random_state(core, batch=3, seed=1)
        x = torch.randn(1, 3, 4, dtype=torch.float64)
        with torch.no_grad():
            _, new, _ = core(x, state, torch.zeros(1, 3, dtype=torch.bool))
            _, kw, vw, beta = split_interaction(core, new[0])
        old_w = [w.detach().requires_grad_() for w in memory_weights(core, state)]
        heads, d = core.config.num_heads, core.config.memory_size
        if name == "mnm_g":
            loss = ((mlp(old_w, kw) - vw) ** 2).mean(dim=(1, 2)).sum()
            step = torch.autograd.grad(loss, old_w)
        else:
            zs, z = [kw], kw
            for i, m in enumerate(old_w):
                z = torch.einsum("boi,bni->bno", m, z)
                z = torch.tanh(z) if i < len(old_w) - 1 else z
                zs.append(z)
            step = []
            for i, q in enumerate(core.feedback):
                target = vw @ q.weight.T + q.bias
                step.append(2 / (heads * d) * torch.einsum("bno,bni->boi", zs[i + 1] - target, zs[i]))
        for new_dm, old_dm, g in zip(new[3:], state[3:], step):
            torch.testing.assert_close(new_dm - old_dm, -beta.view(-1, 1, 1) * g)


# --------------------------------------------------------------------------- one-shot binding


@pytest.mark.parametrize("name, max_ratio", [("mnm_g", 0.7), ("mnm_p", 0.9)])
def test_one_shot_binding(name, max_ratio):
    """mnm_p's hidden targets are untrained random maps of v here, so it binds less."""
    core = make_core(name, 4).double()  # paper sizes: memory 100
    gen = torch.Generator().manual_seed(3)
    weights = [m.expand(1, -1, -1) for m in core.memory_init()]
    key = torch.tanh(torch.randn(1, 1, 100, generator=gen, dtype=torch.float64))
    value = torch.tanh(torch.randn(1, 1, 100, generator=gen, dtype=torch.float64))
    before = memory_forward(weights, key)[-1]
    with torch.no_grad():
        step = core.write_direction(weights, key, value)

    def read_after(beta: float) -> torch.Tensor:
        return mlp([w - beta * g for w, g in zip(weights, step)], key)

    err_before = (before - value).pow(2).mean()
    err_after = (read_after(0.99) - value).pow(2).mean()
    assert err_after < max_ratio * err_before
    torch.testing.assert_close(read_after(0.0), before)
    moved = read_after(0.99) - before
    assert F.cosine_similarity(moved.flatten(), (value - before).flatten(), dim=0) > 0.3

    # Small beta: the read moves by -beta * J_phi f(k) . G (first order), via torch.func.jvp.
    beta = 1e-6
    _, tangent = torch.func.jvp(lambda *w: mlp(list(w), key), tuple(weights), tuple(-g for g in step))
    torch.testing.assert_close((read_after(beta) - before) / beta, tangent, rtol=1e-4, atol=1e-6)


def test_perceptron_output_layer_is_delta_rule_when_hidden_targets_agree():
    """With hidden BFPF targets equal to the current activations, Eq. 4 changes only the
    output layer, and the read of k moves exactly by -beta*2/d*(f(k)-v)*||z^2||^2."""
    core = make_core("mnm_p", 4, memory_size=8, num_heads=1).double()
    gen = torch.Generator().manual_seed(4)
    weights = [m.expand(1, -1, -1) for m in core.memory_init()]
    key = torch.tanh(torch.randn(1, 1, 8, generator=gen, dtype=torch.float64))
    value = torch.tanh(torch.randn(1, 1, 8, generator=gen, dtype=torch.float64))
    z1 = torch.tanh(key @ weights[0][0].T)
    z2 = torch.tanh(z1 @ weights[1][0].T)
    with torch.no_grad():
        for q, z in zip(core.feedback[:2], (z1, z2)):
            q.weight.zero_()
            q.bias.copy_(z.flatten())
        step = core.write_direction(weights, key, value)
    assert step[0].abs().max() < 1e-12 and step[1].abs().max() < 1e-12
    before = mlp(weights, key)
    after = mlp([w - 0.5 * g for w, g in zip(weights, step)], key)
    expected = before - 0.5 * 2 / 8 * (before - value) * z2.pow(2).sum()
    torch.testing.assert_close(after, expected)
    assert (after - value).norm() < (before - value).norm()


# --------------------------------------------------------------------------- resets and state


def test_memory_init_is_fixed_buffer_from_seed():
    a, b = make_core("mnm_g", 3, **SMALL), make_core("mnm_p", 3, **SMALL)
    c = make_core("mnm_g", 3, memory_seed=1, **SMALL)
    for m_a, m_b, m_c in zip(a.memory_init(), b.memory_init(), c.memory_init()):
        assert torch.equal(m_a, m_b) and not torch.equal(m_a, m_c)
    assert "memory_init_0" in a.state_dict()
    assert all("memory_init" not in n for n, _ in a.named_parameters())
    assert all(s.abs().sum() == 0 and s.shape[0] == 2 for s in a.initial_state(2, "cpu"))


@pytest.mark.parametrize("name", CORES)
def test_resets_restore_initial_memory_per_element(name):
    core = small_core(name)
    T, B = 7, 2
    state = random_state(core, B, seed=5)
    assert all(s.abs().max() > 0 for s in state)
    x = torch.randn(T, B, 4, dtype=torch.float64)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = done[5, 1] = True
    reset_at = {0: 2, 1: 5}
    with torch.no_grad():
        y, final, _ = core(x, state, done)
        y_nodone, _, _ = core(x, state, torch.zeros(T, B, dtype=torch.bool))
        for b, t0 in reset_at.items():
            # before its own reset an element is unaffected by the other's reset
            torch.testing.assert_close(y[:t0, b], y_nodone[:t0, b])
            # from its reset on it behaves as a fresh episode from the initial memory
            fresh_y, fresh_state, _ = core(x[t0:, b : b + 1], core.initial_state(1),
                                           torch.zeros(T - t0, 1, dtype=torch.bool))
            torch.testing.assert_close(y[t0:, b], fresh_y[:, 0])
            for s, f in zip(final, fresh_state):
                torch.testing.assert_close(s[b : b + 1], f)
        # a one-step call with done from a nonzero state starts at M_0 (the memory read
        # before the write is f_{M_0}; the state is what a fresh start gives)
        _, one, _ = core(x[:1], state, torch.ones(1, B, dtype=torch.bool))
        _, fresh, _ = core(x[:1], core.initial_state(B), torch.zeros(1, B, dtype=torch.bool))
    for s, f in zip(one, fresh):
        torch.testing.assert_close(s, f)


# --------------------------------------------------------------------------- step vs sequence


@pytest.mark.parametrize("name", CORES)
def test_step_mode_equals_sequence_mode(name):
    core = small_core(name)
    T, B = 6, 3
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(T, B, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    state0 = tuple(s.requires_grad_() for s in random_state(core, B, seed=7))
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = done[4, 1] = done[1, 2] = done[5, 2] = True
    w_y = torch.randn(T, B, core.output_size, generator=gen, dtype=torch.float64)
    w_s = [torch.randn(s.shape, generator=gen, dtype=torch.float64) for s in state0]

    def objective(y, state, meta):
        return (y * w_y).sum() + sum((s * w).sum() for s, w in zip(state, w_s)) + 3.0 * meta

    params = list(core.parameters())
    y_seq, s_seq, aux_seq = core(x, state0, done)
    g_seq = torch.autograd.grad(objective(y_seq, s_seq, aux_seq["meta"]), [x, *state0, *params])

    ys, metas, state = [], [], state0
    for t in range(T):
        y, state, aux = core(x[t : t + 1], state, done[t : t + 1])
        ys.append(y)
        metas.append(aux["meta"])
    y_step, meta_step = torch.cat(ys), torch.stack(metas).mean()
    g_step = torch.autograd.grad(objective(y_step, state, meta_step), [x, *state0, *params])

    torch.testing.assert_close(y_step, y_seq)
    torch.testing.assert_close(meta_step, aux_seq["meta"])
    for a, b in zip(state, s_seq):
        torch.testing.assert_close(a, b)
    for a, b in zip(g_step, g_seq):
        torch.testing.assert_close(a, b)
    assert all(g.abs().sum() > 0 for g in g_seq[: 1 + len(state0)])  # x and the initial state matter


# --------------------------------------------------------------------------- meta loss


@pytest.mark.parametrize("name", CORES)
def test_meta_loss_is_mse_after_update(name):
    """Per step, by hand: controller on [x_t; v^r_{t-1}], write, then read and meta loss
    from the *updated* memory (Eq. 5, recall delay 0), and y = W_y[h_t; v^r_t] + b_y."""
    core = small_core(name)
    T, B = 4, 3
    state = random_state(core, B, seed=8)
    x = torch.randn(T, B, 4, dtype=torch.float64)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 1] = True
    expected_metas = []
    with torch.no_grad():
        _, _, aux_seq = core(x, state, done)
        for t in range(T):
            prev = tuple(s * (~done[t]).view(-1, *[1] * (s.dim() - 1)) for s in state)
            y, state, aux = core(x[t : t + 1], state, done[t : t + 1])
            h, c = core.controller(torch.cat([x[t], prev[2]], dim=-1), (prev[0], prev[1]))
            torch.testing.assert_close((state[0], state[1]), (h, c))
            kr, kw, vw, _ = split_interaction(core, h)
            read = mlp(memory_weights(core, state), kr).mean(dim=1)
            torch.testing.assert_close(state[2], read)
            torch.testing.assert_close(y[0], torch.cat([h, read], -1) @ core.output.weight.T + core.output.bias)
            after = ((mlp(memory_weights(core, state), kw) - vw) ** 2).mean()
            before = ((mlp(memory_weights(core, prev), kw) - vw) ** 2).mean()
            torch.testing.assert_close(aux["meta"], after)
            assert not torch.isclose(aux["meta"], before)
            expected_metas.append(after)
    torch.testing.assert_close(aux_seq["meta"], torch.stack(expected_metas).mean())


def reference_forward(core, x, state, done):
    """MNM written independently: autograd (create_graph) for Eq. 3, einsum for Eq. 4."""
    heads, d = core.config.num_heads, core.config.memory_size
    ys, metas = [], []
    for t in range(x.shape[0]):
        keep = (~done[t]).to(x.dtype)
        h, c, read, *delta = (s * keep.view(-1, *[1] * (s.dim() - 1)) for s in state)
        h, c = core.controller(torch.cat([x[t], read], dim=-1), (h, c))
        kr, kw, vw, beta = split_interaction(core, h)
        weights = [m0 + dm for m0, dm in zip(core.memory_init(), delta)]
        if isinstance(core, MNMGCore):
            loss = ((mlp(weights, kw) - vw) ** 2).mean(dim=(1, 2)).sum()
            step = torch.autograd.grad(loss, weights, create_graph=True)
        else:
            zs = [kw]
            for i, m in enumerate(weights):
                z = torch.einsum("boi,bni->bno", m, zs[-1])
                zs.append(torch.tanh(z) if i < len(weights) - 1 else z)
            step = [
                2 / (heads * d) * torch.einsum("bno,bni->boi", zs[i + 1] - (vw @ q.weight.T + q.bias), zs[i])
                for i, q in enumerate(core.feedback)
            ]
        delta = [dm - beta.view(-1, 1, 1) * g for dm, g in zip(delta, step)]
        weights = [m0 + dm for m0, dm in zip(core.memory_init(), delta)]
        read = mlp(weights, kr).mean(dim=1)
        metas.append(((mlp(weights, kw) - vw) ** 2).mean())
        ys.append(torch.cat([h, read], -1) @ core.output.weight.T + core.output.bias)
        state = (h, c, read, *delta)
    return torch.stack(ys), state, torch.stack(metas).mean()


@pytest.mark.parametrize("name", CORES)
def test_matches_reference_values_and_gradients(name):
    core = small_core(name)
    T, B = 5, 2
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(T, B, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    state0 = tuple(s.requires_grad_() for s in random_state(core, B, seed=10))
    done = torch.zeros(T, B, dtype=torch.bool)
    done[3, 0] = True
    w_y = torch.randn(T, B, core.output_size, generator=gen, dtype=torch.float64)
    inputs = [x, *state0, *core.parameters()]

    def run(forward):
        y, state, meta = forward(x, state0, done)
        objective = (y * w_y).sum() + state[3].sum() + 2.0 * meta
        return y, meta, torch.autograd.grad(objective, inputs)

    def core_forward(*args):
        y, state, aux = core(*args)
        return y, state, aux["meta"]

    y, meta, grads = run(core_forward)
    y_ref, meta_ref, grads_ref = run(lambda *args: reference_forward(core, *args))
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(meta, meta_ref)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)


# --------------------------------------------------------------------------- gradient flow


@pytest.mark.parametrize("name", CORES)
def test_task_gradient_flows_through_writes(name, monkeypatch):
    """The k^w, v^w and beta outputs of Eq. 1 reach y only through the memory writes."""
    core = small_core(name)
    T, B = 5, 2
    x = torch.randn(T, B, 4, dtype=torch.float64)
    done = torch.zeros(T, B, dtype=torch.bool)
    heads, d = core.config.num_heads, core.config.memory_size
    write_rows = slice(heads * d, 3 * heads * d)  # k^w and v^w rows of W_v

    def write_grads():
        core.zero_grad(set_to_none=False)
        y, _, _ = core(x, core.initial_state(B), done)
        y.pow(2).sum().backward()  # task loss only, no meta loss
        grads = [core.interaction.weight.grad[write_rows], core.interaction.bias.grad[write_rows],
                 core.rate.weight.grad]
        if name == "mnm_p":
            grads += [q.weight.grad for q in core.feedback]
        return [g.clone() for g in grads]

    assert all(g.abs().max() > 1e-6 for g in write_grads())

    # Control: with the write cut out of the graph, the same parameters get exactly zero gradient.
    write = type(core).write_direction
    monkeypatch.setattr(core, "write_direction", lambda *a: [g.detach() for g in write(core, *a)])
    monkeypatch.setattr(core.rate, "forward", lambda inp: F.linear(inp, core.rate.weight, core.rate.bias).detach())
    assert all(g.abs().max() == 0 for g in write_grads())


# --------------------------------------------------------------------------- learning


def recall_batch(gen: torch.Generator, batch: int, pairs: int, num_keys: int):
    """`pairs` steps of [one-hot key ; one-hot value ; 0], then [one-hot query key ; 0 ; 1].

    Values are a permutation of 0..pairs-1, so without recall the best guess is
    uniform: the chance loss is ln(pairs).
    """
    keys = torch.argsort(torch.rand(batch, num_keys, generator=gen), 1)[:, :pairs]
    values = torch.argsort(torch.rand(batch, pairs, generator=gen), 1)
    query = torch.randint(pairs, (batch,), generator=gen)
    x = torch.zeros(pairs + 1, batch, num_keys + pairs + 1)
    rows = torch.arange(batch)
    for j in range(pairs):
        x[j, rows, keys[:, j]] = 1
        x[j, rows, num_keys + values[:, j]] = 1
    x[pairs, rows, keys[rows, query]] = 1
    x[pairs, :, -1] = 1
    return x, values[rows, query]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "mnm_p" else n  # mnm_p: 14-20 s
                                  for n in CORES])
def test_learns_associative_recall(name):
    """Trainability end to end on the task loss: the loss must fall below 20% of chance,
    which needs recall of pairs older than the last one. With 3 pairs the controller
    could do this alone; that the writes bind is checked by the tests above."""
    pairs, num_keys, batch = 3, 8, 64
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(100)
    core = make_core(name, num_keys + pairs + 1, controller_size=32, memory_size=16, num_heads=1, output_size=32)
    head = torch.nn.Linear(32, pairs)
    opt = torch.optim.Adam([*core.parameters(), *head.parameters()], lr=1e-2)
    done = torch.zeros(pairs + 1, batch, dtype=torch.bool)
    chance, running = math.log(pairs), math.log(pairs)
    for _ in range(2000):
        x, target = recall_batch(gen, batch, pairs, num_keys)
        y, _, _ = core(x, core.initial_state(batch), done)
        loss = F.cross_entropy(head(y[-1]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running = 0.9 * running + 0.1 * loss.item()
        if running < 0.2 * chance:
            break
    assert running < 0.2 * chance


# --------------------------------------------------------------------------- config


def test_defaults_follow_paper_maze_row():
    core = make_core("mnm_p", 10)
    assert (core.config.controller_size, core.config.memory_size, core.config.num_heads) == (200, 100, 3)
    assert core.config.memory_layers == 3 and core.output_size == 200
    assert isinstance(core, MNMPCore) and isinstance(make_core("mnm_g", 10), MNMGCore)
    y, state, aux = core(torch.randn(2, 4, 10), core.initial_state(4, "cpu"), torch.zeros(2, 4, dtype=torch.bool))
    assert y.shape == (2, 4, 200) and aux["meta"].dim() == 0
    assert [tuple(s.shape) for s in state] == [(4, 200), (4, 200), (4, 100)] + [(4, 100, 100)] * 3


@pytest.mark.parametrize("name", CORES)
@pytest.mark.parametrize(
    "bad",
    [
        {"memory_sise": 10},
        {"memory_size": 0},
        {"num_heads": -1},
        {"memory_init_gain": 0.0},
    ],
)
def test_bad_options_raise(name, bad):
    with pytest.raises(ValueError):
        make_core(name, 4, **bad)
