"""The agent network: stem factory, uint8 scaling, and the masked previous reward/action input."""
from __future__ import annotations

import pytest
import torch

from agents.network import AgentNet, MLPNetworkConfig, make_stem
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
    net = AgentNet((10,), 4, "ff", {}, network=MLPNetworkConfig(hidden_sizes=[8], reward_clip=1.0))
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
    net = AgentNet((6,), 3, "ff", {}, network=MLPNetworkConfig(hidden_sizes=[8], head_sizes=[5]))
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
    plain = AgentNet((6,), 3, "ff", {}, network=MLPNetworkConfig(hidden_sizes=[8]))
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
        net = AgentNet((6,), 4, "lstm", {"hidden_size": 8},
                       network=MLPNetworkConfig(hidden_sizes=[8], policy_init_scale=scale))
        outputs[scale] = net(obs, reward, action, done, net.initial_state(2))[:2]
    default_logits, default_baseline = outputs[1.0]
    assert default_logits.abs().min() > 1e-4
    torch.testing.assert_close(outputs[0.01][0], 0.01 * default_logits)
    assert not outputs[0.0][0].any()
    for scale in (0.01, 0.0):
        torch.testing.assert_close(outputs[scale][1], default_baseline)
    cfg = load(["--core", "lstm", "--network.policy_init_scale", "0"])  # the config's option reaches the network
    assert not build_model(cfg, (6,), 4).policy.weight.any()


def test_separate_critic_is_a_second_network_for_the_baseline():
    """With ``separate_critic`` the logits are those of a plain network holding the policy's stem
    and core, and the baseline those of a plain network holding the critic's (weights copied
    over), through an episode reset; the value loss reaches no policy weight and the policy's
    logits no critic weight; stepping one step at a time gives the sequence's numbers."""
    torch.manual_seed(0)
    popart = {"step": 0.1, "min_sigma": 1e-4, "zero_init": False}
    options = dict(network=MLPNetworkConfig(hidden_sizes=[8]), popart=popart)
    net = AgentNet((6,), 3, "lstm", {"hidden_size": 8}, popart=popart,
                   network=MLPNetworkConfig(hidden_sizes=[8], separate_critic=True))
    T, B = 5, 2
    obs, reward = torch.randn(T, B, 6), torch.randn(T, B)
    action = torch.randint(0, 3, (T, B))
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 1] = True
    state = tuple(torch.randn_like(s) for s in net.initial_state(B))
    assert len(state) == 2 * len(AgentNet((6,), 3, "lstm", {"hidden_size": 8}, **options).initial_state(B))
    logits, baseline, final_state, _ = net(obs, reward, action, done, state)

    half = len(state) // 2
    for part, (stem, core), want in (("policy", (net.stem, net.core), logits),
                                     ("critic", (net.critic_stem, net.critic_core), baseline)):
        plain = AgentNet((6,), 3, "lstm", {"hidden_size": 8}, **options)
        plain.stem.load_state_dict(stem.state_dict())
        plain.core.load_state_dict(core.state_dict())
        plain.policy.load_state_dict(net.policy.state_dict())
        plain.baseline.load_state_dict(net.baseline.state_dict())
        own = state[:half] if part == "policy" else state[half:]
        got = plain(obs, reward, action, done, own)
        torch.testing.assert_close(got[0] if part == "policy" else got[1], want)
        for a, b in zip(got[2], final_state[:half] if part == "policy" else final_state[half:]):
            torch.testing.assert_close(a, b)

    baseline.sum().backward(retain_graph=True)
    policy_side = [*net.stem.parameters(), *net.core.parameters(), *net.policy.parameters()]
    assert all(p.grad is None or not p.grad.any() for p in policy_side)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.critic_core.parameters())
    net.zero_grad(set_to_none=True)
    logits.sum().backward()
    critic_side = [*net.critic_stem.parameters(), *net.critic_core.parameters()]
    assert all(p.grad is None or not p.grad.any() for p in critic_side)
    assert all(p.grad.abs().sum() > 0 for p in net.core.parameters())

    step_state, steps = state, []
    for t in range(T):
        out = net(obs[t:t + 1], reward[t:t + 1], action[t:t + 1], done[t:t + 1], step_state)
        steps.append(out[:2])
        step_state = out[2]
    torch.testing.assert_close(torch.cat([s[0] for s in steps]), logits)
    torch.testing.assert_close(torch.cat([s[1] for s in steps]), baseline)
    acted = net.act(obs[0], reward[0], action[0], done[0], state, sample=False)
    torch.testing.assert_close(acted[1], logits[0])
    assert len(acted[2]) == len(state)
    cfg = load(["--core", "lstm", "--network.separate_critic", "true"])  # the config's option reaches the network
    assert build_model(cfg, (6,), 4).critic_core is not None
    assert build_model(load(["--core", "lstm"]), (6,), 4).critic_core is None
