// The CUDA backend of lu_lanczos_extremes; the math is in analysis/spectral/lu_lanczos.h, the
// choices in analysis/cuda/dense_cuda.h.
#include "analysis/core/clock.h"
#include "analysis/cuda/dense_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "analysis/spectral/lu_lanczos.h"
#include "analysis/spectral/mixed_lu.h"
#include "analysis/spectral/schur_lu.h"

namespace jacond::cuda {

namespace {

[[noreturn]] void fail(const char* call, const char* file, int line, const std::string& what) {
  std::ostringstream os;
  os << call << " failed at " << file << ":" << line << ": " << what;
  throw CudaError(os.str());
}

void check(cudaError_t s, const char* call, const char* file, int line) {
  if (s != cudaSuccess) fail(call, file, line, cudaGetErrorString(s));
}
void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(call, file, line, "cuBLAS status " + std::to_string(static_cast<int>(s)));
}
void check(cusolverStatus_t s, const char* call, const char* file, int line) {
  if (s != CUSOLVER_STATUS_SUCCESS) fail(call, file, line, "cuSOLVER status " + std::to_string(static_cast<int>(s)));
}

#define JACOND_CUDA(call) check((call), #call, __FILE__, __LINE__)

// "cudaMalloc of <what> (<bytes> bytes, <GB> GB)": a failed allocation's call, by name and size.
std::string allocation_call(const std::string& what, size_t bytes) {
  std::ostringstream os;
  os << "cudaMalloc of " << what << " (" << bytes << " bytes, " << static_cast<double>(bytes) / 1e9 << " GB)";
  return os.str();
}

// cudaMalloc of `bytes` into *ptr, or a CudaError naming the buffer, its size and where it was
// asked for (`file`:`line`, the maker's: every failure used to name DeviceBuffer's own line).
void device_malloc(void** ptr, size_t bytes, const std::string& what, const char* file, int line) {
  const cudaError_t s = cudaMalloc(ptr, bytes);
  if (s == cudaSuccess) return;
  *ptr = nullptr;
  // A failed cudaMalloc also leaves its error as the runtime's last one; cleared, or the next
  // launch check that reads it (LibTorch's, after a kernel of the map's products) would report this
  // allocation's failure as its own.
  (void)cudaGetLastError();
  fail(allocation_call(what, bytes).c_str(), file, line, cudaGetErrorString(s));
}

// One cudaMalloc'd buffer, freed on scope exit. `what` names it in a failure, with its bytes and
// the line that made it (`file` and `line`: by default the caller's, GCC's and Clang's builtins).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(size_t count, const std::string& what, const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : count_(count) {
    const size_t bytes = detail::device_buffer_bytes(count, sizeof(T), what, file, line);
    if (bytes > 0) device_malloc(reinterpret_cast<void**>(&ptr_), bytes, what, file, line);
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  T* get() const { return ptr_; }
  size_t count() const { return count_; }
 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Makes `ordinal` the calling thread's current device for one scope, then restores the one before
// (CudaDenseDevice's calls; the free functions run on the current device).
class OnDevice {
 public:
  explicit OnDevice(int ordinal) : previous_(current_device()) {
    if (ordinal != previous_) {
      JACOND_CUDA(cudaSetDevice(ordinal));
      switched_ = true;
    }
  }
  ~OnDevice() {
    if (switched_) cudaSetDevice(previous_);  // a destructor does not throw; a failure here (a sticky error) is ignored
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_;
  bool switched_ = false;
};

// One cuBLAS or cuSOLVER handle (or cuSOLVER's params), made by `create` and destroyed by
// `destroy` with its owner. One owner per handle: a member whose constructor has returned is
// destroyed when a later member's constructor throws, so a failed cusolverDnCreate frees the cuBLAS
// handle made before it. (One struct that created all three in its constructor's body leaked the
// ones already made: a constructor that throws runs no destructor of its own.)
template <typename Handle, auto create, auto destroy>
class OwnedHandle {
 public:
  OwnedHandle(const char* call, const char* file, int line) {
    Handle made = nullptr;
    check(create(&made), call, file, line);
    handle_ = made;
  }
  ~OwnedHandle() {
    if (handle_) destroy(handle_);
  }
  OwnedHandle(const OwnedHandle&) = delete;
  OwnedHandle& operator=(const OwnedHandle&) = delete;
  // The raw handle, as the library calls take it (h.solver, h.blas).
  operator Handle() const { return handle_; }  // NOLINT(google-explicit-constructor)

