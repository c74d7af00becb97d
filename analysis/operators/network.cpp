#include "analysis/operators/network.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace jacond {

// ---------------------------------------------------------------------------------------------
// Network, parameter groups and packing.

void Network::validate() const {
  if (blocks.empty()) throw std::invalid_argument("network has no blocks");
  if (skips.size() != blocks.size()) {
    std::ostringstream os;
    os << "network has " << blocks.size() << " blocks but " << skips.size() << " skip modes";
    throw std::invalid_argument(os.str());
  }
  for (size_t l = 0; l < blocks.size(); ++l) {
    blocks[l].validate();
    if (blocks[l].d != blocks[0].d) {
      std::ostringstream os;
      os << "block " << l << " has d=" << blocks[l].d << " but block 0 has d=" << blocks[0].d;
      throw std::invalid_argument(os.str());
    }
  }
}

std::string to_string(ParamGroup g) { return g == ParamGroup::kAttention ? "attn" : "mlp"; }

Index attention_param_count(const BlockWeights& w) { return 4 * w.d * w.d + 4 * w.d; }
Index mlp_param_count(const BlockWeights& w) { return 2 * w.d * w.hidden + w.hidden + w.d; }

namespace {
Index group_count(const BlockWeights& w, ParamGroup g) {
  return g == ParamGroup::kAttention ? attention_param_count(w) : mlp_param_count(w);
}
void check_layer(const Network& net, Index layer) {
  if (layer < 0 || layer >= net.depth()) {
    std::ostringstream os;
    os << "parameter layer " << layer << " out of range [0, " << net.depth() << ")";
    throw std::invalid_argument(os.str());
  }
}
}  // namespace

ParamSelection ParamSelection::all(const Network& net) {
  ParamSelection s;
  for (Index l = 0; l < net.depth(); ++l) {
    s.slices.push_back({l, ParamGroup::kAttention});
    s.slices.push_back({l, ParamGroup::kMlp});
  }
  return s;
}
ParamSelection ParamSelection::attention(Index layer) { return ParamSelection{{{layer, ParamGroup::kAttention}}}; }
ParamSelection ParamSelection::mlp(Index layer) { return ParamSelection{{{layer, ParamGroup::kMlp}}}; }

std::vector<Index> ParamSelection::offsets(const Network& net) const {
  std::vector<Index> off{0};
  for (const ParamSlice& s : slices) {
    check_layer(net, s.layer);
    off.push_back(off.back() + group_count(net.blocks[s.layer], s.group));
  }
  return off;
}
Index ParamSelection::size(const Network& net) const { return offsets(net).back(); }

namespace {
// The slots of a group in θ order (header comment): pointers to the dense storage.
template <typename P, typename F>
void for_each_slot(P& p, ParamGroup g, F&& f) {
  if (g == ParamGroup::kAttention) {
    for (auto* m : {&p.Wq, &p.Wk, &p.Wv, &p.Wo}) f(m->data(), m->size());
    for (auto* v : {&p.bq, &p.bk, &p.bv, &p.bo}) f(v->data(), v->size());
  } else {
    f(p.W1.data(), p.W1.size());
    f(p.b1.data(), p.b1.size());
    f(p.W2.data(), p.W2.size());
    f(p.b2.data(), p.b2.size());
  }
}
}  // namespace

void pack_group(const BlockParams& p, ParamGroup g, double* out) {
  if ((g == ParamGroup::kAttention && !p.attn) || (g == ParamGroup::kMlp && !p.mlp))
    throw std::invalid_argument("pack_group: group " + to_string(g) + " is absent");
  for_each_slot(p, g, [&](const double* src, Index k) { out = std::copy(src, src + k, out); });
}

void unpack_group(const double* in, ParamGroup g, BlockParams& p) {
  if ((g == ParamGroup::kAttention && !p.attn) || (g == ParamGroup::kMlp && !p.mlp))
    throw std::invalid_argument("unpack_group: group " + to_string(g) + " is not allocated");
  for_each_slot(p, g, [&](double* dst, Index k) {
    std::copy(in, in + k, dst);
    in += k;
  });
}

namespace {
BlockParams params_of(const BlockWeights& w) {
  BlockParams p;
  p.attn = p.mlp = true;
  p.Wq = w.Wq; p.Wk = w.Wk; p.Wv = w.Wv; p.Wo = w.Wo;
  p.bq = w.bq; p.bk = w.bk; p.bv = w.bv; p.bo = w.bo;
  p.W1 = w.W1; p.W2 = w.W2; p.b1 = w.b1; p.b2 = w.b2;
  return p;
}
}  // namespace

