"""gpu: the page of issue 11's GPU measurements, rendered from what scripts/gpu_measure.sh brought
back, never from anything typed in: its log(s) and the result folders of its results.tar.gz.

A GPU session (docs/design.md §11) unpacks each call's files into one folder,

    mkdir -p results/recipes/gpu && cp $FILES_AT/gpu_measure.log results/recipes/gpu/gpu_measure-1.log
    tar xzf $FILES_AT/results.tar.gz -C results/recipes/gpu        (again for each later call)

and runs `jacond recipe gpu` (default --work results/recipes/gpu, --out reports/gpu). Nothing runs
here: every number on the page is a cell of a file the GPU machine wrote or a ratio of two such
cells, and an item whose files are missing is listed as not measured, with the reason the log
gives (not reached, or stopped at its cap). The session then adds its reading of the numbers below
the generated sections."""

import glob
import json
import os
import re

import numpy as np
import pandas as pd

from .common import RecipeError, blank

NAME = "gpu"
SUMMARY = "render scripts/gpu_measure.sh's logs and results (from a GPU session) into reports/gpu"

ITEMS = {
    1: "the GPU tests", 2: "dense exact κ(K_sa) at nd 6 400, GPU vs CPU", 3: "ViT-S exact κ(K_sa)",
    4: "training images/s vs PyTorch", 5: "ViT-B K_sa under `ours`", 6: "`timm` K_sab at ViT-B, matrix-free",
    7: "inertia certificates", 8: "skipless rows at ViT-S", 9: "`ours` K_sa at ViT-S, matrix-free",
}
# Item 1's tests that run only where there is no GPU (each checks the no-GPU path), so skip on the GPU
# machine by design: scripts/gpu_measure.sh's no_gpu_tests (tests/scripts/test_gpu_measure.sh checks
# the two lists agree). Every other skipped test measured nothing.
NO_GPU_TESTS = ("DenseCuda.NoDeviceIsACudaErrorNamingTheCall",
                "OperatorDeviceCuda.WithoutAGpuTheHostRunsTheProductsAndSaysWhy")
TARGETS = {"dense_speedup": 20.0, "vit_s_seconds": 120.0, "vit_b_lanczos_seconds": 5.0, "vit_b_ratio": 1.01,
           "train_ratio": 1.0}


