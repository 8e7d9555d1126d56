"""launch/memory.py: one IMPALA run per env of a suite, a results table and curves."""
from __future__ import annotations

import csv
import dataclasses
import os

import pytest
import yaml

from launch import memory
from launch.entry import CONFIGS

TINY = ["--core", "lstm", "--num_actors", "1", "--actor.envs_per_actor", "4", "--actor.unroll_length", "8",
        "--learner.batch_size", "4", "--learner.minibatches", "2", "--core.hidden_size", "8",
        "--log.print_every_s", "100"]


@pytest.mark.parametrize("suite,metric", [("popgym", "MMER"),
                                          pytest.param("bsuite", "mean return", marks=pytest.mark.slow)])
def test_suite_runs_every_env_and_writes_the_table(suite, metric, tmp_path):
    pytest.importorskip({"popgym": "popgym", "bsuite": "bsuite"}[suite])
    run_dir = str(tmp_path / "{suite}" / "{env}-{core}")
    results = memory.main(["--suite", suite, "--total_steps", "512", "--run_dir", run_dir, *TINY])
    names = [e.name for e in memory.SUITES[suite]]
    assert [r["env"] for r in results] == names
    for r in results:
        assert r["metric"] == metric and os.path.exists(os.path.join(r["run_dir"], "checkpoint.pt"))
        if metric == "MMER":
            assert 0.0 <= r["value"] <= 1.0
    with open(tmp_path / suite / "results-lstm.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["env"] for r in rows] == names
    plots = sorted(p for p in os.listdir(tmp_path / suite) if p.endswith(".png"))
    assert plots == sorted(f"{n}-lstm.png" for n in names)
    again = memory.main(["--suite", suite, "--total_steps", "512", "--run_dir", run_dir, *TINY])  # resumes: done
    assert [r["value"] for r in again] == pytest.approx([r["value"] for r in results], nan_ok=True)


def test_one_env_of_a_suite_reports_its_steps_and_where_it_wrote(tmp_path, capsys):
    """``--suite SUITE/ENV`` runs that env alone; a budget of 500 with batches of 4 x 8 = 32 steps
    ends at 512 steps, which the table gives; the output names the files written."""
    pytest.importorskip("popgym")
    run_dir = str(tmp_path / "{suite}" / "{env}-{core}")
    (result,) = memory.main(["--suite", "popgym/CountRecallEasy", "--total_steps", "500", "--run_dir", run_dir, *TINY])
    assert result["env"] == "CountRecallEasy" and result["steps"] == 512
    out = capsys.readouterr().out
    for name in ("CountRecallEasy-lstm.png", "results-lstm.csv", "results-lstm.md"):
        assert f"{tmp_path / 'popgym' / name}" in out
    assert "| popgym | CountRecallEasy | lstm | 512 |" in (tmp_path / "popgym" / "results-lstm.md").read_text()
    (tmp_path / "popgym" / "results-lstm.csv").write_text(  # as if the whole suite had run before
        "suite,env,core,steps,metric,value\npopgym,AutoencodeEasy,lstm,512,MMER,0.25\n"
        "popgym,CountRecallEasy,lstm,256,MMER,0.5\n")
    memory.main(["--suite", "popgym/CountRecallEasy", "--total_steps", "500", "--run_dir", run_dir, *TINY])
    table = (tmp_path / "popgym" / "results-lstm.md").read_text()  # the other env's row stays; this env's is new
    assert "| popgym | AutoencodeEasy | lstm | 512 | MMER | 0.250 |" in table
    assert "| popgym | CountRecallEasy | lstm | 512 |" in table and "| 256 |" not in table


@pytest.mark.parametrize("suite,message", [("atari57", "--suite: expected one of 'popgym'"),
                                           ("popgym/Nope", "--suite: popgym has no env 'Nope'; its envs: "),
                                           ("all/CountRecallEasy", "or SUITE/ENV; got 'all/CountRecallEasy'")])
def test_an_unknown_suite_or_env_is_a_config_error(suite, message, capsys):
    with pytest.raises(SystemExit) as stop:
        memory.main(["--suite", suite])
    assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("name", ["CountRecallEasy", "AutoencodeEasy", "memory_len_30", "memory_len_60",
                                  "memory_len_100"])
def test_env_presets_unroll_whole_episodes(name):
    """Each of these envs' reward depends on the first step of its episode, so its preset's unroll
    covers a whole episode: measured here by playing the env, not read from its code."""
    assert memory.load([], env=name).actor.unroll_length >= _episode_length(name)


def _episode_length(name: str) -> int:
    """The longest first episode of two copies of the suite env ``name``, played with action 0."""
    import numpy as np

    import envs

    entry = next(e for s in memory.SUITES.values() for e in s if e.name == name)
    pytest.importorskip(entry.module)
    env = envs.make(entry.env, num_envs=2, seed=0, **entry.options)
    env.reset()
    lengths: list[int] = []
    while not lengths:
        _, _, done, info = env.step(np.zeros(2, np.int64))
        lengths += info["episode_length"][done].tolist()
    env.close()
    return max(lengths)


@pytest.mark.parametrize("core", ["delta_product", "lstm", "gru"])
def test_the_medium_recipe_unrolls_whole_episodes_by_the_clock_for_each_core(core):
    """launch/configs/repeat_previous_medium.yaml (issue 74): one unroll holds a whole episode of
    RepeatPreviousMedium, played here; the answers are not discounted; every core sees the clock at
    its memory.yaml size (delta_product with 32-wide heads), so ``--core lstm`` runs the same settings."""
    from agents.run_config import check_config

    path = os.path.join(CONFIGS, "repeat_previous_medium.yaml")
    cfg = memory.load(["--config", path, "--core", core], env="RepeatPreviousMedium")
    check_config(cfg)
    assert cfg.actor.unroll_length >= _episode_length("RepeatPreviousMedium")
    assert (cfg.core.name, cfg.core.position_features, cfg.loss.discount) == (core, 32, 0.0)
    assert (cfg.learner.epochs, cfg.learner.minibatches, cfg.loss.clip) == (4, 16, 0.2)
    sized = memory.load(["--core", core], env="RepeatPreviousMedium").core
    assert cfg.core.hidden_size == sized.hidden_size
    if core == "delta_product":
        assert (cfg.core.num_heads, cfg.core.head_dim) == (sized.num_heads, 32)


@pytest.mark.parametrize("name", ["RepeatPreviousEasy", "CountRecallEasy", "AutoencodeEasy", "StatelessCartPoleEasy"])
def test_card_games_presets_discount_nothing(name):
    """The card games' answers never change what is dealt next, so each answer's return is its own
    reward: discount 0. StatelessCartPole's actions steer the pole: the suite's 0.9 stays."""
    card_game = name != "StatelessCartPoleEasy"
    assert memory.load([], env=name).loss.discount == (0.0 if card_game else 0.9)


def test_print_config_shows_each_env_with_its_presets(capsys):
    """--print_config prints what each selected env trains with: RepeatPrevious's preset discount
    of 0 and its own id, not the suite's defaults; nothing is trained."""
    pytest.importorskip("popgym")
    assert memory.main(["--suite", "popgym/RepeatPreviousEasy", "--core.hidden_size", "8", "--print_config"]) == []
    header, text = capsys.readouterr().out.split("\n", 1)
    printed = yaml.safe_load(text)
    assert header == "# popgym/RepeatPreviousEasy"
    assert printed["loss"]["discount"] == 0.0 != memory.load([]).loss.discount
    assert printed["env"]["id"] == "popgym:popgym-RepeatPreviousEasy-v0" and printed["core"]["hidden_size"] == 8


def test_print_config_notes_an_env_whose_package_is_missing(capsys, monkeypatch):
    """As training skips it with a note, --print_config writes the note as a YAML comment (it raised)."""
    from envs.suites import SuiteEnv

    monkeypatch.setattr(SuiteEnv, "available", lambda self: self.name != "memory_len_3")
    assert memory.main(["--suite", "bsuite", "--print_config"]) == []
    out = capsys.readouterr().out
    assert "# skipping bsuite/memory_len_3: bsuite is not installed" in out and "# bsuite/memory_len_10\n" in out
    assert all(isinstance(doc, dict) for doc in yaml.safe_load_all(out.replace("\n# bsuite/", "\n---\n# bsuite/")))


def test_the_defaults_are_issue_42s_and_the_tuned_presets_keep_their_one_pass():
    """The suite's defaults: delta_product, two passes with PPO's clip (issue 42's sweep). The
    presets whose figures were made with IMPALA's one pass keep it; those with PPO's keep theirs."""
    cfg = memory.load([])
    assert (cfg.core.name, cfg.learner.epochs, cfg.loss.clip, cfg.loss.discount) == ("delta_product", 2, 0.2, 0.9)
    for env in ("RepeatPreviousEasy", "memory_len_30", "memory_len_60", "memory_len_100"):
        tuned = memory.load([], env=env)
        assert (tuned.learner.epochs, tuned.loss.clip) == (1, None), env
    assert memory.load([], env="CountRecallEasy").learner.epochs == 4
    assert memory.load([], env="MemoryS7").learner.epochs == 8


def test_every_tuned_env_keeps_the_loss_its_figures_were_made_with():
    """The defaults start PopArt's head at zero with entropy cost 0.003 (issue 42's seventh and
    eighth rounds); every env with a preset keeps the random head and 0.01, as its figures were made."""
    cfg = memory.load([])
    assert (cfg.loss.popart_zero_init, cfg.loss.entropy_cost) == (True, 0.003)
    with open(os.path.join(CONFIGS, memory.ENTRY.defaults)) as f:
        tuned_envs = yaml.safe_load(f)["presets"]["env"]
    assert len(tuned_envs) == 7
    for env in tuned_envs:
        tuned = memory.load([], env=env)
        assert (tuned.loss.popart_zero_init, tuned.loss.entropy_cost) == (False, 0.01), env


def test_an_env_preset_holds_its_own_per_core_presets():
    """presets.env.CountRecallEasy gives lstm its own lr and leaves the other cores the suite's,
    and a flag still wins over both."""
    suite_lr = memory.load([]).optim.lr
    assert memory.load(["--core", "lstm"], env="CountRecallEasy").optim.lr == 6e-3 != suite_lr
    assert memory.load(["--core", "linear"], env="CountRecallEasy").optim.lr == suite_lr
    assert memory.load(["--core", "lstm"], env="RepeatPreviousEasy").optim.lr == suite_lr
    assert memory.load(["--core", "lstm", "--optim.lr", "1e-4"], env="CountRecallEasy").optim.lr == 1e-4
    linear = memory.load(["--core", "linear"], env="CountRecallEasy")
    assert linear.core.head_dim == 32 and linear.learner.epochs == 4  # presets.core.linear and the env's own
    clocked = memory.load(["--core", "delta_product"], env="AutoencodeEasy").core  # the env's core preset wins
    assert (clocked.position_features, clocked.head_dim, clocked.hidden_size) == (32, 32, 64)
    plain = memory.load(["--core", "delta_product"], env="CountRecallEasy").core
    assert (plain.position_features, plain.head_dim) == (0, 16)
    assert memory.load(["--core", "lstm"], env="CountRecallEasy").core.position_features == 32
    assert memory.load(["--core", "lstm"], env="AutoencodeEasy").core.position_features == 0


@pytest.mark.parametrize("suite", ["bsuite", "minigrid"])
def test_a_suite_runs_checkpoint_reads_back_as_a_training_config(suite, tmp_path):
    """What a memory run saves is a plain training config (no ``suite``): launch/evaluate.py loads
    the agent, and a Ray host builds its config from the same dict. MiniGrid's carries its env's
    wrappers (the one-hot view) and its preset's tanh heads."""
    pytest.importorskip(suite)
    from agents.config import to_dict
    from agents.run_config import config_from_dict
    from launch.evaluate import load_agent

    entry = memory.SUITES[suite][0]
    cfg = memory.env_config(memory.load(["--suite", suite, "--run_dir", str(tmp_path / "{env}"), *TINY],
                                        entry.name), suite, entry)
    assert config_from_dict(to_dict(cfg), "test") == cfg
    memory.train(dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, total_steps=64)))
    model, saved, counters = load_agent(os.path.join(cfg.run.run_dir, "checkpoint.pt"))
    assert saved.env.id == entry.options["id"] and counters["step"] >= 64
    assert saved.env.wrappers == tuple(entry.options.get("wrappers", ()))
    assert saved.core == cfg.core and model.core.output_size == 8
    assert len(model.policy_torso) == (2 if suite == "minigrid" else 0)  # Linear + tanh


@pytest.mark.parametrize("suite", ["popgym", "popgym_more", "popgym_medium"])
def test_every_popgym_suite_is_scored_by_mmer(suite):
    """POPGym's envs, in any of the three suites, score by MMER: the best of the curve (0.5 of a
    return in [-1, 1]) maps to 0.75; the other suites by their last mean return."""
    entry = memory.SUITES[suite][0]
    rows = [{"mean_return": 0.1}, {"mean_return": 0.5}, {"mean_return": 0.2}]
    assert memory.score(suite, entry, rows) == ("MMER", pytest.approx(0.75))
    assert memory.score("bsuite", memory.SUITES["bsuite"][0], rows) == ("mean return", 0.2)
