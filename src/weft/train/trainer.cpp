#include "weft/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"
#include "weft/data/token_file.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/moe_block.hpp"
#include "weft/model/state_io.hpp"
#include "weft/train/batch_split.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/comm_report.hpp"
#include "weft/train/comm_trace.hpp"
#include "weft/train/heartbeat.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/metrics.hpp"
#include "weft/train/pipeline_trace.hpp"
#include "weft/train/process.hpp"
#include "weft/train/slow_rank.hpp"
#include "weft/train/state_checkpoint.hpp"
#include "weft/train/state_memory.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// `bias`: the MoE layers' aux-loss-free balancing bias when it is on (state the next steps route
// by, identical on every rank), else null.
nlohmann::json run_state(const TrainOptions& o, int64_t micro, const std::vector<float>* bias) {
    nlohmann::json j = {{"seed", o.seed},
                        {"batch_size", o.batch_size},
                        {"micro_batch_size", micro},
                        {"seq_len", o.seq_len},
                        {"sequential", o.sequential},
                        {"data", o.data.string()},
                        {"steps", o.steps},
                        {"layout", o.layout.describe()},
                        {"lr", o.optim.lr},
                        {"lr_schedule", o.optim.lr_schedule},
                        {"warmup", o.optim.warmup},
                        {"min_lr_ratio", o.optim.min_lr_ratio}};
    if (bias) j["moe_router_bias"] = *bias;
    return j;
}

// The balancing bias of the run's model, when the model has one and it is on.
std::vector<float>* router_bias(TrainState& st) {
    std::vector<float>* bias = st.model().moe_router_bias();
    return bias && st.model().config().moe_router_bias_rate > 0 ? bias : nullptr;
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// The sample order is a function of (seed, step, row of the global batch): resuming with another
// seed, batch, sequence length or order would silently train on other samples than the
// interrupted run would have.
void check_resume_settings(const nlohmann::json& state, const TrainOptions& o) {
    auto same = [&](const char* key, const auto& now, const char* flag,
                    const char* what = "the sample order") {
        if (!state.contains(key)) return;
        const auto then = state[key].get<std::decay_t<decltype(now)>>();
        WEFT_CHECK(then == now,
                   "resuming with {} {} but the checkpoint was trained with {}; {} would change "
                   "(use the same value, or start a new run from the checkpoint's weights)",
                   flag, now, then, what);
    };
    same("seed", o.seed, "--seed");
    same("batch_size", o.batch_size, "--batch-size");
    same("seq_len", o.seq_len, "--seq-len");
    same("sequential", o.sequential, "--sequential");
    // The learning rate of a step depends on these (and, for the cosine, on --steps): a changed
    // schedule would make the resumed steps differ from the uninterrupted run's.
    same("lr", o.optim.lr, "--lr", "the learning-rate schedule");
    same("lr_schedule", o.optim.lr_schedule, "--lr-schedule", "the learning-rate schedule");
    same("warmup", o.optim.warmup, "--warmup", "the learning-rate schedule");
    same("min_lr_ratio", o.optim.min_lr_ratio, "--min-lr-ratio", "the learning-rate schedule");
    if (o.optim.lr_schedule == "cosine")
        same("steps", o.steps, "--steps", "the learning-rate schedule");
}

// --ep splits experts: a dense model has none, and each ep rank must get as many.
void check_expert_parallel(int ep, const model::ModelConfig& cfg, const std::string& model) {
    if (ep == 1) return;
    WEFT_CHECK(cfg.n_experts > 0,
               "--ep {}: model '{}' is dense (no mixture-of-experts layers), expected --ep 1", ep,
               model);
    WEFT_CHECK(cfg.n_experts % ep == 0,
               "--ep {}: model '{}' has {} experts per layer, not divisible by ep; expected ep "
               "dividing {}",
               ep, model, cfg.n_experts, cfg.n_experts);
}

}  // namespace

