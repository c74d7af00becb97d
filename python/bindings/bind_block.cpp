// Block: one ViT block's weights (jacond::BlockWeights, paper row-vector convention y = x W + b).
#include <pybind11/eigen.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <sstream>

#include "analysis/jacobians/block.h"
#include "analysis/jacobians/timm_layout.h"
#include "python/bindings/bindings.h"

namespace py = pybind11;

namespace jacond::python {
namespace {

using OptVec = std::optional<Eigen::Ref<const Vec>>;

// `v` when given, else `fallback` (the zero bias or LayerNorm's identity).
Vec or_default(const OptVec& v, Index size, double fallback) {
  return v ? Vec(*v) : Vec::Constant(size, fallback);
}

BlockWeights make_block(const Eigen::Ref<const Mat>& Wq, const Eigen::Ref<const Mat>& Wk, const Eigen::Ref<const Mat>& Wv,
                        const Eigen::Ref<const Mat>& Wo, const Eigen::Ref<const Mat>& W1, const Eigen::Ref<const Mat>& W2,
                        Index heads, const OptVec& bq, const OptVec& bk, const OptVec& bv, const OptVec& bo,
                        const OptVec& b1, const OptVec& b2, const OptVec& ln1_gamma, const OptVec& ln1_beta,
                        const OptVec& ln2_gamma, const OptVec& ln2_beta, double logit_scale, double ln_eps) {
  BlockWeights w;
  w.d = Wq.rows(), w.heads = heads, w.hidden = W1.cols(), w.logit_scale = logit_scale, w.ln_eps = ln_eps;
  w.Wq = Wq, w.Wk = Wk, w.Wv = Wv, w.Wo = Wo, w.W1 = W1, w.W2 = W2;
  w.bq = or_default(bq, w.d, 0), w.bk = or_default(bk, w.d, 0), w.bv = or_default(bv, w.d, 0);
  w.bo = or_default(bo, w.d, 0), w.b1 = or_default(b1, w.hidden, 0), w.b2 = or_default(b2, w.d, 0);
  w.ln1_gamma = or_default(ln1_gamma, w.d, 1), w.ln1_beta = or_default(ln1_beta, w.d, 0);
  w.ln2_gamma = or_default(ln2_gamma, w.d, 1), w.ln2_beta = or_default(ln2_beta, w.d, 0);
  w.validate();  // shapes, heads | d, finiteness: ValueError naming the first problem
  return w;
}

// A mapping of timm names to array-likes (NumPy, torch tensors through __array__, lists), read
// as fp64 with its shape. Called with the GIL held.
TimmLookup python_lookup(const py::object& arrays) {
  return [arrays](const std::string& key) -> std::optional<TimmArray> {
    if (!py::bool_(arrays.attr("__contains__")(key))) return std::nullopt;
    py::object item = arrays[py::str(key)];
    if (py::hasattr(item, "detach")) item = item.attr("detach")().attr("cpu")();  // a torch tensor
    py::array a;
    try {
      a = py::array::ensure(item);
    } catch (const py::error_already_set&) {
    }
    if (!a) throw std::invalid_argument(key + " is not an array");
    if (a.dtype().kind() != 'f') throw std::invalid_argument(key + " has non-floating dtype " + std::string(py::str(a.dtype())));
    TimmArray out;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) out.shape.push_back(a.shape(i));
    if (a.ndim() == 1 || a.ndim() == 2) {
      const auto f64 = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
      const Index rows = a.shape(0), cols = a.ndim() == 2 ? a.shape(1) : 1;
      out.values = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(f64.data(), rows, cols);
    }
    return out;
  };
}

py::dict to_timm(const BlockWeights& w, Index layer) {
  py::dict out;
  for (auto& [key, a] : block_to_timm_layout(w, layer)) {
    if (a.shape.size() == 1)
      out[py::str(key)] = py::cast(Vec(a.values.col(0)));
    else  // C-ordered like a torch state dict
      out[py::str(key)] = py::cast(Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>(a.values));
  }
  return out;
}

std::string describe(const BlockWeights& w) {
  std::ostringstream os;
  os << "Block(d=" << w.d << ", heads=" << w.heads << ", hidden=" << w.hidden
     << ", logit_scale=" << w.effective_logit_scale() << ", ln_eps=" << w.ln_eps << ")";
  return os.str();
}

}  // namespace

