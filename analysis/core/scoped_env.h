// An environment variable set (or unset) for one scope, then put back as it was: how the bench and
// the tests choose a knob the CUDA module reads from the environment (JACOND_CUDA_LU_SOLVES,
// analysis/cuda/dense_cuda.h) for one call without leaking it into the next.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace jacond {

class ScopedEnv {
 public:
  /// `value`: the variable's value for this scope; nullopt unsets it.
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    assign(value);
  }
  ~ScopedEnv() { assign(old_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void assign(const std::optional<std::string>& value) const {
    if (value)
      ::setenv(name_, value->c_str(), 1);
    else
      ::unsetenv(name_);
  }

  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace jacond
