// The message of the exception `f` throws, or "" when it throws none: for tests that check an
// error names the right flag, key or file.
#pragma once

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

}  // namespace jacond::test
