"""The DQN convolutional stems, the small torsos for CPU-scale Atari runs: Nature-DQN's (Mnih et
al. 2015, "Human-level control through deep reinforcement learning", Methods: model architecture)
and IMPALA's shallow one (Espeholt et al. 2018, Fig. 3 left; the network of Mnih et al. 2013).

Nature:

conv 32 x 8x8 stride 4, ReLU; conv 64 x 4x4 stride 2, ReLU; conv 64 x 3x3 stride 1, ReLU;
flatten (64 x 7 x 7 = 3136 values for 84x84 frames); Linear(3136 -> ``output_size``) with ReLU.
uint8 frames are scaled by 1/255. No padding, so each conv shrinks the frame to
floor((size - kernel) / stride) + 1: 84 -> 20 -> 9 -> 7. Weights start orthogonal with gain
sqrt(2) and biases at 0, as CleanRL's ``ppo_atari`` initialises this network (Huang et al. 2022,
"The 37 implementation details of PPO", detail 2).

It costs about 9.3M multiply-adds per frame forward, against about 20M for the IMPALA deep
ResNet (agents/resnet.py) at 84x84, and most of its weights sit in one matrix product, which a
CPU runs well. The papers' deep ResNet stays the Atari default.

Shallow (:class:`ShallowStem`): conv 16 x 8x8 stride 4, ReLU; conv 32 x 4x4 stride 2, ReLU;
flatten (32 x 9 x 9 = 2592); Linear(2592 -> ``output_size``, 256) with ReLU. About 3.0M
multiply-adds per frame, a third of Nature's, for runs where the learner's conv passes are the
cost (a 2-core CPU).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from agents.resnet import image_input


class NatureStem(nn.Module):
    """obs [N, C, H, W] (uint8 or float) -> features [N, output_size]."""

    NAME = "nature"
    LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (out channels, kernel, stride)

    @dataclass
    class Config:
        """The Nature-DQN torso (Mnih et al., 2015): three convolutions and a fully connected layer."""

        output_size: int = 512
        """Units of the final fully connected layer (512 in the paper)."""
        bf16: bool | Literal["auto"] = False
        """Run the convolutions and the linear layer in bfloat16 (autocast; float32 out). ``auto``:
        on CUDA, and on CPUs with bfloat16 instructions (AVX512-BF16 or AMX), where it is fast;
        elsewhere float32 (an AVX2-only CPU emulates bfloat16: 11x slower than float32)."""

    def __init__(self, observation_shape: tuple[int, ...], config: Config):
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(f"the {self.NAME} stem needs observations [C, H, W], got shape {observation_shape}")
        in_channels, height, width = observation_shape
        if min(height, width) < (side := self.min_size()):
            raise ValueError(f"the {self.NAME} stem needs frames of at least {side}x{side}, got {(height, width)}")
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in self.LAYERS:
            layers += [nn.Conv2d(in_channels, out_channels, kernel, stride=stride), nn.ReLU()]
            in_channels = out_channels
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        self.convs = nn.Sequential(*layers)
        self.flat_size = in_channels * height * width
        self.fc = nn.Linear(self.flat_size, config.output_size)
        self.output_size, self.bf16 = config.output_size, config.bf16
        for layer in (*self.convs, self.fc):
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
                nn.init.zeros_(layer.bias)

    def forward(self, obs: Tensor) -> Tensor:
        bf16 = self.bf16 if isinstance(self.bf16, bool) else obs.device.type == "cuda" or cpu_has_bf16()
        x = image_input(obs, torch.bfloat16 if bf16 else torch.float32)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            x = self.convs(x)
            x = torch.relu(self.fc(x.flatten(1)))
        return x.float()

    @classmethod
    def min_size(cls) -> int:
        """The smallest frame side the convolutions take (Nature: 36, shallow: 20)."""
        size = 1
        for _, kernel, stride in reversed(cls.LAYERS):
            size = (size - 1) * stride + kernel
        return size


class ShallowStem(NatureStem):
    """IMPALA's shallow network: obs [N, C, H, W] (uint8 or float) -> features [N, output_size]."""

    NAME = "shallow"
    LAYERS = ((16, 8, 4), (32, 4, 2))

    @dataclass
    class Config(NatureStem.Config):
        """IMPALA's shallow torso (Espeholt et al., 2018, Fig. 3): two convolutions and a fully connected layer."""

        output_size: int = 256
        """Units of the final fully connected layer (256 in the paper)."""


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX tiles), as PyTorch's oneDNN
    uses them: ``network.bf16`` auto's test."""
    return any(getattr(torch.cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported",
                                                                      "_is_amx_tile_supported"))


__all__ = ["NatureStem", "ShallowStem", "cpu_has_bf16"]
