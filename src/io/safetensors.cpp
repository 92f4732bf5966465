#include "io/safetensors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "core/half.hpp"
#include "core/parallel.hpp"

namespace cortiq::io {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------- dtypes

size_t dtype_size(DType t) {
    switch (t) {
        case DType::F64:
        case DType::I64:
            return 8;
        case DType::F32:
        case DType::I32:
            return 4;
        case DType::F16:
        case DType::BF16:
            return 2;
        case DType::U8:
        case DType::I8:
            return 1;
    }
    CORTIQ_ASSERT(false, "bad dtype {}", static_cast<int>(t));
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::F32:
            return "F32";
        case DType::F16:
            return "F16";
        case DType::BF16:
            return "BF16";
        case DType::F64:
            return "F64";
        case DType::U8:
            return "U8";
        case DType::I8:
            return "I8";
        case DType::I32:
            return "I32";
        case DType::I64:
            return "I64";
    }
    CORTIQ_ASSERT(false, "bad dtype {}", static_cast<int>(t));
    return "";
}

bool is_float(DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

DType parse_dtype(std::string_view name, const std::string& context) {
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::U8, DType::I8,
                    DType::I32, DType::I64})
        if (dtype_name(t) == name) return t;
    CORTIQ_FAIL("{}: unsupported dtype '{}' (known: F32 F16 BF16 F64 U8 I8 I32 I64)", context,
                name);
}

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string TensorInfo::shape_str() const {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

// ---------------------------------------------------------------- reader

namespace {

// Hugging Face's reader refuses headers above 100 MB (MAX_HEADER_SIZE); so do
// we, before parsing (a header is names, shapes and metadata: a tokenizer.json
// of a few MB is the largest thing a cortiq file puts there).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// Unsigned integer from a JSON value, or an error naming `what`.
uint64_t json_u64(const json& v, const std::string& what) {
    CORTIQ_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                 "{}: expected a non-negative integer, got {}", what, v.dump());
    return v.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& e, uint64_t data_size,
                       const std::string& file) {
    const std::string ctx = fmt::format("{}: tensor '{}'", file, name);
    CORTIQ_CHECK(e.is_object(), "{}: header entry is not an object", ctx);
    TensorInfo t;
    t.name = name;
    auto dt = e.find("dtype");
    CORTIQ_CHECK(dt != e.end() && dt->is_string(), "{}: missing or non-string dtype", ctx);
    t.dtype = parse_dtype(dt->get<std::string>(), ctx);
    auto sh = e.find("shape");
    CORTIQ_CHECK(sh != e.end() && sh->is_array(), "{}: missing or non-array shape", ctx);
    // Element count with overflow detection (a hostile shape must not wrap).
    // The product of the non-zero dimensions must fit in int64 too, so that
    // any partial product (rows × cols of a flattened view) is defined.
    uint64_t numel = 1, nonzero = 1;
    bool overflow = false;
    constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    for (const auto& d : *sh) {
        const uint64_t v = json_u64(d, ctx + " shape");
        CORTIQ_CHECK(v <= kMaxI64, "{}: shape dimension {} too large", ctx, v);
        t.shape.push_back(static_cast<int64_t>(v));
        if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v) overflow = true;
        numel *= v;
        if (v != 0 && nonzero > kMaxI64 / v) overflow = true;
        if (v != 0) nonzero *= v;
    }
    auto off = e.find("data_offsets");
    CORTIQ_CHECK(off != e.end() && off->is_array() && off->size() == 2,
                 "{}: data_offsets must be [begin, end]", ctx);
    t.begin = json_u64((*off)[0], ctx + " data_offsets");
    t.end = json_u64((*off)[1], ctx + " data_offsets");
    CORTIQ_CHECK(t.begin <= t.end, "{}: data_offsets [{}, {}] are reversed", ctx, t.begin, t.end);
    CORTIQ_CHECK(t.end <= data_size,
                 "{}: data_offsets [{}, {}] run past the end of the data section ({} bytes; "
                 "file truncated?)",
                 ctx, t.begin, t.end, data_size);
    const uint64_t esz = dtype_size(t.dtype);
    CORTIQ_CHECK(!overflow && numel <= std::numeric_limits<uint64_t>::max() / esz,
                 "{}: shape {} overflows", ctx, t.shape_str());
    CORTIQ_CHECK(numel * esz == t.nbytes(),
                 "{}: shape {} × {} ({} bytes each) = {} bytes, but data_offsets [{}, {}] hold {} "
                 "bytes",
                 ctx, t.shape_str(), dtype_name(t.dtype), esz, numel * esz, t.begin, t.end,
                 t.nbytes());
    return t;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    SafetensorsFile f;
    f.file_ = MappedFile(path);
    const auto all = f.file_.bytes();
    CORTIQ_CHECK(all.size() >= 8, "{}: {} bytes, too short for a safetensors header", path,
                 all.size());
    const uint64_t n = read_u64_le(all.data());
    CORTIQ_CHECK(n <= kMaxHeaderBytes,
                 "{}: header length {} exceeds the safetensors limit of {} bytes (not a "
                 "safetensors file, or corrupt)",
                 path, n, kMaxHeaderBytes);
    CORTIQ_CHECK(n <= all.size() - 8,
                 "{}: header length {} runs past the end of the file ({} bytes; not a safetensors "
                 "file, or truncated)",
                 path, n, all.size());
    f.data_offset_ = 8 + n;
    const uint64_t data_size = all.size() - f.data_offset_;

    const char* hb = reinterpret_cast<const char*>(all.data() + 8);
    // JSON keeps the last of repeated keys; a repeated tensor name is refused
    // instead (two readers could otherwise disagree on which one is meant).
    std::string duplicate;
    std::unordered_set<std::string> top_keys;
    const json::parser_callback_t on_key = [&](int depth, json::parse_event_t ev, json& v) {
        if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
            !top_keys.insert(v.get<std::string>()).second)
            duplicate = v.get<std::string>();
        return true;
    };
    json header = json::parse(hb, hb + n, on_key, /*allow_exceptions=*/false);
    CORTIQ_CHECK(!header.is_discarded(), "{}: header ({} bytes) is not valid JSON", path, n);
    CORTIQ_CHECK(header.is_object(), "{}: header is not a JSON object", path);
    CORTIQ_CHECK(duplicate.empty(), "{}: tensor '{}' appears more than once in the header", path,
                 duplicate);

    for (const auto& [key, val] : header.items()) {
        if (key == "__metadata__") {
            CORTIQ_CHECK(val.is_object() || val.is_null(), "{}: __metadata__ is not an object",
                         path);
            if (val.is_null()) continue;
            for (const auto& [mk, mv] : val.items()) {
                CORTIQ_CHECK(mv.is_string(), "{}: __metadata__ value '{}' is not a string", path,
                             mk);
                f.metadata_[mk] = mv.get<std::string>();
            }
            continue;
        }
        f.tensors_.push_back(parse_entry(key, val, data_size, path));
    }

    std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    // Sorted by begin, two non-empty ranges overlap iff one starts before the
    // furthest end seen so far.
    const TensorInfo* furthest = nullptr;
    for (const auto& t : f.tensors_) {
        if (t.nbytes() == 0) continue;
        if (furthest && t.begin < furthest->end)
            CORTIQ_FAIL("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path, furthest->name,
                        furthest->begin, furthest->end, t.name, t.begin, t.end);
        if (!furthest || t.end > furthest->end) furthest = &t;
    }
    for (size_t i = 0; i < f.tensors_.size(); ++i) f.by_name_[f.tensors_[i].name] = i;
    return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
    const TensorInfo* t = find(name);
    CORTIQ_CHECK(t, "{}: no tensor named '{}'", path(), name);
    return *t;
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorInfo& t) const {
    CORTIQ_ASSERT(data_offset_ + t.end <= file_.size(), "{}", t.name);
    return file_.bytes().subspan(data_offset_ + t.begin, t.nbytes());
}

