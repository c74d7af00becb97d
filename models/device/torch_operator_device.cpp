// The block's operators on a LibTorch device; the math is in models/device/torch_operator_device.h.
#include "models/device/torch_operator_device.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include <torch/cuda.h>

#include "analysis/operators/block_kernels.h"
#include "analysis/spectral/lu_lanczos.h"
#include "models/track/bridge.h"

namespace jacond::models {

namespace {

// Host <-> device: models/track/bridge.h's conversions (entry (i, j) = t[i][j]), then a copy.
at::Tensor to_device(const Mat& M, const torch::Device& device) { return to_torch(M).to(device); }
at::Tensor to_device(const Vec& v, const torch::Device& device) { return to_torch_vec(v).to(device); }

// Runs f, turning a LibTorch error (a CUDA failure, out of device memory) into one line naming the
// operation and the device: c10::Error's own text carries a backtrace over many lines. The line is
// a DeviceError (analysis/spectral/lu_lanczos.h), never a plain std::runtime_error: the dense
// routes run these products inside Lanczos (the Schur route's gram and solves, schur_lu.h), whose
// `finished` reads a std::runtime_error as a numerical outcome ("did not converge") and lets a
// DeviceError through. Guarded by SchurRoute.ADeviceErrorInItsProductsIsThrownNotReportedAs…
// (tests/models/test_operator_device.cpp).
template <typename F>
auto on_device(const std::string& what, const torch::Device& device, const F& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    msg = msg.substr(0, msg.find('\n'));
    throw DeviceError(what + " on " + device.str() + ": " + msg);
  }
}

// S_A(M): the softmax row Jacobian diag(a_i) − a_i a_iᵀ applied to every row (symmetric), batched.
at::Tensor softmax_rows_product(const at::Tensor& A, const at::Tensor& M) {
  return A * (M - (A * M).sum(-1, /*keepdim=*/true));
}

struct LayerNormOnDevice {
  at::Tensor gamma, x_hat, inv_sigma;  // [d], [n, d], [n, 1]
  LayerNormOnDevice(const Vec& g, const LayerNormCache& c, const torch::Device& dev)
      : gamma(to_device(g, dev)), x_hat(to_device(c.x_hat, dev)), inv_sigma(to_device(c.inv_sigma, dev).unsqueeze(1)) {}
  at::Tensor project(const at::Tensor& in) const {
    const at::Tensor mean_in = in.mean(-1, true), mean_xin = (x_hat * in).mean(-1, true);
    return (in - mean_in - x_hat * mean_xin) * inv_sigma;
  }
  at::Tensor jvp(const at::Tensor& dX) const { return project(dX) * gamma; }
  at::Tensor vjp(const at::Tensor& G) const { return project(G * gamma); }
};

struct AttentionOnDevice {
  int64_t n, d, heads, dh;
  double s;
  bool via_v, via_a;
  at::Tensor Wq, Wk, Wv, Wo;  // [d, d], y = x W
  at::Tensor Qh, Kh, Vh, A;   // [h, n, d_h] and [h, n, n]
  AttentionOnDevice(const BlockWeights& w, const AttentionCache& c, AttentionPart part, const torch::Device& dev)
      : n(c.Y.rows()), d(w.d), heads(w.heads), dh(w.head_dim()), s(w.effective_logit_scale()),
        via_v(part != AttentionPart::kE), via_a(part != AttentionPart::kB),
        Wq(to_device(w.Wq, dev)), Wk(to_device(w.Wk, dev)), Wv(to_device(w.Wv, dev)), Wo(to_device(w.Wo, dev)),
        Qh(split(to_device(c.Q, dev)).contiguous()), Kh(split(to_device(c.K, dev)).contiguous()),
        Vh(split(to_device(c.V, dev)).contiguous()) {
    std::vector<at::Tensor> maps;
    for (const Mat& Ah : c.A) maps.push_back(to_device(Ah, dev));
    A = torch::stack(maps);
  }
  // [..., n, d] <-> [..., h, n, d_h] (a leading batch of inputs, or none).
  at::Tensor split(const at::Tensor& X) const {
    std::vector<int64_t> shape(X.sizes().begin(), X.sizes().end() - 1);
    shape.insert(shape.end(), {heads, dh});
    return X.view(shape).transpose(-3, -2);
  }
  at::Tensor merge(const at::Tensor& Xh) const {
    std::vector<int64_t> shape(Xh.sizes().begin(), Xh.sizes().end() - 3);
    shape.insert(shape.end(), {n, d});
    return Xh.transpose(-3, -2).reshape(shape);
  }

