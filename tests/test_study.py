"""Issue 74's core study (launch/configs/study.yaml, docs/sweep.md): its grid, its trials at
memory.yaml's defaults without the per-env presets, the ranking launch/sweep.py writes from the
trials' logged curves, and the pinning of trials to CPUs of their own."""
from __future__ import annotations

import csv
import io
import math
import os
import subprocess
import sys
import threading

import pytest
import yaml

from agents.config import load_yaml
from agents.errors import ConfigError
from agents.learning.logger import Logger
from envs.suites import HELD_OUT_ENVS
from launch import sweep
from launch.entry import CONFIGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = os.path.join(CONFIGS, "study.yaml")
with open(os.path.join(CONFIGS, "memory.yaml")) as f:
    MEMORY_YAML = yaml.safe_load(f)


def test_the_study_is_eight_cores_on_ten_envs_with_two_seeds_each():
    cfg = sweep.load(["--config", STUDY])
    assert cfg.envs == [*HELD_OUT_ENVS, "bsuite/memory_len_30", "minigrid/MemoryS7"]
    assert cfg.cores == ["lstm", "gru", "lru", "delta", "gated_delta", "delta_product", "srwm", "mnm_p"]
    assert (cfg.seeds, cfg.total_steps, cfg.env_presets, cfg.train_flags) == ([0, 1], 500_000, False, [])
    assert (cfg.max_concurrent, cfg.pin_cpus, cfg.cpus_per_trial) == (2, [0, 1], 1)
    trials = sweep.grid(cfg)
    assert len(trials) == 10 * 8 * 2 == 160 and len({t.name for t in trials}) == 160


@pytest.mark.parametrize("env", ["bsuite/memory_len_30", "minigrid/MemoryS7"])
def test_a_study_trial_takes_memory_yaml_s_defaults_not_the_env_s_preset(env, tmp_path):
    cfg = sweep.load(["--config", STUDY])
    preset = MEMORY_YAML["presets"]["env"][env.split("/")[1]]

    def trial(**kwargs):
        return sweep.trial_config(sweep.Trial(env, "lstm", 1), cfg.total_steps, cfg.train_flags, str(tmp_path),
                                  **kwargs)

    study, with_preset = trial(env_presets=cfg.env_presets), trial()
    for section, key in [("actor", "unroll_length"), ("learner", "epochs"), ("loss", "entropy_cost"),
                         ("loss", "popart_zero_init")]:
        default = MEMORY_YAML[section][key]
        assert getattr(getattr(study, section), key) == default != preset[section][key], (section, key)
        assert getattr(getattr(with_preset, section), key) == preset[section][key]
    # the core is swapped with its own preset, which the study keeps
    assert study.core.hidden_size == MEMORY_YAML["presets"]["core"]["lstm"]["core"]["hidden_size"] == 128
    assert (study.run.total_steps, study.run.seed, study.run.run_dir) == (500_000, 1, str(tmp_path))


def test_a_sweep_directory_of_before_env_presets_resumes_with_them_on(tmp_path):
    sweep_dir = str(tmp_path / "sweep")
    argv = ["--dir", sweep_dir, "--envs", "[bsuite/memory_len_30]", "--cores", "[lstm]"]
    sweep.check_same_sweep(sweep.load(argv), sweep_dir)
    saved = os.path.join(sweep_dir, "sweep.yaml")
    old = {k: v for k, v in load_yaml(saved).items() if k != "env_presets"}  # as a sweep of before the key saved it
    with open(saved, "w") as f:
        yaml.safe_dump(old, f)
    sweep.check_same_sweep(sweep.load(argv), sweep_dir)
    with pytest.raises(ConfigError, match=r"another grid: env_presets \(was True, now False\)"):
        sweep.check_same_sweep(sweep.load([*argv, "--env_presets", "false"]), sweep_dir)


@pytest.mark.parametrize("argv,message", [
    (["--pin_cpus", "[0,1]"], "--max_concurrent: with --pin_cpus, at most one trial per pinned CPU"),
    (["--pin_cpus", "[0,1]", "--max_concurrent", "3"], "--max_concurrent: with --pin_cpus"),
    (["--pin_cpus", "[1,1]", "--max_concurrent", "1"], "--pin_cpus: a CPU is listed twice"),
])
def test_pinning_needs_a_cpu_per_trial_that_runs_at_once(argv, message):
    with pytest.raises(ConfigError, match=message):
        sweep.load(argv)
    assert sweep.load(["--pin_cpus", "[0,1]", "--max_concurrent", "2"]).pin_cpus == [0, 1]


