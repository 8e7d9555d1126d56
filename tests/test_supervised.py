"""The supervised trainer: every task trains a few steps with every core; the delta rule
learns a tiny setting-2 retrieval instance (issue 8)."""
import csv
import dataclasses
import json
import os

import pytest
import torch

from agents.config import section
from agents.errors import ConfigMismatchError
from agents.learning.supervised import Config, LogConfig, LoopConfig, ModelConfig, evaluate, train
from agents.learning.training import OptimConfig, RunConfig
from envs.tasks import make_task
from fastnet import CORES
from launch import supervised as launcher

torch.set_num_threads(1)

BLOCK = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "head_dim": 8, "ff_size": 16}
TINY_CORES = {
    "ff": {}, "lstm": {"hidden_size": 16}, "gru": {"hidden_size": 16}, "lru": {**BLOCK, "num_states": 8},
    "linear": BLOCK, "delta": BLOCK, "rec_delta": BLOCK,
    "delta_rnn": BLOCK, "delta_lstm": BLOCK, "gated_delta": BLOCK, "delta_product": BLOCK, "srwm": BLOCK,
    "mnm_g": {"controller_size": 16, "memory_size": 8, "num_heads": 1, "memory_layers": 2, "output_size": 16},
    "mnm_p": {"controller_size": 16, "memory_size": 8, "num_heads": 1, "memory_layers": 2, "output_size": 16},
}
SMALL = {"train": 16, "valid": 4, "test": 4}
TINY_TASKS = {
    "retrieval1": {"num_keys": 4},
    "retrieval2": {"num_keys": 4},
    "code3": {"num_statements": 6, "sizes": SMALL},
    "code5": {"num_statements": 6, "sizes": SMALL},
    "listops10": {"depth": 3, "sizes": SMALL},
    "listops15": {"depth": 4, "sizes": SMALL},
    "dict": {"num_pairs": 2, "seq_len": 2, "sizes": {"valid": 4, "test": 4}},
    "double_copy": {"length": 4, "sizes": {"valid": 4, "test": 4}},
    "priority_sort": {"num_inputs": 5, "num_outputs": 3, "sizes": {"valid": 4, "test": 4}},
    "lm": {"segment_length": 8},
}


def make_config(task, core, run_dir, core_options=None, model=None, optim=None, seed=0, **train_kw):
    """A Config built directly (not through the command line), as a script would."""
    return Config(task=section("task", task)(), core=section("core", core)(**(core_options or {})),
                  run=RunConfig(run_dir=str(run_dir), seed=seed, num_threads=0),
                  model=model or ModelConfig(),
                  optim=optim or OptimConfig(name="adam", lr=1e-3, eps=1e-8, grad_clip=0.0),
                  train=LoopConfig(**{"batch_size": 64, **train_kw}), log=LogConfig(every=1, tensorboard=False))


def tiny_config(task, core, run_dir, **train_kw):
    return make_config(task, core, run_dir, TINY_CORES[core], ModelConfig(kind="stack", embedding_size=8),
                       OptimConfig(name="adam", lr=1e-3, eps=1e-8, warmup_steps=2, grad_clip=1.0),
                       **{"batch_size": 4, "max_steps": 2, "eval_every": 2, "eval_batch_size": 8,
                          "checkpoint_every": 0, **train_kw})


def tiny_task(name, tmp_path):
    options = dict(TINY_TASKS[name])
    if name == "lm":
        from tests.test_tasks import write_corpus
        options["path"] = write_corpus(tmp_path / "corpus.txt", lines=60)
    return make_task(name, seed=0, **options)


