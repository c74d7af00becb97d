// `jacond verify`: the papers' claims checked numerically. Each claim prints its measured
// numbers and PASS/FAIL; the command exits nonzero if any check fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace jacond::cli {

/// Collects checks, prints them as they come, and records them for run.json.
class Verifier {
 public:
  explicit Verifier(std::string claim) : claim_(std::move(claim)) {}
  /// Prints "[PASS] name: detail" or "[FAIL] ..." and records it.
  bool check(const std::string& name, bool pass, const std::string& detail);
  /// A check over the cases where its premise held: PASS when all `cases` passed, FAIL otherwise,
  /// and "[N/A]" when no case met the premise. A check over nothing cannot fail, so it is never
  /// a PASS; it is recorded (verdict "n/a" in run.json) and is not a failure.
  bool check_cases(const std::string& name, int passed, int cases, const std::string& detail);
  /// A paper's conclusion measured against jacond's numbers, not a property of jacond: prints
  /// "[HOLDS] name: detail" or "[DOES NOT HOLD] ...", records it (verdict "holds" / "does not hold",
  /// "pass" null) and is never a failure: a conclusion the numbers do not support is a finding
  /// about the paper, reported as such beside the checks that test jacond and the theorems.
  void finding(const std::string& name, bool holds, const std::string& detail);
  void note(const std::string& text);  // an informational line (no verdict)
  bool all_passed() const { return failures_ == 0; }
  nlohmann::json to_json() const;

 private:
  std::string claim_;
  int failures_ = 0;
  nlohmann::json checks_ = nlohmann::json::array();
  nlohmann::json notes_ = nlohmann::json::array();
};

struct VerifyOptions {
  int seeds = 200;        // Monte Carlo repetitions where a claim is statistical
  uint64_t seed = 0;
  int threads = 2;
  std::string out_dir;    // where claims that write tidy CSV put it (empty: none)
};

bool verify_prop1(const VerifyOptions& opt, Verifier& v);
bool verify_moments(const VerifyOptions& opt, Verifier& v);
bool verify_lemma1(const VerifyOptions& opt, Verifier& v);
bool verify_prop2(const VerifyOptions& opt, Verifier& v);
bool verify_eq6(const VerifyOptions& opt, Verifier& v);   // network J vs its block columns (§4.2, A.2.4)
bool verify_eq89(const VerifyOptions& opt, Verifier& v);  // skip vs skipless layer products (Eq. 8/9)
// "Always Skip Attention" §4 (verify_always_skip.cpp): the cubic law and the skip's regularisation
bool verify_prop41(const VerifyOptions& opt, Verifier& v);
bool verify_prop42(const VerifyOptions& opt, Verifier& v);

/// Formats a number compactly for check details.
std::string num(double x, int precision = 4);

}  // namespace jacond::cli