 private:
  Handle handle_ = nullptr;
};

struct Handles {
  OwnedHandle<cublasHandle_t, cublasCreate, cublasDestroy> blas{"cublasCreate", __FILE__, __LINE__};
  OwnedHandle<cusolverDnHandle_t, cusolverDnCreate, cusolverDnDestroy> solver{"cusolverDnCreate", __FILE__, __LINE__};
  using Params = OwnedHandle<cusolverDnParams_t, cusolverDnCreateParams, cusolverDnDestroyParams>;
  Params params{"cusolverDnCreateParams", __FILE__, __LINE__};
};

void require_free_memory(size_t bytes, const std::string& what) {
  size_t free_bytes = 0, total = 0;
  JACOND_CUDA(cudaMemGetInfo(&free_bytes, &total));
  if (bytes > free_bytes) {
    std::ostringstream os;
    os << what << " needs " << static_cast<double>(bytes) / 1e9 << " GB of device memory, " << static_cast<double>(free_bytes) / 1e9
       << " GB free of " << static_cast<double>(total) / 1e9;
    throw CudaError(os.str());
  }
}

// cuSOLVER's devInfo, one int on the device, zeroed when allocated: the documentation does not
// say that every routine writes it on success, and read_info must not read cudaMalloc's leftovers.
class DeviceInfo : public DeviceBuffer<int> {
 public:
  explicit DeviceInfo(const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : DeviceBuffer<int>(1, "cuSOLVER's devInfo", file, line) {
    JACOND_CUDA(cudaMemset(get(), 0, sizeof(int)));
  }
};

// cuSOLVER's devInfo after `call`: < 0 is an argument error (a failure, naming the call and the
// line that read it: JACOND_READ_INFO), > 0 the routine's own outcome.
int read_info(const DeviceBuffer<int>& info_buffer, const std::string& call, const char* file, int line) {
  int info = 0;
  const std::string reading = "reading the devInfo of " + call;
  check(cudaMemcpy(&info, info_buffer.get(), sizeof(int), cudaMemcpyDeviceToHost), reading.c_str(), file, line);
  if (info < 0) fail(call.c_str(), file, line, "argument " + std::to_string(-info) + " is invalid");
  return info;
}

#define JACOND_READ_INFO(info, call) read_info((info), (call), __FILE__, __LINE__)

// LU with partial pivoting of the n × n device matrix `a` (fp64 or fp32: `type`) in place, by
// cusolverDnXgetrf with the workspace it asks for. info > 0: U(info, info) is exactly zero, the
// CPU's getrf outcome and the same answer (kExactlySingular; `zero_pivot`, where given, gets
// info − 1, 0-based). `route` names the factorisation in errors (three routes share this code).
FactorOutcome getrf_in_place(Handles& h, int64_t n, cudaDataType type, void* a, int64_t* ipiv,
                             const DeviceBuffer<int>& info, const std::string& route, Index* zero_pivot = nullptr) {
  size_t device_bytes = 0, host_bytes = 0;
  JACOND_CUDA(cusolverDnXgetrf_bufferSize(h.solver, h.params, n, n, type, a, n, type, &device_bytes, &host_bytes));
  const std::string workspace = "cusolverDnXgetrf's workspace for " + route;
  require_free_memory(device_bytes, workspace);
  DeviceBuffer<char> work(device_bytes, workspace);
  std::vector<char> host_work(host_bytes);
  JACOND_CUDA(cusolverDnXgetrf(h.solver, h.params, n, n, type, a, n, ipiv, type, work.get(), device_bytes,
                               host_work.data(), host_bytes, info.get()));
  const int first_zero = JACOND_READ_INFO(info, "cusolverDnXgetrf (" + route + ")");
  if (first_zero == 0) return FactorOutcome::kFactored;
  if (zero_pivot) *zero_pivot = first_zero - 1;
  return FactorOutcome::kExactlySingular;
}

// Where a device route's seconds go, for the report's note: each phase timed on the host around
// calls that end in a synchronising copy (cudaMemcpy to the host), so a phase's seconds include
// its device work. What the GPU measurements split (design §10: is the copy worth a device-side
// assembly?).
// setup: the handles and device allocations; host_checks: the input's finiteness scan and the σ_min
// check's product (on the host in condition_fast, the two host passes over the n² matrix; the map's
// product in condition_fast_assembled). The first
// H200 run (reports/gpu) left ≈ 0.18 s of a 0.58 s route at nd 6 400 outside the four device phases.
// invert: kTrtri's triangular inverses (LuSolves), after the LU; solves: the sweep's kind.
struct PhaseSeconds {
  double setup = 0, copy = 0, assembly = 0, gram = 0, factor = 0, invert = 0, inverse_gram = 0, host_checks = 0;
  Index gram_calls = 0, inverse_calls = 0;
  LuSolves solves = LuSolves::kGetrs;
};

// Adds the seconds since construction to `total` on scope exit.
class PhaseTimer {
 public:
  explicit PhaseTimer(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() { total_ += seconds_since(t0_); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

std::string describe(const PhaseSeconds& s) {
  std::ostringstream os;
  os.precision(3);
  os << "GPU seconds: setup " << s.setup << (s.assembly > 0 ? ", assembly " : ", copy ")
     << (s.assembly > 0 ? s.assembly : s.copy) << ", sigma_max sweep " << s.gram << " (" << s.gram_calls
     << " products), LU " << s.factor;
  if (s.solves == LuSolves::kTrtri) os << ", triangular inverses " << s.invert;
  os << ", sigma_min sweep " << s.inverse_gram << " (" << s.inverse_calls << " solves, " << to_string(s.solves)
     << "), checks " << s.host_checks;
  return os.str();
}

// The mixed route's phases: its fp32 solves are counted under inverse_gram (CudaLu32::seconds).
std::string describe_mixed(const PhaseSeconds& s) {
  std::ostringstream os;
  os.precision(3);
  os << "GPU seconds: setup " << s.setup << ", copy " << s.copy << ", fp32 LU " << s.factor << ", fp32 solves " << s.inverse_gram << " ("
     << s.inverse_calls << ")";
  return os.str();
}

size_t free_device_bytes();  // below

// lu_lanczos_extremes' backend on the device: A (n × n, column-major) copied once; gram() by two
// dgemv, factor() by Xgetrf in place, inverse_gram() by `solves` (LuSolves in dense_cuda.h).
class CudaLuBackend {
 public:
  CudaLuBackend(const Mat& A, LuSolves solves)
      : n_(A.rows()), a_(static_cast<size_t>(n_) * n_, "the exact route's matrix"), x_(n_, "the exact route's vector x"),
        t_(n_, "the exact route's vector t"), ipiv_(n_, "the exact route's pivots") {
    seconds_.setup = seconds_since(constructed_);
    seconds_.solves = solves;
    PhaseTimer timer(seconds_.copy);
    JACOND_CUDA(cudaMemcpy(a_.get(), A.data(), sizeof(double) * a_.count(), cudaMemcpyHostToDevice));
  }
  // A already on the device (TokenMap::assemble into `a`, `assembly_seconds`): adopted, no copy.
  CudaLuBackend(DeviceBuffer<double>&& a, int64_t n, double assembly_seconds, LuSolves solves)
      : n_(n), a_(std::move(a)), x_(n_, "the exact route's vector x"), t_(n_, "the exact route's vector t"),
        ipiv_(n_, "the exact route's pivots") {
    seconds_.setup = seconds_since(constructed_);
    seconds_.assembly = assembly_seconds;
    seconds_.solves = solves;
  }
  Index order() const { return n_; }
  const PhaseSeconds& seconds() const { return seconds_; }

  void gram(const double* x, double* y) {
    PhaseTimer timer(seconds_.gram);
    ++seconds_.gram_calls;
    const double one = 1.0, zero = 0.0;
    upload(x);
    JACOND_CUDA(cublasDgemv_64(h_.blas, CUBLAS_OP_N, n_, n_, &one, a_.get(), n_, x_.get(), 1, &zero, t_.get(), 1));
    JACOND_CUDA(cublasDgemv_64(h_.blas, CUBLAS_OP_T, n_, n_, &one, a_.get(), n_, t_.get(), 1, &zero, x_.get(), 1));
    download(y);
  }

  FactorOutcome factor(double /*sigma_max*/) {
    FactorOutcome outcome;
    {
      PhaseTimer timer(seconds_.factor);
      outcome = getrf_in_place(h_, n_, CUDA_R_64F, a_.get(), ipiv_.get(), info_, "the exact route's LU");
    }
    if (outcome == FactorOutcome::kFactored && seconds_.solves == LuSolves::kTrtri) invert_factors();
    return outcome;
  }

  // y = A⁻¹A⁻ᵀ x. getrs: Aᵀ z = x, then A y = z. trsv, trtri: U⁻¹ L⁻¹ L⁻ᵀ U⁻ᵀ x (the permutation
  // cancels, LuSolves), by solves with the factors or products with their inverses.
  void inverse_gram(const double* x, double* y) {
    if (!Eigen::Map<const Vec>(x, n_).allFinite()) throw NonFiniteSolve();
    PhaseTimer timer(seconds_.inverse_gram);
    ++seconds_.inverse_calls;
    upload(x);
    if (seconds_.solves == LuSolves::kGetrs) {
      JACOND_CUDA(cusolverDnXgetrs(h_.solver, h_.params, CUBLAS_OP_T, n_, 1, CUDA_R_64F, a_.get(), n_, ipiv_.get(),
                                   CUDA_R_64F, x_.get(), n_, info_.get()));
      JACOND_READ_INFO(info_, "cusolverDnXgetrs (the exact route's sigma_min sweep, A^T)");
      JACOND_CUDA(cusolverDnXgetrs(h_.solver, h_.params, CUBLAS_OP_N, n_, 1, CUDA_R_64F, a_.get(), n_, ipiv_.get(),
                                   CUDA_R_64F, x_.get(), n_, info_.get()));
      JACOND_READ_INFO(info_, "cusolverDnXgetrs (the exact route's sigma_min sweep, A)");
    } else {
      apply_triangle(CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT);  // U⁻ᵀ
      apply_triangle(CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_UNIT);      // L⁻ᵀ
      apply_triangle(CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT);      // L⁻¹
      apply_triangle(CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT);  // U⁻¹
    }
    download(y);
    if (!Eigen::Map<const Vec>(y, n_).allFinite()) throw NonFiniteSolve();
  }

 private:
  // x_ ← T⁻¹ x_ or T⁻ᵀ x_ for the triangle T of the factors: a solve with T (trsv), or a product
  // with T's inverse where invert_factors() put it (trtri). Queued on the handle's stream; the
  // download's copy waits for them.
  void apply_triangle(cublasFillMode_t uplo, cublasOperation_t op, cublasDiagType_t diag) {
    if (seconds_.solves == LuSolves::kTrsv)
      JACOND_CUDA(cublasDtrsv_64(h_.blas, uplo, op, diag, n_, a_.get(), n_, x_.get(), 1));
    else
      JACOND_CUDA(cublasDtrmv_64(h_.blas, uplo, op, diag, n_, a_.get(), n_, x_.get(), 1));
  }

  // U⁻¹ over U (upper, with the diagonal) and L⁻¹ over L's strict lower part (unit diagonal, not
  // stored), in place: cusolverDnXtrtri twice, with the larger workspace the two ask for. Where
  // that workspace does not fit the free device memory, the sweep solves with the factors instead
  // (trsv: the same memory as getrs; the note then says trsv). After a factorisation with no zero
  // pivot, so info > 0 (a zero diagonal entry) cannot happen; it is still checked, as a failure.
  void invert_factors() {
    PhaseTimer timer(seconds_.invert);
    const std::pair<cublasFillMode_t, cublasDiagType_t> triangles[] = {{CUBLAS_FILL_MODE_UPPER, CUBLAS_DIAG_NON_UNIT},
                                                                       {CUBLAS_FILL_MODE_LOWER, CUBLAS_DIAG_UNIT}};
    size_t device_bytes = 0, host_bytes = 0;
    for (const auto& [uplo, diag] : triangles) {
      size_t d = 0, h = 0;
      JACOND_CUDA(cusolverDnXtrtri_bufferSize(h_.solver, uplo, diag, n_, CUDA_R_64F, a_.get(), n_, &d, &h));
      device_bytes = std::max(device_bytes, d), host_bytes = std::max(host_bytes, h);
    }
    if (device_bytes > free_device_bytes()) {
      seconds_.solves = LuSolves::kTrsv;
      return;
    }
    DeviceBuffer<char> work(device_bytes, "cusolverDnXtrtri's workspace");
    std::vector<char> host_work(host_bytes);
    for (const auto& [uplo, diag] : triangles) {
      JACOND_CUDA(cusolverDnXtrtri(h_.solver, uplo, diag, n_, CUDA_R_64F, a_.get(), n_, work.get(), device_bytes,
                                   host_work.data(), host_bytes, info_.get()));
      if (JACOND_READ_INFO(info_, uplo == CUBLAS_FILL_MODE_UPPER ? "cusolverDnXtrtri (U)" : "cusolverDnXtrtri (L)") > 0)
        fail("cusolverDnXtrtri", __FILE__, __LINE__, "a zero diagonal entry after a factorisation without one");
    }
  }

  void upload(const double* x) { JACOND_CUDA(cudaMemcpy(x_.get(), x, sizeof(double) * n_, cudaMemcpyHostToDevice)); }
  void download(double* y) { JACOND_CUDA(cudaMemcpy(y, x_.get(), sizeof(double) * n_, cudaMemcpyDeviceToHost)); }

  const int64_t n_;
  const std::chrono::steady_clock::time_point constructed_ = std::chrono::steady_clock::now();  // before h_ and the buffers
  PhaseSeconds seconds_;  // before them too: the constructor's copy is timed into it
  Handles h_;
  DeviceBuffer<double> a_, x_, t_;
  DeviceBuffer<int64_t> ipiv_;
  DeviceInfo info_;
};

// mixed_lu.h's factor concept on the device: fl₃₂(A) (n × n, column-major) copied once,
// factor() by Xgetrf in fp32 in place, solve() by Xgetrs in fp32 (a host vector of n floats each
// way: 4n bytes against the 4n² the solve reads on the device).
class CudaLu32 {
 public:
  explicit CudaLu32(const MatF& A)
      : n_(A.rows()), a_(static_cast<size_t>(n_) * n_, "the mixed route's fp32 matrix"), v_(n_, "the mixed route's vector"),
        ipiv_(n_, "the mixed route's pivots") {
    seconds_.setup = seconds_since(constructed_);
    PhaseTimer timer(seconds_.copy);
    JACOND_CUDA(cudaMemcpy(a_.get(), A.data(), sizeof(float) * a_.count(), cudaMemcpyHostToDevice));
  }
  Index order() const { return n_; }
  // The fp32 solves are counted under inverse_gram (GMRES-IR calls them inside each refined solve).
  const PhaseSeconds& seconds() const { return seconds_; }

  FactorOutcome factor() {
    PhaseTimer timer(seconds_.factor);
    return getrf_in_place(h_, n_, CUDA_R_32F, a_.get(), ipiv_.get(), info_, "the mixed route's fp32 LU");
  }

  void solve(float* v, bool transposed) {
    PhaseTimer timer(seconds_.inverse_gram);
    ++seconds_.inverse_calls;
    JACOND_CUDA(cudaMemcpy(v_.get(), v, sizeof(float) * n_, cudaMemcpyHostToDevice));
    JACOND_CUDA(cusolverDnXgetrs(h_.solver, h_.params, transposed ? CUBLAS_OP_T : CUBLAS_OP_N, n_, 1, CUDA_R_32F,
                                 a_.get(), n_, ipiv_.get(), CUDA_R_32F, v_.get(), n_, info_.get()));
    JACOND_READ_INFO(info_, "cusolverDnXgetrs (the mixed route's fp32 solve)");
    JACOND_CUDA(cudaMemcpy(v, v_.get(), sizeof(float) * n_, cudaMemcpyDeviceToHost));
  }

 private:
  const int64_t n_;
  const std::chrono::steady_clock::time_point constructed_ = std::chrono::steady_clock::now();  // before h_ and the buffers
  PhaseSeconds seconds_;  // before them too: the constructor's copy is timed into it
  Handles h_;
  DeviceBuffer<float> a_, v_;
  DeviceBuffer<int64_t> ipiv_;
  DeviceInfo info_;
};

// schur_lu.h's Store on the device: cudaMalloc'd buffers, 2-D copies by cudaMemcpy2D / cudaMemset2D,
// differences by cublasDgeam, the LUs by cusolverDnXgetrf / Xgetrs, a zero pivot's null vector
// by cublasDtrsv (64-bit API: a piece of ViT-B's
// K_sa in two is 75 648², 5.7e9 entries). Everything runs on the legacy default stream, as LibTorch's products
// do, so the calls are ordered; each call ends synchronised (a read of devInfo, a blocking copy, or,
// after the asynchronous 2-D copies and cublasDgeam, subtract's device synchronisation, once a
// panel), so SchurStats' host timers measure the device work.
class CudaSchurStore {
 public:
  using Buffer = DeviceBuffer<double>;
  using Pivots = DeviceBuffer<int64_t>;
  Buffer alloc(size_t count) {
    require_free_memory(sizeof(double) * count, "the Schur route's buffers");
    return Buffer(count, "a Schur route buffer (a piece, its complement or a panel)");
  }
  Pivots pivots(Index m) { return Pivots(static_cast<size_t>(m), "a Schur route piece's pivots"); }
  void copy(Index rows, Index cols, const double* src, Index ld_src, double* dst, Index ld_dst) {
    JACOND_CUDA(cudaMemcpy2D(dst, sizeof(double) * ld_dst, src, sizeof(double) * ld_src, sizeof(double) * rows, cols,
                             cudaMemcpyDeviceToDevice));
  }
  void zero(Index rows, Index cols, double* dst, Index ld) {
    JACOND_CUDA(cudaMemset2D(dst, sizeof(double) * ld, 0, sizeof(double) * rows, cols));
  }
  void subtract(Index rows, Index cols, const double* a, Index lda, const double* b, Index ldb, double* c, Index ldc) {
    const double one = 1.0, minus_one = -1.0;
    JACOND_CUDA(cublasDgeam_64(h_.blas, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, &one, a, lda, &minus_one, b, ldb, c, ldc));
    JACOND_CUDA(cudaDeviceSynchronize());  // the panel's last call: its seconds are the assembly's
  }
  void upload(const double* host, double* dst, Index count) {
    JACOND_CUDA(cudaMemcpy(dst, host, sizeof(double) * count, cudaMemcpyHostToDevice));
  }
  void download(const double* src, double* host, Index count) {
    JACOND_CUDA(cudaMemcpy(host, src, sizeof(double) * count, cudaMemcpyDeviceToHost));
  }
  FactorOutcome lu_factor(double* a, Index m, Pivots& p, Index* zero_pivot) {
    return getrf_in_place(h_, m, CUDA_R_64F, a, p.get(), info_, "a Schur route piece's LU", zero_pivot);
  }
  void lu_solve(const double* lu, Index m, const Pivots& p, bool transposed, double* b, Index nrhs, Index ldb) {
    JACOND_CUDA(cusolverDnXgetrs(h_.solver, h_.params, transposed ? CUBLAS_OP_T : CUBLAS_OP_N, m, nrhs, CUDA_R_64F, lu, m,
                                 p.get(), CUDA_R_64F, b, ldb, info_.get()));
    JACOND_READ_INFO(info_, "cusolverDnXgetrs (a Schur route piece's solve, " + std::to_string(nrhs) + " right-hand sides)");
  }
  void upper_solve(const double* lu, Index m, Index k, double* b) {
    if (k == 0) return;
    JACOND_CUDA(cublasDtrsv_64(h_.blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, k, lu, m, b, 1));
  }
  Index replace_zero_pivots(double* lu, Index m, double value) {  // the diagonal, a stride of m + 1, each way
    std::vector<double> diagonal(static_cast<size_t>(m));
    const size_t stride = sizeof(double) * (m + 1);
    JACOND_CUDA(cudaMemcpy2D(diagonal.data(), sizeof(double), lu, stride, sizeof(double), m, cudaMemcpyDeviceToHost));
    Index replaced = 0;
    for (double& u : diagonal) {
      if (!std::isfinite(u)) return -1;  // cusolverDnXgetrf may divide by the zero pivot: NaN past it
      if (u == 0.0) {
        u = value;
        ++replaced;
      }
    }
    JACOND_CUDA(cudaMemcpy2D(lu, stride, diagonal.data(), sizeof(double), sizeof(double), m, cudaMemcpyHostToDevice));
    return replaced;
  }

 private:
  Handles h_;
  DeviceInfo info_;
};

// H = P L D Lᵀ Pᵀ on the device (analysis/spectral/ldlt.h): cusolverDnDsytrf (Bunch–Kaufman, the
// only LDLᵀ in cuSOLVER) in place on a device copy of H's lower triangle. The factors come back to
// the host once and are converted there to dsytrf_rk's layout (dsyconvf), which the count and the
// rounding radius read; the device copy stays in dsytrf's layout for the solves (cusolverDnXsytrs,
// which takes sytrf's factors and 64-bit pivots): a host vector of M doubles each way against the
// M² entries a solve reads there.
class CudaLdltFactors final : public LdltFactors {
 public:
  // On the current device (CudaDenseDevice::ldlt made it its own), where solve() runs again.
  explicit CudaLdltFactors(Mat lower)
      : ordinal_(current_device()), m_(lower.rows()), a_(static_cast<size_t>(m_) * m_, "the LDLT's matrix H"),
        x_(m_, "the LDLT's solve vector"), ipiv64_(m_, "the LDLT's 64-bit pivots") {
    JACOND_CUDA(cudaMemcpy(a_.get(), lower.data(), sizeof(double) * a_.count(), cudaMemcpyHostToDevice));
    factor();
    JACOND_CUDA(cudaMemcpy(lower.data(), a_.get(), sizeof(double) * a_.count(), cudaMemcpyDeviceToHost));
    F = std::move(lower);
    const std::vector<int64_t> ipiv64(ipiv.begin(), ipiv.end());  // before the conversion rewrites ipiv
    JACOND_CUDA(cudaMemcpy(ipiv64_.get(), ipiv64.data(), sizeof(int64_t) * ipiv64.size(), cudaMemcpyHostToDevice));
    bunch_kaufman_to_rk_layout(*this);
    where = "cuda";
    pivoting = "bunch-kaufman";
    JACOND_CUDA(cusolverDnXsytrs_bufferSize(h_.solver, CUBLAS_FILL_MODE_LOWER, m_, 1, CUDA_R_64F, a_.get(), m_,
                                            ipiv64_.get(), CUDA_R_64F, x_.get(), m_, &solve_device_bytes_,
                                            &solve_host_bytes_));
    require_free_memory(solve_device_bytes_, "cusolverDnXsytrs's workspace");
    // Built here, not in make_unique: DeviceBuffer's default file and line would be make_unique's.
    solve_work_.reset(new DeviceBuffer<char>(solve_device_bytes_, "cusolverDnXsytrs's workspace", __FILE__, __LINE__));
    solve_host_work_.resize(solve_host_bytes_);
  }

  ~CudaLdltFactors() override {  // the members go on ordinal_ (restore_ puts the thread's device back)
    int current = 0;
    if (cudaGetDevice(&current) == cudaSuccess && current != ordinal_ && cudaSetDevice(ordinal_) == cudaSuccess)
      restore_.previous = current;
  }
  CudaLdltFactors(const CudaLdltFactors&) = delete;
  CudaLdltFactors& operator=(const CudaLdltFactors&) = delete;

  void solve(const double* x, double* y) const override {
    OnDevice on(ordinal_);
    JACOND_CUDA(cudaMemcpy(x_.get(), x, sizeof(double) * m_, cudaMemcpyHostToDevice));
    JACOND_CUDA(cusolverDnXsytrs(h_.solver, CUBLAS_FILL_MODE_LOWER, m_, 1, CUDA_R_64F, a_.get(), m_, ipiv64_.get(),
                                 CUDA_R_64F, x_.get(), m_, solve_work_->get(), solve_device_bytes_,
                                 solve_host_work_.data(), solve_host_bytes_, info_.get()));
    JACOND_READ_INFO(info_, "cusolverDnXsytrs");
    JACOND_CUDA(cudaMemcpy(y, x_.get(), sizeof(double) * m_, cudaMemcpyDeviceToHost));
  }

 private:
  // cusolverDnDsytrf with the workspace it asks for; info > 0: D(info, info) is exactly zero, as
  // LAPACK's dsytrf says it (zero_pivot: the count is still the factors' inertia, no solves follow).
  void factor() {
    const int n = static_cast<int>(m_);
    int lwork = 0;
    JACOND_CUDA(cusolverDnDsytrf_bufferSize(h_.solver, n, a_.get(), n, &lwork));
    require_free_memory(sizeof(double) * static_cast<size_t>(lwork) + sizeof(int) * m_, "cusolverDnDsytrf's workspace");
    DeviceBuffer<double> work(static_cast<size_t>(std::max(lwork, 1)), "cusolverDnDsytrf's workspace");
    DeviceBuffer<int> ipiv32(m_, "cusolverDnDsytrf's pivots");
    JACOND_CUDA(cusolverDnDsytrf(h_.solver, CUBLAS_FILL_MODE_LOWER, n, a_.get(), n, ipiv32.get(), work.get(), lwork,
                                 info_.get()));
    zero_pivot = JACOND_READ_INFO(info_, "cusolverDnDsytrf") > 0;
    ipiv.resize(static_cast<size_t>(m_));
    JACOND_CUDA(cudaMemcpy(ipiv.data(), ipiv32.get(), sizeof(int) * m_, cudaMemcpyDeviceToHost));
  }

  // Destroyed last: puts back the thread's device that ~CudaLdltFactors replaced with ordinal_ so
  // that the handles and buffers below are destroyed on the GPU they were made on (cuBLAS asks a
  // handle's device not to change between create and destroy).
  struct RestoreDevice {
    int previous = -1;
    ~RestoreDevice() {
      if (previous >= 0) cudaSetDevice(previous);
    }
  } restore_;
  const int ordinal_;
  const int64_t m_;
  mutable Handles h_;
  DeviceBuffer<double> a_, x_;
  DeviceBuffer<int64_t> ipiv64_;
  DeviceInfo info_;
  size_t solve_device_bytes_ = 0, solve_host_bytes_ = 0;
  std::unique_ptr<DeviceBuffer<char>> solve_work_;
  mutable std::vector<char> solve_host_work_;
};

// Device bytes of an LDLᵀ of order M, for fits(): H, its pivots (32- and 64-bit), a vector and a
// workspace of 256·M doubles (LAPACK's sytrf asks for M·nb with a block size nb ≤ 256; the actual
// query runs in CudaLdltFactors::factor on the allocated H, which says so if memory is short).
size_t sytrf_device_bytes(int64_t M) {
  return sizeof(double) * (static_cast<size_t>(M) * M + 257 * static_cast<size_t>(M)) + (sizeof(int) + sizeof(int64_t)) * M;
}

// The workspace cusolverDnXgesvd (values only) asks for on a rows × cols matrix, rows ≥ cols:
// device bytes returned, host bytes in *host_bytes. `a` and `s` are the allocated matrix and
// values, or null where none is allocated yet (fits(): the query reads only the sizes).
size_t gesvd_work_bytes(Handles& h, int64_t rows, int64_t cols, const double* a, double* s, size_t* host_bytes) {
  size_t device_work = 0;
  JACOND_CUDA(cusolverDnXgesvd_bufferSize(h.solver, h.params, 'N', 'N', rows, cols, CUDA_R_64F, a, rows, CUDA_R_64F, s,
                                          CUDA_R_64F, nullptr, 1, CUDA_R_64F, nullptr, 1, CUDA_R_64F, &device_work,
                                          host_bytes));
  return device_work;
}

// Device bytes of cusolverDnXgesvd on a rows × cols matrix, for fits(): A, S and the workspace.
size_t gesvd_device_bytes(Handles& h, int64_t rows, int64_t cols) {
  size_t host_bytes = 0;
  return sizeof(double) * (static_cast<size_t>(rows) * cols + cols) + gesvd_work_bytes(h, rows, cols, nullptr, nullptr, &host_bytes);
}

// Device bytes of condition_fast on an n × n matrix: A, three vectors, the pivots and Xgetrf's
// workspace.
size_t getrf_device_bytes(Handles& h, int64_t n) {
  size_t device_work = 0, host_work = 0;
  JACOND_CUDA(cusolverDnXgetrf_bufferSize(h.solver, h.params, n, n, CUDA_R_64F, nullptr, n, CUDA_R_64F, &device_work,
                                          &host_work));
  return sizeof(double) * (static_cast<size_t>(n) * n + 3 * n) + sizeof(int64_t) * n + device_work;
}

size_t free_device_bytes() {
  size_t free_bytes = 0, total = 0;
  JACOND_CUDA(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

}  // namespace

LuSolves lu_solves_from_env() {
  const char* value = std::getenv("JACOND_CUDA_LU_SOLVES");
  if (!value || std::string(value).empty()) return LuSolves::kGetrs;
  for (LuSolves s : {LuSolves::kGetrs, LuSolves::kTrsv, LuSolves::kTrtri})
    if (std::string(value) == to_string(s)) return s;
  throw std::invalid_argument(std::string("JACOND_CUDA_LU_SOLVES must be getrs, trsv or trtri, got '") + value + "'");
}

const char* to_string(LuSolves solves) {
  switch (solves) {
    case LuSolves::kTrsv: return "trsv";
    case LuSolves::kTrtri: return "trtri";
    case LuSolves::kGetrs: break;
  }
  return "getrs";
}

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t s = cudaGetDeviceCount(&count);
  if (why) {
    *why = s != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(s)
           : count > 0      ? ""
                            : "no CUDA device";
  }
  return s == cudaSuccess && count > 0;
}

int current_device() {
  int ordinal = 0;
  JACOND_CUDA(cudaGetDevice(&ordinal));
  return ordinal;
}

std::string device_description(int ordinal) {
  OnDevice on(ordinal);
  cudaDeviceProp prop{};
  JACOND_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  size_t free_bytes = 0, total = 0;
  JACOND_CUDA(cudaMemGetInfo(&free_bytes, &total));
  std::ostringstream os;
  os << "cuda:" << ordinal << " " << prop.name << " (" << static_cast<double>(free_bytes) / 1e9 << " GB free of "
     << static_cast<double>(total) / 1e9 << ")";
  return os.str();
}

namespace {
// condition_fast's matrices that take the CPU route: not square (the block Jacobians are), or too
// small for Lanczos (the CPU route's own rule: its SVD). fits() applies the same rule.
bool fast_route_on_host(Index rows, Index cols) { return rows != cols || cols < kFastMinSize; }

// Whether `map` assembles into the current device's memory (detail::assembles_on: a map on another
// GPU is a CudaError); the device is asked only about a map that writes CUDA memory at all.
bool assembles_here(const TokenMap& map, const std::string& matrix) {
  const std::string where = map.assembles_into();
  return where.rfind("cuda", 0) == 0 && detail::assembles_on(where, current_device(), matrix);
}
}  // namespace

namespace {

Vec singular_values_on_device(const DeviceBuffer<double>& a, int64_t rows, int64_t cols);  // below

// The exact route's report from the device's extremes (lu_lanczos.h): its outcome and its check of
// σ_min's support, ‖A v_min‖ by `product_norm` (a route independent of the LU); where either fails,
// the full spectrum on the device by `svd` (at ViT scale the CPU's SVD would take hours).
template <typename ProductNorm, typename Svd>
ConditionReport extremes_report(const LuLanczosExtremes& e, PhaseSeconds phases, Index n, const std::string& matrix,
                                const ProductNorm& product_norm, const Svd& svd,
                                std::chrono::steady_clock::time_point t0) {
  const auto t_check = std::chrono::steady_clock::now();
  const bool ok = e.outcome == LuLanczosExtremes::Outcome::kOk;
  const std::string unsupported = ok ? unsupported_sigma_min(e, product_norm(e.v_min), noise_floor(n, n, e.sigma_max)) : "";
  phases.host_checks += seconds_since(t_check);
  if (!ok || !unsupported.empty()) {
    ConditionReport s = svd();
    s.note = !unsupported.empty() ? unsupported + " on the GPU; dense SVD (GPU) used"
             : e.outcome == LuLanczosExtremes::Outcome::kExactlySingular
                 ? "exactly singular pivot on the GPU; dense SVD (GPU) used"
                 : "lanczos did not converge on the GPU (or matrix numerically singular); dense SVD (GPU) used";
    s.seconds = seconds_since(t0);
    return s;
  }
  ConditionReport r;
  r.matrix = matrix;
  r.rows = r.cols = n;
  r.method = "dense-lu-lanczos-cuda";
  r.sigma_max = e.sigma_max;
  r.sigma_min = e.sigma_min;
  r.products = e.products;
  finish_extremes_report(r);
  r.note += std::string(r.note.empty() ? "" : "; ") + describe(phases);
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace

ConditionReport condition_fast(Mat A, const std::string& matrix) {
  const LuSolves solves = lu_solves_from_env();
  const auto t_scan = std::chrono::steady_clock::now();
  if (!A.allFinite()) throw std::invalid_argument("condition_fast (cuda): " + matrix + " contains NaN or inf");
  const double scan_seconds = seconds_since(t_scan);
  if (fast_route_on_host(A.rows(), A.cols())) {
    const std::string why = A.rows() != A.cols() ? "not square: CPU route" : "smaller than the Lanczos route's minimum: CPU route";
    ConditionReport r = jacond::condition_fast(std::move(A), matrix);
    r.note += std::string(r.note.empty() ? "" : "; ") + why;
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Index n = A.rows();
  require_free_memory(sizeof(double) * (static_cast<size_t>(n) * n + 2 * n) + sizeof(int64_t) * n, matrix + " on the GPU");
  LuLanczosExtremes e;
  PhaseSeconds phases;
  {
    CudaLuBackend backend(A, solves);
    e = lu_lanczos_extremes(backend);
    phases = backend.seconds();
  }
  phases.host_checks = scan_seconds;
  // The check's A v on the host (A is still there; a BLAS dgemv, ≈ 1 s at ViT-S).
  return extremes_report(
      e, phases, n, matrix, [&](const Vec& v) { return (A * v).norm(); },
      [&] { return CudaDenseDevice(current_device()).condition_svd(std::move(A), matrix); }, t0);
}

std::optional<ConditionReport> condition_fast_assembled(const TokenMap& map, const std::string& matrix,
                                                        const std::function<void()>& checkpoint) {
  const LuSolves solves = lu_solves_from_env();
  const Index n = map.n() * map.d_out();
  if (!assembles_here(map, matrix) || map.d_in() != map.d_out() || fast_route_on_host(n, n)) return std::nullopt;
  // The whole LU, else the Schur route in the fewest pieces, else a host copy's LU, else a refusal
  // naming the sizes: choose_device_lu (schur_lu.h), tested on the CPU; `extra` is what Xgetrf holds
  // beyond the matrix (getrf_device_bytes' vectors, pivots and workspace). Two pieces hold ViT-B's
  // K_sa on an H200, three on an H100.
  DeviceLuChoice choice;
  double free_bytes = 0;
  {
    Handles h;
    free_bytes = static_cast<double>(free_device_bytes());
    const auto extra = [&](Index m) {
      return static_cast<double>(getrf_device_bytes(h, m) - sizeof(double) * static_cast<size_t>(m) * m);
    };
    choice = choose_device_lu(n, free_bytes, map.assembly_bytes(), extra);
  }
  switch (choice.route) {
    case DeviceLuChoice::Route::kWhole: break;
    case DeviceLuChoice::Route::kSchur: return cuda::condition_schur(map, choice.plan, matrix, checkpoint);
    case DeviceLuChoice::Route::kHostCopy: return std::nullopt;  // the caller assembles on the host (block_report.cpp)
    case DeviceLuChoice::Route::kNone:
      throw CudaError(device_lu_refusal(matrix, n, choice, free_bytes, device_description(current_device())));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto assembled = [&](double* seconds) {
    require_free_memory(sizeof(double) * static_cast<size_t>(n) * n, matrix + " on the GPU");
    DeviceBuffer<double> a(static_cast<size_t>(n) * n, matrix + " assembled on the GPU");
    const auto t = std::chrono::steady_clock::now();
    bool made = false;
    try {
      made = map.assemble(a.get());
    } catch (const std::invalid_argument& e) {  // a NaN or inf entry, named as condition_fast names it
      throw std::invalid_argument("condition_fast (cuda): " + matrix + ": " + e.what());
    }
    if (seconds) *seconds = seconds_since(t);
    return made ? std::optional<DeviceBuffer<double>>(std::move(a)) : std::nullopt;
  };
  LuLanczosExtremes e;
  PhaseSeconds phases;
  {
    double assembly_seconds = 0;
    std::optional<DeviceBuffer<double>> a = assembled(&assembly_seconds);
    if (!a) return std::nullopt;
    CudaLuBackend backend(std::move(*a), n, assembly_seconds, solves);
    e = lu_lanczos_extremes(backend);
    phases = backend.seconds();
  }
  // The check's A v by the map's own fp64 product on the device (the LU overwrote the matrix).
  const auto product_norm = [&](const Vec& v) { return apply_vector(map, v).norm(); };
  const auto svd = [&] {  // the matrix again (the LU overwrote it), then its spectrum, all on the device
    const auto t = std::chrono::steady_clock::now();
    std::optional<DeviceBuffer<double>> a = assembled(nullptr);
    if (!a) throw std::runtime_error("condition_fast_assembled: " + matrix + " could not be assembled again for the SVD");
    ConditionReport r = report_from_singular_values(matrix, n, n, singular_values_on_device(*a, n, n),
                                                   CudaDenseDevice(current_device()).svd_method());
    r.seconds = seconds_since(t);
    return r;
  };
  ConditionReport r = extremes_report(e, phases, n, matrix, product_norm, svd, t0);
  r.note = "assembled on the GPU from the operator's products" + (r.note.empty() ? "" : "; " + r.note);
  return r;
}

std::optional<ConditionReport> condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                               const std::function<void()>& checkpoint) {
  if (!assembles_here(map, matrix)) return std::nullopt;
  CudaSchurStore store;
  try {
    ConditionReport r = condition_schur_with(store, map, plan, matrix, "dense-schur-lu-lanczos-cuda", checkpoint);
    r.note = "assembled on the GPU from the operator's products; " + r.note;
    return r;
  } catch (const std::invalid_argument& e) {  // a NaN or inf entry, named as condition_fast names it
    throw std::invalid_argument("condition_schur (cuda): " + matrix + ": " + e.what());
  }
}

ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) {
  check_mixed_input(A32, A, matrix);
  const Index n = A32.rows();
  require_free_memory(sizeof(float) * (static_cast<size_t>(n) * n + n) + sizeof(int64_t) * n, matrix + " in fp32 on the GPU");
  CudaLu32 lu(A32);
  A32.resize(0, 0);  // the host copy is no longer needed (4n² bytes: 92 GB at ViT-B)
  ConditionReport r = condition_mixed_with(lu, A, matrix, "dense-lu32-refined-lanczos-cuda");
  r.note += std::string(r.note.empty() ? "" : "; ") + describe_mixed(lu.seconds());
  return r;
}

namespace {

// Every singular value, descending, of the rows × cols (rows ≥ cols, column-major) device matrix
// `a`, which cusolverDnXgesvd overwrites.
Vec singular_values_on_device(const DeviceBuffer<double>& a, int64_t rows, int64_t cols) {
  Vec s(cols);
  Handles h;
  const std::string what = "cusolverDnXgesvd on a " + std::to_string(rows) + "x" + std::to_string(cols) + " matrix";
  DeviceBuffer<double> sv(cols, "cusolverDnXgesvd's singular values");
  size_t host_bytes = 0;
  const size_t work_bytes = gesvd_work_bytes(h, rows, cols, a.get(), sv.get(), &host_bytes);
  require_free_memory(work_bytes, what + "'s workspace");
  DeviceBuffer<char> work(work_bytes, what + "'s workspace");
  DeviceInfo info;
  std::vector<char> host_work(host_bytes);
  JACOND_CUDA(cusolverDnXgesvd(h.solver, h.params, 'N', 'N', rows, cols, CUDA_R_64F, a.get(), rows, CUDA_R_64F, sv.get(),
                               CUDA_R_64F, nullptr, 1, CUDA_R_64F, nullptr, 1, CUDA_R_64F, work.get(), work_bytes,
                               host_work.data(), host_bytes, info.get()));
  int devinfo = 0;
  JACOND_CUDA(cudaMemcpy(&devinfo, info.get(), sizeof(int), cudaMemcpyDeviceToHost));
  if (devinfo < 0) fail("cusolverDnXgesvd", __FILE__, __LINE__, "argument " + std::to_string(-devinfo) + " is invalid");
  if (devinfo > 0)
    fail("cusolverDnXgesvd", __FILE__, __LINE__, std::to_string(devinfo) + " superdiagonals did not converge to zero");
  JACOND_CUDA(cudaMemcpy(s.data(), sv.get(), sizeof(double) * cols, cudaMemcpyDeviceToHost));
  return s;  // gesvd returns them descending
}

}  // namespace

Vec singular_values(Mat A) {
  if (!A.allFinite()) throw std::invalid_argument("singular_values (cuda): matrix contains NaN or inf");
  if (A.rows() < A.cols()) A.transposeInPlace();  // σ(A) = σ(Aᵀ); gesvd wants rows ≥ cols
  const int64_t rows = A.rows(), cols = A.cols();
  if (cols == 0) return Vec(0);
  require_free_memory(sizeof(double) * (static_cast<size_t>(rows) * cols + cols),
                      "cusolverDnXgesvd on a " + std::to_string(rows) + "x" + std::to_string(cols) + " matrix");
  DeviceBuffer<double> a(static_cast<size_t>(rows) * cols, "the SVD route's matrix");
  JACOND_CUDA(cudaMemcpy(a.get(), A.data(), sizeof(double) * a.count(), cudaMemcpyHostToDevice));
  return singular_values_on_device(a, rows, cols);
}

namespace {
bool ldlt_fits_device(int64_t M) { return M <= kMaxSytrfOrder && sytrf_device_bytes(M) <= free_device_bytes(); }
}  // namespace

namespace {
// `ordinal` once require_device accepts it; −1: the current device.
int usable_ordinal(int ordinal) {
  require_device(ordinal);
  return ordinal < 0 ? current_device() : ordinal;
}
}  // namespace

CudaDenseDevice::CudaDenseDevice(int ordinal) : ordinal_(usable_ordinal(ordinal)) {}

ConditionReport CudaDenseDevice::condition_fast(Mat A, const std::string& matrix) const {
  OnDevice on(ordinal_);
  return cuda::condition_fast(std::move(A), matrix);
}

std::optional<ConditionReport> CudaDenseDevice::condition_fast_assembled(const TokenMap& map, const std::string& matrix,
                                                                         const std::function<void()>& checkpoint) const {
  OnDevice on(ordinal_);
  return cuda::condition_fast_assembled(map, matrix, checkpoint);
}

std::optional<ConditionReport> CudaDenseDevice::condition_schur(const TokenMap& map, const SchurPlan& plan,
                                                                const std::string& matrix,
                                                                const std::function<void()>& checkpoint) const {
  OnDevice on(ordinal_);
  return cuda::condition_schur(map, plan, matrix, checkpoint);
}

Vec CudaDenseDevice::singular_values(Mat A) const {
  OnDevice on(ordinal_);
  return cuda::singular_values(std::move(A));
}

ConditionReport CudaDenseDevice::condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const {
  OnDevice on(ordinal_);
  return cuda::condition_mixed(std::move(A32), A, matrix);
}

std::unique_ptr<LdltFactors> CudaDenseDevice::ldlt(Mat lower) const {
  if (lower.rows() != lower.cols()) throw std::invalid_argument("ldlt (cuda): H must be square");
  OnDevice on(ordinal_);
  if (!ldlt_fits_device(lower.rows())) return ldlt_rook(std::move(lower));  // the host's (where = "cpu")
  return std::make_unique<CudaLdltFactors>(std::move(lower));
}

bool CudaDenseDevice::fits(DenseRoute route, Index rows, Index cols, const DenseBudget& budget) const {
  OnDevice on(ordinal_);
  // The host assembles A: its 8·rows·cols bytes within the budget's memory (no time on the GPU).
  // A non-square A takes the CPU route (condition_fast above): the CPU's rule.
  if (!jacond::fits(DenseCost{8.0 * static_cast<double>(rows) * static_cast<double>(cols), 0}, budget)) return false;
  if (route == DenseRoute::kInertia) {
    // The host holds K and H_μ (then H_μ's converted factors): inertia_count_cost's bytes. On the
    // device: ldlt above, by memory alone; a count the device cannot hold runs on the host, by its rule.
    if (!ldlt_fits_device(rows + cols)) return CpuDenseDevice().fits(route, rows, cols, budget);
    return jacond::fits(DenseCost{inertia_count_cost(rows, cols, 1).bytes, 0}, budget);
  }
  if (route == DenseRoute::kFast && fast_route_on_host(rows, cols))
    return CpuDenseDevice().fits(route, rows, cols, budget);  // the CPU route (condition_fast above)
  Handles h;
  size_t need = 0;
  try {  // cuSOLVER refuses sizes past its own limits in the query: then it does not fit
    need = route == DenseRoute::kSvd ? gesvd_device_bytes(h, std::max(rows, cols), std::min(rows, cols))
                                     : getrf_device_bytes(h, rows);
  } catch (const CudaError&) {
    return false;
  }
  return need <= free_device_bytes();
}

void require_device(int ordinal) {
  int count = 0;
  const cudaError_t s = cudaGetDeviceCount(&count);
  if (s != cudaSuccess) fail("cudaGetDeviceCount", __FILE__, __LINE__, cudaGetErrorString(s));
  if (count == 0) fail("cudaGetDeviceCount", __FILE__, __LINE__, "no CUDA device");
  if (ordinal < -1 || ordinal >= count)
    fail("require_device", __FILE__, __LINE__,
         "cuda:" + std::to_string(ordinal) + " asked for, " + std::to_string(count) + " present");
}

std::shared_ptr<const DenseDevice> cuda_dense_device(int ordinal) {
  return std::make_shared<CudaDenseDevice>(ordinal);
}

namespace detail {

size_t device_buffer_bytes(size_t count, size_t element_bytes, const std::string& what, const char* file, int line) {
  if (element_bytes != 0 && count > std::numeric_limits<size_t>::max() / element_bytes)
    fail(("cudaMalloc of " + what).c_str(), file, line,
         std::to_string(count) + " elements of " + std::to_string(element_bytes) + " bytes overflow size_t");
  return count * element_bytes;
}

void allocate_device_buffer(size_t bytes, const std::string& what, const char* file, int line) {
  const DeviceBuffer<char> buffer(bytes, what, file, line);
}

bool assembles_on(const std::string& where, int ordinal, const std::string& matrix) {
  const std::string cuda = "cuda";
  if (where == cuda) return true;  // LibTorch's current device: the dense device's calls make it theirs
  if (where.rfind(cuda + ":", 0) != 0) return false;  // host memory, or a map that cannot assemble
  const std::string digits = where.substr(cuda.size() + 1);
  const bool number = !digits.empty() && digits.size() < 10 && std::all_of(digits.begin(), digits.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  if (number && std::stoi(digits) == ordinal) return true;
  throw CudaError(matrix + ": its map assembles into " + where + ", this dense device is cuda:" + std::to_string(ordinal) +
                  " (the map's products would write another GPU's buffer; make both on one GPU)");
}

}  // namespace detail

}  // namespace jacond::cuda
