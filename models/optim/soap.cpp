#include "models/optim/soap.h"

#include "models/optim/adamw.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
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

// Eigenvectors of each symmetric S[b] of a batch [B, n, n], columns ordered by descending
// eigenvalue (fp64 eigh), row-major. eigh returns column-major strides, which the refresh's copy_
// would keep for the whole run while a loaded state comes back row-major: the same products then
// take other BLAS transpose paths, round differently, and a resumed run leaves the uninterrupted
// one. Every eigenbasis is contiguous, live or loaded (Soap.EigenbasesAreRowMajorLiveAndLoaded).
torch::Tensor eigenbases_desc(const torch::Tensor& S) {
  auto S64 = S.to(torch::kFloat64);
  S64 = S64 + 1e-30 * torch::eye(S64.size(-1), S64.options());
  auto eig = torch::linalg_eigh(S64);
  return std::get<1>(eig).flip({-1}).to(S.dtype()).contiguous();
}

// Q_Lᵀ G Q_R and Q_L G Q_Rᵀ over a batch [B, m, k]; an undefined side is the identity.
torch::Tensor project(const torch::Tensor& G, const torch::Tensor (&Q)[2]) {
  torch::Tensor g = G;
  if (Q[0].defined()) g = torch::matmul(Q[0].transpose(1, 2), g);
  if (Q[1].defined()) g = torch::matmul(g, Q[1]);
  return g;
}
torch::Tensor project_back(const torch::Tensor& G, const torch::Tensor (&Q)[2]) {
  torch::Tensor g = G;
  if (Q[0].defined()) g = torch::matmul(Q[0], g);
  if (Q[1].defined()) g = torch::matmul(g, Q[1].transpose(1, 2));
  return g;
}

torch::Tensor absent() { return torch::empty({0}); }

// What matrices must share to step together: the view [m, k], decay, step count, which of the
// four statistics/bases are kept, dtype and device.
using GroupKey = std::tuple<int64_t, int64_t, bool, int64_t, int, int, std::string>;

int defined_mask(const torch::Tensor (&t)[2]) { return (t[0].defined() ? 1 : 0) | (t[1].defined() ? 2 : 0); }

std::string placement(const torch::Tensor& t) { return t.device().str() + "/" + std::string(c10::toString(t.scalar_type())); }

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
  vectors_.resize(params_.size());
  for (const auto& p : params_) matrix_.push_back(as_matrix(p).dim() >= 2);
  index_members();
}

bool Soap::is_matrix(size_t i) const { return matrix_[i]; }

void Soap::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

void Soap::step() {
  torch::NoGradGuard no_grad;
  step_vectors();
  step_matrices();
}

// The 1-D parameters take plain AdamW (adamw.h's adamw_step: multi-tensor on a device), together
// where they share a step count and a decay.
void Soap::step_vectors() {
  std::map<std::pair<int64_t, bool>, AdamWTensors> adam;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined() || is_matrix(i)) continue;
    VectorState& s = vectors_[i];
    if (s.step++ == 0) {
      s.exp_avg = torch::zeros_like(p);
      s.exp_avg_sq = torch::zeros_like(p);
      if (!opt_.identity_basis) continue;  // the reference's statistics-only first step
    }
    AdamWTensors& b = adam[{opt_.identity_basis ? s.step : s.step - 1, decay_[i]}];
    b.params.push_back(p);
    b.grads.push_back(p.grad().detach());
    b.exp_avg.push_back(s.exp_avg);
    b.exp_avg_sq.push_back(s.exp_avg_sq);
  }
  for (auto& [key, tensors] : adam) {
    const auto [t, decay] = key;
    adamw_step(tensors, {opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, decay ? opt_.weight_decay : 0.0}, t);
  }
}

// Each group whose members all have a gradient steps; then the matrices seeing their first one
// form groups of their own.
void Soap::step_matrices() {
  split_off_members_without_gradient();
  for (auto& g : groups_)
    if (params_[g.members.front()].grad().defined()) step_group(g);
  std::vector<size_t> fresh;
  for (size_t i = 0; i < params_.size(); ++i)
    if (is_matrix(i) && slots_[i].group < 0 && params_[i].grad().defined()) fresh.push_back(i);
  if (!fresh.empty()) start_groups(fresh);
}

// [B, m, k]: the members' gradients as matrices, in slot order (one member's: a view).
torch::Tensor Soap::gradients(const std::vector<size_t>& members) const {
  if (members.size() == 1) return as_matrix(params_[members.front()].grad().detach()).unsqueeze(0);
  std::vector<torch::Tensor> grads;
  for (size_t i : members) grads.push_back(as_matrix(params_[i].grad().detach()));
  return torch::stack(grads);
}

