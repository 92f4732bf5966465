// A compressed linear layer run from its packed bits (SPEC §9): per path,
// t = S_Vᵀ (g ∘ x), t ← ℓ ∘ t, y += h ∘ (S_U t); a sign payload is
// y = h ∘ (S (g ∘ x)). The dense weight is formed only by dense(), on request.
#pragma once

#include <memory>

#include "blr/packed.hpp"
#include "model/linear.hpp"

namespace cortiq::model {

class BlrLinear final : public LinearWeights {
  public:
    explicit BlrLinear(blr::PackedWeight w);
    // Shares the payload (a tied head reads the compressed embedding's).
    explicit BlrLinear(std::shared_ptr<const blr::PackedWeight> w);
    int64_t in_features() const override { return w_->n; }
    int64_t out_features() const override { return w_->m; }
    void apply(const float* x, int64_t rows, float* y) const override;
    MatF dense() const override;  // float64 products, rounded once (as blr::dequant)
    std::string kind() const override { return w_->sign ? "sign" : "blr"; }
    int64_t resident_bytes() const override { return w_->resident_bytes(); }
    std::unique_ptr<LinearWeights> share() const override {
        return std::make_unique<BlrLinear>(w_);
    }
    const blr::PackedWeight& packed() const { return *w_; }
    const std::shared_ptr<const blr::PackedWeight>& packed_ptr() const { return w_; }

    // From this many rows on, apply() expands tiles of bits for sgemm instead
    // of running the one-vector kernels row by row.
    static constexpr int64_t kBatchRows = 4;

  private:
    std::shared_ptr<const blr::PackedWeight> w_;
};

}  // namespace cortiq::model