class Log:
    """What the gpu_measure logs say: the device, each item's seconds and exit code, the items
    stopped at their cap, each `$ jacond …` command and the wall seconds `time` gave it."""

    ITEM_STARTED = re.compile(r"^=== item (\d) \(item\d_\w+\), cap")
    ITEM_TOOK = re.compile(r"^=== item (\d) took (\d+) s \(rc (\d+)\)")
    STOPPED = re.compile(r"^=== item (\d) STOPPED at its cap of (\d+) s")
    REAL = re.compile(r"^real\s+(\d+)m([\d.]+)s")
    CTEST = re.compile(r'^\$ ctest -R "([^"]+)"')
    # What item 1 ran before gpu_measure logged its ctest line (the first H200 run, commit 0345907).
    FIRST_TESTS = "DenseCuda|DeviceCuda|AdamWCuda|NcclRankGroup"
    # ctest's summary and each failed or skipped test as its lists name them ("71 - Name (SEGFAULT)",
    # "24 - Name (Skipped)"), pytest's summary, and a process that died on a signal (bash's
    # "Segmentation fault", Python's fatal error). A skip must be kept: ctest counts it as passed, so
    # a log whose every GPU test skipped says "100% tests passed".
    TEST_LINE = re.compile(r"tests passed|tests failed|^\s*\d+ - \S+ \((Failed|Timeout|SEGFAULT|Subprocess aborted|"
                           r"Child aborted|ILLEGAL|BUS_ERROR|OTHER_FAULT|Exception|Skipped)|^\d+ (passed|failed|skipped)|"
                           r"Segmentation fault|^Fatal Python error|Aborted \(core dumped\)")
    SKIPPED = re.compile(r"^\s*\d+ - (\S+) \(Skipped\)$")
    CTEST_SUMMARY = re.compile(r"^\d+% tests passed, (\d+) tests? failed out of (\d+)")
    PYTEST_SKIPPED = re.compile(r"^\d+ (?:passed|failed|skipped).*?\b(\d+) skipped\b|^(\d+) skipped\b")

    def __init__(self, paths):
        self.device = None
        self.items = {}      # item -> (seconds, rc)
        self.stopped = {}    # item -> cap seconds
        self.started = set()
        self.errors = {}     # item -> the one-line errors its commands printed (jacond's `…: error: …`)
        self.commands = []   # `jacond …` as run, in order
        self.wall = {}       # command -> wall seconds from `time`
        self.test_lines = []
        self.skipped = []      # item 1's tests that did not run (ctest's "(Skipped)"), once each
        self.pytest_skipped = 0
        self.tests_run = None  # item 1's ctest -R pattern
        self.ctest_runs = []   # each ctest summary: [tests, failed, skipped] (its skip list follows it)
        last_command, current = None, None
        for path in paths:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                if line.startswith("name, memory.total") and i + 1 < len(lines) and self.device is None:
                    self.device = lines[i + 1].strip()
                elif line.startswith("$ jacond "):
                    # --out's folder as it lands here (the machine wrote into a temporary folder)
                    last_command = re.sub(r"--out \S*/(\S+)", r"--out \1", line[2:].strip())
                    if last_command not in self.commands:
                        self.commands.append(last_command)
                elif m := self.CTEST.match(line):
                    self.tests_run = m.group(1)
                elif (m := self.REAL.match(line)) and last_command:
                    self.wall[last_command] = 60 * int(m.group(1)) + float(m.group(2))
                elif m := self.ITEM_STARTED.match(line):
                    current = int(m.group(1))
                    self.started.add(current)
                    self.errors[current] = []
                elif m := self.ITEM_TOOK.match(line):
                    # Rerun in a later call (a fresh machine, JACOND_GPU_REDO): its latest success wins,
                    # as its files overwrote the earlier ones when unpacked.
                    item, took = int(m.group(1)), (int(m.group(2)), int(m.group(3)))
                    if took[1] == 0 or self.items.get(item, (0, 1))[1] != 0:
                        self.items[item] = took
                        if took[1] == 0:
                            self.stopped.pop(item, None)
                elif m := self.STOPPED.match(line):
                    self.stopped[int(m.group(1))] = int(m.group(2))
                elif self.TEST_LINE.search(line):
                    self.test_lines.append(line.strip())
                    if m := self.CTEST_SUMMARY.match(line):
                        self.ctest_runs.append([int(m.group(2)), int(m.group(1)), 0])
                    elif m := self.SKIPPED.match(line):
                        if self.ctest_runs:
                            self.ctest_runs[-1][2] += 1
                        if m.group(1) not in self.skipped:
                            self.skipped.append(m.group(1))
                    elif m := self.PYTEST_SKIPPED.match(line):
                        self.pytest_skipped += int(m.group(1) or m.group(2))
                elif current is not None and re.search(r"\berror: ", line) and line not in self.errors[current]:
                    self.errors[current].append(line.strip())

    def wall_of(self, *needles):
        """Wall seconds of the logged command containing every needle (nan when not timed)."""
        hits = [s for c, s in self.wall.items() if all(n in c for n in needles)]
        return hits[0] if hits else float("nan")

    def why_missing(self, item):
        if item in self.stopped:
            return f"stopped at its cap of {self.stopped[item]} s"
        if item in self.items:
            said = self.errors.get(item)
            return (f"ran {self.items[item][0]} s, exit {self.items[item][1]}, and wrote no result" +
                    (f"; it said `{said[0]}`" if said else ""))
        if item in self.started:
            return "started, and cut off by its call's time limit"
        return "not reached in the session's device time"


def read(work, *parts):
    path = os.path.join(work, *parts)
    return pd.read_csv(path, float_precision="round_trip") if os.path.isfile(path) else None


def fmt(x, spec=".3g"):
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, spec)


def not_measured(report, log, item):
    report.text(f"**Not measured** (item {item}, {ITEMS[item]}): {log.why_missing(item)}.")


def begin(report, log, item, heading, df):
    """Starts a section; True when its item's file is there, else says why it is not."""
    report.section(heading)
    if df is None or df.empty:
        not_measured(report, log, item)
        return False
    return True


