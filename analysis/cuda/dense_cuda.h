// The dense exact route on an NVIDIA GPU: condition_fast's algorithm (analysis/spectral/lu_lanczos.h:
// Lanczos on AᵀA for σ_max, LU with partial pivoting, Lanczos on (AᵀA)⁻¹ for σ_min) with the
// matrix, its LU factors and every product on the device (cuBLAS dgemv, cuSOLVER Xgetrf/Xgetrs,
// the 64-bit API: ViT-S's K_sa is 75 648², 5.7e9 entries, past 32-bit indexing), fp64 throughout.
// The Lanczos bookkeeping stays on the host: a product moves 2n doubles each way against the n²
// entries it reads on the device. The inertia certificates' LDLᵀ (analysis/spectral/inertia.h)
// runs here too: Bunch–Kaufman cusolverDnDsytrf, its solves by cusolverDnXsytrs (CudaDenseDevice::
// ldlt below; ldlt.h says why the host-side conversion makes the count and its bound the host's).
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
// CudaError before anything is allocated. Plain cudaMalloc, no managed memory; a failed allocation
// names the buffer, its bytes and the line that asked for it (detail::allocate_device_buffer), and
// a devInfo error the call and the line that read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "analysis/core/types.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/dense_device.h"
#include "analysis/spectral/lu_lanczos.h"

