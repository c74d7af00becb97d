#include "experiments/cli/cli_common.h"

#include <typeinfo>

#include <algorithm>
#include <unistd.h>

#include <array>
#include <cmath>
#include <exception>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "analysis/core/threads.h"
#include "models/io/checkpoint.h"

namespace jacond::cli {

namespace fs = std::filesystem;

namespace {

// Boost reads "-1" into an unsigned option as 2^64 − 1 (`--seed -1` ran with seed
// 18446744073709551615): a typed value with a leading minus for an unsigned option is refused.
void refuse_negative_unsigned(const boost::program_options::parsed_options& parsed,
                              const boost::program_options::variables_map& vm) {
  for (const auto& option : parsed.options) {
    if (option.value.empty() || option.value.front().rfind('-', 0) != 0 || !vm.count(option.string_key)) continue;
    const std::type_info& type = vm[option.string_key].value().type();
    if (type == typeid(uint64_t) || type == typeid(unsigned) || type == typeid(size_t) || type == typeid(unsigned long long))
      throw UsageError("--" + option.string_key + " must be a non-negative integer, got " + option.value.front());
  }
}

// `--out ""` (a shell variable that was never set) reached the command as the path "" (sweep:
// "cannot write to : Invalid argument", exit 1; block: printed and wrote nothing). No option of
// jacond takes an empty text, so one given as "" is a usage error naming the flag. Positional
// arguments are left to their command (audit's empty CKPT is its own usage error).
void refuse_empty_text(const boost::program_options::parsed_options& parsed,
                       const boost::program_options::variables_map& vm) {
  for (const auto& option : parsed.options) {
    if (option.position_key >= 0 || option.value.size() != 1 || !option.value.front().empty()) continue;
    if (!vm.count(option.string_key)) continue;
    if (vm[option.string_key].value().type() == typeid(std::string))
      throw UsageError("--" + option.string_key + " is empty");
  }
}

}  // namespace

bool parse_options(int argc, char** argv, const boost::program_options::options_description& desc,
                   const boost::program_options::positional_options_description* positional,
                   boost::program_options::variables_map* vm_out) {
  namespace po = boost::program_options;
  po::command_line_parser parser(argc, argv);
  parser.options(desc);
  const po::positional_options_description none;  // no positional arguments: any is an error
  parser.positional(positional ? *positional : none);
  po::variables_map vm;
  try {
    const po::parsed_options parsed = parser.run();
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return false;
    }
    refuse_negative_unsigned(parsed, vm);
    refuse_empty_text(parsed, vm);
    po::notify(vm);
  } catch (const po::too_many_positional_options_error&) {
    throw UsageError("unexpected argument (see --help)");
  } catch (const po::error& e) {
    // Boost's messages name the flag with its dashes: "unrecognised option '--bogus'",
    // "the argument ('x') for option '--n' is invalid", "the option '--matrix' is required ...".
    throw UsageError(e.what());
  }
  if (vm_out) *vm_out = vm;
  return true;
}

boost::program_options::typed_value<double>* number_value(double* x) {
  return boost::program_options::value(x)->default_value(*x, format_number(*x));
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  models::write_text_atomic(path, contents);  // temporary file, fsync, rename
}

void ensure_directory(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw std::runtime_error("cannot create directory " + dir + (ec ? ": " + ec.message() : ""));
}

void begin_output_set(const std::string& dir, const std::string& marker) {
  ensure_directory(dir);
  remove_previous_files(dir, {marker});
}

void begin_output_set(const std::string& dir, const std::string& command, const std::vector<std::string>& tables,
                      const std::string& marker) {
  const bool ours = recorded_command(fs::path(dir) / marker) == command;
  begin_output_set(dir, marker);  // the record first: should a table resist removal, none describes the rest
  if (ours) remove_previous_files(dir, tables);
}

void remove_previous_files(const std::string& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    std::error_code ec;
    fs::remove(fs::path(dir) / name, ec);
    if (ec) throw std::runtime_error("cannot remove the previous run's " + dir + "/" + name + ": " + ec.message());
  }
}

std::optional<std::string> recorded_command(const fs::path& run_json) {
  std::error_code ec;
  if (!fs::is_regular_file(run_json, ec)) return std::nullopt;
  std::ifstream in(run_json);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("command") || !j["command"].is_array() || j["command"].size() < 2 ||
      !j["command"][1].is_string())
    return std::nullopt;
  return j["command"][1].get<std::string>();
}

std::string assumed_pre_norm_note(const std::string& path) {
  return "note: " + path + " has no jacond config: read as pre-norm (LayerNorm before each branch, as timm's ViT); "
         "pass --norm post for a post-norm model";
}

