"""python3 -m jacond_plots DIR [DIR ...] [--format png,svg]: exit 0, 1 (bad data), 2 (usage)."""

import os
import sys

from .common import OneLineArgumentParser, PlotError, check_writable_directory
from .recognise import plot_dir

FORMATS = ("png", "svg", "pdf")


def main(argv=None):
    parser = OneLineArgumentParser(prog="jacond plot", description="figures from jacond result directories")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="a directory jacond wrote (block, sweep, verify, train, audit, spectrum, bench --out)")
    parser.add_argument("--format", default="png,svg", help="comma list of png, svg, pdf (default png,svg)")
    args = parser.parse_args(argv)
    formats = [f for f in args.format.split(",") if f]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        print(f"jacond plot: error: --format: unknown format '{','.join(bad)}' (use {', '.join(FORMATS)})", file=sys.stderr)
        return 2
    d = None
    try:
        for d in args.dirs:
            check_writable_directory(os.path.join(d, "figures"))
            for path in plot_dir(d, formats):
                print(f"wrote {path}")
    except PlotError as e:
        print(f"jacond plot: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file where a directory goes, a full disk, ...
        print(f"jacond plot: error: {d}: {e}", file=sys.stderr)
        return 1
    except (ValueError, TypeError, KeyError) as e:  # a table whose values are not what jacond writes
        print(f"jacond plot: error: {d}: a table does not hold what jacond writes ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("jacond plot: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
