// Helpers of the block forwards (block.cpp, delta_block.cpp); internal to
// src/model.
#pragma once

#include <string_view>

#include "core/blas_threads.hpp"
#include "model/block.hpp"

namespace cortiq::model::detail {

// A moved-from Mat keeps its rows/cols but not its storage: check both.
inline void ensure(MatF& m, int64_t rows, int64_t cols) {
    if (m.rows() != rows || m.cols() != cols || static_cast<int64_t>(m.vec().size()) != rows * cols)
        m = MatF(rows, cols);
}

// The hook runs with BLAS threaded again (it may accumulate Grams with BLAS).
inline void call_hook(const BlockContext& ctx, std::string_view input, const MatF& x) {
    if (!ctx.hook || !*ctx.hook) return;
    ThreadedBlas blas;
    (*ctx.hook)(ctx.layer, input, x.data(), x.rows(), x.cols());
}

}  // namespace cortiq::model::detail
