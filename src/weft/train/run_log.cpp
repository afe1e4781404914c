#include "weft/train/run_log.hpp"

#include <fmt/format.h>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/counts.hpp"

namespace weft::train {

RunLog::RunLog(const TrainOptions& o, const comm::Mesh& mesh, int64_t start_step)
    : o_(o), root_(mesh.world_rank() == 0), progress_(start_step, o.steps) {
    if (root_) {
        std::filesystem::create_directories(o.out);
        ckpt::remove_stale_temporaries(o.out);
    }
    metrics_ = root_ ? std::make_unique<MetricsLog>(o.out / "metrics.jsonl", start_step)
                     : std::make_unique<MetricsLog>();
}

void RunLog::note(const std::string& line) {
    if (root_) progress_.note(line);
}

void RunLog::step(int64_t step, double loss, double tokens_per_s, double mfu, double lr) {
    if (root_ && (step % o_.log_every == 0 || step == o_.steps))
        progress_.step(step, loss, tokens_per_s, mfu, lr);
}

void RunLog::finish_progress() {
    if (root_) progress_.finish();
}

void RunLog::started(const TrainState& st, const RunInputs& in, const BatchSplit& split,
                     int threads, const MemoryEstimate& mem) {
    const model::ModelConfig& cfg = in.cfg;
    const parallel::ModelStateBytes state = st.model_state_bytes();
    const int world = st.mesh().world_size();
    note(fmt::format(
        "weft train: {} parameters, {} layers x {} heads x {} width, batch {} = {} x {} x {} "
        "micro-batches of {} tokens (accumulation x dp x micro), {} thread(s) per rank, {} "
        "matrix products",
        model::num_parameters(cfg), cfg.n_layer, cfg.n_head, cfg.n_embd, o_.batch_size,
        split.micro_batches, o_.layout.dp, split.micro, o_.seq_len, threads,
        o_.dtype == "bf16" && !kernels::bf16_products_native()
            ? "bf16 (emulated on the fp32 units: this CPU has neither AVX512-BF16 nor AMX)"
            : o_.dtype));
    note(fmt::format(
        "layout {} over {} rank(s); model state per rank: params {} + grads {} + "
        "optimizer {} = {} bytes",
        o_.layout.describe(), world, state.params, state.grads, state.optimizer, state.total()));
    note("memory estimate per rank: " + mem.describe());
    if (!in.train_documents.empty())
        note(
            fmt::format("packing documents: {} in {} tokens of {}, attention and positions "
                        "restart at each",
                        in.train_documents.size(), in.train.size(), o_.data.string()));
    if (in.resume_from)
        note(
            fmt::format("resumed from {} at step {}", in.resume_from->dir.string(), in.start_step));
    write({{"event", "start"},
           {"pack", o_.pack},
           {"step", in.start_step},
           {"layout", o_.layout.describe()},
           {"world_size", world},
           {"micro_batch_size", split.micro},
           {"threads_per_rank", threads},
           {"dtype", o_.dtype},
           {"grad_reduce_dtype", o_.grad_reduce_dtype},
           {"model_state_bytes",
            {{"params", state.params},
             {"grads", state.grads},
             {"optimizer", state.optimizer},
             {"total", state.total()}}}});
}

}  // namespace weft::train