void bind_block(py::module_& m) {
  py::class_<BlockWeights>(m, "Block", R"(One pre-norm ViT block's weights, paper convention y = x W + b (W is in x out).

Block(Wq, Wk, Wv, Wo, W1, W2, heads, bq=None, ..., ln2_beta=None, logit_scale=0, ln_eps=1e-6):
biases default to 0, LayerNorm gamma/beta to 1/0; logit_scale 0 means 1/sqrt(d/heads).
Block.from_timm(state, layer, heads) reads timm names (PyTorch Linear weights are W transposed).)")
      .def(py::init(&make_block), py::arg("Wq"), py::arg("Wk"), py::arg("Wv"), py::arg("Wo"), py::arg("W1"), py::arg("W2"),
           py::arg("heads"), py::kw_only(), py::arg("bq") = py::none(), py::arg("bk") = py::none(),
           py::arg("bv") = py::none(), py::arg("bo") = py::none(), py::arg("b1") = py::none(), py::arg("b2") = py::none(),
           py::arg("ln1_gamma") = py::none(), py::arg("ln1_beta") = py::none(), py::arg("ln2_gamma") = py::none(),
           py::arg("ln2_beta") = py::none(), py::arg("logit_scale") = 0.0, py::arg("ln_eps") = 1e-6)
      .def_static(
          "from_timm",
          [](const py::object& state, Index layer, Index heads, double logit_scale, double ln_eps, bool fold_branch_scales) {
            if (!py::hasattr(state, "keys") || !py::hasattr(state, "__getitem__"))
              throw std::invalid_argument("state must be a mapping of timm names to arrays (a state_dict)");
            std::vector<std::string> keys;
            for (const py::handle key : state.attr("keys")()) keys.push_back(py::str(key));
            require_known_block_keys(keys, layer);
            return block_from_timm_layout(python_lookup(state), layer, heads, logit_scale, ln_eps, fold_branch_scales);
          },
          py::arg("state"), py::arg("layer") = 0, py::arg("heads"), py::arg("logit_scale") = 0.0, py::arg("ln_eps") = 1e-6,
          py::arg("fold_branch_scales") = true,
          "Block `layer` of a timm-named state dict (blocks.{layer}.attn.qkv.weight, ...); any float arrays or tensors.\n"
          "LayerScale (ls1/ls2.gamma) and ReZero (rezero_attn/mlp) are folded into W^O, b_O, W_2, b_2 (the block's\n"
          "function; fold_branch_scales=False: the stored weights, as the data-free weight reports use); any other\n"
          "blocks.{layer}.* key is a ValueError (a block the paper's equations do not describe). A Linear without\n"
          "its .bias (timm's qkv_bias=False, bias=False) reads as zeros; a norm's bias is required (an RMSNorm has none).")
      .def("to_timm", &to_timm, py::arg("layer") = 0, "This block as timm-named fp64 arrays (Linear weights transposed).")
      .def_readonly("d", &BlockWeights::d)
      .def_readonly("heads", &BlockWeights::heads)
      .def_readonly("hidden", &BlockWeights::hidden)
      .def_property_readonly("head_dim", &BlockWeights::head_dim)
      .def_property_readonly("logit_scale", &BlockWeights::effective_logit_scale)
      .def_readonly("ln_eps", &BlockWeights::ln_eps)
      .def_readonly("Wq", &BlockWeights::Wq).def_readonly("Wk", &BlockWeights::Wk)
      .def_readonly("Wv", &BlockWeights::Wv).def_readonly("Wo", &BlockWeights::Wo)
      .def_readonly("W1", &BlockWeights::W1).def_readonly("W2", &BlockWeights::W2)
      .def_readonly("bq", &BlockWeights::bq).def_readonly("bk", &BlockWeights::bk)
      .def_readonly("bv", &BlockWeights::bv).def_readonly("bo", &BlockWeights::bo)
      .def_readonly("b1", &BlockWeights::b1).def_readonly("b2", &BlockWeights::b2)
      .def_readonly("ln1_gamma", &BlockWeights::ln1_gamma).def_readonly("ln1_beta", &BlockWeights::ln1_beta)
      .def_readonly("ln2_gamma", &BlockWeights::ln2_gamma).def_readonly("ln2_beta", &BlockWeights::ln2_beta)
      .def("__repr__", &describe);
}

}  // namespace jacond::python
