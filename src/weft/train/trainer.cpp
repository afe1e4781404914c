#include "weft/train/trainer.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"
#include "weft/data/token_file.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/model/state_io.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/evaluate.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/metrics.hpp"

namespace weft::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

nlohmann::json run_state(const TrainOptions& o, int64_t micro) {
    return {{"seed", o.seed},       {"batch_size", o.batch_size},   {"micro_batch_size", micro},
            {"seq_len", o.seq_len}, {"sequential", o.sequential},   {"data", o.data.string()},
            {"steps", o.steps},     {"layout", o.layout.describe()}};
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TrainSummary run_training(const TrainOptions& o_in) {
    TrainOptions o = o_in;
    o.validate();
    o.layout.resolve(1);
    WEFT_CHECK(o.layout.world_size() == 1,
               "this build trains in one process; layout {} needs {} ranks", o.layout.describe(),
               o.layout.world_size());
    const int64_t micro = o.micro_batch_size ? o.micro_batch_size : o.batch_size;
    WEFT_CHECK(o.batch_size % micro == 0,
               "--batch-size {} is not a multiple of --micro-batch-size {}", o.batch_size, micro);
    const int64_t accum = o.batch_size / micro, T = o.seq_len;
    const int64_t baseline_rss = current_rss_bytes();

    // Everything that can be wrong is found before the run directory is touched.
    std::optional<CheckpointInfo> resume_from;
    if (o.resume) {
        if (auto latest = ckpt::find_latest(o.out)) resume_from = open_checkpoint(*latest);
    } else {
        WEFT_CHECK(!ckpt::find_latest(o.out),
                   "run directory {} already holds checkpoints; pass --resume to continue it, or "
                   "choose another --out",
                   o.out.string());
    }
    model::ModelConfig cfg = o.model_config();
    if (resume_from) {
        cfg = resume_from->cfg;
    } else if (!o.model_dir.empty()) {
        cfg = model::read_hf_model_config(o.model_dir);
    }
    cfg.validate("model '" + o.model + "'");
    WEFT_CHECK(T <= cfg.n_positions, "--seq-len {} exceeds the model's n_positions {}", T,
               cfg.n_positions);
    data::TokenFile train_file = data::TokenFile::open(o.data);
    data::DataLoader loader(train_file, T, o.seed, o.sequential);
    std::optional<data::TokenFile> val_file;
    if (fs::path vp = o.val_path(); !vp.empty()) val_file = data::TokenFile::open(vp);

    if (o.threads > 0) omp_set_num_threads(o.threads);
    model::Gpt2 model(cfg);
    const model::ParamLayout& layout = model.layout();
    Buffer params(layout.total), grads(layout.total);
    optim::AdamW adam(layout, 0, layout.total);
    int64_t start_step = 0;
    if (resume_from) {
        load_checkpoint_params(*resume_from, layout, params.data());
        load_checkpoint_optimizer(*resume_from, layout, adam.exp_avg().data(),
                                  adam.exp_avg_sq().data());
        start_step = resume_from->state.at("step").get<int64_t>();
    } else if (!o.model_dir.empty()) {
        model::read_tensors(o.model_dir / "model.safetensors", layout, params.data(),
                            model::Naming::hf);
    } else {
        model::init_params(params.data(), layout, o.seed);
    }
    model::Activations act(cfg, micro, T);
    model::FlatAccess access(layout, params.data(), grads.data());

    fs::create_directories(o.out);
    ckpt::remove_stale_temporaries(o.out);
    MetricsLog metrics(o.out / "metrics.jsonl");
    Progress progress(start_step, o.steps);
    const MemoryEstimate mem = estimate_memory(cfg, layout.total, micro, T, baseline_rss);
    const double flops_per_token = cfg.train_flops_per_token(T);
    const double peak_gflops =
        o.peak_gflops > 0 ? o.peak_gflops : kernels::measure_gemm_peak_gflops(1024, 0.3);
    progress.note(
        fmt::format("weft train: {} parameters, {} layers x {} heads x {} width, "
                    "batch {} = {} x {} micro-batches of {} tokens, {} thread(s)",
                    cfg.num_parameters(), cfg.n_layer, cfg.n_head, cfg.n_embd, o.batch_size, accum,
                    micro, T, omp_get_max_threads()));
    progress.note("memory estimate: " + mem.describe());
    if (resume_from)
        progress.note(
            fmt::format("resumed from {} at step {}", resume_from->dir.string(), start_step));

    const float loss_scale = 1.0f / float(o.batch_size * T);
    TrainSummary summary;
    summary.first_step = start_step;
    double tokens_per_s_sum = 0;
    int64_t timed_steps = 0;
    auto save = [&](int64_t step) {
        fs::path p = save_checkpoint(o.out, step, cfg, layout, params.data(), adam.exp_avg().data(),
                                     adam.exp_avg_sq().data(), run_state(o, micro));
        ckpt::keep_last(o.out, int(o.keep_checkpoints));
        progress.note("saved " + p.string());
    };
    auto eval = [&](int64_t step) {
        if (!val_file) return;
        EvalResult r = evaluate(model, params.data(), *val_file, micro, T, o.eval_batches);
        summary.val_loss = r.loss;
        metrics.write({{"step", step}, {"val_loss", r.loss}, {"val_tokens", r.tokens}});
        progress.note(fmt::format("step {} | val loss {:.4f} ({} tokens)", step, r.loss, r.tokens));
    };

    // As nanoGPT does, a run that evaluates periodically also evaluates its starting point.
    if (o.eval_every && start_step == 0) eval(0);
    const int64_t end_step = o.exit_after ? std::min(o.steps, start_step + o.exit_after) : o.steps;
    for (int64_t step = start_step; step < end_step; ++step) {
        auto t0 = Clock::now();
        grads.zero();
        double loss_sum = 0;
        for (int64_t m = 0; m < accum; ++m) {
            for (int64_t r = 0; r < micro; ++r)
                loader.sample(step, m * micro + r, o.batch_size, act.inputs.data() + r * T,
                              act.targets.data() + r * T);
            loss_sum += model.forward(act, access, /*train=*/true, loss_scale);
            model.backward(act, access);
        }
        const double loss = loss_sum / double(o.batch_size * T);
        const double grad_norm = std::sqrt(kernels::sum_squares(grads.data(), grads.size()));
        const float lr = optim::learning_rate(o.optim, step, o.steps);
        adam.step(params.data(), grads.data(), o.optim, lr, optim::clip_scale(o.optim, grad_norm),
                  step + 1);
        const double dt = seconds_since(t0);
        const double tps = double(o.batch_size * T) / dt;
        const double mfu = tps * flops_per_token / (peak_gflops * 1e9);
        WEFT_CHECK(std::isfinite(loss), "loss is {} at step {}: training diverged", loss, step + 1);
        if (step > start_step) tokens_per_s_sum += tps, ++timed_steps;  // the first warms up
        if (step == start_step) summary.first_loss = loss;
        summary.last_loss = loss;
        summary.last_step = step + 1;
        metrics.write({{"step", step + 1},
                       {"loss", loss},
                       {"lr", lr},
                       {"grad_norm", grad_norm},
                       {"tokens_per_s", tps},
                       {"mfu", mfu},
                       {"step_time_s", dt},
                       {"peak_rss_bytes", peak_rss_bytes()}});
        if ((step + 1) % o.log_every == 0 || step + 1 == o.steps)
            progress.step(step + 1, loss, tps, mfu, lr);
        if (o.eval_every && (step + 1) % o.eval_every == 0 && step + 1 < o.steps) eval(step + 1);
        if (o.save_every && (step + 1) % o.save_every == 0 && step + 1 < end_step) save(step + 1);
    }
    progress.finish();
    if (end_step < o.steps) {
        save(end_step);
        progress.note(
            fmt::format("stopped after step {} of {} (--exit-after); continue with --resume",
                        end_step, o.steps));
        return summary;
    }
    eval(o.steps);
    if (start_step < o.steps || !resume_from) save(o.steps);
    summary.tokens_per_s = timed_steps ? tokens_per_s_sum / double(timed_steps) : 0;
    progress.note(fmt::format("peak resident memory {:.1f} MiB (estimate {:.1f} MiB)",
                              double(peak_rss_bytes()) / (1 << 20),
                              double(mem.total()) / (1 << 20)));
    return summary;
}

}  // namespace weft::train