// ---------------------------------------------------------------- float conversion

std::vector<float> to_floats(const TensorInfo& t, std::span<const uint8_t> bytes,
                             const std::string& context) {
    CORTIQ_CHECK(is_float(t.dtype), "{}: tensor '{}' has dtype {}, not a float type", context,
                 t.name, dtype_name(t.dtype));
    const int64_t n = t.numel();
    CORTIQ_ASSERT(static_cast<uint64_t>(n) * dtype_size(t.dtype) == bytes.size(), "{}", t.name);
    std::vector<float> out(static_cast<size_t>(n));
    const uint8_t* src = bytes.data();
    float* dst = out.data();
    constexpr int64_t kChunk = 1 << 20;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const DType dt = t.dtype;
    // The first non-finite value of each chunk (n if none).
    std::vector<int64_t> bad(static_cast<size_t>(chunks), n);
    // memcpy per element: the mapped data need not be aligned for the type.
    parallel_for(0, chunks, [&](int64_t c) {
        const int64_t b = c * kChunk, e = std::min(n, b + kChunk);

        switch (dt) {
            case DType::F32:
                std::memcpy(dst + b, src + 4 * b, 4 * (e - b));
                break;
            case DType::F16:
                for (int64_t i = b; i < e; ++i) {
                    uint16_t h;
                    std::memcpy(&h, src + 2 * i, 2);
                    dst[i] = half_to_float(h);
                }
                break;
            case DType::BF16:
                for (int64_t i = b; i < e; ++i) {
                    uint16_t h;
                    std::memcpy(&h, src + 2 * i, 2);
                    dst[i] = bf16_to_float(h);
                }
                break;
            case DType::F64:
                for (int64_t i = b; i < e; ++i) {
                    double d;
                    std::memcpy(&d, src + 8 * i, 8);
                    dst[i] = static_cast<float>(d);
                }
                break;
            default:
                CORTIQ_ASSERT(false);
        }
        for (int64_t i = b; i < e; ++i)
            if (!std::isfinite(dst[i])) {
                bad[static_cast<size_t>(c)] = i;
                break;
            }
    });
    const int64_t first = bad.empty() ? n : *std::min_element(bad.begin(), bad.end());
    if (first < n) {
        // name the element by its index in each dimension, as the file's shape has it
        std::string at;
        int64_t rest = first;
        for (size_t d = t.shape.size(); d-- > 0;) {
            at = fmt::format("{}{}", rest % t.shape[d], at.empty() ? "" : ", " + at);
            rest /= t.shape[d];
        }
        CORTIQ_FAIL("{}: tensor '{}' ({} {}) holds a non-finite value ({}) at flat index {} [{}]",
                    context, t.name, dtype_name(t.dtype), t.shape_str(), out[first], first, at);
    }
    return out;
}

