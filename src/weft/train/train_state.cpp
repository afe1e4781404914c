#include "weft/train/train_state.hpp"

#include <algorithm>
#include <cmath>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"

namespace weft::train {

namespace fs = std::filesystem;

TrainState::TrainState(const model::ModelConfig& cfg, comm::Group& dp,
                       parallel::DataParallelOptions options, int64_t micro, int64_t T)
    : model_(cfg), dp_(model_.layout(), dp, options), act_(cfg, micro, T) {
    for (const parallel::ShardSlice& s : dp_.update_slices())
        adam_.emplace_back(dp_.padded(), s.begin, s.begin + s.size);
}

void TrainState::init(uint64_t seed) {
    dp_.load_params([&](int unit, float* buf) {
        model::init_params(buf, parallel::unit_layout(dp_.padded(), unit), seed);
    });
}

void TrainState::load_hf(const fs::path& model_dir) {
    dp_.load_params([&](int unit, float* buf) {
        model::read_tensors(model_dir / "model.safetensors",
                            parallel::unit_layout(dp_.padded(), unit), buf, model::Naming::hf);
    });
}

void TrainState::copy_moments(float* shard, bool second, bool to_shard) {
    const auto& slices = dp_.update_slices();
    for (size_t i = 0; i < slices.size(); ++i) {
        float* m = second ? adam_[i].exp_avg_sq().data() : adam_[i].exp_avg().data();
        float* s = shard + slices[i].shard_offset;
        if (to_shard)
            std::copy_n(m, slices[i].size, s);
        else
            std::copy_n(s, slices[i].size, m);
    }
}

void TrainState::load_checkpoint(const CheckpointInfo& ck) {
    auto reader = [&](const char* file, const char* prefix) {
        return [&, file, prefix](int unit, float* buf) {
            model::read_tensors(ck.dir / file, parallel::unit_layout(dp_.padded(), unit), buf,
                                model::Naming::weft, prefix);
        };
    };
    dp_.load_params(reader("model.safetensors", ""));
    // Stage 0 keeps the moments whole; the others keep this rank's slices.
    const bool whole = dp_.stage() == 0;
    Buffer shard(dp_.zero_layout().shard_floats());
    for (bool second : {false, true}) {
        auto fill = second ? reader("optimizer_v.safetensors", "exp_avg_sq.")
                           : reader("optimizer_m.safetensors", "exp_avg.");
        if (whole) {
            float* m = second ? adam_[0].exp_avg_sq().data() : adam_[0].exp_avg().data();
            parallel::fill_units(dp_.zero_layout(), fill, m, true);
        } else {
            parallel::fill_units(dp_.zero_layout(), fill, shard.data(), false);
            copy_moments(shard.data(), second, false);
        }
    }
}

fs::path TrainState::save(const fs::path& run_dir, int64_t step, const nlohmann::json& state) {
    const bool root = dp_.group().rank() == 0;
    const int64_t total = dp_.padded().total;
    // Whole tensors exist on rank 0 only while it writes them.
    Buffer params_tmp(root && dp_.stage() == 3 ? total : 0);
    const float* params = dp_.gather_params(params_tmp.data());
    Buffer m_tmp, v_tmp;
    const float *m = nullptr, *v = nullptr;
    if (dp_.stage() == 0) {
        m = adam_[0].exp_avg().data();
        v = adam_[0].exp_avg_sq().data();
    } else {
        Buffer shard(dp_.zero_layout().shard_floats());
        if (root) m_tmp = Buffer(total), v_tmp = Buffer(total);
        copy_moments(shard.data(), false, true);
        dp_.gather_shard(shard.data(), m_tmp.data());
        copy_moments(shard.data(), true, true);
        dp_.gather_shard(shard.data(), v_tmp.data());
        m = m_tmp.data(), v = v_tmp.data();
    }
    if (!root) return {};
    return save_checkpoint(run_dir, step, model_.config(), dp_.padded(), params, m, v, state);
}

StepOutcome TrainState::step(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                             float loss_scale, const optim::OptimConfig& oc, float lr, int64_t t) {
    dp_.begin_step();
    double loss_sum = 0;
    for (int64_t m = 0; m < micro_batches; ++m) {
        fill(m);
        dp_.begin_forward(m + 1 == micro_batches);
        loss_sum += model_.forward(act_, dp_, /*train=*/true, loss_scale);
        dp_.begin_backward();
        model_.backward(act_, dp_);
    }
    dp_.end_backward();
    // One all-reduce for both: the global loss and the squared norm, each element counted once.
    double sums[2] = {loss_sum, dp_.grad_sum_squares()};
    comm::all_reduce(dp_.group(), std::span<double>(sums));
    StepOutcome out{sums[0], std::sqrt(sums[1])};
    const float scale = optim::clip_scale(oc, out.grad_norm);
    const auto& slices = dp_.update_slices();
    for (size_t i = 0; i < slices.size(); ++i)
        adam_[i].step(dp_.update_params(slices[i]), dp_.update_grads(slices[i]), oc, lr, scale, t);
    dp_.after_update();
    return out;
}

MemoryEstimate TrainState::memory_estimate(int64_t baseline_rss) const {
    const parallel::ModelStateBytes b = dp_.model_state_bytes();
    return estimate_memory(model_.config(), b.params, b.grads, b.optimizer, dp_.working_bytes(),
                           act_.B, act_.T, baseline_rss);
}

EvalResult TrainState::evaluate(const data::TokenFile& file, int64_t B, int64_t batches) {
    const int n = dp_.group().size();
    WEFT_CHECK(B % (n * act_.B) == 0,
               "internal: evaluation batch {} is not a multiple of dp {} x micro-batch {}", B, n,
               act_.B);
    const int64_t rows = B / n;
    EvalResult part = evaluate_rows(file, B, batches, dp_.group().rank() * rows, rows, act_, [&] {
        dp_.begin_forward(true);
        return model_.forward(act_, dp_, /*train=*/false, 1.0f);
    });
    double sums[2] = {part.loss, double(part.tokens)};
    comm::all_reduce(dp_.group(), std::span<double>(sums));
    return {sums[0] / sums[1], int64_t(sums[1])};
}

}  // namespace weft::train