  at::Tensor jvp(const at::Tensor& dY) const {
    at::Tensor dH;
    if (via_v) dH = A.matmul(split(dY.matmul(Wv)));
    if (via_a) {
      const at::Tensor dM =
          s * (split(dY.matmul(Wq)).matmul(Kh.transpose(-2, -1)) + Qh.matmul(split(dY.matmul(Wk)).transpose(-2, -1)));
      const at::Tensor dA = softmax_rows_product(A, dM).matmul(Vh);
      dH = dH.defined() ? dH + dA : dA;
    }
    return merge(dH).matmul(Wo);
  }
  at::Tensor vjp(const at::Tensor& G) const {
    const at::Tensor gH = split(G.matmul(Wo.t()));
    at::Tensor gY;
    if (via_v) gY = merge(A.transpose(-2, -1).matmul(gH)).matmul(Wv.t());
    if (via_a) {
      const at::Tensor gM = s * softmax_rows_product(A, gH.matmul(Vh.transpose(-2, -1)));
      const at::Tensor gA = merge(gM.matmul(Kh)).matmul(Wq.t()) + merge(gM.transpose(-2, -1).matmul(Qh)).matmul(Wk.t());
      gY = gY.defined() ? gY + gA : gA;
    }
    return gY;
  }
};

struct MlpOnDevice {
  at::Tensor W1, W2, gelu_prime;  // [d, hidden], [hidden, d], [n, hidden]
  MlpOnDevice(const BlockWeights& w, const MlpCache& c, const torch::Device& dev)
      : W1(to_device(w.W1, dev)), W2(to_device(w.W2, dev)), gelu_prime(to_device(mlp_gelu_prime(c), dev)) {}
  at::Tensor jvp(const at::Tensor& dY) const { return (dY.matmul(W1) * gelu_prime).matmul(W2); }
  at::Tensor vjp(const at::Tensor& G) const { return (G.matmul(W2.t()) * gelu_prime).matmul(W1.t()); }
};

// A TokenMap whose products run on device tensors: [n, d_in] -> [n, d_out] (jvp) and back (vjp).
// The host-vector products of TokenMap copy in, apply, copy out; GKL's basis (TorchKrylovBasis)
// calls jvp/vjp on its own device tensors.
class TorchMap : public TokenMap {
 public:
  TorchMap(torch::Device device, double batch_bytes) : device_(device), batch_bytes_(batch_bytes) {}
  const torch::Device& device() const { return device_; }
  double batch_bytes() const { return batch_bytes_; }
  // The products on device tensors [..., n, d_in] -> [..., n, d_out], a leading batch of inputs or
  // none (no grad; the caller names errors).
  virtual at::Tensor jvp(const at::Tensor& x) const = 0;
  virtual at::Tensor vjp(const at::Tensor& g) const = 0;
  // Device bytes one input of a batched jvp holds at its peak (its intermediates), for assemble's
  // batch size.
  virtual double bytes_per_product() const = 0;

