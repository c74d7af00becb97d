// `jacond bench lanczos`'s rows (bench_lanczos.cpp) and the checks that fail a run after its
// results are written, apart (header only: the bench's sources build into `jacond` alone) so that
// tests/bench/test_bench_rules.cpp can call check_brackets on hand-built rows.
#pragma once

#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/spectral/condition.h"
#include "analysis/spectral/gkl.h"

namespace jacond::cli::bench_lanczos {

/// One SciPy svds run (scipy_svds_route.py's JSON line).
struct PeerResult {
  std::string solver, status, note;
  double seconds = 0, setup_s = 0, kappa_lo = 0, kappa_hi = 0, rss_mb = 0;  // kappa_hi 0 = infinite
  std::vector<double> seconds_runs;  // every timed run (seconds is their median)
  long long products = 0;
  bool dense_checked = false, dense_inside = false;  // the dense κ inside [kappa_lo, kappa_hi]
};

/// When a run's σ_min upper end (Courant–Fischer, rigorous) first came within 1 % and 10 % of the
/// dense σ_min: products of the whole call at that estimate (−1: never).
struct Approach {
  Index products_1pct = -1, products_10pct = -1;
};

/// One route's runs on one matrix: the first run's report (its seconds replaced by the median of
/// seconds_runs) and the seconds the first run spent inside the products (the rest is the GKL
/// recurrence, its orthogonalisation and the bracket's small eigenproblems, all on the host).
struct RouteRun {
  LanczosCondition lz;
  std::vector<double> seconds_runs;
  double product_s = 0;
};

/// --device: the same route with its products on an OperatorDevice.
struct DeviceRun {
  std::string route;  // jacond-gkl-<device>
  RouteRun run;
  bool dense_inside = false;
};

struct Row {
  std::string size, init, matrix, method = "restart-96";
  Index basis = 96;
  double sigma_min_dense = 0;
  Approach approach;
  std::vector<GklProgress> trace;
  Index n = 0, d = 0, heads = 0;
  RouteRun host;             // jacond's route with the host's kernels
  double rss_mb = 0;
  bool dense_checked = false;
  double dense_kappa = 0, dense_seconds = 0;
  bool dense_inside = false;
  std::vector<PeerResult> peers;
  std::optional<DeviceRun> device;
};

// Relative slack of every bound check here: the two roundings of a κ computed two ways.
constexpr double kBoundSlack = 1e-9;

// Whether [lo_a, hi_a] and [lo_b, hi_b] share a point, up to relative rounding 1e-9.
inline bool intervals_meet(double lo_a, double hi_a, double lo_b, double hi_b) {
  return lo_a <= hi_b * (1 + kBoundSlack) && lo_b <= hi_a * (1 + kBoundSlack);
}

// Host and device brackets of one κ must intersect: each contains it (under the solver's one
// assumption, gkl.h), and the products differ by round-off only.
inline bool brackets_intersect(const Row& r) {
  const ConditionReport &a = r.host.lz.report, &b = r.device->run.lz.report;
  if (a.status != Status::kBracket || b.status != Status::kBracket) return true;
  return intervals_meet(a.kappa_lo, a.kappa_hi, b.kappa_lo, b.kappa_hi);
}

inline bool jacond_reached(const Row& r) { return r.host.lz.report.status == Status::kBracket; }
inline bool peer_reached(const PeerResult& p) { return p.status == "bracket"; }

// Two brackets of one κ, each rigorous (the peer's from the same residual bounds, its module
// docstring), must intersect: disjoint ones mean one side computed another matrix or a wrong
// bound, and a speed ratio between them would compare a right answer with a wrong one.
// A peer that did not converge still bounds κ from below: its κ_lo = σ_max_lo / σ_min_hi = ‖K v‖ /
// ‖K v'‖ rests on Courant–Fischer alone, whatever the solver reached (scipy_svds_route.py), so
// [κ_lo, ∞) must meet jacond's bracket; its κ_hi, from an unconverged σ_min lower end, is not held
// to anything.
inline bool peer_agrees(const Row& r, const PeerResult& p) {
  if (!jacond_reached(r) || p.status == "error") return true;
  const ConditionReport& c = r.host.lz.report;
  const double peer_hi = !peer_reached(p) || p.kappa_hi == 0 ? std::numeric_limits<double>::infinity() : p.kappa_hi;
  return intervals_meet(c.kappa_lo, c.kappa_hi, p.kappa_lo, peer_hi);
}

// Whether a peer's bracket is consistent with the dense κ: a converged one holds it
// (PeerResult::dense_inside), an unconverged one still lies below it (its κ_lo, as above).
inline bool peer_holds_dense(const Row& r, const PeerResult& p) {
  if (!p.dense_checked || p.status == "error") return true;
  return peer_reached(p) ? p.dense_inside : p.kappa_lo <= r.dense_kappa * (1 + kBoundSlack);
}

// The checks that make the run fail (exit 1) after its results are written: a dense κ outside a
// bracket (or under an unconverged peer's κ_lo), the host's and the device's brackets of one
// matrix disjoint, jacond's and a peer's disjoint (an unconverged peer's: [κ_lo, ∞)), or a peer
// that failed to run.
inline void check_brackets(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    if (r.dense_checked && !r.dense_inside) throw std::runtime_error("dense kappa outside the lanczos bracket for " + r.matrix);
    for (const PeerResult& p : r.peers) {
      const std::string which = "the svds " + p.solver + " route for " + r.matrix + " (" + r.size + ", " + r.init + ")";
      if (p.status == "error") throw std::runtime_error(which + " failed: " + p.note);
      if (!peer_holds_dense(r, p)) {
        if (peer_reached(p)) throw std::runtime_error("dense kappa outside " + which + "'s bracket");
        char buf[96];
        std::snprintf(buf, sizeof buf, "dense kappa %.6g below the lower bound kappa_lo %.6g of ", r.dense_kappa, p.kappa_lo);
        throw std::runtime_error(buf + which + " (" + p.status + ")");
      }
      if (!peer_agrees(r, p))
        throw std::runtime_error(peer_reached(p) ? "jacond's bracket and " + which + "'s do not intersect"
                                                 : "jacond's kappa_hi is below the lower bound kappa_lo of " + which +
                                                       " (" + p.status + ")");
    }
    if (!r.device) continue;
    if (r.dense_checked && !r.device->dense_inside)
      throw std::runtime_error("dense kappa outside the " + r.device->route + " bracket for " + r.matrix);
    if (!brackets_intersect(r))
      throw std::runtime_error("the host and " + r.device->route + " brackets of " + r.matrix + " (" + r.size + ", " +
                               r.init + ") do not intersect");
  }
}

}  // namespace jacond::cli::bench_lanczos
