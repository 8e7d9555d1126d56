"""Multi-head fast-weight sublayers: a slow projection, the fast-weight op, an output Linear.

Every layer maps x [T,B,D] -> [T,B,D] with a state tuple (batch on dim 0), see
``fastnet.registry``. The slow projections are bias-free, as in the official RL code.
"""
from __future__ import annotations

import math
import typing
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from fastnet.feature_maps import FeatureMap
from fastnet.kernels.srwm.pytorch import srwm_rows
from fastnet.options import check_choice
from fastnet.recurrent import delta_lstm_step, delta_rnn_sequence, rec_delta_sequence, srwm_sequence
from fastnet.rules import RuleName, fast_weight_sequence, householder_sequence
from fastnet.state import State, reset_state, reset_steps


def _heads(x: Tensor, num_heads: int) -> Tensor:
    return x.view(*x.shape[:-1], num_heads, -1)


class FastWeightLayer(nn.Module):
    """Linear Transformer / Delta Net sublayer (Eqs. 17, 20-25; Eqs. 26-29 for normalisation).

    ``normalisation`` is "sum" (Eq. 29 on φ(k), φ(q)), "attention" (Eqs. 26-28: divide the
    read by z_t·φ(q) and, for the delta rule, the retrieval v̄ by z_{t-1}·φ(k)) or "none".
    State: W [B,H,d,d_dot], plus z [B,H,d_dot] with attention normalisation.
    """

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, update_rule: str,
                 feature_map: str, normalisation: str, dpfp_nu: int, favor_features: int):
        super().__init__()
        check_choice(update_rule, typing.get_args(RuleName), kind="update rule")
        self.H, self.d, self.rule, self.normalisation = num_heads, head_dim, update_rule, normalisation
        self.phi = FeatureMap(feature_map, head_dim, dpfp_nu, favor_features, normalisation)
        self.has_beta = update_rule != "sum"
        self.proj = nn.Linear(hidden_size, num_heads * (3 * head_dim + self.has_beta), bias=False)
        self.out = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def state_shapes(self) -> list[tuple[int, ...]]:
        shapes = [(self.H, self.d, self.phi.output_dim)]
        if self.normalisation == "attention":
            shapes.append((self.H, self.phi.output_dim))
        return shapes

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B, _ = x.shape
        p = _heads(self.proj(x), self.H)
        q, k, v = self.phi(p[..., :self.d]), self.phi(p[..., self.d:2 * self.d]), p[..., 2 * self.d:3 * self.d]
        beta = torch.sigmoid(p[..., -1]) if self.has_beta else None
        if self.normalisation == "attention":
            y, W, z = self._attention_normalised(q, k, v, beta, done, state)
            new_state = (W, z)
        else:
            y, W = fast_weight_sequence(self.rule, q, k, v, beta, done, state[0])
            new_state = (W,)
        return self.out(y.reshape(T, B, -1)), new_state

    def _attention_normalised(self, q, k, v, beta, done, state):
        """Eqs. 26-28: z_t = z_{t-1} + φ(k_t); y_t = W_t φ(q_t) / (z_t·φ(q_t));
        v̄_t = W_{t-1} φ(k_t) / (z_{t-1}·φ(k_t)), with v̄ = 0 while z_{t-1} = 0."""
        z, zs = state[1], []
        for t, k_t in enumerate(k.unbind(0)):  # unbind, not k[t]: see fastnet.recurrent
            (z,) = reset_state((z,), done[t])
            zs.append(z)
            z = z + k_t
        z_prev = torch.stack(zs)
        z_now = z_prev + k
        key_dot = (z_prev * k).sum(-1)
        key_scale = torch.where(key_dot > 0, 1.0 / key_dot.clamp_min(1e-12), torch.zeros_like(key_dot))
        y, W = fast_weight_sequence(self.rule, q, k, v, beta, done, state[0],
                                    key_scale if self.rule == "delta" else None)
        return y / ((z_now * q).sum(-1, keepdim=True) + 1e-5), W, z


