// Tensors for Python: a compressed layer run packed (PackedLinear, the
// kernel the CPU runtime uses: model/blr_linear.hpp), a payload dequantised,
// and the tensors of a safetensors file or checkpoint as numpy arrays.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/blr_linear.hpp"

namespace cortiq::python {

namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

std::span<const uint8_t> bytes_of(const Bytes& b) {
    return {b.data(), static_cast<size_t>(b.size())};
}

model::BlrLinear make_packed(const Bytes& payload, const std::string& name) {
    return model::BlrLinear(blr::PackedWeight::from_payload(bytes_of(payload), name));
}

// y = x Ŵᵀ for x [rows, in_features] (float32), by the packed kernel.
py::array_t<float> apply(const model::BlrLinear& w,
                         const py::array_t<float, py::array::c_style | py::array::forcecast>& x) {
    CORTIQ_CHECK(x.ndim() == 2 && x.shape(1) == w.in_features(),
                 "PackedLinear: input must be [rows, {}], got {} dimensions{}", w.in_features(),
                 x.ndim(), x.ndim() == 2 ? fmt::format(" [{}, {}]", x.shape(0), x.shape(1)) : "");
    const int64_t rows = x.shape(0);
    py::array_t<float> y({rows, w.out_features()});
    if (rows == 0) return y;
    const float* in = x.data();
    float* out = y.mutable_data();
    {
        py::gil_scoped_release nogil;
        w.apply(in, rows, out);
    }
    return y;
}

// Each path's scales (h: m, l: r, g: n) as float32, as the kernel reads them.
py::list scales(const model::BlrLinear& w) {
    py::list out;
    std::vector<float> h, l, g;
    for (int p = 0; p < w.packed().paths; ++p) {
        w.packed().scales(p, h, l, g);
        out.append(py::make_tuple(py::array_t<float>(h.size(), h.data()),
                                  py::array_t<float>(l.size(), l.data()),
                                  py::array_t<float>(g.size(), g.data())));
    }
    return out;
}

py::array array_of(const io::TensorInfo& t, std::span<const uint8_t> bytes,
                   const std::string& context) {
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    if (io::is_float(t.dtype)) {
        MatF m = io::to_matf(t, bytes, context);
        return to_numpy(std::move(m)).reshape(shape);
    }
    auto copy = [&](auto tag) {
        using T = decltype(tag);
        py::array_t<T> a(shape);
        std::memcpy(a.mutable_data(), bytes.data(), bytes.size());
        return py::array(a);
    };
    switch (t.dtype) {
        case io::DType::U8:
            return copy(uint8_t{});
        case io::DType::I8:
            return copy(int8_t{});
        case io::DType::I32:
            return copy(int32_t{});
        case io::DType::I64:
            return copy(int64_t{});
        default:
            CORTIQ_FAIL("{}: tensor '{}' has an unsupported dtype", context, t.name);
    }
}

// Every tensor of a file or checkpoint folder: float tensors as float32
// (whatever they are stored as), the others as stored; U8 ones are the
// compressed layers' payloads. `only_payloads`: those alone.
py::dict read_tensors(const std::filesystem::path& path, bool only_payloads) {
    const auto ckpt = io::Checkpoint::open(path.string());
    py::dict out;
    for (const auto& name : ckpt.names()) {
        const auto& t = ckpt.info(name);
        if (only_payloads && t.dtype != io::DType::U8) continue;
        out[py::str(name)] = array_of(t, ckpt.bytes(name), ckpt.file_of(name).path());
    }
    return out;
}

// ±1 entries of a k × r sign matrix packed 8 to a byte along r: byte c of
// row i holds columns 8c…8c+7, bit j (the least significant first) set
// where the sign is +1.
py::array_t<uint8_t> sign_bits_of(const MatD& s) {
    const int64_t k = s.rows(), r = s.cols(), bytes = (r + 7) / 8;
    py::array_t<uint8_t> out({k, bytes});
    uint8_t* o = out.mutable_data();
    std::memset(o, 0, static_cast<size_t>(k * bytes));
    for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < r; ++j)
            if (s(i, j) > 0) o[i * bytes + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    return out;
}

// Each path's sign matrices S_U (m × r) and S_V (n × r), 1 bit per sign
// (sign_bits_of): the packed form a GPU-side product unpacks (cortiq.torch).
py::list sign_bits(const Bytes& payload, const std::string& name) {
    blr::validate_any(bytes_of(payload), name);
    CORTIQ_CHECK(!blr::is_sign_payload(bytes_of(payload)),
                 "{}: a sign payload has no low-rank factors", name);
    const blr::Factors f = blr::unpack(bytes_of(payload));
    py::list out;
    for (const auto& q : f.paths)
        out.append(py::make_tuple(sign_bits_of(q.su), sign_bits_of(q.sv)));
    return out;
}

}  // namespace

void bind_tensors(py::module_& m) {
    py::class_<model::BlrLinear>(m, "PackedLinear",
                                 "A compressed linear layer (BLR or sign payload) run from its "
                                 "packed bits, as the CPU runtime runs it")
        .def(py::init(&make_packed), py::arg("payload"), py::arg("name") = "payload",
             "Validates the payload (errors name `name`)")
        .def_property_readonly("in_features", &model::BlrLinear::in_features)
        .def_property_readonly("out_features", &model::BlrLinear::out_features)
        .def_property_readonly("rank", [](const model::BlrLinear& w) { return w.packed().r; })
        .def_property_readonly("paths", [](const model::BlrLinear& w) { return w.packed().paths; })
        .def_property_readonly("kind", &model::BlrLinear::kind, "'blr' or 'sign'")
        .def_property_readonly("resident_bytes", &model::BlrLinear::resident_bytes)
        .def("apply", &apply, py::arg("x"), "y = x Ŵᵀ: [rows, in_features] -> [rows, out_features]")
        .def(
            "dense", [](const model::BlrLinear& w) { return to_numpy(w.dense()); },
            "Ŵ [out_features, in_features] in float32 (float64 products rounded once)")
        .def("scales", &scales, "[(h, l, g)] per path, float32");
    m.def(
        "dequant",
        [](const Bytes& payload, const std::string& name) {
            blr::validate_any(bytes_of(payload), name);
            return to_numpy(blr::dequant_any(bytes_of(payload)));
        },
        py::arg("payload"), py::arg("name") = "payload",
        "The dense weight of a BLR or sign payload (float32)");
    m.def("sign_bits", &sign_bits, py::arg("payload"), py::arg("name") = "payload",
          "[(S_U bits [m, ceil(r/8)], S_V bits [n, ceil(r/8)])] per path of a BLR payload, "
          "uint8, bit j of byte c: column 8c + j, set for +1");
    m.def("read_tensors", &read_tensors, py::arg("path"), py::arg("only_payloads") = false,
          "{name: numpy array} of a safetensors file or model folder");
    m.def(
        "read_metadata",
        [](const std::filesystem::path& path) {
            return io::Checkpoint::open(path.string()).metadata();
        },
        py::arg("path"), "The __metadata__ of a safetensors file (or a folder's first shard)");
}

}  // namespace cortiq::python
