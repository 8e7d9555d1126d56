"""The memory cores behind ``make_core`` (docs/cores.md: "The cores" and "The block").

The fast-weight cores share one block stack (as in the official RL code): the core input is
projected by Linear(d_in -> hidden); then each layer is a pre-LayerNorm fast-weight sublayer
with a residual connection, followed by a pre-LayerNorm feed-forward sublayer
(Linear(hidden -> ff), ReLU, Linear(ff -> hidden)) with a residual connection.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from fastnet.feature_maps import FeatureMapName
from fastnet.layers import (
    DeltaLSTMLayer,
    DeltaRNNLayer,
    FastWeightLayer,
    HouseholderLayer,
    RecurrentDeltaLayer,
    SRWMLayer,
)
from fastnet.position import append_clock, check_position_features
from fastnet.rules import RuleName
from fastnet.state import State, reset_state, zeros_state


class FeedForwardCore(nn.Module):
    """``ff``: no memory; the identity on the stem's features."""

    @dataclass
    class Config:
        pass

    def __init__(self, input_size: int, config: Config):
        super().__init__()
        self.output_size = input_size

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        return ()

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State, dict]:
        return x, state, {}


@dataclass
class RNNConfig:
    """Options of ``lstm`` and ``gru``."""

    hidden_size: int = 256
    """Units per layer (the LSTM's or the GRU's)."""
    num_layers: int = 1
    """Stacked layers."""
    position_features: int = 0
    """Sinusoidal features of the steps since the episode start, appended to the input (even; 0: none)."""


