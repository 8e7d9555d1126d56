"""Supervised trainer for the synthetic and algorithmic benchmarks (docs/supervised.md).

Model (``model.kind = stack``, every core): an embedding per input field (concatenated) or
a Linear for float inputs -> ``make_core(core, ...)`` -> a Linear output layer.

Model (``model.kind = retrieval_memory``, retrieval tasks only): the fwp-linear-transformers
§6.1 memory itself, one fast weight matrix written once per (k, v) pair and read once by the
query, with k = W_K [e(k); v], q = W_Q e(q), the value the one-hot v ∈ R^S and the read
v̂ = W φ(q) compared with the target directly (no output layer). ``memory = fast_weight``
uses the core's feature map / normalisation / update rule (``core`` linear -> sum rule,
delta -> delta rule, overridable with ``--core.update_rule``); ``core`` gated_delta / delta_product
write with their rule instead (L2-normalised keys, no φ; the decay α_t and the n_h keys and rates
per pair from W_K, W_β, W_a on [e(k); v], every write with the pair's value v; see
:class:`HouseholderRetrievalMemory`); ``memory = softmax`` is the softmax-attention reference
(v̂ = Σ_i softmax(q·k_i) v_i).

Training: Adam, linear learning-rate warm-up, gradient-norm clipping (the update, its guard
against non-finite losses and the checkpoints are :class:`agents.learning.training.Trainer`'s),
evaluation on the valid split every ``eval_every`` steps, early stopping when the valid
``select_metric`` (default: the loss) has not improved for ``patience`` steps or the valid loss
falls below ``target_loss``; the best model by ``select_metric`` is evaluated on the test split
at the end.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveInt
from torch import Tensor, nn

from agents.config import RESUMABLE, check, options, section
from agents.errors import ConfigError
from agents.files import atomic_save, atomic_write_text
from agents.learning import training
from agents.learning.logger import Logger
from agents.learning.training import OptimConfig, RunConfig, Trainer, check_optim, configure_kernels, resolve_device
from envs.tasks import Batch, Task, make_task
from fastnet import make_core
from fastnet.feature_maps import FeatureMap
from fastnet.rules import delta_rule_writes


# --- config ------------------------------------------------------------------------------
@dataclass
class ModelConfig:
    """The model around the core."""

    kind: Literal["auto", "stack", "retrieval_memory"] = "auto"
    """stack: embedding, core, linear; retrieval_memory: §6.1's memory; auto: that for retrieval (fast-weight cores)."""
    embedding_size: PositiveInt = 128
    """Embedding size per input field (stack); size of e(k) (retrieval_memory)."""
    key_size: PositiveInt = 64
    """retrieval_memory: d_key."""
    memory: Literal["fast_weight", "softmax"] = "fast_weight"
    """retrieval_memory: the core's fast weight, or softmax attention as the reference."""


@dataclass
class LoopConfig:
    """Batches, budgets, evaluation and early stopping."""

    batch_size: PositiveInt = 64
    """Sequences per update."""
    max_steps: NonNegativeInt = field(default=10_000, metadata=RESUMABLE)
    """Updates to train for (0: unbounded; then max_epochs or max_time_s must be set)."""
    max_epochs: NonNegativeFloat = field(default=0.0, metadata=RESUMABLE)
    """Finite training sets: stop after this many epochs (0: off)."""
    max_time_s: NonNegativeFloat = field(default=0.0, metadata=RESUMABLE)
    """Wall-clock budget in seconds (0: off)."""
    eval_every: PositiveInt = field(default=500, metadata=RESUMABLE)
    """Updates between evaluations on the valid split."""
    eval_batch_size: PositiveInt = field(default=256, metadata=RESUMABLE)
    """Sequences per evaluation batch."""
    patience: NonNegativeInt = field(default=0, metadata=RESUMABLE)
    """Stop after this many updates without progress of the valid select_metric (0: off)."""
    min_delta: NonNegativeFloat = field(default=0.0, metadata=RESUMABLE)
    """Progress = the valid score beats the best by more than this."""
    select_metric: Literal["loss", "mse", "ppl", "token_acc", "seq_acc"] = "loss"
    """The valid metric that picks the best model and drives patience (loss, mse, ppl: lower is better)."""
    target_loss: NonNegativeFloat = field(default=0.0, metadata=RESUMABLE)
    """Stop once the valid loss is below this (0: off)."""
    checkpoint_every: NonNegativeInt = field(default=1000, metadata=RESUMABLE)
    """Updates between checkpoints (0: only at the end)."""