def tests_section(r, report, log):
    report.section("Tests on the device (item 1)")
    if 1 not in log.items:
        not_measured(report, log, 1)
        return
    report.text(f"`ctest -R \"{log.tests_run or log.FIRST_TESTS}\"` and the Python module's device test: "
                f"{log.items[1][0]} s, exit {log.items[1][1]}. What they printed:\n\n```\n" +
                "\n".join(log.test_lines or ["(no summary line in the log)"]) + "\n```")
    if counts := counts_line(log):
        report.text(counts)
    report.text(skipped_line(log))


def counts_line(log):
    """ctest's own counts of item 1's last run, a skip apart from a pass: ctest's "N% tests passed"
    counts a skipped test as passed (the first H200 run's "85% … 4 tests failed out of 26" was 20
    passed and 2 skipped). None where the log has no ctest summary."""
    if not log.ctest_runs:
        return None
    tests, failed, skipped = log.ctest_runs[-1]
    passed = tests - failed - skipped
    which = f"In the last of item 1's {len(log.ctest_runs)} ctest runs: " if len(log.ctest_runs) > 1 else "ctest: "
    return (which + f"**{passed} of {tests} GPU tests passed**, {failed} failed" +
            (f", {skipped} skipped (ctest's \"tests passed\" counts a skipped test as passed)" if skipped else "") + ".")


def skipped_line(log):
    """How many of item 1's tests did not run (ctest counts a skip as passed), named, apart from
    NO_GPU_TESTS, which skip on a GPU by design; and the Python device test's skips."""
    missed = [t for t in log.skipped if t not in NO_GPU_TESTS]
    by_design = len(log.skipped) - len(missed)
    python = f"; the Python module's device test: {log.pytest_skipped} skipped" if log.pytest_skipped else ""
    if not missed and not log.pytest_skipped:
        verb = "checks" if by_design == 1 else "check"
        return "Every GPU test ran" + (f", except the {by_design} that {verb} the no-GPU path (skipped by design)."
                                       if by_design else ".")
    one = len(missed) == 1
    head = (f"**{len(missed)} GPU test{'' if one else 's'} did not run** (skipped on the GPU machine: "
            f"{'it' if one else 'they'} measured nothing)") if missed else "**GPU tests did not run**"
    return (head + (": " + ", ".join(f"`{t}`" for t in missed) if missed else "") + python +
            (f"; {by_design} more skipped by design ({'it checks' if by_design == 1 else 'they check'} the no-GPU path)"
             if by_design else "") + ".")


def dense_section(r, report, log):
    frames = [f for f in (read(r.work_dir, f"bench-dense-t{t}", "bench_dense.csv") for t in (16, 2)) if f is not None]
    df = pd.concat(frames, ignore_index=True) if frames else None
    if not begin(report, log, 2, "1. Exact κ(K_sa) at nd 6 400: GPU against this project's CPU route (item 2)", df):
        return
    # A route that gave no κ has no speed to compare: its time bought nothing (as on reports/scale).
    df.loc[df["status"] == "not-converged", "cpu_exact_over_this"] = np.nan
    report.table(blank(df[["threads", "route", "method", "total_s", "cpu_exact_over_this", "kappa", "status",
                     "agree_with_cpu_exact"]].rename(columns={"cpu_exact_over_this": "CPU exact s / this s"})))
    # The GPU's exact routes: K copied from the host, and K assembled on the device (from issue 11's
    # second GPU session on; `jacond block --device cuda` takes it where LibTorch has CUDA); each
    # with its σ_min sweep by getrs (the default) and, from the third session on, by trsv and trtri
    # (rows "<route>-trsv", "<route>-trtri": JACOND_CUDA_LU_SOLVES, analysis/cuda/dense_cuda.h).
    gpu = df[df["route"].astype(str).str.startswith("jacond-exact-kappa-cuda")]
    if gpu.empty:
        report.text("- No `jacond-exact-kappa-cuda` row in these files: the GPU route did not run.")
    for _, row in gpu.iterrows():
        ratio, agree = row["cpu_exact_over_this"], row["agree_with_cpu_exact"]
        route, sweep = sweep_of(row["route"])
        how = "assembled on the GPU" if route.endswith("-assembled") else "K copied from the host"
        head = (f"- GPU exact route ({how}, σ_min sweep by {sweep}) against the CPU's exact route on "
                f"{int(row['threads'])} threads: **{fmt(ratio)}×**")
        if agree == "PASS" and np.isfinite(ratio):
            verdict = "meets" if ratio >= TARGETS["dense_speedup"] else "misses"
            report.text(f"{head} ({verdict} the ≥ {TARGETS['dense_speedup']:g}× target), κ agrees with the CPU's.")
        else:
            report.text(f"{head}: no verdict, κ against the CPU's: {agree if isinstance(agree, str) else 'not compared'}.")


