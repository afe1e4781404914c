#include "weft/train/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "weft/data/doc_zigzag.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/counts.hpp"
#include "weft/parallel/parallel_context.hpp"
#include "weft/train/batch_feed.hpp"
#include "weft/train/batch_split.hpp"
#include "weft/train/comm_trace.hpp"
#include "weft/train/heartbeat.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/memory_fit.hpp"
#include "weft/train/metrics.hpp"
#include "weft/train/pipeline_trace.hpp"
#include "weft/train/process.hpp"
#include "weft/train/run_checkpoints.hpp"
#include "weft/train/run_comm.hpp"
#include "weft/train/run_eval.hpp"
#include "weft/train/run_inputs.hpp"
#include "weft/train/run_log.hpp"
#include "weft/train/state_memory.hpp"
#include "weft/train/teacher.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

namespace {

using Clock = std::chrono::steady_clock;

comm::MeshOptions mesh_options(const TrainOptions& o) {
    comm::MeshOptions m;
    if (o.comm_timeout > 0) m.timeout_s = o.comm_timeout;
    m.flight_dir = (o.out / "flight").string();  // written only on a hang or a signal
    return m;
}

// One optimizer step and what it reports: the step of torchtitan's train_step. The pieces it
// drives are built once by run_training.
struct StepRunner {
    const TrainOptions& o;
    comm::Mesh& mesh;
    TrainState& st;
    BatchFeed& feed;
    RunLog& log;
    RunComm& comm;
    Heartbeat& heartbeat;
    Teacher* teacher;  // --teacher, or null
    double flops_per_token, flops_per_square, peak_gflops;
    TestFault fault;
    InjectedDelay delay;
    double trace_from = 0, trace_to = 0;  // the traced step on the flight recorder's clock

    // Step `step` (0-based); `traced`: record its timeline. A non-finite loss ends the run.
    void run(int64_t step, bool traced) {
        comm.begin_step();
        heartbeat.beat(Phase::step, step);
        fault.at_step(mesh.world_rank(), step + 1);
        if (traced) trace_from = mesh.flight().now_s();
        const auto t0 = Clock::now();
        if (delay.rank == mesh.world_rank())
            std::this_thread::sleep_for(std::chrono::milliseconds(delay.ms));
        st.set_trace(traced);
        const int64_t tokens = o.batch_size * o.seq_len;
        const float lr = optim::learning_rate(o.optim, step, o.steps);
        feed.begin_step(step);
        const StepOutcome out = st.step(
            feed.micro_batches(),
            [&](int64_t m) {
                feed.fill(m, st.activations());
                if (teacher)
                    teacher->annotate(st.activations(), o.distill_weight, o.distill_temperature);
            },
            1.0f / float(tokens), o.optim, lr, step + 1);
        const double loss = fault.loss(mesh.world_rank(), step + 1, out.loss_sum / double(tokens));
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        if (traced) trace_to = mesh.flight().now_s();
        if (!std::isfinite(loss)) {
            heartbeat.beat(Phase::nonfinite, step,
                           fmt::format("loss {} at step {}", loss, step + 1));
            exit_non_finite_loss(
                fmt::format("loss is {} at step {}: training diverged", loss, step + 1));
        }
        const double tps = double(tokens) / dt, mfu = tps * flops_per_token / (peak_gflops * 1e9);
        nlohmann::json line = {{"step", step + 1},
                               {"loss", loss},
                               {"lr", lr},
                               {"grad_norm", out.grad_norm},
                               {"tokens_per_s", tps},
                               {"mfu", mfu},
                               {"step_time_s", dt},
                               {"peak_rss_bytes", peak_rss_bytes()},
                               {"activation_bytes", activation_bytes(st)}};
        if (const offload::StreamedState* off = st.offloaded(); off) {
            // The optimizer's pass over the state on disk: its transfers, the time spent waiting
            // for them and the time updating; the rest of step_time_s is forward and backward.
            // Behind the forward (update_behind), the pass is the last step's, which ran
            // during this step's forward, and offload_blocked_s is the time that forward waited
            // for it; else it is this step's, and blocked the step for all its time.
            const offload::PassStats& p = st.last_offload_pass();
            line.update({{"offload_read_bytes", p.read_bytes},
                         {"offload_written_bytes", p.written_bytes},
                         {"offload_io_wait_s", p.io_wait_s},
                         {"offload_update_s", p.work_s},
                         {"offload_pass_s", p.total_s},
                         {"offload_behind", st.update_behind()},
                         {"offload_blocked_s", st.take_update_blocked_s()}});
        }
        if (parallel::WorkingCopy* w = st.dp().working_copy(); w && w->files()) {
            // --offload optimizer+params: the working copy's transfers this step (forward,
            // backward, the gradients' norm and the update), and the time blocked on them.
            const offload::PassStats p = w->take_io_stats();
            line.update({{"offload_params_read_bytes", p.read_bytes},
                         {"offload_params_written_bytes", p.written_bytes},
                         {"offload_params_io_wait_s", p.io_wait_s}});
        }
        if (out.moe.n_experts > 0) line.update(moe_metrics(out.moe));
        if (const data::RankRows* layout = feed.layout(); layout)
            line.update(packing_metrics(*layout, feed.static_layout(), flops_per_square,
                                        data::per_document_ring(o.layout, o.balance)));
        if (out.router_bias_max_abs) line["moe_router_bias_max_abs"] = *out.router_bias_max_abs;
        line.update(comm.step_fields());
        log.write(line);
        if (step == 0 && !st.stage_costs().chunk_forward.empty()) log_stage_costs();
        comm.gather_waits(step + 1, dt);
        heartbeat.beat(Phase::step, step + 1);
        log.step(step + 1, loss, tps, mfu, lr);
    }

