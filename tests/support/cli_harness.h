// Shared harness of the end-to-end `jacond` tests: run the binary through the shell with stdout
// and stderr captured, read its tidy CSV, check the one-line error convention. Each test gets
// its own temporary directory (pid + counter), removed afterwards, so tests run in parallel.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/csv.h"
#include "support/expect_gpu.h"

#ifndef JACOND_BINARY
#error "JACOND_BINARY must be defined (tests/CMakeLists.txt)"
#endif

namespace jacond::test::cli {

namespace fs = std::filesystem;
using test::Csv;
using test::read_csv;
using test::split_csv;
using test::to_double;

// ---------------------------------------------------------------------------------------------
// Helpers: running the binary, reading CSV.

struct RunResult {
  bool exited = false;  // WIFEXITED: false when killed by a signal (a crash)
  int code = -1;        // WEXITSTATUS
  std::string out, err;
  std::string command;

  /// For failure messages.
  std::string describe() const {
    return "$ " + command + "\n--- exit " + (exited ? std::to_string(code) : std::string("(signal)")) +
           "\n--- stdout:\n" + out + "\n--- stderr:\n" + err;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// A figure `jacond plot` drew: a PNG (the format's signature) larger than an empty canvas
/// (matplotlib writes ~5 kB for a blank figure of our sizes; ours are 30 kB and up).
inline ::testing::AssertionResult is_figure(const fs::path& png, size_t min_bytes = 15000) {
  const std::string bytes = slurp(png);
  if (bytes.empty()) return ::testing::AssertionFailure() << png << " missing or empty";
  if (bytes.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) != 0) return ::testing::AssertionFailure() << png << " is not a PNG";
  if (bytes.size() < min_bytes)
    return ::testing::AssertionFailure() << png << " is " << bytes.size() << " bytes (< " << min_bytes << ": blank?)";
  return ::testing::AssertionSuccess();
}

/// Non-empty lines (after trimming whitespace and carriage returns).
inline std::vector<std::string> nonempty_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    // A progress line may use '\r'; split on it too.
    std::stringstream parts(line);
    for (std::string part; std::getline(parts, part, '\r');) {
      const auto b = part.find_first_not_of(" \t");
      if (b != std::string::npos) lines.push_back(part.substr(b));
    }
  }
  return lines;
}

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

inline bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// `jacond verify`'s output passes nothing on nothing: a "[PASS]" over "0/0" cases would be a check
// that cannot fail (Verifier::check_cases prints those N/A).
inline void expect_no_vacuous_pass(const std::string& verify_out) {
  std::istringstream lines(verify_out);
  for (std::string line; std::getline(lines, line);)
    if (contains(line, "[PASS]")) {
      EXPECT_FALSE(contains(line, " 0/0 ")) << line;
    }
}

using jacond::test::expect_gpu;  // support/expect_gpu.h

inline const std::set<std::string> kStatuses = {"exact", "bracket", "singular", "not-converged"};

// ---------------------------------------------------------------------------------------------
// Fixture: a fresh directory per test.

/// A fresh directory per test, and the binary runner.
class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::path(::testing::TempDir()) /
           ("jacond_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Runs `jacond args...` with stdout and stderr captured separately.
  RunResult run(const std::vector<std::string>& args) {
    static std::atomic<int> runs{0};
    const int k = runs++;
    const fs::path out = dir_ / ("stdout." + std::to_string(k)), err = dir_ / ("stderr." + std::to_string(k));
    std::string cmd = shell_quote(JACOND_BINARY);
    for (const auto& a : args) cmd += " " + shell_quote(a);
    RunResult r;
    r.command = cmd;
    const int status = std::system((cmd + " >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string())).c_str());
    r.exited = status != -1 && WIFEXITED(status);
    r.code = r.exited ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
  }

  /// A failing run: nonzero exit (not a crash), exactly one non-empty stderr line that mentions
  /// every needle (case-insensitive), and `must_not_exist` (an output file) not written.
  /// Returns the run for further checks.
  RunResult expect_one_line_error(const std::vector<std::string>& args, const std::vector<std::string>& needles,
                                  const std::string& must_not_exist = "") {
    const RunResult r = run(args);
    EXPECT_TRUE(r.exited) << "crashed\n" << r.describe();
    if (!r.exited) return r;
    EXPECT_NE(r.code, 0) << r.describe();
    const std::vector<std::string> lines = nonempty_lines(r.err);
    EXPECT_EQ(lines.size(), 1u) << "expected a one-line error\n" << r.describe();
    for (const auto& needle : needles)
      EXPECT_TRUE(contains(lower(r.err), lower(needle))) << "error does not mention '" << needle << "'\n" << r.describe();
    if (!must_not_exist.empty()) {
      EXPECT_FALSE(fs::exists(must_not_exist)) << must_not_exist << " left behind\n" << r.describe();
    }
    return r;
  }

  fs::path dir_;
};

}  // namespace jacond::test::cli