def sweep_of(route):
    """(the route without its sweep suffix, the sweep): "…-trsv" and "…-trtri" name theirs; a route
    without one swept by getrs, the default."""
    for sweep in ("trsv", "trtri"):
        if route.endswith("-" + sweep):
            return route[: -len(sweep) - 1], sweep
    return route, "getrs"


def block_rows(r, folder, matrix):
    df = read(r.work_dir, folder, "results.csv")
    return None if df is None else df[df["matrix"] == matrix]


def exact_section(r, report, log, item, folder, heading, needle, target_s=None):
    rows = block_rows(r, folder, "K_sa")
    if not begin(report, log, item, heading, rows):
        return
    report.table(blank(rows[["n", "d", "heads", "init", "method", "status", "sigma_max", "sigma_min", "kappa", "seconds"]]))
    wall = log.wall_of(needle)
    line = f"- End to end (process start to report, `time`): **{fmt(wall, '.1f')} s**"
    if target_s is not None and np.isfinite(wall):
        status = rows["status"].iloc[0]
        line += (f" ({'within' if wall < target_s else 'over'} the {target_s:g} s target)" if status == "exact" else
                 f" (no verdict: the row's status is {status}, not exact)")
    report.text(line + ".")
    for note in rows["note"].dropna():
        report.text(f"- note: {note}")


def vit_b_heading(r):
    """Item 5's heading by the route its row names: the mixed route (fp32 LU + GMRES-IR, sessions up to
    2026-11-27) or the Schur route (block fp64 LU in pieces, analysis/spectral/schur_lu.h, after)."""
    rows = block_rows(r, "vit-b", "K_sa")
    methods = "" if rows is None else " ".join(rows["method"].astype(str))
    route = "by the mixed route" if "lu32" in methods else "exact fp64 by the block (Schur) LU in pieces"
    return f"3a. ViT-B K_sa under `ours`, {route} (item 5)"


def lanczos_section(r, report, log):
    df = read(r.work_dir, "lanczos-vit-b-timm", "bench_lanczos.csv")
    if not begin(report, log, 6, "3b. `timm` K_sab at ViT-B to 1 %, matrix-free, GPU products against the host's "
                 "(item 6)", df):
        return
    report.table(blank(df[["size", "init", "matrix", "status", "kappa_lo", "kappa_hi", "t_total_s", "product_s",
                     "device_status", "device_kappa_lo", "device_kappa_hi", "device_t_total_s", "device_product_s",
                     "device_speedup"]]))
    for _, row in df.iterrows():
        if pd.isna(row["device_kappa_lo"]):
            status = row["device_status"] if isinstance(row["device_status"], str) else "route not run"
            report.text(f"- {row['size']}: no GPU bracket in this file ({status}).")
            continue
        width = row["device_kappa_hi"] / row["device_kappa_lo"]
        report.text(f"- GPU bracket width κ_hi/κ_lo = **{fmt(width, '.5g')}** (target ≤ {TARGETS['vit_b_ratio']}), "
                    f"{fmt(row['device_t_total_s'])} s on the device against {fmt(row['t_total_s'])} s on the host "
                    f"(**{fmt(row['device_speedup'])}×**).")
    block_verdict(r, report, log)