@pytest.mark.parametrize("core", list(CORES))
@pytest.mark.parametrize("task_name", list(TINY_TASKS))
def test_every_task_trains_with_every_core(task_name, core, tmp_path):
    task = tiny_task(task_name, tmp_path)
    cfg = tiny_config(task_name, core, tmp_path / "run")
    result = train(cfg, task=task, quiet=True)
    assert result["steps"] == 2
    for split in ("valid", "test"):
        for key, value in result[split].items():
            assert value == value and abs(value) != float("inf"), (split, key)
    expected = {"mse": "mse", "ce": "seq_acc", "bce": "seq_acc"}[task.spec.loss]
    assert expected in result["test"]
    if task_name == "lm":
        assert "ppl" in result["test"]
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt")
    assert os.path.exists(tmp_path / "run" / "logs.csv")
    if core.startswith("mnm"):  # the meta loss enters training and the logs
        with open(tmp_path / "run" / "logs.csv") as f:
            assert "train/aux_meta" in f.readline()


@pytest.mark.parametrize("core", ["linear", "delta"])
def test_retrieval_memory_model(core, tmp_path):
    cfg = make_config("retrieval2", core, tmp_path, {"feature_map": "dpfp", "normalisation": "sum"},
                      ModelConfig(kind="auto", embedding_size=8, key_size=8), max_steps=2, eval_every=2,
                      checkpoint_every=0)
    result = train(cfg, task=make_task("retrieval2", num_keys=4), quiet=True)
    assert result["model"] == "retrieval_memory" and result["steps"] == 2


@pytest.mark.parametrize("core,options", [("gated_delta", {}), ("delta_product", {"negative_eigenvalues": True})])
def test_householder_retrieval_memory_trains(core, options, tmp_path):
    cfg = make_config("retrieval1", core, tmp_path, options, ModelConfig(kind="auto", embedding_size=8, key_size=8),
                      max_steps=2, eval_every=2, checkpoint_every=0)
    result = train(cfg, task=make_task("retrieval1", num_keys=4), quiet=True)
    assert result["model"] == "retrieval_memory" and result["steps"] == 2


def test_householder_retrieval_memory_reads_a_delta_rule_memory():
    """Ungated, n_h = 2: the read is W q after two delta writes per pair with L2 keys, value v each."""
    from agents.learning.supervised import HouseholderRetrievalMemory

    torch.manual_seed(0)
    task = make_task("retrieval1", num_keys=5)
    model = HouseholderRetrievalMemory(task, 6, 4, 2, False, False)
    x = torch.tensor([[[1, 2]], [[3, 0]], [[0, 4]], [[3, 0]]])  # three (key, value) pairs, then the query
    out, _, _ = model(x, (), torch.zeros(4, 1, dtype=torch.bool))
    W = torch.zeros(5, 4)
    for t in range(3):
        v = torch.nn.functional.one_hot(x[t, 0, 1], 6)[:5].float()
        kv = torch.cat([model.embed(x[t, 0, 0]), v])
        keys = torch.nn.functional.normalize(model.W_K(kv).view(2, 4), dim=-1)
        betas = torch.sigmoid(model.W_beta(kv))
        for j in range(2):
            W = W + betas[j] * torch.outer(v - W @ keys[j], keys[j])
    q = torch.nn.functional.normalize(model.W_Q(model.embed(x[3, 0, 0])), dim=-1)
    torch.testing.assert_close(out[-1, 0], W @ q)


def test_softmax_attention_reference(tmp_path):
    cfg = make_config("retrieval1", "linear", tmp_path,
                      model=ModelConfig(kind="retrieval_memory", memory="softmax", embedding_size=8, key_size=8),
                      max_steps=2, eval_every=2, checkpoint_every=0)
    assert train(cfg, task=make_task("retrieval1", num_keys=4), quiet=True)["steps"] == 2


def test_delta_rule_learns_tiny_setting_2(tmp_path):
    """S=4, L=8: the delta rule's evaluation loss falls well below its initial value (CPU, < 1 min)."""
    task = make_task("retrieval2", seed=0, num_keys=4)
    cfg = make_config("retrieval2", "delta", tmp_path, {"feature_map": "dpfp", "dpfp_nu": 1, "normalisation": "sum"},
                      ModelConfig(kind="auto", embedding_size=64, key_size=64), batch_size=32, max_steps=400,
                      eval_every=50, eval_batch_size=1024, checkpoint_every=0, target_loss=0.001, max_time_s=50)
    result = train(cfg, task=task, quiet=True)
    initial = result["history"][0]["loss"]
    from agents.learning.supervised import build_model
    torch.manual_seed(0)
    untrained = evaluate(build_model(cfg, task), task, "valid", 1024, "cpu")["loss"]
    assert result["valid"]["loss"] < 0.1 * untrained, (untrained, initial, result["valid"])
    assert result["valid"]["loss"] < 0.02


