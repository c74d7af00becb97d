// The message of the exception `f` throws, or "" when it throws none: for tests that check an
// error names the right flag, key or file; and whether a message is printable ASCII (no byte of a
// corrupt file reaches the terminal raw: models/io/error_text.h).
#pragma once

#include <algorithm>
#include <exception>
#include <functional>
#include <string>

namespace jacond::test {

inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// Every byte of `s` is printable ASCII (0x20..0x7e): no control, no newline, nothing >= 0x80.
inline bool printable_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u <= 0x7e;
  });
}

}  // namespace jacond::test
