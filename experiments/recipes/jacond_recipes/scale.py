"""scale: what jacond's routes cost and reach as the matrix grows, against the routes a researcher
would take otherwise (Python PyTorch's dense Jacobian + svdvals, SciPy's svds on autograd
products), and which σ_min solver can bracket an ill-conditioned block (issue 10). The GPU's
measurements (issue 11) have their own page, reports/gpu, which this one links."""

import os

import numpy as np
import pandas as pd

from .common import blank

NAME = "scale"
SUMMARY = "cost and reach per route and size: dense exact vs PyTorch, GKL vs SciPy svds, sigma_min solvers, certified vs bracketed"

# 1. The exact dense route against PyTorch's autograd Jacobian + svdvals (same weights and tokens).
DENSE = ["--sizes", "1024,3200,6400", "--skip-full"]
DENSE_QUICK = ["--sizes", "1024", "--skip-full", "--repeat", 1]
# 2. Matrix-free brackets against SciPy svds (ARPACK) on autograd JVP/VJP, one budget for both.
PEERS = ["--sizes", "dense6400", "--inits", "ours,timm", "--peers", "arpack", "--check-dense", "--seconds", 30]
PEERS_QUICK = ["--sizes", "n8d16h2", "--inits", "ours", "--matrices", "K_ffn,K_sab", "--peers", "arpack",
               "--check-dense", "--seconds", 5, "--repeats", 1]
# 3. σ_min solvers on the hard block (`ours` bare K_sa, κ ≈ 1e6): the default restarted GKL against the
#    unrestarted sweep (the Krylov optimum), with the dense σ_min as the truth.
METHODS = ["--sizes", "n25d64h4,n50d64h4", "--inits", "ours", "--matrices", "K_sa",
           "--compare-methods", "restart-96,unrestarted", "--check-dense", "--seconds", 150]
METHODS_QUICK = ["--sizes", "n8d16h2", "--inits", "ours", "--matrices", "K_sa",
                 "--compare-methods", "restart-96,unrestarted", "--check-dense", "--seconds", 5]
# 4. One block, every route: exact (LU + inverse Lanczos), certified (inertia counts), matrix-free bracket.
CERT_BLOCK = ["--init", "ours", "--n", 100, "--d", 64, "--heads", 4, "--skip", "none", "--matrices", "K_sa,K_sab,K_ffn"]
CERT_BLOCK_QUICK = ["--init", "ours", "--n", 8, "--d", 16, "--heads", 2, "--skip", "none", "--matrices", "K_sa,K_sab,K_ffn"]
ROUTES = (("exact", ["--method", "dense"]),
          ("certified", ["--method", "dense", "--certify", "inertia", "--lanczos-seconds", 600]),
          ("matrix-free", ["--method", "lanczos", "--lanczos-seconds", 60]))
def speedup_span(values):
    """'a–b' of a series of ratios, or 'a' when they are the same to 3 digits."""
    lo, hi = f"{np.nanmin(values):.3g}", f"{np.nanmax(values):.3g}"
    return lo if lo == hi else f"{lo}–{hi}"


