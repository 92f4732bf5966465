// The scale gauge of one path (h·a, g·b, ℓ/(ab) leave Ŵ unchanged) chosen so
// that every stored f16 scale is finite and no non-zero scale rounds to zero.
#pragma once

#include "core/matrix.hpp"

namespace cortiq::blr {

struct Gauge {
    double a = 1, b = 1;  // h·a, g·b, ℓ/(ab)
};

// The geometric-mean balance of pack (the three vectors centred on one
// magnitude) when it keeps every non-zero |scale| inside f16's normal range,
// else the nearest gauge (in log scale) that does, else one that keeps them
// inside the subnormal range. When no gauge can (the vectors' own dynamic
// range exceeds f16's), throws cortiq::Error saying so. Zero scales (dead
// rows, columns or latents) stay zero and constrain nothing. Every scale must
// be finite (an invariant of the encoders).
Gauge f16_gauge(const VecD& h, const VecD& l, const VecD& g);

// The sign payload's gauge (h·a, g/a): a = 1 when both fit f16, else the
// nearest a (in log scale) that makes them fit; throws like f16_gauge.
double f16_balance(const VecD& h, const VecD& g);

}  // namespace cortiq::blr
