#include "models/optim/soap.h"

#include "models/optim/adamw.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace jacond::models {

namespace {

// The matrix view of a parameter: leading size-1 dims dropped (pos_embed [1, n, d] -> [n, d],
// cls_token [1, 1, d] -> [d]), then [m, k] = [shape0, numel/shape0] (a conv weight [o, i, p, p]
// -> fan-out × fan-in [o, i·p·p]); what is left 1-D gets plain Adam.
torch::Tensor as_matrix(const torch::Tensor& t) {
  torch::Tensor v = t;
  while (v.dim() > 1 && v.size(0) == 1) v = v.squeeze(0);
  return v.dim() >= 2 ? v.reshape({v.size(0), -1}) : v;
}

// Eigenvectors of the symmetric S, columns ordered by descending eigenvalue (fp64 eigh).
torch::Tensor eigenbasis_desc(const torch::Tensor& S) {
  auto S64 = S.to(torch::kFloat64);
  S64 = S64 + 1e-30 * torch::eye(S64.size(0), S64.options());
  auto eig = torch::linalg_eigh(S64);
  return std::get<1>(eig).flip({1}).to(S.dtype());
}

torch::Tensor absent() { return torch::empty({0}); }

}  // namespace

Soap::Soap(std::vector<torch::Tensor> params, SoapOptions options, std::vector<bool> decay)
    : params_(std::move(params)), decay_(std::move(decay)), opt_(options) {
  if (decay_.empty()) decay_.assign(params_.size(), true);
  if (decay_.size() != params_.size()) throw std::invalid_argument("SOAP: decay flags do not match the parameters");
  if (!(opt_.lr >= 0)) throw std::invalid_argument("SOAP: lr must be >= 0");
  if (!(opt_.beta1 >= 0 && opt_.beta1 < 1) || !(opt_.beta2 >= 0 && opt_.beta2 < 1))
    throw std::invalid_argument("SOAP: betas must be in [0, 1)");
  if (!(opt_.eps > 0)) throw std::invalid_argument("SOAP: eps must be > 0");
  if (!(opt_.weight_decay >= 0)) throw std::invalid_argument("SOAP: weight decay must be >= 0");
  if (opt_.precondition_frequency < 1) throw std::invalid_argument("SOAP: precondition frequency must be >= 1");
  if (opt_.max_precond_dim < 1) throw std::invalid_argument("SOAP: max precondition dim must be >= 1");
  if (opt_.shampoo_beta < 0) opt_.shampoo_beta = opt_.beta2;
  if (opt_.shampoo_beta >= 1) throw std::invalid_argument("SOAP: shampoo beta must be < 1");
  state_.resize(params_.size());
}

void Soap::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

void Soap::step() {
  torch::NoGradGuard no_grad;
  // The 1-D parameters take plain AdamW (adamw.h's adamw_step: multi-tensor on a device), together
  // where they share a step count and a decay.
  std::map<std::pair<int64_t, bool>, AdamWTensors> adam;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const torch::Tensor grad = p.grad().detach();
    State& s = state_[i];
    if (as_matrix(p).dim() >= 2) {
      step_matrix(p, grad, s, decay_[i]);
      continue;
    }
    if (s.step++ == 0) {
      s.exp_avg = torch::zeros_like(p);
      s.exp_avg_sq = torch::zeros_like(p);
      if (!opt_.identity_basis) continue;  // the reference's statistics-only first step
    }
    AdamWTensors& b = adam[{opt_.identity_basis ? s.step : s.step - 1, decay_[i]}];
    b.params.push_back(p);
    b.grads.push_back(grad);
    b.exp_avg.push_back(s.exp_avg);
    b.exp_avg_sq.push_back(s.exp_avg_sq);
  }
  for (auto& [key, tensors] : adam) {
    const auto [t, decay] = key;
    adamw_step(tensors, {opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, decay ? opt_.weight_decay : 0.0}, t);
  }
}

torch::Tensor Soap::project(const torch::Tensor& g2, const State& s) const {
  torch::Tensor g = g2;
  if (s.Q[0].defined()) g = torch::matmul(s.Q[0].t(), g);
  if (s.Q[1].defined()) g = torch::matmul(g, s.Q[1]);
  return g;
}

torch::Tensor Soap::project_back(const torch::Tensor& g2, const State& s) const {
  torch::Tensor g = g2;
  if (s.Q[0].defined()) g = torch::matmul(s.Q[0], g);
  if (s.Q[1].defined()) g = torch::matmul(g, s.Q[1].t());
  return g;
}

