// The Python comparison routes of `jacond bench` (docs/design.md §8: speed is measured against the route
// a user would take otherwise), run as subprocesses of Debian's /usr/bin/python3.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace jacond::cli {

struct PythonRun {
  int exit_code = -1;
  double wall_s = 0;  // whole subprocess: interpreter start, imports, work
  std::string stdout_text, stderr_text;
};

/// Runs argv (argv[0] = the interpreter path) with stdout/stderr captured to files in `dir`,
/// OMP/OPENBLAS/MKL_NUM_THREADS set to `threads` and the rest of the environment inherited.
PythonRun spawn_python(const std::vector<std::string>& argv, int threads, const std::string& dir);

/// Runs a route script that prints one JSON result line (its last non-empty stdout line) and
/// checks `required_keys`. Throws one line naming `what`, the exit status and stderr's tail.
nlohmann::json run_python_json(const std::vector<std::string>& argv, int threads, const std::string& dir,
                               const std::string& what, const std::vector<std::string>& required_keys,
                               PythonRun* run_out = nullptr);

/// Last `max_chars` of `text`, trimmed, newlines shown as " | " so it fits one error line.
std::string one_line_tail(const std::string& text, size_t max_chars = 600);

}  // namespace jacond::cli