  // K column by column from unit inputs, `columns_per_batch()` at a time: column j = K e_j, with
  // e_j = vec(E), E(i, c) = 1 at j = i + n·c (column-major vec, analysis/core/types.h). A batch's
  // outputs [m, n, d_out], read as vec's of their columns, are m consecutive columns of the
  // column-major K, so they are copied straight into `out`.
  bool assemble(double* out) const final { return assemble_columns(0, n() * d_in(), out); }
  bool assemble_columns(Index first, Index count, double* out) const final {
    if (first < 0 || count < 0 || first + count > n() * d_in())
      throw std::invalid_argument("assemble_columns: columns " + std::to_string(first) + "+" + std::to_string(count) +
                                  " outside 0..." + std::to_string(n() * d_in()));
    return on_device("assembling the matrix from its products", device_, [&] {
      torch::NoGradGuard no_grad;
      const int64_t n_in = n() * d_in(), step = columns_per_batch();
      const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
      const at::Tensor K = torch::from_blob(out, {count, n() * d_out()}, opts);  // row k: column first + k of K
      for (int64_t k0 = 0; k0 < count; k0 += step) {
        const int64_t m = std::min(step, count - k0), j0 = first + k0;
        const at::Tensor units = torch::zeros({m, n_in}, opts);
        units.narrow(1, j0, m).copy_(torch::eye(m, opts));
        const at::Tensor columns = products_of_columns(units);
        if (!torch::isfinite(columns).all().item<bool>())
          throw std::invalid_argument("the assembled matrix contains NaN or inf (columns " + std::to_string(j0) + "..." +
                                      std::to_string(j0 + m - 1) + ")");
        K.narrow(0, k0, m).copy_(columns);
      }
      if (device_.is_cuda()) synchronize_device();  // the caller's cuSOLVER reads `out` next
      return true;
    });
  }
  // The same products on `count` inputs the caller holds (its column-major n·d_in × count array is
  // the row-major [count, n·d_in] tensor of vec'd inputs).
  bool apply_columns(const double* in, Index count, double* out) const final {
    return on_device("matrix-free products of a panel", device_, [&] {
      torch::NoGradGuard no_grad;
      const int64_t step = columns_per_batch();
      const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
      const at::Tensor X = torch::from_blob(const_cast<double*>(in), {count, n() * d_in()}, opts);
      const at::Tensor Y = torch::from_blob(out, {count, n() * d_out()}, opts);
      for (int64_t k0 = 0; k0 < count; k0 += step) {
        const int64_t m = std::min(step, count - k0);
        Y.narrow(0, k0, m).copy_(products_of_columns(X.narrow(0, k0, m)));
      }
      if (device_.is_cuda()) synchronize_device();
      return true;
    });
  }
  // "cuda:K" (this map's GPU; "cuda" for a device without an index: LibTorch's current one) or
  // "cpu": a dense device refuses to hand its buffer to a map on another GPU (dense_cuda.h,
  // detail::assembles_on).
  std::string assembles_into() const final { return device_.is_cuda() ? device_.str() : "cpu"; }
  double assembly_bytes() const final { return static_cast<double>(columns_per_batch()) * column_bytes(); }
  // Waits for this map's GPU, device_, whatever device is current: synchronize() without an index
  // waits for the current one, which on a rank whose thread did not make its GPU current is
  // another. (LibTorch 1.13 and 2.x both take the index; −1, a device without one, is the current.)
  void synchronize_device() const { torch::cuda::synchronize(device_.index()); }
  // Columns per batch: the batch budget over one column's bytes (at least one, at most all).
  int64_t columns_per_batch() const {
    const int64_t columns = std::max<int64_t>(1, n() * d_in());
    return static_cast<int64_t>(std::clamp(std::floor(batch_bytes_ / column_bytes()), 1.0, static_cast<double>(columns)));
  }
  // One product's intermediates, its unit input and its output column.
  double column_bytes() const { return bytes_per_product() + 8.0 * static_cast<double>(n() * (d_in() + d_out())); }
  // K x for the rows of `vecs` ([m, n·d_in], each a vec'd n × d_in input): [m, n·d_out].
  at::Tensor products_of_columns(const at::Tensor& vecs) const {
    const int64_t m = vecs.size(0);
    const at::Tensor X = vecs.view({m, d_in(), n()}).transpose(1, 2).contiguous();  // [m, n, d_in]
    return jvp(X).transpose(1, 2).reshape({m, n() * d_out()});
  }
  Mat apply(const Mat& dX) const final {
    return on_device("matrix-free product (JVP)", device_, [&] {
      torch::NoGradGuard no_grad;
      return to_eigen(jvp(to_device(dX, device_)));
    });
  }
  Mat apply_transpose(const Mat& G) const final {
    return on_device("matrix-free product (VJP)", device_, [&] {
      torch::NoGradGuard no_grad;
      return to_eigen(vjp(to_device(G, device_)));
    });
  }

