"""launch/peers.py (``launch/bench.py peers``): the windowed curves, the side-by-side table, the docs
markers, and a tiny run of each algorithm that writes its result file."""
from __future__ import annotations

import argparse
import inspect
import json
import math

import pytest

from envs.maze import MazeEnv
from launch import peers
from launch.scores import at_step

TINY = ["--actor.num_actors", "1", "--actor.envs_per_actor", "8", "--learner.batch_size", "8",
        "--actor.unroll_length", "10", "--env.episode_length", "20", "--core.hidden_size", "16",
        "--log.print_every_s", "1000"]


def test_windowed_curve_is_the_mean_of_the_last_window_returns():
    finished = [(10, 1.0), (20, 3.0), (30, 5.0), (45, -1.0)]
    assert peers.windowed_curve(finished, window=2) == [(10, 1.0), (20, 2.0), (30, 4.0), (45, 2.0)]


def test_at_step_takes_the_last_point_at_or_before_the_step():
    curve = [(10, 1.0), (20, 2.0), (30, 4.0)]
    assert at_step(curve, 25) == 2.0
    assert at_step(curve, 30) == 4.0
    assert math.isnan(at_step(curve, 9))


def result(env: str, algo: str, seed: int, curve: list[tuple[int, float]], wall_s: float, core: str = "lstm") -> dict:
    return {"env": env, "algo": algo, "seed": seed, "core": core, "curve": curve, "wall_s": wall_s,
            "steps": curve[-1][0]}


def test_score_table_gives_medians_each_seed_mmer_and_wall_time():
    env = "popgym/RepeatPreviousEasy"
    k = 1000
    runs = [result(env, "deltabeast", 0, [(100 * k, 0.2), (250 * k, 0.6), (1000 * k, 0.9)], 60, core="delta"),
            result(env, "deltabeast", 1, [(90 * k, 0.4), (260 * k, 1.0), (1000 * k, 0.5)], 120, core="delta"),
            result(env, "deltabeast", 2, [(100 * k, -0.2), (240 * k, 0.0), (1000 * k, 0.8)], 180, core="delta")]
    table = peers.score_table({env: {"deltabeast": runs}}).splitlines()
    assert table[0].startswith("| env | algorithm | seeds | return at 100K | return at 250K")
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    assert cells[:3] == [env, "deltabeast (delta)", "0,1,2"]
    assert cells[3] == "**0.20** (0.20, 0.40, -0.20)"   # at 100K: seed 1's point at 90K
    assert cells[4] == "**0.40** (0.60, 0.40, 0.00)"    # at 250K: seed 1 is still at its 90K point
    assert cells[5] == "**0.60** (0.60, 1.00, 0.00)"    # at 500K: the last point before it
    assert cells[6] == "**0.80** (0.90, 0.50, 0.80)"
    # MMER per seed: the curve's max mapped from [-1, 1] onto [0, 1]: 0.95, 1.0, 0.9
    assert cells[7] == "**0.950** (0.950, 1.000, 0.900)"
    assert cells[8] == "2.0 min"


