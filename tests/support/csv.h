// The tidy CSV files jacond writes (results.csv, conditioning.csv, ...), read back by the tests:
// RFC 4180 records under a header, each row a map from column to field. Shared by the end-to-end
// CLI tests (support/cli_harness.h) and the tests that call a library entry point writing CSV
// (models::train's conditioning.csv).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace jacond::test {

namespace fs = std::filesystem;

/// One CSV record, RFC 4180 quoting ("a,b" and "" escapes).
inline std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  fields.push_back(cur);
  return fields;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  std::string raw_header;

  bool has_column(const std::string& c) const { return std::find(header.begin(), header.end(), c) != header.end(); }
  std::vector<const std::map<std::string, std::string>*> where(const std::string& col, const std::string& value) const {
    std::vector<const std::map<std::string, std::string>*> out;
    for (const auto& r : rows)
      if (r.count(col) && r.at(col) == value) out.push_back(&r);
    return out;
  }
};

/// Reads a CSV with a header; every row must have as many fields as the header.
inline Csv read_csv(const fs::path& path) {
  Csv csv;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::string line;
  if (!std::getline(in, line)) return csv;
  csv.raw_header = line;
  csv.header = split_csv(line);
  size_t lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv(line);
    EXPECT_EQ(f.size(), csv.header.size()) << path << " line " << lineno << ": " << line;
    std::map<std::string, std::string> row;
    for (size_t k = 0; k < std::min(f.size(), csv.header.size()); ++k) row[csv.header[k]] = f[k];
    csv.rows.push_back(row);
  }
  return csv;
}

inline double to_double(const std::string& s) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::stod(s);
}

}  // namespace jacond::test
