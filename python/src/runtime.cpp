// cortiq.load and the model it returns: logits, perplexity and generation
// through the same library calls as `cortiq ppl` and `cortiq generate`
// (tools/cortiq/ppl.cpp, generate.cpp), and the model's tokenizer.
#include "model/runtime.hpp"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "eval/ppl.hpp"
#include "io/model_tokenizer.hpp"
#include "model/generate.hpp"
#include "model/llama.hpp"

namespace cortiq::python {

namespace {

using TokenizerPtr = std::shared_ptr<io::Tokenizer>;

// What `cortiq generate` feeds first: the prompt with the tokenizer's added
// special tokens, or BOS alone for an empty prompt.
std::vector<int32_t> prompt_ids(const io::Tokenizer& tok, const std::string& prompt) {
    std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/true);
    if (ids.empty() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    CORTIQ_CHECK(!ids.empty(), "generate: empty prompt and the tokenizer has no BOS token");
    return ids;
}

// A loaded model on one device with its tokenizer. The runtime keeps state
// (workspace, KV cache), so calls run one at a time (the mutex), with the
// GIL released so other Python threads go on meanwhile.
class PyModel {
  public:
    PyModel(const std::string& path, const std::string& device, bool dequant,
            const std::string& tokenizer, int threads)
        : path_(path) {
        const model::Device d = model::parse_device(device);
        CORTIQ_CHECK(d == model::Device::cpu || model::gpu_available(), "device='gpu': {}",
                     model::gpu_unavailable_reason());
        set_num_threads(threads);
        model::LoadOptions lo;
        lo.dequant = dequant;
        model_ = std::make_unique<model::Model>(model::Model::load(path, lo));
        rt_ = model::make_runtime(*model_, d);
        if (d == model::Device::gpu) model_.reset();  // the device holds its own copy
        tok_ = std::make_shared<io::Tokenizer>(io::load_model_tokenizer(path, tokenizer));
    }

    MatF logits(const std::vector<int32_t>& ids) {
        CORTIQ_CHECK(!ids.empty(), "logits: no token ids");
        const std::lock_guard<std::mutex> lock(mu_);
        return rt_->forward(ids);
    }

    eval::PplResult ppl(const std::string& text, int64_t ctx, bool bos, int64_t max_windows,
                        const ProgressCallback& progress) {
        eval::PplOptions opt;
        opt.ctx = ctx;
        opt.bos = bos;
        opt.max_windows = max_windows;
        opt.progress = false;
        opt.on_progress = progress;
        const std::lock_guard<std::mutex> lock(mu_);
        return eval::perplexity(*rt_, *tok_, text, opt);
    }

    std::vector<int32_t> generate_ids(const std::vector<int32_t>& prompt, int64_t max_tokens,
                                      double temp, uint64_t seed, bool ignore_eos) {
        CORTIQ_CHECK(!prompt.empty(), "generate: no prompt token ids");
        model::GenerateOptions opt;
        opt.max_tokens = max_tokens;
        opt.temperature = temp;
        opt.seed = seed;
        if (!ignore_eos) {
            opt.stop_ids = rt_->config().eos_token_ids;
            if (tok_->eos_id() >= 0) opt.stop_ids.push_back(tok_->eos_id());
        }
        const std::lock_guard<std::mutex> lock(mu_);
        return model::generate(*rt_, prompt, opt);
    }

    // The generated text as `cortiq generate` prints it: each token's piece
    // after the one before it, starting from the prompt's last token.
    std::string generate(const std::string& prompt, int64_t max_tokens, double temp, uint64_t seed,
                         bool ignore_eos) {
        const std::vector<int32_t> ids = prompt_ids(*tok_, prompt);
        std::string text;
        int32_t prev = ids.back();
        for (int32_t id : generate_ids(ids, max_tokens, temp, seed, ignore_eos)) {
            text += tok_->decode_token(id, prev);
            prev = id;
        }
        return text;
    }

    const io::ModelConfig& config() const { return rt_->config(); }
    const TokenizerPtr& tokenizer() const { return tok_; }
    const std::string& path() const { return path_; }
    model::Device device() const { return rt_->device(); }
    int64_t weight_bytes() const { return rt_->weight_bytes(); }