 private:
  torch::Device device_;
  double batch_bytes_;
};

// One of the six operators: an optional LayerNorm, then attention or the MLP, then the optional
// residual (K_sa/B_sa/E_sa and K_mlp have neither).
class TorchBlockMap final : public TorchMap {
 public:
  TorchBlockMap(torch::Device device, double batch_bytes, Index n, Index d) : TorchMap(device, batch_bytes), n_(n), d_(d) {}
  std::optional<LayerNormOnDevice> ln;
  std::optional<AttentionOnDevice> attention;
  std::optional<MlpOnDevice> mlp;
  bool residual = false;

  Index n() const override { return n_; }
  Index d_in() const override { return d_; }
  Index d_out() const override { return d_; }
  at::Tensor jvp(const at::Tensor& x) const override {
    const at::Tensor y = ln ? ln->jvp(x) : x;
    at::Tensor out = attention ? attention->jvp(y) : mlp->jvp(y);
    if (residual) out += x;
    return out;
  }
  at::Tensor vjp(const at::Tensor& g) const override {
    at::Tensor out = attention ? attention->vjp(g) : mlp->vjp(g);
    if (ln) out = ln->vjp(out);
    if (residual) out += g;
    return out;
  }
  // Attention: up to six [h, n, n] tensors alive at once (the two halves of dM, their sum, A ∘ dM,
  // its row sums' broadcast, S_A(dM)) and a few [n, d] ones; the MLP: [n, hidden] ones.
  double bytes_per_product() const override {
    const double nd = static_cast<double>(n_ * d_);
    double bytes = 8.0 * 6 * nd;
    if (attention) bytes += 8.0 * (6.0 * attention->heads * n_ * n_ + 8 * nd);
    if (mlp) bytes += 8.0 * 3 * n_ * mlp->W1.size(1);
    return bytes;
  }

 private:
  Index n_, d_;
};

// K · blockdiag_i(C_i) on the device (LnComplementOp's map, analysis/operators/operators.h): the
// input c_i ∈ R^{d−2} of token i is expanded to C_i c_i = Q_i [0; 0; c_i] and the output reduced by
// C_iᵀ y = (Q_iᵀ y)[2:], with Q_i = H_i0 H_i1, H_ik = I − τ_ik v_ik v_ikᵀ (LayerNormComplement's
// reflectors): two rank-one updates per token, batched over tokens, O(nd) per product.
class TorchLnComplementMap final : public TorchMap {
 public:
  TorchLnComplementMap(const TorchMap& inner, const LayerNormComplement& basis)
      : TorchMap(inner.device(), inner.batch_bytes()), inner_(inner),
        v0_(to_device(basis.reflectors(0), inner.device())), v1_(to_device(basis.reflectors(1), inner.device())),
        tau_(to_device(basis.taus(), inner.device())) {}
  Index n() const override { return inner_.n(); }
  Index d_in() const override { return inner_.d_in() - 2; }
  Index d_out() const override { return inner_.d_out(); }
  at::Tensor jvp(const at::Tensor& c) const override {
    std::vector<int64_t> two(c.sizes().begin(), c.sizes().end());
    two.back() = 2;
    const at::Tensor z = torch::cat({torch::zeros(two, c.options()), c}, -1);
    return inner_.jvp(reflect(reflect(z, v1_, 1), v0_, 0));  // H_0 (H_1 [0; 0; c])
  }
  at::Tensor vjp(const at::Tensor& g) const override {
    const at::Tensor y = reflect(reflect(inner_.vjp(g), v0_, 0), v1_, 1);  // H_1 (H_0 y)
    return y.narrow(-1, 2, d_in()).contiguous();
  }
  double bytes_per_product() const override { return inner_.bytes_per_product() + 8.0 * 4 * n() * inner_.d_in(); }

