#include "analysis/report/report_csv.h"

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace jacond {

std::string format_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // The shortest decimal that reads back to the same double ("0.6", not "0.59999999999999998"):
  // 17 significant digits always round-trip, fewer often do.
  for (int digits = 15; digits < 17; ++digits) {
    std::ostringstream os;
    os << std::setprecision(digits) << x;
    if (std::strtod(os.str().c_str(), nullptr) == x) return os.str();
  }
  std::ostringstream os;
  os << std::setprecision(17) << x;
  return os.str();
}

std::string csv_escape(const std::string& s) {
  // A bare \r ends a row for pandas and Python's csv module as \n does: quoted like it.
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string report_csv_header() {
  return "matrix,space,head,rows,cols,dtype,method,status,sigma_max,sigma_min,kappa,kappa_lo,kappa_hi,rank,products,seconds,within_1pct,within_10pct,note";
}

namespace {
// A count column: empty (pandas: NaN) when not counted.
std::string count(Index c) { return c < 0 ? std::string() : std::to_string(c); }
}  // namespace

std::string report_csv_fields(const ConditionReport& r) {
  const auto& f = format_number;
  std::ostringstream os;
  os << csv_escape(r.matrix) << ',' << r.space << ',' << (r.head < 0 ? std::string("all") : std::to_string(r.head)) << ','
     << r.rows << ',' << r.cols << ',' << r.dtype << ',' << r.method << ',' << to_string(r.status) << ','
     << f(r.sigma_max) << ',' << f(r.sigma_min) << ',' << f(r.kappa) << ',' << f(r.kappa_lo) << ','
     << f(r.kappa_hi) << ',' << r.rank << ',' << r.products << ',' << f(r.seconds) << ','
     << count(r.within_1pct) << ',' << count(r.within_10pct) << ',' << csv_escape(r.note);
  return os.str();
}

}  // namespace jacond
