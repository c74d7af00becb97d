"""jacond_recipes: one command per report (issue 12).

    jacond recipe NAME [--quick] [--out DIR] [--work DIR] [--threads N]
    (or: PYTHONPATH=experiments/plots:experiments/recipes python3 -m jacond_recipes NAME …)

A recipe runs the jacond commands that produce its data (into --work, default
results/recipes/NAME), draws the figures with jacond_plots, and writes a Markdown report with
those figures (PNG) to --out (default reports/NAME): what the paper claims, what jacond measured,
whether the claim holds here, and the exact commands, so the report can be regenerated. --quick
shrinks every Monte Carlo and grid so the recipe finishes in seconds (CI runs recipes that way);
a quick report says so in its first line.

Recipes (__main__.RECIPES): prop1, prop2, moments, sweep, depth, training, audit (audits the
training recipe's runs, so it runs after it). A recipe module has NAME, SUMMARY and run(recipe);
Recipe (common.py) runs jacond, draws, copies figures and writes the pages atomically.
"""

from .common import RecipeError, Recipe

__all__ = ["Recipe", "RecipeError"]
