#!/usr/bin/env python3
"""Plot the output of `jacond spectrum --out DIR`: a histogram of log10 sigma for a dense
spectrum (DIR/spectrum.csv) or the SLQ density per unit log10 sigma (DIR/density.csv).
Several DIRs overlay (labelled by their run.json matrix/skip). Run with /usr/bin/python3.
Usage: plot_spectrum.py OUT.png DIR [DIR ...]"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def label_of(d: str) -> str:
    try:
        with open(os.path.join(d, "run.json")) as f:
            meta = json.load(f)
        src = meta.get("init") or meta.get("source", "?")
        return f"{meta.get('matrix', '?')} {src} skip={meta.get('skip', '?')} ({meta['result']['method']})"
    except (OSError, KeyError, ValueError):
        return os.path.basename(os.path.normpath(d))


def main(png: str, dirs: list) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    for d in dirs:
        dense = os.path.join(d, "spectrum.csv")
        slq = os.path.join(d, "density.csv")
        if os.path.exists(dense):
            sigma = np.genfromtxt(dense, delimiter=",", names=True)["sigma"]
            sigma = sigma[sigma > 0]
            ax.hist(np.log10(sigma), bins=40, density=True, histtype="step", label=label_of(d))
        elif os.path.exists(slq):
            t = np.genfromtxt(slq, delimiter=",", names=True)
            ax.plot(t["log10_sigma"], t["density"], label=label_of(d))
        else:
            sys.exit(f"plot_spectrum.py: {d} has neither spectrum.csv nor density.csv")
    ax.set_xlabel("log10 sigma")
    ax.set_ylabel("density per unit log10 sigma")
    ax.legend(fontsize=8)
    fig.savefig(png, dpi=130)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