def test_pinned_takes_a_cpu_no_other_block_holds_and_waits_for_one_to_free(tmp_path, monkeypatch):
    pins = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pins.append((pid, cpus)))
    lock_dir = str(tmp_path)
    with sweep.pinned([3, 5], lock_dir=lock_dir):
        with sweep.pinned([3, 5], lock_dir=lock_dir):
            assert pins == [(0, {3}), (0, {5})]
        with sweep.pinned([3, 5], lock_dir=lock_dir):  # 5 is free again, 3 is still held
            assert pins[-1] == (0, {5})
        # both held: another trial waits until the outer block lets 3 go
        entered = threading.Event()

        def another_trial() -> None:
            with sweep.pinned([3], lock_dir=lock_dir):
                entered.set()

        waiting = threading.Thread(target=another_trial)
        waiting.start()
        assert not entered.wait(1.5) and len(pins) == 3
    waiting.join(10)
    assert entered.is_set() and pins[-1] == (0, {3})
    with sweep.pinned([], lock_dir=lock_dir):  # no CPUs: no pinning
        assert len(pins) == 4


# ---------------------------------------------------------------- the ranking, on hand-made trials

K = 1000
STEPS = (99_840, 100_480, 249_600, 250_240, 499_840, 500_480)  # batches of 640 steps: around each checkpoint
# (env, its return range) -> core -> each seed's mean return at 100K, 250K and 500K
RETURNS = {
    ("bsuite/memory_len_30", (-1, 1)): {"lstm": [(0.0, 0.2, 0.6), (0.4, 0.6, 1.0)],
                                        "delta": [(1.0, 1.0, 1.0), (0.6, 1.0, 1.0)],
                                        "gru": [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0)]},
    ("popgym_more/NoisyPositionOnlyCartPoleEasy", (0, 1)): {"lstm": [(0.1, 0.3, 0.5), (0.3, 0.5, 0.7)],
                                                           "delta": [(0.5, 0.7, 0.9), (0.5, 0.9, 0.9)]},
    ("popgym_medium/CountRecallMedium", (-1, 1)): {"lstm": [(-1.0, -0.8, -0.6), (-0.6, -0.4, -0.2)],
                                                   "delta": [(-0.2, 0.0, 0.4), (-0.2, 0.4, 0.4)]},
}
# By hand: the seeds' means, mapped from the return range onto [0, 1], then the median of the 3 envs.
# lstm:  memory_len_30 (0.2, 0.4, 0.8) -> (0.6, 0.7, 0.9); CartPole (0.2, 0.4, 0.6) as they are;
#        CountRecall (-0.8, -0.6, -0.4) -> (0.1, 0.2, 0.3); medians 0.2, 0.4, 0.6.
# delta: (0.8, 1.0, 1.0) -> (0.9, 1.0, 1.0); (0.5, 0.8, 0.9); (-0.2, 0.2, 0.4) -> (0.4, 0.6, 0.7);
#        medians 0.5, 0.8, 0.9: delta first. gru has one env of the three: not ranked.
EXPECTED = [{"rank": 1, "core": "delta", "envs": 3, "100K": 0.5, "250K": 0.8, "500K": 0.9, "sps": 550.0},
            {"rank": 2, "core": "lstm", "envs": 3, "100K": 0.2, "250K": 0.4, "500K": 0.6, "sps": 1250.0}]
SPS = {"lstm": 1000.0, "delta": 300.0, "gru": 9000.0}  # + 100 per trial in order: lstm 1000..1500, delta 300..800


