"""The agent: stem -> memory core -> policy and baseline heads.

The core reads [stem(x_t); r_{t-1}; onehot(a_{t-1})], the IMPALA agent input (Espeholt et al.,
2018, Fig. 3), where r_{t-1} is clipped to ±``reward_clip`` unless that is None (the maze uses
the raw reward); a Box space's a_{t-1} enters as the env action, in [−1, 1] (:mod:`agents.actions`).
With ``normalize_observations`` x_t is first standardised by the running mean and variance of the
observations the learner has seen (:class:`agents.normalization.RunningNorm`). At the first step
of an episode (``done_t``) the previous reward and action belong to the last episode, so they are
zeroed, as the core state is.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

import torch
from jsonargparse.typing import NonNegativeFloat, PositiveFloat
from torch import Tensor, nn

from agents.actions import Actions, CategoricalActions, GaussianActions
from agents.errors import NonFinitePolicyError
from agents.nature_cnn import NatureStem, ShallowStem
from agents.normalization import RunningNorm
from agents.popart import PopArt
from agents.resnet import ResNetStem
from fastnet import make_core
from fastnet.options import check_choice, check_options
from fastnet.state import State


def mlp(input_size: int, hidden_sizes: Sequence[int], activation: Literal["relu", "tanh"]) -> nn.Sequential:
    """Linear + activation for each of ``hidden_sizes`` (an empty Sequential, the identity, for none)."""
    sizes = [input_size, *hidden_sizes]
    act = {"relu": nn.ReLU, "tanh": nn.Tanh}[activation]
    return nn.Sequential(*(m for i, o in zip(sizes[:-1], sizes[1:]) for m in (nn.Linear(i, o), act())))


class MLPStem(nn.Module):
    """Flatten the observation (scaled by 1/255 if uint8), then Linear + activation per hidden size.

    ReLU is the default. Tanh is bounded and cannot die: on MiniGrid's raw object codes (up to
    10) at the memory suites' lr, most ReLU units of the stem stop firing for every observation
    (docs/memory_benchmarks.md, MemoryS7), and with them the agent's view of the object to remember.
    """

    @dataclass
    class Config:
        """A multilayer perceptron on the flattened observation."""

        hidden_sizes: list[int] = field(default_factory=lambda: [64])
        """Units of each Linear + activation layer."""
        activation: Literal["relu", "tanh"] = "relu"
        """The nonlinearity after each Linear: relu, or tanh (bounded; its units cannot die)."""

    def __init__(self, observation_shape: tuple[int, ...], config: Config):
        super().__init__()
        self.layers = mlp(math.prod(observation_shape), config.hidden_sizes, config.activation)
        self.output_size = config.hidden_sizes[-1] if config.hidden_sizes else math.prod(observation_shape)

    def forward(self, obs: Tensor) -> Tensor:
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        return self.layers(x.flatten(1))


def make_stem(name: str, observation_shape: tuple[int, ...], **cfg: Any) -> nn.Module:
    """The stem ``name`` ("mlp"; "resnet" from ``agents.resnet``; "nature" and "shallow" from ``agents.nature_cnn``)
    for observations of this shape.

    A stem maps obs [N, *observation_shape] to features [N, stem.output_size].
    """
    stems = {"mlp": MLPStem, "resnet": ResNetStem, "nature": NatureStem, "shallow": ShallowStem}
    check_choice(name, stems, kind="stem")
    cls = stems[name]
    check_options(cfg, (f.name for f in dataclasses.fields(cls.Config)), kind="stem", name=name)
    return cls(tuple(observation_shape), cls.Config(**cfg))


@dataclass
class NetworkConfig:
    """The agent's inputs besides the observation (Espeholt et al., 2018, Fig. 3)."""

    reward_clip: Optional[PositiveFloat] = None
    """Clip rewards to ±this for the core input and the loss (null: the raw reward)."""
    prev_action: bool = True
    """Feed the one-hot previous action to the core."""
    head_sizes: list[int] = field(default_factory=list)
    """Units of each Linear + tanh layer between the core and each head, the policy's and the
    baseline's apart (BabyAI's heads: [64]); empty: linear heads on the core's output."""
    policy_init_scale: NonNegativeFloat = 1.0
    """Scale the policy output layer's initial weights and bias by this (0.01: a near-uniform first policy)."""
    separate_critic: bool = False
    """Give the baseline a stem and core of its own (RecurrentPPO's critic): the value loss never shapes the policy."""
    log_std_init: float = 0.0
    """Box actions: the initial log σ of the Gaussian policy, a learned parameter of each action dimension."""
    squash_actions: bool = False
    """Box actions: step the env with tanh(u) of the Gaussian's draw u (log-probs with the tanh's Jacobian),
    instead of u clipped to the bounds."""
    normalize_observations: bool = False
    """Standardise observations by their running mean and variance (clipped to ±10), updated from the
    learner's batches, saved in checkpoints and frozen at evaluation."""

    stem: ClassVar[str]

    def stem_options(self) -> dict[str, Any]:
        """The stem's own fields, as keyword options of :func:`make_stem`."""
        own = {f.name for f in dataclasses.fields(NetworkConfig)} | {"stem"}  # a selectable stem's name
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in own}