    // The zero-bubble schedules' costs, measured in the first step.
    void log_stage_costs() {
        auto [line, note] = stage_costs_report(o.layout, int(feed.micro_batches()),
                                               st.stage_costs(), st.stage_costs_cpu());
        log.write(line);
        log.note(note);
    }

    // The timeline of the traced step: the pipeline schedule with --pp, else every rank's
    // communication.
    void write_trace(int64_t end_step) {
        if (o.layout.pp == 1) {
            const int ops = write_comm_trace(mesh, trace_from, trace_to, o.trace);
            log.note(fmt::format(
                "wrote the last step's communication timeline to {} ({} operations of rank 0)",
                o.trace.string(), ops));
            return;
        }
        const BubbleReport bubble = write_pipeline_trace(
            mesh, st.schedule(), st.trace(), {peak_rss_bytes(), activation_bytes(st)}, o.trace);
        log.write({{"event", "pipeline_trace"},
                   {"step", end_step},
                   {"bubble_measured", bubble.measured},
                   {"bubble_simulated", bubble.simulated},
                   {"bubble_ideal", bubble.ideal},
                   {"idle_measured", bubble.idle_measured},
                   {"idle_simulated", bubble.idle_simulated},
                   {"simulated_cores", bubble.cores},
                   {"simulated_per_core", !bubble.rank_core.empty()},
                   {"stage_cores", bubble.stage_cores},
                   {"peak_rss_bytes", bubble.peak_rss_bytes},
                   {"activation_bytes", bubble.activation_bytes}});
        log.note("wrote the last step's pipeline timeline to " + o.trace.string() + "; " +
                 bubble.describe());
    }
};

// The disk's bandwidth as the offloaded step sees it: writing the initial state, then reading it
// back, through the step's own ring and pool.
void log_offload_disk(TrainState& st, RunLog& log) {
    const offload::PassStats &w = st.offload_init_write(), &r = st.offload_init_read();
    parallel::WorkingCopy* copy = st.dp().working_copy();
    const offload::StateFiles* params = copy ? copy->files() : nullptr;
    if (params) copy->take_io_stats();  // the steps count their own transfers
    const double wbw = double(w.written_bytes) / w.total_s, rbw = double(r.read_bytes) / r.total_s;
    log.write({{"event", "offload_disk"},
               {"dir", st.offloaded()->files().path(0).parent_path().string()},
               {"state_bytes", st.offloaded()->files().bytes()},
               {"pool_bytes", st.offloaded()->pool_bytes()},
               {"params_bytes", params ? params->bytes() : 0},
               {"write_bytes_per_s", wbw},
               {"read_bytes_per_s", rbw}});
    const bool state = st.optimizers()[0]->states() > 0;
    log.note(
        fmt::format("offload: {:.2f} GiB of {}{}{} on disk{}, pool {:.0f} MiB; the disk wrote "
                    "it at {:.2f} GB/s and read it at {:.2f} GB/s",
                    double(st.offloaded()->files().bytes()) / (1 << 30),
                    state ? "optimizer state" : "", state && st.master_stream() >= 0 ? " and " : "",
                    st.master_stream() >= 0 ? "fp32 master weights" : "",
                    params ? fmt::format(", and {:.2f} GiB of working weights{}",
                                         double(params->bytes()) / (1 << 30),
                                         st.optimizer().gradients ? " and gradients" : "")
                           : "",
                    double(st.offloaded()->pool_bytes()) / (1 << 20), wbw / 1e9, rbw / 1e9));
}

}  // namespace