std::optional<int64_t> parse_integer(const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::logic_error&) {  // invalid_argument, out_of_range
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

void check_output_directory(const std::string& dir, const std::string& command) {
  const auto fail = [&](const std::string& why) { throw std::runtime_error("cannot write to " + dir + ": " + why); };
  std::error_code ec;
  for (const char* record : {"run.json", "verify.json"})  // every command's record (verify's has its own name)
    if (const std::optional<std::string> other = recorded_command(fs::path(dir) / record); other && *other != command)
      fail("it holds a `jacond " + *other + "` run (" + record + "); give `jacond " + command + "` another --out");
  fs::path p = fs::absolute(dir, ec);
  if (ec) fail(ec.message());
  while (!fs::exists(p, ec)) {  // the nearest existing ancestor is where the directory will be made
    if (!p.has_parent_path() || p.parent_path() == p) fail("no existing parent directory");
    p = p.parent_path();
  }
  if (!fs::is_directory(p, ec)) fail(p.string() + " is not a directory");
  if (::access(p.c_str(), W_OK | X_OK) != 0) fail(p.string() + " is not writable");
}

OutputDirectoryGuard::OutputDirectoryGuard(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) return;
  if (!p.has_filename()) p = p.parent_path();  // a trailing slash: ".../new/y/" names ".../new/y"
  // Every prefix of the path as typed is a directory create_directories may make ("made" in
  // made/../there/y); each is undone under its normal name, and only if that did not exist.
  for (; !p.empty() && p.parent_path() != p; p = p.parent_path()) {
    const std::string level = p.lexically_normal().string();
    if (!fs::exists(level, ec) && std::find(made_.begin(), made_.end(), level) == made_.end()) made_.push_back(level);
  }
}

OutputDirectoryGuard::~OutputDirectoryGuard() {
  if (made_.empty()) return;
  std::error_code ec;
  // Empty directories the command made inside --out first (spectrum's DIR/<matrix>), deepest first.
  std::vector<fs::path> below;
  if (fs::is_directory(made_.front(), ec))
    for (fs::recursive_directory_iterator it(made_.front(), ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec)) below.push_back(it->path());
  for (auto it = below.rbegin(); it != below.rend(); ++it)
    if (fs::is_empty(*it, ec)) fs::remove(*it, ec);
  for (const std::string& level : made_)  // only the levels that did not exist, deepest first
    if (fs::is_directory(fs::symlink_status(level, ec)) && fs::is_empty(level, ec)) fs::remove(level, ec);
}