void Soap::step_matrix(torch::Tensor& p, const torch::Tensor& grad, State& s, bool decay) {
  const torch::Tensor G = as_matrix(grad);
  const int64_t dims[2] = {G.size(0), G.size(1)};
  const double bs = opt_.shampoo_beta;
  auto accumulate_statistics = [&] {
    if (s.GG[0].defined()) s.GG[0].mul_(bs).add_(torch::matmul(G, G.t()), 1 - bs);  // L ← β_s L + (1−β_s) G Gᵀ
    if (s.GG[1].defined()) s.GG[1].mul_(bs).add_(torch::matmul(G.t(), G), 1 - bs);  // R ← β_s R + (1−β_s) Gᵀ G
  };

  if (s.step++ == 0) {
    s.exp_avg = torch::zeros_like(G);
    s.exp_avg_sq = torch::zeros_like(G);
    for (int side = 0; side < 2; ++side) {
      if (dims[side] > opt_.max_precond_dim) continue;  // this side stays unpreconditioned
      if (opt_.identity_basis) {
        s.Q[side] = torch::eye(dims[side], G.options());
      } else {
        s.GG[side] = torch::zeros({dims[side], dims[side]}, G.options());
      }
    }
    if (!opt_.identity_basis) {
      accumulate_statistics();
      for (int side = 0; side < 2; ++side)
        if (s.GG[side].defined()) s.Q[side] = eigenbasis_desc(s.GG[side]);
      return;  // statistics-only first step: never precondition with the current gradient
    }
  }
  const int64_t t = opt_.identity_basis ? s.step : s.step - 1;

  const torch::Tensor G_rot = project(G, s);                                    // G' = Q_Lᵀ G Q_R
  s.exp_avg.mul_(opt_.beta1).add_(G, 1 - opt_.beta1);                           // M (parameter space)
  s.exp_avg_sq.mul_(opt_.beta2).addcmul_(G_rot, G_rot, 1 - opt_.beta2);         // V (eigenbasis)
  const double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(opt_.beta2, static_cast<double>(t));
  auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(opt_.eps);
  const torch::Tensor N_rot = project(s.exp_avg, s) / denom;                  // Adam in the eigenbasis (÷ bc1 below)
  const torch::Tensor N = project_back(N_rot, s);
  if (decay) p.mul_(1 - opt_.lr * opt_.weight_decay);
  p.add_(N.reshape(p.sizes()), -opt_.lr / bc1);

  if (!opt_.identity_basis) {
    accumulate_statistics();
    if (t % opt_.precondition_frequency == 0) refresh_eigenbasis(s);
  }
}

// One power-iteration step per side with the eigenvalue-order permutation (module comment).
void Soap::refresh_eigenbasis(State& s) {
  for (int side = 0; side < 2; ++side) {
    if (!s.GG[side].defined()) continue;
    const auto dtype = s.Q[side].scalar_type();
    auto L = s.GG[side].to(torch::kFloat64);
    auto Q = s.Q[side].to(torch::kFloat64);
    auto LQ = torch::matmul(L, Q);
    auto estimated = (Q * LQ).sum(0);  // diag(Qᵀ L Q)
    auto order = std::get<1>(estimated.sort(/*dim=*/0, /*descending=*/true));
    s.exp_avg_sq = s.exp_avg_sq.index_select(side, order.to(s.exp_avg_sq.device()));
    auto qr = torch::linalg_qr(LQ.index_select(1, order));
    s.Q[side] = std::get<0>(qr).to(dtype);
  }
}

torch::Tensor Soap::eigenbasis(size_t i, int side) const {
  if (i >= state_.size() || side < 0 || side > 1) throw std::out_of_range("SOAP: no such eigenbasis");
  return state_[i].Q[side];
}

void Soap::save(torch::serialize::OutputArchive& archive) const {
  archive.write("soap.num_params", torch::tensor(static_cast<int64_t>(params_.size())));
  for (size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    const std::string p = "p" + std::to_string(i) + ".";
    auto put = [&](const std::string& name, const torch::Tensor& t) { archive.write(p + name, t.defined() ? t : absent()); };
    archive.write(p + "step", torch::tensor(s.step));
    put("exp_avg", s.exp_avg);
    put("exp_avg_sq", s.exp_avg_sq);
    put("L", s.GG[0]);
    put("R", s.GG[1]);
    put("Q_L", s.Q[0]);
    put("Q_R", s.Q[1]);
  }
}

void Soap::load(torch::serialize::InputArchive& archive) {
  torch::Tensor count;
  archive.read("soap.num_params", count);
  if (count.item<int64_t>() != static_cast<int64_t>(params_.size()))
    throw std::invalid_argument("SOAP state: " + std::to_string(count.item<int64_t>()) + " parameters, model has " +
                                std::to_string(params_.size()));
  std::vector<State> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    State& s = loaded[i];
    const std::string p = "p" + std::to_string(i) + ".";
    auto get = [&](const std::string& name) {
      torch::Tensor t;
      archive.read(p + name, t);
      return t.numel() == 0 ? torch::Tensor() : t;
    };
    torch::Tensor step;
    archive.read(p + "step", step);
    s.step = step.item<int64_t>();
    s.exp_avg = get("exp_avg");
    s.exp_avg_sq = get("exp_avg_sq");
    s.GG[0] = get("L");
    s.GG[1] = get("R");
    s.Q[0] = get("Q_L");
    s.Q[1] = get("Q_R");
    if (s.step > 0 && (!s.exp_avg.defined() || s.exp_avg.numel() != params_[i].numel()))
      throw std::invalid_argument("SOAP state: moments of parameter " + std::to_string(i) + " do not match its shape");
  }
  state_ = std::move(loaded);
}

}  // namespace jacond::models
