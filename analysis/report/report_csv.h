// CSV rendering of ConditionReport (docs/design.md §6): one shared column order for every tidy CSV that
// jacond writes (results.csv, sweep.csv, conditioning.csv, audit.csv), so pandas code reads
// them all the same way. Numbers are written with 17 significant digits (round-trip exact),
// inf/nan spelled out; head -1 is written "all".
#pragma once

#include <string>

#include "analysis/spectral/condition.h"

namespace jacond {

/// "matrix,space,head,rows,cols,dtype,method,status,sigma_max,sigma_min,kappa,kappa_lo,kappa_hi,
///  rank,products,seconds,within_1pct,within_10pct,note" (the two counts empty when not counted)
std::string report_csv_header();
std::string report_csv_fields(const ConditionReport& r);

/// A number for CSV/JSON text: round-trip exact, "inf" / "-inf" / "nan" spelled out.
std::string format_number(double x);

/// Quotes a CSV field when it holds a comma, quote, newline or carriage return.
std::string csv_escape(const std::string& s);

}  // namespace jacond
