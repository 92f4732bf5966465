// Row-major dense matrices: an owning Mat<T> and a non-owning MatView<T>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.hpp"

namespace cortiq {

template <class T>
struct MatView {
    T* data = nullptr;
    int64_t rows = 0, cols = 0, ld = 0;  // ld: elements between row starts

    T& operator()(int64_t i, int64_t j) const { return data[i * ld + j]; }
    T* row(int64_t i) const { return data + i * ld; }
};

template <class T>
class Mat {
  public:
    Mat() = default;
    Mat(int64_t rows, int64_t cols, T fill = T{})
        : rows_(rows), cols_(cols), d_(static_cast<size_t>(rows * cols), fill) {
        CORTIQ_ASSERT(rows >= 0 && cols >= 0);
    }
    Mat(int64_t rows, int64_t cols, std::vector<T> data)
        : rows_(rows), cols_(cols), d_(std::move(data)) {
        CORTIQ_ASSERT(static_cast<int64_t>(d_.size()) == rows * cols, "{}x{} vs {}", rows, cols,
                      d_.size());
    }
    Mat(const Mat&) = default;
    Mat& operator=(const Mat&) = default;
    // A moved-from matrix is empty (0 × 0), never a shape without storage.
    Mat(Mat&& o) noexcept : rows_(o.rows_), cols_(o.cols_), d_(std::move(o.d_)) {
        o.rows_ = o.cols_ = 0;
    }
    Mat& operator=(Mat&& o) noexcept {
        if (this != &o) {
            rows_ = o.rows_;
            cols_ = o.cols_;
            d_ = std::move(o.d_);
            o.rows_ = o.cols_ = 0;
        }
        return *this;
    }
    static Mat identity(int64_t n) {
        Mat m(n, n);
        for (int64_t i = 0; i < n; ++i) m(i, i) = T(1);
        return m;
    }

    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    int64_t size() const { return rows_ * cols_; }
    bool empty() const { return d_.empty(); }
    T* data() { return d_.data(); }
    const T* data() const { return d_.data(); }
    T* row(int64_t i) { return d_.data() + i * cols_; }
    const T* row(int64_t i) const { return d_.data() + i * cols_; }
    T& operator()(int64_t i, int64_t j) { return d_[static_cast<size_t>(i * cols_ + j)]; }
    const T& operator()(int64_t i, int64_t j) const {
        return d_[static_cast<size_t>(i * cols_ + j)];
    }
    std::vector<T>& vec() { return d_; }
    const std::vector<T>& vec() const { return d_; }
    std::span<T> span() { return d_; }
    std::span<const T> span() const { return d_; }
    MatView<T> view() { return {d_.data(), rows_, cols_, cols_}; }
    MatView<const T> view() const { return {d_.data(), rows_, cols_, cols_}; }

    Mat transposed() const {
        Mat t(cols_, rows_);
        for (int64_t i = 0; i < rows_; ++i)
            for (int64_t j = 0; j < cols_; ++j) t(j, i) = (*this)(i, j);
        return t;
    }
    template <class U>
    Mat<U> cast() const {
        Mat<U> o(rows_, cols_);
        for (size_t k = 0; k < d_.size(); ++k) o.vec()[k] = static_cast<U>(d_[k]);
        return o;
    }

  private:
    int64_t rows_ = 0, cols_ = 0;
    std::vector<T> d_;
};

using MatD = Mat<double>;
using MatF = Mat<float>;
using VecD = std::vector<double>;

}  // namespace cortiq
