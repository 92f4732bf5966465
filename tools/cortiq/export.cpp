// cortiq export FILE OUT_DIR [--dtype bf16|f16|f32] [--max-shard-size 5GB] [--force]
#include "export/export.hpp"

#include <fmt/format.h>

#include <memory>

#include "commands.hpp"

namespace cortiq::cli {

namespace {

struct ExportArgs {
    hf::ExportOptions o;
    std::string dtype = "bf16", shard_size = "5GB";
};

}  // namespace

void add_export(CLI::App& app) {
    auto* cmd = app.add_subcommand("export",
                                   "FILE OUT_DIR [--dtype bf16|f16|f32] [--force]: a Hugging Face "
                                   "folder with the dequantised weights of a cortiq file");
    auto a = std::make_shared<ExportArgs>();
    cmd->add_option("file", a->o.in_path, "compressed .safetensors file (cortiq quantize's output)")
        ->required();
    cmd->add_option("out_dir", a->o.out_dir, "folder to write (new or empty, or --force)")
        ->required();
    cmd->add_option("--dtype", a->dtype,
                    "float type of the dequantised linear weights: bf16, f16 or f32 (the other "
                    "tensors keep their stored type and bytes)")
        ->capture_default_str();
    cmd->add_option("--max-shard-size", a->shard_size,
                    "split the weights into shards of at most this size (with "
                    "model.safetensors.index.json), as transformers' save_pretrained")
        ->capture_default_str();
    cmd->add_flag("--force", a->o.force, "replace a folder that is not empty");
    cmd->footer(
        "Example: cortiq export model-1bit.safetensors model-1bit-hf --dtype bf16\n"
        "The folder loads with transformers' AutoModelForCausalLM.from_pretrained.");
    cmd->callback([a] {
        a->o.dtype = hf::parse_export_dtype(a->dtype);
        a->o.max_shard_bytes = hf::parse_shard_size(a->shard_size);
        fmt::print("{}\n", hf::export_folder(a->o).summary());
    });
}

}  // namespace cortiq::cli
