// SafetensorsWriter: layout, header and the crash-safe write (temporary file,
// fsync, rename).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/parallel.hpp"
#include "io/atomic_file.hpp"
#include "io/checksum.hpp"
#include "io/safetensors.hpp"

namespace cortiq::io {

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
    CORTIQ_CHECK(!name.empty() && name != "__metadata__",
                 "safetensors writer: bad tensor name '{}'", name);
    CORTIQ_CHECK(!by_name_.count(name), "safetensors writer: tensor '{}' added twice", name);
    uint64_t numel = 1;
    for (int64_t d : shape) {
        CORTIQ_CHECK(d >= 0, "safetensors writer: tensor '{}' has a negative dimension", name);
        numel *= static_cast<uint64_t>(d);
    }
    CORTIQ_CHECK(numel * dtype_size(dtype) == bytes.size(),
                 "safetensors writer: tensor '{}': shape × {} = {} bytes, given {}", name,
                 dtype_name(dtype), numel * dtype_size(dtype), bytes.size());
    by_name_[name] = tensors_.size();
    tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::span<const uint8_t> bytes) {
    add(std::move(name), dtype, std::move(shape), std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

void SafetensorsWriter::add_f32(std::string name, std::vector<int64_t> shape,
                                std::span<const float> values) {
    std::vector<uint8_t> b(values.size() * sizeof(float));
    if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
    add(std::move(name), DType::F32, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_f32(std::string name, const MatF& m) {
    add_f32(std::move(name), {m.rows(), m.cols()}, m.span());
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
    // The checksum keys are the writer's own (set_checksums): copied from
    // another file they would describe that file's bytes, not these.
    if (key == kTensorChecksumsKey || key == kHeaderChecksumKey) return;
    metadata_[std::move(key)] = std::move(value);
}

std::vector<size_t> SafetensorsWriter::layout_order() const {
    std::vector<size_t> order(tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Multiples of 8 bytes first (each keeps the offset 8-aligned), then the
    // rest by descending element size (each keeps its successors aligned to
    // their element size). Stable: insertion order within a class.
    auto cls = [&](size_t i) {
        const auto& e = tensors_[i];
        return e.bytes.size() % 8 == 0 ? 0 : 16 - static_cast<int>(dtype_size(e.dtype));
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return cls(a) < cls(b); });
    return order;
}

std::string SafetensorsWriter::header_json() const {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    std::map<std::string, std::string> metadata = metadata_;
    if (checksums_) {
        std::vector<std::string> sums(tensors_.size());
        parallel_for(0, static_cast<int64_t>(tensors_.size()), [&](int64_t i) {
            sums[static_cast<size_t>(i)] = hex64(xxh3_64(tensors_[static_cast<size_t>(i)].bytes));
        });
        nlohmann::ordered_json t = nlohmann::ordered_json::object();
        for (size_t i : layout_order()) t[tensors_[i].name] = sums[i];
        metadata[std::string(kTensorChecksumsKey)] = t.dump();
        metadata[std::string(kHeaderChecksumKey)] = std::string(kHeaderChecksumPlaceholder);
    }
    if (!metadata.empty()) {
        nlohmann::ordered_json md = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) md[k] = v;
        h["__metadata__"] = std::move(md);
    }
    uint64_t off = 0;
    for (size_t i : layout_order()) {
        const auto& e = tensors_[i];
        h[e.name] = {{"dtype", std::string(dtype_name(e.dtype))},
                     {"shape", e.shape},
                     {"data_offsets", {off, off + e.bytes.size()}}};
        off += e.bytes.size();
    }
    return h.dump();
}

void SafetensorsWriter::write(const std::string& path) const {
    std::string header = header_json();
    header.append((8 - header.size() % 8) % 8, ' ');  // data section 8-aligned in the file
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
    if (checksums_) {
        // The header's own checksum: over the length and the header with its
        // digits as the placeholder, then written over the placeholder.
        const size_t at = header_checksum_offset(header, kHeaderChecksumPlaceholder);
        CORTIQ_CHECK(at != std::string::npos, "safetensors writer: {}: no header checksum field",
                     path);
        std::vector<uint8_t> prefix(len, len + 8);
        prefix.insert(prefix.end(), header.begin(), header.end());
        header.replace(at, kHeaderChecksumPlaceholder.size(),
                       hex64(header_checksum(prefix, 8 + at)));
    }

    TempFile tmp(path);
    tmp.write(len, 8);
    tmp.write(header.data(), header.size());
    for (size_t i : layout_order()) {
        const auto& b = tensors_[i].bytes;
        if (!b.empty()) tmp.write(b.data(), b.size());
    }
    tmp.commit();
}

}  // namespace cortiq::io
