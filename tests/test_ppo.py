"""The PPO-style update in the IMPALA learner (issue 25): IMPALA's update kept bit for bit, the
clipped surrogate on a hand-worked batch, minibatches of whole trajectories, GAE, and PopArt."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agents.learning.learner import compute_loss, learn_from_batch, minibatch_columns, select_trajectories
from agents.learning.losses import LossConfig, Unrolls, actor_critic_losses, advantage_statistics
from agents.learning.vtrace import gae, vtrace
from agents.popart import PopArt
from tests.test_learner import fixed_batch, make, sgd_trainer


def impala_loss_as_before(model, batch, cfg):
    """The learner's loss as it was before the PPO update (commit 00e298a), written out here
    unchanged: the reference that epochs 1, minibatches 1 and clip null must match bit for bit."""
    lc = cfg.loss
    state = tuple(batch[f"state_{i}"] for i in range(sum(k.startswith("state_") for k in batch)))
    logits, baseline, _, aux = model(batch["obs"], batch["reward"], batch["action"], batch["done"], state,
                                     truncate_per_step=cfg.learner.truncate_per_step)
    rewards = batch["reward"][1:]
    discounts = (~batch["done"][1:]).float() * lc.discount
    target_logits, values, bootstrap_value = logits[:-1], baseline[:-1], baseline[-1]
    actions = batch["action"][1:]
    target_log_probs = torch.log_softmax(target_logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    behaviour = torch.log_softmax(batch["logits"][1:], dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    returns = vtrace((target_log_probs - behaviour).detach(), discounts, rewards, values.detach(),
                     bootstrap_value.detach(), rho_bar=lc.rho_bar, c_bar=lc.c_bar)
    log_policy = F.log_softmax(target_logits, dim=-1)
    losses = {"pg_loss": -(target_log_probs * returns.pg_advantages).sum(),
              "baseline_loss": 0.5 * ((returns.vs - values) ** 2).sum(),
              "entropy": -(log_policy.exp() * log_policy).sum()}
    loss = losses["pg_loss"] + lc.baseline_cost * losses["baseline_loss"] - lc.entropy_cost * losses["entropy"]
    for name, value in aux.items():
        loss = loss + lc.aux_loss_weights.get(name, 1.0) * rewards.numel() * value
    return loss


@pytest.mark.parametrize("core", ["lstm", "mnm_p"])
def test_one_epoch_without_a_clip_is_impalas_update_bit_for_bit(core):
    cfg, model = make(core, "--loss.popart", "false")  # IMPALA's loss: no PopArt (maze.yaml turns it on)
    batch = fixed_batch(model)
    loss, _ = compute_loss(model, batch, cfg)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    reference = impala_loss_as_before(model, batch, cfg)
    reference_grads = torch.autograd.grad(reference, list(model.parameters()))
    assert torch.equal(loss, reference)
    assert all(torch.equal(g, r) for g, r in zip(grads, reference_grads))

    before = {k: v.clone() for k, v in model.state_dict().items()}  # one SGD step each way: same weights
    learn_from_batch(sgd_trainer(model, cfg), model, batch, cfg, torch.Generator().manual_seed(0))
    after_learn = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(before)
    sgd_trainer(model, cfg).update(lambda: (impala_loss_as_before(model, batch, cfg), {}))
    assert all(torch.equal(after_learn[k], v) for k, v in model.state_dict().items())
    assert not all(torch.equal(after_learn[k], v) for k, v in before.items())


def test_clipped_surrogate_on_a_hand_worked_two_step_batch():
    """T = 2, one trajectory, two actions, γ = 0.5, V-trace with ρ̄ = c̄ = 1, ε = 0.2, checked
    against the objective written out in float64."""
    def t(*x):
        return torch.tensor(x, dtype=torch.float64)

    target = t([0.0, math.log(3.0)], [0.0, 0.0]).view(2, 1, 2)  # π(a=1) = 0.75 at step 0, 0.5 at step 1
    behaviour = t([0.0, 0.0], [0.0, math.log(3.0)]).view(2, 1, 2)  # μ(a=1) = 0.5, then 0.75
    actions = torch.tensor([[1], [1]])
    rewards, discounts = t(1.0, 2.0).view(2, 1), t(0.5, 0.5).view(2, 1)
    values, bootstrap = t(1.0, 2.0).view(2, 1).requires_grad_(), t(4.0)
    terms, targets = actor_critic_losses(Unrolls(target.requires_grad_(), behaviour, actions, rewards, discounts,
                                                 values, bootstrap), LossConfig(clip=0.2))
    # ratios r = π/μ: 0.75/0.5 = 1.5 and 0.5/0.75 = 2/3; ρ = c = min(1, r) = 1 and 2/3.
    # δ_1 = (2/3)(2 + 0.5·4 − 2) = 4/3 -> v_1 = 2 + 4/3 = 10/3
    # δ_0 = 1·(1 + 0.5·2 − 1) = 1;  v_0 − V_0 = δ_0 + γ c_0 (v_1 − V_1) = 1 + 0.5·1·(4/3) = 5/3 -> v_0 = 8/3
    v0, v1 = 8.0 / 3.0, 10.0 / 3.0
    np.testing.assert_allclose(targets.detach().flatten().numpy(), [v0, v1], rtol=1e-12)
    # advantages without ρ: A_0 = 1 + 0.5·v_1 − 1 = 5/3;  A_1 = 2 + 0.5·4 − 2 = 2
    a0, a1, r0, r1 = 5.0 / 3.0, 2.0, 1.5, 2.0 / 3.0
    surrogate = min(r0 * a0, 1.2 * a0) + min(r1 * a1, max(min(r1, 1.2), 0.8) * a1)
    assert terms["pg_loss"].item() == pytest.approx(-surrogate, rel=1e-12)
    assert terms["baseline_loss"].item() == pytest.approx(0.5 * ((v0 - 1.0) ** 2 + (v1 - 2.0) ** 2), rel=1e-12)
    assert terms["clip_fraction"].item() == pytest.approx(1.0)  # |1.5 − 1| and |2/3 − 1| both exceed 0.2
    # Step 0 (A > 0, r = 1.5 > 1 + ε) takes the clipped term and carries no policy gradient; step 1
    # (A > 0, r = 2/3 < 1 − ε) keeps the unclipped, pessimistic r A = 4/3 < 0.8 A, whose gradient
    # d(−r A)/d logit = −A r (1{a} − π) = −(4/3)(1 − 0.5) for the action taken.
    terms["pg_loss"].backward(retain_graph=True)
    assert torch.count_nonzero(target.grad[0]) == 0
    np.testing.assert_allclose(target.grad[1, 0].numpy(), [2.0 / 3.0, -2.0 / 3.0], rtol=1e-12)
    unclipped, _ = actor_critic_losses(Unrolls(target.detach().requires_grad_(), behaviour, actions, rewards,
                                               discounts, values, bootstrap), LossConfig(clip=10.0))
    assert unclipped["pg_loss"].item() == pytest.approx(-(r0 * a0 + r1 * a1), rel=1e-12)


def test_value_clipping_keeps_the_larger_error():
    values = torch.tensor([[1.0], [5.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[0.0], [4.9]], dtype=torch.float64)
    logits = torch.zeros(2, 1, 2, dtype=torch.float64)
    unrolls = Unrolls(logits, logits, torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.float64),
                      torch.zeros(2, 1, dtype=torch.float64), values, torch.tensor([0.0], dtype=torch.float64))
    terms, targets = actor_critic_losses(unrolls, LossConfig(value_clip=0.5), old_values=old)
    # targets: v_s = r_s = 0 (γ = 0). Step 0: |0 − 1|² = 1 vs clipped V 0.5 -> 0.25: keep 1.
    # Step 1: |0 − 5|² = 25 vs clipped V 5.0 (within 0.5 of 4.9) -> 25.
    assert targets.flatten().tolist() == [0.0, 0.0]
    assert terms["baseline_loss"].item() == pytest.approx(0.5 * (1.0 + 25.0))
    old_far = torch.tensor([[3.0], [4.9]], dtype=torch.float64)  # V clipped to 2.5: error 6.25 > 1
    terms, _ = actor_critic_losses(unrolls, LossConfig(value_clip=0.5), old_values=old_far)
    assert terms["baseline_loss"].item() == pytest.approx(0.5 * (6.25 + 25.0))


def test_gae_against_the_explicit_sum():
    rng = np.random.default_rng(0)
    T, B, lam = 6, 4, 0.9
    discounts = 0.95 * (rng.random((T, B)) > 0.25)
    rewards, values, bootstrap = rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B)
    targets, advantages = gae(*(torch.tensor(a) for a in (discounts, rewards, values, bootstrap)), lam)
    values_ext = np.concatenate([values, bootstrap[None]])
    deltas = rewards + discounts * values_ext[1:] - values
    expected = np.zeros((T, B))
    for s in range(T):
        weight = np.ones(B)
        for t in range(s, T):
            expected[s] += weight * deltas[t]
            weight = weight * discounts[t] * lam
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(targets.numpy(), expected + values, rtol=1e-12)
    _, one_step = gae(*(torch.tensor(a) for a in (discounts, rewards, values, bootstrap)), 0.0)
    np.testing.assert_allclose(one_step.numpy(), deltas, rtol=1e-12)  # λ = 0: the TD error


@pytest.mark.parametrize("n,k", [(8, 4), (7, 3), (5, 5)])
def test_minibatches_partition_the_trajectories(n, k):
    generator = torch.Generator().manual_seed(0)
    parts = minibatch_columns(n, k, generator)
    assert len(parts) == k and sorted(torch.cat(parts).tolist()) == list(range(n))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    assert torch.cat(minibatch_columns(n, k, generator)).tolist() != torch.cat(parts).tolist() or n <= 2


def test_a_minibatch_holds_whole_trajectories_with_their_start_state():
    cfg, model = make("lstm")
    batch = fixed_batch(model)
    batch["env_slot"] = torch.arange(3) * 10
    part = select_trajectories(batch, torch.tensor([2, 0]))
    assert torch.equal(part["obs"], batch["obs"][:, [2, 0]]) and part["obs"].shape[0] == batch["obs"].shape[0]
    assert torch.equal(part["state_0"], batch["state_0"][[2, 0]]) and part["env_slot"].tolist() == [20, 0]


def test_epochs_and_minibatches_make_that_many_optimiser_steps():
    cfg, model = make("lstm", "--learner.epochs", "3", "--learner.minibatches", "3", "--loss.clip", "0.2")
    trainer = sgd_trainer(model, cfg)
    metrics = learn_from_batch(trainer, model, fixed_batch(model), cfg, torch.Generator().manual_seed(0))
    assert trainer.scheduler.last_epoch == 9 and 0.0 <= metrics["clip_fraction"] <= 1.0
    assert metrics["nonfinite"] == 0


def test_popart_keeps_the_outputs_when_its_statistics_move():
    """Hessel et al. 2019, Eq. 2: after (μ, σ) move, the rescaled head gives the same values."""
    torch.manual_seed(0)
    head = PopArt(8, step=0.3).double()
    h = torch.randn(16, 8, dtype=torch.float64)
    for scale, shift in ((100.0, 50.0), (0.01, -3.0), (1e4, 0.0)):
        before = head(h).detach()
        sigma = head.sigma.clone()
        head.update(scale * torch.randn(64, dtype=torch.float64) + shift)
        assert not torch.equal(head.sigma, sigma)
        torch.testing.assert_close(head(h), before, rtol=1e-10, atol=1e-10 * scale)
    first = PopArt(1, step=0.01).double()
    targets = torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=torch.float64)
    first.update(targets)  # the first update averages (β = 1/n), not biased towards μ = 0, σ = 1
    assert first.mu.item() == pytest.approx(4.0) and first.sigma.item() == pytest.approx(targets.std(unbiased=False))


def test_popart_sigma_stays_at_its_floor_on_constant_targets_and_keeps_the_outputs():
    """A solved task's targets barely vary: σ stops at ``min_sigma`` (the paper's 1e-4 at least)
    instead of shrinking with them, and the rescale still keeps the outputs."""
    torch.manual_seed(0)
    head = PopArt(8, step=0.5, min_sigma=0.01).double()
    h = torch.randn(16, 8, dtype=torch.float64)
    for _ in range(20):
        before = head(h).detach()
        head.update(torch.full((64,), 0.19, dtype=torch.float64))
        torch.testing.assert_close(head(h), before, rtol=1e-10, atol=1e-10)
    assert head.sigma.item() == pytest.approx(0.01) and head.mu.item() == pytest.approx(0.19)
    assert PopArt(1, min_sigma=0.0).min_sigma == 1e-4


def test_a_zero_initialised_popart_head_keeps_its_first_normalised_values_at_the_targets_scale():
    """On targets of small spread (σ at its floor after the first update), a randomly initialised
    head's outputs, kept by the rescale, are tens of σ from the targets in normalised units; a
    head started at zero (``zero_init``) gives V = 0 for every input, (0 − μ)/σ normalised."""
    torch.manual_seed(0)
    h = torch.randn(32, 64, dtype=torch.float64)
    targets = 0.05 + 0.001 * torch.randn(256, dtype=torch.float64)  # PositionOnlyCartPole's first values
    errors = {}
    for zero_init in (False, True):
        head = PopArt(64, min_sigma=0.01, zero_init=zero_init).double()
        head.update(targets)
        assert head.sigma.item() == pytest.approx(0.01) and head.mu.item() == pytest.approx(targets.mean().item())
        errors[zero_init] = ((head(h) - targets.mean()) / head.sigma).abs()
    assert errors[False].max() > 10  # nn.Linear's init: outputs ~0.3, over σ = 0.01
    torch.testing.assert_close(errors[True], torch.full_like(errors[True], targets.mean().item() / 0.01))  # ~5
    _, model = make("lstm", "--loss.popart", "true", "--loss.popart_zero_init", "true")
    assert not model.baseline.weight.any() and not model.baseline.bias.any()
    _, model = make("lstm", "--loss.popart", "true")
    assert model.baseline.weight.any()


def test_a_run_resumes_whatever_its_popart_zero_init_was():
    """The option shapes only a new head: a checkpoint written with it off resumes with it on."""
    from agents.config import resumable_keys, to_dict
    from agents.learning.checkpoint import check_same_run

    old, _ = make("lstm", "--loss.popart", "true", "--loss.popart_zero_init", "false")
    new, _ = make("lstm", "--loss.popart", "true", "--loss.popart_zero_init", "true")
    check_same_run(to_dict(old), new, resumable_keys(new), "checkpoint.pt")


def test_popart_normalises_the_value_loss_and_the_advantages():
    """With σ the scale of the targets, the value errors and the advantages are in units of σ:
    the loss on targets scaled by 100 (values too) equals the loss on the unscaled ones."""
    torch.manual_seed(0)
    logits = torch.randn(4, 2, 3, dtype=torch.float64)
    common = dict(target_logits=logits, behaviour_logits=logits + 0.1, actions=torch.randint(0, 3, (4, 2)),
                  discounts=torch.full((4, 2), 0.9, dtype=torch.float64))
    rewards, values, boot = (torch.randn(4, 2).double(), torch.randn(4, 2).double(), torch.randn(2).double())
    plain, _ = actor_critic_losses(Unrolls(rewards=rewards, values=values, bootstrap_value=boot, **common),
                                   LossConfig())
    scaled, _ = actor_critic_losses(Unrolls(rewards=100 * rewards, values=100 * values, bootstrap_value=100 * boot,
                                            **common), LossConfig(),
                                    value_scale=torch.tensor(100.0, dtype=torch.float64))
    for key in ("pg_loss", "baseline_loss", "entropy"):
        assert scaled[key].item() == pytest.approx(plain[key].item(), rel=1e-10)


@pytest.mark.parametrize("T, B", [(4, 2), (1, 1)])
def test_standardised_advantages_against_a_hand_standardised_sum(T, B):
    """IMPALA's −Σ A'_s log π(a_s|x_s) with A' = (A − mean A) / (std A + 1e-8) over the minibatch (the
    unbiased std); a one-sample minibatch, which has no spread, keeps A as it is."""
    torch.manual_seed(0)
    logits = torch.randn(T, B, 3, dtype=torch.float64)
    u = Unrolls(target_logits=logits, behaviour_logits=logits, actions=torch.randint(0, 3, (T, B)),
                rewards=torch.randn(T, B).double(), discounts=torch.full((T, B), 0.9, dtype=torch.float64),
                values=torch.randn(T, B).double(), bootstrap_value=torch.randn(B).double())
    terms, _ = actor_critic_losses(u, LossConfig(normalize_advantages=True))
    a = vtrace(torch.zeros(T, B, dtype=torch.float64), u.discounts, u.rewards, u.values, u.bootstrap_value
               ).pg_advantages.flatten().tolist()
    if len(a) > 1:
        mean = sum(a) / len(a)
        std = math.sqrt(sum((x - mean) ** 2 for x in a) / (len(a) - 1))
        a = [(x - mean) / (std + 1e-8) for x in a]
    log_pi = F.log_softmax(logits, -1).gather(-1, u.actions[..., None]).flatten().tolist()
    assert terms["pg_loss"].item() == pytest.approx(-sum(x * lp for x, lp in zip(a, log_pi)), rel=1e-12)


def test_popart_statistics_skip_a_nonfinite_batch_and_stay_finite_after_it():
    """A diverged batch (NaN or inf targets) must not reach μ and ν: the finite batches after it
    give the statistics they would have given without it."""
    h = torch.randn(4, 8, dtype=torch.float64)
    batches = [torch.randn(32, dtype=torch.float64) * 3 + 1 for _ in range(3)]
    clean, poisoned = PopArt(8, step=0.1).double(), PopArt(8, step=0.1).double()
    poisoned.load_state_dict(clean.state_dict())
    for bad in (torch.tensor([1.0, math.nan]), torch.tensor([math.inf, 0.0])):
        poisoned.update(bad.double())
    assert poisoned.updates.item() == 0 and torch.equal(poisoned(h), clean(h))
    for targets in batches:
        clean.update(targets)
        poisoned.update(targets)
        poisoned.update(torch.full((32,), math.nan, dtype=torch.float64))
    for name, value in clean.state_dict().items():
        assert torch.isfinite(poisoned.state_dict()[name]).all() and torch.equal(poisoned.state_dict()[name], value)


def vtrace_by_hand(model, batch, cfg):
    """V-trace's targets and advantages of a batch under the network as it is (PopArt's values
    in the rewards' units), written out from the model's forward pass."""
    with torch.no_grad():
        logits, baseline, _, _ = model(batch["obs"], batch["reward"], batch["action"], batch["done"],
                                       tuple(batch[k] for k in sorted(batch) if k.startswith("state_")))
    rewards, discounts = batch["reward"][1:], (~batch["done"][1:]).float() * cfg.loss.discount
    actions = batch["action"][1:].unsqueeze(-1)
    log_rhos = logits[:-1].log_softmax(-1).gather(-1, actions) - batch["logits"][1:].log_softmax(-1).gather(-1, actions)
    return vtrace(log_rhos.squeeze(-1), discounts, rewards, baseline[:-1], baseline[-1])


def test_popart_statistics_move_before_the_batchs_gradient_steps():
    """van Hasselt et al. 2016, Algorithm 1: μ and σ move to the batch's value targets first, so
    the first update's loss is in the new normalisation; the targets are the network's before
    any step on the batch (here: the loss of the first update recomputed by hand)."""
    cfg, model = make("lstm", "--loss.popart", "true", "--learner.epochs", "1", "--learner.minibatches", "1")
    batch = fixed_batch(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    targets = vtrace_by_hand(model, batch, cfg).vs
    want = PopArt(model.baseline.in_features, step=cfg.loss.popart_step).double()
    want.update(targets.double())
    seen = []  # the statistics the first update's loss was computed with, and the weights before its step
    trainer = sgd_trainer(model, cfg)
    update = trainer.update

    def watched(loss_fn, redraw):
        def loss_and_stats():
            out = loss_fn()
            seen.append((model.baseline.mu.item(), model.baseline.sigma.item(), model.stem.layers[0].weight.clone()))
            return out
        return update(loss_and_stats, redraw=redraw)

    trainer.update = watched
    learn_from_batch(trainer, model, batch, cfg, torch.Generator().manual_seed(0))
    assert seen[0][:2] == pytest.approx((want.mu.item(), want.sigma.item()), rel=1e-5)
    assert before["baseline.mu"].item() == 0.0 and seen[0][0] != 0.0
    assert torch.equal(seen[0][2], before["stem.layers.0.weight"])  # no step had been taken yet


def test_a_popart_learner_updates_its_statistics_once_per_batch():
    cfg, model = make("lstm", "--loss.popart", "true", "--learner.epochs", "2", "--learner.minibatches", "3")
    assert isinstance(model.baseline, PopArt)
    learn_from_batch(sgd_trainer(model, cfg), model, fixed_batch(model), cfg, torch.Generator().manual_seed(0))
    assert model.baseline.updates.item() == 1 and model.baseline.mu.item() != 0.0
    assert {"baseline.mu", "baseline.nu"} <= set(model.state_dict())


def test_the_batchs_statistics_standardise_a_minibatch_against_a_hand_standardised_sum():
    """Given the batch's (mean m, std s) of the advantages in the rewards' units, the loss takes
    −Σ (A_s − m) / (s + 1e-8) log π(a_s|x_s) over its own samples; PopArt's σ, which divides A,
    cancels (float64, A written out by V-trace)."""
    torch.manual_seed(0)
    logits = torch.randn(4, 2, 3, dtype=torch.float64)
    u = Unrolls(target_logits=logits, behaviour_logits=logits, actions=torch.randint(0, 3, (4, 2)),
                rewards=torch.randn(4, 2).double(), discounts=torch.full((4, 2), 0.9, dtype=torch.float64),
                values=torch.randn(4, 2).double(), bootstrap_value=torch.randn(2).double())
    m, s = torch.tensor(0.3, dtype=torch.float64), torch.tensor(2.5, dtype=torch.float64)
    terms, _ = actor_critic_losses(u, LossConfig(normalize_advantages=True), advantage_stats=(m, s),
                                   value_scale=torch.tensor(7.0, dtype=torch.float64))
    a = vtrace(torch.zeros(4, 2, dtype=torch.float64), u.discounts, u.rewards, u.values, u.bootstrap_value
               ).pg_advantages.flatten().tolist()
    log_pi = F.log_softmax(logits, -1).gather(-1, u.actions[..., None]).flatten().tolist()
    want = -sum((x - 0.3) / (2.5 + 1e-8) * lp for x, lp in zip(a, log_pi))
    assert terms["pg_loss"].item() == pytest.approx(want, rel=1e-12)
    mean, std = advantage_statistics(torch.tensor(a, dtype=torch.float64))
    hand_mean = sum(a) / len(a)
    hand_std = math.sqrt(sum((x - hand_mean) ** 2 for x in a) / (len(a) - 1))
    assert (mean.item(), std.item()) == pytest.approx((hand_mean, hand_std), rel=1e-12)


def test_every_minibatch_standardises_with_the_batchs_statistics_from_before_its_updates(monkeypatch):
    """loss.advantage_statistics batch: each of the 2 × 3 updates gets the mean and std of the whole
    batch's advantages under the network before the first update (PopArt on, so they must be in
    the rewards' units, not σ's); minibatch: none, each minibatch uses its own."""
    import agents.learning.learner as learner
    seen = []
    real = learner.compute_loss

    def watched(*args, advantage_stats=None, **kwargs):
        seen.append(advantage_stats)
        return real(*args, advantage_stats=advantage_stats, **kwargs)

    monkeypatch.setattr(learner, "compute_loss", watched)
    flags = ("--loss.popart", "true", "--loss.normalize_advantages", "true", "--learner.epochs", "2",
             "--learner.minibatches", "3")
    cfg, model = make("lstm", *flags, "--loss.advantage_statistics", "batch")
    batch = fixed_batch(model)
    want = vtrace_by_hand(model, batch, cfg).pg_advantages.double()
    learn_from_batch(sgd_trainer(model, cfg), model, batch, cfg, torch.Generator().manual_seed(0))
    assert len(seen) == 6 and all(s is seen[0] for s in seen)
    assert (seen[0][0].item(), seen[0][1].item()) == pytest.approx((want.mean().item(), want.std().item()), rel=1e-5)
    seen.clear()
    cfg, model = make("lstm", *flags)
    learn_from_batch(sgd_trainer(model, cfg), model, batch, cfg, torch.Generator().manual_seed(0))
    assert seen == [None] * 6


@pytest.mark.parametrize("popart", ["false", "true"])
def test_one_minibatch_takes_the_same_step_under_either_statistics(popart):
    """With the whole batch as the one minibatch, its own statistics are the batch's: the same
    step, within float32's rounding. Not bit for bit: the batch's statistics come from a forward
    pass without gradients, which CPUs may run on other kernels (CI's did), and with PopArt the
    advantages are divided by σ first."""
    after = []
    for where in ("minibatch", "batch"):
        cfg, model = make("lstm", "--loss.popart", popart, "--loss.normalize_advantages", "true",
                          "--learner.epochs", "1", "--learner.minibatches", "1", "--loss.advantage_statistics", where)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        learn_from_batch(sgd_trainer(model, cfg), model, fixed_batch(model), cfg, torch.Generator().manual_seed(0))
        after.append(model.state_dict())
    assert not all(torch.equal(after[0][k], v) for k, v in before.items())
    for k in after[0]:
        torch.testing.assert_close(after[0][k], after[1][k], rtol=1e-5, atol=1e-6, msg=k)
