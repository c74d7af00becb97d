// JacobianOperator: a block Jacobian applied matrix-free (analysis/operators/operators.h), and the
// same Jacobian assembled densely (analysis/jacobians/jacobians.h, the independent closed forms).
#include <pybind11/stl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "python/bindings/bindings.h"

namespace py = pybind11;

namespace jacond::python {
namespace {

const std::vector<std::string>& operator_names() {
  static const std::vector<std::string> names = {"K_sa", "B_sa", "E_sa", "K_sab", "K_mlp", "K_ffn"};
  return names;
}

std::string checked_name(const std::string& matrix) {
  for (const auto& n : operator_names())
    if (n == matrix) return matrix;
  throw std::invalid_argument("unknown Jacobian '" + matrix + "' (one of K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn)");
}

// `space`: "full", or "ln-complement" for the pre-norm sub-blocks K_sab and K_ffn: the input
// restricted to blockdiag_i(C_i), C_i an orthonormal basis of span{1, x̂_i}⟂ per token (the
// complement of the LayerNorm's structural nullspace; `jacond block`'s ln-complement rows).
std::string checked_space(const std::string& matrix, const std::string& space, Index d) {
  if (space == "full") return space;
  if (space != "ln-complement") throw std::invalid_argument("unknown space '" + space + "' (full or ln-complement)");
  if (matrix != "K_sab" && matrix != "K_ffn")
    throw std::invalid_argument("space 'ln-complement' applies to the pre-norm sub-blocks K_sab and K_ffn, not " + matrix);
  if (d < 3) throw std::invalid_argument("space 'ln-complement' needs d >= 3, got d=" + std::to_string(d));
  return space;
}

AttentionPart part_of(const std::string& matrix) {
  return matrix == "B_sa" ? AttentionPart::kB : matrix == "E_sa" ? AttentionPart::kE : AttentionPart::kFull;
}

// The weights and the forward pass a Jacobian is taken at, owned in one place so that the
// operator's references into them stay valid for the object's lifetime.
struct BlockPoint {
  BlockWeights w;
  BlockForward f;
  BlockPoint(const BlockWeights& weights, const Eigen::Ref<const Mat>& X, const std::string& skip)
      : w(weights), f(block_forward(weights, checked_tokens(X, weights), parse_skip_mode(skip))) {}
};

// K of one block at one input, as products x -> K x and y -> Kᵀ y on vec-ordered vectors.
class JacobianOperator {
 public:
  JacobianOperator(const BlockWeights& w, const Eigen::Ref<const Mat>& X, const std::string& matrix, const std::string& skip,
                   const std::string& space)
      : point_(std::make_unique<BlockPoint>(w, X, skip)),
        matrix_(checked_name(matrix)),
        space_(checked_space(matrix_, space, w.d)) {
    const BlockPoint& p = *point_;
    if (matrix_ == "K_sab") {
      bind_subblock(std::make_shared<SabJacobianOp>(p.w, p.f), p.f.ln1);
    } else if (matrix_ == "K_mlp") {
      bind(std::make_shared<MlpJacobianOp>(p.w, p.f.mlp));
    } else if (matrix_ == "K_ffn") {
      bind_subblock(std::make_shared<FfnJacobianOp>(p.w, p.f), p.f.ln2);
    } else {  // K_sa, B_sa, E_sa of bare attention at its input LN1(X)
      bind(std::make_shared<AttentionJacobianOp>(p.w, p.f.attn, part_of(matrix_)));
    }
  }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  const std::string& matrix() const { return matrix_; }
  const std::string& space() const { return space_; }

  /// y = K x (forward mode).
  Vec matvec(const Eigen::Ref<const Vec>& x) const { return apply(x, cols_, rows_, apply_); }
  /// x = Kᵀ y (reverse mode).
  Vec rmatvec(const Eigen::Ref<const Vec>& y) const { return apply(y, rows_, cols_, apply_transpose_); }
  /// K X for a block of columns (each column one product).
  Mat matmat(const Eigen::Ref<const Mat>& X) const {
    if (X.rows() != cols_) throw std::invalid_argument(shape_error("matmat", X.rows(), cols_));
    Mat in = X, out(rows_, X.cols());
    py::gil_scoped_release release;
    for (Index j = 0; j < X.cols(); ++j) apply_(in.col(j).data(), out.col(j).data());
    return out;
  }

 private:
  using Product = std::function<void(const double*, double*)>;

  template <typename Op>
  void bind(std::shared_ptr<Op> op) {
    rows_ = op->rows(), cols_ = op->cols();
    apply_ = [op](const double* x, double* y) { op->perform_op(x, y); };
    apply_transpose_ = [op](const double* x, double* y) { op->perform_op_transpose(x, y); };
  }

  // K_sab or K_ffn over space_: LnComplementOp refers to the full-space operator and the basis,
  // so both are owned here next to it.
  template <typename Op>
  void bind_subblock(std::shared_ptr<Op> op, const LayerNormCache& ln) {
    if (space_ == "full") return bind(op);
    const auto basis = std::make_shared<LayerNormComplement>(ln.x_hat);
    owned_ = {op, basis};
    bind(std::make_shared<LnComplementOp<Op>>(*op, *basis));
  }

  static std::string shape_error(const char* what, Index got, Index want) {
    return std::string(what) + ": vector of length " + std::to_string(got) + ", the operator needs " + std::to_string(want);
  }

