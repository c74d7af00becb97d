// The Python module jacond._jacond (pybind11): the analysis core (analysis/) with NumPy arrays.
// One file per concern, each adding its names to the module:
//   bind_block.cpp      Block (BlockWeights): explicit W^Q … or timm names, to_timm
//   bind_reports.cpp    Report (ConditionReport), block_reports, weight_reports, condition
//   bind_operators.cpp  JacobianOperator (matrix-free K x and Kᵀ y), dense_jacobian
//   bind_device.cpp     device="cpu" | "cuda" (the dense routes' DenseDevice), device_description
// Conventions for the Python side (python/jacond/__init__.py says the same to users):
//   * fp64 everywhere; arrays of another dtype are converted (a copy). Arguments bound as
//     Eigen::Ref<const …> are read in place when they are fp64 and Fortran-contiguous (a 1-D
//     vector: contiguous), copied otherwise; returned matrices are moved into NumPy (no copy).
//   * tokens X are n × d, row-vector convention (analysis/jacobians/block.h); vectors acted on by
//     Jacobians are vec(X) in column-major order (analysis/core/types.h), X.ravel(order="F").
//   * std::invalid_argument becomes ValueError (pybind11's translation), with the core's message.
//   * the GIL is released around every call that computes (reports, products, assembly), so
//     other Python threads run meanwhile.
#pragma once

#include <pybind11/eigen.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/dense_device.h"

namespace jacond::python {

/// X as the n × d tokens of block `w`: std::invalid_argument (ValueError) naming the problem
/// when d differs, n < 2 or an entry is NaN/inf.
Mat checked_tokens(const Eigen::Ref<const Mat>& X, const BlockWeights& w);

/// The DenseDevice of a `device` argument: "cpu", or "cuda" (the module loaded once per process).
/// ValueError for another name or a build without the CUDA back end; RuntimeError (one line,
/// naming the CUDA call) where the module loads but no GPU is usable.
std::shared_ptr<const DenseDevice> dense_device(const std::string& name);

void bind_block(pybind11::module_& m);
void bind_device(pybind11::module_& m);
void bind_reports(pybind11::module_& m);
void bind_operators(pybind11::module_& m);

}  // namespace jacond::python
