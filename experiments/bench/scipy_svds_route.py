"""The SciPy user's route to a matrix-free κ(K): `scipy.sparse.linalg.svds` on autograd products.

Run by `jacond bench lanczos` as a subprocess on the same weights and tokens it analyses
in-process (issue #10, item 4):

    python3 scipy_svds_route.py --weights W.safetensors --tokens T.safetensors --heads H \
        --matrix K_sa|K_sab|K_ffn --solver arpack|propack|lobpcg --seconds S --tol 0.01 \
        [--layer 0] [--logit-scale S] [--ln-eps 1e-6] [--threads T] [--seed 0]

The block is rebuilt in fp64 torch as docs/design.md §2 has it (pre-norm, timm keys, exact GELU,
LayerNorm with biased variance); the three matrices are those of `jacond bench lanczos`:

    K_sa   d SA(Y)/dY at Y = LN1(X)              (bare attention, no residual)
    K_sab  d [X + SA(LN1 X)]/dX at X
    K_ffn  d [X1 + MLP(LN2 X1)]/dX1 at X1 = X + SA(LN1 X)

K is a `scipy.sparse.linalg.LinearOperator` of shape (nd, nd) on row-major flattened [n, d]
tensors (a permutation of jacond's column-major vec on both sides: the singular values are
the same). matvec is a forward-mode JVP (torch.autograd.forward_ad), rmatvec a VJP through one
retained reverse graph (torch.autograd.grad(..., retain_graph=True)): the products a PyTorch user
writes for a matrix-free Jacobian. svds runs twice, which='LM' and which='SM', k = 1, with the
solver's defaults otherwise (ARPACK: eigsh on KᵀK; PROPACK: implicitly restarted GKL, opt-in by
SCIPY_USE_PROPACK=1, set here before scipy is imported; LOBPCG on KᵀK).

Same target as jacond: both ends get the same residual bracket jacond's GKL reports
(analysis/spectral/gkl.h), from the returned triplet (u, s, v) and two explicit products:
    η = ‖[K v − s u; Kᵀ u − s v]‖ / √2,  σ_max ∈ [‖K v‖, s + η],  σ_min ∈ [max(0, s − η), ‖K v‖]
(Weyl on [0 K; Kᵀ 0] and Courant–Fischer; the outer ends assume no singular value was missed,
as jacond's do). svds' `tol` is not a bracket width, so each end is run with tol = 1e-2, then
1e-4, 1e-6, ... (warm-started from the previous vector, time accumulated) until
κ_hi / κ_lo ≤ 1 + --tol or the budget is spent: a careful user's loop, and the same bracket
width jacond is asked for.

Budget: --seconds of wall clock for both ends together (setup excluded, reported apart). The
solver runs in a forked child process and this process kills it when the budget is spent
(an exception raised inside a product does not stop PROPACK: its Fortran callback swallows it),
so "did not converge in N s" is measured, not guessed; the products done by then are counted
in shared memory.

--repeats R: a route that converges in under 2 s is run R times (a new child each time, setup
excluded as before) and "seconds" is the median; "seconds_runs" lists them all.

Prints ONE JSON line on stdout:
    {"status": "bracket" | "not-converged", "solver", "matrix", "seconds", "seconds_runs", "setup_s",
     "products", "sigma_max_lo", "sigma_max_hi", "sigma_min_lo", "sigma_min_hi", "kappa_lo",
     "kappa_hi" (null when infinite), "tol_max", "tol_min" (the last svds tol of each end),
     "peak_rss_mb", "torch_version", "scipy_version", "threads", "note", ...}
Errors go to stderr with exit status 1.
"""

import argparse
import json
import math
import multiprocessing
import os
import queue
import resource
import sys
import time
import warnings

os.environ.setdefault("SCIPY_USE_PROPACK", "1")  # read when scipy.sparse.linalg is imported
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy.sparse.linalg import LinearOperator, svds  # noqa: E402
import torch  # noqa: E402
import torch.autograd.forward_ad as fwad  # noqa: E402

# safetensors_reader: python/jacond/safetensors.py, loaded by file path by torch_dense_route.
from torch_dense_route import build_attention, load_tokens, safetensors_reader, tensor  # noqa: E402


