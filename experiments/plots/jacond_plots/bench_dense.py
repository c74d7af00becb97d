"""`jacond bench dense` (bench_dense.csv + run.json): time and κ agreement of every route.

Left: seconds per route against N = n·d (log-log; forward + assembly + κ, the best of --repeat).
Right: each route's relative κ difference from its reference (the CPU exact route for the mixed
and device routes, PyTorch for jacond's exact and full-spectrum routes when it ran), with the
benchmark's tolerance max(1e-6, 45·eps·κ) (experiments/bench/bench_dense.h). A route whose κ
did not converge is marked at the top of the right panel.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import caption, read_csv, require_columns, save

COLUMNS = ["N", "route", "total_s", "kappa", "status"]
EPS = np.finfo(float).eps
MARKERS = ["o", "s", "D", "^", "v", "P", "X"]


def reference_difference(df):
    """Per row: (relative κ difference, what it is against) or (nan, '')."""
    diffs, against = [], []
    for _, r in df.iterrows():
        v, what = np.nan, ""
        for col, name in (("kappa_rel_diff_vs_cpu_exact", "cpu exact"), ("kappa_rel_diff_vs_torch", "torch")):
            if col in df.columns and pd.notna(r.get(col)) and str(r.get(col)) != "":
                v, what = float(r[col]), name
                break
        diffs.append(v)
        against.append(what)
    return np.array(diffs, dtype=float), against


def plot(directory, formats):
    path = f"{directory}/bench_dense.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    df = df.sort_values("N")
    diffs, against = reference_difference(df)
    df = df.assign(diff=diffs, against=against)

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (route, sub) in enumerate(df.groupby("route", sort=False)):
        style = {"marker": MARKERS[i % len(MARKERS)], "color": colours[i % len(colours)]}  # one per route, both panels
        left.plot(sub["N"], sub["total_s"], label=route, **style)
        gave_up = sub[sub["status"] == "not-converged"]
        if not gave_up.empty:  # the time it took to give up, not to answer
            left.scatter(gave_up["N"], gave_up["total_s"], marker=style["marker"], facecolors="white",
                         edgecolors=style["color"], zorder=3)
        ok = sub[np.isfinite(sub["diff"]) & (sub["diff"] > 0)]
        if not ok.empty:
            right.scatter(ok["N"], ok["diff"], label=f"{route} vs {ok['against'].iloc[0]}", **style)
        failed = sub[sub["status"] == "not-converged"]
        if not failed.empty:
            right.scatter(failed["N"], np.full(len(failed), 1.0), marker=style["marker"], facecolors="none",
                          edgecolors=style["color"], label=f"{route}: not-converged (drawn at 1)")
    exact = df[df["route"] == "jacond-exact-kappa"]
    if not exact.empty:
        kappa = pd.to_numeric(exact["kappa"], errors="coerce")
        right.plot(exact["N"], np.maximum(1e-6, 45 * EPS * kappa), "k--", marker="_", ms=14, lw=1,
                   label="tolerance max(1e-6, 45·eps·κ)")
    left.set(xscale="log", yscale="log", xlabel="N = n·d (K_sa is N × N)", ylabel="seconds (best of --repeat)",
             title="time per route (hollow: not-converged, the time to give up)")
    right.set(xscale="log", yscale="log", xlabel="N = n·d", ylabel="|κ − κ_ref| / κ_ref",
              title="κ agreement with the reference route")
    for ax in (left, right):
        ax.grid(which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "bench_dense", formats)
