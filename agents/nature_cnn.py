"""The Nature-DQN convolutional stem (Mnih et al. 2015, "Human-level control through deep
reinforcement learning", Methods: model architecture), the small torso for CPU-scale Atari runs.

conv 32 x 8x8 stride 4, ReLU; conv 64 x 4x4 stride 2, ReLU; conv 64 x 3x3 stride 1, ReLU;
flatten (64 x 7 x 7 = 3136 values for 84x84 frames); Linear(3136 -> ``output_size``) with ReLU.
uint8 frames are scaled by 1/255. No padding, so each conv shrinks the frame to
floor((size - kernel) / stride) + 1: 84 -> 20 -> 9 -> 7. Weights start orthogonal with gain
sqrt(2) and biases at 0, as CleanRL's ``ppo_atari`` initialises this network (Huang et al. 2022,
"The 37 implementation details of PPO", detail 2).

It costs about 9.4M multiply-adds per frame forward, against about 20M for the IMPALA deep
ResNet (agents/resnet.py) at 84x84, and most of its weights sit in one matrix product, which a
CPU runs well. The papers' deep ResNet stays the Atari default.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (out channels, kernel, stride)


class NatureStem(nn.Module):
    """obs [N, C, H, W] (uint8 or float) -> features [N, output_size]."""

    @dataclass
    class Config:
        """The Nature-DQN torso (Mnih et al., 2015): three convolutions and a fully connected layer."""

        output_size: int = 512
        """Units of the final fully connected layer (512 in the paper)."""
        bf16: bool = False
        """Run the convolutions and the linear layer in bfloat16 (CPU autocast; float32 out)."""

    def __init__(self, observation_shape: tuple[int, ...], config: Config):
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(f"the nature stem needs observations [C, H, W], got shape {observation_shape}")
        in_channels, height, width = observation_shape
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in LAYERS:
            if min(height, width) < kernel:
                raise ValueError(f"the nature stem needs frames of at least 36x36, got {observation_shape[1:]}")
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
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            # NHWC as in agents/resnet.py: oneDNN's convolutions are faster in it on the CPU; values unchanged
            x = self.convs(x.contiguous(memory_format=torch.channels_last))
            x = torch.relu(self.fc(x.flatten(1)))
        return x.float()


__all__ = ["NatureStem"]
