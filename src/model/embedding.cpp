#include "model/embedding.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "blr/sign_kernels.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/parallel.hpp"

namespace cortiq::model {

Embedding::Embedding(std::shared_ptr<const MatF> table) : table_(std::move(table)) {
    CORTIQ_ASSERT(table_ && table_->rows() > 0 && table_->cols() > 0);
}

Embedding::Embedding(std::shared_ptr<const blr::PackedWeight> packed) : packed_(std::move(packed)) {
    CORTIQ_ASSERT(packed_ && packed_->m > 0 && packed_->n > 0 && (packed_->sign || packed_->r > 0));
    const auto& w = *packed_;
    for (size_t i = 0; i < w.l.size(); ++i) l_.push_back(half_to_float(w.l[i]));
    for (size_t i = 0; i < w.g.size(); ++i) g_.push_back(half_to_float(w.g[i]));
}

Embedding::Embedding(std::shared_ptr<const MappedLinear> mapped) : mapped_(std::move(mapped)) {
    CORTIQ_ASSERT(mapped_ && mapped_->out_features() > 0 && mapped_->in_features() > 0);
}

int64_t Embedding::vocab() const {
    return packed_ ? packed_->m : table_ ? table_->rows() : mapped_->out_features();
}

int64_t Embedding::dim() const {
    return packed_ ? packed_->n : table_ ? table_->cols() : mapped_->in_features();
}

const MatF& Embedding::table() const {
    CORTIQ_ASSERT(table_, "a compressed or mapped embedding holds no float table");
    return *table_;
}

std::shared_ptr<const MatF> Embedding::float_table() const {
    if (table_) return table_;
    return std::make_shared<const MatF>(dense());
}

// Row t of a mapped table, converted (and checked finite) as a load would.
static void mapped_row(const io::Checkpoint& ckpt, const std::string& name, int64_t cols, int32_t t,
                       float* out) {
    io::TensorInfo row = ckpt.info(name);
    const size_t esize = io::dtype_size(row.dtype);
    row.shape = {1, cols};
    row.name = fmt::format("{} (row {})", name, t);
    const auto bytes = ckpt.bytes(name).subspan(static_cast<size_t>(t) * cols * esize,
                                                static_cast<size_t>(cols) * esize);
    const auto v = io::to_floats(row, bytes, ckpt.file_of(name).path());
    std::copy(v.begin(), v.end(), out);
}

void Embedding::row(int32_t t, float* out) const {
    if (table_) {
        std::copy_n(table_->row(t), table_->cols(), out);
        return;
    }
    if (mapped_) {
        mapped_row(*mapped_->checkpoint(), mapped_->tensor_name(), dim(), t, out);
        return;
    }
    const auto& w = *packed_;
    const int64_t n = w.n, r = w.r;
    if (w.sign) {  // h[t] · S[t, :] ∘ g
        const float h = half_to_float(w.h[static_cast<size_t>(t)]);
        const blr::SignRows s = w.svt(0);
        for (int64_t j = 0; j < n; ++j) out[j] = (s.at(t, j) ? -h : h) * g_[j];
        return;
    }
    thread_local std::vector<float> c, acc;
    c.resize(static_cast<size_t>(r));
    acc.resize(static_cast<size_t>(n));
    std::fill_n(out, n, 0.0f);
    for (int p = 0; p < w.paths; ++p) {
        const float h = half_to_float(w.h[static_cast<size_t>(p * w.m + t)]);
        const float* l = l_.data() + p * r;
        const blr::SignRows su = w.sut(p);  // r rows of m bits: S_U[t, k] is bit (k, t)
        for (int64_t k = 0; k < r; ++k) c[k] = su.at(k, t) ? -h * l[k] : h * l[k];
        std::fill(acc.begin(), acc.end(), 0.0f);
        blr::sign_axpy(w.svt(p), c.data(), acc.data());  // S_V c
        const float* g = g_.data() + p * n;
        for (int64_t j = 0; j < n; ++j) out[j] += g[j] * acc[j];
    }
}

MatF Embedding::rows(std::span<const int32_t> tokens) const {
    const int64_t T = static_cast<int64_t>(tokens.size()), d = dim(), V = vocab();
    for (int64_t i = 0; i < T; ++i)
        CORTIQ_CHECK(tokens[i] >= 0 && tokens[i] < V,
                     "token id {} at position {} is outside the vocabulary (0..{})", tokens[i], i,
                     V - 1);
    MatF out(T, d);
    // a packed row costs r·n adds: worth threads over a prompt's tokens
    const int64_t work = packed_ ? std::max<int64_t>(packed_->r, 1) * d : d;
    parallel_for(
        0, T, [&](int64_t i) { row(tokens[i], out.row(i)); },
        std::max<int64_t>(1, kSerialWork / work));
    return out;
}

MatF Embedding::dense() const {
    if (table_) return *table_;
    if (mapped_) return mapped_->dense();
    MatF out(vocab(), dim());
    if (packed_->sign) {
        for (int64_t t = 0; t < vocab(); ++t) row(static_cast<int32_t>(t), out.row(t));
        return out;
    }
    return packed_->to_factors().dense().cast<float>();
}

int64_t Embedding::resident_bytes() const {
    if (table_) return 4 * table_->size();
    if (mapped_) return 0;  // its lookups read rows; dense() keeps nothing
    return packed_->resident_bytes() + 4 * static_cast<int64_t>(l_.size() + g_.size());
}

}  // namespace cortiq::model