void run_training(const TrainOptions& opts) {
    TrainOptions o = opts;
    o.validate();
    check_distill_flags(o);
    o.optim.seed = o.seed;  // MeZO draws its perturbations from the run's seed
    const TestFault fault = TestFault::from_env();
    // Collective; a world size that does not match the layout fails here on every rank, an
    // option the degrees do not allow in the context.
    comm::Mesh mesh(o.layout, mesh_options(o));
    const parallel::ParallelContext ctx(mesh, o.layout, o.dtype == "bf16");
    o.layout = ctx.layout();
    const InjectedDelay delay = parse_inject_delay(o.inject_delay, mesh.world_size());
    const BatchSplit split = split_batch(o.layout, o.batch_size, o.micro_batch_size);
    check_sequence_split(o.layout, split.micro, o.seq_len);
    const int threads = set_threads_per_rank(o.threads);
    kernels::set_matmul_precision(kernels::parse_matmul_precision(o.dtype));
    const int64_t baseline_rss = current_rss_bytes();

    // Everything that can be wrong is found, on every rank, before the run directory is touched.
    const RunInputs in = open_run_inputs(o, mesh.world_rank() == 0);
    check_bf16_grads(o, o.layout, in.cfg);
    // The teacher is counted before its weights are read.
    std::optional<ModelSource> teacher_source;
    TeacherMemory teacher_mem;
    if (!o.teacher.empty()) {
        teacher_source = open_teacher(o, in.cfg);
        teacher_mem =
            teacher_memory(teacher_source->cfg, split.micro, o.seq_len, split.micro * o.seq_len);
    }
    const OffloadOptions offload{o.offload.empty() ? std::filesystem::path() : o.offload_dir,
                                 int64_t(o.offload_group_mb * double(1 << 20) / sizeof(float))};
    check_memory_fits(
        {in.cfg, o.layout, split.micro, split.micro_batches, o.seq_len, o.dtype,
         o.grad_reduce_dtype, o.bucket_mb, o.optim.optimizer,
         offload.dir.empty() ? 0 : offload.group_floats, offload.dir, o.bf16_working_copy(),
         o.params_offloaded(), teacher_mem.total(), teacher_mem.describe()},
        "model '" + in.model_name + "'" +
            (teacher_source ? " with --teacher " + o.teacher.string() : ""));
    std::unique_ptr<Teacher> teacher;
    if (teacher_source) teacher = std::make_unique<Teacher>(*teacher_source);
    TrainState st(in.cfg, ctx,
                  {o.layout.zero, o.bucket_mb, o.grad_reduce_dtype == "bf16", nullptr,
                   o.optim.optimizer, o.bf16_working_copy(), o.resolved_grad_dtype() == "bf16",
                   o.params_offloaded() ? offload.dir : std::filesystem::path()},
                  split.micro, o.seq_len, {o.pp_layers}, offload);
    load_run_start(st, in, o);

    RunLog log(o, mesh, in.start_step);
    Heartbeat heartbeat(o.out / "heartbeat", mesh.world_rank(), mesh.world_size());
    heartbeat.beat(Phase::init, in.start_step);
    MemoryEstimate mem = memory_estimate(st, baseline_rss, split.micro_batches);
    mem.teacher = teacher_mem.total();
    log.started(st, in, split, threads, mem);
    if (teacher)
        log.note(fmt::format(
            "distilling from --teacher {} ({} parameters, frozen; {}): loss = {} CE + {} x {}^2 KL",
            o.teacher.string(), teacher->parameters(), teacher_mem.describe(),
            1.0f - o.distill_weight, o.distill_weight, o.distill_temperature));
    if (st.offloaded()) log_offload_disk(st, log);
    if (!o.offload.empty() && !st.offloaded())
        log.note(
            fmt::format("offload: --optimizer {} keeps no optimizer state, and its fp32 "
                        "weights are the master: nothing to move to disk",
                        o.optim.optimizer));
    std::optional<data::DocumentRows> docs;
    if (!in.train_documents.empty()) docs.emplace(in.train_documents, o.seq_len);
    const data::PerDocument per_doc = data::per_document(o.layout, o.balance);
    if (docs && per_doc != data::PerDocument::none) {
        // Ulysses' layout is over every cp rank; the rings' over their ranks (data::balance_ring).
        const int R =
            per_doc == data::PerDocument::order ? o.layout.cp : data::balance_ring(o.layout);
        log.note(fmt::format(
            "context parallel {}: each document longer than {} tokens split "
            "zigzag over the {} {}, shorter ones whole on one{}",
            cp_kind_name(o.layout.cp_kind), data::split_above(o.seq_len, R), R,
            o.layout.cp_kind == CpKind::hybrid ? "Ulysses groups" : "ranks",
            o.layout.cp_kind == CpKind::ulysses ? "; Ulysses gathers them in document order" : ""));
    }
    BatchFeed feed(in.train, o.seq_len, o.seed, o.sequential, o.batch_size, o.layout.dp,
                   mesh.rank(comm::Axis::dp), split.micro, std::move(docs), o.balance,
                   data::balance_ring(o.layout), st.activations().positions, per_doc,
                   mesh.rank(comm::Axis::cp), o.layout.ring_bidirectional);
    // The planner's counts (plan/cost.cpp), so that --balance pads a row only when it pays.
    feed.set_step_cost(
        {model::attention_train_flops(in.cfg, 1), model::train_flops_per_token(in.cfg, 0)});
    RunCheckpoints checkpoints(st, o, split.micro, log, heartbeat);
    RunEvaluation eval(st, in.val ? &*in.val : nullptr, o.batch_size, o.eval_batches, log,
                       heartbeat);
    RunComm comm(mesh, st, log);
    // A short measurement: a run should not spend seconds on its own MFU denominator.
    const double peak_gflops = job_peak_gflops(mesh, o.peak_gflops, 0.2);
    StepRunner steps{o,
                     mesh,
                     st,
                     feed,
                     log,
                     comm,
                     heartbeat,
                     teacher.get(),
                     model::train_flops_per_token(in.cfg, o.seq_len),
                     model::attention_train_flops(in.cfg, 1),
                     peak_gflops,
                     fault,
                     delay};

    // As nanoGPT does, a run that evaluates periodically also evaluates its starting point.
    if (o.eval_every && in.start_step == 0) eval.run(0);
    const int64_t end = o.exit_after ? std::min(o.steps, in.start_step + o.exit_after) : o.steps;
    for (int64_t step = in.start_step; step < end; ++step) {
        checkpoints.poll();  // commits an asynchronous checkpoint once every rank has written it
        steps.run(step, !o.trace.empty() && step + 1 == end);
        const int64_t done = step + 1;
        if (o.eval_every && done % o.eval_every == 0 && done < o.steps) eval.run(done);
        if (o.save_every && done % o.save_every == 0 && done < end) checkpoints.save(done);
    }
    st.finish_update();  // the last step's optimizer pass, if it runs behind
    comm.finish_steps();
    log.finish_progress();
    if (!o.trace.empty()) steps.write_trace(end);

    if (end < o.steps) {
        checkpoints.save(end);
        checkpoints.finish();
        comm.summary(end - in.start_step);
        log.note(fmt::format("stopped after step {} of {} (--exit-after); continue with --resume",
                             end, o.steps));
        heartbeat.beat(Phase::done, end);
        return;
    }
    eval.run(o.steps);
    if (in.start_step < o.steps || !in.resume_from) checkpoints.save(o.steps);
    checkpoints.finish();
    comm.summary(end - in.start_step);
    log.note(fmt::format("peak resident memory of rank 0 {:.1f} MiB (estimate {:.1f} MiB)",
                         double(peak_rss_bytes()) / (1 << 20), double(mem.total()) / (1 << 20)));
    heartbeat.beat(Phase::done, o.steps);
}

}  // namespace weft::train