@dataclass
class LossConfig:
    """The cores' auxiliary losses (the task loss is a mean over the scored positions)."""

    aux_loss_weights: dict[str, float] = field(default_factory=dict)
    """Weight of each core auxiliary loss by name (MNM: meta); a loss not listed has weight 1."""


@dataclass
class LogConfig(training.LogConfig):
    """Progress line, CSV and TensorBoard."""

    every: PositiveInt = 50
    """Updates between training-loss rows."""


@dataclass
class Config:
    """Supervised training of a memory core on a synthetic or algorithmic task."""

    task: Any = field(default_factory=lambda: section("task", "retrieval2")())
    """The task and its generator's options."""
    core: Any = field(default_factory=lambda: section("core", "delta")())
    """The memory core and its options."""
    run: RunConfig = field(default_factory=lambda: RunConfig(run_dir="runs/supervised/{task}-{core}", num_threads=0))
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=3e-4, eps=1e-8, grad_clip=0.0))
    loss: LossConfig = field(default_factory=LossConfig)
    train: LoopConfig = field(default_factory=LoopConfig)
    log: LogConfig = field(default_factory=LogConfig, metadata=RESUMABLE)

    def resolved_run_dir(self) -> str:
        return self.run.run_dir.format(task=self.task.name, core=self.core.name)


@functools.cache
def supervised_schema(task: str, core: str) -> type:
    """The config dataclass of launch/supervised.py: Config with typed ``task`` and ``core``."""
    return dataclasses.make_dataclass(
        "Config", [("task", section("task", task), field(default_factory=section("task", task))),
                   ("core", section("core", core), field(default_factory=section("core", core)))],
        bases=(Config,), namespace={"__doc__": Config.__doc__})


# --- models ------------------------------------------------------------------------------
class SequenceModel(nn.Module):
    """Embedding (or Linear) -> core -> Linear output layer."""

    def __init__(self, task: Task, core: str, core_options: dict, embedding_size: int):
        super().__init__()
        spec = task.spec
        if spec.input_vocab is not None:
            self.embeddings = nn.ModuleList(nn.Embedding(v, embedding_size) for v in spec.input_vocab)
            self.input_layer = None
            in_size = embedding_size * len(spec.input_vocab)
        else:
            self.embeddings = None
            self.input_layer = nn.Linear(spec.input_dim, embedding_size)
            in_size = embedding_size
        self.core = make_core(core, in_size, **core_options)
        self.head = nn.Linear(self.core.output_size, spec.output_size)

    def initial_state(self, batch_size: int, device) -> tuple:
        return self.core.initial_state(batch_size, device)

    def forward(self, x: Tensor, state: tuple, done: Tensor) -> tuple[Tensor, tuple, dict]:
        if self.embeddings is not None:
            if x.dim() == 2:
                x = x.unsqueeze(-1)
            h = torch.cat([emb(x[..., i]) for i, emb in enumerate(self.embeddings)], dim=-1)
        else:
            h = self.input_layer(x)
        y, state, aux = self.core(h, state, done)
        return self.head(y), state, aux


