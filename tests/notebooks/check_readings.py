"""How the executed notebooks read κ: run_notebooks.sh WORK's second set of checks.

    check_readings.py WORK SOURCE

WORK is run_notebooks.sh's work directory (executed notebooks in WORK/executed, the figures each one
showed in WORK/figures/NAME.jsonl, written by record_figures.py), SOURCE the source tree (its
jacond_plots for the list of statuses). Prints each failure and exits 1 if there is one.

- sweep on the synthetic sweep-two-seeds (2 seeds; K_sa 40 everywhere but for a few cells): the table,
  the lines and the verdict take the median of log10 κ over the κ the heatmap draws (κ_lo for singular
  and not-converged seeds), as the heatmap does: seeds (2, 1000) read 44.7, not pandas' 501; the
  verdict near (2, 0.6, 3) is "not highly sensitive" at ratio 44.7 / 40; cells with a singular or a
  not-converged seed are flagged as lower bounds ("≥", "sing.").
- training_audit on a run tracked at 2 probe images (K_sa, K_sab, softmax per head, full and complement
  spaces): the tracked-conditioning figure has one axis per matrix of conditioning.csv, the softmax
  included, and one line per layer over increasing steps (no zigzag through probes or spaces), each
  point the median of log κ over probes (and heads) on one space; the same for the audit's K_sa on the
  full space in the data-dependent panel.
- audit_your_checkpoint's data-dependent table shows the softmax rows it asked for.
- every notebook's prose that lists the statuses names all of them.
- python_api's prose says what one row of jacond.audit is, and no two rows of its table share that key.
"""

import json
import math
import os
import re
import sys
from html.parser import HTMLParser

import numpy as np
import pandas as pd

WORK, SOURCE = sys.argv[1], sys.argv[2]
EXECUTED = os.path.join(WORK, "executed")
sys.path.insert(0, os.path.join(SOURCE, "experiments", "plots"))
from jacond_plots.common import STATUS_COLOURS  # noqa: E402  jacond's statuses

failures = []


def notebook(name):
    return json.load(open(os.path.join(EXECUTED, name + ".ipynb"), encoding="utf-8"))


