#include "weft/train/model_source.hpp"

#include "weft/core/error.hpp"
#include "weft/model/family.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/state_io.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/memory_fit.hpp"

namespace weft::train {

ModelSource open_model_source(const std::filesystem::path& model_dir,
                              const std::filesystem::path& ckpt) {
    WEFT_CHECK(model_dir.empty() != ckpt.empty(),
               "give exactly one of --model-dir (a Hugging Face directory) and --ckpt (a weft "
               "checkpoint or run directory)");
    ModelSource s;
    if (!ckpt.empty()) {
        s.ckpt = open_checkpoint(ckpt);
        s.cfg = s.ckpt->cfg;
    } else {
        s.model_dir = model_dir;
        s.cfg = model::read_hf_model_config(model_dir);
    }
    // Here, before a command builds anything from the config (a tensor-parallel group checks
    // the heads split by laying the parameters out): a model past memory is one error first.
    check_weights_fit(s.cfg,
                      "the model of " + (s.ckpt ? s.ckpt->dir.string() : model_dir.string()));
    return s;
}

ModelSource open_model_source(const std::filesystem::path& dir) {
    return std::filesystem::is_regular_file(dir / "config.json") ? open_model_source(dir, {})
                                                                 : open_model_source({}, dir);
}

LoadedModel load_model(const ModelSource& source, model::TpComm* tp) {
    LoadedModel m;
    m.model = model::make_model(source.cfg, model::tp_shard(tp), tp);
    m.params = Buffer(m.model->layout().total);
    if (source.ckpt)
        load_checkpoint_params(*source.ckpt, m.model->layout(), m.params.data());
    else
        model::read_hf_weights(model::open_hf_weights(source.model_dir, source.cfg), source.cfg,
                               m.model->layout(), m.params.data());
    return m;
}

LoadedModel load_model(const std::filesystem::path& model_dir, const std::filesystem::path& ckpt) {
    return load_model(open_model_source(model_dir, ckpt));
}

}  // namespace weft::train
