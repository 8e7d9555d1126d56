"""launch/sweep.py: a grid of training runs on Ray Tune, resumed after a kill, and its results tables."""
from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.errors import ConfigError
from agents.learning.checkpoint import checkpoints, read_checkpoint
from agents.learning.logger import CSV_NAME, read_csv
from launch import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--actor.num_actors", "1", "--actor.envs_per_actor", "8", "--learner.batch_size", "8",
        "--actor.unroll_length", "10", "--env.episode_length", "20", "--core.hidden_size", "16",
        "--log.tensorboard", "false", "--log.print_every_s", "1000",
        "--checkpoint.interval_minutes", "0.002"]  # a checkpoint every few updates, to resume from
TOTAL_STEPS = 12_000  # a few seconds per trial: long enough to kill the second one halfway


def sweep_command(sweep_dir: str) -> list[str]:
    """Two trials (one core, two seeds) on a tiny maze, one at a time, on a Ray started for the sweep."""
    return [sys.executable, "launch/sweep.py", "--dir", sweep_dir, "--envs", "[maze]", "--cores", "[lstm]",
            "--seeds", "[0,1]", "--total_steps", str(TOTAL_STEPS), "--cpus_per_trial", "1", "--max_concurrent", "1",
            "--ray_address", "local", "--", *TINY]