def outputs(name):
    return [o for c in notebook(name)["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


def text(outs):
    return "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outs)


class Tables(HTMLParser):
    """The cells' texts of each <table> (a DataFrame's text/html), row by row."""

    def __init__(self):
        super().__init__()
        self.tables, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def tables(output):
    parser = Tables()
    parser.feed("".join(output.get("data", {}).get("text/html", "")))
    return parser.tables


def figures(name):
    path = os.path.join(WORK, "figures", name + ".jsonl")
    return [json.loads(line) for line in open(path, encoding="utf-8")] if os.path.exists(path) else []


def number(text):
    """float(text), or nan where the cell reads something else (the check then fails naming what it read)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def close(a, b, rtol=1e-6):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rtol)


def log_median(values):
    """The median of log10 κ as a κ (here, independently of jacond_plots.common.log_median)."""
    v = np.log10(np.asarray(values, dtype=float))
    return float(10 ** np.median(v)) if v.size else float("nan")


# --- sweep on the synthetic 2-seed sweep (tests/notebooks/sweep-two-seeds) ---------------------------------------
name = "sweep-two-seeds"
if not os.path.exists(os.path.join(EXECUTED, name + ".ipynb")):
    failures.append(f"{name}: not executed")
else:
    # The table printed after each "c = X:" line: {c: rows of cells' texts}.
    pivots, c = {}, None
    for o in outputs(name):
        for m in re.finditer(r"^c = ([\d.]+):", "".join(o.get("text", "")), re.M):
            c = float(m.group(1))
        found = tables(o)
        if found and c is not None and c not in pivots:
            pivots[c], c = found[0], None

    def cell(table, alpha, beta):
        head = table[0]  # alpha, then the alphas; the rows: beta, then the cells
        columns = [i for i, h in enumerate(head) if re.fullmatch(r"-?[\d.]+", h) and math.isclose(float(h), alpha)]
        rows = [r for r in table if r and re.fullmatch(r"-?[\d.]+", r[0]) and len(r) == len(head)
                and math.isclose(float(r[0]), beta)]
        return rows[0][columns[0]] if rows and columns else None

    if set(pivots) != {1.0, 3.0}:
        failures.append(f"{name}: tables of median kappa for c = {sorted(pivots)}, expected c = 1 and 3")
    if 3.0 in pivots:
        for alpha in (1.5, 2.0, 2.5):
            for beta in (0.1, 0.6, 1.1):
                want = "44.7" if (alpha, beta) == (2.0, 0.6) else "40"
                got = cell(pivots[3.0], alpha, beta)
                if got != want:
                    failures.append(f"{name}: the table at c = 3, alpha {alpha:g}, beta {beta:g} reads {got!r}, expected {want!r} "
                                    "(the median of log10 kappa over seeds, as the heatmap: seeds 2 and 1000 give 44.7)")
    if 1.0 in pivots:
        got = cell(pivots[1.0], 1.5, 0.1) or ""
        if not (got.startswith("≥") and "sing." in got):
            failures.append(f"{name}: the cell with a singular seed (c = 1, alpha 1.5, beta 0.1) reads {got!r}, "
                            "not flagged as a lower bound with a singular seed ('≥ ... sing.')")
        got = cell(pivots[1.0], 2.5, 1.1) or ""
        if not (got.startswith("≥") and "sing." not in got and close(number(got.lstrip("≥ ")), 63.2, 1e-3)):
            failures.append(f"{name}: the cell with a not-converged seed (c = 1, alpha 2.5, beta 1.1) reads {got!r}, "
                            "expected '≥ 63.2' (its kappa_lo 100 in the median, a lower bound)")
        got = cell(pivots[1.0], 2.0, 0.6)
        if got != "40":
            failures.append(f"{name}: the plain cell (c = 1, alpha 2, beta 0.6) reads {got!r}, expected '40'")
    t = text(outputs(name))
    verdict = re.search(r"verdict: (.*)", t)
    ratio = re.search(r"\(ratio ([\d.e+-]+)\)", t)
    if not verdict or not verdict.group(1).startswith("not highly sensitive"):
        failures.append(f"{name}: verdict {verdict.group(1) if verdict else None!r}, expected 'not highly sensitive' "
                        "(one seed of two at kappa 2 and 1000 among kappa 40: a geometric middle of 44.7)")
    if not ratio or not close(float(ratio.group(1)), math.sqrt(2 * 1000) / 40, 0.01):
        failures.append(f"{name}: verdict ratio {ratio.group(1) if ratio else None}, expected 44.7 / 40 = 1.12")
    # kappa against beta, one line per alpha: the table's medians.
    want = {(3.0, 2.0): [40, math.sqrt(2 * 1000), 40], (1.0, 1.5): [math.sqrt(40 * 1e14), 40, 40],
            (1.0, 2.5): [40, 40, math.sqrt(40 * 100)]}
    axes = {float(a["title"].split()[2]): a for f in figures(name) for a in f["axes"] if re.match(r"c = [\d.]+", a["title"])}
    for (c, alpha), ys in want.items():
        line = [l for l in axes.get(c, {"lines": []})["lines"] if l["label"] == f"α = {alpha:g}"]
        got = dict(zip(line[0]["x"], line[0]["y"])) if line else {}
        if [got.get(b) is not None and close(got.get(b), y) for b, y in zip((0.1, 0.6, 1.1), ys)] != [True] * 3:
            failures.append(f"{name}: the line alpha {alpha:g} at c = {c:g} draws {[got.get(b) for b in (0.1, 0.6, 1.1)]}, "
                            f"expected the medians {[round(y, 4) for y in ys]}")

# --- training_audit on a run tracked at 2 probes ---------------------------------------------------------------------
name = "training_audit"


def check_lines(where, ax, rows, over):
    """ax draws one line per layer of `rows` (one matrix, one space), over increasing steps, each point the median of
    log kappa over `over` of the plotted kappa (kappa_lo where singular or not-converged)."""
    kappa = np.where(~np.isfinite(rows["kappa"]) | (rows["status"] == "not-converged"), rows["kappa_lo"], rows["kappa"])
    rows = rows.assign(drawn=kappa)
    lines = {l["label"]: l for l in ax["lines"]}
    layers = sorted(rows["layer"].unique())
    if sorted(lines) != sorted(f"layer {layer}" for layer in layers):
        failures.append(f"{where}: lines {sorted(lines)}, expected one per layer {layers}")
    for layer, g in rows.groupby("layer"):
        line = lines.get(f"layer {layer}")
        if line is None:
            continue
        expected = g.groupby("step")["drawn"].agg(log_median)
        if line["x"] != [float(s) for s in expected.index]:
            failures.append(f"{where}: layer {layer}'s line runs through steps {line['x']}, expected {list(expected.index)} "
                            f"once each (one point per step: the median over {over})")
        elif not all(close(y, e, 1e-9) for y, e in zip(line["y"], expected)):
            failures.append(f"{where}: layer {layer}'s line draws {line['y']}, expected the median of log kappa over {over} "
                            f"{list(expected)}")


shown = figures(name)
cond = pd.read_csv(os.path.join(WORK, "run", "conditioning.csv"), dtype={"head": str, "probe": str})
if cond["probe"].nunique() < 2:
    failures.append(f"{name}: the run's conditioning.csv has {cond['probe'].nunique()} probe, the check needs 2 (--probe-size 2)")
if len(shown) < 3:
    failures.append(f"{name}: {len(shown)} figures shown, expected 3 (loss, tracked conditioning, data-dependent and -free)")
else:
    tracked = shown[1]["axes"]
    matrices = list(dict.fromkeys(cond["matrix"]))
    titled = [a["title"].split()[0] if a["title"] else "" for a in tracked]
    if sorted(titled) != sorted(matrices):
        failures.append(f"{name}: the tracked-conditioning figure has axes {titled}, expected one per matrix of "
                        f"conditioning.csv {matrices}")
    for ax in tracked:
        m = ax["title"].split()[0] if ax["title"] else ""
        sub = cond[cond["matrix"] == m]
        if sub.empty:
            continue
        whole = sub["head"].isin(["all", "-1"])
        sub = sub[whole] if whole.any() else sub
        spaces = [s for s in dict.fromkeys(sub["space"]) if s != "full"] or ["full"]
        if spaces[0] not in ax["title"]:
            failures.append(f"{name}: the {m} panel's title {ax['title']!r} does not name the space it draws ({spaces[0]})")
        over = "probes" + ("" if whole.any() else " and heads")
        if "median of log" not in ax["ylabel"] + ax["title"] or over not in ax["ylabel"] + ax["title"]:
            failures.append(f"{name}: the {m} panel does not say its points are the median of log kappa over {over} "
                            f"(label {ax['ylabel']!r})")
        check_lines(f"{name}: tracked {m} ({spaces[0]})", ax,
                    sub[(sub["space"] == spaces[0]) & (sub["status"] != "not-converged")], over)
    audit = pd.read_csv(os.path.join(WORK, "audit", "audit.csv"), dtype={"head": str, "probe": str})
    left = shown[2]["axes"][0]
    if "full" not in left["ylabel"] + left["title"]:
        failures.append(f"{name}: the data-dependent panel does not name its space (label {left['ylabel']!r})")
    check_lines(f"{name}: data-dependent K_sa (full)", left, audit[(audit["matrix"] == "K_sa") & (audit["space"] == "full")],
                "probes")

# --- audit_your_checkpoint: the softmax rows it asked for ------------------------------------------------------------
name = "audit_your_checkpoint"
if os.path.exists(os.path.join(EXECUTED, name + ".ipynb")):
    shown_rows = [r for o in outputs(name) for t in tables(o) if t and "matrix" in t[0] and "kappa_lo" in t[0] for r in t[1:]]
    column = next((t[0].index("matrix") for o in outputs(name) for t in tables(o) if t and "matrix" in t[0] and "kappa_lo" in t[0]), None)
    if column is None or not any(len(r) > column and r[column] == "softmax" for r in shown_rows):
        failures.append(f"{name}: the data-dependent audit table shows no softmax row (--matrices asked for softmax; "
                        "its rows are per head)")

# --- prose: a list of the statuses names them all -------------------------------------------------------------------
for path in sorted(os.listdir(os.path.join(SOURCE, "notebooks"))):
    if not path.endswith(".ipynb"):
        continue
    nb = json.load(open(os.path.join(SOURCE, "notebooks", path), encoding="utf-8"))
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] != "markdown":
            continue
        named = {s for s in STATUS_COLOURS if f"`{s}`" in "".join(c["source"])}
        if len(named) >= 3 and named != set(STATUS_COLOURS):
            failures.append(f"{path} cell [{i}]: its list of statuses leaves out {sorted(set(STATUS_COLOURS) - named)}")

# --- python_api: one row per what its prose says ---------------------------------------------------------------------
name = "python_api"
if os.path.exists(os.path.join(EXECUTED, name + ".ipynb")):
    cells = notebook(name)["cells"]
    said = [(i, re.search(r"one row per \(([^)]*)\)", "".join(c["source"]))) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
    said = [(i, m) for i, m in said if m]
    if not said:
        failures.append(f"{name}: the prose no longer says what one row of jacond.audit is ('one row per (...)')")
    for i, m in said:
        key = [{"image": "probe"}.get(k.strip(), k.strip()) for k in m.group(1).split(",")]
        code = next((c for c in cells[i + 1:] if c["cell_type"] == "code"), None)
        table = next((t for o in (code or {}).get("outputs", []) for t in tables(o)), None)
        if not table:
            failures.append(f"{name}: no audit table after cell [{i}]")
            continue
        header = table[0]
        shown_key = [k for k in key if k in header]  # a column not shown is one value here (one image; no softmax)
        rows = [tuple(r[header.index(k)] for k in shown_key) for r in table[1:] if len(r) == len(header)]
        if len(set(rows)) != len(rows):
            failures.append(f"{name}: cell [{i}] says one row per ({m.group(1)}), but rows of its table share "
                            f"({', '.join(shown_key)}): {len(rows)} rows, {len(set(rows))} keys")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("notebook readings as checked")
