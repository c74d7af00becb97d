"""What every recipe shares (jacond_recipes.common) and how a recipe ends: run_many starts nothing more
after a failure; a page's figures reach OUT/figures only with the page; the page's Reproduce command
names --threads, --jobs, --out and --work where they are not the defaults; `jacond recipe main` writes its page when
`verify all` fails, and then exits 1."""

import importlib
import os

import pytest

from jacond_recipes import common
from jacond_recipes import __main__ as cli

main_recipe = importlib.import_module("jacond_recipes.main")


def fake_jacond(tmp_path, body):
    """An executable standing in for jacond: bash `body`, with every call's arguments appended to CALLS."""
    calls = tmp_path / "calls"
    script = tmp_path / "jacond"
    script.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n{body}\n')
    script.chmod(0o755)
    return str(script), calls


def recipe(tmp_path, name="prop1", jobs=1, out=None, work=None, quick=False, threads=2):
    return common.Recipe(name, str(out or tmp_path / "out"), str(work or tmp_path / "work"), quick, threads, jobs=jobs)


def test_run_many_starts_no_queued_command_after_a_failure(tmp_path):
    jacond, calls = fake_jacond(tmp_path, 'if [ "$1" = fail ]; then echo "error: boom"; exit 1; fi\nsleep 0.3')
    r = recipe(tmp_path, jobs=2)
    r.jacond = jacond
    with pytest.raises(common.RecipeError, match="`jacond fail` exited 1: error: boom"):
        r.run_many([["fail"]] + [["ok", i] for i in range(6)])
    started = calls.read_text().splitlines()
    assert "fail" in started
    assert set(started) <= {"fail", "ok 0"}  # at most the one already running beside it


def test_run_many_runs_every_command_when_none_fails(tmp_path):
    jacond, calls = fake_jacond(tmp_path, 'echo "did $*"')
    r = recipe(tmp_path, jobs=2)
    r.jacond = jacond
    assert r.run_many([["ok", i] for i in range(4)]) == [f"did ok {i}\n" for i in range(4)]
    assert sorted(calls.read_text().splitlines()) == [f"ok {i}" for i in range(4)]


def old_page(out):
    """OUT as a previous run left it: its README.md and the figure it links."""
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "fig.png").write_bytes(b"old figure")
    (out / "README.md").write_text("old page\n")


class Failing:
    """A recipe that adds two figures to its page, then fails before writing it."""

    png = None

    @classmethod
    def run(cls, r):
        report = r.start_report("page")
        r.add_figure(report, cls.png, "a figure")
        r.add_figure(report, cls.png, "another", name="other.png")
        raise common.RecipeError("a later step failed")


def test_a_recipe_that_fails_leaves_the_old_page_and_its_old_figures(tmp_path, monkeypatch):
    out = tmp_path / "out"
    old_page(out)
    (tmp_path / "fig.png").write_bytes(b"new figure")
    monkeypatch.setattr(Failing, "png", str(tmp_path / "fig.png"))
    with pytest.raises(common.RecipeError):
        Failing.run(recipe(tmp_path, out=out))
    assert (out / "figures" / "fig.png").read_bytes() == b"old figure"
    assert sorted(os.listdir(out / "figures")) == ["fig.png"]
    assert (out / "README.md").read_text() == "old page\n"


def test_run_recipe_removes_the_figures_staged_for_a_page_it_did_not_write(tmp_path, monkeypatch):
    out = tmp_path / "out"
    old_page(out)
    (tmp_path / "fig.png").write_bytes(b"new figure")
    monkeypatch.setattr(Failing, "png", str(tmp_path / "fig.png"))
    with pytest.raises(common.RecipeError):
        common.run_recipe(Failing, recipe(tmp_path, out=out))
    assert sorted(os.listdir(out)) == ["README.md", "figures"]  # no staging folder left behind
    assert sorted(os.listdir(out / "figures")) == ["fig.png"]


def test_finish_moves_the_staged_figures_in_with_the_page(tmp_path):
    out = tmp_path / "out"
    old_page(out)
    png = tmp_path / "fig.png"
    png.write_bytes(b"new figure")
    r = recipe(tmp_path, out=out)
    report = r.start_report("page")
    r.add_figure(report, str(png), "a figure")
    assert (out / "figures" / "fig.png").read_bytes() == b"old figure"  # not yet: the page is not written
    r.finish(report)
    assert (out / "figures" / "fig.png").read_bytes() == b"new figure"
    assert "![a figure](figures/fig.png)" in (out / "README.md").read_text()
    assert sorted(os.listdir(out)) == ["README.md", "figures"]


