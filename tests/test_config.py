"""The typed config: YAML defaults, presets, --config, flags, --help, --print_config, and one-line errors."""
from __future__ import annotations

import os

import pytest
import yaml

from agents.config import apply_presets
from launch import atari, evaluate, maze, supervised, train


def write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_precedence_defaults_presets_config_file_flags(tmp_path):
    cfg = maze.load([])
    assert cfg.core.name == "lstm" and cfg.core.hidden_size == 64  # maze.yaml's lstm preset over fastnet's 256
    assert cfg.optim.lr == 5e-3 and cfg.actor.unroll_length == 10  # ... and over maze.yaml's own sections
    assert cfg.learner.batch_size == 32 and cfg.actor.envs_per_actor == 32
    assert cfg.run.total_steps == 20_000_000 and maze.load(["--core", "delta"]).optim.lr == 3e-3  # maze.yaml
    delta = maze.load(["--core", "delta"])
    assert (delta.core.name, delta.core.hidden_size, delta.core.feature_map) == ("delta", 64, "elu")
    user = write(tmp_path, "core: {hidden_size: 32}\noptim: {lr: 1.0e-3}\nrun: {seed: 3}\n")
    cfg = maze.load(["--core", "delta", "--config", user])  # the file beats the preset ...
    assert (cfg.core.hidden_size, cfg.core.num_layers, cfg.optim.lr, cfg.run.seed) == (32, 1, 1e-3, 3)
    cfg = maze.load(["--config", user, "--core", "delta", "--optim.lr", "5e-4", "--core.hidden_size=48"])
    assert (cfg.core.hidden_size, cfg.optim.lr) == (48, 5e-4)  # ... and flags beat the file
    chosen_in_file = maze.load(["--config", write(tmp_path, "core: {name: mnm_p}\n", "core.yaml")])
    assert chosen_in_file.core.name == "mnm_p" and chosen_in_file.core.memory_size == 32  # its preset applies


def test_a_repeated_selector_flag_takes_the_last(tmp_path):
    """docs/config.md: a later flag wins, the core's name included (its options then follow it)."""
    cfg = maze.load(["--core", "lstm", "--core.hidden_size", "24", "--core", "delta", "--core.num_heads", "2"])
    assert cfg.core.name == "delta" and cfg.core.hidden_size == 24 and cfg.core.num_heads == 2
    assert maze.load(["--core", "delta", "--core.name=lstm"]).core.name == "lstm"
    assert supervised.load(["--task", "dict", "--task", "retrieval2", "--core", "ff"]).task.name == "retrieval2"


def test_short_flags(tmp_path):
    cfg = maze.load(["--core", "delta", "--total_steps", "1000", "--num_actors", "3", "--run_dir", "x",
                     "--device=cpu", "--seed", "4"])
    assert (cfg.core.name, cfg.run.total_steps, cfg.actor.num_actors, cfg.run.run_dir, cfg.run.seed) == \
        ("delta", 1000, 3, "x", 4)
    game = atari.load(["--game", "MsPacman", "--core", "lstm"])
    assert game.env.game == "MsPacman" and game.resolved_run_dir() == "runs/atari-MsPacman-lstm"
    task = supervised.load(["--task", "code3", "--core", "lstm"])
    assert (task.task.name, task.task.bucket, task.optim.lr, task.optim.grad_clip) == ("code3", 8, 3e-3, 0.1)


def test_a_string_flag_is_kept_as_typed():
    """A str (or Optional[str]) flag is not read as YAML: a gym id "123" or "on" stays a string."""
    assert [train.load(["--env.id", v]).env.id for v in ("123", "on", "CartPole-v1", "null")] == \
        ["123", "on", "CartPole-v1", None]
    assert maze.load(["--run_dir", "2024"]).run.run_dir == "2024"


