#include "encode/options.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "blr/model.hpp"
#include "core/error.hpp"

namespace cortiq::encode {

void Encoded::set_size(int64_t m, int64_t n, int64_t r, int p) {
    paths = p;
    rank = r;
    bits = blr::bits(m, n, r, p);
    bpw = static_cast<double>(bits) / static_cast<double>(m * n);
}

std::string Encoded::over_budget(double bpw_target) const {
    return bpw > bpw_target ? fmt::format(" | over budget: rank 1 is {:.3f} bpw", bpw) : "";
}

int64_t one_path_rank(int64_t m, int64_t n, double bpw) {
    return std::max<int64_t>(blr::rank_for(m, n, bpw, 1), 1);
}

Method parse_method(const std::string& s) {
    if (s == "nvg") return Method::nvg;
    if (s == "nvg-noknots") return Method::nvg_noknots;
    if (s == "svid") return Method::svid;
    if (s == "rtn-sign") return Method::rtn_sign;
    CORTIQ_FAIL("unknown method '{}' (nvg, nvg-noknots, svid, rtn-sign)", s);
}

std::string method_name(Method m) {
    switch (m) {
        case Method::nvg:
            return "nvg";
        case Method::nvg_noknots:
            return "nvg-noknots";
        case Method::svid:
            return "svid";
        case Method::rtn_sign:
            return "rtn-sign";
    }
    return "?";
}

PathsChoice parse_paths(const std::string& s) {
    if (s == "auto") return PathsChoice::automatic;
    if (s == "1") return PathsChoice::one;
    if (s == "2") return PathsChoice::two;
    CORTIQ_FAIL("--paths must be auto, 1 or 2 (got '{}')", s);
}

Device parse_device(const std::string& s) {
    if (s == "cpu") return Device::cpu;
    if (s == "gpu" || s == "cuda") return Device::gpu;
    CORTIQ_FAIL("--device must be cpu or gpu (got '{}')", s);
}

}  // namespace cortiq::encode
