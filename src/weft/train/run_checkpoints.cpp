#include "weft/train/run_checkpoints.hpp"

#include <fmt/format.h>

#include "weft/ckpt/checkpoint_dir.hpp"

namespace weft::train {

RunCheckpoints::RunCheckpoints(TrainState& st, const TrainOptions& o, int64_t micro, RunLog& log,
                               Heartbeat& heartbeat)
    : st_(st),
      o_(o),
      micro_(micro),
      heartbeat_(heartbeat),
      saver_(st, o.out, o.async_checkpoint, int(o.keep_checkpoints),
             [&log](const std::filesystem::path& dir, const CheckpointSaver::Timing& t) {
                 // Its step lets a resumed run keep or drop the line with the steps it redoes.
                 log.write({{"event", "checkpoint"},
                            {"step", ckpt::parse_step_name(dir.filename().string()).value_or(0)},
                            {"dir", dir.string()},
                            {"bytes", t.bytes},
                            {"stage_s", t.stage_s},
                            {"write_s", t.write_s}});
                 log.note(fmt::format(
                     "saved {} (rank 0: {} bytes, staged in {:.3f} s, written in {:.3f} s)",
                     dir.string(), t.bytes, t.stage_s, t.write_s));
             }) {}

void RunCheckpoints::save(int64_t step) {
    heartbeat_.beat(Phase::checkpoint, step);
    saver_.save(step, run_state());
}

nlohmann::json RunCheckpoints::run_state() const {
    nlohmann::json j = {{"seed", o_.seed},
                        {"batch_size", o_.batch_size},
                        {"micro_batch_size", micro_},
                        {"seq_len", o_.seq_len},
                        {"sequential", o_.sequential},
                        {"pack", o_.pack},
                        {"data", o_.data.string()},
                        {"steps", o_.steps},
                        {"layout", o_.layout.describe()},
                        {"lr", o_.optim.lr},
                        {"lr_schedule", o_.optim.lr_schedule},
                        {"warmup", o_.optim.warmup},
                        {"min_lr_ratio", o_.optim.min_lr_ratio},
                        {"optimizer", o_.optim.optimizer}};
    // Aux-loss-free balancing: the bias the next steps route by (identical on every rank).
    if (std::vector<float> bias = st_.model().router_bias(); !bias.empty())
        j["moe_router_bias"] = std::move(bias);
    return j;
}

}  // namespace weft::train