def test_task_presets_nest_core_presets():
    raw = {"optim": {"lr": 1}, "presets": {"task": {"a": {"optim": {"lr": 2}, "presets": {"core": {"x": {
        "optim": {"lr": 3}}}}}}, "core": {"x": {"optim": {"lr": 4}, "core": {"k": 1}}}}}
    assert apply_presets(raw, {"task": "a", "core": "x"}) == {"optim": {"lr": 3}, "core": {"k": 1}}
    assert apply_presets(raw, {"task": "a", "core": "y"}) == {"optim": {"lr": 2}}
    assert apply_presets(raw, {"task": "b", "core": "x"}) == {"optim": {"lr": 4}, "core": {"k": 1}}


def test_retrieval_presets_match_the_paper_setting():
    cfg = supervised.load(["--task", "retrieval1", "--core", "delta"])
    assert (cfg.core.feature_map, cfg.core.dpfp_nu, cfg.train.batch_size, cfg.optim.lr) == ("dpfp", 1, 32, 1e-3)
    assert not hasattr(cfg.task, "setting")  # the task name fixes it
    assert supervised.load(["--task", "retrieval1", "--core", "lstm"]).core.hidden_size == 256


def test_print_config_prints_the_resolved_yaml_that_loads_back(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        maze.load(["--core", "rec_delta", "--optim.lr", "1e-3", "--print_config"])
    assert done.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["core"] == {"name": "rec_delta", "hidden_size": 64, "num_layers": 1, "num_heads": 4,
                               "head_dim": 16, "ff_size": 128, "position_features": 0}
    assert printed["optim"]["lr"] == 1e-3
    again = maze.load(["--config", write(tmp_path, yaml.safe_dump(printed))])
    assert again == maze.load(["--core", "rec_delta", "--optim.lr", "1e-3"])


@pytest.mark.parametrize("module,argv,must_show", [
    (maze, ["--help"], ["--core.hidden_size", "Units per layer (the LSTM's or the GRU's)", "type: int, default: 64",
                        "--optim.lr",
                        "Learning rate", "type: PositiveFloat, default: 0.005", "ff, lstm, gru, lru, linear, delta",
                        "--actor.start_method {fork,spawn,forkserver}", "short forms: "]),
    (maze, ["--core", "mnm_p", "--help"], ["--core.memory_size", "default: 32", "--core.memory_init_gain"]),
    (atari, ["--help"], ["--env.game GAME", "Literal['Adventure',", "MsPacman", "--network.channels",
                         "default: delta"]),
    (supervised, ["--task", "listops10", "--help"], ["--task.bucket", "--task.sublist_prob",
                                                      "retrieval1, retrieval2",
                                                      "--train.select_metric {loss,mse,ppl,token_acc,seq_acc}"]),
    (evaluate, ["--help"], ["--runs RUNS", "per checkpoint (> 0). (type: int, default: 5", "--sample",
                            "RUN_OR_CHECKPOINT"]),
])
def test_help_lists_types_defaults_choices_and_descriptions(module, argv, must_show, capsys):
    with pytest.raises(SystemExit) as done:
        module.main(argv)
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for item in must_show:
        assert " ".join(item.split()) in text, item
    if argv[:2] == ["--core", "mnm_p"]:
        assert "--core.feature_map" not in text and "--core.head_dim" not in text  # exactly mnm_p's options


@pytest.mark.parametrize("module", [maze, atari, supervised])
def test_help_is_wrapped_and_says_what_a_section_flag_takes(module, capsys):
    """No line past 100 characters (Atari's 100+ games were one line of 1,051), and --core reads
    as the core's name, not jsonargparse's "--core CONFIG  Path to a configuration file"."""
    with pytest.raises(SystemExit):
        module.main(["--help"])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100
    assert not any("Path to a configuration file" in line for line in lines)
    assert any(line.split()[:5] == ["--core", "NAME", "Short", "for", "--core.name."] for line in lines)
    assert any(line.split()[:2] == ["--optim", "FILE"] for line in lines)


def test_server_modes_keys_of_old_names_still_read(tmp_path):
    """actor.server_max_batch, server_max_wait_ms, worker_splits and server_side_stream moved to
    actor.server (issue 43): the old flags, YAML files and saved configs read as the new keys."""
    from agents.config import to_dict
    from agents.run_config import config_from_dict

    new = maze.load(["--actor.server.worker_splits", "2", "--actor.server.max_batch", "5"])
    assert maze.load(["--actor.worker_splits", "2", "--actor.server_max_batch=5"]) == new
    assert maze.load(["--config", write(tmp_path, "actor: {worker_splits: 2, server_max_batch: 5}\n")]) == new
    saved = to_dict(new)
    saved["actor"].update(server_max_batch=5, worker_splits=2, server_side_stream=False, server_max_wait_ms=2.0)
    del saved["actor"]["server"]  # as a checkpoint written before the section existed holds it
    assert config_from_dict(saved, "old.pt") == new
    from agents.config import resumable_keys
    from agents.errors import ConfigMismatchError
    from agents.learning.checkpoint import check_same_run

    check_same_run(saved, new, resumable_keys(new), "old.pt")  # the same settings under the new names
    other = maze.load(["--actor.server.worker_splits", "4", "--actor.server.max_batch", "5"])
    with pytest.raises(ConfigMismatchError, match="actor.server.worker_splits 2 -> 4"):
        check_same_run(saved, other, resumable_keys(other), "old.pt")  # not resumable, old name or new


@pytest.mark.parametrize("argv,message", [
    (["--optim.lr", "0"], "--optim.lr: must be > 0, got 0"),
    (["--num_actors", "two"], "--actor.num_actors: expected an integer > 0, got 'two'"),
    (["--run.kernels", "cuda"], "--run.kernels: expected one of 'auto', 'triton', 'reference'; got 'cuda'"),
    (["--network.prev_action", "maybe"], "--network.prev_action: expected true or false, got 'maybe'"),
    (["--optim.lrr", "1"], "unknown option --optim.lrr (did you mean --optim.lr?); valid keys of optim: name, lr"),
])
def test_the_one_line_errors_do_not_read_the_parsers_messages(argv, message, monkeypatch):
    """The checks against the schema come first: with a parser whose every error says nothing
    useful, a bad flag's line is still the one that names it and what is allowed."""
    import jsonargparse

    def garbled(*args, **kwargs):
        raise jsonargparse.ArgumentError(None, "garbled")

    monkeypatch.setattr(jsonargparse.ArgumentParser, "parse_args", garbled)
    from agents.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        maze.load(argv)
    assert message in str(error.value)


@pytest.mark.parametrize("argv,message", [
    (["--loss.aux_loss_weights", "{meta: x}"], "--loss.aux_loss_weights: expected a number, got 'x'"),
    (["--checkpoint.milestones", "[1, 2.5]"], "--checkpoint.milestones: expected an integer, got 2.5"),
    (["--env.wrappers", "[1]"], "--env.wrappers: expected a string, got 1"),
    (["--env.wrappers", "x"], "--env.wrappers: expected a list, got 'x'"),
])
def test_every_field_type_is_checked_and_built_without_the_parser(argv, message, monkeypatch):
    """Mappings, lists and tuples are checked item by item, and every config is built from its
    checked values: with a parser that cannot even be made, the configs (and their errors) come
    out the same, and a saved config reads back equal."""
    import jsonargparse

    from agents.config import to_dict
    from agents.errors import ConfigError
    from agents.run_config import config_from_dict

    argv_ok = ["--loss.aux_loss_weights", "{meta: 1}", "--env.wrappers", "[a.b:C]", "--optim.lr", "1e-3"]
    expected = train.load(argv_ok)

    def refused(*args, **kwargs):
        raise AssertionError("the parser was used")

    monkeypatch.setattr(jsonargparse.ArgumentParser, "__init__", refused)
    cfg = train.load(argv_ok)
    assert cfg == expected and config_from_dict(to_dict(cfg), "test") == cfg
    assert cfg.env.wrappers == ("a.b:C",) and cfg.loss.aux_loss_weights == {"meta": 1.0}
    assert type(cfg.optim.lr) is float and cfg.optim.lr == 1e-3  # YAML reads "1e-3" as a string
    with pytest.raises(ConfigError) as error:
        train.load(argv)
    assert message in str(error.value)


def test_a_saved_config_of_the_wrong_shape_is_one_line(tmp_path):
    """A tuple of fixed length, a string: what the parser used to check, now named by key."""
    from agents.errors import ConfigError

    with pytest.raises(ConfigError, match=r"task.split_fractions: expected a list of 3 items, got \[0.5, 0.5\]"):
        supervised.load(["--task", "lm", "--task.split_fractions", "[0.5, 0.5]"])
    path = write(tmp_path, "run: {run_dir: 2024}\n")
    with pytest.raises(ConfigError, match=f"{path}: run.run_dir: expected a string, got 2024"):
        maze.load(["--config", path])


def _bad_inputs(tmp):
    """(entry point, argv, text the one-line error must contain)."""
    bad_yaml = write(tmp, "optim: {lr: [1, 2\n", "bad.yaml")
    not_mapping = write(tmp, "- 1\n- 2\n", "list.yaml")
    unknown_section = write(tmp, "optimiser: {lr: 1.0}\n", "section.yaml")
    unknown_key = write(tmp, "optim: {learning_rate: 1.0}\n", "key.yaml")
    wrong_type = write(tmp, "actor: {num_actors: two}\n", "type.yaml")
    bad_core = write(tmp, "core: {name: transformer}\n", "core.yaml")
    latin1 = str(tmp / "latin1.yaml")
    with open(latin1, "wb") as f:
        f.write("# café\noptim: {lr: 1.0}\n".encode("latin-1"))
    return [
        (maze, ["--config", bad_yaml], "malformed YAML at line"),
        (maze, ["--config", not_mapping], "top level must be a mapping"),
        (maze, ["--config", unknown_section], "optimiser"),
        (maze, ["--config", unknown_key], "optim.learning_rate"),
        (maze, ["--config", wrong_type], "actor.num_actors"),
        (maze, ["--config", bad_core], "unknown core 'transformer'"),
        (maze, ["--config", str(tmp / "missing.yaml")], "does not exist"),
        (maze, ["--optim", str(tmp / "missing.yaml")], "--optim: the file"),
        (maze, ["--config", latin1], "latin1.yaml: not UTF-8 text; save it as UTF-8"),
        (maze, ["--core", "transformer"], "core.name: unknown core 'transformer'; valid cores: ff, lstm"),
        (maze, ["--optim.learning_rate", "1"], "--optim.learning_rate; valid keys of optim: name, lr"),
        (maze, ["--bogus", "1"], "unknown option --bogus; valid keys: core, run"),
        (maze, ["--total_step", "1"], "unknown option --total_step (did you mean --run.total_steps?)"),
        (maze, ["--resume"], "unknown option --resume (did you mean --run.resume?)"),
        (maze, ["--loss.aux_loss_weights", "5"], "--loss.aux_loss_weights: expected a mapping, got 5"),
        (maze, ["--checkpoint.milestones", "5"], "--checkpoint.milestones: expected a list, got 5"),
        (maze, ["--config", write(tmp, "actor: 5\n", "scalar.yaml")],
         "actor: expected a mapping of the section's keys"),
        (maze, ["--config", write(tmp, "optim: {lrr: 1}\n", "near.yaml")],
         "unknown key optim.lrr (did you mean optim.lr?); valid keys of optim: name, lr"),
        (evaluate, ["x", "--workers", "two"], "--workers: expected an integer, got 'two'"),
        (evaluate, ["x", "--steps", "50000000", "200M"], "--steps: expected an integer, got '200M'"),
        (evaluate, ["x", "--sticky_action_prob=high"], "--sticky_action_prob: expected a number, got 'high'"),
        (evaluate, ["x", "--bogus", "1"], "unknown option --bogus; valid options: --argmax"),
        (evaluate, ["x", "--ddof", "true"], "--ddof: expected one of 0, 1; got 'true'"),
        (maze, ["--optim.lrr", "1"], "unknown option --optim.lrr (did you mean --optim.lr?)"),
        (maze, ["--core", "delta", "--core.memory_size", "3"], "valid keys of core: hidden_size"),
        (maze, ["--core", "lstm", "--core.feature_map", "elu"], "--core.feature_map"),
        (maze, ["--num_actors", "two"], "--actor.num_actors: expected an integer > 0, got 'two'"),
        (maze, ["--seed=-1"], "--run.seed: must be >= 0, got -1"),
        (atari, ["--game", "pong"], "; got 'pong' (did you mean 'Pong'?)"),
        (maze, ["--num_actors", "2.5"], "--actor.num_actors: expected an integer > 0"),
        (maze, ["--optim.lr", "abc"], "--optim.lr: expected a number > 0"),
        (maze, ["--optim.lr", "0"], "--optim.lr: must be > 0, got 0"),
        (maze, ["--optim.lr=-1e-3"], "--optim.lr: must be > 0"),
        (maze, ["--optim.lr"], "--optim.lr: needs a value"),
        (maze, ["--actor.unroll_length", "0"], "--actor.unroll_length: must be > 0"),
        (maze, ["--loss.discount", "1.5"], "--loss.discount: must be in [0, 1], got 1.5"),
        (maze, ["--optim.grad_clip", "-1"], "--optim.grad_clip: must be >= 0"),
        (maze, ["--optim.momentum", "2"], "--optim.momentum: must be in [0, 1), got 2"),
        (maze, ["--optim.momentum", "1"], "--optim.momentum: must be in [0, 1), got 1"),
        (maze, ["--optim.name", "adam", "--optim.beta2", "1"], "--optim.beta2: must be in [0, 1), got 1"),
        (maze, ["--optim.name", "sgd"], "--optim.name: expected one of 'rmsprop', 'adam'; got 'sgd'"),
        (maze, ["--actor.start_method", "thread"], "--actor.start_method"),
        (maze, ["--network.prev_action", "maybe"], "--network.prev_action: expected true or false"),
        (maze, ["--core", "delta", "--core.feature_map", "relu"], "--core.feature_map: expected one of 'elu'"),
        (maze, ["--learner.batch_size", "100"], "learner.batch_size: 100 must be a multiple of actor.envs_per_actor"),
        (maze, ["--learner.minibatches", "256"], "learner.minibatches: 256 must be at most learner.batch_size (32)"),
        (maze, ["--loss.advantages", "gae"], "loss.advantages: gae needs loss.clip"),
        (maze, ["--loss.advantage_statistics", "batch"], "loss.advantage_statistics: batch standardises the"),
        (maze, ["--optim.lr_decay", "false", "--optim.lr_final", "0.1"], "optim.lr_final: 0.1 is the end of a decay"),
        (maze, ["--optim.lr_final", "1.5"], "--optim.lr_final: must be in [0, 1], got 1.5"),
        (supervised, ["--optim.lr_final", "0.1", "--run_dir", "{run_dir}"], "optim.lr_final: 0.1 is the end of"),
        (maze, ["--env.size", "4"], "env: size must be an odd int >= 5"),
        (train, ["--env.id", "NoSuchEnv-v0"], "env: env 'NoSuchEnv-v0' cannot be made: Environment `NoSuchEnv`"),
        (train, ["--env.vectorization", "async"], "env.vectorization: async cannot run in the actors' processes"),
        (train, ["--network.stem", "nature"], "network: the nature stem needs observations [C, H, W], got shape (4,)"),
        (maze, ["--device", "cuda:7" if not _has_cuda() else "tpu"], "--run.device"),
        (maze, ["--device", "tpu"], "--run.device: unknown device 'tpu'"),
        (maze, ["--run.kernels", "cuda"], "--run.kernels: expected one of"),
        (supervised, ["--run.kernels", "fast"], "--run.kernels: expected one of 'auto', 'triton', 'reference'"),
        (atari, ["--game", "Pongg"], "--env.game: expected one of 'Adventure'"),
        (atari, ["--env.sticky_action_prob", "x"], "--env.sticky_action_prob"),
        (supervised, ["--task", "sorting"], "task.name: unknown task 'sorting'; valid tasks: retrieval1"),
        (supervised, ["--task", "dict", "--task.num_keys", "3"], "valid keys of task: sizes, num_pairs, seq_len"),
        (supervised, ["--train.select_metric", "f1"], "--train.select_metric: expected one of"),
        (supervised, ["--train.eval_every", "0"], "--train.eval_every: must be > 0"),
        (supervised, ["--task", "retrieval1", "--task.num_keys", "0", "--run_dir", "{run_dir}"], "task:"),
        (supervised, ["--task", "code3", "--task.num_statements", "1", "--run_dir", "{run_dir}"],
         "task: num_statements must be >= 2"),
        (supervised, ["--task", "lm", "--run_dir", "{run_dir}"], "task: language-model data not found"),
        (evaluate, ["--runs", "0", "x"], "--runs: must be > 0"),
        (evaluate, ["x", "--episodes", "30", "--envs_per_run", "7"], "--envs_per_run: 7 must divide --episodes"),
        (evaluate, [], "RUN_OR_CHECKPOINT"),
    ]


def _has_cuda():
    import torch
    return torch.cuda.is_available()


def _snapshot(directory):
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


def test_bad_input_is_one_line_exit_2_and_leaves_the_run_dir_untouched(tmp_path, capsys):
    """At least 25 malformed inputs: each gives exit code 2 and one line naming the key, and
    the run directory (which holds an earlier run's file) is byte-identical afterwards."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "logs.csv").write_text("step,time\n1,0.5\n")
    before = _snapshot(run_dir)
    cases = _bad_inputs(tmp_path)
    assert len(cases) >= 25
    for module, argv, expected in cases:
        argv = [str(run_dir) if a == "{run_dir}" else a for a in argv]
        if "--run_dir" not in argv and module is not evaluate:
            argv += ["--run_dir", str(run_dir)]
        with pytest.raises(SystemExit) as stop:
            module.main(argv)
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert stop.value.code == 2, (argv, captured.err)
        assert len(lines) == 1 and lines[0].startswith("config error: "), (argv, captured.err)
        assert expected in lines[0], (argv, lines[0])
        assert "Traceback" not in captured.err + captured.out
        assert _snapshot(run_dir) == before, argv


TINY = ["--num_actors", "1", "--actor.envs_per_actor", "8", "--learner.batch_size", "8", "--actor.unroll_length", "5",
        "--log.tensorboard", "false", "--core.hidden_size", "16"]


def test_a_change_that_cannot_survive_a_resume_is_refused(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    maze.main(["--core", "lstm", "--total_steps", "80", "--run_dir", run_dir, *TINY])
    before = _snapshot(run_dir)
    for change in (["--core.hidden_size", "32"], ["--optim.lr", "1e-2"], ["--seed", "1"], ["--env.size", "11"]):
        with pytest.raises(SystemExit) as stop:
            maze.main(["--core", "lstm", "--total_steps", "80", "--run_dir", run_dir, *TINY, *change])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1 and "belongs to a run with other settings" in err[0]
        assert change[0].lstrip("-").split(".")[-1] in err[0]
        assert _snapshot(run_dir) == before
    with pytest.raises(SystemExit) as stop:  # another core has other keys altogether
        maze.main(["--core", "delta", "--total_steps", "80", "--run_dir", run_dir, *TINY])
    assert stop.value.code == 2 and "core.name 'lstm' -> 'delta'" in capsys.readouterr().err
    # what may change on resume: the budget, actors, logging
    summary = maze.main(["--core", "lstm", "--total_steps", "160", "--run_dir", run_dir, *TINY, "--num_actors", "2",
                         "--log.print_every_s", "100"])
    assert summary["step"] == 160


@pytest.mark.parametrize("launcher", [maze, atari])
def test_the_defaults_pass_the_checks_with_a_cuda_learner(launcher):
    """Each launcher's defaults also pass the cross-field checks on CUDA, where ``inference: auto`` is
    the server (Atari's 48 actors with one game each failed them while worker_splits defaulted to 2)."""
    from agents.run_config import check_config

    cfg = launcher.load([])
    check_config(cfg, "cuda")
    assert cfg.actor.inference_mode("cuda") == ("server" if launcher is atari else "actor")
