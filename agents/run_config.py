"""How an RL run is configured: its tree (:class:`TrainConfig`) of the sections, each declared
beside the code that reads it (run, log, optim: :mod:`agents.learning.training`; actor, ray:
:mod:`agents.acting.transport`; loss: :mod:`agents.learning.losses`), with the RL-only ones here;
its schema per env and core; reading a saved config back; and the agent network a config builds.

The learner, the Ray actor hosts (:mod:`agents.acting.ray_backend`), evaluation and the entry
points all build from here.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jsonargparse.typing import NonNegativeFloat, PositiveFloat, PositiveInt

from agents.acting.transport import SERVER_KEYS_RENAMED, ActorConfig, RayConfig
from agents.actions import make_actions
from agents.config import RESUMABLE, check, from_dict, options, section
from agents.learning.losses import LossConfig
from agents.learning.training import LogConfig, OptimConfig, RunConfig, check_optim
from agents.network import STEM_NETWORKS, AgentNet, MLPNetworkConfig, NetworkConfig


@dataclass
class RLRunConfig(RunConfig):
    """The run: seed, device, budget, run directory."""

    total_steps: PositiveInt = field(default=1_000_000, metadata=RESUMABLE)
    """Environment steps to train for (the lr decays to 0 over them if optim.lr_decay)."""


@dataclass
class LearnerConfig:
    """The learner's batches."""

    batch_size: PositiveInt = 128
    """Trajectories (unrolls of one env) per update; a multiple of actor.envs_per_actor."""
    truncate_per_step: bool = False
    """Step the core one step at a time and detach its state (the official code); else backprop through the unroll."""
    epochs: PositiveInt = 1
    """Passes over each batch (PPO's epochs); 1 with loss.clip null is IMPALA's update."""
    minibatches: PositiveInt = 1
    """Minibatches of whole trajectories per pass, each one optimiser step (1: the whole batch)."""


@dataclass
class RLLogConfig(LogConfig):
    """Progress line, CSV and TensorBoard."""

    return_window: PositiveInt = 100
    """Report the mean return over this many recent episodes."""
    tensorboard_every_s: NonNegativeFloat = 1.0
    """Seconds between TensorBoard rows (logs.csv keeps every update's; 0: every update)."""


@dataclass
class CheckpointConfig:
    """Checkpoints for resuming, and milestones for evaluation."""

    interval_minutes: PositiveFloat = 5.0
    """Minutes between checkpoint.pt writes."""
    milestones: list[int] = field(default_factory=list)
    """Also keep checkpoint-<step>.pt at the first update past each of these steps."""


