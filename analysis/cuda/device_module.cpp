// The CUDA back end as a module the `jacond` command loads only for --device cuda
// (experiments/cli/device_option.cpp): linking cuBLAS/cuSOLVER into the command itself cost every
// invocation ~0.5 s of library loading (libcublasLt alone is 540 MB), CPU runs included. One C
// entry point; everything else in this module is hidden (-fvisibility=hidden, --exclude-libs).
#include <cstdio>
#include <exception>

#include "analysis/cuda/dense_cuda.h"

extern "C" __attribute__((visibility("default"))) jacond::DenseDevice* jacond_cuda_dense_device_create(char* error,
                                                                                                       size_t error_size) {
  try {
    jacond::cuda::require_device();
    return new jacond::cuda::CudaDenseDevice();
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}
