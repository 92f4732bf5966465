// Products with packed sign rows (SPEC §9), the two steps of a BLR layer:
//   dot:  out[k] = Σ_j s(k,j) x[j]          t = S_Vᵀ (g ∘ x)
//   axpy: out[j] += Σ_k c[k] s(k,j)         u = S_U (ℓ ∘ t), with S_Uᵀ stored by rows
// A sign bit is an add or a subtract; nothing is multiplied. One vector
// (decode) uses SIMD kernels that flip the float sign bit of x under the bit
// mask (AVX-512, AVX2 or portable, chosen at run time); a batch of rows
// (prefill, scoring) expands tiles of bits to ±1.0f and hands them to sgemm.
#pragma once

#include <cstdint>
#include <string>

#include "blr/packed.hpp"

namespace cortiq::blr {

enum class SignIsa { portable, avx2, avx512 };
SignIsa best_sign_isa();  // of this CPU
// The kernels use this one (default: best_sign_isa()); set for tests and
// benchmarks. Returns the previous one.
SignIsa set_sign_isa(SignIsa isa);
SignIsa sign_isa();
std::string isa_name(SignIsa isa);

// One vector: out[k] = Σ_j s(k,j) x[j] for k in [0, s.rows), threads over k.
void sign_dot(const SignRows& s, const float* x, float* out);
// One vector: out[j] += Σ_k c[k] s(k,j) for j in [0, s.cols), threads over j.
void sign_axpy(const SignRows& s, const float* c, float* out);
// A batch of T rows: out (T × s.rows) = x (T × s.cols) · Sᵀ.
void sign_dot_batch(const SignRows& s, const float* x, int64_t T, float* out);
// A batch of T rows: out (T × s.cols) += c (T × s.rows) · S.
void sign_axpy_batch(const SignRows& s, const float* c, int64_t T, float* out);

}  // namespace cortiq::blr