def block_verdict(r, report, log):
    """The user's `jacond block` at ViT-B against the < 5 s target: timed by `time`, and judged only
    when that command's own row is a bracket within the 1 % asked for."""
    wall = log.wall_of("--matrices K_sab --method lanczos")
    rows = block_rows(r, "lanczos-vit-b-timm-block", "K_sab")
    head = f"- `jacond block … --matrices K_sab --method lanczos --device cuda` end to end: **{fmt(wall, '.2f')} s**"
    if rows is None or rows.empty or not np.isfinite(wall):
        report.text(f"{head}: no verdict, {'no row' if rows is None or rows.empty else 'not timed'} in the files.")
        return
    row = rows.iloc[0]
    width = row["kappa_hi"] / row["kappa_lo"]
    if row["status"] not in ("bracket", "exact") or not width <= TARGETS["vit_b_ratio"]:
        report.text(f"{head}: no verdict, its row is {row['status']} with κ_hi/κ_lo = {fmt(width, '.5g')}.")
        return
    report.text(f"{head} ({'within' if wall < TARGETS['vit_b_lanczos_seconds'] else 'over'} the "
                f"{TARGETS['vit_b_lanczos_seconds']:g} s target), κ in [{fmt(row['kappa_lo'], '.6g')}, "
                f"{fmt(row['kappa_hi'], '.6g')}], {row['method']}.")


def train_section(r, report, log):
    df = read(r.work_dir, "bench-train", "bench_train.csv")
    if not begin(report, log, 4, "4. Training images/s on the GPU against Python PyTorch on the same GPU (item 4)", df):
        return
    report.table(blank(df))
    ours = df[(df["route"] == "jacond") & (df["optimizer"] == "adamw")]["images_per_s"]
    theirs = df[df["route"] == "pytorch"]["images_per_s"]
    if len(ours) and len(theirs):
        ratio = float(ours.iloc[0]) / float(theirs.iloc[0])
        device = df[df["route"] == "pytorch"]["device"].iloc[0]
        report.text(f"- jacond / PyTorch (AdamW, same model and batch, on {device}): **{ratio:.3g}×** "
                    f"({'meets' if ratio >= TARGETS['train_ratio'] else 'misses'} the ≥ {TARGETS['train_ratio']:g}× target).")
    op_count_line(r, report)
    tracking_line(r, report)


def op_count_line(r, report):
    """Both routes' ATen operations in one AdamW step (bench-train/run.json "aten_ops"), where counted."""
    path = os.path.join(r.work_dir, "bench-train", "run.json")
    ops = {}
    if os.path.isfile(path):
        with open(path) as f:
            ops = json.load(f).get("aten_ops", {})
    if not ops.get("jacond") or not ops.get("pytorch"):
        report.text("- ATen operations per step: not counted in this run.")
        return
    n = {route: {part: sum(ops[route].get(part, {}).values()) for part in ("model", "optimizer")} for route in ops}
    soap = ops["jacond"].get("soap_optimizer")  # counted since SOAP's matrices step in groups (2026-11-28)
    report.text(f"- ATen operations in one AdamW step (nested included): model pass jacond {n['jacond']['model']}, "
                f"PyTorch {n['pytorch']['model']}; optimizer.step() jacond {n['jacond']['optimizer']}, "
                f"PyTorch {n['pytorch']['optimizer']}" +
                (f"; SOAP's optimizer.step() jacond {sum(soap.values())}." if soap else "."))


def tracking_line(r, report):
    """One tracking call on the GPU against the host (bench-train-tracking/run.json), where measured."""
    path = os.path.join(r.work_dir, "bench-train-tracking", "run.json")
    if not os.path.isfile(path):
        report.text("- Tracking on the GPU against the host (`bench-train-tracking/`): not measured.")
        return
    with open(path) as f:
        t = json.load(f).get("tracking", {})
    chosen, host = t.get("chosen", {}), t.get("chosen_on_host", {})
    if "seconds" not in chosen:
        report.text("- Tracking on the GPU against the host: run.json times no tracking call (--track-every 0?).")
        return
    line = (f"- One tracking call ({chosen.get('matrices')}, {chosen.get('reports')} reports) on "
            f"{t.get('where')}: {fmt(chosen['seconds'], '.3g')} s")
    if "seconds" not in host:  # bench train times the host too only where the run tracks on a GPU
        report.text(line + "; not timed on the host as well: this run tracked on the host already.")
        return
    report.text(line + f"; on the host (`--track-device cpu`): {fmt(host['seconds'], '.3g')} s, "
                f"**{fmt(host['seconds'] / chosen['seconds'], '.3g')}×** the GPU's.")


