// The weight of one linear layer, behind an interface so that a layer can be
// a dense float32 matrix now and a BLR payload (or anything that maps a batch
// of inputs to outputs) later.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::model {

class LinearWeights {
  public:
    virtual ~LinearWeights() = default;
    virtual int64_t in_features() const = 0;   // n
    virtual int64_t out_features() const = 0;  // m
    // y (rows × m) = x (rows × n) · Wᵀ, both row-major and contiguous.
    virtual void apply(const float* x, int64_t rows, float* y) const = 0;
    // W as a dense m × n matrix (for calibration, encoding, tests).
    virtual MatF dense() const = 0;
    virtual std::string kind() const = 0;  // "dense", "blr", "sign"
    // Bytes this layer holds in memory (a shared matrix counts in full).
    virtual int64_t resident_bytes() const = 0;
    // Another holder of the same weights (no copy of the matrix or payload).
    virtual std::unique_ptr<LinearWeights> share() const = 0;

    MatF apply(const MatF& x) const;
};

// W held as a float32 matrix (possibly shared, e.g. a tied lm_head).
class DenseLinear final : public LinearWeights {
  public:
    explicit DenseLinear(MatF w);
    explicit DenseLinear(std::shared_ptr<const MatF> w);
    int64_t in_features() const override { return w_->cols(); }
    int64_t out_features() const override { return w_->rows(); }
    void apply(const float* x, int64_t rows, float* y) const override;
    MatF dense() const override { return *w_; }
    std::string kind() const override { return "dense"; }
    int64_t resident_bytes() const override { return 4 * w_->size(); }
    std::unique_ptr<LinearWeights> share() const override {
        return std::make_unique<DenseLinear>(w_);
    }
    const MatF& weight() const { return *w_; }

  private:
    std::shared_ptr<const MatF> w_;
};

// A linear layer: weight plus optional bias (kept apart from the weight so a
// compressed weight keeps its float bias).
struct Linear {
    std::unique_ptr<LinearWeights> w;
    std::vector<float> bias;  // empty or out_features values

    int64_t in_features() const { return w->in_features(); }
    int64_t out_features() const { return w->out_features(); }
    // y = x Wᵀ + b; y is resized to x.rows() × out_features.
    void forward(const MatF& x, MatF& y) const;
    // A linear layer holding the same weights (the bias copied); empty stays empty.
    Linear share() const;
};

}  // namespace cortiq::model
