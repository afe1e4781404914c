#include "weft/plan/models.hpp"

#include <filesystem>

#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"
#include "weft/plan/json_read.hpp"

namespace weft::plan {

const std::vector<MegatronRow>& megatron_table() {
    // Narayanan et al. 2021, Table 1 (weak scaling on Selene, A100 80GB, 8 per node).
    static const std::vector<MegatronRow> rows = {
        {"megatron-1.7b", 24, 2304, 24, 1, 1, 32, 512},
        {"megatron-3.6b", 32, 3072, 30, 2, 1, 64, 512},
        {"megatron-7.5b", 32, 4096, 36, 4, 1, 128, 512},
        {"megatron-18b", 48, 6144, 40, 8, 1, 256, 1024},
        {"megatron-39b", 64, 8192, 48, 8, 2, 512, 1536},
        {"megatron-76b", 80, 10240, 60, 8, 4, 1024, 1792},
        {"megatron-145b", 96, 12288, 80, 8, 8, 1536, 2304},
        {"megatron-310b", 128, 16384, 96, 8, 16, 1920, 2160},
        {"megatron-530b", 128, 20480, 105, 8, 35, 2520, 2520},
        {"megatron-1t", 160, 25600, 128, 8, 64, 3072, 3072},
    };
    return rows;
}

std::vector<std::string> plan_model_names() {
    std::vector<std::string> names = model::model_preset_names();
    names.push_back("gpt3-175b");
    for (const MegatronRow& r : megatron_table()) names.push_back(r.name);
    return names;
}

static model::ModelConfig shape(int64_t vocab, int64_t seq, int64_t layers, int64_t heads,
                                int64_t width) {
    model::ModelConfig c;
    c.vocab_size = vocab, c.n_positions = seq, c.n_layer = layers, c.n_head = heads;
    c.n_embd = width;
    return c;
}

NamedModel load_model(const std::string& name_or_path) {
    if (name_or_path == "gpt3-175b") return {name_or_path, shape(50257, 2048, 96, 96, 12288)};
    for (const MegatronRow& r : megatron_table())
        if (name_or_path == r.name)
            return {r.name, shape(51200, 2048, r.layers, r.heads, r.hidden)};
    // A Hugging Face model directory, or its config.json, as a user names the model they mean
    // to train (GPT-2 or Llama: the family comes from model_type).
    const std::filesystem::path path(name_or_path);
    if (std::filesystem::is_directory(path) && std::filesystem::exists(path / "config.json"))
        return {path.filename().string(), model::read_hf_model_config(path)};
    if (path.filename() == "config.json" && std::filesystem::is_regular_file(path))
        return {path.parent_path().filename().string(),
                model::read_hf_model_config(path.parent_path())};
    if (!std::filesystem::is_regular_file(name_or_path)) {
        for (const std::string& n : model::model_preset_names())
            if (n == name_or_path) return {n, model::model_preset(n)};
        std::string list;
        for (const std::string& n : plan_model_names()) list += (list.empty() ? "" : ", ") + n;
        fail("--model '{}': not a file and not a preset (presets: {})", name_or_path, list);
    }
    JsonReader r = JsonReader::open(name_or_path);
    r.only({"name", "vocab_size", "n_positions", "n_layer", "n_head", "n_embd"});
    NamedModel m{r.string("name"),
                 shape(r.integer("vocab_size", 1), r.integer("n_positions", 1),
                       r.integer("n_layer", 1), r.integer("n_head", 1), r.integer("n_embd", 1))};
    m.config.validate(name_or_path);
    return m;
}

}  // namespace weft::plan
