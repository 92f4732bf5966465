// The last step of quantize(): the compressed checkpoint. Every source tensor
// in name order (its payload instead where encoded), plus the head of a tied
// model, which has no tensor of its own there; the config, the tokenizer and
// generation files (io/carried_files.hpp), the run's settings and per-tensor
// reports as metadata. total_params counts the
// source's parameters (a tied head once, as the embedding); linear_* count
// every encoded tensor, the head included, the embedding not (embed_*).
// Every tensor and the header carry a checksum (io/checksum.hpp).
#include <algorithm>
#include <filesystem>

#include "io/carried_files.hpp"
#include "io/text_file.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

namespace fs = std::filesystem;

void write_output(const QuantizeOptions& o, const io::Checkpoint& ck,
                  const nlohmann::json& settings,
                  const std::map<std::string, std::vector<uint8_t>>& payloads,
                  QuantizeReport& rep) {
    std::vector<std::string> names = ck.names();
    if (payloads.count(kHead) && !ck.has(kHead)) {
        names.push_back(kHead);
        std::sort(names.begin(), names.end());
    }
    io::SafetensorsWriter wr;
    wr.set_checksums(true);
    for (const auto& name : names) {
        if (ck.has(name)) rep.total_params += ck.info(name).numel();
        auto it = payloads.find(name);
        if (it != payloads.end()) {
            wr.add(name, io::DType::U8, {static_cast<int64_t>(it->second.size())},
                   std::span<const uint8_t>(it->second));
        } else {
            const auto& info = ck.info(name);
            wr.add(name, info.dtype, info.shape, ck.bytes(name));
        }
    }
    for (const auto& r : rep.tensors) {
        if (r.name.ends_with("embed_tokens.weight")) {
            rep.embed_params = r.m * r.n;
            rep.embed_bits = r.bits;
            continue;
        }
        rep.linear_params += r.m * r.n;
        rep.linear_bits += r.bits;
        if (r.name == kHead) {
            rep.head_params = r.m * r.n;
            rep.head_bits = r.bits;
        }
    }
    nlohmann::json tensors = nlohmann::json::object();
    for (const auto& r : rep.tensors) tensors[r.name] = r.to_json(false);
    nlohmann::json meta = settings;
    meta["linear_bits"] = rep.linear_bits;
    meta["linear_params"] = rep.linear_params;
    meta["linear_bpw"] = ratio(rep.linear_bits, rep.linear_params);
    meta["linear_includes_head"] = rep.head_params > 0;
    wr.set_metadata("format", "cortiq-blr");
    wr.set_metadata("format_version", std::to_string(kFormatVersion));
    wr.set_metadata("cortiq", meta.dump());
    wr.set_metadata("cortiq.tensors", tensors.dump());
    wr.set_metadata("config",
                    io::read_text_file((fs::path(o.model_dir) / "config.json").string(), "config"));
    const fs::path dir(o.model_dir);
    wr.set_metadata(std::string(io::kTokenizerFile),
                    io::read_text_file((dir / io::kTokenizerFile).string(), "tokenizer"));
    for (std::string_view name : io::kOptionalCarriedFiles)
        if (fs::exists(dir / name))
            wr.set_metadata(std::string(name), io::read_text_file((dir / name).string(), "model"));
    wr.write(o.out_path);
}

}  // namespace cortiq::quant