@dataclass
class TrainConfig:
    """IMPALA training of an agent with a memory core."""

    renamed: ClassVar[dict[str, str]] = SERVER_KEYS_RENAMED
    """Keys of older versions and their names now (a resume compares an old checkpoint's under them)."""

    core: Any = field(default_factory=lambda: section("core", "lstm")())
    """The memory core and its options."""
    run: RLRunConfig = field(default_factory=RLRunConfig)
    env: Any = field(default_factory=lambda: section("env", "maze")())
    """The environment and its options."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    ray: RayConfig = field(default_factory=RayConfig, metadata=RESUMABLE)
    network: NetworkConfig = field(default_factory=MLPNetworkConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr_decay=True))
    log: RLLogConfig = field(default_factory=RLLogConfig, metadata=RESUMABLE)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig, metadata=RESUMABLE)

    def resolved_run_dir(self) -> str:
        return self.run.run_dir.format(env=self.env.name, core=self.core.name, game=getattr(self.env, "game", ""),
                                       id=directory_name(getattr(self.env, "id", "")))


def directory_name(name: str) -> str:
    """``name`` as one directory name: a gym id's or a suite env's "/" and ":" become "_"."""
    return re.sub(r"[/:]+", "_", name)


# The network (stem) each env's observations take; atari's is chosen by ``network.stem``.
NETWORKS: dict[str, type] = {"maze": MLPNetworkConfig, "gym": MLPNetworkConfig}
# The stems ``network.stem`` chooses from (images on launch/atari.py; any on launch/train.py),
# and each env's default one.
IMAGE_NETWORKS: dict[str, type] = {stem: c for stem, c in STEM_NETWORKS.items() if stem != "mlp"}
DEFAULT_STEMS: dict[str, str] = {"atari": "resnet"}


def rl_schema(env: str, core: str, stem: str | None = None) -> type:
    """The config dataclass of an entry point: TrainConfig with typed ``core``, ``env`` and ``network``
    (the env's network, or that of image stem ``stem``). The same arguments, given by position or
    by keyword or left to their default, give the same class, so that configs compare equal (an
    Atari config saved before ``network.stem`` existed reads back as today's ``resnet`` one)."""
    return _rl_schema(env, core, stem or DEFAULT_STEMS.get(env))


@functools.cache
def _rl_schema(env: str, core: str, stem: str | None) -> type:
    network = NETWORKS[env] if stem is None else section("network", stem)
    return dataclasses.make_dataclass(
        "TrainConfig", [("core", section("core", core), field(default_factory=section("core", core))),
                        ("env", section("env", env), field(default_factory=section("env", env))),
                        ("network", network, field(default_factory=network))],
        bases=(TrainConfig,), namespace={"__doc__": TrainConfig.__doc__})


def config_from_dict(data: dict[str, Any], source: str) -> TrainConfig:
    """The TrainConfig saved in a checkpoint (``payload["config"]``)."""
    stem = (data.get("network") or {}).get("stem")  # absent before network.stem was selectable
    return from_dict(rl_schema(data["env"]["name"], data["core"]["name"], stem), data, source)


def check_config(cfg: TrainConfig, device_type: str = "cpu") -> None:
    """ConfigError for settings that are valid alone but not together (on a learner device of
    type ``device_type``)."""
    check(cfg.learner.batch_size % cfg.actor.envs_per_actor == 0, "learner.batch_size",
          f"{cfg.learner.batch_size} must be a multiple of actor.envs_per_actor ({cfg.actor.envs_per_actor}), "
          "the trajectories an actor fills at once")
    check(cfg.actor.num_buffers is None or cfg.actor.num_buffers >= cfg.learner.batch_size // cfg.actor.envs_per_actor,
          "actor.num_buffers", f"{cfg.actor.num_buffers} must be at least the unrolls of one batch "
          f"(learner.batch_size / actor.envs_per_actor = {cfg.learner.batch_size // cfg.actor.envs_per_actor})")
    check(cfg.learner.minibatches <= cfg.learner.batch_size, "learner.minibatches",
          f"{cfg.learner.minibatches} must be at most learner.batch_size ({cfg.learner.batch_size}): each "
          "minibatch holds whole trajectories")
    check(cfg.loss.advantages != "gae" or cfg.loss.clip is not None, "loss.advantages",
          "gae needs loss.clip: PPO's clipped ratio π/μ is then its only correction for acting with an older "
          "policy (without a clip use vtrace, whose ρ corrects it)")
    check(cfg.loss.advantage_statistics == "minibatch" or cfg.loss.normalize_advantages, "loss.advantage_statistics",
          "batch standardises the advantages, which needs loss.normalize_advantages true")
    check(cfg.actor.backend != "ray" or cfg.actor.inference != "server", "actor.inference",
          "server mode runs on the local backend only; with actor.backend ray the hosts act with CPU copies of "
          "the policy (use actor or auto)")
    check(getattr(cfg.env, "vectorization", "sync") == "sync", "env.vectorization",
          "async cannot run in the actors' processes (daemonic: no children of their own); they already step "
          "their envs apart from the learner, and actor.num_actors gives more of them")
    check_optim(cfg.optim)
    splits = cfg.actor.server.worker_splits
    check(cfg.actor.inference_mode(device_type) != "server" or cfg.actor.envs_per_actor % splits == 0,
          "actor.server.worker_splits", f"{splits} must divide actor.envs_per_actor "
          f"({cfg.actor.envs_per_actor}): server mode splits each worker's envs into that many groups")


def build_model(cfg: TrainConfig, observation_shape: tuple[int, ...], action_sizes: int | tuple[int, ...], *,
                action_dim: int = 0) -> AgentNet:
    """The agent of ``cfg`` for an env of these observations and actions: the Gaussian policy of a Box
    space of ``action_dim`` > 0 dimensions, else the categorical of ``action_sizes`` (an
    :class:`envs.EnvSpec`'s fields)."""
    popart = {"step": cfg.loss.popart_step, "min_sigma": cfg.loss.popart_min_sigma,
              "zero_init": cfg.loss.popart_zero_init} if cfg.loss.popart else None
    sizes = (action_sizes,) if isinstance(action_sizes, int) else tuple(action_sizes)
    actions = make_actions(sizes=sizes, dim=action_dim, squash=cfg.network.squash_actions)
    return AgentNet(observation_shape, actions, cfg.core.name, options(cfg.core), network=cfg.network,
                    popart=popart, return_discount=cfg.loss.discount if cfg.loss.scale_rewards else None)