def dense_section(r, report, df):
    report.section("1. Exact κ on the CPU against PyTorch (`jacond bench dense`)")
    report.text("""
The route a researcher takes without jacond: `torch.autograd.functional.jacobian` of the same block on the same
fp64 weights and tokens, then `torch.linalg.svdvals`. jacond assembles K_sa analytically and gets κ from an LU
and inverse Lanczos (exact: both ends of the spectrum to rounding). `torch / jacond` is how many times faster
jacond's route is, in the same run; `agrees with torch` says whether the two κ agree within bench dense's
tolerance (a multiple of κ·u, the rounding both routes carry).""")
    rows = df[df["route"] != "torch"].copy()
    # A route that gave no κ has no speed to compare: its time bought nothing.
    rows.loc[rows["status"] == "not-converged", "torch_over_this"] = np.nan
    torch_s = df[df["route"] == "torch"].set_index("N")["total_s"]
    rows["torch s"] = rows["N"].map(torch_s)
    shown = rows[["N", "n", "d", "heads", "init", "route", "method", "total_s", "torch s", "torch_over_this", "kappa",
                  "status", "agree_with_torch", "agree_with_cpu_exact"]]
    report.table(blank(shown.rename(columns={"total_s": "jacond s", "torch_over_this": "torch / jacond",
                                             "agree_with_torch": "agrees with torch",
                                             "agree_with_cpu_exact": "agrees with the fp64 route"})))
    exact = rows[rows["route"] == "jacond-exact-kappa"]
    if len(exact):
        report.text(f"The exact fp64 route is {speedup_span(exact['torch_over_this'])}× "
                    "faster than PyTorch here. The mixed route (`--kappa mixed`: fp32 LU, every solve refined to fp64 "
                    "by GMRES-IR, analysis/spectral/mixed_lu.h) is checked against the fp64 route instead. It halves the "
                    "LU's memory but converges only while the fp32 LU still preconditions K. Whether it did at ViT-B "
                    "was measured on a GPU and is on [reports/gpu](../gpu/README.md), not here; ViT-B's exact κ is "
                    "left to the fp64 Schur route (`--method dense`), not yet run at that size.")
    mixed = rows[rows["route"].str.contains("mixed")]
    failed = mixed[mixed["status"] == "not-converged"]
    converged = mixed[mixed["status"] != "not-converged"]
    wrong = converged[converged["agree_with_cpu_exact"] != "PASS"]
    kappa = exact.set_index("N")["kappa"]
    if len(wrong):
        report.text("**The mixed route disagrees with the fp64 route** at " + ", ".join(f"N = {N}" for N in wrong["N"])
                    + " (a converged κ outside the tolerance: a bug).")
    if len(failed):
        agreeing = converged[converged["agree_with_cpu_exact"] == "PASS"]["N"].map(kappa) * 2.0 ** -24
        report.text("Where its refinement stops converging (Bound 2: the fp32 LU must still precondition A, which "
                    "κ·u₃₂ alone does not decide) it reports not-converged"
                    + (", never a wrong κ" if wrong.empty else "") + ": "
                    + ", ".join(f"N = {N} (κ = {kappa.get(N, np.nan):.2g}, κ·u₃₂ = {kappa.get(N, np.nan) * 2.0 ** -24:.2g})"
                                for N in failed["N"])
                    + (f"; it converged, agreeing with the fp64 route, up to κ·u₃₂ = {agreeing.max():.2g}"
                       if len(agreeing) else "")
                    + "; a caller then takes the fp64 route.")


def peers_section(r, report, df):
    report.section("2. Matrix-free κ against SciPy `svds` (`jacond bench lanczos --peers arpack`)")
    budget = df["budget_s"].iloc[0]
    report.text(f"""
Both routes get the same budget ({budget:g} s), threads and target (κ_hi/κ_lo ≤ 1.01 from the same residual
bracket). K_sab and K_ffn here are the residual sub-blocks (I + the sub-block's Jacobian, as `bench lanczos`
measures them); section 4 and the sweep report the skipless K_sab. The peer is `scipy.sparse.linalg.svds` (ARPACK) on a `LinearOperator` whose products are PyTorch
autograd (JVP forward, VJP backward) on the same fp64 block; it runs in a child process killed when the budget
is spent. `dense κ` is the exact value from the dense route, and `inside` whether each bracket contains it.""")
    shown = df[["size", "init", "matrix", "route", "status", "seconds", "products", "kappa_lo", "kappa_hi",
                "dense_kappa", "dense_inside", "speedup"]]
    report.table(blank(shown.rename(columns={"dense_inside": "inside", "speedup": "svds / jacond"})))
    both = df[df["speedup"].notna()]
    outside = df[df["dense_inside"] == "no"]
    # A not-converged row claims only κ ≥ κ_lo (SciPy's κ_lo is 0 there): "inside" is true but says little.
    finite = df[(df["status"] != "not-converged") & np.isfinite(df["kappa_hi"].astype(float))]
    report.text((f"Where both routes bracket κ, jacond is {speedup_span(both['speedup'])}× faster. " if len(both) else
                 "No row where both routes bracket κ. ")
                + (f"Every finite bracket ({len(finite)} rows) contains the dense κ; the not-converged rows claim only "
                   "κ ≥ κ_lo, which holds." if outside.empty else
                   f"**{len(outside)} bracket(s) miss the dense κ** (a bug: brackets are rigorous)."))