MatF to_matf(const TensorInfo& t, std::span<const uint8_t> bytes, const std::string& context) {
    int64_t rows = 1, cols = 1;
    if (!t.shape.empty()) {
        cols = t.shape.back();
        for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
    }
    return MatF(rows, cols, to_floats(t, bytes, context));
}

// ---------------------------------------------------------------- checkpoint

Checkpoint Checkpoint::open(const std::string& path) {
    Checkpoint c;
    c.path_ = path;
    std::error_code ec;
    std::map<std::string, std::string> index_map;  // tensor -> shard file name
    std::vector<std::string> files;
    if (!fs::is_directory(path, ec)) {
        CORTIQ_CHECK(fs::exists(path, ec), "{}: no such file or folder", path);
        files.push_back(path);
    } else {
        const fs::path dir(path);
        const fs::path index = dir / "model.safetensors.index.json";
        if (fs::exists(index, ec)) {
            std::ifstream in(index);
            CORTIQ_CHECK(in, "{}: cannot open", index.string());
            json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
            CORTIQ_CHECK(!j.is_discarded() && j.is_object(), "{}: not a valid JSON object",
                         index.string());
            auto wm = j.find("weight_map");
            CORTIQ_CHECK(wm != j.end() && wm->is_object(), "{}: missing weight_map object",
                         index.string());
            std::vector<std::string> shard_names;
            for (const auto& [name, shard] : wm->items()) {
                CORTIQ_CHECK(shard.is_string(), "{}: weight_map['{}'] is not a string",
                             index.string(), name);
                const auto s = shard.get<std::string>();
                CORTIQ_CHECK(s.find('/') == std::string::npos && s != ".." && !s.empty(),
                             "{}: weight_map['{}'] = '{}' is not a file in the folder",
                             index.string(), name, s);
                index_map[name] = s;
                if (std::find(shard_names.begin(), shard_names.end(), s) == shard_names.end())
                    shard_names.push_back(s);
            }
            std::sort(shard_names.begin(), shard_names.end());
            for (const auto& s : shard_names) files.push_back((dir / s).string());
        } else if (fs::exists(dir / "model.safetensors", ec)) {
            files.push_back((dir / "model.safetensors").string());
        } else {
            for (const auto& e : fs::directory_iterator(dir, ec))
                if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
            std::sort(files.begin(), files.end());
            CORTIQ_CHECK(files.size() == 1,
                         "{}: expected model.safetensors.index.json, model.safetensors or one "
                         "*.safetensors file, found {} *.safetensors files",
                         path, files.size());
        }
    }
    for (const auto& f : files) c.shards_.push_back(SafetensorsFile::open(f));

    // Index after all shards exist (TensorInfo addresses are stable from here).
    for (size_t s = 0; s < c.shards_.size(); ++s) {
        const std::string shard_name = fs::path(c.shards_[s].path()).filename().string();
        for (const auto& t : c.shards_[s].tensors()) {
            auto im = index_map.find(t.name);
            if (im != index_map.end() && im->second != shard_name) continue;  // index wins
            auto [it, inserted] = c.by_name_.emplace(t.name, Where{s, &t});
            CORTIQ_CHECK(inserted, "{}: tensor '{}' is in both {} and {}", path, t.name,
                         c.shards_[it->second.shard].path(), c.shards_[s].path());
        }
    }
    for (const auto& [name, shard] : index_map)
        CORTIQ_CHECK(c.by_name_.count(name), "{}: index lists tensor '{}' in {}, which lacks it",
                     path, name, shard);
    return c;
}

