"""The feature maps φ of linear attention and the two normalisations.

References are to "Linear Transformers Are Secretly Fast Weight Programmers"
(Schlag, Irie, Schmidhuber 2021), main text, unless said otherwise.
"""
from __future__ import annotations

import math
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastnet.options import check_choice

FeatureMapName = Literal["elu", "dpfp", "favor", "softmax", "tanh", "identity"]
FEATURE_MAPS = ("elu", "dpfp", "favor", "softmax", "tanh", "identity")


def elu_plus_one(x: Tensor) -> Tensor:
    """Katharopoulos et al.'s φ(x) = ELU(x) + 1 (Eq. 30)."""
    return F.elu(x) + 1.0


def dpfp(x: Tensor, nu: int = 1) -> Tensor:
    """Deterministic parameter-free projection DPFP-ν (Eq. 37; appendix Listing 1).

    x' = [relu(x), relu(-x)]; φ(x) = concat_{j=1..ν} x' ⊙ roll(x', j). Output size 2dν.
    """
    xp = torch.cat([F.relu(x), F.relu(-x)], dim=-1)
    return torch.cat([xp * xp.roll(shifts=j, dims=-1) for j in range(1, nu + 1)], dim=-1)


def favor_plus(x: Tensor, projection: Tensor) -> Tensor:
    """FAVOR+ positive random features (Eqs. 31-32).

    φ(x) = exp(-|x|²/2) / sqrt(2m) · [exp(Rx), exp(-Rx)] with R ∈ R^{m×d}.
    """
    m = projection.shape[0]
    rx = x @ projection.t()
    h = torch.exp(-0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(2 * m)
    return h * torch.cat([torch.exp(rx), torch.exp(-rx)], dim=-1)


def sum_normalise(x: Tensor, eps: float = 1e-5) -> Tensor:
    """Sum normalisation (Eq. 29): φ'(x) = φ(x) / Σ_j φ(x)_j (eps as in the official RL code)."""
    return x / (x.sum(-1, keepdim=True) + eps)


NormalisationName = Literal["sum", "attention", "none"]
POSITIVE_FEATURE_MAPS = ("elu", "dpfp", "favor", "softmax")  # the maps a normalisation can divide by


class FeatureMap(nn.Module):
    """φ applied to per-head keys and queries [..., d] -> [..., d_dot], then sum normalisation
    (Eq. 29) when ``normalisation`` is "sum". Attention normalisation (Eqs. 26-28) is applied
    by the layer; both divide by sums of φ, so they need a positive φ.

    FAVOR+ keeps its random R fixed until ``redraw_random_features`` draws a new one; the
    trainers call it once per training batch (§5.3), never inside a forward pass.
    """

    def __init__(self, name: FeatureMapName, head_dim: int, dpfp_nu: int = 1, favor_features: int = 32,
                 normalisation: NormalisationName = "none"):
        super().__init__()
        check_choice(name, FEATURE_MAPS, kind="feature map")
        check_choice(normalisation, get_args(NormalisationName), kind="normalisation")
        if normalisation != "none" and name not in POSITIVE_FEATURE_MAPS:
            raise ValueError(f"{normalisation} normalisation divides by a sum of φ, which {name!r} can make 0 "
                             f"or negative; use normalisation=none or one of {list(POSITIVE_FEATURE_MAPS)}")
        if name == "dpfp" and not 1 <= dpfp_nu <= 2 * head_dim - 1:
            raise ValueError(f"dpfp_nu must be in [1, {2 * head_dim - 1}] for head_dim {head_dim}, got {dpfp_nu}")
        if name == "favor" and favor_features < 1:
            raise ValueError(f"favor_features must be positive, got {favor_features}")
        self.name, self.head_dim, self.nu, self.normalisation = name, head_dim, dpfp_nu, normalisation
        self.output_dim = {"dpfp": 2 * head_dim * dpfp_nu, "favor": 2 * favor_features}.get(name, head_dim)
        if name == "favor":
            self.register_buffer("projection", torch.randn(favor_features, head_dim))

    def redraw(self) -> None:
        """Draw new FAVOR+ random features (a no-op for the other maps). Out of place: a graph
        that saved the old R for its backward pass keeps it."""
        if self.name == "favor":
            self.projection = torch.randn_like(self.projection)

    def forward(self, x: Tensor) -> Tensor:
        phi = self._phi(x)
        return sum_normalise(phi) if self.normalisation == "sum" else phi

    def _phi(self, x: Tensor) -> Tensor:
        if self.name == "elu":
            return elu_plus_one(x)
        if self.name == "dpfp":
            return dpfp(x, self.nu)
        if self.name == "favor":
            return favor_plus(x, self.projection)
        if self.name == "softmax":
            return torch.softmax(x, dim=-1)
        if self.name == "tanh":
            return torch.tanh(x)
        return x


def redraw_random_features(model: nn.Module) -> None:
    """Redraw every FAVOR+ R in ``model``: once per training batch (§5.3), before its forward."""
    for module in model.modules():
        if isinstance(module, FeatureMap):
            module.redraw()
