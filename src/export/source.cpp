// The cortiq file an export reads: its format, config, carried files and the
// report of every compressed tensor, each payload validated against the shape
// recorded for it. Every error names the file (and the tensor).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "blr/sign.hpp"
#include "core/error.hpp"
#include "export/steps.hpp"
#include "io/carried_files.hpp"
#include "io/checksum.hpp"

namespace cortiq::hf {

namespace {

const std::string& meta_entry(const io::SafetensorsFile& f, const std::string& key) {
    const auto& md = f.metadata();
    const auto it = md.find(key);
    CORTIQ_CHECK(it != md.end(), "{}: not a complete cortiq file: no \"{}\" in its metadata",
                 f.path(), key);
    return it->second;
}

// name → [m, n] of every compressed tensor, from the "cortiq.tensors" report.
std::map<std::string, std::pair<int64_t, int64_t>> compressed_shapes(const io::SafetensorsFile& f) {
    const std::string& text = meta_entry(f, "cortiq.tensors");
    std::map<std::string, std::pair<int64_t, int64_t>> out;
    try {
        const auto j = nlohmann::json::parse(text);
        CORTIQ_CHECK(j.is_object(), "{}: metadata \"cortiq.tensors\" is not a JSON object",
                     f.path());
        for (const auto& [name, r] : j.items())
            out[name] = {r.at("shape").at(0).get<int64_t>(), r.at("shape").at(1).get<int64_t>()};
    } catch (const nlohmann::json::exception& e) {
        CORTIQ_FAIL("{}: metadata \"cortiq.tensors\" is not a valid tensor report: {}", f.path(),
                    e.what());
    }
    return out;
}

}  // namespace

Source read_source(const std::string& path, io::DType dtype) {
    CORTIQ_CHECK(!fs::is_directory(path),
                 "{}: a folder, not a cortiq file (export reads the .safetensors file that "
                 "cortiq quantize wrote)",
                 path);
    Source src{io::SafetensorsFile::open(path), {}, {}, {}, false};
    const io::SafetensorsFile& f = src.file;
    const auto& md = f.metadata();
    const auto fmt_it = md.find("format");
    CORTIQ_CHECK(fmt_it != md.end() && fmt_it->second == "cortiq-blr",
                 "{}: not a cortiq file (its metadata has no \"format\": \"cortiq-blr\"; export "
                 "reads the output of cortiq quantize)",
                 path);
    io::verify_checksums(f);  // a damaged tensor must not reach the exported folder
    src.config = meta_entry(f, "config");
    for (std::string_view name : io::kOptionalCarriedFiles)
        if (auto it = md.find(std::string(name)); it != md.end())
            src.carried[it->first] = it->second;
    if (auto it = md.find(std::string(io::kTokenizerFile)); it != md.end())
        src.carried[it->first] = it->second;

    const auto shapes = compressed_shapes(f);
    for (const auto& [name, mn] : shapes)
        CORTIQ_CHECK(f.find(name) != nullptr,
                     "{}: tensor '{}' is listed as compressed but the file does not hold it", path,
                     name);
    for (const io::TensorInfo& t : f.tensors()) {
        OutTensor o{t.name, t.dtype, t.shape, t.nbytes(), false};
        if (const auto it = shapes.find(t.name); it != shapes.end()) {
            const auto [m, n] = it->second;
            const std::string what = fmt::format("{}: tensor '{}'", path, t.name);
            CORTIQ_CHECK(t.dtype == io::DType::U8 && t.shape.size() == 1,
                         "{}: a compressed weight must be stored as 1-D U8, found {} {}", what,
                         io::dtype_name(t.dtype), t.shape_str());
            blr::validate_any(f.bytes(t), what, m, n);
            o = {t.name, dtype, {m, n}, static_cast<uint64_t>(m * n) * io::dtype_size(dtype), true};
        }
        src.has_head |= t.name == "lm_head.weight";
        src.tensors.push_back(std::move(o));
    }
    std::sort(src.tensors.begin(), src.tensors.end(),
              [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });
    return src;
}

}  // namespace cortiq::hf
