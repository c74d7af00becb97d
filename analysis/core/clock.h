// Wall-clock seconds for reports and notes (ConditionReport::seconds, a route's phases): the one
// steady-clock difference every routine times itself with.
#pragma once

#include <chrono>

namespace jacond {

/// Seconds from t0 to now on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace jacond