class RecurrentDeltaLayer(nn.Module):
    """Recurrent Delta Net sublayer (Irie et al. 2021, §3; docs/cores.md). State: W [B,H,d,d], y_{t-1} [B,H,d]."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int):
        super().__init__()
        self.H, self.d = num_heads, head_dim
        self.proj = nn.Linear(hidden_size, num_heads * (3 * head_dim + 1), bias=False)
        std = 1.0 / math.sqrt(head_dim)  # official code: R_* ~ N(0, 1/sqrt(d))
        self.R = nn.Parameter(torch.randn(3, num_heads, head_dim, head_dim) * std)
        self.r_beta = nn.Parameter(torch.randn(num_heads, head_dim) * std)
        self.out = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.H, self.d, self.d), (self.H, self.d)]

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B, _ = x.shape
        p, d = _heads(self.proj(x), self.H), self.d
        y, W, y_last = rec_delta_sequence(
            p[..., :d], p[..., d:2 * d], p[..., 2 * d:3 * d], p[..., -1],
            self.R, self.r_beta, done, state,
        )
        return self.out(y.reshape(T, B, -1)), (W, y_last)


class DeltaRNNLayer(nn.Module):
    """Delta RNN (Version B) sublayer: y_t = W_t q_t + R_t softmax(y_{t-1}), W and R written by
    their own delta rules. State: W, R [B,H,d,d], y_{t-1} [B,H,d]."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int):
        super().__init__()
        self.H, self.d = num_heads, head_dim
        self.proj = nn.Linear(hidden_size, num_heads * (5 * head_dim + 2), bias=False)
        self.out = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.H, self.d, self.d), (self.H, self.d, self.d), (self.H, self.d)]

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B, _ = x.shape
        p, d = _heads(self.proj(x), self.H), self.d
        q, k, v, kr, vr = (p[..., i * d:(i + 1) * d] for i in range(5))
        beta, beta_r = torch.sigmoid(p[..., -2]), torch.sigmoid(p[..., -1])
        y, W, R, y_last = delta_rnn_sequence(
            torch.softmax(q, -1), torch.softmax(k, -1), v, beta,
            torch.softmax(kr, -1), vr, beta_r, done, state,
        )
        return self.out(y.reshape(T, B, -1)), (W, R, y_last)


class DeltaLSTMLayer(nn.Module):
    """Delta LSTM (Version D, recurrent-FWP appendix Eqs. 36-40) sublayer.

    Six fast weights (W, R, W_f, R_f, W_o, R_o), each with its own key, value and β from
    the slow projection of x_t. State: the six [B,H,d,d] matrices, y_{t-1} and c_{t-1}.
    """

    NUM_FAST = 6

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int):
        super().__init__()
        self.H, self.d = num_heads, head_dim
        self.proj = nn.Linear(hidden_size, num_heads * ((1 + 2 * self.NUM_FAST) * head_dim + self.NUM_FAST),
                              bias=False)
        self.out = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.H, self.d, self.d)] * self.NUM_FAST + [(self.H, self.d)] * 2

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B, _ = x.shape
        n, d = self.NUM_FAST, self.d
        p = _heads(self.proj(x), self.H)
        q = torch.softmax(p[..., :d], -1)
        keys = torch.softmax(p[..., d:(1 + n) * d].unflatten(-1, (n, d)), -1).movedim(-2, 0)
        values = p[..., (1 + n) * d:(1 + 2 * n) * d].unflatten(-1, (n, d)).movedim(-2, 0)
        betas = torch.sigmoid(p[..., (1 + 2 * n) * d:]).movedim(-1, 0)
        ys = []
        steps = zip(reset_steps(done), q.unbind(0), keys.unbind(1), values.unbind(1), betas.unbind(1))
        for t, (resets, q_t, keys_t, values_t, betas_t) in enumerate(steps):  # unbind: see fastnet.recurrent
            if resets:
                state = reset_state(state, done[t])
            fast, y, c = delta_lstm_step(state[:n], state[n], state[n + 1], q_t, keys_t, values_t, betas_t)
            state = (*fast, y, c)
            ys.append(y)
        return self.out(torch.stack(ys).reshape(T, B, -1)), state