def layernorm(x, gamma, beta, eps):
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)   # biased, as timm and jacond
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def build_block(weights_path, layer, heads, logit_scale, d, ln_eps):
    """LN1, SA, LN2 and MLP of block `layer` as torch functions of [n, d] fp64 tensors."""
    tensors, _ = safetensors_reader.read(weights_path)
    p = f"blocks.{layer}."
    g1 = tensor(tensors, p + "norm1.weight", weights_path, [d])
    b1 = tensor(tensors, p + "norm1.bias", weights_path, [d])
    g2 = tensor(tensors, p + "norm2.weight", weights_path, [d])
    b2 = tensor(tensors, p + "norm2.bias", weights_path, [d])
    if p + "mlp.fc1.weight" not in tensors:
        raise ValueError(f"{weights_path}: missing key {p}mlp.fc1.weight")
    hidden = tensors[p + "mlp.fc1.weight"].shape[0]
    w_fc1 = tensor(tensors, p + "mlp.fc1.weight", weights_path, [hidden, d])
    b_fc1 = tensor(tensors, p + "mlp.fc1.bias", weights_path, [hidden])
    w_fc2 = tensor(tensors, p + "mlp.fc2.weight", weights_path, [d, hidden])
    b_fc2 = tensor(tensors, p + "mlp.fc2.bias", weights_path, [d])
    sa, scale = build_attention(tensors, weights_path, layer, heads, logit_scale, d)

    def ln1(x):
        return layernorm(x, g1, b1, ln_eps)

    def ln2(x):
        return layernorm(x, g2, b2, ln_eps)

    def mlp(y):
        return torch.nn.functional.gelu(y @ w_fc1.T + b_fc1) @ w_fc2.T + b_fc2   # exact (erf) GELU

    return ln1, sa, ln2, mlp, scale


def matrix_function(matrix, x, ln1, sa, ln2, mlp):
    """(f, x0): the function whose Jacobian at x0 is the matrix (module docstring)."""
    with torch.no_grad():
        if matrix == "K_sa":
            return sa, ln1(x)
        if matrix == "K_sab":
            return (lambda z: z + sa(ln1(z))), x
        if matrix == "K_ffn":
            return (lambda z: z + mlp(ln2(z))), x + sa(ln1(x))
    raise ValueError(f"--matrix: unknown matrix {matrix} (K_sa | K_sab | K_ffn)")


class AutogradOperator:
    """K = ∂f/∂x at x0 as products: JVP by forward-mode AD, VJP through one retained graph."""

    def __init__(self, f, x0, counter):
        self.f, self.shape0, self.counter = f, x0.shape, counter
        self.x0 = x0.detach().clone()
        x = self.x0.clone().requires_grad_(True)
        self.x_graph, self.y_graph = x, f(x)
        size = x0.numel()
        self.linear_operator = LinearOperator((size, size), matvec=self.matvec, rmatvec=self.rmatvec,
                                              dtype=np.float64)

    def _tick(self):
        self.counter.value += 1  # a lock-free shared counter: this process is its only writer (run_once)

    def matvec(self, v):
        self._tick()
        t = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64).reshape(self.shape0))
        with fwad.dual_level():
            out = self.f(fwad.make_dual(self.x0, t))
            tangent = fwad.unpack_dual(out).tangent
        return tangent.detach().reshape(-1).numpy().copy()

    def rmatvec(self, u):
        self._tick()
        g = torch.from_numpy(np.ascontiguousarray(u, dtype=np.float64).reshape(self.shape0))
        (grad,) = torch.autograd.grad(self.y_graph, self.x_graph, grad_outputs=g, retain_graph=True)
        return grad.detach().reshape(-1).numpy().copy()


def residual_bracket(op, u, s, v, largest):
    """jacond's bracket for one end from a triplet (module docstring); two explicit products."""
    u = u / np.linalg.norm(u)
    v = v / np.linalg.norm(v)
    kv = op.matvec(v)
    ktu = op.rmatvec(u)
    eta = math.sqrt(np.sum((kv - s * u) ** 2) + np.sum((ktu - s * v) ** 2)) / math.sqrt(2.0)
    norm_kv = float(np.linalg.norm(kv))
    if largest:
        return norm_kv, s + eta
    return max(0.0, s - eta), norm_kv


def first_line(e):
    """`Type: first line of the message`, for one-line notes."""
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"


