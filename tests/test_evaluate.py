"""launch/evaluate.py: the Tables 9/10 protocol (runs x episodes, mean ± std of run means) on
scripted policies, checked against independent computations, and the table layout."""
from __future__ import annotations

import os
import re
import statistics

import numpy as np
import pytest

import envs
from agents.actions import CategoricalActions
from agents.atari_tables import PAPER_SCORES, TABLE_COLUMNS, TABLE_OF_STEP, TABLE_ROWS, paper_step
from launch import evaluate

# The appendix's Tables 9 and 10 as text, to check the transcription in agents/atari_tables.py.
TABLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "recurrent_fwp_tables_9_10.txt")


class CountingEnv:
    """Env i seeded with s: its k-th episode lasts 1 + (s + i + k) % 4 steps and scores
    (s + i) * 10 + k, paid in the last step; torchbeast auto-reset."""

    observation_shape, num_actions = (1,), 2

    def __init__(self, num_envs: int, seed: int):
        self.num_envs, self.seed = num_envs, seed
        self.k = np.zeros(num_envs, int)
        self.t = np.zeros(num_envs, int)

    def _length(self, i):
        return 1 + (self.seed + i + self.k[i]) % 4

    def reset(self):
        self.k[:], self.t[:] = 0, 0
        return np.zeros((self.num_envs, 1), np.float32)

    def step(self, actions):
        assert actions.shape == (self.num_envs,)
        self.t += 1
        reward = np.zeros(self.num_envs, np.float32)
        done = np.zeros(self.num_envs, bool)
        ret = np.zeros(self.num_envs, np.float32)
        length = self.t.astype(np.int32)
        for i in range(self.num_envs):
            if self.t[i] == self._length(i):
                reward[i] = ret[i] = (self.seed + i) * 10 + self.k[i]
                done[i] = True
                self.k[i] += 1
                self.t[i] = 0
        return np.zeros((self.num_envs, 1), np.float32), reward, done, {"episode_return": ret,
                                                                          "episode_length": length}

    def close(self):
        pass


def run_protocol(make_env, make_policy, runs, episodes, envs_per_run=None, seed=0):
    return [evaluate.run_one(make_env, make_policy, r, episodes, envs_per_run, seed) for r in range(runs)]