  static Vec apply(const Eigen::Ref<const Vec>& x, Index in, Index out, const Product& product) {
    if (x.size() != in) throw std::invalid_argument(shape_error("product", x.size(), in));
    Vec y(out);
    py::gil_scoped_release release;
    product(x.data(), y.data());  // Ref<const Vec> of a contiguous fp64 array: read in place
    return y;
  }

  std::unique_ptr<BlockPoint> point_;
  std::string matrix_, space_;
  std::vector<std::shared_ptr<const void>> owned_;  // what a restricted operator refers to
  Index rows_ = 0, cols_ = 0;
  Product apply_, apply_transpose_;
};

// K (nd × nd), or K · blockdiag_i(C_i) (nd × n(d − 2)) on the ln-complement, with the same bases
// as the operator (layernorm_complement_basis, column for column).
Mat dense_jacobian(const BlockWeights& w, const Eigen::Ref<const Mat>& X, const std::string& matrix, const std::string& skip,
                   const std::string& space) {
  const std::string name = checked_name(matrix);
  const bool restricted = checked_space(name, space, w.d) == "ln-complement";
  const BlockPoint p(w, X, skip);
  py::gil_scoped_release release;
  const auto on_space = [&](Mat K, const LayerNormCache& ln) {
    return restricted ? right_multiply_tokenwise(K, ln.x_hat.rows(), layernorm_complement_bases(ln.x_hat)) : K;
  };
  if (name == "K_sab") return on_space(sab_jacobian(p.w, p.f), p.f.ln1);
  if (name == "K_mlp") return mlp_jacobian(p.w, p.f.mlp).to_dense();
  if (name == "K_ffn") return on_space(ffn_jacobian(p.w, p.f).to_dense(), p.f.ln2);
  return attention_jacobian(p.w, p.f.attn, part_of(name));
}

// numpy casts a complex array to fp64 with only a ComplexWarning, dropping its imaginary part, so a
// complex operand is refused by name (jacond.linear_operator applies K to Re and Im separately).
template <typename Dense>
Dense real_operand(const py::object& v, const char* name) {
  const py::array a = py::array::ensure(v);
  if (a && a.dtype().kind() == 'c')
    throw py::value_error(std::string(name) + " is complex; K is real: apply it to " + name + ".real and " + name +
                          ".imag (jacond.linear_operator does)");
  try {
    return py::cast<Dense>(v);
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(name) + (Dense::ColsAtCompileTime == 1 ? " must be a real vector" : " must be a real matrix") +
                         ", got " + py::str(py::type::of(v)).cast<std::string>());
  }
}

// The tokens X of a JacobianOperator, read as real_operand reads a product's operand (numpy would
// drop a complex X's imaginary part with only a ComplexWarning); None is a one-line ValueError, as
// jacond's other entry points say it, not pybind11's list of overloads.
Mat token_operand(const py::object& X) {
  if (X.is_none()) throw py::value_error("X is None; expected an array");
  const py::array a = py::array::ensure(X);
  if (a && a.dtype().kind() == 'c')
    throw py::value_error("X is complex; jacond's weights, tokens and matrices are real");
  return real_operand<Mat>(X, "X");
}

}  // namespace

void bind_operators(py::module_& m) {
  py::class_<JacobianOperator>(m, "JacobianOperator", R"(A block Jacobian K applied matrix-free (JVP / VJP), never formed.

JacobianOperator(block, X, matrix, skip="full", space="full"): matrix one of K_sa, B_sa, E_sa (bare
attention at LN1(X)), K_sab, K_mlp (bare MLP at LN2(X1)), K_ffn. Vectors are vec(X) in column-major
order: x = dX.ravel(order="F"). space="ln-complement" (K_sab, K_ffn) restricts the input to the
complement of the LayerNorm's structural nullspace span{1, x̂_i} per token: nd x n(d-2), input index
j + b*n is token j, complement coordinate b. Holds its own copy of the weights and the forward pass.)")
      .def(py::init([](const BlockWeights& w, const py::object& X, const std::string& matrix, const std::string& skip,
                       const std::string& space) {
             return std::make_unique<JacobianOperator>(w, token_operand(X), matrix, skip, space);
           }),
           py::arg("block"), py::arg("X"), py::arg("matrix"), py::arg("skip") = "full", py::arg("space") = "full")
      .def_property_readonly("shape", [](const JacobianOperator& op) { return py::make_tuple(op.rows(), op.cols()); })
      .def_property_readonly("matrix", &JacobianOperator::matrix)
      .def_property_readonly("space", &JacobianOperator::space)
      .def("matvec", [](const JacobianOperator& op, const py::object& x) { return op.matvec(real_operand<Vec>(x, "x")); },
           py::arg("x"), "K x (x real)")
      .def("rmatvec", [](const JacobianOperator& op, const py::object& y) { return op.rmatvec(real_operand<Vec>(y, "y")); },
           py::arg("y"), "Kᵀ y (y real)")
      .def("matmat", [](const JacobianOperator& op, const py::object& X) { return op.matmat(real_operand<Mat>(X, "X")); },
           py::arg("X"), "K X, column by column (X real)");
  m.def("dense_jacobian", &dense_jacobian, py::arg("block"), py::arg("X"), py::arg("matrix"), py::arg("skip") = "full",
        py::arg("space") = "full",
        "The Jacobian assembled densely from its closed form (nd x nd; rows and columns in vec order; "
        "nd x n(d-2) on space='ln-complement', the operator's bases).");
  m.def("operator_names", &operator_names, "The Jacobians JacobianOperator and dense_jacobian take.");
}

}  // namespace jacond::python
