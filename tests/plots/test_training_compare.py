"""jacond_plots.training.compare with other seeds: the accuracy panel shades the min–max over the
seeds at each evaluation around seed 0's line, and the legend gives the mean of the final accuracies."""

import json

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

from jacond_plots import training  # noqa: E402


def run(directory, accs, seed=0):
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"optimizer": "adamw"}))
    flags = ["--seed", str(seed)] if seed else []
    (directory / "run.json").write_text(json.dumps({"command": ["jacond", "train", *flags, "--out", str(directory)]}))
    lines = ["step,epoch,test_loss,test_acc,train_loss,train_acc"]
    lines += [f"{100 * (i + 1)},0,1.0,{a},1.0,0.5" for i, a in enumerate(accs)]
    (directory / "eval.csv").write_text("\n".join(lines) + "\n")
    return str(directory)


def test_other_seeds_shade_a_min_max_band_and_the_legend_gives_their_mean(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(training, "save", lambda fig, directory, name, formats: figures.append(fig) or [name])
    a = run(tmp_path / "s0", [0.50, 0.70])
    b = run(tmp_path / "s1", [0.40, 0.80], seed=1)
    c = run(tmp_path / "s2", [0.55, 0.63], seed=2)
    training.compare({"skip, adamw": a}, str(tmp_path), seeds={"skip, adamw": [b, c]})
    acc = figures[0].axes[1]
    (band,) = acc.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(ys.min(), 0.40) and np.isclose(ys.max(), 0.80)  # step 100: 0.40–0.55, step 200: 0.63–0.80
    np.testing.assert_allclose(acc.get_lines()[0].get_ydata(), [0.50, 0.70])  # seed 0's line
    legend = [t.get_text() for t in acc.get_legend().get_texts()]
    assert legend == ["skip, adamw (final 0.700; mean of 3 seeds 0.710)"]
    assert "band: min–max over the seeds" in acc.get_title()
    # The caption is the command of every run drawn, the band's seeds too.
    captions = [t.get_text() for t in figures[0].texts]
    assert captions == ["$ jacond train [--seed {1|2}] --out {3 directories}"]


def test_without_other_seeds_there_is_no_band(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(training, "save", lambda fig, directory, name, formats: figures.append(fig) or [name])
    training.compare({"skip, adamw": run(tmp_path / "s0", [0.5, 0.7])}, str(tmp_path))
    acc = figures[0].axes[1]
    assert not acc.collections
    assert [t.get_text() for t in acc.get_legend().get_texts()] == ["skip, adamw (final 0.700)"]
