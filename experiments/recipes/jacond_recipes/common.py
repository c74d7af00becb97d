"""What every recipe shares: running jacond, drawing, and writing the report atomically."""

import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading

import pandas as pd


class RecipeError(Exception):
    """A step failed or its output is unusable: one line for the user (exit 1)."""


def markdown_table(df, floatfmt="{:.4g}"):
    """A pandas table as a GitHub Markdown table (no tabulate on Debian's python3-pandas path)."""
    def cell(v):
        if isinstance(v, float):
            return floatfmt.format(v)
        return str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(str(c) for c in df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def blank(df):
    """Missing cells (a column that does not apply to the row) shown empty instead of nan."""
    return df.astype(object).where(df.notna(), "")



def check_verdict(check):
    """One check of verify.json: "pass", "fail", "n/a" (no case met its premise: it tested nothing), or
    a finding about a paper's conclusion, "holds" / "does not hold" (never a failure of jacond); older
    files carry only `pass`."""
    return check.get("verdict", "pass" if check["pass"] else "fail")


def tested_verdicts(verdicts):
    """The verdicts of checks that tested something in jacond or a theorem: pass or fail (not N/A,
    not a finding about a paper's conclusion)."""
    return [v for v in verdicts if v in ("pass", "fail")]


def signed(points):
    """An accuracy difference in points: +1.2; one that rounds to 0.0 keeps its sign with two decimals
    (-0.03: 3 of 10 000 test images), since the recipes' verdicts turn on signs."""
    return f"{points:+.1f}" if round(points, 1) != 0 else f"{points:+.2f}"


def span(values):
    """The range of per-seed differences, "-0.05 to +1.2" (one value: that value)."""
    return f"{signed(min(values))} to {signed(max(values))}" if len(values) > 1 else signed(values[0])

class Report:
    """A Markdown report assembled section by section, written to DIR/README.md at the end."""

    def __init__(self, title):
        self.parts = [f"# {title}\n"]

    def text(self, markdown):
        self.parts.append(markdown.strip() + "\n")

    def section(self, heading):
        self.parts.append(f"## {heading}\n")

    def figure(self, relative_png, alt, made_by, caption=None):
        said = f"{caption.rstrip('.')}. " if caption else ""
        self.parts.append(f"![{alt}]({relative_png})\n\n{said}*Made by* `{made_by}`\n")

    def table(self, df, floatfmt="{:.4g}"):
        self.parts.append(markdown_table(df, floatfmt) + "\n")

    def markdown(self):
        return "\n".join(self.parts)


DEFAULT_THREADS = 2  # `jacond recipe`'s --threads and --jobs when not given
DEFAULT_JOBS = 1


def default_out(name):
    """Where `jacond recipe NAME` writes its report without --out."""
    return os.path.join("reports", name)


def default_work(name):
    """Where `jacond recipe NAME` keeps its data without --work."""
    return os.path.join("results", "recipes", name)


def run_recipe(module, recipe):
    """module.run(recipe) (its return value: an exit code, or None for 0); on a failure the figures it
    staged are removed, as the page that would have linked them is not written."""
    try:
        return module.run(recipe)
    except BaseException:
        recipe.discard_staged()
        raise


class Recipe:
    """The context of one recipe run: the jacond binary, where data and the report go, --quick."""

    def __init__(self, name, out_dir, work_dir, quick, threads, reuse=False, jobs=DEFAULT_JOBS):
        self.name = name
        self.jobs = jobs  # --jobs: commands run_many may run at once (each with --threads of its own)
        self._print_lock = threading.Lock()
        self.reuse = reuse  # --reuse: keep data a previous run of the same commands wrote (iterate on a report's text)
        self.out_dir = out_dir
        self.work_dir = work_dir
        self.quick = quick
        self.threads = threads
        self.jacond = os.environ.get("JACOND") or shutil.which("jacond") or "jacond"
        self.commands = []  # every jacond command run, in order, as the user would type it
        self.staged = []  # (staged path, name in OUT/figures) of the page being written: moved there by finish
        self._staging = None  # OUT/.figures-*: where add_figure copies them until then

    def work(self, *parts):
        return os.path.join(self.work_dir, *parts)

    def run(self, *args, accept=(0,)):
        """Runs `jacond ARGS`, echoing the command and streaming its output indented (training and
        long solves print their own progress); RecipeError naming the command when its exit code is not
        in `accept` (`jacond block --method lanczos` exits 3 when a bracket did not converge, which a
        recipe reporting that status accepts)."""
        argv = ["jacond", *[str(a) for a in args]]
        self.commands.append(self.command_text(args))
        return self._execute(argv, accept, stream=True)

    @staticmethod
    def command_text(args):
        """`jacond ARGS` as a report lists it."""
        return shlex.join(["jacond", *[str(a) for a in args]])

    def run_many(self, commands):
        """Runs independent `jacond` commands (lists of arguments), up to --jobs at a time; each one's
        output is printed whole when it ends (not interleaved), and the commands are listed in the
        report in the order given. On the first failure no further command starts (the queued ones are
        cancelled) and the failure is raised as soon as the ones already running have ended."""
        argvs = [["jacond", *[str(a) for a in args]] for args in commands]
        self.commands += [self.command_text(args) for args in commands]
        if self.jobs <= 1:
            return [self._execute(argv, (0,), stream=True) for argv in argvs]
        failed = threading.Event()
        def job(argv):
            if failed.is_set():  # a worker freed by the failure takes the next queued command before it is cancelled
                return ""
            try:
                return self._execute(argv, (0,), False)
            except BaseException:
                failed.set()
                raise
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(job, argv) for argv in argvs]
            concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            if failed.is_set():
                pool.shutdown(wait=True, cancel_futures=True)
                raise next(f.exception() for f in futures if f.done() and not f.cancelled() and f.exception())
            return [f.result() for f in futures]

    def _execute(self, argv, accept, stream):
        shown = shlex.join(argv)
        if self.reuse and self.has_output(argv):
            with self._print_lock:  # one write: run_many's threads print these at once
                print(f"$ {shown}   (--reuse: its output is there)\n", end="", flush=True)
            return ""
        if stream:
            print(f"$ {shown}", flush=True)
        lines = []
        with subprocess.Popen([self.jacond, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              bufsize=1) as child:
            for line in child.stdout:
                lines.append(line)
                if stream:
                    print("    " + line, end="", flush=True)
        if not stream:
            with self._print_lock:
                print(f"$ {shown}\n" + "".join("    " + line for line in lines), end="", flush=True)
        if child.returncode not in accept:
            tail = [line.strip() for line in lines if line.strip()][-1:] or ["(no output)"]
            raise RecipeError(f"`{shown}` exited {child.returncode}: {tail[0]}")
        return "".join(lines)

    @staticmethod
    def has_output(argv):
        """Whether a data command's --out directory already holds its finished output."""
        if argv[1] == "plot" or "--out" not in argv:
            return False
        out = argv[argv.index("--out") + 1]
        return any(os.path.isfile(os.path.join(out, f)) for f in ("run.json", "verify.json"))

    def plot(self, directory):
        """`jacond plot DIR --format png`: the figure paths written."""
        out = self.run("plot", directory, "--format", "png")
        return [line[len("wrote "):] for line in out.splitlines() if line.startswith("wrote ")]

    def verify_claim(self, claim, seeds, quick_seeds):
        """`jacond verify CLAIM --seeds N --out WORK/verify` (quick_seeds with --quick) and its figures:
        (the data directory, the figure paths, verify.json)."""
        data = self.work("verify")
        self.run("verify", claim, "--seeds", quick_seeds if self.quick else seeds, "--threads", self.threads, "--out", data)
        return data, self.plot(data), self.verify_json(data)

    def verify_json(self, directory):
        try:
            with open(os.path.join(directory, "verify.json"), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise RecipeError(f"{directory}/verify.json: unreadable ({e})") from None

    def read_csv(self, path):
        try:
            return pd.read_csv(path)
        except (OSError, ValueError) as e:
            raise RecipeError(f"{path}: unreadable ({str(e).splitlines()[0]})") from None

    def checks_table(self, verify):
        """verify.json's checks as a Markdown-ready table (verdict, check, measured): PASS, FAIL, N/A
        for a check whose premise no case met (it tested nothing), HOLDS / DOES NOT HOLD for a paper's
        conclusion measured (a finding, not a failure)."""
        rows = [{"verdict": check_verdict(c).upper(), "check": c["check"],
                 "measured": c["detail"]}
                for claim in verify["claims"] for c in claim["checks"]]
        return pd.DataFrame(rows)

    def notes(self, verify):
        return [n for claim in verify["claims"] for n in claim.get("notes", [])]

    def start_report(self, title):
        report = Report(title)
        if self.quick:
            report.text("> **Quick mode** (`--quick`): small sizes, for CI. The committed report is made "
                        "without it.")
        return report

    def add_figure(self, report, png, alt, name=None, caption=None):
        """Links the PNG as OUT/figures/`name` (default its own name), captioned with `caption` (what it
        shows, optional) and the recipe's command. The PNG is copied to a staging folder in OUT, and
        finish moves it into OUT/figures with the page: a recipe that fails before then leaves the old
        page beside its own figures, never beside new ones."""
        if self._staging is None:
            os.makedirs(self.out_dir, exist_ok=True)
            self._staging = tempfile.mkdtemp(prefix=".figures-", dir=self.out_dir)
        name = name or os.path.basename(png)
        staged = os.path.join(self._staging, f"{len(self.staged)}-{name}")
        shutil.copyfile(png, staged)
        self.staged.append((staged, name))
        report.figure(f"figures/{name}", alt, self.recipe_command(), caption)

    def discard_staged(self):
        """Removes the figures add_figure staged for a page that will not be written."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        self.staged, self._staging = [], None

    def recipe_command(self):
        """The command that regenerates the page: --quick, --threads and --jobs where they are not the
        defaults (the page's timings and its commands' --threads follow them), and --out and --work where
        they are not the defaults (the page must name the folders its data came from and went to)."""
        words = ["jacond", "recipe", self.name] + (["--quick"] if self.quick else [])
        for flag, given, default in (("--threads", self.threads, DEFAULT_THREADS), ("--jobs", self.jobs, DEFAULT_JOBS)):
            if int(given) != default:
                words += [flag, str(given)]
        for flag, given, default in (("--out", self.out_dir, default_out(self.name)),
                                     ("--work", self.work_dir, default_work(self.name))):
            if os.path.normpath(given) != os.path.normpath(default):
                words += [flag, given]
        return shlex.join(words)

    def finish(self, report, path=None):
        """Appends the commands and writes the page (default OUT/README.md) and the figures it links: each
        written or staged under a temporary name first, then renamed into place, the figures before the
        page, so that a failure before the renames leaves the old page and its old figures as they were."""
        report.section("Reproduce")
        if self.commands:
            report.text(f"`{self.recipe_command()}` regenerates this page; it ran:\n\n```\n" + "\n".join(self.commands) +
                        "\n```")
        else:
            report.text(f"`{self.recipe_command()}` regenerates this page and the pages it links.")
        self.commands = []  # a recipe writing several pages lists on each the commands run since the last
        os.makedirs(self.out_dir, exist_ok=True)
        path = path or os.path.join(self.out_dir, "README.md")
        tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(report.markdown())
        if self.staged:
            os.makedirs(os.path.join(self.out_dir, "figures"), exist_ok=True)
        for staged, name in self.staged:
            os.replace(staged, os.path.join(self.out_dir, "figures", name))
        self.discard_staged()
        os.replace(tmp, path)
        print(f"wrote {path}", file=sys.stdout, flush=True)
        return path