def expected_scores(seed, run, episodes, n):
    """Run r plays n envs seeded seed + r*n + i; each contributes its first episodes/n episodes."""
    base = seed + run * n
    return sorted((base + i) * 10 + k for i in range(n) for k in range(episodes // n))


@pytest.mark.parametrize("runs,episodes,envs_per_run", [(5, 30, None), (5, 30, 6), (3, 4, 2)])
def test_protocol_counts_means_and_stds(runs, episodes, envs_per_run):
    calls = []

    def policy_for(run):
        def policy(obs, reward, action, done, rows):
            calls.append(run)
            return np.zeros(len(obs), np.int64)
        return policy

    out = run_protocol(CountingEnv, policy_for, runs=runs, episodes=episodes, envs_per_run=envs_per_run,
                                seed=7)
    n = envs_per_run or episodes
    assert len(out) == runs and all(len(r["scores"]) == episodes for r in out)
    for r, result in enumerate(out):
        assert sorted(result["scores"]) == expected_scores(7, r, episodes, n)
    summary = evaluate.summarize(out)
    run_means = [statistics.fmean(expected_scores(7, r, episodes, n)) for r in range(runs)]
    assert summary["runs"] == runs and summary["episodes"] == runs * episodes
    assert summary["run_means"] == pytest.approx(run_means)
    assert summary["mean"] == pytest.approx(statistics.fmean(run_means))
    assert summary["std"] == pytest.approx(statistics.pstdev(run_means))
    assert evaluate.summarize(out, ddof=1)["std"] == pytest.approx(statistics.stdev(run_means))
    assert set(calls) == set(range(runs))


def test_a_game_that_has_played_its_episodes_is_not_stepped_again():
    """Games of different lengths: each is stepped exactly as often as its own episodes last
    (the old loop stepped every env until the longest was done), the policy acts for the games
    still playing and no other, and each game's scores and lengths are CountingEnv's."""
    stepped, batches = [], []

    class Counted(CountingEnv):
        def step(self, actions):
            stepped.append(self.seed)
            return super().step(actions)

    def policy(obs, reward, action, done, rows):
        batches.append(rows.tolist())
        assert len(obs) == len(reward) == len(action) == len(done) == len(rows)
        return np.zeros(len(rows), np.int64)

    finished = []
    scores, lengths = evaluate.play([Counted(1, s) for s in (3, 4, 5)], policy, 2, lambda: finished.append(1))
    for i, s in enumerate((3, 4, 5)):
        own = [1 + (s + k) % 4 for k in range(2)]  # episode k of game i lasts 1 + (s + k) % 4 steps
        assert scores[i] == [s * 10 + k for k in range(2)] and lengths[i] == own
        assert stepped.count(s) == sum(own)
    assert len(finished) == 3
    # seeds 3, 4, 5 play 4+1, 1+2 and 2+3 steps: all three for 3 steps, then games 0 and 2
    assert batches == [[0, 1, 2]] * 3 + [[0, 2]] * 2


def test_acting_on_some_rows_leaves_the_others_state_alone():
    """act_on_rows on a subset of an LSTM agent's envs gives each env the logits it gets when
    stepped alone, whatever the others do, and leaves the state of the envs it skips as it was."""
    import torch

    from agents.network import AgentNet

    torch.manual_seed(0)
    model = AgentNet((3,), [4], "lstm", {"hidden_size": 8}).eval()
    obs = torch.randn(5, 3, 3)  # [T, envs, ...]
    zero_r, zero_a = torch.zeros(3), torch.zeros(3, dtype=torch.long)
    state = model.initial_state(3)
    plan = [[0, 1, 2], [0, 2], [2], [0, 2], [0, 1, 2]]  # which envs act at each step
    got = {i: [] for i in range(3)}
    for t, rows in enumerate(plan):
        rows = np.array(rows)
        before = [s.clone() for s in state]
        inputs = [obs[t][rows], zero_r[rows], zero_a[rows], torch.tensor([t == 0] * len(rows))]
        _, logits, state = evaluate.act_on_rows(model, state, rows, inputs, sample=False)
        for k, i in enumerate(rows):
            got[int(i)].append(logits[k])
        for s, b in zip(state, before):
            skipped = np.setdiff1d(np.arange(3), rows)
            assert torch.equal(s[skipped], b[skipped])
    for i in range(3):
        alone, want = model.initial_state(1), []
        for t, rows in enumerate(plan):
            if i in rows:
                _, logits, alone = model.act(obs[t][i:i + 1], zero_r[:1], zero_a[:1], torch.tensor([t == 0]), alone,
                                             sample=False)
                want.append(logits[0])
        assert len(got[i]) == len(want) and all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got[i], want))


def test_the_progress_line_counts_each_checkpoints_games(capsys):
    progress = evaluate.Progress({os.path.abspath("a.pt"): 2, os.path.abspath("b.pt"): 3}, every_s=0.0)
    progress.game_over(os.path.abspath("b.pt"))
    progress.game_over(os.path.abspath("a.pt"))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("games played: a.pt 0/2, b.pt 1/3 (")
    assert lines[1].startswith("games played: a.pt 1/2, b.pt 1/3 (")


def test_protocol_on_atari_matches_independent_replays():
    """A scripted policy (a function of the observation) on Space Invaders: 2 runs x 3 episodes,
    each episode replayed alone in a single-env Atari with the same seed gives the same score."""
    def scripted(obs, reward, action, done, rows=None):
        return obs[:, -1].astype(np.int64).sum(axis=(1, 2)) % 6

    def make_env(n, seed):
        return envs.make("atari", num_envs=n, seed=seed, game="SpaceInvaders", max_episode_frames=400)

    out = run_protocol(make_env, lambda run: scripted, runs=2, episodes=3, seed=5)
    for r, result in enumerate(out):
        assert len(result["scores"]) == 3 and result["lengths"] == [100, 100, 100]
        for i, score in enumerate(result["scores"]):
            env = make_env(1, 5 + r * 3 + i)
            obs, total = env.reset(), 0.0
            while True:
                obs, reward, done, _ = env.step(scripted(obs, None, None, None))
                total += float(reward[0])
                if done[0]:
                    break
            env.close()
            assert score == total
    summary = evaluate.summarize(out)
    means = [np.mean(r["scores"]) for r in out]
    assert summary["mean"] == pytest.approx(np.mean(means)) and summary["std"] == pytest.approx(np.std(means))


