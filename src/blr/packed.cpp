#include "blr/packed.hpp"

#include <cstring>

#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "blr/sign.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace cortiq::blr {

namespace {

std::vector<uint16_t> halves(const uint8_t* p, uint64_t count) {
    std::vector<uint16_t> out(count);
    std::memcpy(out.data(), p, 2 * count);
    return out;
}

void append(std::vector<uint16_t>& dst, const std::vector<uint16_t>& src) {
    dst.insert(dst.end(), src.begin(), src.end());
}

void floats_into(const std::vector<uint16_t>& v, int64_t off, int64_t count,
                 std::vector<float>& out) {
    out.resize(static_cast<size_t>(count));
    halves_to_floats(v.data() + off, count, out.data());
}

// Version 1 payloads and sign payloads are rewritten into the version-2 stream
// through the float64 model (slow, but only for files of the first format).
PackedWeight from_model(const Factors& md) {
    PackedWeight pw;
    pw.m = md.m;
    pw.n = md.n;
    pw.r = md.r;
    pw.paths = static_cast<int>(md.paths.size());
    const uint64_t m = md.m, n = md.n, r = md.r;
    pw.bits.assign(words_for(sign_bits_total(m, n, r, pw.paths)) + 1, 0);
    for (int p = 0; p < pw.paths; ++p) {
        const Path& q = md.paths[p];
        // the scales came from f16 and go back exactly
        for (double v : q.h) pw.h.push_back(float_to_half(static_cast<float>(v)));
        for (double v : q.l) pw.l.push_back(float_to_half(static_cast<float>(v)));
        for (double v : q.g) pw.g.push_back(float_to_half(static_cast<float>(v)));
        // the u64 words of a little-endian host are the byte stream
        write_signs(q, m, n, r, p, reinterpret_cast<uint8_t*>(pw.bits.data()));
    }
    return pw;
}

}  // namespace

PackedWeight PackedWeight::from_payload(std::span<const uint8_t> bytes, const std::string& what) {
    validate_any(bytes, what);
    if (is_sign_payload(bytes)) {
        // header 32, h (m f16), g (n f16), padding to 8, m rows of ceil(n/64) words
        uint32_t dims[2];
        std::memcpy(dims, bytes.data() + 8, 8);
        PackedWeight pw;
        pw.sign = true;
        pw.paths = 1;
        pw.m = dims[0];
        pw.n = dims[1];
        const uint64_t m = pw.m, n = pw.n;
        pw.h = halves(bytes.data() + 32, m);
        pw.g = halves(bytes.data() + 32 + 2 * m, n);
        const uint64_t off = 32 + pad8(2 * (m + n)), words = m * words_for(n);
        pw.bits.assign(words + 1, 0);
        std::memcpy(pw.bits.data(), bytes.data() + off, 8 * words);
        return pw;
    }
    const Info in = info(bytes);
    if (in.version != kVersion) return from_model(unpack(bytes));
    PackedWeight pw;
    pw.m = in.m;
    pw.n = in.n;
    pw.r = in.r;
    pw.paths = in.paths;
    const uint64_t m = in.m, n = in.n, r = in.r;
    for (int p = 0; p < in.paths; ++p) {
        const uint8_t* s = bytes.data() + off_scales(m, n, r, p);
        append(pw.h, halves(s + off_h(), m));
        append(pw.l, halves(s + off_l(m), r));
        append(pw.g, halves(s + off_g(m, r), n));
    }
    const uint64_t words = words_for(sign_bits_total(m, n, r, in.paths));
    pw.bits.assign(words + 1, 0);
    std::memcpy(pw.bits.data(), bytes.data() + off_signs(m, n, r, in.paths), 8 * words);
    return pw;
}

SignRows PackedWeight::svt(int p) const {
    if (sign) return {bits.data(), 0, 64 * words_for(static_cast<uint64_t>(n)), m, n};
    const uint64_t um = m, un = n, ur = r;
    return {bits.data(), bit_svt(um, un, ur, p), un, r, n};
}

SignRows PackedWeight::sut(int p) const {
    CORTIQ_ASSERT(!sign, "a sign payload has no S_U");
    const uint64_t um = m, un = n, ur = r;
    return {bits.data(), bit_sut(um, un, ur, p), um, r, m};
}

void PackedWeight::scales(int p, std::vector<float>& hs, std::vector<float>& ls,
                          std::vector<float>& gs) const {
    floats_into(h, p * m, m, hs);
    floats_into(l, p * r, r, ls);
    floats_into(g, p * n, n, gs);
}

namespace {

// rows × r values, row i = bits (k, i) of `s` for k < r (its rows are the
// matrix's columns), in memory order, rows over the threads.
template <class T>
void sign_values(const SignRows& s, int64_t rows, int64_t r, T* out) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < r; ++k) out[i * r + k] = s.at(k, i) ? T(-1) : T(1);
}

}  // namespace

void PackedWeight::signs_into(int p, float* su, float* sv) const {
    CORTIQ_ASSERT(!sign, "a sign payload has no BLR factors");
    sign_values(sut(p), m, r, su);
    sign_values(svt(p), n, r, sv);
}

void PackedWeight::signs_into(int p, double* su, double* sv) const {
    CORTIQ_ASSERT(!sign, "a sign payload has no BLR factors");
    sign_values(sut(p), m, r, su);
    sign_values(svt(p), n, r, sv);
}

Factors PackedWeight::to_factors() const {
    CORTIQ_ASSERT(!sign, "a sign payload has no BLR factors");
    Factors f;
    f.m = m;
    f.n = n;
    f.r = r;
    std::vector<float> hs, ls, gs;
    for (int p = 0; p < paths; ++p) {
        scales(p, hs, ls, gs);
        Path q;
        q.h.assign(hs.begin(), hs.end());
        q.l.assign(ls.begin(), ls.end());
        q.g.assign(gs.begin(), gs.end());
        q.su = MatD(m, r);
        q.sv = MatD(n, r);
        signs_into(p, q.su.data(), q.sv.data());
        f.paths.push_back(std::move(q));
    }
    return f;
}

bool PackedWeight::sign_at(int64_t i, int64_t j) const {
    CORTIQ_ASSERT(sign, "not a sign payload");
    return svt(0).at(i, j);
}

int64_t PackedWeight::resident_bytes() const {
    return static_cast<int64_t>(2 * (h.size() + l.size() + g.size()) + 8 * bits.size());
}

}  // namespace cortiq::blr
