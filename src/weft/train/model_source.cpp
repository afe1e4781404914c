#include "weft/train/model_source.hpp"

#include "weft/core/error.hpp"
#include "weft/model/family.hpp"
#include "weft/model/state_io.hpp"
#include "weft/train/checkpoint.hpp"

namespace weft::train {

LoadedModel load_model(const std::filesystem::path& model_dir, const std::filesystem::path& ckpt) {
    WEFT_CHECK(model_dir.empty() != ckpt.empty(),
               "give exactly one of --model-dir (a Hugging Face directory) and --ckpt (a weft "
               "checkpoint or run directory)");
    LoadedModel m;
    if (!ckpt.empty()) {
        CheckpointInfo ck = open_checkpoint(ckpt);
        m.model = model::make_model(ck.cfg);
        m.params = Buffer(m.model->layout().total);
        load_checkpoint_params(ck, m.model->layout(), m.params.data());
    } else {
        model::ModelConfig cfg = model::read_hf_model_config(model_dir);
        m.model = model::make_model(cfg);
        m.params = Buffer(m.model->layout().total);
        model::read_hf_weights(ckpt::HfWeights::open(model_dir), cfg, m.model->layout(),
                               m.params.data());
    }
    return m;
}

}  // namespace weft::train
