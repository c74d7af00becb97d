// The two subcommands written in Python, on Debian's matplotlib and pandas:
//   `jacond plot DIR... [--format png,svg]`      -> python -m jacond_plots   (experiments/plots)
//   `jacond recipe NAME [--quick] [--out DIR]`   -> python -m jacond_recipes (experiments/recipes)
// Both accept `--python PATH` (default /usr/bin/python3). This file only finds the packages and
// the interpreter and replaces itself with `python -m PACKAGE …`, so the package's own messages
// and exit codes (0, 1 bad data or a failed step, 2 usage) are the command's. A recipe runs
// jacond commands; it is given this very binary in $JACOND.
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

// Where the Python packages live: $JACOND_PYTHONPATH, else this source tree's experiments/plots
// and experiments/recipes, else the installed copy (both packages in one directory).
std::string packages_path() {
  if (const char* env = std::getenv("JACOND_PYTHONPATH"); env && *env) return env;
  const fs::path source = fs::path(JACOND_SOURCE_DIR) / "experiments";
  if (fs::exists(source / "plots" / "jacond_plots" / "__init__.py"))
    return (source / "plots").string() + ":" + (source / "recipes").string();
#ifdef JACOND_PYTHON_INSTALLED
  return JACOND_PYTHON_INSTALLED;
#else
  throw std::runtime_error("jacond_plots not found in " + source.string() + "/plots; set JACOND_PYTHONPATH");
#endif
}

// This executable's path, for $JACOND (so a recipe runs the same jacond it was started from).
std::string self_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("jacond") : self.string();
}

int exec_python_module(const std::string& module, int argc, char** argv) {
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
  const std::string path = packages_path();
  const char* old = std::getenv("PYTHONPATH");
  const std::string pythonpath = old && *old ? path + ":" + old : path;
  ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
  ::setenv("JACOND", self_path().c_str(), 1);
  std::vector<std::string> full = {python, "-m", module};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& s : full) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  ::execv(python.c_str(), cargs.data());
  throw std::runtime_error("cannot run " + python + ": " + std::strerror(errno));  // execv returned
}

}  // namespace

int run_plot(int argc, char** argv) { return exec_python_module("jacond_plots", argc, argv); }

int run_recipe(int argc, char** argv) { return exec_python_module("jacond_recipes", argc, argv); }

}  // namespace jacond::cli