 private:
  // Row i of z ↦ (I − τ_ik v_ik v_ikᵀ) z_i.
  at::Tensor reflect(const at::Tensor& z, const at::Tensor& v, int64_t k) const {
    return z - tau_.narrow(1, k, 1) * v * (v * z).sum(-1, /*keepdim=*/true);
  }
  const TorchMap& inner_;
  at::Tensor v0_, v1_, tau_;  // [n, d], [n, d], [n, 2]
};

// GKL's long vectors on the map's device (analysis/operators/krylov_basis.h): P [k+1, n·d_in] and
// Q [k, n·d_out], one basis vector per row, each the row-major flattening of an n × d token matrix
// (the device's natural layout). The host's vectors are column-major vec(X): they are converted
// only where vectors cross (set_column, set_work, combination, apply), so the host sees j
// coefficients and a norm per step, and the Ritz vectors at the end.
class TorchKrylovBasis final : public KrylovBasis {
 public:
  TorchKrylovBasis(const TorchMap& map, Index k)
      : map_(map), dev_(map.device()), n_(map.n()), d_in_(map.d_in()), d_out_(map.d_out()) {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(dev_);
    on_device("allocating the GKL basis", dev_, [&] {
      P_ = torch::zeros({k + 1, n_ * d_in_}, opts);
      Q_ = torch::zeros({k, n_ * d_out_}, opts);
      work_P_ = torch::zeros({n_ * d_in_}, opts);
      work_Q_ = torch::zeros({n_ * d_out_}, opts);
    });
  }

  bool product(KrylovSide from, Index j) override {
    return on_device(from == KrylovSide::kRight ? "GKL product (JVP)" : "GKL product (VJP)", dev_, [&] {
      torch::NoGradGuard no_grad;
      at::Tensor& out = from == KrylovSide::kRight ? work_Q_ : work_P_;
      const at::Tensor in = basis(from)[j].view({n_, width(from)});
      out = (from == KrylovSide::kRight ? map_.jvp(in) : map_.vjp(in)).reshape({-1}).contiguous();
      return torch::isfinite(out).all().item<bool>();
    });
  }
  // CGS2: h = V_j w, w ← w − V_jᵀ h, twice (V_j: the first j rows).
  Vec orthogonalise(KrylovSide side, Index j) override {
    if (j == 0) return Vec::Zero(0);
    return on_device("GKL Gram-Schmidt", dev_, [&] {
      torch::NoGradGuard no_grad;
      const at::Tensor V = basis(side).narrow(0, 0, j);
      at::Tensor& w = work(side);
      at::Tensor c = torch::zeros({j}, w.options());
      for (int pass = 0; pass < 2; ++pass) {
        const at::Tensor h = torch::mv(V, w);
        w.sub_(torch::mv(V.t(), h));
        c += h;
      }
      return to_eigen_vec(c);
    });
  }
  // ‖w‖ at any scale: ATen's norm sums squares, which underflow for entries below ~1e-154 (a false
  // breakdown, α = 0) and overflow above ~1e154 (inf). A result inside [1e-140, 1e140] is exact to
  // rounding (its largest entry's square is then a normal number, N ≤ 1e8, and entries whose squares
  // underflow are below it by 1e-10 or more, under 1e-20 of the sum); outside it, s‖w/s‖ with
  // s = max|w_i|, as Eigen's stableNorm does on the host. One extra reduction only out there.
  double work_norm(KrylovSide side) const override {
    return on_device("GKL norm", dev_, [&] {
      const at::Tensor& w = work(side);
      const double plain = w.norm().item<double>();
      if (plain > 1e-140 && plain < 1e140) return plain;
      const double scale = w.abs().max().item<double>();
      if (scale == 0 || !std::isfinite(scale)) return scale;  // 0, or inf / NaN for GKL to refuse
      return scale * (w / scale).norm().item<double>();
    });
  }
  void store(KrylovSide side, Index j, double alpha) override {
    on_device("GKL store", dev_, [&] { basis(side)[j].copy_(work(side) / alpha); });
  }
  void set_column(KrylovSide side, Index j, const Vec& x) override {
    on_device("GKL set", dev_, [&] { basis(side)[j].copy_(from_host(side, x)); });
  }
  void set_work(KrylovSide side, const Vec& x) override {
    on_device("GKL set", dev_, [&] { work(side) = from_host(side, x); });
  }
  Vec combination(KrylovSide side, Index kk, const Vec& c) const override {
    return on_device("GKL Ritz vector", dev_, [&] {
      return to_host(side, torch::mv(basis(side).narrow(0, 0, kk).t(), to_device(c, dev_)));
    });
  }
  void restart(Index kk, const Mat& V_sel, const Mat& U_sel) override {
    on_device("GKL restart", dev_, [&] {
      const int64_t l = V_sel.cols();
      const at::Tensor P_new = torch::mm(to_device(V_sel, dev_).t(), P_.narrow(0, 0, kk));
      const at::Tensor Q_new = torch::mm(to_device(U_sel, dev_).t(), Q_.narrow(0, 0, kk));
      const at::Tensor p_next = P_[kk].clone();
      P_.narrow(0, 0, l).copy_(P_new);
      P_[l].copy_(p_next);
      Q_.narrow(0, 0, l).copy_(Q_new);
    });
  }
  Vec apply(bool transpose, const Vec& x) const override {
    const Mat X = Eigen::Map<const Mat>(x.data(), n_, transpose ? d_out_ : d_in_);
    const Mat Y = transpose ? map_.apply_transpose(X) : map_.apply(X);
    return Eigen::Map<const Vec>(Y.data(), Y.size());
  }