def test_the_reproduce_command_names_out_and_work_where_they_are_not_the_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert recipe(tmp_path, out="reports/prop1", work="results/recipes/prop1").recipe_command() == "jacond recipe prop1"
    assert recipe(tmp_path, out="./reports/prop1/", work="results/recipes/prop1", quick=True).recipe_command() == \
        "jacond recipe prop1 --quick"
    r = recipe(tmp_path, name="gpu", out="reports/gpu", work="reports/gpu/measured/2026-11-27-h200")
    assert r.recipe_command() == "jacond recipe gpu --work reports/gpu/measured/2026-11-27-h200"
    r = recipe(tmp_path, out="my report", work="w", quick=True)
    assert r.recipe_command() == "jacond recipe prop1 --quick --out 'my report' --work w"
    r.finish(r.start_report("page"))
    assert "`jacond recipe prop1 --quick --out 'my report' --work w` regenerates this page" in \
        (tmp_path / "my report" / "README.md").read_text()


def test_the_reproduce_command_names_threads_and_jobs_where_they_are_not_the_defaults(tmp_path, monkeypatch):
    """lemma1, training, audit and always-skip ran with --threads 1 (the default is 2): the page's command
    says so, and --jobs too."""
    monkeypatch.chdir(tmp_path)
    r = recipe(tmp_path, name="training", out="reports/training", work="results/recipes/training", threads=1, jobs=2)
    assert r.recipe_command() == "jacond recipe training --threads 1 --jobs 2"
    assert recipe(tmp_path, name="lemma1", out="reports/lemma1", work="results/recipes/lemma1",
                  threads=1).recipe_command() == "jacond recipe lemma1 --threads 1"
    assert recipe(tmp_path, out="reports/prop1", work="results/recipes/prop1", threads=2,
                  jobs=1).recipe_command() == "jacond recipe prop1"


def test_the_cli_reproduce_command_is_the_command_given(tmp_path, monkeypatch):
    """`jacond recipe NAME --threads 1 --jobs 2` writes a page whose Reproduce names both; the defaults
    (--threads 2, --jobs 1) given explicitly are not repeated."""
    jacond, _ = fake_jacond(tmp_path, "")
    monkeypatch.setenv("JACOND", jacond)
    monkeypatch.setitem(cli.RECIPES, "page", Page)
    out, work = tmp_path / "out", tmp_path / "work"
    assert cli.main(["page", "--threads", "1", "--jobs", "2", "--out", str(out), "--work", str(work)]) == 0
    assert f"`jacond recipe page --threads 1 --jobs 2 --out {out} --work {work}` regenerates" in \
        (out / "README.md").read_text()
    assert cli.main(["page", "--threads", "2", "--jobs", "1", "--out", str(out), "--work", str(work)]) == 0
    assert f"`jacond recipe page --out {out} --work {work}` regenerates" in (out / "README.md").read_text()


class Page:
    """A recipe that writes an empty page."""

    NAME = "page"
    SUMMARY = "an empty page"

    @staticmethod
    def run(r):
        r.finish(r.start_report("page"))


def test_main_writes_its_page_when_verify_fails_and_then_exits_1(tmp_path, monkeypatch, capsys):
    # verify writes a verify.json with a failed claim into its --out (the last argument) and exits 1;
    # every other command (sweep, train, audit, plot) succeeds without output.
    jacond, calls = fake_jacond(tmp_path, '''if [ "$1" = verify ]; then
  out="${@: -1}"; mkdir -p "$out"
  echo '{"claims":[{"claim":"prop1","passed":false,"checks":[{"check":"x","pass":false,"detail":"d"}]}]}' > "$out/verify.json"
  echo "FAIL prop1"; exit 1
fi''')
    monkeypatch.setenv("JACOND", jacond)
    # prop1's own recipe reruns its verify, which fails the same way: no prop1 page, the main page still
    monkeypatch.setattr(main_recipe, "CLAIMS", (importlib.import_module("jacond_recipes.prop1"),))
    out, work = tmp_path / "report", tmp_path / "work"
    assert cli.main(["main", "--quick", "--threads", "1", "--out", str(out), "--work", str(work)]) == 1
    page = (out / "README.md").read_text()
    assert "**Some checks FAILED**" in page and "| prop1 | 0/1 | FAIL |" in page
    assert "- prop1: **no page**" in page
    assert not (out / "prop1" / "README.md").exists()
    assert any(line.startswith("audit ") for line in calls.read_text().splitlines())  # it kept going
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"jacond recipe main: `jacond verify all` reported FAIL (see {work}/verify/verify.json); "
                   "no page for prop1: exit 1"]


def test_main_exits_0_when_verify_passes(tmp_path, monkeypatch, capsys):
    jacond, _ = fake_jacond(tmp_path, '''if [ "$1" = verify ]; then
  out="${@: -1}"; mkdir -p "$out"
  echo '{"claims":[{"claim":"prop1","passed":true,"checks":[{"check":"x","pass":true,"detail":"d"}]}]}' > "$out/verify.json"
fi''')
    monkeypatch.setenv("JACOND", jacond)
    monkeypatch.setattr(main_recipe, "CLAIMS", ())
    out = tmp_path / "report"
    assert cli.main(["main", "--quick", "--threads", "1", "--out", str(out), "--work", str(tmp_path / "work")]) == 0
    assert "All checks passed." in (out / "README.md").read_text()
    assert capsys.readouterr().err == ""