def test_early_stopping_and_resume(tmp_path):
    task = make_task("retrieval2", num_keys=4)
    cfg = tiny_config("retrieval2", "delta", tmp_path, max_steps=6, eval_every=2, checkpoint_every=2)
    first = train(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=4)), task=task, quiet=True)
    assert first["steps"] == 4
    second = train(cfg, task=task, quiet=True)  # resumes from the step-4 checkpoint
    assert second["steps"] == 6
    with open(tmp_path / "results.json") as f:
        assert json.load(f)["steps"] == 6
    stopped = train(dataclasses.replace(cfg, run=RunConfig(run_dir=str(tmp_path / "p")),
                                        train=dataclasses.replace(cfg.train, max_steps=100, patience=1,
                                                                  target_loss=1e9)),
                    task=task, quiet=True)
    assert stopped["stop_reason"] == "target_loss" and stopped["steps"] == 2
    frozen = dataclasses.replace(cfg, run=RunConfig(run_dir=str(tmp_path / "q")),
                                 optim=dataclasses.replace(cfg.optim, lr=1e-30),
                                 train=dataclasses.replace(cfg.train, max_steps=100, patience=2))
    stopped = train(frozen, task=task, quiet=True)  # no progress at lr ~0: stops after `patience` steps
    assert stopped["stop_reason"] == "patience" and stopped["steps"] == 4


def test_running_a_finished_run_again_does_nothing(tmp_path, capsys):
    """The same command again appends nothing to logs.csv and says the run is done; a raised step
    budget trains on; a run stopped early (target_loss) stays done."""
    task = make_task("retrieval2", num_keys=4)
    cfg = tiny_config("retrieval2", "delta", tmp_path, max_steps=4, eval_every=2, checkpoint_every=2)
    first = train(cfg, task=task)
    logs = (tmp_path / "logs.csv").read_bytes()
    results = (tmp_path / "results.json").read_bytes()
    capsys.readouterr()
    again = train(cfg, task=task)
    out = capsys.readouterr().out
    assert "is already done (max_steps at step 4" in out
    assert "raise --train.max_steps" in out and "--run.resume false" in out  # both ways on, in one place
    assert (tmp_path / "logs.csv").read_bytes() == logs and (tmp_path / "results.json").read_bytes() == results
    assert again["test"] == first["test"]
    longer = train(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=6)), task=task, quiet=True)
    assert longer["steps"] == 6 and (tmp_path / "logs.csv").read_bytes().startswith(logs)
    early = dataclasses.replace(cfg, run=RunConfig(run_dir=str(tmp_path / "p")),
                                train=dataclasses.replace(cfg.train, max_steps=100, target_loss=1e9))
    assert train(early, task=task, quiet=True)["stop_reason"] == "target_loss"
    logs = (tmp_path / "p" / "logs.csv").read_bytes()
    assert train(early, task=task, quiet=True)["steps"] == 2 and (tmp_path / "p" / "logs.csv").read_bytes() == logs


def test_select_metric_accuracy(tmp_path):
    task = tiny_task("listops10", tmp_path)
    cfg = tiny_config("listops10", "lstm", tmp_path, max_steps=4, eval_every=2, select_metric="seq_acc")
    result = train(cfg, task=task, quiet=True)
    best = max(h["seq_acc"] for h in result["history"])
    assert result["valid"]["seq_acc"] == pytest.approx(best)


