// cortiq.quantize: the options of `cortiq quantize` (tools/cortiq/quantize.cpp)
// as keyword arguments, mapped onto the same QuantizeOptions, checked to the
// same ranges, and one call to quant::quantize.
#include "quantize/quantize.hpp"

#include <pybind11/stl.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"

namespace cortiq::python {

namespace {

using quant::QuantizeOptions;

// A number within [lo, hi] (the command line's CLI::Range), naming the option.
template <class T>
T in_range(const char* name, const py::handle& v, double lo, double hi) {
    const T x = v.cast<T>();
    CORTIQ_CHECK(static_cast<double>(x) >= lo && static_cast<double>(x) <= hi,
                 "quantize: {} must be in [{}, {}], got {}", name, lo, hi, x);
    return x;
}

// "auto" (or None) → `automatic`, else a number within [0, hi].
double auto_or(const char* name, const py::handle& v, double automatic, double hi) {
    if (v.is_none() || (py::isinstance<py::str>(v) && v.cast<std::string>() == "auto"))
        return automatic;
    return in_range<double>(name, v, 0.0, hi);
}

// Windows per calibration window (the command line's --calib-generated /
// --kd-random): "auto" or 0 to 64.
double per_window(const char* name, const py::handle& v, double automatic) {
    return auto_or(name, v, automatic, 64.0);
}

// An Adam step on the log-scales (--tune-lr / --kd-lr): "auto" or 0 to 1.
double log_scale_step(const char* name, const py::handle& v) {
    return auto_or(name, v, quant::kLrAuto, 1.0);
}

using Setter = std::function<void(QuantizeOptions&, const py::handle&)>;

// Every keyword but model_dir, output and the run's own (threads, quiet,
// progress), with the command-line flag it stands for.
const std::map<std::string, Setter>& setters() {
    static const std::map<std::string, Setter> s = {
        {"bpw", [](QuantizeOptions& o, const py::handle& v) { o.bpw = v.cast<double>(); }},
        {"calib",
         [](QuantizeOptions& o, const py::handle& v) {
             if (py::isinstance<py::str>(v))
                 o.calib_paths = {v.cast<std::string>()};
             else
                 o.calib_paths = v.cast<std::vector<std::string>>();
         }},
        {"device",
         [](QuantizeOptions& o, const py::handle& v) {
             o.device = encode::parse_device(v.cast<std::string>());
         }},
        {"paths",
         [](QuantizeOptions& o, const py::handle& v) {
             o.enc.paths = encode::parse_paths(py::str(v).cast<std::string>());
         }},
        {"method",
         [](QuantizeOptions& o, const py::handle& v) {
             o.enc.method = encode::parse_method(v.cast<std::string>());
         }},
        {"plan",
         [](QuantizeOptions& o, const py::handle& v) {
             const std::string p = py::str(v).cast<std::string>();
             o.plan_auto_default = false;
             if (p == "auto")
                 o.plan_auto = true;  // as the CLI's --plan auto
             else if (p != "uniform")
                 o.plan_path = p;
         }},
        {"file_bpw",
         [](QuantizeOptions& o, const py::handle& v) {
             o.file_bpw = in_range<double>("file_bpw", v, 0.05, 16.0);
             o.plan_auto = true;
             o.plan_auto_default = false;
         }},
        {"sensitivity_windows",
         [](QuantizeOptions& o, const py::handle& v) {
             o.sensitivity_windows = in_range<int64_t>("sensitivity_windows", v, 1, 4096);
         }},
        {"include_head",
         [](QuantizeOptions& o, const py::handle& v) { o.include_head = v.cast<bool>(); }},
        {"samples",
         [](QuantizeOptions& o, const py::handle& v) {
             o.calib.samples =
                 v.is_none() || (py::isinstance<py::str>(v) && v.cast<std::string>() == "auto")
                     ? quant::kSamplesAuto
                     : in_range<int64_t>("samples", v, 1, 1e18);
         }},
        {"seqlen",
         [](QuantizeOptions& o, const py::handle& v) {
             o.calib.seqlen = in_range<int64_t>("seqlen", v, 0, 1e18);
         }},
        {"holdout",
         [](QuantizeOptions& o, const py::handle& v) { o.calib.holdout = v.cast<double>(); }},
        {"rho", [](QuantizeOptions& o, const py::handle& v) { o.enc.rho = v.cast<double>(); }},
        {"gram_shrink",
         [](QuantizeOptions& o, const py::handle& v) {
             o.gram_shrink = in_range<double>("gram_shrink", v, 0.0, 1.0);
         }},
        {"tune",
         [](QuantizeOptions& o, const py::handle& v) {
             const auto t = v.cast<std::string>();
             CORTIQ_CHECK(
                 t == "auto" || t == "none" || t == "block" || t == "block+kd" || t == "kd",
                 "quantize: tune must be auto, none, block, block+kd or kd, got '{}'", t);
             o.tune_mode = t;
         }},
        {"kd_epochs",
         [](QuantizeOptions& o, const py::handle& v) {
             o.kd.epochs = in_range<int>("kd_epochs", v, 1, 1000);
         }},
        {"kd_patience",
         [](QuantizeOptions& o, const py::handle& v) {
             o.kd.patience = in_range<int>("kd_patience", v, 0, 1000);
         }},
        {"kd_min_gain",
         [](QuantizeOptions& o, const py::handle& v) {
             o.kd.min_gain = auto_or("kd_min_gain", v, quant::kKdMinGainAuto, 1.0);
             CORTIQ_CHECK(o.kd.min_gain < 1, "quantize: kd_min_gain must be below 1, got {}",
                          o.kd.min_gain);
         }},
        {"kd_batch",
         [](QuantizeOptions& o, const py::handle& v) {
             o.kd.batch_windows = in_range<int64_t>("kd_batch", v, 1, 1 << 20);
         }},
        {"kd_random",
         [](QuantizeOptions& o, const py::handle& v) {
             o.kd_random = per_window("kd_random", v, quant::kKdRandomAuto);
         }},
        {"calib_random",
         [](QuantizeOptions& o, const py::handle& v) {
             o.calib_random = in_range<double>("calib_random", v, 0.0, 64.0);
         }},
        {"calib_generated",
         [](QuantizeOptions& o, const py::handle& v) {
             o.calib_generated = per_window("calib_generated", v, quant::kCalibGeneratedAuto);
         }},
        {"kd_lr", [](QuantizeOptions& o,
                     const py::handle& v) { o.kd.lr_scales = log_scale_step("kd_lr", v); }},
        {"kd_lr_signs",
         [](QuantizeOptions& o, const py::handle& v) {
             o.kd.lr_signs = per_window("kd_lr_signs", v, quant::kKdLrSignsAuto);
         }},
        {"tune_epochs",
         [](QuantizeOptions& o, const py::handle& v) {
             o.tune.epochs = in_range<int>("tune_epochs", v, 1, 1000);
         }},
        {"tune_batch",
         [](QuantizeOptions& o, const py::handle& v) {
             o.tune.batch_windows = in_range<int64_t>("tune_batch", v, 1, 1 << 20);
         }},
        {"tune_lr", [](QuantizeOptions& o,
                       const py::handle& v) { o.tune.lr_scales = log_scale_step("tune_lr", v); }},
        {"tune_lr_signs",
         [](QuantizeOptions& o, const py::handle& v) { o.tune.lr_signs = v.cast<double>(); }},
        {"tune_latent",
         [](QuantizeOptions& o, const py::handle& v) { o.tune.latent_init = v.cast<double>(); }},
        {"gptq_passes",
         [](QuantizeOptions& o, const py::handle& v) {
             o.enc.gptq_passes = in_range<int>("gptq_passes", v, 1, 64);
         }},
        {"gptq_multi",
         [](QuantizeOptions& o, const py::handle& v) {
             o.enc.gptq_multi = in_range<int>("gptq_multi", v, 0, 1 << 20);
         }},
        {"gptq_group",
         [](QuantizeOptions& o, const py::handle& v) {
             o.enc.gptq_group = py::isinstance<py::str>(v) && v.cast<std::string>() == "auto"
                                    ? 0
                                    : in_range<int>("gptq_group", v, 0, 1 << 20);
         }},
        {"itq_iters",
         [](QuantizeOptions& o, const py::handle& v) {
             o.enc.itq_iters = in_range<int>("itq_iters", v, 0, 1000);
         }},
        {"match",
         [](QuantizeOptions& o, const py::handle& v) {
             const auto m = v.cast<std::string>();
             CORTIQ_CHECK(m == "original" || m == "layer",
                          "quantize: match must be 'original' or 'layer', got '{}'", m);
             o.match_original = m == "original";
         }},
        {"jobs", [](QuantizeOptions& o, const py::handle& v) { o.jobs = v.cast<int>(); }},
        {"gpus",
         [](QuantizeOptions& o, const py::handle& v) { o.gpus = v.cast<std::vector<int>>(); }},
        {"resume", [](QuantizeOptions& o, const py::handle& v) { o.resume = v.cast<bool>(); }},
        {"force", [](QuantizeOptions& o, const py::handle& v) { o.force = v.cast<bool>(); }},
        {"profile", [](QuantizeOptions& o, const py::handle& v) { o.profile = v.cast<bool>(); }},
    };
    return s;
}

// The command line's defaults where they differ from the struct's.
QuantizeOptions cli_defaults() {
    QuantizeOptions o;
    o.calib.seqlen = 0;  // the model's default
    o.tune_mode = "auto";
    o.calib_generated = quant::kCalibGeneratedAuto;
    o.kd_random = quant::kKdRandomAuto;
    o.calib.samples = quant::kSamplesAuto;
    o.tune.epochs = quant::kTuneEpochsAuto;
    o.tune.lr_scales = quant::kLrAuto;
    o.kd.lr_scales = quant::kLrAuto;
    o.plan_auto_default = true;
    return o;
}

py::dict quantize(const std::string& model_dir, const std::string& output, const py::dict& options,
                  int threads, bool quiet, const py::object& progress) {
    QuantizeOptions o = cli_defaults();
    o.model_dir = model_dir;
    o.out_path = output;
    for (const auto& [key, value] : options) {
        const auto name = key.cast<std::string>();
        if (value.is_none()) continue;  // None: the command line's default
        const auto it = setters().find(name);
        CORTIQ_CHECK(it != setters().end(), "quantize: unknown option '{}'", name);
        try {
            it->second(o, value);
        } catch (const py::cast_error&) {
            CORTIQ_FAIL("quantize: option '{}' cannot be {}", name,
                        py::repr(value).cast<std::string>());
        }
    }
    CORTIQ_CHECK(!o.calib_paths.empty(), "quantize: calib needs at least one text file");
    quant::resolve_tune_mode(o);  // "auto": by device and model
    o.verbose = !quiet;
    o.progress = !quiet && progress.is_none();  // the bar on stderr, unless a callable follows
    o.on_progress = progress_callback(progress);
    quant::QuantizeReport rep;
    {
        py::gil_scoped_release nogil;
        set_num_threads(threads);
        rep = quant::quantize(o);
    }
    py::dict out = py::module_::import("json").attr("loads")(rep.to_json().dump());
    out["summary"] = rep.summary();
    return out;
}

}  // namespace

void bind_quantize(py::module_& m) {
    m.def("_quantize", &quantize, py::arg("model_dir"), py::arg("output"), py::arg("options"),
          py::arg("threads") = 0, py::arg("quiet") = false, py::arg("progress") = py::none(),
          "cortiq.quantize's call into the library (see cortiq.quantize)");
}

}  // namespace cortiq::python
