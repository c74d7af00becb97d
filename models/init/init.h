// Initializations of one ViT block (docs/design.md §3), written as timm-named LibTorch tensors.
//
// Math is stated in the paper's row-vector convention (docs/design.md §2): Q = Y W^Q with W^Q ∈ R^{d×d},
// head h owning columns [h·d_h, (h+1)·d_h). A timm/LibTorch Linear stores weight = Wᵀ (out×in),
// so the tensors written here are transposes:
//   attn.qkv.weight [3d, d]  rows [0,d) = (W^Q)ᵀ, rows [d,2d) = (W^K)ᵀ, rows [2d,3d) = (W^V)ᵀ
//   attn.proj.weight [d, d]  = (W^O)ᵀ
//   mlp.fc1.weight [hidden, d] = W_1ᵀ,   mlp.fc2.weight [d, hidden] = W_2ᵀ
//
// Schemes (docs/design.md §3):
//   timm     Linear weights trunc_normal(0, 0.02, cut at ±2 absolute), biases 0, LayerNorm 1/0.
//   ours     Cutting the Skip §5 with (α, β, c):
//              V/O: G ~ N(0,1)^{d×d}, G = U S Vᵀ, W^V = c·U, W^O = c·Vᵀ  ⇒ W^V W^O = c² U Vᵀ, κ = 1.
//              Q/K per head (paper Eq. 11): T_h = α Z_h + β I_d, Z_h ~ N(0, 1/d)^{d×d},
//                T_h = U S Vᵀ, W^Q_h = U[:, :d_h] sqrt(S[:d_h]), W^K_h = V[:, :d_h] sqrt(S[:d_h]),
//                so W^Q_h W^K_hᵀ is the best rank-d_h approximation of T_h (exact when heads = 1).
//   mimetic  Trockman & Kolter (2023): Q/K as `ours` with α = β = 0.7 (fixed);
//              V/O: T = 0.4 Z − 0.4 I (Z ~ N(0, 1/d)), T = U S Vᵀ, W^V = U sqrt(S), W^O = sqrt(S) Vᵀ.
//   MLP      `cfg.mlp` picks it for every scheme: kTimm (trunc_normal) or kDks (DKS scaled uniform
//            orthogonal: Haar orthogonal from QR of a Gaussian max(out,in)×min(out,in) with the
//            sign(diag R) fix, shaped out×in, times max(sqrt(out/in), 1)). Biases 0.
//            default_mlp_init(kOurs) = kDks, otherwise kTimm; InitConfig::for_scheme sets it.
//
// Determinism: block `layer` draws from its own CPU generator (at::mt19937) seeded with
// layer_seed(cfg.seed, layer), never the global one, in the fixed order documented in init.cpp.
// The same (seed, layer, shapes, config) gives bitwise identical tensors on every run.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <string>

#include "models/io/tensor_map.h"

namespace jacond::models {

enum class InitScheme { kTimm, kOurs, kMimetic };
enum class MlpInit { kTimm, kDks };

struct InitConfig {
  InitScheme scheme = InitScheme::kTimm;
  double alpha = 2.0, beta = 0.6, c = 3.0;  // `ours` (paper ViT-B values); ignored by timm/mimetic
  MlpInit mlp = MlpInit::kTimm;             // `ours` uses kDks in the paper: see default_mlp_init
  uint64_t seed = 0;

  /// A config for `scheme` with its paper defaults (ViT-B values for `ours`, its MLP init).
  static InitConfig for_scheme(InitScheme scheme, uint64_t seed = 0);
};

/// "timm" | "ours" | "mimetic"; throws std::invalid_argument listing the valid names.
InitScheme parse_init_scheme(const std::string& s);
std::string to_string(InitScheme s);
/// "timm" | "dks"; throws std::invalid_argument listing the valid names.
MlpInit parse_mlp_init(const std::string& s);
std::string to_string(MlpInit m);
/// The MLP init a scheme uses in the papers: kDks for `ours`, kTimm otherwise.
MlpInit default_mlp_init(InitScheme s);

/// Seed of block `layer`'s generator: splitmix64 mixing of (seed, layer). Only the low 32 bits
/// reach at::mt19937 (it truncates); they depend on every bit of seed and layer.
uint64_t layer_seed(uint64_t seed, int64_t layer);

/// Writes the fp64 timm-named tensors of block `layer` (keys "blocks.{layer}.norm1.weight", ...,
/// see the header comment) into `out`, replacing existing entries with the same keys.
/// Throws std::invalid_argument for non-positive sizes, d % heads != 0, non-finite α, β, c.
void init_block(TensorMap& out, int64_t layer, int64_t d, int64_t heads, int64_t hidden,
                const InitConfig& cfg);

// ---------------------------------------------------------------------------------------------
// Building blocks (fp64, CPU), exposed for other initializers (pos_embed, head) and tests.

/// Truncated normal N(mean, std²) restricted to [a, b] (absolute bounds) by the inverse-CDF
/// method: u ~ U(Φ(α'), Φ(β')) with α' = (a−mean)/std, β' = (b−mean)/std, x = mean + std·Φ⁻¹(u),
/// Φ⁻¹(u) = √2 erfinv(2u − 1); clamped to [a, b] against rounding at the ends. One uniform draw
/// per entry, row-major.
at::Tensor trunc_normal(at::IntArrayRef shape, double mean, double std, double a, double b,
                        at::Generator& gen);

/// DKS scaled uniform orthogonal weight of torch shape out×in: G ~ N(0,1)^{max×min}, G = Q R,
/// Q ← Q·diag(sign(diag R)) (Haar), W = Q (out ≥ in) or Qᵀ (out < in), times max(sqrt(out/in), 1).
at::Tensor dks_orthogonal(int64_t out, int64_t in, at::Generator& gen);

}  // namespace jacond::models