 private:
  at::Tensor& basis(KrylovSide side) { return side == KrylovSide::kRight ? P_ : Q_; }
  const at::Tensor& basis(KrylovSide side) const { return side == KrylovSide::kRight ? P_ : Q_; }
  at::Tensor& work(KrylovSide side) { return side == KrylovSide::kRight ? work_P_ : work_Q_; }
  const at::Tensor& work(KrylovSide side) const { return side == KrylovSide::kRight ? work_P_ : work_Q_; }
  // Token width of a side's vectors: the input space (P, right) or the output space (Q, left).
  int64_t width(KrylovSide side) const { return side == KrylovSide::kRight ? d_in_ : d_out_; }
  // Column-major vec(X) of an n × width host matrix <-> the row-major flattening on the device.
  at::Tensor from_host(KrylovSide side, const Vec& x) const {
    return to_device(Mat(Eigen::Map<const Mat>(x.data(), n_, width(side))), dev_).reshape({-1});
  }
  Vec to_host(KrylovSide side, const at::Tensor& t) const {
    const Mat X = to_eigen(t.view({n_, width(side)}));
    return Eigen::Map<const Vec>(X.data(), X.size());
  }

  const TorchMap& map_;
  const torch::Device dev_;
  const int64_t n_, d_in_, d_out_;
  at::Tensor P_, Q_, work_P_, work_Q_;
};

// `map` as one of `device`'s maps, or std::invalid_argument naming `what`.
// `what` is a C string, not a std::string: a temporary argument would make GCC 14 warn that the
// returned reference may dangle (-Wdangling-reference), though it refers to `map`.
const TorchMap& own_map(const TokenMap& map, const torch::Device& device, const char* what) {
  const auto* torch_map = dynamic_cast<const TorchMap*>(&map);
  if (!torch_map || torch_map->device() != device)
    throw std::invalid_argument(std::string("TorchOperatorDevice::") + what + ": the map was not made by this device (" +
                                device.str() + ")");
  return *torch_map;
}

}  // namespace

