"""Multi-head fast-weight sublayers: a slow projection, the fast-weight op, an output Linear.

Every layer maps x [T,B,D] -> [T,B,D] with a state tuple (batch on dim 0), see
``fastnet.registry``. The slow projections are bias-free, as in the official RL code.
"""
from __future__ import annotations

import typing

import math

import torch
from torch import Tensor, nn

from fastnet.feature_maps import FeatureMap
from fastnet.recurrent import delta_lstm_step, delta_rnn_sequence, rec_delta_sequence
from fastnet.rules import RuleName, fast_weight_sequence
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
        if update_rule not in typing.get_args(RuleName):
            raise ValueError(f"unknown update rule {update_rule!r}; choose one of {list(typing.get_args(RuleName))}")
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
    """Recurrent Delta Net sublayer (MODELS.md ``rec_delta``). State: W [B,H,d,d], y_{t-1} [B,H,d]."""

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
            self.R[0], self.R[1], self.R[2], self.r_beta, done, *state,
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
            torch.softmax(kr, -1), vr, beta_r, done, *state,
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
