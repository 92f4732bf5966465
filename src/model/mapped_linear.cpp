#include "model/mapped_linear.hpp"

#include "core/error.hpp"

namespace cortiq::model {

MappedLinear::MappedLinear(std::shared_ptr<const io::Checkpoint> ckpt, std::string name, int64_t m,
                           int64_t n)
    : s_(std::make_shared<State>()) {
    CORTIQ_ASSERT(ckpt != nullptr);
    const io::TensorInfo& t = ckpt->info(name);
    const std::string& file = ckpt->file_of(name).path();
    CORTIQ_CHECK(t.shape.size() == 2 && t.shape[0] == m && t.shape[1] == n,
                 "{}: tensor '{}' has shape {}, expected [{}, {}]", file, name, t.shape_str(), m,
                 n);
    CORTIQ_CHECK(t.dtype == io::DType::F32 || t.dtype == io::DType::F16 ||
                     t.dtype == io::DType::BF16 || t.dtype == io::DType::F64,
                 "{}: tensor '{}' is not a float tensor", file, name);
    s_->ckpt = std::move(ckpt);
    s_->name = std::move(name);
    s_->m = m;
    s_->n = n;
}

std::shared_ptr<const MatF> MappedLinear::kept() const {
    const std::lock_guard<std::mutex> lock(s_->mu);
    return s_->kept;
}

MatF MappedLinear::dense() const {
    if (auto k = kept()) return *k;
    MatF w = s_->ckpt->load_matf(s_->name);
    s_->ckpt->drop_pages(s_->name);
    return w;
}

void MappedLinear::apply(const float* x, int64_t rows, float* y) const {
    std::shared_ptr<const MatF> w;
    {
        const std::lock_guard<std::mutex> lock(s_->mu);
        if (!s_->kept) {
            s_->kept = std::make_shared<const MatF>(s_->ckpt->load_matf(s_->name));
            s_->ckpt->drop_pages(s_->name);
        }
        w = s_->kept;
    }
    DenseLinear(w).apply(x, rows, y);
}

int64_t MappedLinear::resident_bytes() const {
    return kept() ? 4 * s_->m * s_->n : 0;
}

}  // namespace cortiq::model
