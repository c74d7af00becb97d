// The block's operators on a LibTorch device; the math is in models/device/torch_operator_device.h.
#include "models/device/torch_operator_device.h"

#include <optional>
#include <stdexcept>

#include "analysis/operators/block_kernels.h"
#include "models/track/bridge.h"

namespace jacond::models {

namespace {

// Host <-> device: models/track/bridge.h's conversions (entry (i, j) = t[i][j]), then a copy.
at::Tensor to_device(const Mat& M, const torch::Device& device) { return to_torch(M).to(device); }
at::Tensor to_device(const Vec& v, const torch::Device& device) { return to_torch_vec(v).to(device); }

// Runs f, turning a LibTorch error (a CUDA failure, out of device memory) into one line naming the
// operation and the device: c10::Error's own text carries a backtrace over many lines.
template <typename F>
auto on_device(const std::string& what, const torch::Device& device, const F& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    msg = msg.substr(0, msg.find('\n'));
    throw std::runtime_error(what + " on " + device.str() + ": " + msg);
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
    const at::Tensor mean_in = in.mean(1, true), mean_xin = (x_hat * in).mean(1, true);
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
  at::Tensor split(const at::Tensor& X) const { return X.view({n, heads, dh}).permute({1, 0, 2}); }
  at::Tensor merge(const at::Tensor& Xh) const { return Xh.permute({1, 0, 2}).reshape({n, d}); }

  at::Tensor jvp(const at::Tensor& dY) const {
    at::Tensor dH = torch::zeros({heads, n, dh}, dY.options());
    if (via_v) dH += A.matmul(split(dY.mm(Wv)));
    if (via_a) {
      const at::Tensor dM = s * (split(dY.mm(Wq)).matmul(Kh.transpose(1, 2)) + Qh.matmul(split(dY.mm(Wk)).transpose(1, 2)));
      dH += softmax_rows_product(A, dM).matmul(Vh);
    }
    return merge(dH).mm(Wo);
  }
  at::Tensor vjp(const at::Tensor& G) const {
    const at::Tensor gH = split(G.mm(Wo.t()));
    at::Tensor gY = torch::zeros({n, d}, G.options());
    if (via_v) gY += merge(A.transpose(1, 2).matmul(gH)).mm(Wv.t());
    if (via_a) {
      const at::Tensor gM = s * softmax_rows_product(A, gH.matmul(Vh.transpose(1, 2)));
      gY += merge(gM.matmul(Kh)).mm(Wq.t()) + merge(gM.transpose(1, 2).matmul(Qh)).mm(Wk.t());
    }
    return gY;
  }
};

struct MlpOnDevice {
  at::Tensor W1, W2, gelu_prime;  // [d, hidden], [hidden, d], [n, hidden]
  MlpOnDevice(const BlockWeights& w, const MlpCache& c, const torch::Device& dev)
      : W1(to_device(w.W1, dev)), W2(to_device(w.W2, dev)), gelu_prime(to_device(mlp_gelu_prime(c), dev)) {}
  at::Tensor jvp(const at::Tensor& dY) const { return (dY.mm(W1) * gelu_prime).mm(W2); }
  at::Tensor vjp(const at::Tensor& G) const { return (G.mm(W2.t()) * gelu_prime).mm(W1.t()); }
};

// One of the six operators: an optional LayerNorm, then attention or the MLP, then the optional
// residual (K_sa/B_sa/E_sa and K_mlp have neither).
class TorchBlockMap final : public TokenMap {
 public:
  TorchBlockMap(torch::Device device, Index n, Index d) : device_(device), n_(n), d_(d) {}
  std::optional<LayerNormOnDevice> ln;
  std::optional<AttentionOnDevice> attention;
  std::optional<MlpOnDevice> mlp;
  bool residual = false;

  Index n() const override { return n_; }
  Index d_in() const override { return d_; }
  Index d_out() const override { return d_; }
  Mat apply(const Mat& dX) const override {
    return on_device("matrix-free product (JVP)", device_, [&] {
      torch::NoGradGuard no_grad;
      const at::Tensor x = to_device(dX, device_);
      const at::Tensor y = ln ? ln->jvp(x) : x;
      at::Tensor out = attention ? attention->jvp(y) : mlp->jvp(y);
      if (residual) out += x;
      return to_eigen(out);
    });
  }
  Mat apply_transpose(const Mat& G) const override {
    return on_device("matrix-free product (VJP)", device_, [&] {
      torch::NoGradGuard no_grad;
      const at::Tensor g = to_device(G, device_);
      at::Tensor out = attention ? attention->vjp(g) : mlp->vjp(g);
      if (ln) out = ln->vjp(out);
      if (residual) out += g;
      return to_eigen(out);
    });
  }

 private:
  torch::Device device_;
  Index n_, d_;
};

}  // namespace

TorchOperatorDevice::TorchOperatorDevice(torch::Device device) : device_(device) {
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

std::unique_ptr<TokenMap> TorchOperatorDevice::make_map(const BlockWeights& w, const BlockForward& f,
                                                        const std::string& matrix) const {
  torch::NoGradGuard no_grad;
  auto map = std::make_unique<TorchBlockMap>(device_, f.X.rows(), w.d);
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

std::shared_ptr<const OperatorDevice> cuda_operator_device(std::string* why) {
  if (!torch::cuda::is_available()) {
    if (why) *why = "this LibTorch " + std::string(TORCH_VERSION) + " has no CUDA device";
    return nullptr;
  }
  return std::make_shared<TorchOperatorDevice>(torch::Device(torch::kCUDA, 0));
}

}  // namespace jacond::models