def _cell(text: str) -> tuple[float, float]:
    text = re.sub(r"</?b>|\$|\\!|\{,\}|\\textbf\{|\\mathbf|\}|~", "", text)
    mean, std = text.replace("\\pm", "±").replace(",", "").replace(" ", "").split("±")
    return float(mean), float(std)


def parse_appendix(text: str) -> dict[int, dict[str, dict[str, tuple[float, float]]]]:
    """Tables 9 and 10 out of the appendix's text, in ``PAPER_SCORES``'s layout: the reference the
    typed table is checked against."""
    out: dict[int, dict[str, dict[str, tuple[float, float]]]] = {}
    for step, label in TABLE_OF_STEP.items():
        table: dict[str, dict[str, tuple[float, float]]] = {}
        for line in text[text.index(label + ":"):].split("\n")[1:]:
            parts = line.split("\t")
            if parts[0] in TABLE_ROWS and len(parts) == 1 + len(TABLE_COLUMNS):
                table[TABLE_ROWS[parts[0]]] = {k: _cell(v) for k, v in zip(TABLE_COLUMNS, parts[1:])}
            if len(table) == len(TABLE_ROWS):
                break
        out[step] = table
    return out


def test_paper_scores_are_the_appendix_tables():
    assert len(PAPER_SCORES[50_000_000]) == len(PAPER_SCORES[200_000_000]) == 20
    assert PAPER_SCORES[50_000_000]["Alien"]["delta"] == (4704, 452)
    assert PAPER_SCORES[200_000_000]["Qbert"]["rec_delta"] == (987275, 0)
    assert PAPER_SCORES[200_000_000]["Robotank"]["linear"] == (7.7, 0.9)
    with open(TABLES) as f:
        assert parse_appendix(f.read()) == PAPER_SCORES


def _result(game, core, step, mean, std):
    return {"game": game, "core": core, "step": step, "mean": mean, "std": std, "policy": "argmax",
            "runs": 5, "episodes": 150}


