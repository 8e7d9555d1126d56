"""Metalearned Neural Memory cores ``mnm_g`` and ``mnm_p`` (Munkhdalai et al., 2019, §3).

An LSTM controller reads [x_t ; v^r_{t-1}] (§3.1) and emits, through one tanh
projection (Eq. 1), H read keys, H write keys, H write values and a rate vector
β' that a second projection squashes to one scalar β_t = σ(w·β' + b) per batch
element. The memory f_φ is an MLP without biases whose hidden layers are tanh and
whose output layer is the identity (§3.2, appendix A); its weights φ = {M^l} are
fast weights, written at every step *before* the read:

* ``mnm_g`` (:class:`MNMGCore`) takes one gradient step φ_t = φ_{t-1} - β_t ∇L^up_t
  (Eqs. 2-3). The gradient is an analytic backward through the MLP written with
  differentiable tensor ops (:func:`memory_gradient`), so autograd carries the
  task loss through every write back to the controller without ``create_graph``.
* ``mnm_p`` (:class:`MNMPCore`) applies the learned local perceptron rule (Eq. 4)
  M^l_t = M^l_{t-1} - β_t (z^l - z'^l) z^{l-1}ᵀ with targets z'^l = q^l_ψ(v^w) from a
  learned backward feedback prediction function (BFPF) per layer.

The read is v^r_t = mean over heads of f_{φ_t}(k^r_{t,i}) (§3.2), the output
y_t = W_y [h_t ; v^r_t] + b_y (§3.1), and ``aux["meta"]`` is the meta loss of Eq. 5
with recall delay 0: the error of the *updated* memory on the step's write pairs.

Loss normalisation. Eq. 2 writes L^up with the squared norm; appendix C (Eq. 9)
differentiates it as (2/d_v)(v̂ - v) aᵀ, i.e. the squared error is averaged over the
value dimension. This module uses that mean-squared form,
L^up_t = 1/(H d_v) Σ_i ||f_{φ_{t-1}}(k^w_{t,i}) - v^w_{t,i}||², for the write and the
same normalisation for the meta loss. With the plain sum and d_v = 100 a step with
β ≈ 1 would overshoot by two orders of magnitude.

State: (h, c, v^r_{t-1}, ΔM^1, ..., ΔM^L), batch first, where ΔM^l = M^l - M^l_0 is the
deviation of the fast weights from their fixed random initialisation M^l_0. The
all-zero state is thus the episode-start memory (the paper resets the memory to a
fixed random draw at every episode, §3.5), and ``fastnet.state.reset_state``
restores it. M^l_0 is drawn once from ``memory_seed`` and stored as a buffer: saved
with the model, never trained (the paper found learning it overfits, §3.5).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fastnet.state import State, reset_state, reset_steps


def memory_forward(weights: list[Tensor], keys: Tensor) -> list[Tensor]:
    """Run keys through the memory MLP f_φ (§3.2); returns every layer's activation.

    ``weights[l]`` is M^{l+1} with shape [B, D_out, D_in]; ``keys`` is [B, N, D_in].
    z^l = tanh(M^l z^{l-1}) on hidden layers and z^L = M^L z^{L-1} on the output
    layer. The result is [z^0 = keys, z^1, ..., z^L], each [B, N, D_l].
    """
    zs = [keys]
    for layer, m in enumerate(weights):
        a = torch.matmul(zs[-1], m.transpose(1, 2))
        zs.append(a if layer == len(weights) - 1 else torch.tanh(a))
    return zs


def _outer_sum(delta: Tensor, z_prev: Tensor) -> Tensor:
    """Σ_i δ_i z_iᵀ over the N heads: [B, N, D_out] x [B, N, D_in] -> [B, D_out, D_in]."""
    return torch.matmul(delta.transpose(1, 2), z_prev)


def memory_gradient(weights: list[Tensor], zs: list[Tensor], values: Tensor) -> list[Tensor]:
    """Analytic ∇_φ L^up (Eq. 2) given the activations ``zs`` of :func:`memory_forward`.

    L^up = 1/(N D_L) Σ_i ||z^L_i - v_i||² over the N keys (the heads). Backward pass:
    δ^L = 2/(N D_L) (z^L - v); ∂L/∂M^l = Σ_i δ^l_i z^{l-1}_iᵀ;
    δ^{l-1} = (M^lᵀ δ^l) ⊙ (1 - (z^{l-1})²) through the tanh layers. Every op is
    differentiable, so the returned gradients carry autograd graphs to the keys,
    values and weights (the second-order terms of §3.5).
    """
    n, d_out = values.shape[1], values.shape[2]
    delta = (zs[-1] - values) * (2.0 / (n * d_out))
    grads = []
    for layer in range(len(weights) - 1, -1, -1):
        grads.append(_outer_sum(delta, zs[layer]))
        if layer > 0:
            delta = torch.matmul(delta, weights[layer]) * (1.0 - zs[layer] ** 2)
    return grads[::-1]


@dataclass
class MNMConfig:
    """Options of both MNM cores; defaults are the paper's maze row (Table 2)."""

    controller_size: int = 200
    """LSTM controller units d_h."""
    memory_size: int = 100
    """d_k = d_v = D_l, the width of every memory layer."""
    num_heads: int = 3
    """Read and write heads H."""
    memory_layers: int = 3
    """Layers of the memory MLP."""
    output_size: int = 200
    """d_o, the size of the core output y_t."""
    memory_seed: int = 0
    """Seed of the fixed memory initialisation M_0."""
    memory_init_gain: float = 1.0
    """M^l_0 has i.i.d. N(0, gain²/D_in) entries."""


