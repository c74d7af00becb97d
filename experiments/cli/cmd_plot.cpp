// `jacond plot DIR... [--format png,svg] [--python PATH]`: the figures of jacond result
// directories, drawn by the Python package jacond_plots (experiments/plots/jacond_plots: Debian's
// matplotlib and pandas). This command only finds the package and the interpreter and replaces
// itself with `python -m jacond_plots …`, so the package's own messages and exit codes (0, 1 bad
// data, 2 usage) are the command's.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"

namespace jacond::cli {

namespace fs = std::filesystem;

namespace {

// Where jacond_plots lives: $JACOND_PLOTS_PATH, else this source tree's experiments/plots, else the
// installed copy.
std::string plots_path() {
  if (const char* env = std::getenv("JACOND_PLOTS_PATH"); env && *env) return env;
  const fs::path source = fs::path(JACOND_SOURCE_DIR) / "experiments" / "plots";
  if (fs::exists(source / "jacond_plots" / "__init__.py")) return source.string();
#ifdef JACOND_PLOTS_INSTALLED
  return JACOND_PLOTS_INSTALLED;
#else
  throw std::runtime_error("jacond_plots not found in " + source.string() + "; set JACOND_PLOTS_PATH");
#endif
}

}  // namespace

int run_plot(int argc, char** argv) {
  std::string python = "/usr/bin/python3";
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--python") {
      if (i + 1 >= argc) throw UsageError("--python needs a path");
      python = argv[++i];
    } else if (a.rfind("--python=", 0) == 0) {
      python = a.substr(9);
    } else {
      args.push_back(a);
    }
  }
  if (::access(python.c_str(), X_OK) != 0) throw UsageError("--python: " + python + " is not executable");
  const std::string path = plots_path();
  const char* old = std::getenv("PYTHONPATH");
  const std::string pythonpath = old && *old ? path + ":" + old : path;
  ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
  std::vector<std::string> full = {python, "-m", "jacond_plots"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& s : full) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  ::execv(python.c_str(), cargs.data());
  throw std::runtime_error("cannot run " + python + ": " + std::strerror(errno));  // execv returned
}

}  // namespace jacond::cli