def more_section(r, report, log):
    report.section("5. Certificates, skipless rows and the hard matrix-free case (items 7–9)")
    for item, folders in ((7, ("certify-cuda", "certify-cpu")), (8, ("skipless-cuda", "skipless-cpu"))):
        found = [(f, read(r.work_dir, f, "results.csv")) for f in folders]
        found = [(f, df) for f, df in found if df is not None]
        if not found:
            not_measured(report, log, item)
            continue
        flag = "--certify inertia" if item == 7 else "--skip none"
        for folder, df in found:
            device = folder.rsplit("-", 1)[1]
            wall = log.wall_of(flag, f"--device {device}")
            report.text(f"`{folder}` ({device}; end to end {fmt(wall, '.1f')} s by `time`):")
            report.table(blank(df[["matrix", "space", "method", "status", "kappa", "kappa_lo", "kappa_hi", "seconds"]]))
    df = read(r.work_dir, "lanczos-vit-s-ours", "bench_lanczos.csv")
    if df is None:
        not_measured(report, log, 9)
    else:
        report.table(blank(df[["size", "init", "matrix", "status", "kappa_lo", "kappa_hi", "products", "t_total_s",
                         "device_status", "device_kappa_lo", "device_kappa_hi", "device_products", "device_t_total_s"]]))


def run(r):
    logs = sorted(glob.glob(os.path.join(r.work_dir, "gpu_measure*.log")))
    if not logs:
        raise RecipeError(f"no gpu_measure*.log in {r.work_dir}: copy each device call's gpu_measure.log there and "
                          "untar its results.tar.gz into it (docs/design.md §11)")
    log = Log(logs)
    report = r.start_report("GPU measurements (issue 11)")
    report.text(f"Device (`nvidia-smi`: name, memory, driver): **{log.device or 'not in the log'}**. "
                f"Made from {len(logs)} log(s) of `bash scripts/gpu_measure.sh` and the result folders its calls "
                "returned; every number below is read from those files (`jacond recipe gpu`).")
    took = pd.DataFrame([{"item": i, "what": ITEMS[i], "seconds": s, "exit": rc,
                          "stopped at cap": "yes" if i in log.stopped else ""} for i, (s, rc) in sorted(log.items.items())])
    if not took.empty:
        report.table(blank(took))
    try:
        tests_section(r, report, log)
        dense_section(r, report, log)
        exact_section(r, report, log, 3, "vit-s", "2. Exact fp64 κ of a ViT-S attention Jacobian (item 3)",
                      "--init timm --n 197 --d 384 --heads 6 --matrices K_sa --method dense", TARGETS["vit_s_seconds"])
        if os.path.isdir(os.path.join(r.work_dir, "vit-s-ours")):  # item 3's second run (from 2026-11-27 on)
            exact_section(r, report, log, 3, "vit-s-ours", "2b. The same under `ours`: the σ_min issue's open case "
                          "(item 3)", "--init ours --n 197 --d 384 --heads 6 --matrices K_sa --method dense")
        exact_section(r, report, log, 5, "vit-b", vit_b_heading(r), "--d 768 --heads 12 --matrices K_sa --method dense")
        lanczos_section(r, report, log)
        train_section(r, report, log)
        more_section(r, report, log)
    except KeyError as e:  # a results file from another jacond version
        missing = " ".join(str(e).split())[:200]
        raise RecipeError(f"a results file in {r.work_dir} lacks columns this page reads ({missing}): "
                          "was it written by this jacond?") from e
    reading_section(r, report)
    r.commands.extend(["bash scripts/gpu_measure.sh   # on the GPU machine; it ran:"] + log.commands)
    r.finish(report)


def reading_section(r, report):
    """The measuring session's reading of the numbers: OUT/reading.md, written by hand (this page is
    generated, so a reading typed into it would be lost), shown verbatim after the numbers, with
    the folder they were read from (the logs and results a GPU call returned cannot be made again
    without the GPU, so a session commits them, e.g. under reports/gpu/measured/)."""
    report.section("Reading")
    report.text(f"Files read: `{r.work_dir}` (`jacond recipe gpu --work {r.work_dir}` renders this page again).")
    path = os.path.join(r.out_dir, "reading.md")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            report.text(f.read().strip())
    else:
        report.text(f"(no reading yet: the measuring session writes {path})")