@dataclass
class MLPNetworkConfig(NetworkConfig, MLPStem.Config):
    """The network: an MLP stem on the flattened observation, and the core's other inputs."""

    stem: ClassVar[str] = "mlp"


@dataclass
class ResNetNetworkConfig(NetworkConfig, ResNetStem.Config):
    """The network: the IMPALA ResNet stem on images, and the core's other inputs."""

    stem: ClassVar[str] = "resnet"


@dataclass
class NatureNetworkConfig(NetworkConfig, NatureStem.Config):
    """The network: the Nature-DQN conv stem on images, and the core's other inputs."""

    stem: ClassVar[str] = "nature"


@dataclass
class ShallowNetworkConfig(NetworkConfig, ShallowStem.Config):
    """The network: IMPALA's shallow conv stem on images, and the core's other inputs."""

    stem: ClassVar[str] = "shallow"


# The network sections ``network.stem`` chooses from, by stem.
STEM_NETWORKS: dict[str, type[NetworkConfig]] = {c.stem: c for c in (MLPNetworkConfig, ResNetNetworkConfig,
                                                                     NatureNetworkConfig, ShallowNetworkConfig)}


class AgentNet(nn.Module):
    """stem -> core (``fastnet.make_core``) -> policy logits and baseline, as the section
    ``network`` (an MLP stem of 64 units by default) and the core ``core`` of ``core_options``
    make them. Each head is a Linear + tanh layer per ``network.head_sizes`` (none by default),
    then a linear output (the baseline's a :class:`agents.popart.PopArt` head of the options
    ``popart`` when they are given: its ``step``, ``min_sigma`` and ``zero_init``).
    ``actions`` is a Discrete space's n, or a MultiDiscrete space's sizes, whose components the
    policy draws independently, or an action distribution of :mod:`agents.actions` (a Box space's
    :class:`agents.actions.GaussianActions`, whose log σ is the parameter ``log_std``).

    The policy's output layer starts at ``network.policy_init_scale`` times PyTorch's
    initialisation: Andrychowicz et al. (2021) count a 100× smaller last policy layer, whose first
    policy is near uniform, among the choices that matter most for PPO.

    With ``network.separate_critic`` the baseline reads a second stem and core of the same options,
    whose state rides after the policy core's in the state tuple (sb3-contrib's RecurrentPPO gives
    its critic an LSTM of its own; Andrychowicz et al. 2021 find separate policy and value networks
    better on most of their tasks). The core's outputs y are then the two cores' side by side.

    With ``return_discount`` the rewards are scaled by 1/σ_G, σ_G² the running variance of the
    discounted return with that discount (:meth:`reward_scale`; gymnasium's ``NormalizeReward``):
    the actors record the return, the learner updates ``return_stats`` and scales the rewards it
    learns from, and the core's reward input is scaled the same way."""

    def __init__(self, observation_shape: tuple[int, ...], actions: int | Sequence[int] | Actions, core: str,
                 core_options: dict[str, Any], *, network: NetworkConfig | None = None,
                 popart: dict[str, Any] | None = None, return_discount: float | None = None):
        super().__init__()
        network = network or MLPNetworkConfig()
        if isinstance(actions, int):
            actions = CategoricalActions((actions,))
        elif not isinstance(actions, (CategoricalActions, GaussianActions)):
            actions = CategoricalActions(tuple(actions))
        self.action_space = actions
        self.num_logits = actions.num_logits
        self.reward_clip, self.prev_action = network.reward_clip, network.prev_action
        self.obs_norm = RunningNorm(observation_shape) if network.normalize_observations else None
        # reward scaling: the spread of the discounted return (discount ``return_discount``) that the actors record
        self.return_discount = return_discount
        self.return_stats = RunningNorm(()) if return_discount is not None else None
        self.stem = make_stem(network.stem, observation_shape, **network.stem_options())
        core_input = self.stem.output_size + 1 + (actions.input_size if self.prev_action else 0)
        self.core = make_core(core, core_input, **core_options)
        separate = network.separate_critic
        self.critic_stem = make_stem(network.stem, observation_shape, **network.stem_options()) if separate else None
        self.critic_core = make_core(core, core_input, **core_options) if separate else None
        # where the critic's state starts in the state tuple
        self.policy_state_len = len(self.core.initial_state(1, "cpu")) if separate else None
        self.policy_torso = mlp(self.core.output_size, network.head_sizes, "tanh")
        self.baseline_torso = mlp(self.core.output_size, network.head_sizes, "tanh")
        width = network.head_sizes[-1] if network.head_sizes else self.core.output_size
        # a Box space's head gives μ; log σ is a parameter of its own, not a function of x
        self.policy = nn.Linear(width, actions.dim if actions.continuous else self.num_logits)
        self.log_std = nn.Parameter(torch.full((actions.dim,), float(network.log_std_init))) if actions.continuous \
            else None
        with torch.no_grad():
            self.policy.weight.mul_(network.policy_init_scale)
            self.policy.bias.mul_(network.policy_init_scale)
        self.baseline = nn.Linear(width, 1) if popart is None else PopArt(width, **popart)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        """The policy core's zero state, then the critic core's (``separate_critic``)."""
        critic = self.critic_core.initial_state(batch_size, device) if self.critic_core is not None else ()
        return self.core.initial_state(batch_size, device) + critic

    def forward(self, obs: Tensor, prev_reward: Tensor, prev_action: Tensor, done: Tensor, state: State,
                truncate_per_step: bool = False) -> tuple[Tensor, Tensor, State, dict[str, Tensor]]:
        """Run T steps: obs [T,B,...], prev_reward [T,B], prev_action [T,B] (int), done [T,B] (bool).

        Returns logits [T,B,A], baseline [T,B], the core state after step T-1 and the core's aux
        losses. With ``truncate_per_step`` the core steps one step at a time and the carried state
        is detached after each step (the official code's truncation); by default the core runs
        the whole sequence at once, so gradients flow through the state across the T steps.
        """
        y, state, aux = self.core_outputs(obs, prev_reward, prev_action, done, state, truncate_per_step)
        logits, features = self.heads(y)
        return logits, self.baseline(features).squeeze(-1), state, aux

    def heads(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """The policy logits [..., A] of the core's outputs y, and the value head's input (the
        baseline torso's output; ``self.baseline(features)`` is the value)."""
        critic_y = y[..., self.core.output_size:] if self.critic_core is not None else y
        return self.policy_logits(y), self.baseline_torso(critic_y)

    def policy_logits(self, y: Tensor) -> Tensor:
        """The policy logits [..., A] of the core's outputs y (the policy core's part of them); a
        Gaussian's are (μ, log σ)."""
        logits = self.policy(self.policy_torso(y[..., :self.core.output_size]))
        if self.log_std is None:
            return logits
        return torch.cat([logits, self.log_std.expand_as(logits)], dim=-1)

    def core_outputs(self, obs: Tensor, prev_reward: Tensor, prev_action: Tensor, done: Tensor, state: State,
                     truncate_per_step: bool = False) -> tuple[Tensor, State, dict[str, Tensor]]:
        """The core's outputs y [T,B,D] (what the policy and value heads read), its state after
        step T-1 and its aux losses; the arguments are :meth:`forward`'s. With ``separate_critic``
        y is the policy core's outputs, then the critic core's, and the critic's aux losses are
        named ``critic_<name>``."""
        T, B = prev_reward.shape
        keep = (~done).unsqueeze(-1).float()
        reward = prev_reward.float().unsqueeze(-1)
        if self.return_stats is not None:
            reward = reward * self.reward_scale()
        if self.reward_clip is not None:
            reward = reward.clamp(-self.reward_clip, self.reward_clip)
        others = [reward * keep]
        if self.prev_action:
            others.append(self.action_space.features(prev_action) * keep)
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        x = torch.cat([self.stem(obs.flatten(0, 1)).view(T, B, -1), *others], dim=-1)
        if self.critic_core is None:
            return self._run_core(self.core, x, state, done, truncate_per_step)
        split = self.policy_state_len
        y, policy_state, aux = self._run_core(self.core, x, state[:split], done, truncate_per_step)
        x_critic = torch.cat([self.critic_stem(obs.flatten(0, 1)).view(T, B, -1), *others], dim=-1)
        y_critic, critic_state, critic_aux = self._run_core(self.critic_core, x_critic, state[split:], done,
                                                            truncate_per_step)
        aux = {**aux, **{f"critic_{k}": v for k, v in critic_aux.items()}}
        return torch.cat([y, y_critic], dim=-1), policy_state + critic_state, aux

    @staticmethod
    def _run_core(core: nn.Module, x: Tensor, state: State, done: Tensor,
                  truncate_per_step: bool) -> tuple[Tensor, State, dict[str, Tensor]]:
        """``core`` over the inputs x [T,B,D]: its outputs, its state after step T-1 and its aux losses."""
        if truncate_per_step:
            ys, aux_steps = [], []
            for t in range(x.shape[0]):
                y, state, aux = core(x[t:t + 1], state, done[t:t + 1])
                state = tuple(s.detach() for s in state)
                ys.append(y)
                aux_steps.append(aux)
            y = torch.cat(ys)
            aux = {k: torch.stack([a[k] for a in aux_steps]).mean() for k in aux_steps[0]}
        else:
            y, state, aux = core(x, state, done)
        return y, state, aux

    @torch.no_grad()
    def act(self, obs: Tensor, prev_reward: Tensor, prev_action: Tensor, done: Tensor, state: State,
            sample: bool = True, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, State]:
        """One policy step for B envs: obs [B,...], prev_reward [B], prev_action [B] ([B, D] for a
        Box space), done [B].

        Returns the actions [B] (sampled from the policy, or its mode if not ``sample``: the
        argmax, or a Gaussian's mean), the logits [B,A] and the core state after the step. The
        actors, evaluation and the benchmarks all step the policy through here; the env is
        stepped with :meth:`env_actions` of the actions.

        Logits that are NaN or infinite (diverged weights, or a memory that overflowed) raise
        :class:`NonFinitePolicyError` on the CPU. On a GPU, where checking would wait for the
        device, their rows are sampled as uniform and their action is -1 (NaN for a Box space),
        which the caller checks on the host copy it makes anyway (:func:`check_actions`).
        """
        y, state, _ = self.core_outputs(obs[None], prev_reward[None], prev_action[None], done[None], state)
        logits = self.policy_logits(y[0])  # no value head: acting needs none (PopArt's would cost ~50 µs a step)
        if logits.device.type == "cpu":
            if not torch.isfinite(logits).all():
                raise NonFinitePolicyError(NONFINITE_LOGITS)
            return self._sample(logits, sample, generator), logits, state
        finite = torch.isfinite(logits).all(-1)
        action = self._sample(torch.where(finite[:, None], logits, 0.0), sample, generator)
        if self.action_space.continuous:
            return torch.where(finite[:, None], action, math.nan), logits, state
        return torch.where(finite, action, -1), logits, state

    def reward_scale(self) -> Tensor:
        """1/σ_G (float32, 0-d), the rewards' scale under reward scaling: 1 before any statistics."""
        return torch.rsqrt(self.return_stats.var + self.return_stats.epsilon).float()

    def env_actions(self, actions: Tensor) -> Tensor:
        """What the env is stepped with for ``actions`` as :meth:`act` gives them (which the buffers
        store): the integer actions themselves, or a Box space's clipped or squashed draws."""
        return self.action_space.to_env(actions)

    @torch.no_grad()
    def final_values(self, final_obs: Tensor, reward: Tensor, prev_action: Tensor, state: State) -> Tensor:
        """V(x) [B] of the last observations ``final_obs`` [B,...] of episodes cut by a time limit,
        as if they went on: the core steps from ``state`` (its state after the previous step, before
        the reset) with the reward [B] received there and the action [B] that led there. The
        learner bootstraps a truncated episode's last step from it (Pardo et al. 2018)."""
        keep = torch.zeros_like(reward, dtype=torch.bool)
        return self.forward(final_obs[None], reward[None], prev_action[None], keep[None], state)[1][0]

    def _sample(self, logits: Tensor, sample: bool, generator: torch.Generator | None) -> Tensor:
        return self.action_space.sample(logits, generator) if sample else self.action_space.mode(logits)


NONFINITE_LOGITS = ("the policy's logits are NaN or inf (its weights or its memory diverged); stopped; start a new run "
                    "with a lower optim.lr, a larger optim.eps or a gradient clip")


def check_actions(actions: Tensor) -> None:
    """Raise :class:`NonFinitePolicyError` if :meth:`AgentNet.act` marked an action -1 or NaN (host tensor)."""
    if bool((torch.isnan(actions) if actions.is_floating_point() else actions < 0).any()):
        raise NonFinitePolicyError(NONFINITE_LOGITS)
