// The dense exact route on an NVIDIA GPU: condition_fast's algorithm (analysis/spectral/lu_lanczos.h:
// Lanczos on AᵀA for σ_max, LU with partial pivoting, Lanczos on (AᵀA)⁻¹ for σ_min) with the
// matrix, its LU factors and every product on the device (cuBLAS dgemv, cuSOLVER Xgetrf/Xgetrs,
// the 64-bit API: ViT-S's K_sa is 75 648², 5.7e9 entries, past 32-bit indexing), fp64 throughout.
// The Lanczos bookkeeping stays on the host: a product moves 2n doubles each way against the n²
// entries it reads on the device.
//
// Why hand-written cuSOLVER here and not LibTorch (issue #11, item 1; docs/design.md §10): the
// analysis core never includes torch, the dense route needs only library calls (no kernel of
// our own), and the one object that matters, a 45.8 GB fp64 LU, is exactly what cuSOLVER's
// getrf is for. Built only when CMake finds the CUDA toolkit (JACOND_HAVE_CUDA); compiled in CI,
// exercised where a GPU is present (tests/analysis/cuda/test_dense_cuda.cpp compares it with
// the CPU route on the same matrices and skips without a device).
//
// Errors: every CUDA, cuBLAS and cuSOLVER status is checked; a failure throws CudaError naming the
// call, file and line. Too little free device memory for A (8 n² bytes plus the workspace) is a
// CudaError before anything is allocated. Plain cudaMalloc, no managed memory.
#pragma once

#include <stdexcept>
#include <string>

#include "analysis/core/types.h"
#include "analysis/spectral/condition.h"

namespace jacond::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// True when a CUDA device can be used (driver present, at least one device).
bool device_available();

/// Name and free / total memory of device 0, for run.json and error messages.
std::string device_description();

/// κ of a dense square A on the GPU, status exact or singular, method "dense-lu-lanczos-cuda". An
/// exactly singular pivot or a Lanczos that does not converge falls back to the CPU SVD (noted),
/// as on the CPU; so does a non-square A (the block Jacobians are square). Throws
/// std::invalid_argument on NaN/inf, CudaError on a device failure.
ConditionReport condition_fast(Mat A, const std::string& matrix);

}  // namespace jacond::cuda
