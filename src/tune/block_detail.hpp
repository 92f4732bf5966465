// What the stages of tune/block.cpp and tune/delta_block.cpp share: a linear
// layer's forward and backward (BLR or dense, with its bias), and the mixers
// of the two block kinds.
#pragma once

#include <optional>
#include <vector>

#include "tune/block.hpp"
#include "tune/grad_ops.hpp"

namespace cortiq::tune::detail {

template <class T>
void lin_forward(const LinearT<T>& l, const T* x, int64_t rows, std::vector<T>& y,
                 BlrCacheT<T>& cache) {
    y.resize(static_cast<size_t>(rows * l.m));
    if (l.blr) {
        blr_forward(*l.blr, x, rows, y.data(), cache);
        if (!l.bias.empty())
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < l.m; ++j) y[i * l.m + j] += l.bias[j];
    } else {
        linear_forward(x, rows, l.n, l.w.data(), l.m, l.bias.empty() ? nullptr : l.bias.data(),
                       y.data());
    }
}

// dx (rows × n) = ∂/∂x of the layer given dy, added into dx when `add`;
// the BLR gradients into g.
template <class T>
void lin_backward(const LinearT<T>& l, const T* x, int64_t rows, const BlrCacheT<T>& cache,
                  const T* dy, std::vector<T>& dx, bool add, std::optional<BlrGradT<T>>& g,
                  std::vector<T>& scratch) {
    dx.resize(static_cast<size_t>(rows * l.n));
    T* out = dx.data();
    if (add) {
        scratch.resize(static_cast<size_t>(rows * l.n));
        out = scratch.data();
    }
    if (l.blr)
        blr_backward(*l.blr, x, rows, cache, dy, out, *g);
    else
        linear_backward(dy, x, rows, l.n, l.w.data(), l.m, out, static_cast<T*>(nullptr),
                        static_cast<T*>(nullptr));
    if (add)
        for (size_t i = 0; i < scratch.size(); ++i) dx[i] += scratch[i];
}

// The Gated DeltaNet mixer (tune/delta_block.cpp): a.n1 → mix (out_proj's
// output, N × hidden), keeping what the backward reads in a.
template <class T>
void delta_mixer_forward(const BlockParamsT<T>& p, const BlockDims& d, BlockActsT<T>& a,
                         std::vector<T>& mix);
// Given dmix: dn1 (N × hidden) overwritten, the BLR gradients into g.
template <class T>
void delta_mixer_backward(const BlockParamsT<T>& p, const BlockDims& d, BlockActsT<T>& a,
                          const T* dmix, std::vector<T>& dn1, BlockGradsT<T>& g);

}  // namespace cortiq::tune::detail
