"""main: the main job (scripts/run_main.sh): every claim verified, their reports, a small sweep, a
short skipless training run with tracking and its audit, and one page that links them all. A FAIL of
`verify all` is reported on the page, which is still written; the job then exits 1."""

import os
import shutil
import sys

import pandas as pd

from . import depth, lemma1, moments, prop1, prop2
from .common import Recipe, RecipeError, check_verdict, run_recipe, tested_verdicts

NAME = "main"
SUMMARY = "the main job: verify all, the claim reports, a small sweep, a tracked skipless training run, its audit"

CLAIMS = (prop1, prop2, moments, lemma1, depth)
SWEEP = ["--alpha", "0:3:0.5", "--beta", "0:2:0.5", "--c", 3, "--seeds", 2, "--n", 16, "--d", 32, "--heads", 2]
SWEEP_QUICK = ["--alpha", "1:3:1", "--beta", "0:1:0.5", "--c", 3, "--seeds", 1, "--n", 4, "--d", 8, "--heads", 2]
TRAIN = ["--dim", 64, "--depth", 4, "--heads", 2, "--patch", 4, "--batch", 128, "--steps", 400, "--warmup-steps", 40,
         "--eval-every", 100, "--track-every", 100, "--checkpoint-every", 100, "--keep", 0,
         "--checkpoint-init", "--print-every", 50]  # the audit's checkpoints: 0 (the init), 100, ..., 400
TRAIN_QUICK = ["--dim", 16, "--depth", 2, "--heads", 2, "--patch", 7, "--batch", 32, "--steps", 12, "--warmup-steps", 3,
               "--data-limit", 640, "--test-limit", 200, "--eval-every", 6, "--track-every", 6, "--checkpoint-every", 6,
               "--checkpoint-init", "--print-every", 6]


def claim_row(claim):
    """One claim of verify.json as a row: its checks counted by verdict; an N/A check (no case met its
    premise) tested nothing, and a finding judges the paper's conclusion, not jacond, so both are
    counted apart, never as passed."""
    verdicts = [check_verdict(k) for k in claim["checks"]]
    apart = [f"{verdicts.count(v)} {label}" for v, label in (("n/a", "N/A"), ("does not hold", "paper conclusion does not hold"),
                                                           ("holds", "paper conclusion holds")) if v in verdicts]
    return {"claim": claim["claim"],
            "checks passed": f"{verdicts.count('pass')}/{len(tested_verdicts(verdicts))}" + (f" ({'; '.join(apart)})" if apart else ""),
            "verdict": "PASS" if claim["passed"] else "FAIL"}


def run(r):
    verify_dir = r.work("verify")
    verify_ok = True
    try:
        r.run("verify", "all", *(["--seeds", 20] if r.quick else []), "--threads", r.threads, "--out", verify_dir)
    except RecipeError as e:  # a FAIL is a finding to report, not a reason to stop the main job
        print(f"note: {e}")
        verify_ok = False
    verify = r.verify_json(verify_dir)
    verify_ok = verify_ok and all(claim["passed"] for claim in verify["claims"])
    claim_pages, failed_pages = [], []
    for module in CLAIMS:
        sub = Recipe(module.NAME, os.path.join(r.out_dir, module.NAME), r.work("recipes", module.NAME), r.quick, r.threads, r.reuse)
        sub.jacond = r.jacond
        try:  # a claim's own verify run fails as `verify all` did: its page is not written, this one is
            run_recipe(module, sub)
            claim_pages.append((module.NAME, module.SUMMARY))
        except RecipeError as e:
            print(f"note: recipe {module.NAME}: {e}")
            failed_pages.append((module.NAME, str(e).splitlines()[0]))

    sweep_dir, run_dir = r.work("sweep"), r.work("train-skipless-ours-soap")
    audit_dir, free_dir = r.work("audit"), r.work("audit-data-free")
    r.run("sweep", *(SWEEP_QUICK if r.quick else SWEEP), "--threads", r.threads, "--out", sweep_dir)
    if os.path.isdir(run_dir) and not r.reuse:
        shutil.rmtree(run_dir)
    r.run("train", "--skip", "none", "--init", "ours", "--optimizer", "soap", *(TRAIN_QUICK if r.quick else TRAIN),
          "--threads", r.threads, "--track-matrices", "K_sab,K_ffn,softmax", "--out", run_dir)
    r.run("audit", run_dir, "--matrices", "K_sa,K_sab,softmax", "--threads", r.threads, "--out", audit_dir)
    r.run("audit", run_dir, "--data-free", "--threads", r.threads, "--out", free_dir)

    report = r.start_report("jacond: the main job")
    report.text("""
What `bash scripts/run_main.sh` measured on this machine: every claim of the papers that `jacond verify`
checks, each claim's report, a small α × β sweep of the `ours` init, a skipless ViT trained on
Fashion-MNIST with the `ours` init and SOAP while its conditioning is tracked, and the audit of its
checkpoints. The committed, larger versions of these reports are in the repository's `reports/`.""")
    report.section("Claims (`jacond verify all`)")
    rows = [claim_row(c) for c in verify["claims"]]
    report.table(pd.DataFrame(rows))
    report.text(("All checks passed." if verify_ok else "**Some checks FAILED**: see the table and "
                 f"`{verify_dir}/verify.json`.") + "\n\n" +
                "\n".join([f"- [{name}]({name}/README.md): {summary}" for name, summary in claim_pages] +
                          [f"- {name}: **no page** ({why})" for name, why in failed_pages]))
    for title, directory, alt in (("A small sweep of the `ours` init", sweep_dir, "sweep"),
                                  ("Training a skipless ViT (ours, SOAP) with tracking", run_dir, "training"),
                                  ("Its audit, with data", audit_dir, "audit"),
                                  ("Its audit, data-free", free_dir, "audit-data-free")):
        report.section(title)
        for png in r.plot(directory):
            r.add_figure(report, png, alt, name=f"{alt}-{os.path.basename(png)}")
    path = r.finish(report)
    print(f"\nopen {os.path.abspath(path)}")
    if not verify_ok or failed_pages:  # the page is written; the job still failed
        print(f"jacond recipe main: `jacond verify all` reported FAIL (see {verify_dir}/verify.json)" +
              (f"; no page for {', '.join(name for name, _ in failed_pages)}" if failed_pages else "") + ": exit 1",
              file=sys.stderr)
        return 1
    return 0
