"""IPython startup file for run_notebooks.sh: records what each figure a notebook shows draws.

run_notebooks.sh copies this into $IPYTHONDIR/profile_default/startup/, so the kernel nbconvert starts
runs it before the notebook's first cell; the notebooks are executed as they are, unmodified. When
JACOND_FIGURE_LOG names a file, every plt.show() first appends one JSON line per open figure to it:

    {"figure": N, "axes": [{"title", "xlabel", "ylabel", "yscale", "lines": [{"label", "x", "y"}]}]}

N counts the figures shown so far (0, 1, ...), "lines" are the axis' Line2D (ax.plot), x and y their data
as floats (null where not numbers). The checks in run_notebooks.sh read the data a figure draws from it
(one line per layer, no zigzag, the median a table also prints) instead of guessing at its PNG.
"""

import json
import os


def _install():
    path = os.environ.get("JACOND_FIGURE_LOG")
    if not path:
        return
    import matplotlib.pyplot as plt
    import numpy as np

    show = plt.show
    shown = [0]

    def floats(values):
        try:
            return [float(v) for v in np.asarray(values, dtype=float).ravel()]
        except (TypeError, ValueError):
            return None

    def axis(ax):
        return {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "yscale": ax.get_yscale(),
                "lines": [{"label": line.get_label(), "x": floats(line.get_xdata()), "y": floats(line.get_ydata())}
                          for line in ax.get_lines()]}

    def recording_show(*args, **kwargs):
        with open(path, "a", encoding="utf-8") as f:
            for number in plt.get_fignums():
                f.write(json.dumps({"figure": shown[0], "axes": [axis(ax) for ax in plt.figure(number).axes]}) + "\n")
                shown[0] += 1
        return show(*args, **kwargs)

    plt.show = recording_show


_install()
