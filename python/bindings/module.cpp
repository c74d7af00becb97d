// jacond._jacond: the module definition (see bindings.h).
#include <pybind11/stl.h>

#include "analysis/core/crash_trace.h"
#include "analysis/core/threads.h"
#include "analysis/report/block_report.h"
#include "analysis/report/weight_report.h"
#include "analysis/jacobians/block.h"
#include "python/bindings/bindings.h"

#ifndef JACOND_VERSION
#error "JACOND_VERSION must come from CMake's project(VERSION)"
#endif

namespace py = pybind11;

PYBIND11_MODULE(_jacond, m) {
  m.doc() = "jacond's analysis core (C++): block Jacobians, their condition numbers, matrix-free operators";
  m.attr("__version__") = JACOND_VERSION;
  // A fatal signal inside the C++ prints its native frames, then Python's faulthandler (where enabled)
  // its Python ones: the handler found is chained (analysis/core/crash_trace.h).
  // The handler is the process's: a crash anywhere in it is labelled so, not as jacond's.
  jacond::install_crash_trace("a Python process that loaded jacond._jacond");
  m.def("set_threads", &jacond::set_threads, py::arg("n"),
        "Threads of the BLAS and of jacond's parallel loops (the CLI's --threads).");
  m.def("get_threads", &jacond::get_threads);
  m.def("block_matrix_names", &jacond::block_matrix_names, "The matrices block_reports computes, in report order.");
  m.def("weight_matrix_names", &jacond::weight_matrix_names, "The matrices weight_reports computes, in report order.");
  m.def("skip_modes", [] {
    std::vector<std::string> names;
    for (jacond::SkipMode s : jacond::kSkipModes) names.push_back(jacond::to_string(s));
    return names;
  });
  jacond::python::bind_block(m);
  jacond::python::bind_reports(m);
  jacond::python::bind_operators(m);
  jacond::python::bind_device(m);
}
