// Shared plumbing of the `jacond` subcommands: tidy CSV + run.json output (atomic), ranges,
// tokens, and the one-line error convention.
#pragma once

#include <cstdint>
#include <map>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "analysis/jacobians/block.h"
#include "analysis/report/block_report.h"
#include "analysis/spectral/condition.h"
#include "analysis/report/report_csv.h"

namespace jacond::cli {

/// A usage error: an unknown flag, a bad flag value, a missing or unexpected argument. main()
/// prints it as one line naming the flag and exits 2; any other exception (bad input data, a
/// failed computation) exits 1 (experiments/cli/commands.h).
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Runs `check`, the validation of a subcommand's flags (ranges, names parsed with
/// parse_skip_mode, parse_kappa_route, ...): a std::invalid_argument it throws becomes a
/// UsageError with the same message. Reading files belongs outside, so bad data stays exit 1.
template <typename Check>
void check_usage(Check&& check) {
  try {
    check();
  } catch (const UsageError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

/// Runs `parse` (e.g. [&] { return parse_skip_mode(skip); }) and puts the flag in front of the
/// message of a std::invalid_argument it throws: "--skip: unknown skip mode 'x' (...)".
template <typename Parse>
auto parse_flag(const std::string& flag, Parse&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    throw UsageError(flag + ": " + e.what());
  }
}

/// A double option whose --help default is written as a person writes it ("0.6", not
/// "0.59999999999999998"): the shortest decimal that reads back to the same double.
/// Help text of `--certify` for commands that report block κs through block_reports (sweep, audit).
inline constexpr const char* kCertifyHelp =
    "inertia-count certificates (status certified): none | inertia | auto (when three counts fit the "
    "memory and time budget)";

boost::program_options::typed_value<double>* number_value(double* x);

/// Parses a subcommand's options into the variables bound in `desc`. Returns false when
/// --help was given (the help is printed to stdout); a bad flag, a bad value, a missing or an
/// unexpected argument throws UsageError with one line naming the flag.
bool parse_options(int argc, char** argv, const boost::program_options::options_description& desc,
                   const boost::program_options::positional_options_description* positional = nullptr,
                   boost::program_options::variables_map* vm_out = nullptr);

/// Writes `contents` to `path` through a temporary file in the same directory and a rename,
/// so a reader never sees half a file. Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, const std::string& contents);

/// `text` as an integer when all of it is one (std::stoll's syntax), else nullopt.
std::optional<int64_t> parse_integer(const std::string& text);

/// Creates the directory (and parents). Throws naming it on failure.
void ensure_directory(const std::string& dir);

/// Opens `dir` for one command's set of output files: creates it (ensure_directory) and removes a
/// previous run's `marker` (run.json; verify.json for verify), which the command writes last, after
/// its tables. So a marker always describes the tables beside it: a run that fails or is killed
/// after this call leaves its tables without one (jacond merge then asks whether the shard
/// finished), never under the previous run's. Throws std::runtime_error naming what it cannot remove.
void begin_output_set(const std::string& dir, const std::string& marker = "run.json");

/// Removes a previous run's files `names` from `dir` where they exist (a table the run now writes
/// under another name, or not at all). Throws std::runtime_error naming what it cannot remove.
void remove_previous_files(const std::string& dir, const std::vector<std::string>& names);

/// For commands whose runs write different subsets of `tables` (a bench with or without peers,
/// verify of one claim or another): where DIR's `marker` records a `command` run, every one of
/// `tables` is removed first (one this run does not write would otherwise sit beside the new
/// record, and `jacond plot` would caption it with this run's command); a table no such run wrote
/// is not ours to remove. The record goes first (begin_output_set(dir, marker)), the tables after.
void begin_output_set(const std::string& dir, const std::string& command, const std::vector<std::string>& tables,
                      const std::string& marker = "run.json");

/// The subcommand a run record (run.json, verify.json) names ("command": ["jacond", "sweep", ...]);
/// nullopt where there is no such file or it is not a jacond record.
std::optional<std::string> recorded_command(const std::filesystem::path& run_json);

/// Checks, creating nothing, that `dir` can be written once the results exist: an existing
/// directory that is writable, or a new path whose nearest existing ancestor is a writable
/// directory. Commands call it before computing (an unwritable --out found after hours of work
/// loses them). A directory whose run.json (or verify.json) records another jacond command
/// (`sweep` where `block` asks) is refused too: writing there would replace that run's record and leave two commands'
/// tables side by side. Throws std::runtime_error "cannot write to DIR: why".
void check_output_directory(const std::string& dir, const std::string& command);

/// Leaves no empty --out behind a command that fails: the levels of `dir` that did not exist when
/// the guard was made (new/y and new for --out new/y; each prefix as typed, named normally, so
/// made/../there/y undoes there/y and made, never an existing there) are removed, deepest first,
/// while they hold nothing, unless keep() was called (a scope left by an
/// exception never calls it). Empty directories the command made below them go too; a directory
/// that existed is never removed, and what a failure after writing files leaves (a run's
/// checkpoints) stays. A killed process leaves what it made.
class OutputDirectoryGuard {
 public:
  explicit OutputDirectoryGuard(const std::string& dir);
  ~OutputDirectoryGuard();
  void keep() { made_.clear(); }  // the command succeeded
  OutputDirectoryGuard(const OutputDirectoryGuard&) = delete;
  OutputDirectoryGuard& operator=(const OutputDirectoryGuard&) = delete;

 private:
  std::vector<std::string> made_;  // the missing levels of --out, deepest first; empty: nothing to undo
};

/// A tidy results table: one row per measurement. Columns are the knobs (same for every row,
/// given once) followed by the report fields of analysis/spectral/condition.h.
class ResultsTable {
 public:
  explicit ResultsTable(std::vector<std::string> knob_names) : knobs_(std::move(knob_names)) {}
  void add(const std::vector<std::string>& knob_values, const ConditionReport& r);
  std::string to_csv() const;
  size_t size() const { return rows_.size(); }

 private:
  std::vector<std::string> knobs_;
  std::vector<std::string> rows_;
};

// CSV header/fields of the report: analysis/report/report_csv.h (report_csv_header, report_csv_fields).

/// Number formatting for CSV/JSON: shortest round-trip, "inf"/"nan" spelled out.
std::string fmt(double x);

/// The median of v (mean of the middle two for an even count); v non-empty.
double median(std::vector<double> v);

/// --kappa of block and sweep, the flavour of the dense route: a route resolved to kFast becomes
/// kSvd for "svd" and kMixed for "mixed"; any other route is returned as it is.
/// std::invalid_argument for a value other than fast | svd | mixed.
KappaRoute with_dense_flavour(KappaRoute resolved, const std::string& kappa);

/// The line block, spectrum and audit print where a file without jacond's config is read as
/// pre-norm (pre- and post-norm blocks have the same tensors): "note: PATH has no jacond config: ...".
std::string assumed_pre_norm_note(const std::string& path);

/// run.json: the command line ("jacond", then `parent` for a sub-subcommand such as bench's, then
/// argv), versions, git revision, threads and any extra fields.
nlohmann::json run_metadata(int argc, char** argv, const std::string& parent = "");

/// Parses "A0:A1:STEP" (inclusive of A1 within STEP/1e6) or a single value "A".
std::vector<double> parse_range(const std::string& spec, const std::string& flag);

/// Gaussian tokens X ∈ R^{n×d}, entries N(0, 1), from a seed (std::mt19937_64).
Mat gaussian_tokens(Index n, Index d, uint64_t seed);

/// Prints a fixed-width table of reports to stdout: κ and σ_min of singular and not-converged rows as
/// the bounds they are (">=κ_lo", "<=σ_min").
void print_reports(const std::vector<ConditionReport>& reports);

/// One stderr line when `open` of `total` reports did not converge (only κ ≥ κ_lo is known for
/// them): sweep and audit exit 0 with such rows (block exits 3), so the console says it.
void warn_not_converged(const std::string& command, size_t open, size_t total);

}  // namespace jacond::cli