def test_launcher_defaults_and_overrides(tmp_path):
    cfg = launcher.load(["--task", "retrieval2", "--core", "delta"])
    assert cfg.core.feature_map == "dpfp" and cfg.train.batch_size == 32
    assert cfg.train.target_loss == 0.001 and cfg.train.patience == 1000
    cfg = launcher.load(["--task", "code3", "--core", "lstm"])
    assert cfg.optim.lr == 3e-3 and cfg.optim.grad_clip == 0.1
    cfg = launcher.load(["--task", "code3", "--core", "lstm", "--optim.lr", "1e-2", "--core.hidden_size", "32"])
    assert cfg.optim.lr == 1e-2 and cfg.core.hidden_size == 32
    result = launcher.main(["--task", "retrieval2", "--core", "delta", "--task.num_keys", "4",
                            "--train.max_steps", "2", "--train.eval_every", "2", "--log.tensorboard", "false",
                            "--run_dir", str(tmp_path / "launch")])
    assert result["steps"] == 2 and os.path.exists(tmp_path / "launch" / "config.yaml")


@pytest.mark.parametrize("rule", ["sum", "delta"])
def test_retrieval_memory_matches_explicit_writes(rule):
    """The retrieval memory equals writing W step by step and reading W φ(q) at the query."""
    from agents.learning.supervised import RetrievalMemory
    from fastnet.feature_maps import dpfp, sum_normalise
    torch.manual_seed(0)
    task = make_task("retrieval2", num_keys=5)
    model = RetrievalMemory(task, 8, 6, "fast_weight", rule, "dpfp", "sum", 1, 4)
    batch = next(task.train_batches(3))
    out, _, _ = model(batch.x, (), None)
    for b in range(3):
        W = torch.zeros(5, 12)
        x = batch.x[:, b]
        for t in range(x.shape[0] - 1):
            v = torch.nn.functional.one_hot(x[t, 1], 5).float()
            kv = torch.cat([model.embed(x[t, 0]), v])
            k = sum_normalise(dpfp(model.W_K(kv)))
            beta = torch.sigmoid(model.W_beta(kv)) if rule == "delta" else 1.0
            W = W + beta * torch.outer(v - (W @ k if rule == "delta" else 0), k)
        q = sum_normalise(dpfp(model.W_Q(model.embed(x[-1, 0]))))
        torch.testing.assert_close(out[-1, b], W @ q, rtol=1e-4, atol=1e-5)
        assert not out[:-1, b].any()


def test_gated_retrieval_memory_starts_with_an_open_gate():
    """One head, no spread of rates: the decay starts at the slow end of Mamba2's range (α ≈ 0.999 per pair),
    so a new memory keeps most of S = 200 pairs instead of the last few."""
    from agents.learning.supervised import HouseholderRetrievalMemory

    torch.manual_seed(0)
    task = make_task("retrieval1", num_keys=200)
    model = HouseholderRetrievalMemory(task, 64, 128, 1, True, False)
    kv, _, _ = model.written_pairs(next(task.train_batches(8)).x)
    alpha = torch.exp(-model.A_log.exp() * torch.nn.functional.softplus(model.W_a(kv)))
    assert 0.995 < alpha.mean() < 1 and alpha.prod(0).mean() > 0.5


@pytest.mark.parametrize("memory", ["softmax", "sum", "delta", "gated_delta", "delta_product"])
def test_retrieval_memory_writes_each_distinct_sequence_once(memory):
    """An evaluation batch (every key of a sequence asked in turn) reads the same as each column alone."""
    from agents.learning.supervised import HouseholderRetrievalMemory, RetrievalMemory

    torch.manual_seed(0)
    task = make_task("retrieval1", num_keys=6)
    if memory in ("gated_delta", "delta_product"):
        gated = memory == "gated_delta"
        model = HouseholderRetrievalMemory(task, 8, 6, 1 if gated else 2, gated, False)
    else:
        model = RetrievalMemory(task, 8, 6, "softmax" if memory == "softmax" else "fast_weight",
                                "sum" if memory == "softmax" else memory, "dpfp", "sum", 1, 4)
    batch = next(task.eval_batches("valid", 15))  # two and a half sequences' worth of queries
    assert len(torch.unique(batch.x[:-1].transpose(0, 1).flatten(1), dim=0)) == 3
    out, _, _ = model(batch.x, (), None)
    for b in range(batch.x.shape[1]):
        alone, _, _ = model(batch.x[:, b:b + 1], (), None)
        torch.testing.assert_close(out[:, b], alone[:, 0])