def methods_section(r, report, df, figures):
    report.section("3. Which σ_min solver (`jacond bench lanczos --compare-methods`)")
    report.text("""
The hard case is the bare attention Jacobian K_sa of the `ours` init (κ ≈ 1e6). `restart-96` is the default
route (thick restarts, basis 96); `unrestarted` is one sweep with the whole space as its basis, the Krylov
optimum: any single-start method built from products with K and Kᵀ has, after j products, vectors in the same
Krylov space, so its products to 1 % are a lower bound for all of them (analysis/spectral/gkl.h).
`products to 1 %` counts the products until σ_min's rigorous upper end came within 1 % of the dense σ_min;
`2 nd` is the Krylov space exhausted.""")
    shown = df[["size", "nd", "matrix", "method", "status", "seconds", "products", "kappa_lo", "kappa_hi",
                "dense_kappa", "products_to_1pct"]].copy()
    shown["2 nd"] = 2 * shown["nd"]
    report.table(shown)
    for png in figures:
        r.add_figure(report, png, "products to a 1 % sigma_min per method, and the unrestarted traces",
                     name="scale_" + os.path.basename(png))
    hard = df[(df["method"] == "unrestarted") & df["products_to_1pct"].notna()]
    if len(hard):
        ratio = (hard["products_to_1pct"] / (2 * hard["nd"])).to_numpy(float)
        report.text(f"The unrestarted sweep came within 1 % of σ_min after {ratio.min():.4f}–{ratio.max():.4f} × 2 nd "
                    "products: only once the Krylov space is (nearly) full. At ViT-S (nd = 75 648) that is a basis of "
                    "2 × 45.8 GB in fp64, more than this machine holds; a factorisation (section 4, and the GPU's "
                    "section 5) is the route there.")


def routes_section(r, report, frames):
    report.section("4. One block, every route: exact, certified, bracket (`jacond block`)")
    size = ("n = 8, d = 16, 2 heads (nd 128)" if r.quick else "n = 100, d = 64, 4 heads (nd 6 400)")
    report.text(f"""
A skipless `ours` block, {size}, the same weights and tokens through each route. **exact**: LU + inverse
Lanczos, both ends to rounding. **certified**: the same, plus inertia counts (LDLᵀ of the augmented matrix
shifted just below and above σ_min, analysis/spectral/inertia.h) that prove where σ_min lies, so [κ_lo, κ_hi]
is rigorous; `within 1 % / 10 %` counts the singular values that close to σ_min. **matrix-free**: GKL
brackets from products alone (60 s budget per matrix), what is left where no factorisation fits.""")
    rows = []
    for route, df in frames.items():
        for _, row in df.iterrows():
            # A not-converged row's `kappa` is the solver's last estimate, not κ (only κ ≥ κ_lo is known): blank.
            rows.append({"route": route, "matrix": row["matrix"], "space": row["space"], "method": row["method"],
                         "status": row["status"],
                         "kappa": np.nan if row["status"] == "not-converged" else row["kappa"], "kappa_lo": row["kappa_lo"],
                         "kappa_hi": row["kappa_hi"], "seconds": row["seconds"],
                         "within 1 % / 10 %": ("" if pd.isna(row["within_1pct"]) else
                                              f"{int(row['within_1pct'])} / {int(row['within_10pct'])}")})
    table = pd.DataFrame(rows)
    table["route"] = pd.Categorical(table["route"], [name for name, _ in ROUTES], ordered=True)
    table = table.sort_values(["matrix", "space", "route"], kind="stable")
    report.table(blank(table))
    exact = table[table["route"] == "exact"].set_index(["matrix", "space"])["kappa"]
    lines = []
    for _, row in table[table["route"] != "exact"].iterrows():
        key = (row["matrix"], row["space"])
        if key not in exact.index or not np.isfinite(exact[key]):
            continue
        lo, hi = row["kappa_lo"], row["kappa_hi"]
        inside = lo <= exact[key] * (1 + 1e-9) and (not np.isfinite(hi) or hi >= exact[key] * (1 - 1e-9))
        if not inside:
            lines.append(f"- **{row['route']} {row['matrix']} ({row['space']}): [{lo:.6g}, {hi:.6g}] does not "
                         f"contain the exact κ {exact[key]:.6g}**")
    stuck = table[(table["route"] == "matrix-free") & (table["status"] == "not-converged")]
    stuck = stuck[[np.isfinite(exact.get((m, sp), np.nan)) for m, sp in zip(stuck["matrix"], stuck["space"])]]
    found = ("\n".join(lines) if lines else "Every certified and matrix-free interval contains the exact κ.")
    if len(stuck):
        found += (" In its budget the matrix-free route stopped at a lower bound (status not-converged) on "
                  + ", ".join(f"{m} ({sp}: κ_lo {lo:.3g}, κ {exact[(m, sp)]:.3g})"
                              for m, sp, lo in stuck[["matrix", "space", "kappa_lo"]].itertuples(index=False))
                  + ": section 3's finding, on one block, where a factorisation is exact in seconds.")
    singular = table[(table["route"] == "exact") & (table["status"] == "singular")]
    if len(singular):
        found += (" On the whole space " + " and ".join(sorted(set(singular["matrix"]))) + " are singular by construction "
                  "(LayerNorm's null space; their `ln-complement` rows are the meaningful ones): the dense route says so, "
                  "the matrix-free one can only raise κ_lo.")
    cert = table[table["route"] == "certified"].set_index(["matrix", "space"])
    plain = table[table["route"] == "exact"].set_index(["matrix", "space"])["seconds"]
    costs = [f"{m} ({sp}) {cert.loc[(m, sp), 'seconds'] / plain[(m, sp)]:.3g}×" for m, sp in cert.index
             if cert.loc[(m, sp), "status"] == "certified" and (m, sp) in plain.index]
    if costs:
        found += " The certificate costs " + ", ".join(costs) + " the time of the exact route (three LDLᵀ of the 2N × 2N augmented matrix)."
    report.text(found)


