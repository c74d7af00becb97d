"""What every jacond figure shares: the caption, the colours, κ as a plotted number, saving."""

import argparse
import json
import os
import shlex
import sys

import matplotlib

if "ipykernel" not in sys.modules:  # headless files; in a notebook keep its inline backend
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


class PlotError(Exception):
    """Bad or unrecognised input: one line for the user (exit 1 from the command)."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, "PROG: error: MESSAGE", exit 2, as every other
    jacond command's (argparse's own adds its usage text above)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def check_writable_directory(path):
    """Raise PlotError unless `path` can be written: an existing writable directory, or a new path
    whose nearest existing ancestor is one (checked before any work, as the C++ commands do)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise PlotError(f"cannot write to {path}: {p} is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise PlotError(f"cannot write to {path}: {p} is not writable")


# One colour per status and per init, the same in every figure.
STATUS_COLOURS = {
    "exact": "#1b9e77",
    "certified": "#7570b3",
    "bracket": "#d95f02",
    "singular": "#e7298a",
    "not-converged": "#666666",
}
INIT_COLOURS = {"timm": "#1f77b4", "ours": "#d62728", "mimetic": "#2ca02c"}


def read_csv(path):
    """A results table; PlotError naming the file when it is missing, empty or malformed."""
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise PlotError(f"{path}: no such file") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise PlotError(f"{path}: not a CSV table ({str(e).splitlines()[0]})") from None
    if df.empty:
        raise PlotError(f"{path}: no rows")
    return df


def has_rows(path):
    """Whether `path` exists and holds a line after its header."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return bool(f.readline()) and any(line.strip() for line in f)
    except OSError:
        return False


# Columns jacond writes as numbers (an empty cell, nan and inf included): a figure draws them, so a
# value that is not a number is a malformed table, not a point to leave out in silence. (Not `probe`:
# an audit without images writes "none".)
NUMERIC_COLUMNS = {"step", "layer", "seed", "n", "d", "N", "nd", "alpha", "beta", "c", "gamma", "depth", "rows",
                   "rank", "products", "total_s", "test_loss", "test_acc", "train_loss", "train_acc", "density", "slope",
                   "constant", "bound", "upper_bound", "lower_bound", "e_norm", "weyl_lo", "weyl_hi", "norm_dA_dM",
                   "bound_dA_dM", "norm_dA_dX", "alpha_exp_minus_beta", "grad_x_norm", "log10_sigma"}


def is_numeric_column(name):
    return name in NUMERIC_COLUMNS or name.startswith(("kappa", "sigma", "dense_sigma"))


def require_columns(df, path, columns):
    """PlotError naming the file unless it has `columns`; those jacond writes as numbers
    (is_numeric_column) must hold numbers; a `status` column must hold jacond's statuses only, since
    each is drawn differently (an unknown one, say "Exact" or "converged", would be drawn as no status
    at all, or as a κ where only κ ≥ κ_lo is known)."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise PlotError(f"{path}: missing column(s) {', '.join(missing)}")
    for column in filter(is_numeric_column, columns):
        not_a_number = pd.to_numeric(df[column], errors="coerce").isna() & df[column].notna()
        if not_a_number.any():
            first = not_a_number.to_numpy().nonzero()[0][0]
            raise PlotError(f"{path}: line {first + 2} has {column} {df[column].iloc[first]!r} (expected a number)")
    if "status" in df.columns:
        unknown = ~df["status"].isin(list(STATUS_COLOURS))
        if unknown.any():
            first = unknown.to_numpy().nonzero()[0][0]
            raise PlotError(f"{path}: line {first + 2} has status {df['status'].iloc[first]!r} "
                            f"(expected {' | '.join(STATUS_COLOURS)})")


UNKNOWN_COMMAND = "command unknown (no readable run.json or verify.json)"


def command_line(directory):
    """The command that wrote `directory` (the "command" of run.json, or of verify.json for
    `jacond verify`), or a note that it is unknown."""
    for name in ("run.json", "verify.json"):
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                command = json.load(f).get("command")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(command, list):
            return shlex.join(str(a) for a in command)
        if command:
            return str(command)
    return UNKNOWN_COMMAND


def caption(fig, directory, extra=""):
    """The caption line every figure carries: the producing command (and any knobs)."""
    text = "$ " + command_line(directory) + (f"   |   {extra}" if extra else "")
    fig.text(0.005, 0.005, text, fontsize=7, family="monospace", ha="left", va="bottom", wrap=True)


def merged_command(directories):
    """One command line for the runs of a figure that draws several: the flags they share as they
    are, a flag whose value differs as {a|b|…} (its values in order of first appearance), --out as
    {N directories}, a flag only some runs give in brackets ([--seed {1|2}]: the others ran with its
    default), placed after the flag it follows where it appears. When the runs are not one subcommand
    with --flag [value] arguments (another subcommand, a positional argument, a repeated flag, an
    unknown or unparsable command), the first command and "and N more run(s)"."""
    lines = [command_line(d) for d in directories]
    fallback = lines[0] + (f"   |   and {len(lines) - 1} more run(s)" if len(lines) > 1 else "")
    try:
        commands = [shlex.split(line) for line in lines if line != UNKNOWN_COMMAND]
    except ValueError:  # a stored command string with an unbalanced quote
        return fallback
    if len(commands) < len(lines):
        return fallback
    if len(commands) == 1:
        return shlex.join(commands[0])
    flags = [flag_values(c[2:]) for c in commands]
    if any(c[:2] != commands[0][:2] for c in commands) or any(f is None for f in flags):
        return fallback
    merged = [shlex.quote(t) for t in commands[0][:2]]
    for flag in flag_order(flags):
        given = [f[flag] for f in flags if flag in f]
        values = list(dict.fromkeys(given))
        if flag == "--out" and len(values) > 1:
            text = f"--out {{{len(given)} directories}}"
        elif values == [None]:
            text = flag
        else:
            shown = [shlex.quote(v) for v in values if v is not None]
            text = f"{flag} " + (shown[0] if len(values) == 1 else "{" + "|".join(shown) + "}")
            if None in values:  # given as a switch by some runs, with a value by others
                return fallback
        merged.append(text if len(given) == len(flags) else f"[{text}]")
    return " ".join(merged)


def flag_values(tokens):
    """{--flag: value, or None for a switch} of a command's arguments in their order (--flag=value as
    --flag value), or None when one is not a --flag, or a flag is repeated. Without the subcommand's
    option table a switch followed by a value-like token reads as a flag with that value, and a value
    that starts with "--" as a switch: jacond's own commands have neither."""
    values = {}
    i = 0
    while i < len(tokens):
        flag, joined, value = tokens[i].partition("=")
        if not flag.startswith("--") or flag in values:
            return None
        if joined:
            values[flag] = value
            i += 1
            continue
        has_value = i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
        values[flag] = tokens[i + 1] if has_value else None
        i += 2 if has_value else 1
    return values


def flag_order(flags):
    """The flags of several commands in one order: the first command's, then each flag another command
    adds, just before the next of its own flags already placed (at the end where none follows)."""
    order = []
    for command in flags:
        own = list(command)
        for i, flag in enumerate(own):
            if flag not in order:
                following = next((f for f in own[i + 1:] if f in order), None)
                order.insert(order.index(following) if following else len(order), flag)
    return order


def caption_runs(fig, directories):
    """caption() for a figure drawn from several runs: their merged command (merged_command)."""
    fig.text(0.005, 0.005, "$ " + merged_command(directories), fontsize=7, family="monospace", ha="left",
             va="bottom", wrap=True)


def plotted_kappa(df):
    """κ to draw: κ itself, or κ_lo, the only claim (κ ≥ κ_lo), where the row is singular (κ = inf)
    or not converged (its κ column is the solver's last estimate, not κ)."""
    kappa = pd.to_numeric(df["kappa"], errors="coerce").to_numpy(dtype=float)
    lo = pd.to_numeric(df["kappa_lo"], errors="coerce").to_numpy(dtype=float)
    bound = ~np.isfinite(kappa)
    if "status" in df.columns:
        bound |= (df["status"] == "not-converged").to_numpy()
    return np.where(bound, lo, kappa)


def log_median(values):
    """The median of log κ, returned as a κ: 10^median(log10 κ). With an even count it is the geometric
    mean of the two middle values (κ 2 and 1000 give 44.7; pandas' median, their arithmetic mean, 501,
    is decided by the larger alone). A +∞ among the middle values gives +∞; nan values are skipped (as
    pandas' median skips them), and no values give nan. An odd count gives its middle value exactly."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan")
    lo, hi = v[(v.size - 1) // 2], v[v.size // 2]
    if lo == hi:
        return float(lo)
    if lo <= 0:  # no log: √(0·hi) = 0 for a finite hi; a negative value is no κ
        return 0.0 if lo == 0 and np.isfinite(hi) else float("nan")
    return float(lo * np.sqrt(hi / lo))  # √(lo·hi), without overflowing where lo·hi would


def kappa_scale(ax, values, label="κ"):
    """Log y axis where the values span a decade or more (κ usually does), linear otherwise (a log
    axis over 1.02–1.05 only prints 1.03×10⁰ ticks). A log axis whose values hold fewer than two
    powers of ten (150 to 1600: only 10³) is widened to whole decades, so it has two labelled ticks."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and v.max() / v.min() >= 10:
        ax.set_yscale("log")
        ax.set_ylabel(f"{label} (log scale)")
        lo, hi = np.log10(v.min()), np.log10(v.max())
        if np.floor(hi) - np.ceil(lo) < 1:  # fewer than two powers of ten inside: widen to whole decades,
            bottom, top = np.floor(lo), np.ceil(hi)  # with a margin, so that no point sits on the frame
            pad = 0.04 * (top - bottom)
            ax.set_ylim(10 ** (bottom - pad), 10 ** (top + pad))
    else:
        ax.set_ylabel(label)


def cell_edges(centres):
    """Edges of heatmap cells around sorted centres (midpoints; half a step outside), for pcolormesh's
    "flat" shading. One centre gets a cell of width 1 around it: "nearest" shading gives a single
    value no width at all, and the heatmap is blank."""
    c = np.asarray(centres, dtype=float)
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = (c[1:] + c[:-1]) / 2
    return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])


def save(fig, directory, name, formats):
    """DIR/figures/NAME.{png,svg}, each written to a temporary name and renamed (never half-written)."""
    out_dir = os.path.join(directory, "figures")
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for fmt in formats:
        path = os.path.join(out_dir, f"{name}.{fmt}")
        tmp = os.path.join(out_dir, f".{name}.{fmt}.tmp")
        fig.savefig(tmp, format=fmt, dpi=130)
        os.replace(tmp, path)
        paths.append(path)
    plt.close(fig)
    return paths
