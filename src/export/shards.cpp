// The weights of the exported folder: stored tensors byte for byte, payloads
// dequantised (blr::dequant_any, float32) and rounded to the export dtype to
// nearest even; one safetensors file, or shards and their index as
// transformers' save_pretrained writes them.
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "blr/sign.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "export/steps.hpp"
#include "io/atomic_file.hpp"

namespace cortiq::hf {

namespace {

// The dequantised weight of `t` in its export dtype.
std::vector<uint8_t> dequantised_bytes(const io::SafetensorsFile& f, const OutTensor& t) {
    const MatF w = blr::dequant_any(f.bytes(f.info(t.name)));
    CORTIQ_CHECK(w.rows() == t.shape[0] && w.cols() == t.shape[1],
                 "{}: tensor '{}' dequantises to [{}, {}], expected [{}]", f.path(), t.name,
                 w.rows(), w.cols(), fmt::join(t.shape, ", "));
    const size_t n = static_cast<size_t>(w.size());
    std::vector<uint8_t> out(t.nbytes);
    CORTIQ_CHECK(out.size() == n * io::dtype_size(t.dtype), "export: tensor '{}': size mismatch",
                 t.name);
    const float* x = w.data();
    if (t.dtype == io::DType::F32) {
        std::memcpy(out.data(), x, out.size());
        return out;
    }
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) {
        if (t.dtype == io::DType::BF16) {
            h[i] = float_to_bf16(x[i]);
        } else {
            CORTIQ_CHECK(std::fabs(x[i]) <= kHalfMax,
                         "{}: tensor '{}' has a weight of {} that float16 cannot hold (export "
                         "with --dtype bf16 or f32)",
                         f.path(), t.name, x[i]);
            h[i] = float_to_half(x[i]);
        }
    }
    std::memcpy(out.data(), h.data(), out.size());  // little-endian, as safetensors
    return out;
}

std::string shard_name(size_t i, size_t n) {
    if (n == 1) return "model.safetensors";
    return fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, n);
}

}  // namespace

std::vector<std::vector<const OutTensor*>> plan_shards(const std::vector<OutTensor>& tensors,
                                                       uint64_t max_bytes) {
    std::vector<std::vector<const OutTensor*>> shards(1);
    uint64_t in_shard = 0;
    for (const OutTensor& t : tensors) {
        if (!shards.back().empty() && in_shard + t.nbytes > max_bytes) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(&t);
        in_shard += t.nbytes;
    }
    return shards;
}

std::vector<std::string> write_shards(const Source& src,
                                      const std::vector<std::vector<const OutTensor*>>& shards,
                                      const fs::path& dir) {
    std::vector<std::string> files;
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string name = shard_name(s, shards.size());
        io::SafetensorsWriter wr;
        for (const OutTensor* t : shards[s]) {
            if (t->dequantise)
                wr.add(t->name, t->dtype, t->shape, dequantised_bytes(src.file, *t));
            else
                wr.add(t->name, t->dtype, t->shape, src.file.bytes(src.file.info(t->name)));
            weight_map[t->name] = name;
            total += t->nbytes;
        }
        // transformers refuses safetensors files whose "format" is not a framework's
        wr.set_metadata("format", "pt");
        wr.write((dir / name).string());
        files.push_back(name);
    }
    if (shards.size() > 1) {
        const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                      {"weight_map", weight_map}};
        io::write_file_atomic((dir / "model.safetensors.index.json").string(),
                              index.dump(2) + "\n");
        files.push_back("model.safetensors.index.json");
    }
    return files;
}

}  // namespace cortiq::hf