void run_training(const TrainOptions& o_in) {
    TrainOptions o = o_in;
    o.validate();
    const TestFault fault = TestFault::from_env();
    comm::MeshOptions mesh_options;
    if (o.comm_timeout > 0) mesh_options.timeout_s = o.comm_timeout;
    mesh_options.flight_dir = (o.out / "flight").string();  // written only on a hang or a signal
    // Collective; a world size that does not match the layout fails here on every rank.
    comm::Mesh mesh(o.layout, mesh_options);
    o.layout = mesh.layout();
    const int dp = o.layout.dp;
    const InjectedDelay delay = parse_inject_delay(o.inject_delay, mesh.world_size());
    const bool root = mesh.world_rank() == 0;
    const BatchSplit split = split_batch(o.layout, o.batch_size, o.micro_batch_size);
    const int64_t micro = split.micro, accum = split.micro_batches, T = o.seq_len;
    const int threads = set_threads_per_rank(o.threads);
    kernels::set_matmul_precision(kernels::parse_matmul_precision(o.dtype));
    const int64_t baseline_rss = current_rss_bytes();

    // Everything that can be wrong is found, on every rank, before the run directory is touched.
    std::optional<CheckpointInfo> resume_from;
    if (o.resume) {
        if (auto point = open_resume_checkpoint(o.out)) {
            if (root && !point->warning.empty()) fmt::print(stderr, "weft: {}\n", point->warning);
            resume_from = std::move(point->ck);
        }
    } else {
        WEFT_CHECK(!ckpt::find_latest(o.out),
                   "run directory {} already holds checkpoints; pass --resume to continue it, or "
                   "choose another --out",
                   o.out.string());
    }
    model::ModelConfig cfg = o.model_config();
    if (resume_from) {
        cfg = resume_from->cfg;
        o.check_model_flags(cfg, "resuming " + resume_from->dir.string(), "the checkpoint");
    } else if (!o.model_dir.empty()) {
        cfg = model::read_hf_model_config(o.model_dir);
        o.check_model_flags(cfg, "--model-dir " + o.model_dir.string(), "its config.json");
    }
    // What errors about the model call it: the preset, or where its config came from.
    const std::string model_name = resume_from           ? resume_from->dir.string()
                                   : o.model_dir.empty() ? o.model
                                                         : o.model_dir.string();
    o.apply_moe_overrides(cfg, model_name);
    cfg.validate("model '" + model_name + "'");
    check_expert_parallel(o.layout.ep, cfg, model_name);
    WEFT_CHECK(T <= cfg.n_positions, "--seq-len {} exceeds the model's n_positions {}", T,
               cfg.n_positions);
    data::TokenFile train_file = data::TokenFile::open(o.data);
    data::check_token_ids(train_file, cfg.vocab_size);
    data::DataLoader loader(train_file, T, o.seed, o.sequential);
    std::optional<data::TokenFile> val_file;
    if (fs::path vp = o.val_path(); !vp.empty()) {
        val_file = data::TokenFile::open(vp);
        data::check_token_ids(*val_file, cfg.vocab_size);
        // Found now rather than at the first evaluation, after hours of training.
        const int64_t windows = data::DataLoader(*val_file, T, 0, true).windows();
        WEFT_CHECK(windows >= o.batch_size,
                   "validation file {} holds {} tokens, fewer than one evaluation batch of {} "
                   "sequences of {} tokens; pass a longer --val-data or a smaller --batch-size",
                   vp.string(), val_file->size(), o.batch_size, T);
    }
    if (resume_from) check_resume_settings(resume_from->state, o);

    // Context parallel: gradients (and ZeRO shards) over cp x dp, as Megatron-LM reduces them.
    comm::Group& grad_group = o.layout.cp > 1 ? mesh.add_group({comm::Axis::cp, comm::Axis::dp})
                                              : mesh.group(comm::Axis::dp);
    TrainState st(cfg, grad_group, {o.layout.zero, o.bucket_mb, o.grad_reduce_dtype == "bf16"},
                  micro, T, {o.pp_layers, o.dtype == "bf16"});
    int64_t start_step = 0;
    if (resume_from) {
        load_state(st, *resume_from);
        start_step = resume_from->state.at("step").get<int64_t>();
        // The balancing bias resumes as saved (a run that turns it on at resume starts at 0).
        if (std::vector<float>* bias = router_bias(st);
            bias && resume_from->state.contains("moe_router_bias")) {
            const auto saved = resume_from->state.at("moe_router_bias").get<std::vector<float>>();
            WEFT_CHECK(saved.size() == bias->size(),
                       "{}: moe_router_bias has {} values, expected {} ({} layers x {} experts)",
                       resume_from->dir.string(), saved.size(), bias->size(), cfg.n_layer,
                       cfg.n_experts);
            *bias = saved;
        }
    } else if (!o.model_dir.empty()) {
        load_hf_state(st, o.model_dir);
    } else {
        init_state(st, o.seed);
    }

    // Only rank 0 writes: the run directory, metrics, progress lines and checkpoints.
    if (root) {
        fs::create_directories(o.out);
        ckpt::remove_stale_temporaries(o.out);
    }
    Heartbeat heartbeat(o.out / "heartbeat", mesh.world_rank(), mesh.world_size());
    heartbeat.beat(Phase::init, start_step);
    auto metrics = root ? std::make_unique<MetricsLog>(o.out / "metrics.jsonl")
                        : std::make_unique<MetricsLog>();
    Progress progress(start_step, o.steps);
    auto note = [&](const std::string& line) {
        if (root) progress.note(line);
    };
    const MemoryEstimate mem = memory_estimate(st, baseline_rss, accum);
    const parallel::ModelStateBytes state_bytes = st.model_state_bytes();
    const double flops_per_token = cfg.train_flops_per_token(T);
    // A short measurement: a run should not spend seconds on its own MFU denominator.
    const double peak_gflops = job_peak_gflops(mesh, o.peak_gflops, 0.2);
    note(fmt::format(
        "weft train: {} parameters, {} layers x {} heads x {} width, batch {} = {} x {} x {} "
        "micro-batches of {} tokens (accumulation x dp x micro), {} thread(s) per rank, {} "
        "matrix products",
        cfg.num_parameters(), cfg.n_layer, cfg.n_head, cfg.n_embd, o.batch_size, accum, dp, micro,
        T, threads,
        o.dtype == "bf16" && !kernels::bf16_products_native()
            ? "bf16 (emulated on the fp32 units: this CPU has neither AVX512-BF16 nor AMX)"
            : o.dtype));
    note(
        fmt::format("layout {} over {} rank(s); model state per rank: params {} + grads {} + "
                    "optimizer {} = {} bytes",
                    o.layout.describe(), mesh.world_size(), state_bytes.params, state_bytes.grads,
                    state_bytes.optimizer, state_bytes.total()));
    note("memory estimate per rank: " + mem.describe());
    if (resume_from)
        note(fmt::format("resumed from {} at step {}", resume_from->dir.string(), start_step));
    metrics->write({{"event", "start"},
                    {"step", start_step},
                    {"layout", o.layout.describe()},
                    {"world_size", mesh.world_size()},
                    {"micro_batch_size", micro},
                    {"threads_per_rank", threads},
                    {"dtype", o.dtype},
                    {"grad_reduce_dtype", o.grad_reduce_dtype},
                    {"model_state_bytes",
                     {{"params", state_bytes.params},
                      {"grads", state_bytes.grads},
                      {"optimizer", state_bytes.optimizer},
                      {"total", state_bytes.total()}}}});

    const float loss_scale = 1.0f / float(o.batch_size * T);
    CommReport comm_report(mesh);
    parallel::OverlapTimes overlap_total;
    CheckpointSaver saver(
        st, o.out, o.async_checkpoint, int(o.keep_checkpoints),
        [&](const fs::path& dir, const CheckpointSaver::Timing& t) {
            metrics->write({{"event", "checkpoint"},
                            {"dir", dir.string()},
                            {"bytes", t.bytes},
                            {"stage_s", t.stage_s},
                            {"write_s", t.write_s}});
            note(fmt::format("saved {} (rank 0: {} bytes, staged in {:.3f} s, written in {:.3f} s)",
                             dir.string(), t.bytes, t.stage_s, t.write_s));
        });
    auto save = [&](int64_t step) {
        heartbeat.beat(Phase::checkpoint, step);
        saver.save(step, run_state(o, micro, router_bias(st)));
    };
    auto eval = [&](int64_t step) {
        if (!val_file) return;
        heartbeat.beat(Phase::eval, step);
        EvalResult r = st.evaluate(*val_file, o.batch_size, o.eval_batches);
        metrics->write({{"step", step}, {"val_loss", r.loss}, {"val_tokens", r.tokens}});
        note(fmt::format("step {} | val loss {:.4f} ({} tokens)", step, r.loss, r.tokens));
    };

    // As nanoGPT does, a run that evaluates periodically also evaluates its starting point.
    if (o.eval_every && start_step == 0) eval(0);
    const int64_t end_step = o.exit_after ? std::min(o.steps, start_step + o.exit_after) : o.steps;
    const int64_t rank_rows = o.batch_size / dp, first_row = mesh.rank(comm::Axis::dp) * rank_rows;
    // Slow-rank diagnosis: every rank gathers every rank's blocked time per step; rank 0 reports.
    SlowRankMonitor slow_ranks(stage_peers(mesh.world_size(), o.layout.pp));
    auto report_slow = [&](const std::vector<SlowRank>& named) {
        for (const SlowRank& s : named) {
            metrics->write(s.to_json());
            note(s.describe(mesh.describe_rank(s.rank)));
        }
    };
    std::vector<int32_t> seq_in(static_cast<size_t>(T)),
        seq_tg(static_cast<size_t>(T));   // cp: one whole sequence
    double trace_from = 0, trace_to = 0;  // the traced step on the flight recorder's clock
    for (int64_t step = start_step; step < end_step; ++step) {
        saver.poll();  // commits an asynchronous checkpoint once every rank has written it
        // Setup, evaluation and checkpoints count in the run's total, not in a step's.
        comm_report.take();
        overlap_total += st.dp().take_overlap_times();
        heartbeat.beat(Phase::step, step);
        fault.at_step(mesh.world_rank(), step + 1);
        const double blocked0 = mesh.flight().blocked_seconds();
        const bool traced = !o.trace.empty() && step + 1 == end_step;
        if (traced) trace_from = mesh.flight().now_s();
        auto t0 = Clock::now();
        if (delay.rank == mesh.world_rank())
            std::this_thread::sleep_for(std::chrono::milliseconds(delay.ms));
        model::Activations& act = st.activations();
        // The timeline of the run's last step.
        st.set_trace(traced);
        // This rank's rows of the global batch, in the single-process sample order; context
        // parallel: of each, this rank's positions.
        auto fill = [&](int64_t m) {
            for (int64_t r = 0; r < micro; ++r) {
                const int64_t row = first_row + m * micro + r;
                if (act.positions.empty()) {
                    loader.sample(step, row, o.batch_size, act.inputs.data() + r * T,
                                  act.targets.data() + r * T);
                    continue;
                }
                loader.sample(step, row, o.batch_size, seq_in.data(), seq_tg.data());
                for (int64_t t = 0; t < act.T; ++t) {
                    const size_t at = size_t(act.positions[size_t(t)]), to = size_t(r * act.T + t);
                    act.inputs[to] = seq_in[at];
                    act.targets[to] = seq_tg[at];
                }
            }
        };
        const float lr = optim::learning_rate(o.optim, step, o.steps);
        const StepOutcome out = st.step(accum, fill, loss_scale, o.optim, lr, step + 1);
        const double loss =
            fault.loss(mesh.world_rank(), step + 1, out.loss_sum / double(o.batch_size * T));
        const double dt = seconds_since(t0);
        if (traced) trace_to = mesh.flight().now_s();
        const double tps = double(o.batch_size * T) / dt;
        const double mfu = tps * flops_per_token / (peak_gflops * 1e9);
        if (!std::isfinite(loss)) {
            heartbeat.beat(Phase::nonfinite, step,
                           fmt::format("loss {} at step {}", loss, step + 1));
            exit_non_finite_loss(
                fmt::format("loss is {} at step {}: training diverged", loss, step + 1));
        }
        nlohmann::json line = {{"step", step + 1},
                               {"loss", loss},
                               {"lr", lr},
                               {"grad_norm", out.grad_norm},
                               {"tokens_per_s", tps},
                               {"mfu", mfu},
                               {"step_time_s", dt},
                               {"peak_rss_bytes", peak_rss_bytes()},
                               {"activation_bytes", activation_bytes(st)}};
        if (out.moe.n_experts > 0) line.update(moe_metrics(out.moe));
        // Aux-loss-free balancing: each layer's bias moves against the load of this step's
        // batch (counts summed over every rank, so every rank moves alike).
        if (std::vector<float>* bias = router_bias(st)) {
            const int64_t E = out.moe.n_experts;
            for (int64_t l = 0; l < cfg.n_layer; ++l)
                model::moe_update_router_bias(bias->data() + l * E, out.moe.tokens.data() + l * E,
                                              E, cfg.moe_router_bias_rate);
            double spread = 0;
            for (float b : *bias) spread = std::max(spread, double(std::abs(b)));
            line["moe_router_bias_max_abs"] = spread;
        }
        const comm::CommStats step_comm = comm_report.take();
        const parallel::OverlapTimes overlap = st.dp().take_overlap_times();
        overlap_total += overlap;
        if (mesh.world_size() > 1) line.update(CommReport::fields(step_comm, overlap));
        metrics->write(line);
        if (mesh.world_size() > 1) {  // after the step's counters, so they keep their meaning
            const double blocked = mesh.flight().blocked_seconds() - blocked0;
            StepWaits waits{step + 1, dt, std::vector<double>(mesh.world_size())};
            comm::all_gather(mesh.group(comm::Axis::world), std::span<const double>(&blocked, 1),
                             std::span(waits.blocked_s));
            report_slow(slow_ranks.add(std::move(waits)));
        }
        heartbeat.beat(Phase::step, step + 1);
        if (root && ((step + 1) % o.log_every == 0 || step + 1 == o.steps))
            progress.step(step + 1, loss, tps, mfu, lr);
        if (o.eval_every && (step + 1) % o.eval_every == 0 && step + 1 < o.steps) eval(step + 1);
        if (o.save_every && (step + 1) % o.save_every == 0 && step + 1 < end_step) save(step + 1);
    }
    report_slow(slow_ranks.finish());
    if (root) progress.finish();
    if (!o.trace.empty() && o.layout.pp == 1) {
        const int ops = write_comm_trace(mesh, trace_from, trace_to, o.trace);
        note(
            fmt::format("wrote the last step's communication timeline to {} ({} operations of "
                        "rank 0)",
                        o.trace.string(), ops));
    } else if (!o.trace.empty()) {
        const BubbleReport bubble = write_pipeline_trace(mesh, st.schedule(), st.trace(), o.trace);
        metrics->write({{"event", "pipeline_trace"},
                        {"step", end_step},
                        {"bubble_measured", bubble.measured},
                        {"bubble_simulated", bubble.simulated},
                        {"bubble_ideal", bubble.ideal}});
        note("wrote the last step's pipeline timeline to " + o.trace.string() + "; " +
             bubble.describe());
    }
    auto report_comm = [&] {
        comm_report.take();
        overlap_total += st.dp().take_overlap_times();
        if (mesh.world_size() == 1) return;
        const comm::CommStats total = CommReport::talking(comm_report.total());
        nlohmann::json line = {{"event", "summary"}, {"steps", end_step - start_step}};
        line.update(CommReport::fields(comm_report.total(), overlap_total));
        metrics->write(line);
        note(
            fmt::format("communication of rank 0 over this run (hidden behind compute: {:.0f}%, "
                        "{:.3f} s blocked of {:.3f} s outstanding):\n{}",
                        100 * overlap_total.hidden(), overlap_total.blocked_s,
                        overlap_total.outstanding_s, total.table()));
    };
    if (end_step < o.steps) {
        save(end_step);
        saver.finish();
        report_comm();
        note(fmt::format("stopped after step {} of {} (--exit-after); continue with --resume",
                         end_step, o.steps));
        heartbeat.beat(Phase::done, end_step);
        return;
    }
    eval(o.steps);
    if (start_step < o.steps || !resume_from) save(o.steps);
    saver.finish();
    report_comm();
    note(fmt::format("peak resident memory of rank 0 {:.1f} MiB (estimate {:.1f} MiB)",
                     double(peak_rss_bytes()) / (1 << 20), double(mem.total()) / (1 << 20)));
    heartbeat.beat(Phase::done, o.steps);
}

}  // namespace weft::train