class RetrievalMemory(nn.Module):
    """The fwp-linear-transformers §6.1 retrieval model (see the module docstring)."""

    def __init__(self, task: Task, embedding_size: int, key_size: int, memory: str, update_rule: str,
                 feature_map: str, normalisation: str, dpfp_nu: int, favor_features: int):
        super().__init__()
        if task.spec.input_vocab is None or len(task.spec.input_vocab) != 2:
            raise ValueError("model.kind=retrieval_memory needs a retrieval task (key, value inputs)")
        if normalisation not in ("sum", "none"):
            raise ValueError(f"retrieval_memory supports normalisation sum or none, got {normalisation!r}")
        if update_rule not in ("sum", "delta"):
            raise ValueError(f"retrieval_memory supports update_rule sum or delta, got {update_rule!r}")
        self.S = task.spec.output_size
        self.memory, self.rule = memory, update_rule
        self.embed = nn.Embedding(self.S, embedding_size)
        self.W_K = nn.Linear(embedding_size + self.S, key_size, bias=False)
        self.W_Q = nn.Linear(embedding_size, key_size, bias=False)
        self.W_beta = nn.Linear(embedding_size + self.S, 1)
        self.phi = FeatureMap(feature_map, key_size, dpfp_nu, favor_features, normalisation)

    def initial_state(self, batch_size: int, device) -> tuple:
        return ()

    def written_pairs(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The distinct (key, value) sequences of the batch, embedded, and each column's row among them.

        Evaluation asks every key of a sequence in turn, so one memory serves up to S columns: it is
        written once. Returns kv [L,U,E+S] ([e(k); v] per pair), v [L,U,S] one-hot and slot [B]."""
        pairs, slot = torch.unique(x[:-1].transpose(0, 1).flatten(1), dim=0, return_inverse=True)
        pairs = pairs.view(pairs.shape[0], -1, 2).transpose(0, 1)           # [L,U,2]
        v = F.one_hot(pairs[..., 1], self.S + 1)[..., :self.S].float()
        return torch.cat([self.embed(pairs[..., 0]), v], dim=-1), v, slot

    def forward(self, x: Tensor, state: tuple, done: Tensor) -> tuple[Tensor, tuple, dict]:
        kv, v, slot = self.written_pairs(x)
        k = self.W_K(kv)                                                   # [L,U,dk]
        q = self.W_Q(self.embed(x[-1, :, 0]))                              # [B,dk]
        if self.memory == "softmax":
            attn = torch.softmax(torch.einsum("lbd,bd->bl", k[:, slot], q), dim=-1)
            read = torch.einsum("bl,lbs->bs", attn, v[:, slot])
        else:
            k, q = self.phi(k), self.phi(q)
            if self.rule == "sum":  # W = Σ_t v_t ⊗ φ(k_t), so W φ(q) = Σ_t v_t (φ(k_t)·φ(q))
                read = torch.einsum("lbs,lb->bs", v[:, slot], torch.einsum("lbd,bd->lb", k[:, slot], q))
            else:
                W = delta_rule_writes(k, v, torch.sigmoid(self.W_beta(kv))[..., 0])   # [U,S,d_dot]
                read = torch.einsum("bsd,bd->bs", W[slot], q)
        out = torch.zeros(x.shape[0], x.shape[1], self.S, device=x.device)
        out[-1] = read
        return out, state, {}


class HouseholderRetrievalMemory(RetrievalMemory):
    """The retrieval memory written by Gated DeltaNet / DeltaProduct (the writes of
    ``fastnet.rules.householder_sequence``): per (k, v) pair, n_h L2-normalised keys W_K [e(k); v], rates
    β = σ(W_β [e(k); v]) (2σ with negative eigenvalues), each write with the value v, after the decay
    α = exp(-exp(A_log) softplus(w_a·[e(k); v] + b)) when ``gated`` (starting near 0.999); the read is W q with
    q = normalise(W_Q e(q)). The L·n_h writes run in one shot (``fastnet.rules.delta_rule_writes``)."""

    def __init__(self, task: Task, embedding_size: int, key_size: int, num_householder: int, gated: bool,
                 negative_eigenvalues: bool):
        super().__init__(task, embedding_size, key_size, "fast_weight", "delta", "identity", "none", 1, 1)
        self.n, self.gated, self.beta_scale = num_householder, gated, 2.0 if negative_eigenvalues else 1.0
        self.W_K = nn.Linear(embedding_size + self.S, num_householder * key_size, bias=False)
        self.W_beta = nn.Linear(embedding_size + self.S, num_householder)
        if gated:  # the slowest decay of the core's Mamba2 initialisation range (A = 1, dt = 1e-3): with one
            # head there is no spread of rates, and a random draw would forget most of S pairs at the start
            self.W_a = nn.Linear(embedding_size + self.S, 1)
            self.A_log = nn.Parameter(torch.zeros(1))
            with torch.no_grad():
                self.W_a.bias.fill_(math.log(math.expm1(1e-3)))  # softplus⁻¹(1e-3): α ≈ 0.999 per pair

    def forward(self, x: Tensor, state: tuple, done: Tensor) -> tuple[Tensor, tuple, dict]:
        kv, v, slot = self.written_pairs(x)
        L, U = v.shape[:2]
        k = F.normalize(self.W_K(kv).view(L, U, self.n, -1), dim=-1)       # [L,U,n,dk]
        q = F.normalize(self.W_Q(self.embed(x[-1, :, 0])), dim=-1)         # [B,dk]
        beta = self.beta_scale * torch.sigmoid(self.W_beta(kv))            # [L,U,n]
        g = None
        if self.gated:  # the decay before each pair's first write
            g = F.pad(-self.A_log.exp() * F.softplus(self.W_a(kv)), (0, self.n - 1))   # [L,U,n]

        def writes(t: Tensor) -> Tensor:  # [L,U,n,*] -> [L·n,U,*], the n writes of each pair in turn
            return t.transpose(1, 2).reshape(L * self.n, U, *t.shape[3:])

        W = delta_rule_writes(writes(k), writes(v.unsqueeze(2).expand(-1, -1, self.n, -1)), writes(beta),
                              None if g is None else writes(g))
        out = torch.zeros(x.shape[0], x.shape[1], self.S, device=x.device)
        out[-1] = torch.einsum("bsd,bd->bs", W[slot], q)
        return out, state, {}


RETRIEVAL_CORES = ("linear", "delta", "gated_delta", "delta_product")


def model_kind(cfg: Config, task: Task) -> str:
    if cfg.model.kind != "auto":
        return cfg.model.kind
    retrieval = task.spec.input_vocab is not None and len(task.spec.input_vocab) == 2
    return "retrieval_memory" if retrieval and cfg.core.name in RETRIEVAL_CORES else "stack"


def build_model(cfg: Config, task: Task) -> nn.Module:
    if model_kind(cfg, task) == "stack":
        return SequenceModel(task, cfg.core.name, options(cfg.core), cfg.model.embedding_size)
    check(cfg.core.name in RETRIEVAL_CORES, "model.kind",
          f"retrieval_memory takes core {', '.join(RETRIEVAL_CORES)}, got {cfg.core.name!r}")
    c = cfg.core
    if c.name in ("gated_delta", "delta_product"):
        return HouseholderRetrievalMemory(task, cfg.model.embedding_size, cfg.model.key_size,
                                          getattr(c, "num_householder", 1), getattr(c, "gated", True),
                                          getattr(c, "negative_eigenvalues", False))
    return RetrievalMemory(task, cfg.model.embedding_size, cfg.model.key_size, cfg.model.memory, c.update_rule,
                           c.feature_map, c.normalisation, c.dpfp_nu, c.favor_features)


# --- losses and metrics ------------------------------------------------------------------
def batch_loss(kind: str, out: Tensor, batch: Batch) -> Tensor:
    """Mean loss over the masked positions (mse: ½ Σ_j (v*_j − v̂_j)² per position)."""
    m = batch.mask
    if kind == "ce":
        return F.cross_entropy(out[m], batch.y[m])
    if kind == "mse":
        return 0.5 * ((out[m] - batch.y[m]) ** 2).sum(-1).mean()
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(out[m], batch.y[m])
    raise ValueError(f"unknown loss {kind!r}")


class MetricSums:
    """Accumulates evaluation sums over batches."""

    def __init__(self, kind: str):
        self.kind = kind
        self.loss = self.positions = self.correct = self.scored = self.seq_ok = self.seqs = 0.0

    def add(self, out: Tensor, batch: Batch) -> None:
        m, mm = batch.mask, batch.metric_mask
        n = int(m.sum())
        if n == 0:
            return
        self.loss += float(batch_loss(self.kind, out, batch)) * n
        self.positions += n
        if self.kind == "mse":
            return
        if self.kind == "ce":
            ok = out.argmax(-1) == batch.y                                 # [T,B]
            self.correct += float((ok & mm).sum())
            self.scored += float(mm.sum())
        else:  # bce: bit accuracy; a position is right if all its bits are
            bits = (out > 0) == (batch.y > 0.5)                            # [T,B,D]
            self.correct += float((bits & mm.unsqueeze(-1)).sum())
            self.scored += float(mm.sum()) * out.shape[-1]
            ok = bits.all(-1)
        seq_ok = (ok | ~m).all(0) & m.any(0)
        self.seq_ok += float(seq_ok.sum())
        self.seqs += float(m.any(0).sum())

    def result(self) -> dict[str, float]:
        loss = self.loss / max(self.positions, 1)
        if self.kind == "mse":
            return {"loss": loss, "mse": loss}
        out = {"loss": loss, "token_acc": self.correct / max(self.scored, 1),
               "seq_acc": self.seq_ok / max(self.seqs, 1)}
        if self.kind == "ce":
            out["ppl"] = math.exp(min(loss, 50.0))
        return out


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, split: str, batch_size: int, device) -> dict[str, float]:
    model.eval()
    sums, state = MetricSums(task.spec.loss), None
    for batch in task.eval_batches(split, batch_size):
        batch = batch.to(device)
        if batch.reset or state is None or _batch_of(state) != batch.batch_size:
            state = model.initial_state(batch.batch_size, device)
        done = torch.zeros(batch.x.shape[:2], dtype=torch.bool, device=device)
        out, state, _ = model(batch.x, state, done)
        sums.add(out, batch)
    model.train()
    return sums.result()


def _batch_of(state: tuple) -> int:
    return state[0].shape[0] if state else -1


# --- training ------------------------------------------------------------------------------
def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def _finished(result: dict[str, Any] | None, max_steps: int | None) -> bool:
    """Whether a checkpoint's run is done: it holds the run's result, and it did not stop only at a
    step budget that has since been raised."""
    if result is None:
        return False
    return result["stop_reason"] != "max_steps" or not max_steps or result["steps"] >= max_steps


def train(cfg: Config, task: Optional[Task] = None, quiet: bool = False) -> dict[str, Any]:
    """Train ``cfg.core`` on ``cfg.task``; returns the best valid and final test metrics."""
    t = cfg.train
    check_optim(cfg.optim)
    if cfg.run.num_threads:
        torch.set_num_threads(cfg.run.num_threads)
    set_seed(cfg.run.seed)
    device = resolve_device(cfg.run.device)
    configure_kernels(cfg.run.kernels, device)
    run_dir = cfg.resolved_run_dir()
    if task is None:
        try:
            task = make_task(cfg.task.name, seed=cfg.run.seed, **options(cfg.task))
        except (ValueError, OSError) as e:
            raise ConfigError(f"task: {e}") from None
    model = build_model(cfg, task).to(device)

    max_steps = t.max_steps
    if t.max_epochs:
        check(bool(task.epoch_size()), "train.max_epochs",
              f"needs a finite training set; {cfg.task.name} has none: use train.max_steps")
        epoch_steps = max(1, task.epoch_size() // t.batch_size)
        max_steps = min(max_steps or 10**12, int(math.ceil(t.max_epochs * epoch_steps)))
    check(bool(max_steps or t.max_time_s), "train.max_steps",
          "set train.max_steps, train.max_epochs or train.max_time_s")
    trainer = Trainer(model, cfg.optim, total_updates=max_steps or math.inf, run_dir=run_dir, config=cfg,
                      keep=cfg.run.keep_checkpoints)

    higher = t.select_metric in ("token_acc", "seq_acc")
    sign = -1.0 if higher else 1.0  # best_score is kept as "lower is better"
    # best_model is the best validated model's weights; checkpoints carry it, so that a resumed
    # run never scores a best_model.pt written after its checkpoint (a discarded future)
    step, best_score, best_step, best_model, history = 0, math.inf, 0, None, []
    best_path = os.path.join(run_dir, "best_model.pt")
    payload = trainer.resume(device, resume=cfg.run.resume)
    if payload is not None and _finished(payload.get("result"), max_steps):
        result = payload["result"]
        if not quiet:
            print(f"{run_dir} is already done ({result['stop_reason']} at step {result['steps']}; results in "
                  f"results.json); nothing to do. To go on, raise --train.max_steps; to train it afresh, use "
                  "--run.resume false or another --run_dir",
                  flush=True)
        return result
    if payload is not None:
        step, best_step = payload["counters"]["step"], payload["counters"]["best_step"]
        best_score, best_model = payload["best_score"], payload["best_model"]
    logger = Logger(run_dir, resume_step=step, tensorboard=cfg.log.tensorboard,
                    print_every_s=1e9 if quiet else cfg.log.print_every_s)
    if best_model is not None:
        atomic_save(best_model, best_path)
    elif os.path.exists(best_path):  # not this run's (resume off) or not of its checkpoint's past
        os.remove(best_path)
    n_params = sum(p.numel() for p in model.parameters())
    if not quiet:
        print(f"task {cfg.task.name} | core {cfg.core.name} ({model_kind(cfg, task)}) | {n_params:,} parameters | "
              f"max_steps {max_steps} | run_dir {run_dir}", flush=True)

    def checkpoint(**result: Any) -> None:
        trainer.save({"step": step, "best_step": best_step}, best_score=best_score, best_model=best_model, **result)

    state, weights = None, cfg.loss.aux_loss_weights

    def loss_fn(batch: Batch, done: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        nonlocal state
        out, state, aux = model(batch.x, state, done)
        loss = batch_loss(task.spec.loss, out, batch)
        total = loss + sum(weights.get(k, 1.0) * v for k, v in aux.items())
        return total, {"task_loss": loss.detach(), **{f"aux_{k}": v.detach() for k, v in aux.items()}}

    batches = task.train_batches(t.batch_size, seed=cfg.run.seed + step)
    start, train_loss_acc, n_acc, stop_reason = time.time(), 0.0, 0, "max_steps"
    while True:
        if max_steps and step >= max_steps:
            break
        batch = next(batches).to(device)
        if batch.reset or state is None or _batch_of(state) != batch.batch_size:
            state = model.initial_state(batch.batch_size, device)
        else:
            state = tuple(s.detach() for s in state)
        done = torch.zeros(batch.x.shape[:2], dtype=torch.bool, device=device)
        metrics = trainer.update(functools.partial(loss_fn, batch, done))
        step += 1
        train_loss_acc += metrics["task_loss"]
        n_acc += 1
        if step % cfg.log.every == 0 or metrics["nonfinite"]:
            row = {"train/loss": train_loss_acc / n_acc, "lr": metrics["lr"], "grad_norm": metrics["grad_norm"],
                   "nonfinite": metrics["nonfinite"],
                   **{f"train/{k}": v for k, v in metrics.items() if k.startswith("aux_")}}
            logger.log(step, row)
            logger.progress(step, row, force=bool(metrics["nonfinite"]))
            train_loss_acc, n_acc = 0.0, 0
        out_of_time = bool(t.max_time_s) and time.time() - start > t.max_time_s
        if step % t.eval_every == 0 or step == max_steps or out_of_time:  # the last model is scored too
            metrics = evaluate(model, task, "valid", t.eval_batch_size, device)
            history.append({"step": step, **metrics})
            logger.log(step, {f"valid/{k}": v for k, v in metrics.items()})
            check(t.select_metric in metrics, "train.select_metric",
                  f"{t.select_metric!r} is not reported for this task; choose one of {', '.join(metrics)}")
            score = sign * metrics[t.select_metric]
            if score < best_score - t.min_delta:
                best_score, best_step = score, step
                best_model = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                atomic_save(best_model, best_path)
            logger.progress(step, {f"valid_{k}": v for k, v in metrics.items()} | {"best": sign * best_score},
                            force=not quiet)
            if t.target_loss and metrics["loss"] < t.target_loss:
                stop_reason = "target_loss"
                break
            if t.patience and step - best_step >= t.patience:
                stop_reason = "patience"
                break
        if out_of_time:
            stop_reason = "max_time_s"
            break
        if t.checkpoint_every and step % t.checkpoint_every == 0:
            checkpoint()
    checkpoint()
    if best_model is not None:
        model.load_state_dict(best_model)
    valid = evaluate(model, task, "valid", t.eval_batch_size, device)
    test = evaluate(model, task, "test", t.eval_batch_size, device)
    logger.log(step, {f"test/{k}": v for k, v in test.items()})
    logger.close()
    result = {"task": cfg.task.name, "core": cfg.core.name, "model": model_kind(cfg, task), "steps": step,
              "best_step": best_step, "stop_reason": stop_reason, "parameters": n_params,
              "wall_s": round(time.time() - start, 1), "valid": valid, "test": test, "history": history}
    atomic_write_text(os.path.join(run_dir, "results.json"), json.dumps(result, indent=1))
    checkpoint(result=result)  # the run is done: running it again does nothing
    if not quiet:
        print(f"done ({stop_reason}) at step {step}: best valid {t.select_metric} {sign * best_score:.4g} "
              f"at step {best_step} | "
              "test " + " | ".join(f"{k} {v:.4g}" for k, v in test.items()), flush=True)
    return result