def solve_end(op, args, largest, tols, rng, seed):
    """svds for one end at successive tolerances; yields (lo, hi, tol, None) after each solve, or
    (None, None, tol, note) once a solve fails (the previous bracket stands)."""
    v0 = rng.standard_normal(op.linear_operator.shape[1])
    size = op.linear_operator.shape[1]
    # LOBPCG's own default is 20 iterations and PROPACK's Krylov dimension 10·k: raised so that
    # the budget is what stops a solver (PROPACK's basis capped at --basis, as jacond's).
    maxiter = {"lobpcg": 10 ** 7, "propack": min(size, args.basis)}.get(args.solver)
    for tol in tols:
        try:
            u, s, vt = svds(op.linear_operator, k=1, which="LM" if largest else "SM", tol=tol, v0=v0,
                            solver=args.solver, random_state=seed, maxiter=maxiter)
        except Exception as e:  # ArpackNoConvergence, PROPACK's LinAlgError, ...
            yield None, None, tol, f"svds at tol {tol:g} stopped: {first_line(e)}"
            return
        lo, hi = residual_bracket(op, u[:, 0], float(s[0]), vt[0], largest)
        v0 = vt[0].copy()
        yield lo, hi, tol, None


def warm_up(op, solver):
    """Untimed, as jacond's warm_up before its timed runs (bench_lanczos.cpp): one product each way
    (autograd's first forward-mode JVP and first VJP build their kernels: 5 ms against 0.5 ms
    afterwards at n 12, d 16) and one svds on a 10 x 10 matrix, which loads the solver's code
    (ARPACK / PROPACK) and not the operator. The products are not counted."""
    v = np.ones(op.linear_operator.shape[1])
    op.rmatvec(op.matvec(v))
    svds(np.diag(np.arange(10.0, 0.0, -1.0)), k=1, solver=solver, random_state=0)
    op.counter.value = 0


