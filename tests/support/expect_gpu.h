// JACOND_EXPECT_GPU=1 (scripts/gpu_measure.sh item 1, on the GPU machine): a GPU test that finds no
// GPU (or no CUDA back end) fails naming why, instead of skipping or returning as passed.
#pragma once

#include <cstdlib>
#include <string>

namespace jacond::test {

inline bool expect_gpu() {
  const char* v = std::getenv("JACOND_EXPECT_GPU");
  return v && std::string(v) == "1";
}

}  // namespace jacond::test