const Checkpoint::Where& Checkpoint::where(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    CORTIQ_CHECK(it != by_name_.end(), "{}: no tensor named '{}'", path_, name);
    return it->second;
}

const TensorInfo& Checkpoint::info(std::string_view name) const {
    return *where(name).info;
}

std::span<const uint8_t> Checkpoint::bytes(std::string_view name) const {
    const auto& w = where(name);
    return shards_[w.shard].bytes(*w.info);
}

const SafetensorsFile& Checkpoint::file_of(std::string_view name) const {
    return shards_[where(name).shard];
}

MatF Checkpoint::load_matf(std::string_view name) const {
    const auto& w = where(name);
    return to_matf(*w.info, shards_[w.shard].bytes(*w.info), shards_[w.shard].path());
}

std::vector<float> Checkpoint::load_floats(std::string_view name) const {
    const auto& w = where(name);
    return to_floats(*w.info, shards_[w.shard].bytes(*w.info), shards_[w.shard].path());
}

void Checkpoint::drop_pages(std::string_view name) const {
    const auto it = by_name_.find(std::string(name));
    if (it != by_name_.end()) shards_[it->second.shard].drop_pages(*it->second.info);
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    out.reserve(by_name_.size());
    for (const auto& [n, w] : by_name_) out.push_back(n);
    std::sort(out.begin(), out.end());
    return out;
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
    static const std::map<std::string, std::string> kEmpty;
    return shards_.empty() ? kEmpty : shards_.front().metadata();
}

}  // namespace cortiq::io
