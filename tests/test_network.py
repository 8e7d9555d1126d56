"""The agent network: stem factory, uint8 scaling, and the masked previous reward/action input."""
from __future__ import annotations

import pytest
import torch

from agents.network import AgentNet, make_stem


def test_mlp_stem_scales_uint8_and_rejects_unknown():
    stem = make_stem("mlp", (2, 3), hidden_sizes=[5])
    x = torch.randint(0, 256, (4, 2, 3), dtype=torch.uint8)
    assert torch.allclose(stem(x), stem(x.float() / 255.0))
    assert stem.output_size == 5
    with pytest.raises(ValueError, match="unknown stem 'cnn'"):
        make_stem("cnn", (2, 3))
    with pytest.raises(ValueError, match="unknown option 'width'"):
        make_stem("mlp", (2, 3), width=3)


def test_previous_reward_and_action_are_zeroed_at_episode_start():
    torch.manual_seed(0)
    net = AgentNet((10,), 4, "ff", {}, stem_options={"hidden_sizes": [8]}, reward_clip=1.0)
    obs = torch.rand(1, 2, 10).expand(1, 2, 10)
    reward, action = torch.tensor([[5.0, -3.0]]), torch.tensor([[1, 2]])
    done = torch.tensor([[True, False]])
    logits, _, _, _ = net(obs, reward, action, done, ())
    fresh, _, _, _ = net(obs[:, :1], torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.long), done[:, :1], ())
    assert torch.allclose(logits[:, :1], fresh)  # done: as if reward 0 and no previous action
    clipped, _, _, _ = net(obs[:, 1:], torch.tensor([[-1.0]]), action[:, 1:], done[:, 1:], ())
    assert torch.allclose(logits[:, 1:], clipped)  # reward clipped to ±1


def test_mlp_stem_activation_tanh_is_the_layers_own():
    """``activation: tanh`` puts tanh after each Linear (computed here by hand); relu is the default."""
    torch.manual_seed(0)
    stem = make_stem("mlp", (6,), hidden_sizes=[5, 4], activation="tanh")
    x = 10.0 * torch.randn(3, 6)  # large inputs, as MiniGrid's object codes
    first, second = stem.layers[0], stem.layers[2]
    hidden = torch.tanh(x @ first.weight.T + first.bias)
    assert torch.allclose(stem(x), torch.tanh(hidden @ second.weight.T + second.bias))
    assert isinstance(make_stem("mlp", (6,), hidden_sizes=[5]).layers[1], torch.nn.ReLU)
