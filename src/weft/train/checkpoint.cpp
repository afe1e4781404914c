#include "weft/train/checkpoint.hpp"

#include <fstream>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"

namespace weft::train {

namespace fs = std::filesystem;

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const model::ModelConfig& cfg,
                         const model::ParamLayout& layout, const StateSource& source,
                         const nlohmann::json& state) {
    fs::path target = ckpt::checkpoint_path(run_dir, step);
    fs::create_directories(target.parent_path());
    ckpt::write_dir_atomic(target, [&](const fs::path& tmp) {
        model::write_tensors(tmp / "model.safetensors", cfg, layout, source(StateTensors::params),
                             model::Naming::weft);
        model::write_tensors(tmp / "optimizer_m.safetensors", cfg, layout,
                             source(StateTensors::exp_avg), model::Naming::weft, "exp_avg.");
        model::write_tensors(tmp / "optimizer_v.safetensors", cfg, layout,
                             source(StateTensors::exp_avg_sq), model::Naming::weft, "exp_avg_sq.");
        nlohmann::json s = state;
        s["format"] = "weft-checkpoint";
        s["version"] = 1;
        s["step"] = step;
        s["model"] = cfg.to_json();
        ckpt::write_file_atomic(tmp / "state.json", s.dump(2) + "\n");
    });
    ckpt::commit_latest(run_dir, step);
    return target;
}

CheckpointInfo open_checkpoint(const fs::path& dir_or_run) {
    CheckpointInfo ck;
    ck.dir = ckpt::resolve_checkpoint(dir_or_run);
    fs::path state = ck.dir / "state.json";
    std::ifstream f(state);
    WEFT_CHECK(f.good(), "checkpoint {} has no state.json", ck.dir.string());
    try {
        ck.state = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", state.string(), e.what());
    }
    WEFT_CHECK(ck.state.value("format", "") == "weft-checkpoint",
               "{}: not a weft checkpoint (format is not 'weft-checkpoint')", state.string());
    WEFT_CHECK(ck.state.contains("model"), "{}: no 'model' section", state.string());
    ck.cfg = model::ModelConfig::from_json(ck.state["model"], state.string());
    return ck;
}

void load_checkpoint_params(const CheckpointInfo& ck, const model::ParamLayout& layout,
                            float* params) {
    model::read_tensors(ck.dir / "model.safetensors", ck.cfg, layout, params, model::Naming::weft);
}

void load_checkpoint_optimizer(const CheckpointInfo& ck, const model::ParamLayout& layout, float* m,
                               float* v) {
    model::read_tensors(ck.dir / "optimizer_m.safetensors", ck.cfg, layout, m, model::Naming::weft,
                        "exp_avg.");
    model::read_tensors(ck.dir / "optimizer_v.safetensors", ck.cfg, layout, v, model::Naming::weft,
                        "exp_avg_sq.");
}

}  // namespace weft::train
