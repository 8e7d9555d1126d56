"""The shared trainer skeleton: optimiser schedule, the non-finite guard, device resolution."""
from __future__ import annotations

import csv
import math

import pytest
import torch

import agents.learning.learner
from agents.errors import ConfigError
from agents.learning.checkpoint import read_checkpoint
from agents.learning.training import NonFiniteError, OptimConfig, Trainer, build_optimizer, resolve_device
from launch import maze


def linear_trainer(tmp_path, max_nonfinite_steps=3):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    cfg = OptimConfig(name="adam", lr=0.1, max_nonfinite_steps=max_nonfinite_steps)
    return model, Trainer(model, cfg, total_updates=100, run_dir=str(tmp_path), config=cfg)


def test_nonfinite_updates_are_skipped_and_too_many_in_a_row_stop(tmp_path):
    model, trainer = linear_trainer(tmp_path)
    x = torch.ones(4, 3)

    def loss(scale):
        return lambda: (((model(x) * scale) ** 2).mean(), {})

    def params():
        return [p.detach().clone() for p in model.parameters()]

    before = params()
    assert trainer.update(loss(1.0))["nonfinite"] == 0
    assert not all(torch.equal(a, b) for a, b in zip(before, params()))
    for bad in (math.nan, math.inf):  # two bad updates: skipped, weights and lr schedule untouched
        before, lr = params(), trainer.scheduler.get_last_lr()
        stats = trainer.update(loss(bad))
        assert stats["nonfinite"] == 1 and all(torch.equal(a, b) for a, b in zip(before, params()))
        assert trainer.scheduler.get_last_lr() == lr
    trainer.update(loss(1.0))  # a good one resets the count
    trainer.update(loss(math.nan))
    trainer.update(loss(math.nan))
    with pytest.raises(NonFiniteError, match="NaN or inf in 3 updates in a row"):
        trainer.update(loss(math.nan))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def scheduled_lrs(cfg: OptimConfig, *, total_updates: int, updates: int) -> list[float]:
    """The lr of each of the first ``updates`` updates under build_optimizer's schedule."""
    params = [torch.nn.Parameter(torch.zeros(1))]
    opt, sched = build_optimizer(params, cfg, total_updates)
    lrs = []
    for _ in range(updates):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return lrs


def test_schedule_warms_up_then_decays_linearly():
    lrs = scheduled_lrs(OptimConfig(name="adam", lr=1.0, warmup_steps=4, lr_decay=True), total_updates=10, updates=11)
    # lr at the warm-up's last update, then 1 - (u - 4) / (10 - 4) down to 0 at the budget's end
    assert lrs == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0])


def test_schedule_decays_to_its_floor():
    """lr_final 0.4: from lr after the warm-up down to 0.4 x lr at the budget's end, then held."""
    lrs = scheduled_lrs(OptimConfig(name="adam", lr=2.0, warmup_steps=2, lr_decay=True, lr_final=0.4),
                        total_updates=8, updates=10)
    # after the warm-up, 2 x (1 - 0.6 (u - 2) / 6): 0.2 lower per update, to 0.8 at update 8 and beyond
    assert lrs == pytest.approx([1.0, 2.0, 2.0, 1.8, 1.6, 1.4, 1.2, 1.0, 0.8, 0.8])


@pytest.mark.parametrize("name,step", [("adam", "fused"), ("rmsprop", "foreach")])
def test_a_resume_with_a_longer_budget_steps_at_the_stretched_schedules_lr(name, step, tmp_path):
    """The issue-44 case: a run that decayed its lr to 0 over 10 updates, resumed with a budget of
    20, takes its next step at lr x (1 - 10/20), logs that lr, and moves its weights; and with the
    optimiser step of a fresh run (Adam fused, RMSProp foreach), whatever the checkpoint held."""
    cfg = OptimConfig(name=name, lr=0.1, lr_decay=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    first = Trainer(model, cfg, total_updates=10, run_dir=str(tmp_path), config=cfg)

    def loss():
        return (model(torch.ones(4, 3)) ** 2).mean(), {}

    logged = [first.update(loss)["lr"] for _ in range(10)]
    assert logged == pytest.approx([0.1 * (1 - u / 10) for u in range(10)])
    first.optimizer.param_groups[0].update(foreach=None, fused=None)  # as a checkpoint of an older version holds it
    first.save({"step": 10})
    resumed = Trainer(model, cfg, total_updates=20, run_dir=str(tmp_path), config=cfg)
    assert resumed.resume(torch.device("cpu")) is not None
    assert resumed.optimizer.param_groups[0][step] is True
    before = [p.detach().clone() for p in model.parameters()]
    assert resumed.update(loss)["lr"] == pytest.approx(0.05)
    assert not any(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert resumed.update(loss)["lr"] == pytest.approx(0.1 * (1 - 11 / 20))


def test_a_nan_loss_mid_run_stops_the_run_and_keeps_a_finite_checkpoint(tmp_path, monkeypatch, capsys):
    """The loss turns NaN after 6 updates: the run skips those updates, stops after
    max_nonfinite_steps of them with one line and exit code 1, and its checkpoint is finite."""
    calls = {"n": 0}
    real = agents.learning.learner.compute_loss

    def poisoned(*args, **kwargs):
        loss, terms = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * math.nan if calls["n"] > 6 else loss), terms

    monkeypatch.setattr(agents.learning.learner, "compute_loss", poisoned)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        maze.main(["--core", "lstm", "--core.hidden_size", "16", "--num_actors", "1", "--actor.envs_per_actor", "8",
                   "--learner.batch_size", "8", "--actor.unroll_length", "5", "--total_steps", "100000",
                   "--checkpoint.interval_minutes", "1e-9", "--optim.max_nonfinite_steps", "3",
                   "--log.tensorboard", "false", "--run_dir", str(run_dir)])
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NaN or inf in 3 updates in a row" in err[0]
    payload = read_checkpoint(str(run_dir / "checkpoint.pt"))
    assert all(torch.isfinite(v).all() for v in payload["model"].values())
    with open(run_dir / "logs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(float(r["nonfinite"])) for r in rows] == [0] * 6 + [1] * 2  # the third stopped the run
    assert payload["counters"]["step"] == int(rows[-1]["step"])
    resumed = maze.load(["--core", "lstm", "--core.hidden_size", "16", "--run_dir", str(run_dir)])
    assert resumed.core.hidden_size == 16


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_missing_and_unknown_devices_are_clear_errors():
    with pytest.raises(ConfigError, match="CUDA is not available.*--device cpu"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    assert resolve_device("cpu").type == "cpu" and resolve_device("auto").type == "cpu"