  private:
    std::string path_;
    std::unique_ptr<model::Model> model_;
    std::unique_ptr<model::Runtime> rt_;
    TokenizerPtr tok_;
    std::mutex mu_;
};

void bind_tokenizer(py::module_& m) {
    py::class_<io::Tokenizer, TokenizerPtr>(m, "Tokenizer",
                                            "A Hugging Face tokenizer.json (byte-level or "
                                            "SentencePiece-style BPE)")
        .def(py::init([](const std::filesystem::path& path) {
                 return std::make_shared<io::Tokenizer>(io::load_model_tokenizer(path.string()));
             }),
             py::arg("path"),
             "The tokenizer of a model folder or cortiq file (as cortiq.load finds it)")
        .def(
            "encode",
            [](const io::Tokenizer& t, const std::string& text, bool add_special) {
                return t.encode(text, add_special);
            },
            py::arg("text"), py::arg("add_special") = false,
            "Token ids of `text`; add_special adds the tokenizer's BOS (if any)")
        .def(
            "decode",
            [](const io::Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
                return utf8_text(t.decode(ids, skip_special));
            },
            py::arg("ids"), py::arg("skip_special") = false)
        .def("token_to_id", &io::Tokenizer::token_to_id, py::arg("token"))
        .def_property_readonly("vocab_size", &io::Tokenizer::vocab_size)
        .def_property_readonly("bos_id", &io::Tokenizer::bos_id)
        .def_property_readonly("eos_id", &io::Tokenizer::eos_id);
}

void bind_ppl_result(py::module_& m) {
    py::class_<eval::PplResult>(m, "PplResult", "Perplexity by the plain protocol")
        .def_readonly("ppl", &eval::PplResult::ppl)
        .def_readonly("nll", &eval::PplResult::nll, "mean NLL per prediction (nats)")
        .def_readonly("tokens", &eval::PplResult::tokens, "tokens in the text")
        .def_readonly("windows", &eval::PplResult::windows)
        .def_readonly("predictions", &eval::PplResult::predictions)
        .def_readonly("seconds", &eval::PplResult::seconds)
        .def_readonly("tokens_per_second", &eval::PplResult::tokens_per_second)
        .def("json", &eval::PplResult::json, "one JSON line, as `cortiq ppl --json`")
        .def("__repr__",
             [](const eval::PplResult& r) { return "<PplResult " + r.summary() + ">"; });
}

}  // namespace

void bind_runtime(py::module_& m) {
    bind_tokenizer(m);
    bind_ppl_result(m);
    py::class_<PyModel>(m, "Model", "A model loaded by cortiq.load")
        .def_property_readonly("tokenizer", &PyModel::tokenizer)
        .def_property_readonly("path", &PyModel::path)
        .def_property_readonly(
            "device",
            [](const PyModel& p) { return p.device() == model::Device::gpu ? "gpu" : "cpu"; })
        .def_property_readonly("vocab_size", [](const PyModel& p) { return p.config().vocab_size; })
        .def_property_readonly("num_layers", [](const PyModel& p) { return p.config().num_layers; })
        .def_property_readonly("weight_bytes", &PyModel::weight_bytes)
        .def(
            "logits",
            [](PyModel& p, const std::vector<int32_t>& ids) {
                MatF out;
                {
                    py::gil_scoped_release nogil;
                    out = p.logits(ids);
                }
                return to_numpy(std::move(out));
            },
            py::arg("ids"), "Logits [T, vocab] (float32) of tokens at positions 0..T-1, one window")
        .def(
            "ppl",
            [](PyModel& p, const std::string& text, int64_t ctx, bool bos, int64_t max_windows,
               const py::object& progress) {
                const ProgressCallback cb = progress_callback(progress);
                py::gil_scoped_release nogil;
                return p.ppl(text, ctx, bos, max_windows, cb);
            },
            py::arg("text"), py::arg("ctx") = 512, py::arg("bos") = false,
            py::arg("max_windows") = 0, py::arg("progress") = py::none(),
            "Perplexity of `text` (as `cortiq ppl`); progress(stage, done, total) per batch")
        .def(
            "generate",
            [](PyModel& p, const std::string& prompt, int64_t max_tokens, double temp,
               uint64_t seed, bool ignore_eos) {
                std::string text;
                {
                    py::gil_scoped_release nogil;
                    text = p.generate(prompt, max_tokens, temp, seed, ignore_eos);
                }
                return utf8_text(text);
            },
            py::arg("prompt") = "", py::arg("max_tokens") = 128, py::arg("temp") = 0.0,
            py::arg("seed") = 0, py::arg("ignore_eos") = false,
            "The text generated after `prompt` (as `cortiq generate`; greedy at temp 0)")
        .def("generate_ids", &PyModel::generate_ids, py::arg("prompt_ids"),
             py::arg("max_tokens") = 128, py::arg("temp") = 0.0, py::arg("seed") = 0,
             py::arg("ignore_eos") = false, py::call_guard<py::gil_scoped_release>(),
             "The token ids generated after `prompt_ids`");
    m.def(
        "load",
        [](const std::string& path, const std::string& device, bool dequant,
           const std::string& tokenizer, int threads) {
            return std::make_unique<PyModel>(path, device, dequant, tokenizer, threads);
        },
        py::arg("path"), py::arg("device") = "cpu", py::arg("dequant") = false,
        py::arg("tokenizer") = "", py::arg("threads") = 0, py::call_guard<py::gil_scoped_release>(),
        "Loads a Hugging Face folder or a cortiq file (compressed layers run packed unless "
        "dequant); tokenizer: a folder with tokenizer.json (default: the model's); threads: "
        "host threads (0: the free cores)");
}

}  // namespace cortiq::python
