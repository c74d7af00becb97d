#include <cstdio>
#include <iostream>
#include <sstream>

#include "experiments/claims/verify.h"

namespace jacond::cli {

std::string num(double x, int precision) {
  std::ostringstream os;
  os.precision(precision);
  os << x;
  return os.str();
}

bool Verifier::check(const std::string& name, bool pass, const std::string& detail) {
  std::cout << (pass ? "  [PASS] " : "  [FAIL] ") << name << ": " << detail << "\n";
  if (!pass) ++failures_;
  checks_.push_back({{"claim", claim_}, {"check", name}, {"pass", pass}, {"verdict", pass ? "pass" : "fail"}, {"detail", detail}});
  return pass;
}

bool Verifier::check_cases(const std::string& name, int passed, int cases, const std::string& detail) {
  if (cases > 0) return check(name, passed == cases, detail);
  std::cout << "  [N/A] " << name << ": " << detail << " (no case met the premise)\n";
  checks_.push_back({{"claim", claim_}, {"check", name}, {"pass", nullptr}, {"verdict", "n/a"}, {"detail", detail}});
  return true;
}

void Verifier::finding(const std::string& name, bool holds, const std::string& detail) {
  std::cout << (holds ? "  [HOLDS] " : "  [DOES NOT HOLD] ") << name << ": " << detail << "\n";
  checks_.push_back({{"claim", claim_}, {"check", name}, {"pass", nullptr}, {"verdict", holds ? "holds" : "does not hold"},
                     {"detail", detail}});
}

void Verifier::note(const std::string& text) {
  std::cout << "  " << text << "\n";
  notes_.push_back(text);
}

nlohmann::json Verifier::to_json() const {
  return {{"claim", claim_}, {"passed", failures_ == 0}, {"checks", checks_}, {"notes", notes_}};
}

}  // namespace jacond::cli