def gpu_section(report):
    """Where the GPU's numbers are: the gpu recipe's page, made from a GPU session's files (this page runs
    on the CPU only and names no GPU number, so that none goes stale beside the files it was read from)."""
    report.section("5. On a GPU (issue 11): reports/gpu")
    report.text("This page measures the CPU routes only, so it holds **no GPU number**: what `bash "
                "scripts/gpu_measure.sh` measured on a GPU machine (design §11), rendered by `jacond recipe gpu` from "
                "the logs and result files it brought back, is on its own page, [reports/gpu](../gpu/README.md), with "
                "the commands it ran.")


def run(r):
    dense_dir, peers_dir, methods_dir = r.work("bench-dense"), r.work("bench-peers"), r.work("bench-methods")
    r.run("bench", "dense", *(DENSE_QUICK if r.quick else DENSE), "--threads", r.threads, "--out", dense_dir)
    r.run("bench", "lanczos", *(PEERS_QUICK if r.quick else PEERS), "--threads", r.threads, "--out", peers_dir)
    r.run("bench", "lanczos", *(METHODS_QUICK if r.quick else METHODS), "--threads", r.threads, "--out", methods_dir)
    frames = {}
    for route, flags in ROUTES:
        directory = r.work("block-" + route)
        r.run("block", *(CERT_BLOCK_QUICK if r.quick else CERT_BLOCK), *flags, "--threads", r.threads, "--out", directory,
              accept=(0, 3))  # 3: a matrix-free bracket did not converge, a status this report shows
        frames[route] = r.read_csv(f"{directory}/results.csv")
    methods_figures = [p for p in r.plot(methods_dir) if "bench_lanczos_methods" in p]

    report = r.start_report("Scale: what each route costs and reaches")
    report.text(f"""
Every κ jacond reports carries its method and status (exact / certified / bracket / singular /
not-converged). This report measures, on this machine ({r.threads} threads), what each route costs as the
matrix grows and what it can certify, against the routes a researcher would otherwise take, in the same runs:
Python PyTorch (Debian `python3-torch`) for dense Jacobians and SciPy `svds` for matrix-free ones.""")
    dense_section(r, report, r.read_csv(f"{dense_dir}/bench_dense.csv"))
    peers_section(r, report, r.read_csv(f"{peers_dir}/bench_lanczos_peers.csv"))
    methods_section(r, report, r.read_csv(f"{methods_dir}/bench_lanczos_methods.csv"), methods_figures)
    routes_section(r, report, frames)
    gpu_section(report)
    r.finish(report)
