// Report (jacond::ConditionReport) and the functions that make them, by the CLI's routes and options.
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>

#include "analysis/operators/operators.h"
#include "analysis/report/block_report.h"
#include "analysis/report/report_csv.h"
#include "analysis/report/weight_report.h"
#include "python/bindings/bindings.h"

namespace py = pybind11;

namespace jacond::python {

Mat checked_tokens(const Eigen::Ref<const Mat>& X, const BlockWeights& w) {
  if (X.cols() != w.d)
    throw std::invalid_argument("X has d=" + std::to_string(X.cols()) + " columns but the block has d=" + std::to_string(w.d));
  if (X.rows() < 2) throw std::invalid_argument("X needs at least 2 tokens (rows), got " + std::to_string(X.rows()));
  if (!X.allFinite()) throw std::invalid_argument("X contains NaN or inf");
  return X;
}

namespace {

// The options of `jacond block` (experiments/cli/cmd_block.cpp), with its defaults.
BlockReportOptions block_options(const std::string& method, const std::optional<std::vector<std::string>>& matrices,
                                 double lanczos_seconds, double lanczos_tol, Index lanczos_basis, Index max_products,
                                 const std::string& certify, double dense_max_bytes) {
  BlockReportOptions opt;
  opt.route = parse_kappa_route(method);
  if (matrices) {
    std::string joined;
    for (const auto& name : *matrices) joined += (joined.empty() ? "" : ",") + name;
    opt.matrices = parse_matrix_names(joined, block_matrix_names());
  }
  if (!(lanczos_seconds > 0)) throw std::invalid_argument("lanczos_seconds must be > 0");
  if (!(lanczos_tol > 0)) throw std::invalid_argument("lanczos_tol must be > 0");
  if (lanczos_basis < 2) throw std::invalid_argument("lanczos_basis must be >= 2");
  if (max_products < 8) throw std::invalid_argument("max_products must be >= 8, got " + std::to_string(max_products));
  if (!(dense_max_bytes >= 0) || std::isinf(dense_max_bytes))
    throw std::invalid_argument("dense_max_bytes must be finite and >= 0 (0: half of physical memory)");
  opt.lanczos.max_seconds = lanczos_seconds;
  opt.lanczos.tolerance = lanczos_tol;
  opt.lanczos.max_basis = lanczos_basis;
  opt.lanczos.keep = std::max<Index>(1, lanczos_basis / 3);  // as the CLI
  opt.lanczos.max_products = max_products;
  opt.certify = parse_certify_mode(certify);
  opt.dense_max_bytes = dense_max_bytes;
  return opt;
}

// Ctrl-C during a long computation: the matrix-free solver's progress callback (called at every
// estimate) and the dense routes' hook before each factorisation take the GIL and let Python look
// at its signals; a pending KeyboardInterrupt unwinds the solver (RAII all the way) as Interrupted,
// and is raised once the GIL is back. A factorisation already running (one LAPACK call) finishes
// first: the wait is at most one matrix's dense κ (on the host's Schur route, one panel, solve or
// LU call; for the token block-diagonal K_mlp / K_ffn, one token's SVD).
struct Interrupted {};

void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw Interrupted{};
}

void interrupt_on_signal(BlockReportOptions& opt) {
  opt.lanczos.progress = [](const GklProgress&) { check_signals(); };
  opt.before_dense_solve = check_signals;
  opt.within_dense_solve = check_signals;  // the Schur route (host or GPU): between its panels and solves;
                                           // the per-token K_mlp / K_ffn: between their tokens' SVDs
}

std::vector<ConditionReport> reports_of_block(const BlockWeights& w, const Eigen::Ref<const Mat>& X,
                                              const std::string& skip, const std::string& method,
                                              const std::optional<std::vector<std::string>>& matrices,
                                              double lanczos_seconds, double lanczos_tol, Index lanczos_basis,
                                              Index max_products, const std::string& certify, double dense_max_bytes,
                                              const std::string& norm, const std::string& device,
                                              double host_memory_bytes) {
  const Mat tokens = checked_tokens(X, w);
  const SkipMode mode = parse_skip_mode(skip);
  if (norm != "pre" && norm != "post") throw std::invalid_argument("norm must be pre or post, got '" + norm + "'");
  BlockReportOptions opt =
      block_options(method, matrices, lanczos_seconds, lanczos_tol, lanczos_basis, max_products, certify, dense_max_bytes);
  if (!(host_memory_bytes >= 0) || std::isinf(host_memory_bytes))
    throw std::invalid_argument("host_memory_bytes must be finite and >= 0 (0: 90% of physical memory)");
  const bool host_exact = opt.route == KappaRoute::kFast || opt.route == KappaRoute::kSchur || opt.route == KappaRoute::kAuto;
  if (host_memory_bytes > 0 && (!host_exact || device != "cpu"))  // the CLI's --host-memory rule (cmd_block.cpp)
    throw std::invalid_argument("host_memory_bytes bounds the host's exact route (method 'dense', 'schur' or 'auto' on "
                                "device 'cpu'), which method '" + method + "' on device '" + device + "' does not take");
  opt.host_memory_bytes = host_memory_bytes;
  opt.device = dense_device(device);  // before resolve_route: `auto` asks the device what fits
  resolve_auto(opt, tokens.rows(), w.d);
  interrupt_on_signal(opt);
  try {
    py::gil_scoped_release release;
    return norm == "pre" ? block_reports(w, tokens, mode, opt) : post_norm_block_reports(w, tokens, opt);
  } catch (const Interrupted&) {
    throw py::error_already_set();  // the KeyboardInterrupt PyErr_CheckSignals left pending
  }
}

// condition_dense's routes; its Lanczos route (method 'lanczos', or 'auto' where the dense route
// does not fit) with the caller's budget and block_reports' Ctrl-C hook (without it a call ignored
// KeyboardInterrupt for its whole 120 s).
ConditionReport condition_of(Mat A, const std::string& method, const std::string& name, const std::string& device,
                             double lanczos_seconds, double lanczos_tol) {
  if (A.size() == 0) throw std::invalid_argument("A is empty");
  if (!A.allFinite()) throw std::invalid_argument("A contains NaN or inf");
  const KappaRoute route = parse_kappa_route(method);
  if (route == KappaRoute::kSchur)
    throw std::invalid_argument("method 'schur' is block_reports' route, which never holds K; an assembled A takes 'dense'");
  if (!(lanczos_seconds > 0)) throw std::invalid_argument("lanczos_seconds must be > 0");
  if (!(lanczos_tol > 0)) throw std::invalid_argument("lanczos_tol must be > 0");
  const auto on = dense_device(device);
  GklOptions gkl;
  gkl.max_seconds = lanczos_seconds;
  gkl.tolerance = lanczos_tol;
  gkl.progress = [](const GklProgress&) { check_signals(); };
  try {
    py::gil_scoped_release release;
    return condition_dense(std::move(A), name, route, on, gkl);  // the routes factor in place: A is this call's copy
  } catch (const Interrupted&) {
    throw py::error_already_set();  // the KeyboardInterrupt PyErr_CheckSignals left pending
  }
}

py::dict to_dict(const ConditionReport& r) {
  py::dict d;
  d["matrix"] = r.matrix, d["space"] = r.space, d["head"] = r.head, d["rows"] = r.rows, d["cols"] = r.cols;
  d["dtype"] = r.dtype, d["method"] = r.method, d["status"] = to_string(r.status);
  d["sigma_max"] = r.sigma_max, d["sigma_min"] = r.sigma_min, d["kappa"] = r.kappa;
  d["kappa_lo"] = r.kappa_lo, d["kappa_hi"] = r.kappa_hi, d["rank"] = r.rank, d["products"] = r.products;
  d["seconds"] = r.seconds, d["within_1pct"] = r.within_1pct, d["within_10pct"] = r.within_10pct, d["note"] = r.note;
  return d;
}

}  // namespace

