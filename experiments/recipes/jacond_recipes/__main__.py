"""jacond recipe NAME [--quick] [--out DIR] [--work DIR] [--threads N] [--jobs J]: exit 0, 1 (a step failed, or
the page was written and reports a failure: `main` when `verify all` failed), 2 (usage)."""

import sys

from jacond_plots import PlotError
from jacond_plots.common import OneLineArgumentParser, check_writable_directory

from . import always_skip, audit, depth, gpu, lemma1, main, moments, prop1, prop2, scale, sweep, training
from .common import DEFAULT_JOBS, DEFAULT_THREADS, Recipe, RecipeError, default_out, default_work, run_recipe

RECIPES = {module.NAME: module for module in (prop1, prop2, moments, lemma1, sweep, depth, training, audit, scale, always_skip, gpu, main)}


def main(argv=None):
    parser = OneLineArgumentParser(prog="jacond recipe", description="regenerate a report with its figures",
                                     epilog="recipes: " + "; ".join(f"{k}: {m.SUMMARY}" for k, m in RECIPES.items()))
    parser.add_argument("name", metavar="NAME", help=" | ".join(RECIPES))
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds; what CI runs)")
    parser.add_argument("--out", help="report directory (default reports/NAME)")
    parser.add_argument("--work", help="data directory (default results/recipes/NAME)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"threads for every jacond command (default {DEFAULT_THREADS})")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                        help=f"independent runs (training grids) at once, each with --threads (default {DEFAULT_JOBS})")
    parser.add_argument("--reuse", action="store_true",
                        help="skip a data command whose --out already holds its output (to iterate on a report's text)")
    args = parser.parse_args(argv)
    if args.name not in RECIPES:
        print(f"jacond recipe: error: unknown recipe '{args.name}' ({' | '.join(RECIPES)})", file=sys.stderr)
        return 2
    if args.threads < 1 or args.jobs < 1:
        print("jacond recipe: error: --threads and --jobs must be >= 1", file=sys.stderr)
        return 2
    recipe = Recipe(args.name, args.out or default_out(args.name), args.work or default_work(args.name), args.quick,
                    args.threads, args.reuse, args.jobs)
    try:
        check_writable_directory(recipe.out_dir)  # before hours of data, not after
        check_writable_directory(recipe.work_dir)
        code = run_recipe(RECIPES[args.name], recipe)  # 1: the page is written and reports a failure
    except (RecipeError, PlotError, OSError) as e:
        print(f"jacond recipe {args.name}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jacond recipe {args.name}: interrupted", file=sys.stderr)
        return 130
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
