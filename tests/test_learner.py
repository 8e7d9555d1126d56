"""The learner's loss on a fixed batch against a reference written out in the test."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from agents.learning.learner import compute_loss
from agents.learning.losses import total_loss
from agents.learning.training import Trainer
from agents.run_config import build_model
from launch.maze import load

T, N, A, OBS = 5, 3, 4, (10,)


def fixed_batch(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(T + 1, N, generator=g) < 0.2
    state = model.initial_state(N)
    batch = {
        "obs": torch.rand(T + 1, N, *OBS, generator=g),
        "reward": torch.randint(-1, 3, (T + 1, N), generator=g).float() * 5,
        "done": done,
        "action": torch.randint(0, A, (T + 1, N), generator=g),
        "logits": torch.randn(T + 1, N, A, generator=g),
        "final_value": torch.zeros(T + 1, N),
        **{f"state_{i}": torch.randn(s.shape, generator=g) for i, s in enumerate(state)},
    }
    return batch


CORE_FLAGS = {"ff": [], "lstm": ["--core.hidden_size", "16"],
              "delta": ["--core.hidden_size", "16", "--core.num_layers", "1", "--core.num_heads", "2",
                        "--core.head_dim", "8", "--core.ff_size", "32"],
              "mnm_p": ["--core.controller_size", "16", "--core.memory_size", "8", "--core.num_heads", "2",
                        "--core.memory_layers", "2", "--core.output_size", "16"]}


def make(core, *flags):
    cfg = load(["--core", core, *CORE_FLAGS[core], *flags])
    torch.manual_seed(0)
    return cfg, build_model(cfg, OBS, A)


def sgd_trainer(model, cfg):
    """A Trainer whose optimiser is plain SGD with lr 1, so a step moves the parameters by the gradient."""
    trainer = Trainer(model, cfg.optim, total_updates=1.0, run_dir="unused", config=cfg)
    trainer.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    return trainer


def reference_loss(model, batch, cfg):
    """V-trace (Eq. 1, as an explicit sum) and the IMPALA loss, written out with numpy, plus the
    core's aux losses (per-step means) weighted per sample: weight × T × N × aux."""
    lc = cfg.loss
    state = tuple(batch[f"state_{i}"] for i in range(len(model.initial_state(1))))
    with torch.no_grad():
        logits, baseline, _, aux = model(batch["obs"], batch["reward"], batch["action"], batch["done"], state)
    logits, baseline = logits.double().numpy(), baseline.double().numpy()
    actions = batch["action"][1:].numpy()
    rewards = batch["reward"][1:].double().numpy()
    discounts = lc.discount * (1 - batch["done"][1:].double().numpy())

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    logp = log_softmax(logits[:-1])
    logp_a = np.take_along_axis(logp, actions[..., None], -1)[..., 0]
    mu_a = np.take_along_axis(log_softmax(batch["logits"][1:].double().numpy()), actions[..., None], -1)[..., 0]
    rho = np.exp(logp_a - mu_a)
    V, boot = baseline[:-1], baseline[-1]
    V_ext = np.concatenate([V, boot[None]])
    vs = np.zeros_like(V)
    for s in range(T):
        vs[s] = V[s]
        weight = np.ones(N)
        for t in range(s, T):
            vs[s] += weight * np.minimum(lc.rho_bar, rho[t]) * (rewards[t] + discounts[t] * V_ext[t + 1] - V[t])
            weight = weight * discounts[t] * np.minimum(lc.c_bar, rho[t])
    vs_next = np.concatenate([vs[1:], boot[None]])
    adv = np.minimum(lc.rho_bar, rho) * (rewards + discounts * vs_next - V)
    pg = -(logp_a * adv).sum()
    value = 0.5 * ((vs - V) ** 2).sum()
    entropy = -(np.exp(logp) * logp).sum()
    aux_total = sum(lc.aux_loss_weights.get(k, 1.0) * T * N * v.item() for k, v in aux.items())
    return pg + lc.baseline_cost * value - lc.entropy_cost * entropy + aux_total


@pytest.mark.parametrize("core", ["ff", "lstm", "delta", "mnm_p"])
def test_loss_matches_reference(core):
    cfg, model = make(core, "--loss.rho_bar", "1.0", "--loss.c_bar", "1.0", "--loss.aux_loss_weights", "{meta: 0.5}")
    batch = fixed_batch(model)
    loss, terms = compute_loss(model.eval(), batch, cfg)
    assert loss.item() == pytest.approx(reference_loss(model, batch, cfg), rel=1e-4)
    assert set(terms) >= {"pg_loss", "baseline_loss", "entropy"}


def test_truncate_per_step_same_loss_but_no_gradient_through_time():
    cfg, model = make("lstm")
    batch = fixed_batch(model)
    batch["done"][:] = False
    loss_seq, _ = compute_loss(model, batch, cfg)
    loss_seq.backward()
    grad_seq = model.core.lstm.weight_hh_l0.grad.clone()
    model.zero_grad()
    cfg_trunc = dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, truncate_per_step=True))
    loss_trunc, _ = compute_loss(model, batch, cfg_trunc)
    loss_trunc.backward()
    assert loss_trunc.item() == pytest.approx(loss_seq.item(), rel=1e-5)
    assert not torch.allclose(model.core.lstm.weight_hh_l0.grad, grad_seq)


def test_aux_losses_are_weighted():
    losses = {"pg_loss": torch.tensor(1.0), "baseline_loss": torch.tensor(2.0), "entropy": torch.tensor(3.0)}
    aux = {"meta": torch.tensor(5.0), "other": torch.tensor(7.0)}
    got = total_loss(losses, 0.5, 0.1, aux, {"meta": 0.2})
    assert got.item() == pytest.approx(1.0 + 0.5 * 2.0 - 0.1 * 3.0 + 0.2 * 5.0 + 7.0)


@pytest.mark.parametrize("grad_clip", ["0.0", "1e-3"])
def test_update_clips_the_global_gradient_norm_and_zero_means_off(grad_clip):
    """One SGD step of lr 1 moves the parameters by the (clipped) gradient: by at most
    grad_clip when clipping, by the whole gradient when grad_clip is 0."""
    cfg, model = make("lstm", "--optim.grad_clip", grad_clip)
    batch = fixed_batch(model)
    loss, _ = compute_loss(model, batch, cfg)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    full_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    before = [p.detach().clone() for p in model.parameters()]
    stats = sgd_trainer(model, cfg).update(lambda: compute_loss(model, batch, cfg))
    step = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())])
    assert stats["grad_norm"] == pytest.approx(full_norm.item(), rel=1e-4)
    expected = full_norm.item() if float(grad_clip) == 0 else float(grad_clip)
    assert torch.linalg.vector_norm(step).item() == pytest.approx(expected, rel=1e-3)


def test_update_redraws_favor_features_once_per_batch():
    cfg, _ = make("delta", "--core.feature_map", "favor", "--core.favor_features", "4")
    model = build_model(cfg, OBS, A)
    R = model.core.layers[0].phi.projection.clone()
    sgd_trainer(model, cfg).update(lambda: compute_loss(model, fixed_batch(model), cfg))
    assert not torch.equal(model.core.layers[0].phi.projection, R)