// A group's operations batched (a device), or member by member on the CPU (module comment).
bool Soap::batched(const MatrixGroup& g) const { return !g.state.exp_avg.is_cpu() || opt_.batched_on_cpu; }

// A group some of whose members have no gradient this step becomes two: those with one (they
// step) and those without (they keep their step count). Groups are not merged again.
void Soap::split_off_members_without_gradient() {
  std::vector<MatrixGroup> kept;
  bool split = false;
  for (auto& g : groups_) {
    std::vector<int64_t> with, without;
    for (size_t b = 0; b < g.members.size(); ++b)
      (params_[g.members[b]].grad().defined() ? with : without).push_back(static_cast<int64_t>(b));
    if (with.empty() || without.empty()) {
      kept.push_back(std::move(g));
      continue;
    }
    kept.push_back(subgroup(g, with));
    kept.push_back(subgroup(g, without));
    split = true;
  }
  groups_ = std::move(kept);
  if (split) index_members();
}

Soap::MatrixGroup Soap::subgroup(const MatrixGroup& g, const std::vector<int64_t>& slots) {
  const torch::Tensor index = torch::tensor(slots, torch::kLong).to(g.state.exp_avg.device());
  MatrixGroup s;
  for (int64_t b : slots) s.members.push_back(g.members[static_cast<size_t>(b)]);
  s.step = g.step;
  s.decay = g.decay;
  s.state = g.state.map([&](const torch::Tensor& t) { return t.index_select(0, index); });
  return s;
}

// The first step of matrices grouped by view, decay, dtype and device: zero moments, and either
// the statistics-only step (L, R and their eigenbases, eigh once for the group) or, with a frozen
// identity basis, an update.
void Soap::start_groups(const std::vector<size_t>& fresh) {
  std::map<GroupKey, MatrixGroup> starting;
  for (size_t i : fresh) {
    const torch::Tensor W = as_matrix(params_[i]);
    MatrixGroup& g = starting[{W.size(0), W.size(1), decay_[i], 0, 0, 0, placement(params_[i])}];
    g.members.push_back(i);
    g.decay = decay_[i];
  }
  for (auto& [key, g] : starting) {
    const torch::Tensor G = gradients(g.members);
    const int64_t B = G.size(0), dims[2] = {G.size(1), G.size(2)};
    MatrixState& s = g.state;
    s.exp_avg = torch::zeros_like(G);
    s.exp_avg_sq = torch::zeros_like(G);
    for (int side = 0; side < 2; ++side) {
      if (dims[side] > opt_.max_precond_dim) continue;  // this side stays unpreconditioned
      if (opt_.identity_basis)
        s.Q[side] = torch::eye(dims[side], G.options()).expand({B, dims[side], dims[side]}).clone();
      else
        s.GG[side] = torch::zeros({B, dims[side], dims[side]}, G.options());
    }
    if (opt_.identity_basis) {
      step_group(g);
    } else {  // statistics-only first step: never precondition with the current gradient
      g.step = 1;
      accumulate_statistics(s, G);
      for (int side = 0; side < 2; ++side)
        if (s.GG[side].defined()) s.Q[side] = eigenbases_desc(s.GG[side]);
    }
    groups_.push_back(std::move(g));
  }
  index_members();
}

// One step of every member of g: batched, or each member through update() on its own slice.
void Soap::step_group(MatrixGroup& g) {
  ++g.step;
  const int64_t t = opt_.identity_basis ? g.step : g.step - 1;
  if (batched(g)) {
    std::vector<torch::Tensor> params;
    for (size_t i : g.members) params.push_back(params_[i]);
    update(g.state, gradients(g.members), params, t, g.decay);
    return;
  }
  for (size_t b = 0; b < g.members.size(); ++b)
    update(g.state.map([b](const torch::Tensor& x) { return x.narrow(0, static_cast<int64_t>(b), 1); }),
           gradients({g.members[b]}), {params_[g.members[b]]}, t, g.decay);
}

