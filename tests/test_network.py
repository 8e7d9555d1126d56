"""The agent network: stem factory, uint8 scaling, and the masked previous reward/action input."""
from __future__ import annotations

import pytest
import torch

from agents.network import AgentNet, make_stem
from agents.run_config import build_model
from launch.maze import load


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


def test_head_sizes_put_a_tanh_layer_before_each_head():
    """``head_sizes`` gives the policy and the baseline each their own Linear + tanh layers
    (computed here by hand); none by default, where the heads read the core's output directly."""
    torch.manual_seed(0)
    net = AgentNet((6,), 3, "ff", {}, stem_options={"hidden_sizes": [8]}, head_sizes=[5])
    obs, reward = torch.randn(2, 4, 6), torch.zeros(2, 4)
    action, done = torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.bool)
    logits, baseline, _, _ = net(obs, reward, action, done, ())
    y, _, _ = net.core_outputs(obs, reward, action, done, ())
    hidden_pi = torch.tanh(y @ net.policy_torso[0].weight.T + net.policy_torso[0].bias)
    hidden_v = torch.tanh(y @ net.baseline_torso[0].weight.T + net.baseline_torso[0].bias)
    assert torch.allclose(logits, hidden_pi @ net.policy.weight.T + net.policy.bias)
    assert torch.allclose(baseline, (hidden_v @ net.baseline.weight.T + net.baseline.bias).squeeze(-1))
    assert not torch.allclose(hidden_pi, hidden_v)  # two torsos, not one shared
    acted_logits = net.act(obs[0], reward[0], action[0], done[0], ())[1]
    assert torch.allclose(acted_logits, logits[0])
    plain = AgentNet((6,), 3, "ff", {}, stem_options={"hidden_sizes": [8]})
    assert not any(k.startswith(("policy_torso", "baseline_torso")) for k in plain.state_dict())
    assert plain.policy.in_features == plain.core.output_size


def test_policy_init_scale_scales_the_first_policy_layer_and_nothing_else():
    """``policy_init_scale`` multiplies the output layer's initial weights and bias, so the first
    logits are that fraction of the default's (0: a uniform first policy); the other layers and
    the baseline are the default's, draw for draw."""
    torch.manual_seed(1)  # inputs whose default logits are all clear of zero
    obs, reward = torch.randn(3, 2, 6), torch.zeros(3, 2)
    action, done = torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 2, dtype=torch.bool)
    outputs = {}
    for scale in (1.0, 0.01, 0.0):
        torch.manual_seed(0)
        net = AgentNet((6,), 4, "lstm", {"hidden_size": 8}, stem_options={"hidden_sizes": [8]}, policy_init_scale=scale)
        outputs[scale] = net(obs, reward, action, done, net.initial_state(2))[:2]
    default_logits, default_baseline = outputs[1.0]
    assert default_logits.abs().min() > 1e-4
    torch.testing.assert_close(outputs[0.01][0], 0.01 * default_logits)
    assert not outputs[0.0][0].any()
    for scale in (0.01, 0.0):
        torch.testing.assert_close(outputs[scale][1], default_baseline)
    cfg = load(["--core", "lstm", "--network.policy_init_scale", "0"])  # the config's option reaches the network
    assert not build_model(cfg, (6,), 4).policy.weight.any()
