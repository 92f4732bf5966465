// cortiq export: a cortiq file → a Hugging Face folder (export/export.hpp).
#include "export/export.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/error.hpp"
#include "export/steps.hpp"
#include "io/atomic_file.hpp"

namespace cortiq::hf {

ExportReport export_folder(const ExportOptions& o) {
    CORTIQ_CHECK(
        o.dtype == io::DType::BF16 || o.dtype == io::DType::F16 || o.dtype == io::DType::F32,
        "export: dtype must be BF16, F16 or F32, got {}", io::dtype_name(o.dtype));
    CORTIQ_CHECK(o.max_shard_bytes > 0, "export: the shard size must be positive");
    FolderWriter folder(o.out_dir, o.force, o.in_path);  // refuses before the input is read
    const Source src = read_source(o.in_path, o.dtype);
    ExportReport rep;
    rep.dtype = o.dtype;
    const std::string config =
        export_config(src.config, src.has_head, o.in_path + " metadata config", rep.untied_head);

    folder.begin();
    rep.files = write_shards(src, plan_shards(src.tensors, o.max_shard_bytes), folder.dir());
    io::write_file_atomic((folder.dir() / "config.json").string(), config);
    rep.files.push_back("config.json");
    for (const auto& [name, text] : src.carried) {
        io::write_file_atomic((folder.dir() / name).string(), text);
        rep.files.push_back(name);
    }
    folder.commit();

    std::sort(rep.files.begin(), rep.files.end());
    rep.out_dir = folder.target().string();
    for (const OutTensor& t : src.tensors) {
        ++rep.tensors;
        rep.dequantised += t.dequantise;
        rep.tensor_bytes += t.nbytes;
    }
    return rep;
}

std::string ExportReport::summary() const {
    const auto shards = std::count_if(files.begin(), files.end(), [](const std::string& f) {
        return f.size() > 12 && f.compare(f.size() - 12, 12, ".safetensors") == 0;
    });
    return fmt::format(
        "{}: {} tensors ({} dequantised to {}), {:.2f} MB in {} safetensors file{}{}\n  files: {}",
        out_dir, tensors, dequantised, io::dtype_name(dtype),
        static_cast<double>(tensor_bytes) / 1e6, shards, shards == 1 ? "" : "s",
        untied_head ? "; config.json: tie_word_embeddings false (the compressed lm_head is "
                      "stored)"
                    : "",
        fmt::join(files, ", "));
}

io::DType parse_export_dtype(std::string_view s) {
    std::string l(s);
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == "bf16" || l == "bfloat16") return io::DType::BF16;
    if (l == "f16" || l == "fp16" || l == "float16") return io::DType::F16;
    if (l == "f32" || l == "fp32" || l == "float32") return io::DType::F32;
    CORTIQ_FAIL("export: unknown dtype '{}' (bf16, f16 or f32)", s);
}

uint64_t parse_shard_size(std::string_view s) {
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    CORTIQ_CHECK(ec == std::errc() && v > 0, "export: bad shard size '{}' (e.g. 5GB, 500MB)", s);
    std::string unit(end, s.data() + s.size());
    std::transform(unit.begin(), unit.end(), unit.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    double scale = 0;
    if (unit.empty() || unit == "B") scale = 1;
    if (unit == "KB") scale = 1e3;
    if (unit == "MB") scale = 1e6;
    if (unit == "GB") scale = 1e9;
    CORTIQ_CHECK(scale > 0, "export: bad shard size unit in '{}' (B, KB, MB or GB)", s);
    return static_cast<uint64_t>(v * scale);
}

}  // namespace cortiq::hf
