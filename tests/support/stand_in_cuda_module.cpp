// A stand-in for the CUDA back end module libjacond_cuda.so (analysis/spectral/dense_device_module.h),
// so that the loader is tested on machines without a GPU (CI): its entry point, kCudaModuleEntry,
// returns the host's routes under a description that records the GPU ordinal it was asked for, and
// refuses ordinal 7 as the real module refuses a GPU the machine lacks (its message shortened).
#include <cstdio>
#include <string>

#include "analysis/spectral/dense_device.h"

namespace {

class StandInDevice final : public jacond::DenseDevice {
 public:
  explicit StandInDevice(int ordinal) : ordinal_(ordinal) {}
  std::string name() const override { return "stand-in"; }
  std::string description() const override { return "stand-in on cuda:" + std::to_string(ordinal_); }
  jacond::ConditionReport condition_fast(jacond::Mat A, const std::string& matrix) const override {
    return host_.condition_fast(std::move(A), matrix);
  }
  jacond::Vec singular_values(jacond::Mat A) const override { return host_.singular_values(std::move(A)); }
  jacond::ConditionReport condition_mixed(jacond::MatF A32, const jacond::LinearMap& A,
                                          const std::string& matrix) const override {
    return host_.condition_mixed(std::move(A32), A, matrix);
  }
  bool fits(jacond::DenseRoute route, jacond::Index rows, jacond::Index cols,
            const jacond::DenseBudget& budget) const override {
    return host_.fits(route, rows, cols, budget);
  }

 private:
  int ordinal_;
  jacond::CpuDenseDevice host_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) jacond::DenseDevice* jacond_cuda_dense_device_on(int ordinal, char* error,
                                                                                                   size_t error_size) {
  if (ordinal == 7) {
    std::snprintf(error, error_size, "require_device failed: cuda:7 asked for, 1 present");
    return nullptr;
  }
  return new StandInDevice(ordinal);
}