def fake_trials(root: str) -> list[dict]:
    """Finished trials as the sweep collects them, each with a log written by the logger: at the
    points just past each checkpoint the mean return is -1, which only a wrong reading would take."""
    results, n = [], {}
    for (env, _), by_core in RETURNS.items():
        for core, seeds in by_core.items():
            for seed, returns in enumerate(seeds):
                run_dir = os.path.join(root, f"{env.replace('/', '_')}-{core}-s{seed}")
                os.makedirs(run_dir)
                logger = Logger(run_dir, tensorboard=False, stream=io.StringIO())
                for i, step in enumerate(STEPS):
                    logger.log(step, {"mean_return": returns[i // 2] if i % 2 == 0 else -1.0, "sps": 1.0})
                logger.close()
                sps = SPS[core] + 100 * n.setdefault(core, 0)
                n[core] += 1
                results.append({"env": env, "core": core, "variant": "", "seed": seed, "total_steps": 500_000,
                                "steps": STEPS[-1], "sps": sps, "run_dir": run_dir})
    # a maze trial has no return range: it is left out (its run directory is not even read)
    return [*results, {"env": "maze", "core": "lstm", "variant": "", "seed": 0, "total_steps": 500_000,
                       "steps": 500_480, "sps": 1.0, "run_dir": os.path.join(root, "nowhere")}]


def test_the_study_ranks_the_cores_by_their_median_normalised_return(tmp_path):
    results = fake_trials(str(tmp_path / "runs"))
    checkpoints, rows = sweep.study_rows(results)
    assert checkpoints == [100 * K, 250 * K, 500 * K]
    by_env = [row.pop("by_env") for row in rows]
    assert rows == [pytest.approx(row) for row in EXPECTED]
    # each env's value at 500K, by hand above: the last of each env's triple
    assert by_env == [pytest.approx({"bsuite/memory_len_30": 1.0, "popgym_medium/CountRecallMedium": 0.7,
                                     "popgym_more/NoisyPositionOnlyCartPoleEasy": 0.9}),
                      pytest.approx({"bsuite/memory_len_30": 0.9, "popgym_medium/CountRecallMedium": 0.3,
                                     "popgym_more/NoisyPositionOnlyCartPoleEasy": 0.6})]

    sweep.write_study(results, str(tmp_path), "core_study")
    markdown = (tmp_path / "study.md").read_text()
    assert "| rank | core | envs | at 100K | at 250K | at 500K | steps/s |" in markdown
    assert "| 1 | delta | 3 | 0.50 | 0.80 | 0.90 | 550 |" in markdown
    assert "| 2 | lstm | 3 | 0.20 | 0.40 | 0.60 | 1,250 |" in markdown
    assert "Not on every env yet, so not ranked: gru." in markdown
    assert "\n".join(["| env | delta | lstm |", "| --- | ---: | ---: |",
                      "| bsuite/memory_len_30 | **1.00** | 0.90 |",
                      "| popgym_medium/CountRecallMedium | **0.70** | 0.30 |",
                      "| popgym_more/NoisyPositionOnlyCartPoleEasy | **0.90** | 0.60 |"]) in markdown
    with open(tmp_path / "study.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["core"], float(r["500K"]), float(r["sps"])) for r in table] == pytest.approx(
        [("delta", 0.9, 550.0), ("lstm", 0.6, 1250.0)])
    assert (tmp_path / "study.png").stat().st_size > 0


def test_the_per_env_table_bolds_the_best_cell_and_every_tie_as_printed():
    assert sweep.per_env_cells([0.5, 0.504, math.nan, -0.2]) == ["**0.50**", "**0.50**", "—", "-0.20"]
    assert sweep.per_env_cells([-0.3, -0.1]) == ["-0.30", "**-0.10**"]
    assert sweep.per_env_cells([math.nan]) == ["—"]


def test_the_checkpoints_are_those_short_of_the_budget_then_the_budget(tmp_path):
    results = fake_trials(str(tmp_path))
    for budget, checkpoints in [(2_000_000, [100 * K, 250 * K, 500 * K, 1000 * K, 2000 * K]),
                                (250_000, [100 * K, 250 * K]), (12_000, [12_000])]:
        assert sweep.study_rows([{**r, "total_steps": budget} for r in results])[0] == checkpoints
    assert sweep.study_rows([r for r in results if r["env"] == "maze"]) == ([], [])


@pytest.mark.slow
def test_a_tiny_study_trains_pinned_without_the_env_presets_and_writes_the_ranking(tmp_path):
    """Two memory envs, one core, one seed, 3,200 steps each, pinned to the CPU this test runs on."""
    pytest.importorskip("ray")
    sweep_dir = tmp_path / "study"
    cpu = min(os.sched_getaffinity(0))
    tiny = ["--actor.num_actors", "1", "--actor.envs_per_actor", "8", "--learner.batch_size", "8",
            "--core.hidden_size", "16", "--log.tensorboard", "false", "--log.print_every_s", "1000"]
    command = [sys.executable, "launch/sweep.py", "--config", STUDY, "--dir", str(sweep_dir),
               "--envs", "[bsuite/memory_len_30, popgym_more/HigherLowerEasy]", "--cores", "[lstm]",
               "--seeds", "[0]", "--total_steps", "3200", "--max_concurrent", "1", "--pin_cpus", f"[{cpu}]", "--",
               *tiny]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = load_yaml(str(sweep_dir / "runs" / "bsuite_memory_len_30-lstm-s0" / "config.yaml"))
    assert run["actor"]["unroll_length"] == MEMORY_YAML["actor"]["unroll_length"] == 20  # the preset's is 128
    assert (sweep_dir / f"cpu-{cpu}.lock").exists()
    assert "| 1 | lstm | 2 |" in (sweep_dir / "study.md").read_text()
    assert (sweep_dir / "study.png").stat().st_size > 0