namespace jacond::cuda {

/// A failed CUDA, cuBLAS or cuSOLVER call (a DeviceError: Lanczos lets it through, see
/// analysis/spectral/lu_lanczos.h).
class CudaError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

/// True when a CUDA device can be used (driver present, at least one device); else `why` (when
/// given) says why not: cudaGetDeviceCount's error (e.g. "CUDA driver version is insufficient for
/// CUDA runtime version", what a GPU machine with an old driver says) or "no CUDA device".
bool device_available(std::string* why = nullptr);

/// The calling thread's current CUDA device (cudaGetDevice): where the free functions below run.
int current_device();

/// "cuda:K <name> (<free> GB free of <total>)" for device `ordinal`, for run.json and error messages.
std::string device_description(int ordinal);

/// How the exact route's σ_min sweep applies (AᵀA)⁻¹ = A⁻¹A⁻ᵀ to a vector, given P A = L U from
/// cusolverDnXgetrf. The row permutation cancels in the product,
///     A⁻¹A⁻ᵀ = U⁻¹ L⁻¹ P · Pᵀ L⁻ᵀ U⁻ᵀ = U⁻¹ L⁻¹ L⁻ᵀ U⁻ᵀ,
/// so a sweep may be four triangular applications with no row swaps. Three ways, one answer:
///  - kGetrs: two cusolverDnXgetrs with one right-hand side (Aᵀ, then A), each ending in a devInfo
///    read. The route the first H200 run measured (reports/gpu, 2026-11-27): 4.3 ms a sweep step at
///    nd 6 400, where reading the factors twice at the device's bandwidth takes about 0.14 ms.
///  - kTrsv: four cublasDtrsv_64 on the factors. Each triangular solve is backward stable,
///    (T + ΔT) ŷ = x with |ΔT| ≤ n·u·|T|, as getrs's are.
///  - kTrtri: U⁻¹ and L⁻¹ formed once, in place over the factors (cusolverDnXtrtri, 2/3·n³ flops, as
///    many as the LU), then four cublasDtrmv_64: products, with no chain of dependent steps. Not
///    backward stable, but the computed inverse X of a triangular T satisfies |X T − I| ≤ c·n·u·|X||T|
///    or |T X − I| ≤ c·n·u·|T||X|, by the method (Du Croz and Higham, 1992), either way ‖X − T⁻¹‖ ≲ c·n·u·κ(T)·‖T⁻¹‖, the same first-order bound as the
///    operator a solve applies, ‖(T + ΔT)⁻¹ − T⁻¹‖ ≲ n·u·κ(T)·‖T⁻¹‖. Where trtri's workspace does
///    not fit the free device memory, the sweep is kTrsv's (the note says which ran).
/// Whichever is used, the route's one check (lu_lanczos.h: ‖A v_min‖ by an independent product)
/// still proves the reported σ_min is not below the truth, and a failed check takes the SVD.
/// Which is fastest is a device measurement (`jacond bench dense --device cuda` times all three);
/// until one is made, kGetrs, the measured one, is the default.
enum class LuSolves { kGetrs, kTrsv, kTrtri };

/// The sweep's solves from JACOND_CUDA_LU_SOLVES: unset or "getrs" → kGetrs, "trsv", "trtri";
/// anything else is std::invalid_argument naming the variable and its value (no device touched).
LuSolves lu_solves_from_env();

/// "getrs", "trsv", "trtri": the name the variable takes and the report's note says.
const char* to_string(LuSolves solves);

/// κ of a dense square A on the GPU, status exact or singular, method "dense-lu-lanczos-cuda". An
/// exactly singular pivot or a Lanczos that does not converge falls back to the full spectrum, as
/// on the CPU, but on the GPU (singular_values below, method "dense-svd-cuda", noted); a
/// non-square A (the block Jacobians are square) or one of fewer than kFastMinSize columns (the
/// CPU's own rule: its SVD) takes the CPU route, noted. The σ_min sweep's solves: lu_solves_from_env(),
/// named in the note. Throws std::invalid_argument on NaN/inf or a bad JACOND_CUDA_LU_SOLVES,
/// CudaError on a device failure.
ConditionReport condition_fast(Mat A, const std::string& matrix);

/// condition_fast of `map`'s matrix assembled on the GPU by the map itself (TokenMap::assemble: the
/// operator's device twin in LibTorch, models/device, writing its columns into our cudaMalloc'd
/// buffer), so the host neither assembles nor copies the n² matrix; the σ_min check's A v is the
/// map's own fp64 product, and the SVD fallback assembles again on the device. Same report as
/// condition_fast (method dense-lu-lanczos-cuda, noted "assembled on the GPU …" with the assembly's
/// seconds). Where the whole LU does not fit the free device memory but the Schur route in some
/// number of pieces does, condition_schur below in the fewest (SchurPlan::for_order), with
/// `checkpoint`: choose_device_lu (analysis/spectral/schur_lu.h) decides. nullopt where neither runs
/// here but the caller's host copy may: a rectangular or small map (condition_fast's CPU-route
/// sizes), a map that cannot assemble, or free memory for condition_fast's LU of a host copy but
/// not for the map's assembly batch beside it. CudaError, naming the order, both routes' bytes and
/// the free memory (device_lu_refusal), where not even that fits: a host copy would only be refused
/// by condition_fast after the host assembled it (8 n² bytes: an out-of-memory kill at ViT-B).
/// A map on another GPU than the current one (its assembles_into "cuda:K"): a one-line CudaError
/// before anything is allocated (detail::assembles_on).
std::optional<ConditionReport> condition_fast_assembled(const TokenMap& map, const std::string& matrix,
                                                        const std::function<void()>& checkpoint = {});

/// The Schur route (analysis/spectral/schur_lu.h) on the GPU with `plan`: the diagonal pieces'
/// Schur complements assembled there from the map's products (TokenMap::assemble_columns /
/// apply_columns), factorised by cusolverDnXgetrf, the panel solves by Xgetrs with many right-hand
/// sides, the panels' differences by cublasDgeam; method "dense-schur-lu-lanczos-cuda", the note
/// "assembled on the GPU …" with the cuts, the phases and the solves' backward error.
/// condition_fast_assembled takes it where the whole LU does not fit the device's free memory and
/// plan.bytes() (with the map's batch and Xgetrf's workspace) does: ViT-B's K_sa, 91.6 GB in two
/// pieces on an H200, 61 GB in three on an H100. `checkpoint`: SchurLuBackend's cancellation point.
/// nullopt where the map does not assemble into CUDA memory; CudaError when the plan does not fit,
/// or where the map assembles on another GPU than the current one (detail::assembles_on), as in
/// condition_fast_assembled.
std::optional<ConditionReport> condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                               const std::function<void()>& checkpoint = {});

/// κ from the fp32 LU of A32 = fl₃₂(A) on the GPU, each solve refined to fp64 against the operator
/// A on the host (analysis/spectral/mixed_lu.h: the algorithm and its bounds; the CPU's
/// condition_mixed is the same algorithm with LAPACKE's sgetrf). Method
/// "dense-lu32-refined-lanczos-cuda". Device memory: 4n² bytes and cuSOLVER's workspace, half of
/// condition_fast's; ViT-B's K_sa (n = 151 296, 92 GB) fits one H200. Not-converged (κ NaN, noted)
/// when the refinement fails; the caller falls back (block_report.cpp). Throws
/// std::invalid_argument on a shape mismatch or NaN/inf, CudaError on a device failure.
ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix);

/// All singular values of A, descending, on the GPU (cusolverDnXgesvd, jobu = jobvt = 'N', the
/// 64-bit API; a wide A is transposed first, gesvd wants rows ≥ cols). The twin of
/// singular_values in condition.h: std::invalid_argument on NaN/inf, CudaError when gesvd does
/// not converge (devInfo > 0) or the device fails.
Vec singular_values(Mat A);