def causal_conv(x: Tensor, weight: Tensor, buffer: Tensor, done: Tensor) -> tuple[Tensor, Tensor]:
    """Depthwise causal convolution over time that never looks across a reset.

    out_t = Σ_{j<K} weight[:, K-1-j] ⊙ x_{t-j}, where x_{t-j} counts only if no reset falls in
    (t-j, t]; the K-1 inputs before the sequence come from ``buffer``.

    Args:
        x: [T,B,C]; weight: [C,K]; buffer: [B,K-1,C] (the last K-1 inputs, zeros at an episode start);
        done: [T,B] bool.
    Returns:
        out [T,B,C] and the new buffer [B,K-1,C] (inputs from before the last reset zeroed).
    """
    return CausalConv.apply(x, weight, buffer, done)


def _conv_taps(seq: Tensor, seg: Tensor, T: int) -> Iterator[tuple[int, Tensor, Tensor]]:
    """For each tap i < K of :func:`causal_conv`: the inputs it reads, seq[i:i+T] = x_{t-(K-1-i)} [T,B,C], and
    whether each is in step t's episode [T,B,1] (``seg``: resets so far, [K-1+T,B])."""
    K = seq.shape[0] - T + 1
    for i in range(K):
        yield i, seq[i:i + T], (seg[i:i + T] == seg[K - 1:]).to(seq.dtype).unsqueeze(-1)


class CausalConv(torch.autograd.Function):
    """:func:`causal_conv` with its backward written out: it saves the input (with the buffer in front) once,
    where autograd would keep a masked copy of it per tap."""

    @staticmethod
    def forward(ctx, x, weight, buffer, done):
        T, K = x.shape[0], weight.shape[1]
        seq = torch.cat([buffer.transpose(0, 1), x])  # [K-1+T, B, C]
        seg = torch.cat([done.new_zeros(K - 1, done.shape[1], dtype=torch.long), done.long().cumsum(0)])
        out = x.new_zeros(x.shape)
        for i, taps, same in _conv_taps(seq, seg, T):
            out.addcmul_(taps * same, weight[:, i])
        keep = (seg[-(K - 1):] == seg[-1]).to(x.dtype).unsqueeze(-1)
        ctx.save_for_backward(seq, seg, weight)
        return out, (seq[-(K - 1):] * keep).transpose(0, 1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_buffer):
        seq, seg, weight = ctx.saved_tensors
        T, K = d_out.shape[0], weight.shape[1]
        d_seq, d_weight = torch.zeros_like(seq), torch.empty_like(weight)
        for i, taps, same in _conv_taps(seq, seg, T):
            d_taps = d_out * same
            d_seq[i:i + T].addcmul_(d_taps, weight[:, i])
            d_weight[:, i] = (d_taps * taps).sum((0, 1))
        keep = (seg[-(K - 1):] == seg[-1]).to(seq.dtype).unsqueeze(-1)
        d_seq[-(K - 1):].addcmul_(d_buffer.transpose(0, 1), keep)
        return d_seq[K - 1:], d_weight, d_seq[:K - 1].transpose(0, 1), None