Vec network_parameters(const Network& net) {
  const ParamSelection sel = ParamSelection::all(net);
  const std::vector<Index> off = sel.offsets(net);
  Vec theta(off.back());
  for (size_t k = 0; k < sel.slices.size(); ++k)
    pack_group(params_of(net.blocks[sel.slices[k].layer]), sel.slices[k].group, theta.data() + off[k]);
  return theta;
}

Network with_parameters(const Network& net, const Vec& theta) {
  const ParamSelection sel = ParamSelection::all(net);
  const std::vector<Index> off = sel.offsets(net);
  if (theta.size() != off.back()) {
    std::ostringstream os;
    os << "parameter vector has " << theta.size() << " entries, the network has " << off.back();
    throw std::invalid_argument(os.str());
  }
  Network out = net;
  for (Index l = 0; l < net.depth(); ++l) {
    BlockParams p = params_of(net.blocks[l]);
    unpack_group(theta.data() + off[2 * l], ParamGroup::kAttention, p);
    unpack_group(theta.data() + off[2 * l + 1], ParamGroup::kMlp, p);
    BlockWeights& w = out.blocks[l];
    w.Wq = p.Wq; w.Wk = p.Wk; w.Wv = p.Wv; w.Wo = p.Wo;
    w.bq = p.bq; w.bk = p.bk; w.bv = p.bv; w.bo = p.bo;
    w.W1 = p.W1; w.W2 = p.W2; w.b1 = p.b1; w.b2 = p.b2;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Forward pass.

NetworkForward network_forward(const Network& net, const std::vector<Mat>& inputs) {
  net.validate();
  if (inputs.empty()) throw std::invalid_argument("network_forward: no input samples");
  NetworkForward fwd;
  fwd.samples.resize(inputs.size());
  for (size_t s = 0; s < inputs.size(); ++s) {
    if (inputs[s].rows() != inputs[0].rows()) {
      std::ostringstream os;
      os << "sample " << s << " has n=" << inputs[s].rows() << " tokens, sample 0 has n=" << inputs[0].rows();
      throw std::invalid_argument(os.str());
    }
    const Mat* X = &inputs[s];
    for (Index l = 0; l < net.depth(); ++l) {
      fwd.samples[s].push_back(block_forward(net.blocks[l], *X, net.skips[l]));
      X = &fwd.samples[s].back().X2;
    }
  }
  return fwd;
}

Vec network_outputs(const Network& net, const std::vector<Mat>& inputs) {
  const NetworkForward fwd = network_forward(net, inputs);
  const Index nd = fwd.output(0).size();
  Vec F(fwd.m() * nd);
  for (Index s = 0; s < fwd.m(); ++s) F.segment(s * nd, nd) = vec(fwd.output(s));
  return F;
}

// ---------------------------------------------------------------------------------------------
// Operators.

namespace {
// Allocates group g of p as zeros if it is absent.
void allocate_group(const BlockWeights& w, ParamGroup g, BlockParams& p) {
  const bool attn = g == ParamGroup::kAttention;
  if ((attn && p.attn) || (!attn && p.mlp)) return;
  const BlockParams z = BlockParams::zeros(w, attn, !attn);
  if (attn) {
    p.attn = true;
    p.Wq = z.Wq; p.Wk = z.Wk; p.Wv = z.Wv; p.Wo = z.Wo;
    p.bq = z.bq; p.bk = z.bk; p.bv = z.bv; p.bo = z.bo;
  } else {
    p.mlp = true;
    p.W1 = z.W1; p.W2 = z.W2; p.b1 = z.b1; p.b2 = z.b2;
  }
}

// p[g] += the group slot starting at `in`.
void add_unpacked(const double* in, ParamGroup g, BlockParams& p) {
  for_each_slot(p, g, [&](double* dst, Index k) {
    Eigen::Map<Vec>(dst, k) += Eigen::Map<const Vec>(in, k);
    in += k;
  });
}
}  // namespace

ParamJacobianOp::ParamJacobianOp(const Network& net, const NetworkForward& fwd, ParamSelection sel)
    : net_(net), fwd_(fwd), sel_(std::move(sel)) {
  if (sel_.slices.empty()) throw std::invalid_argument("ParamJacobianOp: empty parameter selection");
  if (fwd_.m() == 0 || static_cast<Index>(fwd_.samples[0].size()) != net_.depth())
    throw std::invalid_argument("ParamJacobianOp: forward caches do not match the network depth");
  offsets_ = sel_.offsets(net_);
  cols_ = offsets_.back();
  rows_ = fwd_.m() * fwd_.output(0).size();
  first_layer_ = net_.depth();
  for (const ParamSlice& s : sel_.slices) first_layer_ = std::min(first_layer_, s.layer);
}

void ParamJacobianOp::perform_op(const Scalar* x, Scalar* y) const {
  // Parameter tangents per block (only the selected groups are allocated; a group listed twice
  // adds up, as the columns of a concatenation would).
  std::vector<BlockParams> dp(net_.depth());
  for (size_t k = 0; k < sel_.slices.size(); ++k) {
    const ParamSlice& s = sel_.slices[k];
    allocate_group(net_.blocks[s.layer], s.group, dp[s.layer]);
    add_unpacked(x + offsets_[k], s.group, dp[s.layer]);
  }
  const Index n = fwd_.output(0).rows(), d = net_.d(), nd = n * d;
  for (Index s = 0; s < fwd_.m(); ++s) {
    Mat dX = Mat::Zero(n, d);  // the input does not move; tangents start at first_layer_
    for (Index l = first_layer_; l < net_.depth(); ++l)
      dX = block_jvp(net_.blocks[l], fwd_.samples[s][l], dX, (dp[l].attn || dp[l].mlp) ? &dp[l] : nullptr);
    Eigen::Map<Vec>(y + s * nd, nd) = vec(dX);
  }
}

void ParamJacobianOp::perform_op_transpose(const Scalar* x, Scalar* y) const {
  std::vector<BlockParams> gp(net_.depth());
  for (const ParamSlice& s : sel_.slices) allocate_group(net_.blocks[s.layer], s.group, gp[s.layer]);
  const Index n = fwd_.output(0).rows(), d = net_.d(), nd = n * d;
  for (Index s = 0; s < fwd_.m(); ++s) {
    Mat G = Eigen::Map<const Mat>(x + s * nd, n, d);
    for (Index l = net_.depth() - 1; l >= first_layer_; --l)
      G = block_vjp(net_.blocks[l], fwd_.samples[s][l], G, (gp[l].attn || gp[l].mlp) ? &gp[l] : nullptr);
  }
  for (size_t k = 0; k < sel_.slices.size(); ++k) pack_group(gp[sel_.slices[k].layer], sel_.slices[k].group, y + offsets_[k]);
}

Mat param_jacobian_dense(const Network& net, const NetworkForward& fwd, const ParamSelection& sel) {
  const ParamJacobianOp op(net, fwd, sel);
  return op.rows() < op.cols() ? dense_from_transpose_products(op) : dense_from_products(op);
}

StackInputJacobianOp::StackInputJacobianOp(const Network& net, const NetworkForward& fwd, Index sample)
    : net_(net), f_(fwd.samples.at(static_cast<size_t>(sample))) {
  if (static_cast<Index>(f_.size()) != net_.depth())
    throw std::invalid_argument("StackInputJacobianOp: forward caches do not match the network depth");
  n_ = f_.front().X.rows();
  N_ = n_ * net_.d();
}

void StackInputJacobianOp::perform_op(const Scalar* x, Scalar* y) const {
  Mat dX = Eigen::Map<const Mat>(x, n_, net_.d());
  for (Index l = 0; l < net_.depth(); ++l) dX = block_jvp(net_.blocks[l], f_[l], dX, nullptr);
  Eigen::Map<Mat>(y, n_, net_.d()) = dX;
}

void StackInputJacobianOp::perform_op_transpose(const Scalar* x, Scalar* y) const {
  Mat G = Eigen::Map<const Mat>(x, n_, net_.d());
  for (Index l = net_.depth() - 1; l >= 0; --l) G = block_vjp(net_.blocks[l], f_[l], G, nullptr);
  Eigen::Map<Mat>(y, n_, net_.d()) = G;
}

std::vector<LayerFactors> layer_factors(const Network& net, const NetworkForward& fwd, Index sample) {
  const auto& f = fwd.samples.at(static_cast<size_t>(sample));
  std::vector<LayerFactors> out(f.size());
  for (size_t l = 0; l < f.size(); ++l) {
    out[l].K_sab = sab_jacobian(net.blocks[l], f[l]);
    out[l].K_ffn = ffn_jacobian(net.blocks[l], f[l]).to_dense();
  }
  return out;
}

Mat stack_input_jacobian_dense(const std::vector<LayerFactors>& factors) {
  if (factors.empty()) throw std::invalid_argument("stack_input_jacobian_dense: no layers");
  Mat P = factors[0].K_ffn * factors[0].K_sab;
  for (size_t l = 1; l < factors.size(); ++l) P = factors[l].K_ffn * (factors[l].K_sab * P);
  return P;
}

}  // namespace jacond