TorchOperatorDevice::TorchOperatorDevice(torch::Device device, double assembly_batch_bytes)
    : device_(device), assembly_batch_bytes_(assembly_batch_bytes) {
  if (device_.is_cuda() && !torch::cuda::is_available())
    throw std::runtime_error("TorchOperatorDevice: this LibTorch sees no CUDA device");
}

std::string TorchOperatorDevice::name() const { return device_.is_cuda() ? "cuda" : "torch-cpu"; }

std::string TorchOperatorDevice::description() const {
  return "matrix-free products in LibTorch " + std::string(TORCH_VERSION) + " ATen on " + device_.str();
}

std::unique_ptr<TokenMap> TorchOperatorDevice::block_operator(const BlockWeights& w, const BlockForward& f,
                                                              const std::string& matrix) const {
  return on_device("copying " + matrix + "'s weights and caches", device_, [&] { return make_map(w, f, matrix); });
}

KrylovSpace TorchOperatorDevice::krylov_space(const TokenMap& map) const {
  const TorchMap* torch_map = &own_map(map, device_, "krylov_space");
  KrylovSpace space;
  space.rows = map.n() * map.d_out();
  space.cols = map.n() * map.d_in();
  space.make_basis = [torch_map](Index k) { return std::make_unique<TorchKrylovBasis>(*torch_map, k); };
  return space;
}

std::unique_ptr<TokenMap> TorchOperatorDevice::ln_complement(const TokenMap& map, const LayerNormComplement& basis) const {
  const TorchMap& inner = own_map(map, device_, "ln_complement");
  if (basis.n() != map.n() || basis.d() != map.d_in())
    throw std::invalid_argument("TorchOperatorDevice::ln_complement: the basis is " + std::to_string(basis.n()) + " x " +
                                std::to_string(basis.d()) + ", the map's input " + std::to_string(map.n()) + " x " +
                                std::to_string(map.d_in()));
  return on_device("copying the LayerNorm complement's reflectors", device_,
                   [&] { return std::make_unique<TorchLnComplementMap>(inner, basis); });
}

std::unique_ptr<TokenMap> TorchOperatorDevice::make_map(const BlockWeights& w, const BlockForward& f,
                                                        const std::string& matrix) const {
  torch::NoGradGuard no_grad;
  auto map = std::make_unique<TorchBlockMap>(device_, assembly_batch_bytes_, f.X.rows(), w.d);
  if (matrix == "K_sa" || matrix == "B_sa" || matrix == "E_sa") {
    const AttentionPart part = matrix == "B_sa" ? AttentionPart::kB : matrix == "E_sa" ? AttentionPart::kE : AttentionPart::kFull;
    map->attention.emplace(w, f.attn, part, device_);
  } else if (matrix == "K_sab") {
    map->ln.emplace(w.ln1_gamma, f.ln1, device_);
    map->attention.emplace(w, f.attn, AttentionPart::kFull, device_);
    map->residual = sab_residual(f.skip);
  } else if (matrix == "K_mlp") {
    map->mlp.emplace(w, f.mlp, device_);
  } else if (matrix == "K_ffn") {
    map->ln.emplace(w.ln2_gamma, f.ln2, device_);
    map->mlp.emplace(w, f.mlp, device_);
    map->residual = ffn_residual(f.skip);
  } else {
    throw std::invalid_argument("TorchOperatorDevice: no matrix-free operator for '" + matrix +
                                "' (K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn)");
  }
  return map;
}

std::shared_ptr<const OperatorDevice> cuda_operator_device(std::string* why, int index) {
  if (!torch::cuda::is_available()) {
    if (why) *why = "this LibTorch " + std::string(TORCH_VERSION) + " has no CUDA device";
    return nullptr;
  }
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (index < 0 || index >= count) {
    if (why) *why = "no CUDA device " + std::to_string(index) + " (this machine has " + std::to_string(count) + ")";
    return nullptr;
  }
  return std::make_shared<TorchOperatorDevice>(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index)));
}

}  // namespace jacond::models