def test_markdown_layout():
    results = [_result("Pong", "delta", 50_000_000, 20.5, 0.25), _result("Alien", "lstm", 50_000_000, 1234.4, 56.0),
               _result("Alien", "delta", 200_000_000, 15000.0, 1000.0),
               _result("Breakout", "delta_lstm", 50_000_000, 3, 1),
               _result("Pong", "delta", 1234, -21.0, 0.0)]
    text = evaluate.markdown(results)
    sections = text.split("### ")[1:]
    assert [s.splitlines()[0] for s in sections] == ["1,234 steps", "50M steps (Table 9)", "200M steps (Table 10)"]
    table9 = sections[1]
    assert "| Game | LSTM | Delta Net | delta_lstm |" in table9
    rows = [line for line in table9.splitlines() if line.startswith("| ") and "Game" not in line and "---" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["Alien", "Pong", "Breakout"]  # the tables' order first
    assert "| Alien | 1,234 ± 56 (846 ± 81) | — (4,704 ± 452) | — |" in table9  # std with its mean's decimals
    assert "| Pong | — (21.0 ± 0.0) | 20.5 ± 0.2 (21.0 ± 0.0) | — |" in table9
    assert "15,000 ± 1,000 (15,133 ± 1,122)" in sections[2]
    assert "(" not in sections[0].split("\n", 3)[3]  # no paper figures at other steps
    assert paper_step(50_001_600) == 50_000_000 and paper_step(40_000_000) is None


def test_atari_means_have_their_human_normalised_score_and_atari5_its_median_estimate():
    """Beside each Atari mean, (mean - random) / (human - random) (envs.atari_scores); under the
    table, Atari-5's estimate for a core scored on all five of its games: at the human scores,
    10 ** (sum of the weights * log10(101)) - 1 = 85.05%."""
    human = {"BattleZone": 37187.5, "DoubleDunk": -16.4, "NameThisGame": 8049.0, "Phoenix": 7242.6, "Qbert": 13455.0}
    results = [{**_result(game, "lstm", 1000, score, 0.0), "env": "atari"} for game, score in human.items()]
    results += [{**_result("Pong", "lstm", 1000, -3.05, 0.5), "env": "atari"},  # halfway: random -20.7, human 14.6
                {**_result("Qbert", "delta", 1000, 163.9, 0.0), "env": "atari"},  # random; Delta Net lacks four games
                {**_result("Adventure", "lstm", 1000, 5.0, 0.0), "env": "atari"}]  # not among the 57
    text = evaluate.markdown(results)
    assert "| Pong | -3.05 ± 0.50 [50%] | — |" in text
    assert "| Qbert | 13,455 ± 0 [100%] | 164 ± 0 [0%] |" in text
    assert "| Adventure | 5.00 ± 0.00 | — |" in text
    assert "the mean's human-normalised score in square brackets" in text
    assert text.rstrip().endswith("from the five games' means: LSTM 85%.")
    assert "[" not in evaluate.markdown([{**_result("maze", "lstm", 1000, 56.5, 6.8), "env": "maze"}])
    del results[0]  # BattleZone: no estimate
    assert "Atari-5" not in evaluate.markdown(results)


def test_steps_pick_the_milestone_saved_at_or_just_past_them(tmp_path, capsys):
    """With batch x unroll not dividing 50M, the 50M milestone is saved at the next update."""
    for step in (49_999_360, 50_000_640, 60_000_000, 200_000_000):
        (tmp_path / f"checkpoint-{step}.pt").write_bytes(b"")
    paths = evaluate.expand_targets([str(tmp_path)], [50_000_000, 200_000_000, 100_000_000])
    assert [os.path.basename(p) for p in paths] == ["checkpoint-50000640.pt", "checkpoint-200000000.pt"]
    assert "no checkpoint at step 100,000,000" in capsys.readouterr().err


def test_steps_that_match_no_checkpoint_are_an_error_not_an_empty_table(tmp_path, capsys):
    (tmp_path / "checkpoint-1000.pt").write_bytes(b"")
    with pytest.raises(evaluate.UsageError, match="no checkpoint at --steps 50000"):
        evaluate.expand_targets([str(tmp_path)], [50_000])
    assert "its milestones: 1,000" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        evaluate.main([str(tmp_path), "--steps", "50000", "--out", str(tmp_path / "eval")])
    assert e.value.code == 2 and not (tmp_path / "eval").exists()


def test_a_checkpoint_named_twice_is_scored_once(tmp_path):
    """By its file and by its run directory, or as a milestone hard-linked to checkpoint.pt: one row,
    not two with the same seeds (whose std would count the duplicates)."""
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    run, latest = str(tmp_path), str(tmp_path / "checkpoint.pt")
    assert evaluate.expand_targets([run, latest, run + "/"]) == [latest]
    os.link(latest, tmp_path / "checkpoint-1000.pt")  # as save_checkpoint makes a milestone
    assert evaluate.expand_targets([run, latest]) == [str(tmp_path / "checkpoint-1000.pt")]


def test_the_table_names_its_rows_games_only_for_atari():
    maze = {**_result("maze", "lstm", 50_000, 56.5, 6.8), "env": "maze"}
    assert "| Env | LSTM |" in evaluate.markdown([maze])
    assert "| Game | LSTM |" in evaluate.markdown([{**_result("Pong", "lstm", 50_000, 1, 0), "env": "atari"}])


def test_actions_are_sampled_except_on_atari_unless_asked():
    assert evaluate.samples_actions("maze", None) and evaluate.samples_actions("popgym", None)
    assert not evaluate.samples_actions("atari", None)
    assert evaluate.samples_actions("atari", True) and not evaluate.samples_actions("maze", False)
    assert evaluate.load(["x.pt"]).sample is None
    assert evaluate.load(["x.pt", "--sample"]).sample is True and evaluate.load(["x.pt", "--argmax"]).sample is False
    with pytest.raises(evaluate.ConfigError):
        evaluate.load(["x.pt", "--sample", "--argmax"])


def test_help_names_every_type(capsys):
    with pytest.raises(SystemExit):
        evaluate.make_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "<function" not in text and "Literal['full', 'no_core_state', 'none']" in text


def test_a_maze_checkpoint_scores_above_random_with_the_default_policy(tmp_path):
    """The issue's case, a short lstm run (100K steps). Sampled actions (the maze's default) play
    what the policy learned; random play scores 8.72 (docs/environments.md)."""
    from agents.learning.learner import train
    from launch.maze import ENTRY

    run_dir = tmp_path / "maze-lstm"
    train(ENTRY.load(["--core", "lstm", "--total_steps", "100000", "--run_dir", str(run_dir)]))
    (result,) = evaluate.main([str(run_dir), "--runs", "2", "--episodes", "16", "--workers", "1",
                               "--out", str(tmp_path / "eval")])
    assert result["policy"] == "sample" and result["mean"] > 8.72  # 20-85 over 5 tries


class _CountingModel:
    """Records what the policy hands to ``act``; its state counts the steps since the last reset."""

    action_space = CategoricalActions((3,))

    def __init__(self):
        self.calls = []

    def eval(self):
        return self

    def to(self, device):
        return self

    def initial_state(self, batch_size, device=None):
        import torch
        return (torch.zeros(batch_size),)  # a core state: a tuple of tensors, batch first

    def act(self, obs, reward, action, done, state, sample=False, generator=None):
        import torch
        self.calls.append((state[0].clone(), done.clone(), reward.clone(), action.clone()))
        state = torch.where(done, torch.zeros_like(state[0]), state[0]) + 1
        return torch.zeros(len(obs), dtype=torch.long), None, (state,)

    def env_actions(self, actions):
        return actions


@pytest.mark.parametrize("memory", ["full", "no_core_state", "none"])
def test_memory_ablations_reset_what_they_name(memory):
    """full carries the state from step to step; no_core_state hands act a fresh state every step
    but keeps done, the previous reward and action; none marks every step as an episode's first."""
    model = _CountingModel()
    policy = evaluate.ModelPolicy(model, num_envs=2, memory=memory)
    obs, reward, action = np.zeros((2, 3), np.float32), np.array([0.5, -1.0], np.float32), np.array([2, 1])
    for t in range(3):
        policy(obs, reward, action, np.array([t == 0, False]), np.arange(2))
    states = [c[0].tolist() for c in model.calls]
    dones = [c[1].tolist() for c in model.calls]
    if memory == "full":
        assert states == [[0, 0], [1, 1], [2, 2]] and dones == [[True, False], [False, False], [False, False]]
    elif memory == "no_core_state":
        assert states == [[0, 0]] * 3 and dones == [[True, False], [False, False], [False, False]]
    else:
        assert dones == [[True, True]] * 3
    assert all(c[2].tolist() == [0.5, -1.0] and c[3].tolist() == [2, 1] for c in model.calls)  # the net masks them


def test_memory_ablation_is_checked():
    with pytest.raises(evaluate.ConfigError, match="memory"):
        evaluate.ModelPolicy(_CountingModel(), num_envs=1, memory="amnesia")
    with pytest.raises(evaluate.ConfigError, match="--memory"):
        evaluate.load(["x.pt", "--memory", "amnesia"])


def test_atari_is_scored_with_the_papers_sticky_actions_whatever_it_trained_with(monkeypatch):
    """A run may train without sticky actions (`--env.sticky_action_prob 0`); the evaluation plays the protocol's 0.25
    (``--sticky_action_prob``), and keeps the checkpoint's other options."""
    from launch import atari

    cfg = atari.load(["--env.sticky_action_prob", "0", "--env.noop_max", "7"])
    made = []

    def make(name, num_envs, seed, **options):
        made.append((name, options))
        return CountingEnv(num_envs, seed)

    monkeypatch.setattr(evaluate, "load_agent", lambda path: (_CountingModel(), cfg, {}))
    monkeypatch.setattr(evaluate, "describe", lambda path: {"checkpoint": path, "env": "atari", "game": "Pong",
                                                             "core": "lstm", "step": 0})
    monkeypatch.setattr(envs, "make", make)
    monkeypatch.setattr(evaluate, "_MODELS", {})
    args = evaluate.load(["x.pt", "--runs", "1", "--episodes", "2", "--envs_per_run", "2", "--workers", "1"])
    (result,) = evaluate.evaluate(["x.pt"], args)
    assert len(result["per_run"][0]["scores"]) == 2 and result["env_overrides"] == {"sticky_action_prob": 0.25}
    assert len(made) == 2  # a game each
    for name, options in made:
        assert name == "atari" and options["sticky_action_prob"] == 0.25 and options["noop_max"] == 7
    assert evaluate.load(["x.pt"]).sticky_action_prob == 0.25


@pytest.mark.parametrize("jobs,workers,games,parts", [(1, 2, 30, 2), (5, 2, 30, 2), (4, 2, 30, 1), (3, 2, 30, 2),
                                                      (1, 16, 3, 3), (2, 1, 30, 1), (6, 4, 30, 2)])
def test_runs_are_split_into_the_fewest_parts_that_share_the_workers_evenly(jobs, workers, games, parts):
    assert evaluate.parts_per_run(jobs, workers, games) == parts
    if parts < games:  # the parts keep every worker busy to the end: a whole number of rounds
        assert jobs * parts % workers == 0
    split = evaluate.split_runs(games, parts)
    assert [g for part in split for g in part] == list(range(games))  # every game once, in order
    assert max(map(len, split)) - min(map(len, split)) <= 1


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_a_run_split_into_parts_scores_each_game_as_the_whole_run_does(monkeypatch, parts):
    """Each run of 6 CountingEnv games, played whole or in 2 or 3 parts (one process plays them
    one after another): the same games, seeds, scores and lengths, in the same order."""
    from launch import atari

    cfg = atari.load([])
    played_sizes = []

    def make(name, num_envs, seed, **options):
        return CountingEnv(num_envs, seed)

    class Sized(_CountingModel):
        def initial_state(self, batch_size, device=None):
            played_sizes.append(batch_size)
            return super().initial_state(batch_size, device)

    monkeypatch.setattr(evaluate, "load_agent", lambda path: (Sized(), cfg, {}))
    monkeypatch.setattr(evaluate, "describe", lambda path: {"checkpoint": path, "env": "atari", "game": "Pong",
                                                             "core": "lstm", "step": 0})
    monkeypatch.setattr(envs, "make", make)
    monkeypatch.setattr(evaluate, "_MODELS", {})
    monkeypatch.setattr(evaluate, "parts_per_run", lambda jobs, workers, games: parts)
    args = evaluate.load(["x.pt", "--runs", "2", "--episodes", "12", "--envs_per_run", "6", "--workers", "1",
                          "--seed", "3"])
    (result,) = evaluate.evaluate(["x.pt"], args)
    assert sorted(played_sizes) == sorted([len(p) for p in evaluate.split_runs(6, parts)] * 2)
    for r, run in enumerate(result["per_run"]):
        base = 3 + r * 6  # game i of run r is seeded 3 + r * 6 + i whatever the split
        assert run["run"] == r
        assert run["scores"] == [(base + i) * 10 + k for i in range(6) for k in range(2)]
        assert run["lengths"] == [1 + (base + i + k) % 4 for i in range(6) for k in range(2)]


def test_games_that_step_in_halves_are_all_sent_before_any_is_received():
    """step_each starts every send/recv game's step before it waits on one (so their emulator
    threads play at once), steps the others with step(), and returns the results in order."""
    calls = []

    class Halves:
        def __init__(self, name):
            self.name = name

        def send(self, action):
            calls.append(("send", self.name, int(action[0])))

        def recv(self):
            calls.append(("recv", self.name))
            return self.name

    class Whole:
        def step(self, action):
            calls.append(("step", int(action[0])))
            return "whole"

    out = evaluate.step_each([Halves("a"), Whole(), Halves("b")], [np.array([1]), np.array([2]), np.array([3])])
    assert out == ["a", "whole", "b"]
    assert calls == [("send", "a", 1), ("send", "b", 3), ("recv", "a"), ("step", 2), ("recv", "b")]


def test_video_of_a_checkpoint_whose_config_names_rgb_frames(tmp_path, monkeypatch):
    """A checkpoint's env section holds every Atari option, rgb_frames (false) among them: --video
    still records (it once passed rgb_frames twice), one readable MP4 a game, a frame per step
    and the start."""
    import imageio

    from launch import atari

    cfg = atari.load(["--env.game", "SpaceInvaders"])
    assert "rgb_frames" in vars(cfg.env)
    monkeypatch.setattr(evaluate, "load_agent", lambda path: (_CountingModel(), cfg, {}))
    monkeypatch.setattr(evaluate, "describe", lambda path: {"checkpoint": path, "env": "atari",
                                                             "game": "SpaceInvaders", "core": "ff", "step": 0})
    monkeypatch.setattr(evaluate, "_MODELS", {})
    args = evaluate.load(["x.pt", "--runs", "1", "--episodes", "2", "--workers", "1", "--max_episode_frames", "80",
                          "--video", str(tmp_path)])
    (result,) = evaluate.evaluate(["x.pt"], args)
    assert result["per_run"][0]["lengths"] == [20, 20]
    for game in (0, 1):
        reader = imageio.get_reader(str(tmp_path / "SpaceInvaders-ff-0" / f"game{game:03d}.mp4"), format="FFMPEG")
        frames = np.stack([frame for frame in reader])  # its len() is inf
        reader.close()
        assert frames.shape == (21, 210, 160, 3)