class TorchRNNCore(nn.Module):
    """A torch RNN (``rnn_type``: nn.LSTM or nn.GRU), stored as the attribute ``attribute``.

    State: the RNN's hidden tensors (LSTM: h, c; GRU: h), each [B, num_layers, hidden], then the
    clock [B,1] with ``position_features`` (as in :class:`BlockStack`). The sequence is cut where
    any batch element resets, and each span runs as one call of the RNN. One step (T = 1, the
    actors' call) runs the layers' ``cell`` ops instead (:meth:`_step`).
    """

    rnn_type: type[nn.RNNBase]
    attribute: str
    num_hidden_tensors: int
    cell: Callable[..., Tensor | tuple[Tensor, Tensor]]

    def __init__(self, input_size: int, config: RNNConfig):
        super().__init__()
        check_position_features(config.position_features)
        self.config, self.output_size = config, config.hidden_size
        setattr(self, self.attribute, self.rnn_type(input_size + config.position_features, config.hidden_size,
                                                    config.num_layers))

    @property
    def rnn(self) -> nn.RNNBase:
        return getattr(self, self.attribute)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        shape = (self.config.num_layers, self.config.hidden_size)
        clock = [(1,)] if self.config.position_features else []
        return zeros_state([shape] * self.num_hidden_tensors + clock, batch_size, device, self.rnn.weight_ih_l0.dtype)

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State, dict]:
        clock: tuple[Tensor, ...] = ()
        if self.config.position_features:
            x, last = append_clock(x, state[-1], done, self.config.position_features)
            state, clock = state[:-1], (last,)
        if x.shape[0] == 1:  # one step (the actors'): the cell, without nn.LSTM's or nn.GRU's per-call set-up
            return self._step(x[0], reset_state(state, done[0]), clock)
        cuts = [0, *(done[1:].flatten(1).any(1).nonzero().flatten() + 1).tolist(), x.shape[0]]
        outputs = []
        for start, end in zip(cuts[:-1], cuts[1:]):
            hidden = tuple(s.transpose(0, 1).contiguous() for s in reset_state(state, done[start]))
            y, hidden = self.rnn(x[start:end], hidden if len(hidden) > 1 else hidden[0])
            state = tuple(s.transpose(0, 1) for s in (hidden if isinstance(hidden, tuple) else (hidden,)))
            outputs.append(y)
        return torch.cat(outputs), (*state, *clock), {}

    def _step(self, x: Tensor, state: State, clock: tuple[Tensor, ...]) -> tuple[Tensor, State, dict]:
        """One step of x [B, D] through the layers' cells (``torch.lstm_cell``/``gru_cell``, the
        ops nn.LSTM and nn.GRU run per step), from ``state`` (already reset)."""
        rnn, new = self.rnn, []
        for layer in range(self.config.num_layers):
            hidden = tuple(s[:, layer] for s in state)
            weights = [getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            out = self.cell(x, hidden if len(hidden) > 1 else hidden[0], *weights)
            out = out if isinstance(out, tuple) else (out,)
            new.append(out)
            x = out[0]
        return x[None], (*(torch.stack(parts, 1) for parts in zip(*new)), *clock), {}


class LSTMCore(TorchRNNCore):
    """``lstm``: an LSTM (one layer of 256 units by default, as on Atari); state (h, c)."""

    Config = RNNConfig
    rnn_type, attribute, num_hidden_tensors, cell = nn.LSTM, "lstm", 2, staticmethod(torch.lstm_cell)


class GRUCore(TorchRNNCore):
    """``gru``: a GRU (Cho et al. 2014), POPGym's strongest memory model under PPO (Morad et al.,
    ICLR 2023); one layer of 256 units by default, as ``lstm``; state h."""

    Config = RNNConfig
    rnn_type, attribute, num_hidden_tensors, cell = nn.GRU, "gru", 1, staticmethod(torch.gru_cell)


@dataclass
class BlockConfig:
    """Sizes of the block stack (defaults, the papers' Atari sizes: 2 layers, 4 heads × 32, FF 512)."""

    hidden_size: int = 128
    """Width of the residual stream (the input is projected to it)."""
    num_layers: int = 2
    """Blocks of [fast-weight sublayer; feed-forward sublayer]."""
    num_heads: int = 4
    """Fast-weight heads per layer."""
    head_dim: int = 32
    """Key, query and value size per head (the fast weight is head_dim x head_dim)."""
    ff_size: int = 512
    """Hidden units of each feed-forward sublayer."""
    position_features: int = 0
    """Sinusoidal features of the steps since the episode start, appended to the input (even; 0: none)."""


class BlockStack(nn.Module):
    """Input projection, then ``num_layers`` × [pre-LN fast-weight sublayer; pre-LN FF], residual.

    Subclasses set ``make_layer()``. The state is the concatenation of every layer's state, then,
    with ``position_features`` P > 0, the step count since the episode start [B,1], whose
    sinusoidal encoding (:mod:`fastnet.position`) joins the input before the projection.
    """

    def __init__(self, input_size: int, config: BlockConfig):
        super().__init__()
        sizes = {k: getattr(config, k) for k in ("hidden_size", "num_layers", "num_heads", "head_dim", "ff_size")}
        if min(sizes.values()) <= 0:
            raise ValueError(f"sizes must be positive, got {sizes}")
        check_position_features(config.position_features)
        self.config, self.output_size = config, config.hidden_size
        self.input_proj = nn.Linear(input_size + config.position_features, config.hidden_size)
        self.layers = nn.ModuleList(self.make_layer() for _ in range(config.num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(config.hidden_size) for _ in range(2 * config.num_layers))
        self.ffs = nn.ModuleList(
            nn.Sequential(nn.Linear(config.hidden_size, config.ff_size), nn.ReLU(),
                          nn.Linear(config.ff_size, config.hidden_size))
            for _ in range(config.num_layers)
        )
        self._state_shapes = [layer.state_shapes() for layer in self.layers]

    def make_layer(self) -> nn.Module:
        raise NotImplementedError

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        shapes = [s for layer_shapes in self._state_shapes for s in layer_shapes]
        clock = [(1,)] if self.config.position_features else []
        return zeros_state(shapes + clock, batch_size, device, self.input_proj.weight.dtype)

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State, dict]:
        clock: tuple[Tensor, ...] = ()
        if self.config.position_features:
            x, last = append_clock(x, state[-1], done, self.config.position_features)
            clock = (last,)
        h, new_state, i = self.input_proj(x), [], 0
        for layer, norm_fw, norm_ff, ff, shapes in zip(
            self.layers, self.norms[0::2], self.norms[1::2], self.ffs, self._state_shapes
        ):
            y, layer_state = layer(norm_fw(h), state[i:i + len(shapes)], done)
            h = h + y
            h = h + ff(norm_ff(h))
            new_state.extend(layer_state)
            i += len(shapes)
        return h, (*new_state, *clock), {}


@dataclass
class FastWeightConfig(BlockConfig):
    """Options of ``linear`` and ``delta``: sizes, φ, normalisation and update rule.

    ``feature_map``: elu, dpfp (``dpfp_nu``), favor (``favor_features`` = m), softmax, tanh,
    identity. ``normalisation``: sum (Eq. 29), attention (Eqs. 26-28) or none.
    """

    feature_map: FeatureMapName = "elu"
    """φ applied to keys and queries: elu (elu+1), dpfp, favor, softmax, tanh or identity."""
    normalisation: Literal["sum", "attention", "none"] = "sum"
    """sum: φ divided by its sum (Eq. 29); attention: the denominator of Eqs. 26-28; none."""
    update_rule: RuleName = "delta"
    """sum (Eq. 17), delta (Eqs. 20-25) or gated."""
    dpfp_nu: int = 1
    """ν of DPFP-ν (the feature size is 2ν·head_dim)."""
    favor_features: int = 32
    """m, the number of FAVOR+ random features."""


class DeltaNetCore(BlockStack):
    """``delta``: Delta Net (Eqs. 20-25), φ = elu+1 with sum normalisation by default."""

    Config = FastWeightConfig

    def make_layer(self) -> nn.Module:
        c = self.config
        return FastWeightLayer(c.hidden_size, c.num_heads, c.head_dim, c.update_rule, c.feature_map,
                               c.normalisation, c.dpfp_nu, c.favor_features)


@dataclass
class LinearTransformerConfig(FastWeightConfig):
    """Options of ``linear``: those of ``delta``, with the sum rule by default."""

    update_rule: RuleName = "sum"
    """sum (Eq. 17), delta (Eqs. 20-25) or gated."""


class LinearTransformerCore(DeltaNetCore):
    """``linear``: Linear Transformer (Eq. 17): the sum rule, φ = elu+1, sum normalisation."""

    Config = LinearTransformerConfig


class RecurrentDeltaNetCore(BlockStack):
    """``rec_delta``: Recurrent Delta Net (softmax φ, slow recurrent matrices R_*)."""

    Config = BlockConfig

    def make_layer(self) -> nn.Module:
        return RecurrentDeltaLayer(self.config.hidden_size, self.config.num_heads, self.config.head_dim)


class DeltaRNNCore(BlockStack):
    """``delta_rnn``: Delta RNN, Version B."""

    Config = BlockConfig

    def make_layer(self) -> nn.Module:
        return DeltaRNNLayer(self.config.hidden_size, self.config.num_heads, self.config.head_dim)


class DeltaLSTMCore(BlockStack):
    """``delta_lstm``: Delta LSTM, Version D."""

    Config = BlockConfig

    def make_layer(self) -> nn.Module:
        return DeltaLSTMLayer(self.config.hidden_size, self.config.num_heads, self.config.head_dim)


@dataclass
class GatedDeltaConfig(BlockConfig):
    """Options of ``gated_delta``: the block sizes and the short convolution."""

    conv_size: int = 4
    """Width of the causal depthwise convolution (+ SiLU) on q, k, v; 0 turns it off."""


class GatedDeltaNetCore(BlockStack):
    """``gated_delta``: Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025, Eq. 10),
    W_t = α_t W_{t-1}(I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ, y_t = W_t q_t, with L2-normalised q, k and the
    Mamba2 decay α_t = exp(-exp(A_log) softplus(W_a x_t + dt_bias)). See :class:`HouseholderLayer`."""

    Config = GatedDeltaConfig

    def make_layer(self) -> nn.Module:
        c = self.config
        return HouseholderLayer(c.hidden_size, c.num_heads, c.head_dim, num_householder=1, gated=True,
                                negative_eigenvalues=False, conv_size=c.conv_size)


@dataclass
class DeltaProductConfig(BlockConfig):
    """Options of ``delta_product``: the block sizes, n_h, the gate, the eigenvalue range, the convolution."""

    num_householder: int = 2
    """n_h: delta-rule writes (generalised Householder transitions) per token."""
    gated: bool = False
    """Decay the state by α_t (as in gated_delta) before each token's writes (Gated DeltaProduct)."""
    negative_eigenvalues: bool = False
    """β = 2σ(·) instead of σ(·): each transition's eigenvalues lie in [-1, 1] instead of [0, 1]."""
    conv_size: int = 4
    """Width of the causal depthwise convolution (+ SiLU) on q, k, v; 0 turns it off."""


class DeltaProductCore(BlockStack):
    """``delta_product``: DeltaProduct (Siems et al. 2025): n_h delta-rule writes per token,
    W_{t,j} = W_{t,j-1} + β_{t,j}(v_{t,j} - W_{t,j-1} k_{t,j}) ⊗ k_{t,j}, from W_{t,0} = α_t W_{t-1}
    (α ≡ 1 unless ``gated``), and one read y_t = W_{t,n_h} q_t. See :class:`HouseholderLayer`."""

    Config = DeltaProductConfig

    def make_layer(self) -> nn.Module:
        c = self.config
        return HouseholderLayer(c.hidden_size, c.num_heads, c.head_dim, num_householder=c.num_householder,
                                gated=c.gated, negative_eigenvalues=c.negative_eigenvalues, conv_size=c.conv_size)


@dataclass
class SRWMConfig(BlockConfig):
    """Options of ``srwm``: the block sizes (the head size d sets each matrix to (3d+4)×d)."""


class SRWMCore(BlockStack):
    """``srwm``: the self-referential weight matrix (Irie, Schlag, Csordás & Schmidhuber, ICML 2022,
    Eqs. 5-8), one self-modifying matrix per head (:class:`SRWMLayer`).

    Resets differ from the other cores: the fast weights restart from the learned W_0, not from zero.
    The state holds W_t - W_0, so the all-zero initial state and the shared reset rule (state times
    1 - done) both mean W = W_0.
    """

    Config = SRWMConfig

    def make_layer(self) -> nn.Module:
        return SRWMLayer(self.config.hidden_size, self.config.num_heads, self.config.head_dim)