// The module comment's lines at step t for the B matrices of `s` (views into a group's state,
// updated in place), G their gradients [B, m, k], `params` the parameters themselves.
void Soap::update(const MatrixState& s, const torch::Tensor& G, std::vector<torch::Tensor> params, int64_t t,
                  bool decay) const {
  const torch::Tensor G_rot = project(G, s.Q);                            // G' = Q_Lᵀ G Q_R
  s.exp_avg.mul_(opt_.beta1).add_(G, 1 - opt_.beta1);                     // M (parameter space)
  s.exp_avg_sq.mul_(opt_.beta2).addcmul_(G_rot, G_rot, 1 - opt_.beta2);   // V (eigenbasis)
  const double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(opt_.beta2, static_cast<double>(t));
  auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(opt_.eps);
  const torch::Tensor N = project_back(project(s.exp_avg, s.Q) / denom, s.Q);  // Adam in the eigenbasis (÷ bc1 below)
  std::vector<torch::Tensor> updates;
  for (size_t b = 0; b < params.size(); ++b) updates.push_back(N.select(0, static_cast<int64_t>(b)).reshape(params[b].sizes()));
  if (decay) at::_foreach_mul_(params, 1 - opt_.lr * opt_.weight_decay);
  at::_foreach_add_(params, updates, -opt_.lr / bc1);

  if (!opt_.identity_basis) {
    accumulate_statistics(s, G);
    if (t % opt_.precondition_frequency == 0) refresh_eigenbasis(s);
  }
}

// L ← β_s L + (1−β_s) G Gᵀ,  R ← β_s R + (1−β_s) Gᵀ G, for the B matrices of s at once.
void Soap::accumulate_statistics(const MatrixState& s, const torch::Tensor& G) const {
  const double bs = opt_.shampoo_beta;
  if (s.GG[0].defined()) s.GG[0].baddbmm_(G, G.transpose(1, 2), bs, 1 - bs);
  if (s.GG[1].defined()) s.GG[1].baddbmm_(G.transpose(1, 2), G, bs, 1 - bs);
}

// One power-iteration step per side with the eigenvalue-order permutation (module comment), for
// the B matrices of s at once, in place: π_b sorts diag(Q_bᵀ L_b Q_b) descending, V_b is permuted
// by π_b along that side, Q_b ← qr(L_b Q_b[:, π_b]).Q.
void Soap::refresh_eigenbasis(const MatrixState& s) const {
  const int64_t B = s.exp_avg_sq.size(0), m = s.exp_avg_sq.size(1), k = s.exp_avg_sq.size(2);
  for (int side = 0; side < 2; ++side) {
    if (!s.GG[side].defined()) continue;
    auto L = s.GG[side].to(torch::kFloat64);
    auto Q = s.Q[side].to(torch::kFloat64);
    auto LQ = torch::matmul(L, Q);
    auto estimated = (Q * LQ).sum(1);  // [B, n]: diag(Qᵀ L Q)
    auto order = std::get<1>(estimated.sort(/*dim=*/1, /*descending=*/true));
    const auto along = side == 0 ? order.unsqueeze(2).expand({B, m, k}) : order.unsqueeze(1).expand({B, m, k});
    s.exp_avg_sq.copy_(s.exp_avg_sq.gather(side + 1, along));
    s.Q[side].copy_(std::get<0>(torch::linalg_qr(LQ.gather(2, order.unsqueeze(1).expand_as(LQ)))));
  }
}

void Soap::index_members() {
  slots_.assign(params_.size(), Slot{});
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t b = 0; b < groups_[gi].members.size(); ++b)
      slots_[groups_[gi].members[b]] = {static_cast<int>(gi), static_cast<int64_t>(b)};
}

int64_t Soap::steps(size_t i) const {
  if (i >= params_.size()) throw std::out_of_range("SOAP: no such parameter");
  if (!is_matrix(i)) return vectors_[i].step;
  return slots_[i].group < 0 ? 0 : groups_[static_cast<size_t>(slots_[i].group)].step;
}

torch::Tensor Soap::eigenbasis(size_t i, int side) const {
  if (i >= params_.size() || side < 0 || side > 1) throw std::out_of_range("SOAP: no such eigenbasis");
  if (!is_matrix(i) || slots_[i].group < 0) return {};
  const torch::Tensor& Q = groups_[static_cast<size_t>(slots_[i].group)].state.Q[side];
  return Q.defined() ? Q.select(0, slots_[i].slot) : torch::Tensor();
}

// One entry per parameter, as before grouping: a member's slices are cloned, so an entry holds
// its own storage, not the group's.
void Soap::save(torch::serialize::OutputArchive& archive) const {
  archive.write("soap.num_params", torch::tensor(static_cast<int64_t>(params_.size())));
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    auto put = [&](const std::string& name, const torch::Tensor& t) { archive.write(p + name, t.defined() ? t : absent()); };
    archive.write(p + "step", torch::tensor(steps(i)));
    if (!is_matrix(i)) {
      put("exp_avg", vectors_[i].exp_avg);
      put("exp_avg_sq", vectors_[i].exp_avg_sq);
      for (const char* name : {"L", "R", "Q_L", "Q_R"}) put(name, {});
      continue;
    }
    const Slot at = slots_[i];
    const MatrixGroup* g = at.group < 0 ? nullptr : &groups_[static_cast<size_t>(at.group)];
    const MatrixState own = g ? g->state.map([&](const torch::Tensor& t) { return t.select(0, at.slot).clone(); })
                              : MatrixState{};
    put("exp_avg", own.exp_avg);
    put("exp_avg_sq", own.exp_avg_sq);
    put("L", own.GG[0]);
    put("R", own.GG[1]);
    put("Q_L", own.Q[0]);
    put("Q_R", own.Q[1]);
  }
}

