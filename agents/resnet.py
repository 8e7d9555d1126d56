"""The IMPALA deep ResNet stem (Espeholt et al. 2018, Fig. 3; docs/cores.md).

For each channel count in ``channels`` ([16, 32, 32]): a conv 3x3 (stride 1, padding 1), a
max-pool 3x3 with stride 2 and padding 1, and ``num_blocks`` (2) residual blocks of
[ReLU, conv 3x3, ReLU, conv 3x3] + identity. Then ReLU, flatten (32 x 11 x 11 = 3872 values
for 84x84 frames) and Linear(3872 -> ``output_size``) with ReLU. uint8 frames are scaled by
1/255. This is the official code's ``Net`` (torchbeast polybeast) vision part. The convolutions
run in the channels-last layout, which is about twice as fast on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, stride=1, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, stride=1, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ResNetStem(nn.Module):
    """obs [N, C, H, W] (uint8 or float) -> features [N, output_size]."""

    @dataclass
    class Config:
        """The IMPALA deep ResNet torso (Espeholt et al., 2018, Fig. 3)."""

        channels: list[int] = field(default_factory=lambda: [16, 32, 32])
        """Channels of each conv section (conv, max-pool, residual blocks)."""
        num_blocks: int = 2
        """Residual blocks per section."""
        output_size: int = 256
        """Units of the final fully connected layer."""

    def __init__(self, observation_shape: tuple[int, ...], config: Config):
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(f"the resnet stem needs observations [C, H, W], got shape {observation_shape}")
        in_channels, height, width = observation_shape
        sections = []
        for out_channels in config.channels:
            sections += [nn.Conv2d(in_channels, out_channels, 3, stride=1, padding=1),
                         nn.MaxPool2d(3, stride=2, padding=1)]
            sections += [ResidualBlock(out_channels) for _ in range(config.num_blocks)]
            in_channels = out_channels
            height, width = (height + 1) // 2, (width + 1) // 2
        self.convs = nn.Sequential(*sections)
        self.flat_size = in_channels * height * width
        self.fc = nn.Linear(self.flat_size, config.output_size)
        self.output_size = config.output_size

    def forward(self, obs: Tensor) -> Tensor:
        x = torch.relu(self.convs(image_input(obs, torch.float32)))
        return torch.relu(self.fc(x.flatten(1)))


def image_input(obs: Tensor, dtype: torch.dtype) -> Tensor:
    """Frames [N, C, H, W] (uint8, scaled by 1/255, or float) as the convolutions' input: ``dtype``,
    NHWC. NHWC: oneDNN's convolutions run about twice as fast in it on the CPU; values are
    unchanged (flatten still reads C, H, W in the logical order). The layout changes while the
    frames are still uint8, and they are converted in one pass (in bfloat16, ``bf16(x) / 255``
    rounds once, as autocast's cast of float32 ``x / 255`` does): the float32 copies had cost
    the CPU learner of launch/configs/atari_cpu.yaml a third of its time."""
    x = obs.contiguous(memory_format=torch.channels_last).to(dtype)
    return x.div_(255.0) if obs.dtype == torch.uint8 else x


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["ResNetStem", "ResidualBlock", "count_parameters", "image_input"]
