"""The plotting scripts draw the logged numbers (checked on the figure before it is saved)."""
import importlib
import json

import matplotlib.colors
import matplotlib.figure
import matplotlib.image
import pytest
import yaml

from agents.learning.logger import Logger, read_csv


def load_script(name):
    return importlib.import_module(f"launch.{name}")


@pytest.fixture
def saved_figures(monkeypatch):
    """Record every figure that is saved, with the data of each of its lines."""
    figures = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, path, **kw):
        figures.append({"path": str(path), "lines": [
            [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()]
            for ax in fig.axes],
            "colors": [[matplotlib.colors.to_hex(ln.get_color()) for ln in ax.get_lines()] for ax in fig.axes]})
        original(fig, path, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return figures


def write_run(run_dir, rows):
    logger = Logger(str(run_dir), tensorboard=False)
    for step, metrics in rows:
        logger.log(step, metrics)
    logger.close()


def test_plot_gives_each_of_many_runs_its_own_colour(tmp_path, saved_figures):
    """Past matplotlib's 10 default colours, runs would share one; up to 20 they do not."""
    runs = [tmp_path / f"run{i}" for i in range(12)]
    for i, run in enumerate(runs):
        write_run(run, [(100, {"mean_return": float(i)}), (200, {"mean_return": float(i)})])
    load_script("plot").plot([str(r) for r in runs], ["mean_return"], str(tmp_path / "many.png"))
    (colors,) = saved_figures[0]["colors"]
    assert len(colors) == 12 and len(set(colors)) == 12


def test_plot_draws_each_metric_of_each_run(tmp_path, saved_figures):
    write_run(tmp_path / "maze-lstm", [(100, {"mean_return": 1.0, "sps": 10.0}), (200, {"mean_return": 3.0})])
    write_run(tmp_path / "maze-delta", [(100, {"mean_return": 2.0})])
    out = tmp_path / "curves.png"
    load_script("plot").main([str(tmp_path / "maze-lstm"), str(tmp_path / "maze-delta"),
                              "--metric", "mean_return", "--metric", "sps", "-o", str(out)])
    assert out.stat().st_size > 1000
    (fig,) = saved_figures
    returns, sps = fig["lines"]
    assert returns == [("maze-lstm", [100.0, 200.0], [1.0, 3.0]), ("maze-delta", [100.0], [2.0])]
    assert sps == [("maze-lstm", [100.0], [10.0])]          # rows without the metric are skipped


def test_supervised_curves_against_steps_or_minutes(tmp_path, saved_figures):
    run = tmp_path / "run"
    write_run(run, [(10, {"train/loss": 5.0}), (20, {"valid/seq_acc": 0.25}), (40, {"valid/seq_acc": 0.5})])
    times = [r["time"] for r in read_csv(str(run / "logs.csv"))][1:]
    plot_supervised = load_script("plot_supervised")
    for x in ("step", "time"):
        plot_supervised.main(["curves", f"lstm={run}", "--metric", "valid/seq_acc", "--x", x,
                              "--out", str(tmp_path / f"{x}.png")])
    (_, steps, accs), = saved_figures[0]["lines"][0]
    (_, minutes, _), = saved_figures[1]["lines"][0]
    assert steps == [20.0, 40.0] and accs == [0.25, 0.5]
    assert minutes == pytest.approx([t / 60 for t in times])


def test_capacity_plots_final_valid_loss_against_num_keys(tmp_path, saved_figures):
    for S, loss in ((40, 1e-4), (20, 1e-5), (80, 0.1)):
        run = tmp_path / f"elu_S{S}"
        run.mkdir()
        (run / "results.json").write_text(json.dumps({"valid": {"loss": loss}, "steps": 5, "stop_reason": "x"}))
        (run / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "retrieval1", "num_keys": S}}))
    load_script("plot_supervised").main(["capacity", f"elu={tmp_path}/elu_S*", "--out", str(tmp_path / "c.png")])
    (label, xs, ys), = saved_figures[0]["lines"][0][:1]
    assert label == "elu" and xs == [20, 40, 80] and ys == [1e-5, 1e-4, 0.1]


@pytest.mark.parametrize("argv", [["plot", "{missing}"], ["plot", "{run}", "--metric", "mean_retrun"],
                                  ["plot_supervised", "curves", "x={missing}", "--out", "{tmp}/x.png"],
                                  ["plot_supervised", "curves", "x={run}", "--metric", "valid/nope",
                                   "--out", "{tmp}/x.png"],
                                  ["plot_supervised", "capacity", "x={missing}*", "--out", "{tmp}/x.png"]])
def test_plots_refuse_a_missing_run_or_an_unknown_metric_in_one_line(tmp_path, capsys, argv):
    """Exit code 2 and one line on stderr that names the problem, and no figure written."""
    write_run(tmp_path / "run", [(100, {"mean_return": 1.0})])
    script, *args = argv
    args = [a.format(missing=tmp_path / "no-such-run", run=tmp_path / "run", tmp=tmp_path) for a in args]
    with pytest.raises(SystemExit) as e:
        load_script(script).main(args)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: ")
    assert ("no-such-run" in err) or ("mean_retrun" in err and "mean_return" in err) or ("valid/nope" in err)
    assert not list(tmp_path.rglob("*.png"))


def test_plot_supervised_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        load_script("plot_supervised").main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "::" not in text and "--metric valid/seq_acc --x time" in text


def test_plot_writes_into_the_first_run_by_default_at_the_dpi_asked(tmp_path, capsys, saved_figures):
    write_run(tmp_path / "a", [(100, {"mean_return": 1.0})])
    write_run(tmp_path / "b", [(100, {"mean_return": 2.0})])
    plot = load_script("plot")
    plot.main([str(tmp_path / "a"), str(tmp_path / "b")])
    out = tmp_path / "a" / "curves.png"
    assert saved_figures[0]["path"] == str(out) and f"wrote {out}" in capsys.readouterr().out
    small, large = tmp_path / "small.png", tmp_path / "large.png"
    plot.main([str(tmp_path / "a"), "--dpi", "40", "-o", str(small)])
    plot.main([str(tmp_path / "a"), "--dpi", "160", "-o", str(large)])
    width = {p: matplotlib.image.imread(str(p)).shape[1] for p in (small, large)}
    assert width[large] == pytest.approx(4 * width[small], rel=0.05)