class _MNMCore(nn.Module):
    """Controller, interaction heads, memory read and meta loss shared by both cores.

    Subclasses define :meth:`write_direction`, the per-layer matrices G^l of the
    write M^l_t = M^l_{t-1} - β_t G^l.
    """

    Config = MNMConfig

    def __init__(self, input_size: int, config: MNMConfig) -> None:
        super().__init__()
        for name in ("controller_size", "memory_size", "num_heads", "memory_layers", "output_size"):
            if getattr(config, name) <= 0:
                raise ValueError(f"option {name} must be positive, got {getattr(config, name)}")
        if config.memory_init_gain <= 0:
            raise ValueError(f"option memory_init_gain must be positive, got {config.memory_init_gain}")
        self.config = config
        self.output_size = config.output_size
        d, heads = config.memory_size, config.num_heads
        self.controller = nn.LSTMCell(input_size + d, config.controller_size)
        # Eq. 1: [k^r_1..H ; k^w_1..H ; v^w_1..H ; β'] = tanh(W_v h_t + b_v), β' ∈ R^{d_k}.
        self.interaction = nn.Linear(config.controller_size, (3 * heads + 1) * d)
        self.rate = nn.Linear(d, 1)  # β_t = σ(W_β β' + b_β)
        self.output = nn.Linear(config.controller_size + d, config.output_size)
        gen = torch.Generator().manual_seed(config.memory_seed)
        for layer in range(config.memory_layers):
            init = torch.randn(d, d, generator=gen) * (config.memory_init_gain / math.sqrt(d))
            self.register_buffer(f"memory_init_{layer}", init)

    def memory_init(self) -> list[Tensor]:
        """The fixed initial fast weights M^1_0, ..., M^L_0, each [D_out, D_in]."""
        return [getattr(self, f"memory_init_{layer}") for layer in range(self.config.memory_layers)]

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        """Zeros: (h, c, v^r, ΔM^1..L) at an episode start, i.e. the memory at M_0."""
        c, d = self.config, self.config.memory_size
        dtype = self.memory_init_0.dtype
        shapes = [(c.controller_size,), (c.controller_size,), (d,)] + [(d, d)] * c.memory_layers
        return tuple(torch.zeros(batch_size, *s, device=device, dtype=dtype) for s in shapes)

    def interact(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Eq. 1 on h [B, d_h]: read keys, write keys, write values [B, H, d] and β [B]."""
        heads, d = self.config.num_heads, self.config.memory_size
        out = torch.tanh(self.interaction(h))
        vectors = out[:, : 3 * heads * d].view(-1, 3 * heads, d)
        beta = torch.sigmoid(self.rate(out[:, 3 * heads * d :])).squeeze(-1)
        return vectors[:, :heads], vectors[:, heads : 2 * heads], vectors[:, 2 * heads :], beta

    def write_direction(self, weights: list[Tensor], keys: Tensor, values: Tensor) -> list[Tensor]:
        """G^1..G^L for the write M^l ← M^l - β G^l of the pairs (keys, values) [B, H, d]."""
        raise NotImplementedError

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State, dict[str, Tensor]]:
        """Run T steps of x [T, B, D] from ``state``; ``done[t]`` resets before step t.

        Returns y [T, B, output_size], the new state, and ``{"meta": L^meta}``: the
        squared error of the updated memory on the write pairs (Eq. 5, τ = 0),
        averaged over steps, batch, heads and value dimension, so the mean of the
        metas of T one-step calls equals the meta of one T-step call.
        """
        heads = self.config.num_heads
        init = self.memory_init()
        ys, metas = [], []
        for t, (resets, x_t) in enumerate(zip(reset_steps(done), x.unbind(0))):  # unbind: see fastnet.recurrent
            h, c, read, *delta = reset_state(state, done[t]) if resets else state
            h, c = self.controller(torch.cat([x_t, read], dim=-1), (h, c))
            k_read, k_write, v_write, beta = self.interact(h)
            weights = [m0 + dm for m0, dm in zip(init, delta)]
            step = self.write_direction(weights, k_write, v_write)
            delta = [dm - beta.view(-1, 1, 1) * g for dm, g in zip(delta, step)]
            weights = [m0 + dm for m0, dm in zip(init, delta)]
            recall = memory_forward(weights, torch.cat([k_read, k_write], dim=1))[-1]
            read = recall[:, :heads].mean(dim=1)
            metas.append((recall[:, heads:] - v_write).pow(2).mean())
            ys.append(self.output(torch.cat([h, read], dim=-1)))
            state = (h, c, read, *delta)
        return torch.stack(ys), state, {"meta": torch.stack(metas).mean()}


class MNMGCore(_MNMCore):
    """MNM-g: one β-scaled gradient step of L^up per write (§3.3, Eqs. 2-3)."""

    def write_direction(self, weights: list[Tensor], keys: Tensor, values: Tensor) -> list[Tensor]:
        """∇_φ L^up_t evaluated at φ_{t-1} (Eq. 2), computed by :func:`memory_gradient`."""
        return memory_gradient(weights, memory_forward(weights, keys), values)


class MNMPCore(_MNMCore):
    """MNM-p: the learned local perceptron update (§3.4, Eq. 4).

    Reading of the paper: each layer l has a BFPF q^l_ψ, which appendix A says is a
    single-layer net on v^w; here it is a Linear map with bias, z'^l_i = Q^l v^w_i + c^l,
    applied per head. z^l are the forward activations of the write key k^w_i under
    φ_{t-1} (tanh on hidden layers, identity on the output layer; z^0 = k^w_i). The
    update uses the controller's single rate β_t for every layer (docs/cores.md) and the
    same normalisation as L^up: G^l = 2/(H D_l) Σ_i (z^l_i - z'^l_i) z^{l-1}_iᵀ, i.e. the
    gradient of the local regression 1/(H D_l) Σ_i ||M^l z^{l-1}_i - z'^l_i||² taken
    as if layer l were linear. The output layer's map starts as the identity
    (Q^L = I, c^L = 0), so at initialisation its update equals mnm_g's output-layer
    gradient step toward v^w; the other maps have PyTorch's default Linear init.
    All maps are trained by the task and meta losses through the writes.
    """

    def __init__(self, input_size: int, config: MNMConfig) -> None:
        super().__init__(input_size, config)
        d = config.memory_size
        self.feedback = nn.ModuleList(nn.Linear(d, d) for _ in range(config.memory_layers))
        with torch.no_grad():
            self.feedback[-1].weight.copy_(torch.eye(d))
            self.feedback[-1].bias.zero_()

    def write_direction(self, weights: list[Tensor], keys: Tensor, values: Tensor) -> list[Tensor]:
        """G^l = 2/(H D_l) Σ_i (z^l_i - q^l_ψ(v^w_i)) z^{l-1}_iᵀ for every layer (Eq. 4)."""
        zs = memory_forward(weights, keys)
        scale = 2.0 / (keys.shape[1] * self.config.memory_size)
        return [
            _outer_sum((zs[layer + 1] - q(values)) * scale, zs[layer])
            for layer, q in enumerate(self.feedback)
        ]
