// The token embedding: a float table, or a compressed payload (BLR or sign)
// whose rows are formed per token from the packed bits (SPEC §9), never the
// whole table. Row t of a BLR embedding Ŵ = Σ_p diag(h_p) S_U,p diag(ℓ_p) S_V,pᵀ
// diag(g_p) is
//   Ŵ[t, :] = Σ_p g_p ∘ (S_V,p c_p),  c_p[k] = h_p[t] · ℓ_p[k] · S_U,p[t, k],
// one axpy over the r sign rows of S_Vᵀ per path: r·n adds per token. A sign
// payload's row is h[t] · S[t, :] ∘ g. A tied head shares the same storage.
//
// A float table may also stay in its memory-mapped checkpoint (mapped()):
// rows are read and converted per token, dense() reads the whole table and
// gives its pages back, so a model whose embedding goes to the GPU never
// holds it in host memory (a 128k-word vocabulary at hidden 4096 is 2.1 GB
// in float32).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "blr/packed.hpp"
#include "core/matrix.hpp"
#include "model/mapped_linear.hpp"

namespace cortiq::model {

class Embedding {
  public:
    Embedding() = default;
    explicit Embedding(std::shared_ptr<const MatF> table);
    explicit Embedding(std::shared_ptr<const blr::PackedWeight> packed);
    // A float table left in its mapped file (read as `mapped` reads it).
    explicit Embedding(std::shared_ptr<const MappedLinear> mapped);

    int64_t vocab() const;
    int64_t dim() const;
    bool packed() const { return packed_ != nullptr; }
    bool mapped() const { return mapped_ != nullptr; }
    // The float table held in memory (a float embedding that is not mapped).
    const MatF& table() const;
    const std::shared_ptr<const MatF>& table_ptr() const { return table_; }
    // The float table: the one held, or a copy read from the file (mapped)
    // or dequantised (compressed).
    std::shared_ptr<const MatF> float_table() const;
    // A mapped embedding's weight in the file (null else).
    const std::shared_ptr<const MappedLinear>& mapped_ptr() const { return mapped_; }
    // The payload (a compressed embedding only).
    const std::shared_ptr<const blr::PackedWeight>& packed_ptr() const { return packed_; }

    // The rows of `tokens` (each id checked against the vocabulary): T × dim.
    MatF rows(std::span<const int32_t> tokens) const;
    // Row t into out (dim values); t must be in range.
    void row(int32_t t, float* out) const;
    // The whole table as floats: the table itself, or the payload dequantised
    // (float64 products rounded once, as blr::dequant_any).
    MatF dense() const;
    // Bytes held in memory: the float table, or the payload's scales and bits
    // plus the float copies of ℓ and g kept for the lookups (0 if mapped).
    int64_t resident_bytes() const;

  private:
    std::shared_ptr<const MatF> table_;
    std::shared_ptr<const blr::PackedWeight> packed_;
    std::vector<float> l_, g_;  // per path: ℓ (r values), g (n values), float32
    std::shared_ptr<const MappedLinear> mapped_;
};

}  // namespace cortiq::model