def session_processes(sid: int) -> list[int]:
    """The processes of session ``sid`` (the sweep's, its Ray processes included)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def kill_session(sid: int, timeout: float = 30.0) -> None:
    """SIGKILL every process of session ``sid`` until none is left (Ray's workers have process groups of
    their own, so the sweep's group alone is not enough)."""
    deadline = time.time() + timeout
    while pids := session_processes(sid):
        assert time.time() < deadline, f"processes of the killed sweep still run: {pids}"
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def left_running(sid: int, timeout: float = 15.0) -> list[int]:
    """The processes of session ``sid`` still running after up to ``timeout`` seconds."""
    deadline = time.time() + timeout
    while (pids := session_processes(sid)) and time.time() < deadline:
        time.sleep(0.2)
    return pids


def wait_for(condition, process: subprocess.Popen, log_path: str, timeout: float = 150.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        if process.poll() is not None or time.time() > deadline:
            kill_session(process.pid)
            with open(log_path) as f:
                pytest.fail(f"the sweep ended or stalled (exit code {process.poll()}) before the moment to kill it:\n"
                            f"{f.read()[-3000:]}")
        time.sleep(0.05)


@pytest.mark.slow  # 40-65 s: two Ray starts and three trials
def test_killed_sweep_resumes_without_redoing_finished_trials_and_writes_the_tables(tmp_path):
    pytest.importorskip("ray")
    sweep_dir = str(tmp_path / "sweep")
    runs = {seed: os.path.join(sweep_dir, "runs", f"maze-lstm-s{seed}") for seed in (0, 1)}

    def done(seed: int) -> bool:
        return os.path.exists(os.path.join(runs[seed], sweep.SUMMARY_NAME))

    def halfway(seed: int) -> bool:
        return os.path.exists(os.path.join(runs[seed], "checkpoint.pt")) and not done(seed)

    log_path = str(tmp_path / "first.log")
    with open(log_path, "w") as log:
        first = subprocess.Popen(sweep_command(sweep_dir), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        wait_for(lambda: (done(0) and halfway(1)) or (done(1) and halfway(0)), first, log_path)
    finally:
        kill_session(first.pid)
        first.wait()
    finished, killed = (0, 1) if done(0) else (1, 0)
    assert not done(killed)

    def snapshot(seed: int) -> dict[str, bytes | int]:
        paths = {name: os.path.join(runs[seed], name) for name in (CSV_NAME, "checkpoint.pt", sweep.SUMMARY_NAME)}
        return {**{name: Path(path).read_bytes() for name, path in paths.items()},
                "checkpoint mtime": os.stat(paths["checkpoint.pt"]).st_mtime_ns}

    before = snapshot(finished)
    resume_step = read_checkpoint(checkpoints(runs[killed])[0])["counters"]["step"]
    assert 0 < resume_step < TOTAL_STEPS
    lines = Path(runs[killed], CSV_NAME).read_text().splitlines()
    kept = [lines[0]] + [line for line in lines[1:] if int(line.split(",")[0]) <= resume_step]

    second = subprocess.Popen(sweep_command(sweep_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        out, err = second.communicate(timeout=150)
        stray = left_running(second.pid)  # ray.shutdown() stops the Ray processes the sweep started
    finally:
        kill_session(second.pid)
        second.wait()
    assert second.returncode == 0, out[-3000:] + err[-3000:]
    assert f"resuming the sweep in {sweep_dir}" in out
    assert stray == [], "Ray processes outlive the sweep"

    # The finished trial was not trained again: a run of train() would at least rewrite its checkpoint.
    assert snapshot(finished) == before
    # The killed trial resumed from its checkpoint: the log rows up to it are kept byte for byte.
    resumed = Path(runs[killed], CSV_NAME).read_text().splitlines()
    assert resumed[:len(kept)] == kept and len(resumed) > len(kept)
    steps = [row["step"] for row in read_csv(os.path.join(runs[killed], CSV_NAME))]
    assert steps == sorted(set(steps)) and steps[-1] >= TOTAL_STEPS

    with open(os.path.join(sweep_dir, "results.csv")) as f:
        results = list(csv.DictReader(f))
    assert [(r["env"], r["core"], r["seed"]) for r in results] == [("maze", "lstm", "0"), ("maze", "lstm", "1")]
    for r in results:
        log = read_csv(os.path.join(r["run_dir"], CSV_NAME))
        assert int(r["steps"]) == log[-1]["step"] >= TOTAL_STEPS
        assert float(r["mean_return"]) == pytest.approx(log[-1]["mean_return"])
        sps = (log[-1]["step"] - log[0]["step"]) / (log[-1]["time"] - log[0]["time"])  # over both parts of a run
        assert float(r["sps"]) == pytest.approx(sps) and sps > 0
    returns = [float(r["mean_return"]) for r in results]
    mean, std = statistics.fmean(returns), statistics.stdev(returns)
    digits = 0 if abs(mean) >= 100 else 1 if abs(mean) >= 10 else 2  # as the papers print scores
    with open(os.path.join(sweep_dir, "results.md")) as f:
        markdown = f.read()
    assert "| Score (mean return) | lstm |" in markdown
    assert f"| maze | {mean:,.{digits}f} ± {std:,.{digits}f} |" in markdown
    assert os.path.getsize(os.path.join(sweep_dir, "curves-maze.png")) > 0


def test_finished_trials_carried_to_a_new_machine_are_not_trained_again(tmp_path):
    """docs/sweep.md's carry-over: a sweep directory holding only each finished trial's
    summary.json and logs.csv (no Tune experiment, no checkpoint) finishes without training, and
    its tables are made from the carried files."""
    pytest.importorskip("ray")
    sweep_dir = str(tmp_path / "sweep")
    carried = {0: 0.25, 1: 0.75}  # a seed's made-up final mean return: no training would reach these exactly
    for seed, mean_return in carried.items():
        run_dir = os.path.join(sweep_dir, "runs", f"maze-lstm-s{seed}")
        os.makedirs(run_dir)
        rows = [(6_000, 3.0, 2_000.0, mean_return / 2), (TOTAL_STEPS, 6.0, 2_000.0, mean_return)]
        lines = ["step,time,sps,mean_return", *(",".join(map(str, row)) for row in rows)]
        Path(run_dir, CSV_NAME).write_text("\n".join(lines) + "\n")
        summary = {"env": "maze", "core": "lstm", "variant": "", "seed": seed, "total_steps": TOTAL_STEPS,
                   "steps": TOTAL_STEPS, "episodes": 10, "mean_return": mean_return, "metric": "mean return",
                   "score": mean_return, "sps": 2_000.0}
        Path(run_dir, sweep.SUMMARY_NAME).write_text(json.dumps(summary))
    process = subprocess.run(sweep_command(sweep_dir), cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert "resuming" not in process.stdout  # a new Tune experiment, over the carried run directories
    for seed in carried:
        assert not checkpoints(os.path.join(sweep_dir, "runs", f"maze-lstm-s{seed}"))  # nothing trained
    with open(os.path.join(sweep_dir, "results.csv")) as f:
        results = list(csv.DictReader(f))
    assert [(r["seed"], float(r["mean_return"])) for r in results] == [("0", 0.25), ("1", 0.75)]


def atari_result(game: str, core: str, seed: int, mean_return: float) -> dict:
    return {"env": game, "core": core, "seed": seed, "total_steps": 50_000_000, "steps": 50_001_920,
            "mean_return": mean_return, "sps": 1000.0 + seed, "run_dir": f"runs/{game}-{core}-s{seed}"}


def test_atari_table_has_the_papers_layout():
    results = [atari_result(game, core, seed, score)
               for game, base in (("Pong", 20.0), ("Breakout", 300.0), ("Alien", 2000.0))
               for core in ("gated_delta", "delta", "lstm") for seed, score in ((0, base), (1, base + 2))]
    markdown = sweep.results_markdown(results, "atari")
    table = markdown.split("## Atari")[1].split("\n\n")[1].splitlines()
    # The papers' games in their order (Alien before Pong), then the others; their cores' names and order.
    assert table[0] == "| Game | LSTM | Delta Net | gated_delta |"
    assert [row.split(" | ")[0] for row in table[2:]] == ["| Alien", "| Pong", "| Breakout"]
    assert table[2] == "| Alien | 2,001 ± 1 | 2,001 ± 1 | 2,001 ± 1 |"
    assert table[3] == "| Pong | 21.0 ± 1.4 | 21.0 ± 1.4 | 21.0 ± 1.4 |"
    assert "Table 9 of the recurrent-FWP appendix" in markdown
    paper = markdown.split("The papers' Table 9")[1]
    assert "| Alien | 846 ± 81 | 4,704 ± 452 |  |" in paper and "| Breakout |  |  |  |" in paper
    near = [{**r, "total_steps": 50_400_000} for r in results]  # within evaluate's 1%: still Table 9
    assert "The papers' Table 9" in sweep.results_markdown(near, "atari")
    assert "The papers' Table" not in sweep.results_markdown([{**r, "total_steps": 51_000_000} for r in results], "a")


def test_flags_after_the_separator_go_to_every_trial(tmp_path):
    cfg = sweep.load(["--envs", "[maze,ms_pacman]", "--", "--actor.num_actors", "1", "--core.hidden_size", "16"])
    assert cfg.envs == ["maze", "MsPacman"]
    assert cfg.train_flags == ["--actor.num_actors", "1", "--core.hidden_size", "16"]
    trial = sweep.trial_config(sweep.Trial("MsPacman", "lstm", 3), 1000, cfg.train_flags, str(tmp_path))
    assert (trial.env.game, trial.core.hidden_size, trial.run.seed, trial.run.total_steps) == ("MsPacman", 16, 3, 1000)


@pytest.mark.parametrize("argv,message", [
    (["--cores", "[lstm,lsmt]"], "--cores: expected one of"),
    (["--seeds", "[0,0]"], "--seeds: a value is listed twice"),
    (["--", "--actor.num_actor", "2"], "unknown option --actor.num_actor"),
])
def test_bad_settings_stop_the_sweep_before_it_writes_anything(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        sweep.main(["--dir", str(tmp_path / "sweep"), *argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "sweep")


def test_without_ray_it_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(SystemExit) as stop:
        sweep.main(["--dir", str(tmp_path / "sweep"), "--cores", "[lstm]", "--seeds", "[0]"])
    assert stop.value.code == 2 and "pip install -e '.[ray]'" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "sweep")


def test_trials_larger_than_the_ray_started_here_are_one_line_not_a_wait(tmp_path, capsys, monkeypatch):
    """Tune would wait forever for 3 CPUs that a Ray started on a 2-core machine will never have
    (a Ray of 2 CPUs, started here: scripted, so that the test starts none)."""
    ray = pytest.importorskip("ray")
    monkeypatch.setattr("agents.acting.ray_backend.init_ray", lambda address: True)  # "started here"
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.raises(SystemExit) as stop:
        sweep.main(["--dir", str(tmp_path / "sweep"), "--envs", "[maze]", "--cores", "[lstm]", "--seeds", "[0]",
                    "--cpus_per_trial", "3", "--", *TINY])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--cpus_per_trial 3 is more than the 2 CPUs of the Ray started here" in err
    assert not os.path.exists(tmp_path / "sweep" / "runs")  # no trial started


def test_a_sweep_directory_keeps_its_grid(tmp_path):
    sweep_dir = str(tmp_path / "sweep")
    sweep.check_same_sweep(sweep.load(["--dir", sweep_dir, "--cores", "[lstm]"]), sweep_dir)
    sweep.check_same_sweep(sweep.load(["--dir", sweep_dir, "--cores", "[lstm]", "--max_concurrent", "4"]), sweep_dir)
    with pytest.raises(ConfigError, match=r"another grid: cores \(was \['lstm'\], now \['lstm', 'delta'\]\)"):
        sweep.check_same_sweep(sweep.load(["--dir", sweep_dir, "--cores", "[lstm,delta]"]), sweep_dir)


def test_variants_multiply_the_grid_and_reach_each_trial(tmp_path):
    cfg = sweep.load(["--envs", "[maze,popgym/RepeatPreviousEasy]", "--cores", "[lstm]", "--seeds", "[0,1]",
                      "--variants", "{optim.lr: [1e-3, 2e-3], loss.popart: [true, false]}"])
    trials = sweep.grid(cfg)
    assert len(trials) == 2 * 4 * 2 and len({t.name for t in trials}) == len(trials)
    trial = trials[2]
    assert trial.variant == (("optim.lr", "0.001"), ("loss.popart", "false")) and trial.seed == 0
    assert trial.name == "maze-lstm-optim.lr=0.001,loss.popart=false-s0"
    config = sweep.trial_config(trial, 1000, [], str(tmp_path))
    assert config.optim.lr == 1e-3 and config.loss.popart is False and config.run.total_steps == 1000
    memory_trial = [t for t in trials if t.env.startswith("popgym")][-1]
    config = sweep.trial_config(memory_trial, 1000, [], str(tmp_path / "m"))
    assert config.env.id == "popgym:popgym-RepeatPreviousEasy-v0" and config.optim.lr == 2e-3
    assert config.loss.popart is False and memory_trial.name.startswith("popgym_RepeatPreviousEasy-lstm-")
    assert sweep.Trial.from_config({"env": "maze", "core": "lstm", "seed": 0, "variant": [["optim.lr", "1"]]}) \
        == sweep.Trial("maze", "lstm", 0, (("optim.lr", "1"),))
    assert len(sweep.grid(sweep.load(["--cores", "[lstm]", "--seeds", "[0]"]))) == 1  # no variants: one
    with pytest.raises(ConfigError, match="no memory-suite env 'popgym/Nope'"):
        sweep.load(["--envs", "[popgym/Nope]"])


def test_results_table_has_a_row_per_env_and_variant():
    results = [{"env": env, "core": "lstm", "seed": seed, "variant": variant, "total_steps": 1000, "steps": 1000,
                "mean_return": 1.0, "metric": metric, "score": score + seed, "sps": 100.0, "run_dir": "x"}
               for env, metric in (("maze", "mean return"), ("popgym/CountRecallEasy", "MMER"))
               for variant, score in (("optim.lr=1", 10.0), ("optim.lr=2", 20.0)) for seed in (0, 1)]
    markdown = sweep.results_markdown(results, "v")
    assert "| Score (MMER, mean return) | lstm |" in markdown
    assert "| maze · optim.lr=1 | 10.5 ± 0.7 |" in markdown
    assert "| popgym/CountRecallEasy · optim.lr=2 | 20.5 ± 0.7 |" in markdown