def test_across_envs_table_is_the_median_of_normalised_seed_medians(tmp_path):
    """Two envs, by hand: RepeatPrevious ([-1, 1]) has seed medians 0.2 and 0.6 at 100K and 1M,
    i.e. 0.6 and 0.8 normalised; Stateless CartPole ([0, 1]) 0.1 and 0.3 as they are. Medians
    across the two envs: 0.35 until 1M, 0.55 there; RecurrentPPO, which only one env has, is left
    out; the plot is written."""
    k = 1000
    rp, cp = "popgym/RepeatPreviousEasy", "popgym/StatelessCartPoleEasy"
    results = {
        rp: {"deltabeast": [result(rp, "deltabeast", s, [(100 * k, v0), (1000 * k, v1)], 60)
                            for s, (v0, v1) in enumerate([(0.2, 0.6), (0.0, 0.9), (0.4, 0.5)])],
             "recurrent_ppo": [result(rp, "recurrent_ppo", 0, [(100 * k, 0.0), (1000 * k, 0.0)], 60)]},
        cp: {"deltabeast": [result(cp, "deltabeast", 0, [(100 * k, 0.1), (1000 * k, 0.3)], 60)]},
    }
    lines = peers.across_envs_table(results).splitlines()
    assert lines[0] == "| algorithm | envs | at 100K | at 250K | at 500K | at 1000K |"
    assert lines[2:] == ["| deltabeast (lstm) | 2 | 0.35 | 0.35 | 0.35 | 0.55 |"]
    # a gym:<id> env has no declared return range: it is left out, and the table is the same
    gym = {"gym:Acrobot-v1": {"deltabeast": [result("gym:Acrobot-v1", "deltabeast", 0, [(100 * k, -90.0)], 60)]}}
    assert peers.across_envs_table({**results, **gym}).splitlines() == lines
    peers.plot_curves(results, str(tmp_path / "curves.png"))
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_score_table_leaves_out_checkpoints_past_the_runs_and_mmer_off_popgym():
    one = {**result("maze", "recurrent_ppo", 0, [(50_000, 3.0), (300_000, 7.5)], 90), "steps": 500_000}
    row = peers.score_table({"maze": {"recurrent_ppo": [one]}}).splitlines()[2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["maze", "recurrent_ppo", "0", "3.00", "3.00", "7.50", "—", "—", "1.5 min"]


def test_score_table_gives_a_row_per_deltabeast_core_and_one_for_recurrent_ppo():
    env = "bsuite/memory_len_60"
    runs = {"deltabeast": [result(env, "deltabeast", s, [(100_000, v)], 60, core=c)
                           for s, (c, v) in enumerate([("lstm", 0.1), ("delta", 1.0), ("lstm", 0.3)])],
            "recurrent_ppo": [result(env, "recurrent_ppo", 0, [(100_000, -0.2)], 600, core="delta")]}
    lines = peers.score_table({env: runs}).splitlines()[2:]
    rows = [[c.strip() for c in row.strip("|").split("|")][:4] for row in lines]
    assert rows == [[env, "deltabeast (delta)", "1", "1.00"],
                    [env, "deltabeast (lstm)", "0,2", "**0.20** (0.10, 0.30)"],
                    [env, "recurrent_ppo", "0", "-0.20"]]
    path = peers.result_path("out", env, "deltabeast", 2, "delta")
    assert path.endswith("bsuite_memory_len_60/deltabeast-delta-s2.json")
    assert peers.result_path("out", env, "recurrent_ppo", 2).endswith("bsuite_memory_len_60/recurrent_ppo-s2.json")


def test_write_docs_replaces_only_the_text_between_the_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("head\n<!-- peers:begin -->\nold table\n<!-- peers:end -->\ntail\n")
    peers.write_docs({str(doc): "| new |"})
    assert doc.read_text() == "head\n<!-- peers:begin -->\n| new |\n<!-- peers:end -->\ntail\n"
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        peers.write_docs({str(bare): "| new |"})
    assert bare.read_text() == "no markers\n"


def bench_args(tmp_path, algos: list[str], steps: int) -> argparse.Namespace:
    return argparse.Namespace(env="maze", core="lstm", steps=steps, seeds=[0], algos=algos, out=str(tmp_path / "peers"),
                              plot=None, table=False, docs=False, flags=TINY, observe="all")


@pytest.mark.parametrize("flags", [["--core", "ff"], ["--core.name", "ff"], ["--core=ff"]])
def test_a_core_among_the_flags_is_refused_before_any_run(tmp_path, flags):
    """Peers' --core comes last on the launcher's command line, so another core passed through
    --flags would be ignored (the run would be peers' core, under its name): it stops in one line."""
    from agents.errors import UsageError

    ignored = peers.deltabeast_config("maze", core="lstm", seed=0, steps=None, flags=flags, run_dir=str(tmp_path))
    assert ignored.core.name == "lstm"  # what the run would have been without the check
    args = bench_args(tmp_path, ["deltabeast"], 4000)
    args.flags = [*TINY, *flags]
    with pytest.raises(UsageError, match="bench.py peers' own --core"):
        peers.bench_peers(args)
    assert not (tmp_path / "peers").exists()


def test_a_tiny_deltabeast_run_writes_its_curve_and_the_table(tmp_path, capsys):
    peers.bench_peers(bench_args(tmp_path, ["deltabeast"], 4000))
    with open(peers.result_path(str(tmp_path / "peers"), "maze", "deltabeast", 0, "lstm")) as f:
        saved = json.load(f)
    assert saved["env"] == "maze" and saved["algo"] == "deltabeast" and saved["steps"] == 4000
    steps = [s for s, _ in saved["curve"]]
    assert steps and steps == sorted(steps) and steps[-1] >= 4000
    assert all(math.isfinite(v) for _, v in saved["curve"])
    assert "| maze | deltabeast (lstm) | 0 |" in capsys.readouterr().out


@pytest.mark.slow  # 17-25 s; the gym id test below runs RecurrentPPO in the default suite
def test_a_tiny_recurrent_ppo_run_writes_its_curve(tmp_path):
    pytest.importorskip("sb3_contrib")
    rollout = peers.PPO_ENVS * peers.PPO_SETTINGS["n_steps"]
    peers.bench_peers(bench_args(tmp_path, ["recurrent_ppo"], 2 * rollout))
    with open(peers.result_path(str(tmp_path / "peers"), "maze", "recurrent_ppo", 0)) as f:
        saved = json.load(f)
    # the maze's episodes last 250 steps: two rollouts of 128 steps in each of 16 envs end 16 of them,
    # all at the same step, at which the window holds all 16
    episode = inspect.signature(MazeEnv).parameters["episode_length"].default
    assert 128 < episode <= 256
    assert len(saved["curve"]) == peers.PPO_ENVS
    assert {s for s, _ in saved["curve"]} == {peers.PPO_ENVS * episode}
    assert all(math.isfinite(v) for _, v in saved["curve"])


def test_a_gym_id_runs_both_algorithms_with_train_yaml_s_core(tmp_path, capsys):
    """``--env gym:<id>``: DeltaBeast from launch/train.py's config (its core when none is given),
    RecurrentPPO on the same env with flat observations; both write their curves and the table."""
    pytest.importorskip("sb3_contrib")
    from launch import train

    out = str(tmp_path / "peers")
    flags = ["--actor.num_actors", "1", "--actor.envs_per_actor", "8", "--learner.batch_size", "8",
             "--log.print_every_s", "1000"]
    rollout = peers.PPO_ENVS * peers.PPO_SETTINGS["n_steps"]
    args = argparse.Namespace(env="gym:CartPole-v1", core=None, steps=rollout, seeds=[0], algos=None,
                              out=out, plot=None, table=False, docs=False, flags=flags, observe="all")
    peers.bench_peers(args)
    core = train.load([]).core.name
    for algo, run_core in (("deltabeast", core), ("recurrent_ppo", None)):
        with open(peers.result_path(out, "gym:CartPole-v1", algo, 0, run_core)) as f:
            saved = json.load(f)
        assert saved["steps"] == rollout and saved["curve"]
        assert all(1 <= v <= 500 for _, v in saved["curve"])  # CartPole's returns: 1 per step, at most 500
    printed = capsys.readouterr().out
    assert f"| gym:CartPole-v1 | deltabeast ({core}) | 0 |" in printed
    assert "| gym:CartPole-v1 | recurrent_ppo | 0 |" in printed
    assert "| ppo |" not in printed  # SB3's PPO joins by default on Box actions only


def read_csv_observe(out: str) -> str:
    """The observe option of the DeltaBeast run under ``out`` (its saved config)."""
    import glob

    import yaml

    (path,) = glob.glob(f"{out}/*/run-lstm-s0/config.yaml")
    with open(path) as f:
        return yaml.safe_load(f)["env"]["observe"]


@pytest.mark.slow  # 20-39 s: three algorithms, SB3 PPO's 2,048-step rollout
def test_a_box_action_pomdp_runs_all_three_on_the_same_observations(tmp_path, capsys, monkeypatch):
    """``--env gym:InvertedPendulum-v5 --observe positions``: DeltaBeast, SB3's PPO and RecurrentPPO
    at their single-env defaults, each on the -P observations (2 of the 4), under the label ...-P."""
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("mujoco")
    out = str(tmp_path / "peers")
    flags = ["--actor.num_actors", "1", "--actor.envs_per_actor", "8", "--learner.batch_size", "8",
             "--learner.minibatches", "2", "--learner.epochs", "1", "--actor.unroll_length", "16",
             "--core", "lstm", "--core.hidden_size", "8", "--log.print_every_s", "1000"]
    seen, real = [], peers.make_single_env

    def make_single_env(env, seed, index, observe="all"):
        seen.append(observe)
        return real(env, seed, index, observe)

    monkeypatch.setattr(peers, "make_single_env", make_single_env)
    peers.bench_peers(argparse.Namespace(env="gym:InvertedPendulum-v5", core="lstm", steps=2048, seeds=[0],
                                         algos=None, out=out, plot=None, table=False, docs=False, flags=flags,
                                         observe="positions"))
    label = "gym:InvertedPendulum-v5-P"
    for algo, core in (("deltabeast", "lstm"), ("ppo", None), ("recurrent_ppo", None)):
        with open(peers.result_path(out, label, algo, 0, core)) as f:
            saved = json.load(f)
        assert saved["env"] == label and saved["curve"] and all(1 <= v <= 1000 for _, v in saved["curve"])
    assert set(seen) == {"positions"}  # the peers' envs (DeltaBeast's own come through --env.observe)
    assert read_csv_observe(out) == "positions"
    printed = capsys.readouterr().out
    assert f"| {label} | ppo | 0 |" in printed and f"| {label} | recurrent_ppo | 0 |" in printed


def test_a_peer_run_killed_after_a_save_goes_on_from_it(tmp_path):
    """learn_curve's save: a run stopped in its third rollout (its env raises, as a kill would)
    left the model and the episodes of its second rollout's end, the same episodes as an unbroken
    run's; the same call again goes on from that step and removes the save when it ends."""
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    class Killed(Exception):
        pass

    class DiesAt(gym.Wrapper):
        def __init__(self, env, at):
            super().__init__(env)
            self.at, self.steps = at, 0

        def step(self, action):
            self.steps += 1
            if self.steps == self.at:
                raise Killed
            return self.env.step(action)

    rollout = 256

    def model(dies_at=None):
        vec = DummyVecEnv([lambda: DiesAt(Monitor(gym.make("CartPole-v1")), dies_at or -1)])
        return PPO("MlpPolicy", vec, n_steps=rollout, batch_size=64, n_epochs=1, seed=0)

    save_to = str(tmp_path / "ppo-s0.partial")
    with pytest.raises(Killed):
        peers.learn_curve(model(dies_at=2 * rollout + 10), 4 * rollout, save_to=save_to, save_every_s=0)
    assert PPO.load(save_to + ".zip").num_timesteps == 2 * rollout
    with open(save_to + ".json") as f:
        saved = json.load(f)
    unbroken = peers.learn_curve(model(), 2 * rollout)
    assert saved["resumed_at"] == [] and saved["finished"]
    assert peers.windowed_curve([(step, ret) for step, ret, _ in saved["finished"]]) == unbroken["curve"]

    resumed = peers.learn_curve(model(), 4 * rollout, save_to=save_to, save_every_s=0)
    assert resumed["resumed_at"] == [2 * rollout]
    assert resumed["curve"][:len(unbroken["curve"])] == unbroken["curve"]
    steps = [step for step, _ in resumed["curve"]]
    assert steps == sorted(steps) and 2 * rollout < steps[-1] <= 4 * rollout  # counted on from the save
    assert resumed["wall_s"] >= saved["wall_s"]
    walls = resumed["curve_wall_s"]  # each episode's end, in seconds of the run counted across the resume
    assert len(walls) == len(resumed["curve"]) and walls == sorted(walls) and walls[-1] <= resumed["wall_s"]
    assert walls[:len(saved["finished"])] == [wall for *_, wall in saved["finished"]]
    assert all(wall >= saved["wall_s"] for wall in walls[len(saved["finished"]):])
    assert not list(tmp_path.iterdir())  # the save is gone


def test_a_run_with_a_result_is_kept(tmp_path, capsys):
    """The same bench command again keeps each run whose result file exists, and tabulates it."""
    args = bench_args(tmp_path, ["recurrent_ppo"], 1000)
    path = peers.result_path(args.out, "maze", "recurrent_ppo", 0)
    import os

    os.makedirs(os.path.dirname(path))
    result = {"env": "maze", "algo": "recurrent_ppo", "seed": 0, "steps": 1000, "curve": [[1000, 7.0]], "wall_s": 60.0}
    with open(path, "w") as f:
        json.dump(result, f)
    peers.bench_peers(args)
    with open(path) as f:
        assert json.load(f) == result
    printed = capsys.readouterr().out
    assert "recurrent_ppo seed 0: kept" in printed and "| maze | recurrent_ppo | 0 |" in printed