def test_time_budget_scores_the_last_model(tmp_path):
    """A run stopped by max_time_s between evaluations still evaluates its last model."""
    task = make_task("retrieval2", num_keys=4)
    cfg = tiny_config("retrieval2", "delta", tmp_path, max_steps=0, eval_every=1000, checkpoint_every=0)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_time_s=1e-3))
    result = train(cfg, task=task, quiet=True)
    assert result["stop_reason"] == "max_time_s"
    assert result["steps"] >= 1 and [h["step"] for h in result["history"]] == [result["steps"]]
    assert result["best_step"] == result["steps"]


@pytest.mark.parametrize("grad_clip", [0.0, 1e-6])
def test_gradient_norm_is_logged_with_and_without_clipping(grad_clip, tmp_path):
    """grad_norm is the norm before clipping, so it is logged even when clipping is off."""
    cfg = tiny_config("retrieval2", "delta", tmp_path)
    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, grad_clip=grad_clip))
    train(cfg, task=make_task("retrieval2", num_keys=4), quiet=True)
    with open(tmp_path / "logs.csv") as f:
        rows = list(csv.DictReader(f))
    norms = [float(r["grad_norm"]) for r in rows if r.get("grad_norm")]
    assert len(norms) == 2 and all(n > 1e-4 for n in norms)


def test_resume_refuses_a_checkpoint_of_other_settings_and_keeps_the_run(tmp_path):
    """Same run_dir, another core or lr: a clear error naming the settings, and the old run's
    files untouched. A longer budget is a legitimate resume."""
    task = make_task("retrieval2", num_keys=4)
    cfg = tiny_config("retrieval2", "delta", tmp_path, max_steps=2, eval_every=2, checkpoint_every=2)
    train(cfg, task=task, quiet=True)
    files = {name: (tmp_path / name).read_bytes() for name in ("config.yaml", "checkpoint.pt", "logs.csv")}
    other_core = dataclasses.replace(cfg, core=section("core", "linear")(**TINY_CORES["linear"]))
    other_lr = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=0.5))
    for changed, key in ((other_core, "core.name 'delta' -> 'linear'"), (other_lr, "optim.lr 0.001 -> 0.5")):
        with pytest.raises(ConfigMismatchError, match=key):
            train(changed, task=task, quiet=True)
        assert {name: (tmp_path / name).read_bytes() for name in files} == files
    longer = train(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=4)), task=task, quiet=True)
    assert longer["steps"] == 4


def test_resume_scores_the_checkpoints_best_model_not_a_later_one(tmp_path):
    """A best_model.pt written after the last checkpoint (by a run then killed) belongs to a
    discarded future: the resumed run restores the checkpoint's best model and scores it."""
    task = make_task("retrieval2", num_keys=4)
    cfg = tiny_config("retrieval2", "delta", tmp_path, max_steps=2, eval_every=2, checkpoint_every=2)
    first = train(cfg, task=task, quiet=True)
    payload = torch.load(tmp_path / "checkpoint.pt")
    del payload["result"]  # as if killed after this checkpoint, before the run was done
    torch.save(payload, tmp_path / "checkpoint.pt")
    best = torch.load(tmp_path / "best_model.pt")
    torch.save({k: torch.randn_like(v) if v.is_floating_point() else v for k, v in best.items()},
               tmp_path / "best_model.pt")
    again = train(cfg, task=task, quiet=True)  # at max_steps already: restores and scores only
    restored = torch.load(tmp_path / "best_model.pt")
    assert all(torch.equal(restored[k], best[k]) for k in best)
    assert again["test"] == pytest.approx(first["test"])


def test_default_run_dir_names_the_task_and_core():
    cfg = Config(task=section("task", "code3")(), core=section("core", "rec_delta")())
    assert cfg.resolved_run_dir() == "runs/supervised/code3-rec_delta"