std::string fmt(double x) { return format_number(x); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void ResultsTable::add(const std::vector<std::string>& knob_values, const ConditionReport& r) {
  if (knob_values.size() != knobs_.size()) throw std::logic_error("ResultsTable: knob count mismatch");
  std::string row;
  for (const auto& v : knob_values) row += csv_escape(v) + ",";
  rows_.push_back(row + report_csv_fields(r));
}

std::string ResultsTable::to_csv() const {
  std::string out;
  for (const auto& k : knobs_) out += k + ",";
  out += report_csv_header() + "\n";
  for (const auto& r : rows_) out += r + "\n";
  return out;
}

namespace {
std::string git_revision() {
  std::string cmd = std::string("git -C '") + JACOND_SOURCE_DIR + "' rev-parse --short HEAD 2>/dev/null";
  std::array<char, 128> buf{};
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}
}  // namespace

KappaRoute with_dense_flavour(KappaRoute resolved, const std::string& kappa) {
  if (kappa != "fast" && kappa != "svd" && kappa != "mixed" && kappa != "schur")
    throw std::invalid_argument("--kappa must be fast, svd, mixed or schur, got '" + kappa + "'");
  if (resolved != KappaRoute::kFast) return resolved;
  return kappa == "fast" ? KappaRoute::kFast : parse_kappa_route(kappa);
}

nlohmann::json run_metadata(int argc, char** argv, const std::string& parent) {
  nlohmann::json j;
  std::vector<std::string> args(argv, argv + argc);
  if (!parent.empty()) args.insert(args.begin(), parent);
  args.insert(args.begin(), "jacond");
  j["command"] = args;
  j["jacond_version"] = JACOND_VERSION;  // CMake project(VERSION), as the Python module's __version__
  j["git_revision"] = git_revision();
  j["eigen_version"] = std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                       std::to_string(EIGEN_MINOR_VERSION);
  j["threads"] = get_threads();
  j["dtype"] = "fp64";
  return j;
}

namespace {
std::string format_number_digits(double x, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}
}  // namespace

std::vector<double> parse_range(const std::string& spec, const std::string& flag) {
  auto number = [&](const std::string& s) {
    size_t pos = 0;
    double v = 0;
    try {
      v = std::stod(s, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != s.size() || s.empty() || !std::isfinite(v))
      throw std::invalid_argument("--" + flag + ": '" + spec + "' is not a number or A0:A1:STEP range");
    return v;
  };
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() == 1) return {number(parts[0])};
  if (parts.size() != 3) throw std::invalid_argument("--" + flag + ": expected A0:A1:STEP, got '" + spec + "'");
  const double a0 = number(parts[0]), a1 = number(parts[1]), step = number(parts[2]);
  if (step <= 0 || a1 < a0) throw std::invalid_argument("--" + flag + ": need A0 <= A1 and STEP > 0 in '" + spec + "'");
  std::vector<double> v;
  // Grid values are a0 + k·step rounded to 12 significant digits of the range's scale, then
  // printed back to the nearest double: 0.2 + 1·0.4 is 0.6000000000000001 in binary, and -0.3 +
  // 3·0.1 is 5.55e-17, where the grid value a user typed (and a CSV reader compares against) is
  // 0.6 and 0. (Rounding x's own 12 digits left the second one as it was; + 0.0 makes -0 plain 0.)
  const double quantum = std::pow(10.0, std::floor(std::log10(std::max({std::abs(a0), std::abs(a1), step}))) - 11);
  for (long k = 0;; ++k) {
    const double snapped = std::round((a0 + static_cast<double>(k) * step) / quantum) * quantum + 0.0;
    const double x = std::stod(format_number_digits(snapped, 12));
    if (x > a1 + step * 1e-6) break;
    // A STEP below the 12 digits kept gives a value twice (1:1.000000000001:1e-13): refuse it.
    if (!v.empty() && x <= v.back())
      throw std::invalid_argument("--" + flag + ": STEP in '" + spec +
                                  "' is finer than 12 significant digits of the range (grid values repeat)");
    v.push_back(x);
    if (v.size() > 100000) throw std::invalid_argument("--" + flag + ": range '" + spec + "' has too many points");
  }
  return v;
}

Mat gaussian_tokens(Index n, Index d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0.0, 1.0);
  Mat X(n, d);
  for (Index j = 0; j < d; ++j)
    for (Index i = 0; i < n; ++i) X(i, j) = N(rng);
  return X;
}

void print_reports(const std::vector<ConditionReport>& reports) {
  std::printf("%-10s %-16s %-4s %-11s %-26s %-13s %12s %12s %12s %8s\n", "matrix", "space", "head", "shape",
              "method", "status", "sigma_max", "sigma_min", "kappa", "rank");
  for (const auto& r : reports) {
    const std::string shape = std::to_string(r.rows) + "x" + std::to_string(r.cols);
    const std::string head = r.head < 0 ? "all" : std::to_string(r.head);
    // Singular and not-converged rows know only κ ≥ κ_lo (the CSV's kappa of a not-converged row is
    // the solver's last estimate), and a not-converged σ_min only its upper end: say so. A failed
    // mixed-precision refinement knows neither ("-").
    const bool open_bottom = r.status == Status::kSingular || r.status == Status::kNotConverged;
    const bool sigma_min_bound = r.status == Status::kNotConverged;
    char kappa[32] = "-", sigma_min[32] = "-";
    if (!open_bottom)
      std::snprintf(kappa, sizeof kappa, "%.4e", r.kappa);
    else if (std::isfinite(r.kappa_lo) && r.kappa_lo > 0)
      std::snprintf(kappa, sizeof kappa, ">=%.3e", r.kappa_lo);
    if (!sigma_min_bound)
      std::snprintf(sigma_min, sizeof sigma_min, "%.4e", r.sigma_min);
    else if (std::isfinite(r.sigma_min) && r.sigma_min > 0)
      std::snprintf(sigma_min, sizeof sigma_min, "<=%.3e", r.sigma_min);
    std::printf("%-10s %-16s %-4s %-11s %-26s %-13s %12.4e %12s %12s %8lld\n", r.matrix.c_str(), r.space.c_str(),
                head.c_str(), shape.c_str(), r.method.c_str(), to_string(r.status).c_str(), r.sigma_max,
                sigma_min, kappa, static_cast<long long>(r.rank));
  }
}

void warn_not_converged(const std::string& command, size_t open, size_t total) {
  if (open == 0) return;
  std::cerr << "jacond " << command << ": " << open << " of " << total
            << " reports did not converge (status not-converged: only kappa >= kappa_lo is known; raise "
               "--lanczos-seconds, or --method dense where it fits)\n";
}

}  // namespace jacond::cli
