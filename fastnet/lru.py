"""``lru``: the Linear Recurrent Unit (Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu & De, ICML
2023, "Resurrecting Recurrent Neural Networks for Long Sequences", §3), in the block stack.

Per layer, a diagonal complex linear recurrence over N states (Eq. 7, with their §3.3
parametrisation and normalisation):

    h_t = Λ ⊙ h_{t-1} + γ ⊙ (B x_t),     y_t = Re(C h_t) + D ⊙ x_t,

Λ_j = exp(−exp(ν_j) + i·exp(θ_j)) (|Λ_j| < 1 for any ν: stable), γ_j = exp(γ_log_j), initialised
to sqrt(1 − |Λ_j|²) so that a white input keeps its scale; B ∈ C^{N×H}, C ∈ C^{H×N}, D ∈ R^H.
|Λ| starts uniform on the ring [r_min, r_max] and arg Λ uniform on [0, max_phase] (§3.3).

The layer replaces the fast-weight sublayer of :class:`fastnet.cores.BlockStack`: pre-LayerNorm,
residual, then the block's feed-forward sublayer, as the paper's block (LRU, then an MLP). A reset
sets Λ to 0 for that step (nothing of h_{t-1} passes), and the recurrence runs as a chunked scan
(:func:`fastnet.scan.linear_scan`), so a sequence costs about 2√T small loops of tensor ops, not T.

Why the LRU among the modern linear recurrences (issue 74): it is the minimal one that S5 and
Mamba build on (a diagonal, stable, exponentially parametrised recurrence), time-invariant, so the
scan needs no per-step decays and a reset is a zero; Mamba's selective scan needs a CUDA kernel to
be fast and a convolution state across steps; FFM adds its own context and trace dims.

State per layer: h as real pairs [B, N, 2] (``torch.view_as_real``), zero at an episode start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fastnet.cores import BlockConfig, BlockStack
from fastnet.scan import linear_scan
from fastnet.state import State


class LRULayer(nn.Module):
    """One LRU over ``num_states`` complex states, [T,B,H] -> [T,B,H] (the module docstring's Eq. 7)."""

    def __init__(self, hidden_size: int, num_states: int, *, r_min: float, r_max: float, max_phase: float):
        super().__init__()
        if not 0.0 <= r_min < r_max < 1.0:
            raise ValueError(f"need 0 <= r_min < r_max < 1, got r_min {r_min}, r_max {r_max}")
        self.N = num_states
        u1, u2 = torch.rand(num_states), torch.rand(num_states)
        radius = torch.sqrt(u1 * (r_max ** 2 - r_min ** 2) + r_min ** 2)  # uniform on the ring's area
        self.nu_log = nn.Parameter(torch.log(-torch.log(radius)))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2 + 1e-8))
        self.gamma_log = nn.Parameter(0.5 * torch.log(1.0 - radius ** 2))
        # B and C as real pairs, laid out so that one real matmul reads or writes the complex pairs:
        # B [N, 2, H] holds (Re B, Im B) per state; C [H, N, 2] holds (Re C, −Im C), so Re(C h) = C · (Re h, Im h)
        self.B = nn.Parameter(torch.randn(num_states, 2, hidden_size) / math.sqrt(2 * hidden_size))
        self.C = nn.Parameter(torch.randn(hidden_size, num_states, 2) / math.sqrt(num_states))
        self.D = nn.Parameter(torch.randn(hidden_size))

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.N, 2)]

    def decay(self) -> Tensor:
        """Λ [N], complex."""
        magnitude, phase = torch.exp(-torch.exp(self.nu_log)), torch.exp(self.theta_log)
        return torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))

    def forward(self, x: Tensor, state: State, done: Tensor) -> tuple[Tensor, State]:
        T, B = x.shape[:2]
        bx = torch.view_as_complex((x @ self.B.view(2 * self.N, -1).T).view(T, B, self.N, 2))  # B x_t [T,B,N]
        keep = (~done).to(x.dtype).unsqueeze(-1)  # a reset passes nothing of h_{t-1}
        h = linear_scan(self.decay() * keep, bx * torch.exp(self.gamma_log),
                        torch.view_as_complex(state[0].contiguous()))
        y = torch.view_as_real(h).view(T, B, 2 * self.N) @ self.C.view(-1, 2 * self.N).T + self.D * x
        return y, (torch.view_as_real(h[-1]),)  # y: Re(C h_t) + D ⊙ x_t


@dataclass
class LRUConfig(BlockConfig):
    """Options of ``lru``: the block sizes (``num_heads`` and ``head_dim`` unused) and the recurrence's."""

    num_states: int = 128
    """N, the complex states of each layer's recurrence."""
    r_min: float = 0.5
    """Smallest |Λ| at initialisation (the paper's ring: memory of ~1/(1 - r) steps)."""
    r_max: float = 0.999
    """Largest |Λ| at initialisation."""
    max_phase: float = 2 * math.pi
    """arg Λ starts uniform on [0, max_phase]."""


class LRUCore(BlockStack):
    """``lru``: the Linear Recurrent Unit (Orvieto et al. 2023) as the block's sublayer (:class:`LRULayer`)."""

    Config = LRUConfig

    def make_layer(self) -> nn.Module:
        c = self.config
        if c.num_states <= 0:
            raise ValueError(f"num_states must be positive, got {c.num_states}")
        return LRULayer(c.hidden_size, c.num_states, r_min=c.r_min, r_max=c.r_max, max_phase=c.max_phase)
