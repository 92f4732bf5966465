// --plan auto and --file-bpw: bits per tensor from measured sensitivity under
// one budget of stored bits (a knapsack over bytes, solved by its Lagrangian).
//
// Each tensor i has a measured cost curve: D_i(b) = the growth of the model's
// KL divergence to the original (nats per token, held-out windows) when only
// tensor i is encoded at b bits per weight, measured at a few budgets b_k
// (sensitivity.cpp: 0.6·b₀, b₀ and 1.6·b₀) and interpolated linearly in ln D
// between them (the encoder's error falls about exponentially with b: on
// tiny-llama-6m, every tensor, e(0.55)/e(1.0) = 1.2–1.4 and e(2.0)/e(1.0) =
// 0.6–0.7; the KL grows with e²). The allocation stays inside the measured
// range: outside it the curve is a guess (a rank-1 tensor's damage is far
// beyond any extrapolation).
//
// With the costs separable, minimising Σ D_i(b_i) subject to Σ N_i·b_i ≤
// budget is solved on a grid of budgets through its Lagrangian: for a price λ
// every tensor takes argmin_b D_i(b) + λ·N_i·b, λ is bisected to the smallest
// price whose bits fit, and the bits left over go, one grid step at a time,
// to the tensor whose cost falls most per bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortiq::quant {

// The bits a payload of an m × n weight at budget `bpw` stores: the larger
// of the one- and two-path payloads the encoder may choose (blr::rank_for; a
// budget below rank 1 still stores one path of rank 1), header and padding
// included.
double payload_bits(int64_t m, int64_t n, double bpw);

struct TensorCost {
    std::string name;
    int64_t weights = 0;     // N_i = m·n
    int64_t m = 0, n = 0;    // its shape (0: bits counted as N_i·b)
    std::vector<double> b;   // the measured budgets, increasing
    std::vector<double> kl;  // D_i at each (≥ 0)
    // The tensor may stay as it is instead (an embedding or head in bf16):
    // keep_bits per weight, no cost.
    bool may_keep = false;
    double keep_bits = 16;
    // D_i(b) for b in [b.front(), b.back()] (clamped outside).
    double cost(double bpw) const;
    // payload_bits of its shape (without a shape: N_i·b).
    double bits(double bpw) const;
};

struct AllocationOptions {
    double min_bpw = 0.6, max_bpw = 1.6;  // the grid's range (inside every tensor's b)
    double step = 0.01;                   // the grid's step (bits per weight)
};

struct Allocation {
    std::vector<double> bpw;  // per tensor: a grid budget, or keep_bits when kept
    std::vector<bool> kept;   // left as it is (may_keep tensors only)
    double bits = 0;          // Σ TensorCost::bits(b_i), kept tensors N_i·keep_bits
    double predicted_kl = 0;  // Σ D_i(b_i)
};

// The allocation of least predicted cost whose bits fit `budget_bits`. Throws
// when even every tensor at min_bpw does not fit.
Allocation allocate_bits(const std::vector<TensorCost>& tensors, double budget_bits,
                         const AllocationOptions& opt);

}  // namespace cortiq::quant
