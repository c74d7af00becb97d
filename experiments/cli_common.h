// Shared plumbing of the `jacond` subcommands: tidy CSV + run.json output (atomic), ranges,
// tokens, and the one-line error convention.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "analysis/block.h"
#include "analysis/condition.h"
#include "analysis/report_csv.h"

namespace jacond::cli {

/// Parses a subcommand's options into the variables bound in `desc`. Returns false when
/// --help was given (the help is printed to stdout); throws on bad flags (one-line error).
bool parse_options(int argc, char** argv, const boost::program_options::options_description& desc,
                   const boost::program_options::positional_options_description* positional = nullptr,
                   boost::program_options::variables_map* vm_out = nullptr);

/// Writes `contents` to `path` through a temporary file in the same directory and a rename,
/// so a reader never sees half a file. Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, const std::string& contents);

/// Creates the directory (and parents). Throws naming it on failure.
void ensure_directory(const std::string& dir);

/// A tidy results table: one row per measurement. Columns are the knobs (same for every row,
/// given once) followed by the report fields of analysis/condition.h.
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

// CSV header/fields of the report: analysis/report_csv.h (report_csv_header, report_csv_fields).

/// Number formatting for CSV/JSON: shortest round-trip, "inf"/"nan" spelled out.
std::string fmt(double x);

/// run.json: the command line, versions, git revision, threads and any extra fields.
nlohmann::json run_metadata(int argc, char** argv);

/// Parses "A0:A1:STEP" (inclusive of A1 within STEP/1e6) or a single value "A".
std::vector<double> parse_range(const std::string& spec, const std::string& flag);

/// Gaussian tokens X ∈ R^{n×d}, entries N(0, 1), from a seed (std::mt19937_64).
Mat gaussian_tokens(Index n, Index d, uint64_t seed);

/// Prints a fixed-width table of reports to stdout.
void print_reports(const std::vector<ConditionReport>& reports);

}  // namespace jacond::cli
