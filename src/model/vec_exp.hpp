// The exp-heavy loops of the runtime (attention softmax, SwiGLU, the
// logsumexp of the logits) with explicit AVX-512 / AVX2 kernels chosen at run
// time and a portable loop: GCC leaves the portable loop scalar (its clamp and
// bit-cast defeat the vectoriser), and it took over a third of a `ppl` run.
// All use one exp for x ≤ 0 (Cephes expf: x = n·ln2 + r, a degree-5
// polynomial in r, 2ⁿ through the exponent bits; relative error ~2e-7;
// 0 below −87).
#pragma once

#include <cstdint>

namespace cortiq::model {

// The portable exp of the kernels, for x ≤ 0.
float exp_nonpositive(float x);

// s[j] ← exp(s[j] − shift) for j < n (every s[j] ≤ shift); returns Σ s[j].
float exp_shifted_inplace(float* s, int64_t n, float shift);
// Σ_j exp(l[j] − shift), summed in float per 256 values and in double across.
double sum_exp_shifted(const float* l, int64_t n, float shift);
// y = silu(gate) ∘ up, silu(z) = z / (1 + e^−z).
void silu_mul(const float* gate, const float* up, int64_t n, float* y);
// max_j s[j] (n ≥ 1)
float max_of(const float* s, int64_t n);

// Whether this CPU runs the AVX-512 kernels; set_portable_exp(true) makes the
// functions above use the portable loops instead (tests compare the two;
// CORTIQ_PORTABLE_EXP=1 in the environment does the same for a whole run).
bool simd_exp_available();
void set_portable_exp(bool portable);

}  // namespace cortiq::model
