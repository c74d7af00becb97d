#include "analysis/report/weight_report.h"

namespace jacond {
namespace {

// κ over the range of a rank-r product: the r largest singular values.
ConditionReport range_report(const Mat& P, Index r, const std::string& name, int head) {
  const Vec sv = singular_values(P);
  ConditionReport rep = report_from_singular_values(name, P.rows(), P.cols(), sv.head(r), "dense-svd");
  rep.space = "rank-" + std::to_string(r);
  rep.head = head;
  return rep;
}

}  // namespace

const std::vector<std::string>& weight_matrix_names() {
  static const std::vector<std::string> names = {"W_VO", "W_VO_h", "W_QK_h", "W_Q", "W_K", "W_V", "W_O", "W_1", "W_2"};
  return names;
}

std::vector<ConditionReport> weight_reports(const BlockWeights& w) {
  w.validate();
  const Index dh = w.head_dim();
  std::vector<ConditionReport> out;
  out.push_back(condition_svd(w.Wv * w.Wo, "W_VO"));
  for (Index h = 0; h < w.heads; ++h) {
    // Head h's columns of W_V, W_Q, W_K and rows of W_O (middleCols/middleRows: Eigen 3.4 deprecates
    // placeholders::all, Eigen 5 the bare Eigen::all).
    const Index h0 = h * dh;
    out.push_back(range_report(w.Wv.middleCols(h0, dh) * w.Wo.middleRows(h0, dh), dh, "W_VO_h", static_cast<int>(h)));
    out.push_back(range_report(w.Wq.middleCols(h0, dh) * w.Wk.middleCols(h0, dh).transpose(), dh, "W_QK_h", static_cast<int>(h)));
  }
  const std::pair<const Mat*, const char*> weights[] = {{&w.Wq, "W_Q"}, {&w.Wk, "W_K"}, {&w.Wv, "W_V"},
                                                        {&w.Wo, "W_O"}, {&w.W1, "W_1"}, {&w.W2, "W_2"}};
  for (const auto& [m, name] : weights) out.push_back(condition_svd(*m, name));
  return out;
}

}  // namespace jacond
