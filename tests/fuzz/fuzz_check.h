// What every fuzz target asserts about an error it caught: the documented type was thrown (the
// target catches only that), and its message is one line of printable ASCII of bounded length,
// so that no byte of the corrupt input reaches the terminal raw (models/io/error_text.h).
// A violation aborts, which libFuzzer reports as a crash with the input saved.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace jacond::fuzz {

/// Longest acceptable message: a path, the parser's words and a few capped snippets.
inline constexpr std::size_t kMaxMessage = 1024;

inline void expect_clean_message(const char* what) {
  const std::size_t n = std::strlen(what);
  if (n == 0 || n > kMaxMessage) {
    std::fprintf(stderr, "fuzz: error message length %zu outside [1, %zu]\n", n, kMaxMessage);
    std::abort();
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(what[i]);
    if (c < 0x20 || c > 0x7e) {
      std::fprintf(stderr, "fuzz: error message has byte 0x%02x at %zu (not printable ASCII)\n", c, i);
      std::abort();
    }
  }
}

/// An invariant of a successful parse failed.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz: invariant violated: %s\n", what);
  std::abort();
}

}  // namespace jacond::fuzz