def solve(args, counter, events):
    """The child process: builds the operator, then both ends; every step is an event."""
    torch.set_grad_enabled(True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # LOBPCG's per-call "not reaching the requested tolerance"
    t_setup = time.perf_counter()
    x = load_tokens(args.tokens)
    n, d = x.shape
    ln1, sa, ln2, mlp, scale = build_block(args.weights, args.layer, args.heads, args.logit_scale, d, args.ln_eps)
    f, x0 = matrix_function(args.matrix, x, ln1, sa, ln2, mlp)
    op = AutogradOperator(f, x0, counter)
    warm_up(op, args.solver)
    events.put({"event": "ready", "setup_s": time.perf_counter() - t_setup, "n": n, "d": d, "logit_scale": scale,
                "threads": torch.get_num_threads()})
    rng = np.random.default_rng(args.seed)
    tols = [10.0 ** (-e) for e in range(2, 15, 2)]
    smax_lo = smax_hi = None
    for lo, hi, tol, failed in solve_end(op, args, True, tols, rng, args.seed):
        if failed:
            if smax_lo is None:
                events.put({"event": "stopped", "note": "sigma_max: " + failed})
                return
            break
        smax_lo, smax_hi = lo, hi
        events.put({"event": "max", "lo": lo, "hi": hi, "tol": tol})
        if hi <= lo * (1 + args.tol / 4):
            break
    for lo, hi, tol, failed in solve_end(op, args, False, tols, rng, args.seed + 1):
        if failed:
            events.put({"event": "stopped", "note": "sigma_min: " + failed})
            return
        events.put({"event": "min", "lo": lo, "hi": hi, "tol": tol})
        if lo > 0 and smax_hi / lo <= (smax_lo / hi) * (1 + args.tol):
            events.put({"event": "converged"})
            return
    events.put({"event": "stopped", "note": f"bracket wider than 1 + {args.tol} after the tightest svds tol"})


def child_main(args, counter, events):
    try:
        solve(args, counter, events)
    except Exception as e:  # bad files during setup, or a failure svds' own handling did not catch
        events.put({"event": "error", "note": first_line(e)})


def run(args):
    """run_once, repeated (--repeats) while it converges in under REPEAT_BELOW_S: one run of a
    fraction of a second is at the mercy of the scheduler, so the line reports the median of the
    runs' seconds (every run's in seconds_runs; the other fields are the first run's)."""
    first = run_once(args)
    times = [first["seconds"]]
    while len(times) < args.repeats and first["status"] == "bracket" and first["seconds"] < REPEAT_BELOW_S:
        again = run_once(args)
        if again["status"] != "bracket":
            return again
        times.append(again["seconds"])
    first["seconds_runs"] = times
    first["seconds"] = float(np.median(times))
    return first


REPEAT_BELOW_S = 2.0  # the same rule as jacond bench lanczos (kRepeatBelowSeconds)


def ready_event(events, child):
    """The child's first event; an error event if it exits without one (a crash in setup)."""
    while True:
        try:
            return events.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                return {"event": "error", "note": f"the solver process exited (code {child.exitcode}) before it was ready"}


def run_once(args):
    """Runs the child under the budget and gathers its events into the result line."""
    ctx = multiprocessing.get_context("fork")
    # The product counter has no lock: the child is its only writer, and the parent reads it once
    # the child is gone. A locked Value deadlocked the parent when the budget's kill landed while
    # the child held the lock (its semaphore is never released; seen on tiny blocks, where the
    # child spends much of its time in the increment).
    counter, events = ctx.RawValue("q", 0), ctx.Queue()
    child = ctx.Process(target=child_main, args=(args, counter, events), daemon=True)
    child.start()
    ready = ready_event(events, child)  # setup is not part of the budget
    if ready["event"] != "ready":
        child.join()
        raise RuntimeError(ready["note"])
    t0 = time.perf_counter()
    deadline = t0 + args.seconds
    ends = {"max": (0.0, math.inf, None), "min": (0.0, math.inf, None)}
    status, note = "not-converged", f"did not converge in {args.seconds:g} s"
    while True:
        try:
            ev = events.get(timeout=max(0.0, deadline - time.perf_counter()))
        except queue.Empty:
            break
        if ev["event"] in ("max", "min"):
            ends[ev["event"]] = (ev["lo"], ev["hi"], ev["tol"])
        elif ev["event"] == "converged":
            status, note = "bracket", ""
            break
        else:  # stopped, or an error inside svds
            note = ev["note"] if ev["event"] == "stopped" else "svds stopped: " + ev["note"]
            break
    seconds = time.perf_counter() - t0
    if child.is_alive():
        child.kill()
    child.join()

    smax_lo, smax_hi, tol_max = ends["max"]
    smin_lo, smin_hi, tol_min = ends["min"]
    kappa_lo = smax_lo / smin_hi if smin_hi > 0 and math.isfinite(smin_hi) else 0.0
    kappa_hi = smax_hi / smin_lo if smin_lo > 0 else math.inf
    return {
        "status": status, "note": note, "solver": args.solver, "matrix": args.matrix,
        "seconds": seconds, "setup_s": ready["setup_s"], "budget_s": args.seconds, "products": counter.value,
        "sigma_max_lo": smax_lo, "sigma_max_hi": smax_hi if math.isfinite(smax_hi) else None,
        "sigma_min_lo": smin_lo, "sigma_min_hi": smin_hi if math.isfinite(smin_hi) else None,
        "kappa_lo": kappa_lo, "kappa_hi": kappa_hi if math.isfinite(kappa_hi) else None,
        "tol_max": tol_max, "tol_min": tol_min, "target_tol": args.tol,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0,
        "torch_version": torch.__version__, "scipy_version": scipy.__version__, "numpy_version": np.__version__,
        "threads": ready["threads"], "n": ready["n"], "d": ready["d"], "heads": args.heads, "layer": args.layer,
        "logit_scale": ready["logit_scale"], "products_route": "forward_ad JVP, retained-graph VJP",
        "dtype": "float64",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", required=True, help="safetensors with timm block keys")
    parser.add_argument("--tokens", required=True, help="safetensors with `tokens` [n, d] (block input X)")
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--matrix", required=True, choices=["K_sa", "K_sab", "K_ffn"])
    parser.add_argument("--solver", default="arpack", choices=["arpack", "propack", "lobpcg"])
    parser.add_argument("--seconds", type=float, default=120.0, help="wall-clock budget, both ends")
    parser.add_argument("--tol", type=float, default=0.01, help="target kappa_hi/kappa_lo - 1")
    parser.add_argument("--basis", type=int, default=96, help="PROPACK's Krylov dimension (jacond's --basis)")
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--logit-scale", type=float, default=None, help="s in M_h = s Q_h K_hᵀ (default 1/sqrt(d_h))")
    parser.add_argument("--ln-eps", type=float, default=1e-6)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0, help="start vectors")
    parser.add_argument("--repeats", type=int, default=1,
                        help=f"runs of a route that converges in under {REPEAT_BELOW_S:g} s (median seconds reported)")
    args = parser.parse_args()
    if not args.seconds > 0 or not args.tol > 0 or args.basis < 2 or args.repeats < 1:
        parser.error("--seconds and --tol must be > 0, --basis >= 2 and --repeats >= 1")
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, OSError, RuntimeError) as e:
        print(f"scipy_svds_route.py: error: {e}", file=sys.stderr)
        sys.exit(1)
