// A float linear layer left in its memory-mapped checkpoint: dense() reads
// the weight (converted to float32) and keeps nothing, so a model whose
// weights only go elsewhere — to the GPU, to the encoder — never holds its
// layers in host memory. quantize --device gpu loads models so: a 32-layer
// 8B model's 28 GB of float32 layers never sit on the host together. A
// product on the host (apply) keeps the float32 weight from its first use
// on, so a CPU forward runs as fast as, and holds what, an eager load does.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "io/safetensors.hpp"
#include "model/linear.hpp"

namespace cortiq::model {

class MappedLinear final : public LinearWeights {
  public:
    // `name` is a 2-D float tensor of m × n in `ckpt` (checked here).
    MappedLinear(std::shared_ptr<const io::Checkpoint> ckpt, std::string name, int64_t m,
                 int64_t n);
    int64_t in_features() const override { return s_->n; }
    int64_t out_features() const override { return s_->m; }
    // DenseLinear's product on the weight as read: the same bits.
    void apply(const float* x, int64_t rows, float* y) const override;
    // The weight read from the file (its pages given back), or the copy
    // apply() keeps.
    MatF dense() const override;
    std::string kind() const override { return "dense"; }
    int64_t resident_bytes() const override;
    // The file and tensor the weight is read from.
    const std::shared_ptr<const io::Checkpoint>& checkpoint() const { return s_->ckpt; }
    const std::string& tensor_name() const { return s_->name; }
    // Another holder of the same weight (and of the copy apply() keeps).
    std::unique_ptr<LinearWeights> share() const override {
        return std::unique_ptr<MappedLinear>(new MappedLinear(s_));
    }

  private:
    struct State {
        std::shared_ptr<const io::Checkpoint> ckpt;
        std::string name;
        int64_t m = 0, n = 0;
        std::mutex mu;
        std::shared_ptr<const MatF> kept;  // after the first apply()
    };
    explicit MappedLinear(std::shared_ptr<State> s) : s_(std::move(s)) {}
    std::shared_ptr<const MatF> kept() const;

    std::shared_ptr<State> s_;
};

}  // namespace cortiq::model
