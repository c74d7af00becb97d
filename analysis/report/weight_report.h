// Data-free reports of one block: conditioning read off the weights alone (`jacond audit
// --data-free`, the Python module's audit_state_dict), in this order:
//   W_VO          W^V W^O                      d×d
//   W_VO_h        W^V_h W^O_h   per head       d×d of rank d_h: κ over its range σ_1/σ_{d_h}
//   W_QK_h        W^Q_h W^K_hᵀ  per head       same (the bilinear form of the attention logits)
//   W_Q, W_K, W_V, W_O, W_1, W_2               each weight matrix (σ_max = spectral norm)
// Rank-d_h matrices carry space = "rank-<d_h>". All by the full SVD (dense-svd), exact.
#pragma once

#include <string>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"

namespace jacond {

/// The names above, in report order.
const std::vector<std::string>& weight_matrix_names();

std::vector<ConditionReport> weight_reports(const BlockWeights& w);

}  // namespace jacond