// Reads every parameter's entry, checks each against the parameter's shape, then groups the
// matrices as step() would have (view, decay, step count, which sides are kept).
void Soap::load(torch::serialize::InputArchive& archive) {
  torch::Tensor count;
  archive.read("soap.num_params", count);
  if (count.item<int64_t>() != static_cast<int64_t>(params_.size()))
    throw std::invalid_argument("SOAP state: " + std::to_string(count.item<int64_t>()) + " parameters, model has " +
                                std::to_string(params_.size()));
  std::vector<VectorState> vectors(params_.size());
  std::map<GroupKey, std::vector<MatrixGroup>> parts;  // one single-member group per matrix, stacked below
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    auto get = [&](const std::string& name) {
      torch::Tensor t;
      archive.read(p + name, t);
      return t.numel() == 0 ? torch::Tensor() : t;
    };
    torch::Tensor step;
    archive.read(p + "step", step);
    const int64_t steps_taken = step.item<int64_t>();
    torch::Tensor exp_avg = get("exp_avg"), exp_avg_sq = get("exp_avg_sq");
    auto bad = [&](const std::string& what) {
      return std::invalid_argument("SOAP state: " + what + " of parameter " + std::to_string(i) + " do not match its shape");
    };
    if (steps_taken > 0 && (!exp_avg.defined() || exp_avg.numel() != params_[i].numel() || !exp_avg_sq.defined() ||
                            exp_avg_sq.numel() != params_[i].numel()))
      throw bad("moments");
    if (!is_matrix(i)) {
      vectors[i] = {steps_taken, exp_avg, exp_avg_sq};
      continue;
    }
    if (steps_taken == 0) continue;
    const torch::Tensor W = as_matrix(params_[i]);
    const int64_t dims[2] = {W.size(0), W.size(1)};
    MatrixGroup one;
    one.members = {i};
    one.step = steps_taken;
    one.decay = decay_[i];
    one.state.exp_avg = exp_avg.reshape({1, dims[0], dims[1]});
    one.state.exp_avg_sq = exp_avg_sq.reshape({1, dims[0], dims[1]});
    const char* names[2][2] = {{"L", "Q_L"}, {"R", "Q_R"}};
    for (int side = 0; side < 2; ++side) {
      for (int which = 0; which < 2; ++which) {
        torch::Tensor t = get(names[side][which]);
        if (t.defined() && t.sizes() != torch::IntArrayRef({dims[side], dims[side]})) throw bad("statistics or eigenbases");
        (which == 0 ? one.state.GG[side] : one.state.Q[side]) = t.defined() ? t.unsqueeze(0) : t;
      }
    }
    parts[{dims[0], dims[1], one.decay, one.step, defined_mask(one.state.GG), defined_mask(one.state.Q), placement(exp_avg)}]
        .push_back(std::move(one));
  }
  std::vector<MatrixGroup> groups;
  for (auto& [key, members] : parts) {
    MatrixGroup g;
    g.step = members.front().step;
    g.decay = members.front().decay;
    auto stack = [&](auto field) {
      std::vector<torch::Tensor> ts;
      for (const auto& one : members) ts.push_back(field(one));
      return ts.front().defined() ? torch::cat(ts) : torch::Tensor();
    };
    for (const auto& one : members) g.members.push_back(one.members.front());
    g.state.exp_avg = stack([](const MatrixGroup& o) { return o.state.exp_avg; });
    g.state.exp_avg_sq = stack([](const MatrixGroup& o) { return o.state.exp_avg_sq; });
    for (int side = 0; side < 2; ++side) {
      g.state.GG[side] = stack([side](const MatrixGroup& o) { return o.state.GG[side]; });
      g.state.Q[side] = stack([side](const MatrixGroup& o) { return o.state.Q[side]; });
    }
    groups.push_back(std::move(g));
  }
  vectors_ = std::move(vectors);
  groups_ = std::move(groups);
  index_members();
}

}  // namespace jacond::models
