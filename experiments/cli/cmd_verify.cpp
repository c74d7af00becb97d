// `jacond verify prop1|prop2|moments|lemma1|eq6|eq89|prop41|prop42|all`.
#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>

#include "analysis/core/threads.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/claims/verify.h"

namespace jacond::cli {

namespace po = boost::program_options;

namespace {

using ClaimFn = bool (*)(const VerifyOptions&, Verifier&);
// Every claim, in the order `all` runs them; the names and the usage text come from here.
const std::vector<std::pair<std::string, ClaimFn>> kClaims = {
    {"prop1", verify_prop1}, {"moments", verify_moments}, {"lemma1", verify_lemma1}, {"prop2", verify_prop2},
    {"eq6", verify_eq6},     {"eq89", verify_eq89},       {"prop41", verify_prop41}, {"prop42", verify_prop42}};

// Every table a claim writes with --out (the claims' write_file_atomic calls). A rerun into the same
// DIR removes them all first: a table of a claim this run does not check would otherwise sit beside
// the new verify.json, and `jacond plot DIR` would caption its figure with this run's command.
const std::vector<std::string> kClaimTables = {
    "prop1_draws.csv", "prop1_examples.csv", "moments.csv",      "lemma1.csv",        "prop2.csv",
    "eq6_matrices.csv", "eq6_cases.csv",     "eq89_products.csv", "eq89_gradients.csv", "eq89_paths.csv",
    "prop41.csv",      "prop41_fits.csv"};

}  // namespace

int run_verify(int argc, char** argv) {
  std::string claim_list;
  for (const auto& [name, fn] : kClaims) claim_list += name + " | ";
  claim_list += "all";
  VerifyOptions opt;
  std::string which, out_dir;
  po::options_description desc("jacond verify <" + claim_list + ">: the papers' claims, numerically");
  desc.add_options()("help,h", "this help")
      ("claim", po::value(&which), claim_list.c_str())
      ("seeds", po::value(&opt.seeds)->default_value(opt.seeds), "Monte Carlo size (each claim scales it)")
      ("seed", po::value(&opt.seed)->default_value(opt.seed), "base seed")
      ("threads", po::value(&opt.threads)->default_value(opt.threads), "BLAS/Eigen threads")
      ("out", po::value(&out_dir), "write DIR/verify.json (and the CSV of claims that have one)");
  po::positional_options_description pos;
  pos.add("claim", 1);
  if (!parse_options(argc, argv, desc, &pos)) return 0;
  check_usage([&] {
    if (which.empty()) throw std::invalid_argument("which claim? " + claim_list);
    if (which != "all" && std::none_of(kClaims.begin(), kClaims.end(), [&](const auto& c) { return c.first == which; }))
      throw std::invalid_argument("unknown claim '" + which + "' (" + claim_list + ")");
    if (opt.seeds < 1) throw std::invalid_argument("--seeds must be >= 1");
    if (opt.threads < 1) throw std::invalid_argument("--threads must be >= 1");
  });
  if (!out_dir.empty()) {
    check_output_directory(out_dir, "verify");
    begin_output_set(out_dir, "verify", kClaimTables, "verify.json");  // the claims' tables go in as they run
  }
  set_threads(opt.threads);
  opt.out_dir = out_dir;

  nlohmann::json results = nlohmann::json::array();
  bool ok = true, matched = false;
  for (const auto& [name, fn] : kClaims) {
    if (which != "all" && which != name) continue;
    matched = true;
    Verifier v(name);
    ok = fn(opt, v) && ok;
    results.push_back(v.to_json());
    std::cout << (v.all_passed() ? "PASS " : "FAIL ") << name << "\n\n";
  }
  if (!matched) throw std::logic_error("claim '" + which + "' validated but not run");
  if (!out_dir.empty()) {
    ensure_directory(out_dir);
    nlohmann::json j = run_metadata(argc, argv);
    j["claims"] = results;
    j["passed"] = ok;
    write_file_atomic(out_dir + "/verify.json", j.dump(2) + "\n");
  }
  std::cout << (ok ? "verify: all checks passed\n" : "verify: SOME CHECKS FAILED\n");
  return ok ? 0 : 1;
}

}  // namespace jacond::cli