/// The largest order of H given to cusolverDnDsytrf. Its interface is 32-bit (int n, lda, lwork;
/// cuSOLVER has no 64-bit sytrf), trusted here only where every column-major offset i + j·lda fits
/// an int (46 340² < 2³¹): nd ≤ 23 170 for the augmented H_μ of an nd × nd block. A larger H is
/// factorised on the host (ldlt_rook), and fits(kInertia) is then the host's rule.
inline constexpr int64_t kMaxSytrfOrder = 46340;

/// The GPU as a DenseDevice (analysis/spectral/dense_device.h). fits(): the assembled matrix
/// within the host budget's memory, and the route's device working set (A, its LU or gesvd
/// workspace, as cuSOLVER's buffer-size queries state it) within the device's free memory.
/// No time prediction: the GPU's factorisation rate is not modelled, so `auto` on this device is
/// decided by memory alone. ldlt(): the inertia counts' factorisation (analysis/spectral/ldlt.h)
/// by cusolverDnDsytrf (Bunch–Kaufman) on the device, converted on the host for the count and the
/// radius, solves by cusolverDnXsytrs on the device (method "+inertia-cuda"); where H is past
/// kMaxSytrfOrder or the free device memory, the host's rook factorisation (method "+inertia").
///
/// One GPU, `ordinal`, fixed at construction: every call makes it the calling thread's current
/// device for its duration and restores the one before (the free functions above run on whatever
/// is current). So a data-parallel rank tracking on its own GPU (cuda:LOCAL_RANK) runs there from
/// any thread, not only from the one whose current device the NCCL group's setup made it, and the
/// description names the GPU it is. The LDLᵀ factors it returns solve on the same GPU.
class CudaDenseDevice final : public DenseDevice {
 public:
  /// After require_device(ordinal); −1: the calling thread's current device, fixed now.
  explicit CudaDenseDevice(int ordinal);
  int ordinal() const { return ordinal_; }
  std::string name() const override { return "cuda"; }
  std::string description() const override { return device_description(ordinal_); }
  ConditionReport condition_fast(Mat A, const std::string& matrix) const override;
  std::optional<ConditionReport> condition_fast_assembled(const TokenMap& map, const std::string& matrix,
                                                          const std::function<void()>& checkpoint = {}) const override;
  std::optional<ConditionReport> condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                                 const std::function<void()>& checkpoint = {}) const override;
  Vec singular_values(Mat A) const override;
  ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const override;
  bool fits(DenseRoute route, Index rows, Index cols, const DenseBudget& budget) const override;
  std::unique_ptr<LdltFactors> ldlt(Mat lower) const override;

 private:
  int ordinal_;
};

/// Throws CudaError naming the reason when device `ordinal` cannot be used (−1: the current
/// device; no device at all, or an ordinal below −1 or past the devices present: "cuda:K asked
/// for, N present").
void require_device(int ordinal = -1);

/// The GPU `ordinal` as a DenseDevice (−1: the calling thread's current device).
std::shared_ptr<const DenseDevice> cuda_dense_device(int ordinal = -1);

// What dense_cuda.cpp's buffers and assembled routes check, declared here so that the tests reach
// it (tests/analysis/cuda/test_dense_cuda.cpp; the first and third without a device).
namespace detail {

/// The bytes of a device buffer of `count` elements of `element_bytes` each. Where that product
/// overflows size_t, a CudaError naming `what` (the buffer: "the matrix A", "cusolverDnXgetrf's
/// workspace", …), the count, the element size and `file`:`line` (where the buffer was asked for),
/// before cudaMalloc would be asked for the wrapped, smaller size.
size_t device_buffer_bytes(size_t count, size_t element_bytes, const std::string& what, const char* file, int line);

/// Allocates `bytes` on the current device as every buffer of the routes is allocated, then frees
/// them. A failure is the CudaError those throw: "cudaMalloc of <what> (<bytes> bytes, <GB> GB)
/// failed at <file>:<line>: <CUDA's reason>", the file and line being the caller's (GCC's and
/// Clang's __builtin_FILE / __builtin_LINE); without a device cudaMalloc's own refusal.
void allocate_device_buffer(size_t bytes, const std::string& what, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE());

/// Whether a map that assembles into `where` (TokenMap::assembles_into) writes the memory of the
/// dense device `ordinal`, the GPU the assembled and Schur routes allocate on: "cuda:K" with
/// K = ordinal, or "cuda" (LibTorch's current device, which the dense device's calls make theirs):
/// true. Host memory or none ("cpu", ""): false (the caller's host copy). "cuda:K" for another K:
/// a one-line CudaError naming `matrix` and both GPUs, as is a "cuda:" with no ordinal after it: the
/// map's products would write a buffer of another GPU, which no route here may hand them.
bool assembles_on(const std::string& where, int ordinal, const std::string& matrix);

}  // namespace detail

}  // namespace jacond::cuda