void bind_reports(py::module_& m) {
  py::class_<ConditionReport>(m, "Report", "One matrix's condition report: the columns of jacond's CSVs.")
      .def_readonly("matrix", &ConditionReport::matrix)
      .def_readonly("space", &ConditionReport::space)
      .def_readonly("head", &ConditionReport::head)
      .def_readonly("rows", &ConditionReport::rows)
      .def_readonly("cols", &ConditionReport::cols)
      .def_readonly("dtype", &ConditionReport::dtype)
      .def_readonly("method", &ConditionReport::method)
      .def_property_readonly("status", [](const ConditionReport& r) { return to_string(r.status); })
      .def_readonly("sigma_max", &ConditionReport::sigma_max)
      .def_readonly("sigma_min", &ConditionReport::sigma_min)
      .def_readonly("kappa", &ConditionReport::kappa)
      .def_readonly("kappa_lo", &ConditionReport::kappa_lo)
      .def_readonly("kappa_hi", &ConditionReport::kappa_hi)
      .def_readonly("rank", &ConditionReport::rank)
      .def_readonly("products", &ConditionReport::products)
      .def_readonly("seconds", &ConditionReport::seconds)
      .def_readonly("within_1pct", &ConditionReport::within_1pct)
      .def_readonly("within_10pct", &ConditionReport::within_10pct)
      .def_readonly("note", &ConditionReport::note)
      .def("to_dict", &to_dict, "The fields as a dict (head -1: a whole matrix; within_* -1: not counted).")
      .def("csv_fields", &report_csv_fields, "The fields as jacond writes them in a CSV row (report_csv_header order).")
      .def("__repr__", [](const ConditionReport& r) {
        return "Report(" + r.matrix + (r.space == "full" ? "" : " on " + r.space) +
               (r.head >= 0 ? " head " + std::to_string(r.head) : "") + ": kappa=" + format_number(r.kappa) + " [" +
               format_number(r.kappa_lo) + ", " + format_number(r.kappa_hi) + "], " + to_string(r.status) + ", " +
               r.method + ")";
      });
  m.def("report_csv_header", &report_csv_header, "The report columns of every CSV jacond writes.");
  m.def("block_reports", &reports_of_block, py::arg("block"), py::arg("X"), py::kw_only(), py::arg("skip") = "full",
        py::arg("method") = "auto", py::arg("matrices") = py::none(), py::arg("lanczos_seconds") = GklOptions{}.max_seconds,
        py::arg("lanczos_tol") = 0.01, py::arg("lanczos_basis") = GklOptions{}.max_basis,
        py::arg("max_products") = GklOptions{}.max_products, py::arg("certify") = "none",
        py::arg("dense_max_bytes") = 0.0, py::arg("norm") = "pre", py::arg("device") = "cpu",
        py::arg("host_memory_bytes") = 0.0,
        R"(Condition reports of one block at tokens X (n x d), as `jacond block`: K_sa, B_sa, E_sa, K_sab,
K_mlp, K_ffn, softmax and attention per head, then the token matrices. method: auto | dense | fast |
svd | mixed | schur | lanczos; matrices: names to compute (None: all); certify: none | inertia | auto;
norm "post": a post-norm block, whose attention sees X itself (K_sa, B_sa, E_sa, softmax, attention);
device: cpu | cuda, where the dense exact routes run (as --device); host_memory_bytes: what the host's
exact route may hold (0: 90% of RAM), past which it takes the Schur route (as --host-memory).)");
  m.def("weight_reports", [](const BlockWeights& w) {
    py::gil_scoped_release release;
    return weight_reports(w);
  }, py::arg("block"), "Data-free reports of one block (`jacond audit --data-free`): W_VO, W_VO_h, W_QK_h, W_Q ... W_2.");
  m.def("condition", &condition_of, py::arg("A"), py::kw_only(), py::arg("method") = "auto", py::arg("name") = "A",
        py::arg("device") = "cpu", py::arg("lanczos_seconds") = GklOptions{}.max_seconds,
        py::arg("lanczos_tol") = GklOptions{}.tolerance,
        "The condition report of a dense matrix by one of jacond's routes (auto | dense | svd | mixed | lanczos), "
        "the dense ones on `device` (cpu | cuda). The Lanczos route ('lanczos', or 'auto' where the dense route does "
        "not fit) stops at lanczos_seconds or at kappa_hi/kappa_lo <= 1 + lanczos_tol, and at Ctrl-C "
        "(KeyboardInterrupt) at its next estimate.");
}

}  // namespace jacond::python
