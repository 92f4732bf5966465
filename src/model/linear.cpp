#include "model/linear.hpp"

#include "model/ops.hpp"

namespace cortiq::model {

MatF LinearWeights::apply(const MatF& x) const {
    CORTIQ_ASSERT(x.cols() == in_features(), "{} vs {}", x.cols(), in_features());
    MatF y(x.rows(), out_features());
    apply(x.data(), x.rows(), y.data());
    return y;
}

Linear Linear::share() const {
    Linear l;
    if (w) l.w = w->share();
    l.bias = bias;
    return l;
}

DenseLinear::DenseLinear(MatF w) : w_(std::make_shared<const MatF>(std::move(w))) {}
DenseLinear::DenseLinear(std::shared_ptr<const MatF> w) : w_(std::move(w)) {
    CORTIQ_ASSERT(w_ != nullptr);
}

void DenseLinear::apply(const float* x, int64_t rows, float* y) const {
    matmul_wt(x, rows, w_->cols(), *w_, y);
}

void Linear::forward(const MatF& x, MatF& y) const {
    CORTIQ_ASSERT(w && x.cols() == w->in_features(), "{} vs {}", x.cols(), w->in_features());
    const int64_t m = w->out_features();
    if (y.rows() != x.rows() || y.cols() != m ||
        static_cast<int64_t>(y.vec().size()) != x.rows() * m)  // moved-from
        y = MatF(x.rows(), m);
    w->apply(x.data(), x.rows(), y.data());
    if (bias.empty()) return;
    CORTIQ_ASSERT(static_cast<int64_t>(bias.size()) == m);
    for (int64_t i = 0; i < x.rows(); ++i) {
        float* yi = y.row(i);
        for (int64_t j = 0; j < m; ++j) yi[j] += bias[static_cast<size_t>(j)];
    }
}

}  // namespace cortiq::model
