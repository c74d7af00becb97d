// One table of tolerances for the whole suite (docs/design.md §8). Relative errors are
// ‖computed − oracle‖_F / ‖oracle‖_F unless a test says otherwise.
#pragma once

namespace jacond::test {

// Analytic Jacobian vs central finite differences (step kFdStep), fp64.
inline constexpr double kFdStep = 1e-6;
inline constexpr double kVsFiniteDifferences = 1e-6;
// Analytic Jacobian vs LibTorch autograd on the same weights, fp64.
inline constexpr double kVsAutograd = 1e-10;
// Two analytic routes that differ only in rounding (dense closed form vs operator, B+E vs K).
inline constexpr double kSameMathRounding = 1e-12;
// Fast κ (LU/QR + Lanczos) vs full SVD, relative, when κ is far above the noise floor.
inline constexpr double kFastVsSvd = 1e-9;

}  // namespace jacond::test
