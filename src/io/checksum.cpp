#include "io/checksum.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "io/safetensors.hpp"

namespace cortiq::io {

namespace {

std::string quoted_field(std::string_view value) {
    return fmt::format("\"{}\":\"{}\"", kHeaderChecksumKey, value);
}

bool is_hex64(std::string_view s) {
    return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

// Why the header does not match its checksum; empty when it does.
std::string header_problem(const SafetensorsFile& f) {
    const auto& meta = f.metadata();
    const auto h = meta.find(std::string(kHeaderChecksumKey));
    const auto t = meta.find(std::string(kTensorChecksumsKey));
    if (h == meta.end())
        return fmt::format("the header carries tensor checksums but no '{}'", kHeaderChecksumKey);
    if (t == meta.end())
        return fmt::format("the header carries '{}' but no tensor checksums ('{}')",
                           kHeaderChecksumKey, kTensorChecksumsKey);
    if (!is_hex64(h->second))
        return fmt::format("'{}' is '{}', not 16 hex digits", kHeaderChecksumKey, h->second);
    const auto prefix = f.header_bytes();
    const std::string_view header(reinterpret_cast<const char*>(prefix.data()) + 8,
                                  prefix.size() - 8);
    const size_t at = header_checksum_offset(header, h->second);
    if (at == std::string_view::npos)
        return fmt::format("'{}' is not written as one \"{}\":\"...\" field", kHeaderChecksumKey,
                           kHeaderChecksumKey);
    const std::string got = hex64(header_checksum(prefix, 8 + at));
    if (got != h->second)
        return fmt::format("its XXH3-64 is {}, the header records {}", got, h->second);
    return {};
}

}  // namespace

uint64_t xxh3_64(std::span<const uint8_t> bytes) {
    return XXH3_64bits(bytes.data(), bytes.size());
}

std::string hex64(uint64_t v) {
    return fmt::format("{:016x}", v);
}

size_t header_checksum_offset(std::string_view header, std::string_view value) {
    const std::string field = quoted_field(value);
    const size_t at = header.find(field);
    if (at == std::string_view::npos || header.find(field, at + 1) != std::string_view::npos)
        return std::string_view::npos;
    return at + field.size() - value.size() - 1;  // the digits, before the closing quote
}

uint64_t header_checksum(std::span<const uint8_t> prefix, size_t digits) {
    CORTIQ_ASSERT(digits + kHeaderChecksumPlaceholder.size() <= prefix.size());
    // The library's streaming state (its layout is not part of the shared
    // library's interface, so it is allocated there).
    const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                                XXH3_freeState);
    CORTIQ_CHECK(state, "xxhash: cannot allocate a hash state");
    XXH3_64bits_reset(state.get());
    XXH3_64bits_update(state.get(), prefix.data(), digits);
    XXH3_64bits_update(state.get(), kHeaderChecksumPlaceholder.data(),
                       kHeaderChecksumPlaceholder.size());
    const size_t rest = digits + kHeaderChecksumPlaceholder.size();
    XXH3_64bits_update(state.get(), prefix.data() + rest, prefix.size() - rest);
    return XXH3_64bits_digest(state.get());
}

std::string ChecksumCheck::message(const std::string& path) const {
    if (!header_error.empty())
        return fmt::format("{}: the header is damaged: {} (checksum mismatch)", path, header_error);
    if (problems.empty()) return {};
    std::string s = fmt::format("{}: {}", path, problems.front());
    if (damaged.size() > 1) {
        s += fmt::format("; {} more damaged tensors:", damaged.size() - 1);
        for (size_t i = 1; i < damaged.size() && i < 6; ++i) s += fmt::format(" '{}'", damaged[i]);
        if (damaged.size() > 6) s += " ...";
    }
    return s;
}

ChecksumCheck check_checksums(const SafetensorsFile& f) {
    ChecksumCheck c;
    const auto& meta = f.metadata();
    const auto t = meta.find(std::string(kTensorChecksumsKey));
    c.present = t != meta.end() || meta.count(std::string(kHeaderChecksumKey)) > 0;
    if (!c.present) return c;
    c.header_error = header_problem(f);
    if (t == meta.end()) return c;
    const auto recorded = nlohmann::json::parse(t->second, nullptr, /*allow_exceptions=*/false);
    if (!recorded.is_object()) {
        if (c.header_error.empty())
            c.header_error = fmt::format("'{}' is not a JSON object", kTensorChecksumsKey);
        return c;
    }
    const auto& tensors = f.tensors();
    // Largest first, so that one big tensor does not finish last alone.
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return tensors[a].nbytes() > tensors[b].nbytes(); });
    std::vector<std::string> got(tensors.size());
    parallel_for(0, static_cast<int64_t>(order.size()), [&](int64_t k) {
        const auto& ti = tensors[order[static_cast<size_t>(k)]];
        got[order[static_cast<size_t>(k)]] = hex64(xxh3_64(f.bytes(ti)));
    });
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& ti = tensors[i];
        ++c.tensors_checked;
        const auto r = recorded.find(ti.name);
        std::string problem;
        if (r == recorded.end() || !r->is_string())
            problem =
                fmt::format("tensor '{}' has no checksum in '{}'", ti.name, kTensorChecksumsKey);
        else if (r->get<std::string>() != got[i])
            problem = fmt::format(
                "tensor '{}' is damaged: the XXH3-64 of its {} bytes is {}, the header records {}",
                ti.name, ti.nbytes(), got[i], r->get<std::string>());
        if (problem.empty()) continue;
        c.problems.push_back(std::move(problem));
        c.damaged.push_back(ti.name);
    }
    for (const auto& [name, v] : recorded.items())
        if (!f.find(name)) {
            c.problems.push_back(
                fmt::format("'{}' records a checksum of tensor '{}', which the file lacks",
                            kTensorChecksumsKey, name));
            c.damaged.push_back(name);
        }
    return c;
}

void verify_checksums(const SafetensorsFile& f) {
    const auto c = check_checksums(f);
    CORTIQ_CHECK(c.ok(), "{} (loading without verification, --no-verify, skips this check)",
                 c.message(f.path()));
}

void verify_checksums(const Checkpoint& ck) {
    for (const auto& s : ck.shards()) verify_checksums(s);
}

}  // namespace cortiq::io
