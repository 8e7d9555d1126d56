"""How a run is configured: the config sections both trainers share (run, optimiser, log), the
RL run's tree (:class:`TrainConfig`) with its schema per env and core, reading a saved config
back, and the agent network a config builds.

The learner (:mod:`agents.learning.learner`), the Ray actor hosts
(:mod:`agents.acting.ray_backend`), evaluation and the entry points all build from here, so
neither side of the agent imports the other to read a config.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    restricted_number_type,
)

from agents.config import RESUMABLE, check, core_section, env_section, from_dict, options
from agents.network import AgentNet, MLPNetworkConfig, NatureNetworkConfig, NetworkConfig, ResNetNetworkConfig

# A momentum or an Adam β of 1 or more never forgets: the step grows without bound.
UnitIntervalHalfOpen = restricted_number_type("UnitIntervalHalfOpen", float, [(">=", 0), ("<", 1)])


@dataclass
class RunConfig:
    """The run: seed, device, run directory."""

    seed: int = 0
    """Seed of torch, numpy and the environments."""
    device: str = field(default="cpu", metadata=RESUMABLE)
    """Where the model trains: cpu, cuda, cuda:N, or auto (cuda when there is one)."""
    run_dir: str = field(default="runs/{core}", metadata=RESUMABLE)
    """Directory for checkpoints, logs and config.yaml; {env}, {id}, {game}, {task} and {core} are filled in."""
    num_threads: NonNegativeInt = field(default=1, metadata=RESUMABLE)
    """torch threads of the training process (0: torch's default)."""
    resume: bool = field(default=True, metadata=RESUMABLE)
    """Resume from the run directory's checkpoint when it has one (false: start afresh there)."""
    kernels: Optional[Literal["auto", "triton", "reference"]] = field(default=None, metadata=RESUMABLE)
    """Sequence kernels: auto (Triton on CUDA after a self-check), triton, reference; null: $DELTABEAST_KERNELS."""
    keep_checkpoints: PositiveInt = field(default=2, metadata=RESUMABLE)
    """Checkpoints kept besides milestones (the latest and those before it, for a resume to fall back on)."""


@dataclass
class LogConfig:
    """Progress line, CSV and TensorBoard."""

    print_every_s: NonNegativeFloat = 5.0
    """Seconds between progress lines."""
    tensorboard: bool = True
    """Also write TensorBoard scalars to run_dir/tb."""


@dataclass
class OptimConfig:
    """The optimiser, its learning-rate schedule and the update's safeguards."""

    name: Literal["rmsprop", "adam"] = "rmsprop"
    """RMSProp (as IMPALA) or Adam."""
    lr: PositiveFloat = 6e-4
    """Learning rate (at the end of the warm-up)."""
    eps: NonNegativeFloat = 0.01
    """ε added to the denominator (RMSProp and Adam)."""
    alpha: ClosedUnitInterval = 0.99
    """RMSProp: smoothing of the squared gradients."""
    momentum: UnitIntervalHalfOpen = 0.0
    """RMSProp: momentum, in [0, 1)."""
    beta1: UnitIntervalHalfOpen = 0.9
    """Adam: β1, in [0, 1)."""
    beta2: UnitIntervalHalfOpen = 0.999
    """Adam: β2, in [0, 1)."""
    grad_clip: NonNegativeFloat = field(default=40.0, metadata=RESUMABLE)
    """Clip the global gradient norm to this (0: no clipping)."""
    warmup_steps: NonNegativeInt = 0
    """Updates of linear warm-up from 0 to lr."""
    lr_decay: bool = False
    """Decay the learning rate linearly to 0 at the end of the budget."""
    max_nonfinite_steps: PositiveInt = field(default=10, metadata=RESUMABLE)
    """Stop the run after this many updates in a row whose loss or gradient is NaN or inf (each is skipped)."""


@dataclass
class RayConfig:
    """The Ray backend (actor.backend: ray): the cluster, and how unrolls and weights travel."""

    address: str = "auto"
    """Cluster to join: auto (a running one, else start one here), local (always start one here), or host:port."""
    max_in_flight: PositiveInt = 2
    """Unroll calls outstanding per host: the backpressure bound."""
    weights_every: PositiveInt = 1
    """Publish the learner's weights to the hosts every this many updates."""
    max_restarts: NonNegativeInt = 10
    """Restarts Ray makes of a host that died, before the run stops."""
    unrolls_per_call: PositiveInt = 2
    """Unrolls a host makes per call: more amortise Ray's cost per call (~7 ms), and the policy lag grows."""
    cpus_per_host: PositiveFloat = 1.0
    """CPUs each host reserves in the placement group."""


@dataclass
class RLRunConfig(RunConfig):
    """The run: seed, device, budget, run directory."""

    total_steps: PositiveInt = field(default=1_000_000, metadata=RESUMABLE)
    """Environment steps to train for (the lr decays to 0 over them if optim.lr_decay)."""


@dataclass
class ActorConfig:
    """The acting side: processes that step the envs, and where the policy runs."""

    num_actors: PositiveInt = field(default=2, metadata=RESUMABLE)
    """Actor (or, in server mode, env worker) processes."""
    envs_per_actor: PositiveInt = 64
    """Envs each process steps as one batch (learner.batch_size must be a multiple of it)."""
    unroll_length: PositiveInt = 20
    """T: steps per unroll, the learner's backpropagation span."""
    inference: Literal["auto", "actor", "server"] = field(default="auto", metadata=RESUMABLE)
    """Where the policy runs: a CPU copy per actor (actor), or batched on the learner device (server, auto on CUDA)."""
    num_buffers: Optional[PositiveInt] = field(default=None, metadata=RESUMABLE)
    """Actor mode: rollout buffers the actors fill (null: 2 x num_actors + a batch's; a batch's caps the lag at one)."""
    server_max_batch: NonNegativeInt = field(default=0, metadata=RESUMABLE)
    """Server mode: the most envs one inference batch serves (0: all)."""
    server_max_wait_ms: NonNegativeFloat = field(default=2.0, metadata=RESUMABLE)
    """Server mode: how long a batch waits for more envs after the first is ready."""
    worker_splits: PositiveInt = 1
    """Server mode: groups each worker's envs take turns in, stepping one while the server acts for another."""
    server_side_stream: bool = False
    """Server mode on CUDA: the inference loop on a stream of its own, with events (checked, not timed, on a GPU)."""
    backend: Literal["local", "ray"] = field(default="local", metadata=RESUMABLE)
    """Where the actors run: processes on this machine (local), or actor hosts across a Ray cluster (ray)."""
    start_method: Literal["fork", "spawn", "forkserver"] = field(default="fork", metadata=RESUMABLE)
    """How the processes start (fork starts fastest; a CUDA learner in actor mode needs spawn or forkserver)."""


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
class LossConfig:
    """The IMPALA loss (Espeholt et al., 2018, Eqs. 1-4) and the cores' auxiliary losses."""

    discount: ClosedUnitInterval = 0.9
    """γ."""
    baseline_cost: NonNegativeFloat = 0.5
    """Weight of the baseline (value) loss."""
    entropy_cost: NonNegativeFloat = 0.01
    """Weight of the entropy bonus."""
    rho_bar: PositiveFloat = 1.0
    """V-trace's ρ̄, the clip of the importance weights in the targets."""
    c_bar: NonNegativeFloat = 1.0
    """V-trace's c̄, the clip of the trace-cutting weights."""
    aux_loss_weights: dict[str, float] = field(default_factory=dict)
    """Weight of each core auxiliary loss by name (MNM: meta); a loss not listed has weight 1."""
    clip: Optional[PositiveFloat] = None
    """PPO's ε: the clipped surrogate on the ratio π/μ (null: IMPALA's ρ-weighted policy gradient)."""
    advantages: Literal["vtrace", "gae"] = "vtrace"
    """Advantages and value targets: V-trace (off-policy corrected) or GAE (on-policy; needs loss.clip)."""
    gae_lambda: ClosedUnitInterval = 0.95
    """GAE's λ."""
    normalize_advantages: bool = False
    """Standardise the advantages over each minibatch."""
    value_clip: Optional[PositiveFloat] = None
    """PPO's value clipping: keep the value within this of its value before the batch's updates (null: off)."""
    popart: bool = False
    """Normalise the value targets with PopArt (scale-free value loss and advantages)."""
    popart_step: OpenUnitInterval = 0.01
    """PopArt: the step β of the targets' running mean and mean square, per batch."""
    popart_min_sigma: PositiveFloat = 0.01
    """PopArt: floor of σ, so a solved task's near-constant targets do not blow up the advantages."""


@dataclass
class RLLogConfig(LogConfig):
    """Progress line, CSV and TensorBoard."""

    return_window: PositiveInt = 100
    """Report the mean return over this many recent episodes."""


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

    core: Any = field(default_factory=lambda: core_section("lstm")())
    """The memory core and its options."""
    run: RLRunConfig = field(default_factory=RLRunConfig)
    env: Any = field(default_factory=lambda: env_section("maze")())
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
IMAGE_NETWORKS: dict[str, type] = {"resnet": ResNetNetworkConfig, "nature": NatureNetworkConfig}
STEM_NETWORKS: dict[str, type] = {"mlp": MLPNetworkConfig, **IMAGE_NETWORKS}
DEFAULT_STEMS: dict[str, str] = {"atari": "resnet"}


@functools.cache
def network_section(stem: str) -> type:
    """The ``network`` section of stem ``stem``: its config, plus the field ``stem`` that chose it."""
    base = STEM_NETWORKS[stem]
    section = dataclasses.make_dataclass(base.__name__, [("stem", Literal[stem], field(default=stem))],
                                         bases=(base,))
    section.__doc__ = (f"{base.__doc__}\n\nAttributes:\n    stem: The stem, {stem} here (--network.stem NAME "
                       f"--help lists another's options).")
    section.__module__ = base.__module__
    return section


def rl_schema(env: str, core: str, stem: str | None = None) -> type:
    """The config dataclass of an entry point: TrainConfig with typed ``core``, ``env`` and ``network``
    (the env's network, or that of image stem ``stem``). The same arguments, given by position or
    by keyword or left to their default, give the same class, so that configs compare equal (an
    Atari config saved before ``network.stem`` existed reads back as today's ``resnet`` one)."""
    return _rl_schema(env, core, stem or DEFAULT_STEMS.get(env))


@functools.cache
def _rl_schema(env: str, core: str, stem: str | None) -> type:
    network = NETWORKS[env] if stem is None else network_section(stem)
    return dataclasses.make_dataclass(
        "TrainConfig", [("core", core_section(core), field(default_factory=core_section(core))),
                        ("env", env_section(env), field(default_factory=env_section(env))),
                        ("network", network, field(default_factory=network))],
        bases=(TrainConfig,), namespace={"__doc__": TrainConfig.__doc__})


def config_from_dict(data: dict[str, Any], source: str) -> TrainConfig:
    """The TrainConfig saved in a checkpoint (``payload["config"]``)."""
    stem = (data.get("network") or {}).get("stem")  # absent before network.stem was selectable
    return from_dict(rl_schema(data["env"]["name"], data["core"]["name"], stem), data, source)


def inference_mode(cfg: TrainConfig, device_type: str) -> str:
    """Where the policy acts: ``actor.inference``, with auto resolved (server on CUDA)."""
    if cfg.actor.inference != "auto":
        return cfg.actor.inference
    return "server" if device_type == "cuda" and cfg.actor.backend == "local" else "actor"


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
    check(cfg.actor.backend != "ray" or cfg.actor.inference != "server", "actor.inference",
          "server mode runs on the local backend only; with actor.backend ray the hosts act with CPU copies of "
          "the policy (use actor or auto)")
    check(inference_mode(cfg, device_type) != "server" or cfg.actor.envs_per_actor % cfg.actor.worker_splits == 0,
          "actor.worker_splits", f"{cfg.actor.worker_splits} must divide actor.envs_per_actor "
          f"({cfg.actor.envs_per_actor}): server mode splits each worker's envs into that many groups")


def build_model(cfg: TrainConfig, observation_shape: tuple[int, ...], action_sizes: int | tuple[int, ...]) -> AgentNet:
    return AgentNet(observation_shape, action_sizes, cfg.core.name, options(cfg.core), stem=cfg.network.stem,
                    stem_options=cfg.network.stem_options(), reward_clip=cfg.network.reward_clip,
                    prev_action=cfg.network.prev_action, head_sizes=cfg.network.head_sizes,
                    popart={"step": cfg.loss.popart_step, "min_sigma": cfg.loss.popart_min_sigma} if cfg.loss.popart
                    else None)