class HouseholderLayer(nn.Module):
    """Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025, Eq. 10) and DeltaProduct (Siems et al.
    2025) sublayer: per step a decay, then ``num_householder`` = n_h delta-rule writes, then a read
    (:func:`fastnet.rules.householder_sequence`).

    A bias-free projection gives q, n_h keys and values, n_h rates β and (when ``gated``) the decay
    input a. With ``conv_size`` K > 0, q, k and v pass a depthwise causal convolution of width K and
    a SiLU first (as in the paper). Then q and k are L2-normalised per head;
    β = σ(·), or 2σ(·) with ``negative_eigenvalues`` (eigenvalues of each transition in [-1, 1]);
    α_t = exp(g_t), g_t = -exp(A_log) softplus(a_t + dt_bias) (Mamba2's parametrisation; A_log and
    dt_bias are slow parameters per head). State: W [B,H,d,d], plus the convolution's last K-1
    inputs [B,K-1,H·d·(1+2n_h)].
    """

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, *, num_householder: int, gated: bool,
                 negative_eigenvalues: bool, conv_size: int):
        super().__init__()
        if num_householder < 1 or conv_size < 0:
            raise ValueError(f"num_householder must be >= 1 and conv_size >= 0, got {num_householder}, {conv_size}")
        self.H, self.d, self.n, self.gated = num_heads, head_dim, num_householder, gated
        self.beta_scale = 2.0 if negative_eigenvalues else 1.0
        self.qkv_size = num_heads * head_dim * (1 + 2 * num_householder)
        self.proj = nn.Linear(hidden_size, self.qkv_size + num_heads * (num_householder + gated), bias=False)
        self.conv_size = conv_size
        if conv_size:
            bound = 1.0 / math.sqrt(conv_size)  # nn.Conv1d's default for a depthwise kernel
            self.conv = nn.Parameter(torch.empty(self.qkv_size, conv_size).uniform_(-bound, bound))
        if gated:  # Mamba2 initialisation: A ~ U[1, 16], dt ~ logU[1e-3, 1e-1], dt_bias = softplus^-1(dt)
            self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(1, 16).log())
            dt = torch.empty(num_heads).uniform_(math.log(1e-3), math.log(1e-1)).exp()
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.out = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def state_shapes(self) -> list[tuple[int, ...]]:
        conv = [(self.conv_size - 1, self.qkv_size)] if self.conv_size > 1 else []
        return [(self.H, self.d, self.d)] + conv

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B, _ = x.shape
        H, d, n = self.H, self.d, self.n
        p = self.proj(x)
        qkv, rest = p[..., :self.qkv_size], p[..., self.qkv_size:]
        new_state: tuple[Tensor, ...] = ()
        if self.conv_size:
            if self.conv_size > 1:
                qkv, buffer = causal_conv(qkv, self.conv, state[1], done)
                new_state = (buffer,)
            else:
                qkv = qkv * self.conv[:, 0]
            qkv = torch.nn.functional.silu(qkv)
        qkv = _heads(qkv, H)
        q = torch.nn.functional.normalize(qkv[..., :d], dim=-1)
        k = torch.nn.functional.normalize(qkv[..., d:(1 + n) * d].unflatten(-1, (n, d)), dim=-1)
        v = qkv[..., (1 + n) * d:].unflatten(-1, (n, d))
        rest = _heads(rest, H)
        beta = self.beta_scale * torch.sigmoid(rest[..., :n])
        g = -self.A_log.exp() * torch.nn.functional.softplus(rest[..., n] + self.dt_bias) if self.gated else None
        y, W = householder_sequence(q, k, v, beta, g, done, state[0])
        return self.out(y.reshape(T, B, -1)), (W, *new_state)


class SRWMLayer(nn.Module):
    """Self-referential weight matrix sublayer (Irie, Schlag, Csordás & Schmidhuber, ICML 2022,
    Eqs. 5-8; :mod:`fastnet.kernels.srwm.pytorch`): a bias-free projection to H heads of size d, one
    self-modifying matrix W ∈ R^{(3d+4)×d} per head, and a bias-free output Linear.

    W_0 [H,3d+4,d] is a learned slow parameter, drawn from N(0, 1/d). The state is D = W - W_0
    [B,H,3d+4,d]: so the all-zero state is W_0, and the reset rule shared by every core (the state
    times 1 - done) sets W back to the learned W_0 at an episode start, not to zero.
    """

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int):
        super().__init__()
        self.H, self.d = num_heads, head_dim
        self.proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)
        self.W0 = nn.Parameter(torch.randn(num_heads, srwm_rows(head_dim), head_dim) / math.sqrt(head_dim))
        self.out = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.H, srwm_rows(self.d), self.d)]

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B, _ = x.shape
        y, D = srwm_sequence(_heads(self.proj(x), self.H), self.W0, done, state[0])
        return self.out(y.reshape(T, B, -1)), (D,)
