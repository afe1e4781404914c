#include "weft/train/train_state.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"
#include "weft/model/family.hpp"
#include "weft/parallel/pipeline/trace.hpp"
#include "weft/train/process.hpp"

namespace weft::train {

namespace {

// Whether the slices lie in buffer order without overlap: the optimizer's pass over them then
// moves through the buffer in one direction.
bool ascending(const std::vector<parallel::ShardSlice>& slices) {
    for (size_t i = 1; i < slices.size(); ++i)
        if (slices[i].begin < slices[i - 1].begin + slices[i - 1].size) return false;
    return true;
}

pipeline::Partition partition_for(const model::ModelConfig& cfg, const Layout& l,
                                  const ModelParallelOptions& mp) {
    if (l.pp == 1) {
        WEFT_CHECK(mp.pp_layers.empty(), "--pp-layers '{}' needs --pp greater than 1",
                   mp.pp_layers);
        return pipeline::partition_layers(int(cfg.n_layer), 1, 1, "");
    }
    return pipeline::partition_layers(int(cfg.n_layer), l, mp.pp_layers);
}

}  // namespace

model::ModelShard model_shard(const comm::Mesh& mesh, int pp_rank, int tp_rank, int data_rank,
                              const pipeline::Partition& part, const model::ModelConfig& cfg) {
    model::ModelShard shard;
    if (part.pp > 1) shard.units = part.units_of(pp_rank, cfg);
    shard.tp_rank = tp_rank;
    shard.tp = mesh.size(comm::Axis::tp);
    // ep folds over cp x dp: ep rank = data rank mod ep. ZeRO slices the expert runs over edp
    // and the rest over cp x dp, so the runs start on a slice boundary of both.
    shard.ep = mesh.size(comm::Axis::ep);
    shard.ep_rank = data_rank % shard.ep;
    if (shard.ep > 1)
        shard.expert_align =
            parallel::zero_expert_align(mesh.size(comm::Axis::cp) * mesh.size(comm::Axis::dp));
    return shard;
}

namespace {

// Checks the layout first: the shard is what the model, then ZeRO, are built from.
model::ModelShard shard_for(const comm::Mesh& mesh, const pipeline::Partition& part,
                            const model::ModelConfig& cfg) {
    // ep folds over cp x dp: expert gradients reduce, and ZeRO slices them, over edp (the
    // cp x dp ranks with the same ep rank). Each pipeline stage has its own ep and edp groups
    // (the mesh splits cp x dp per stage), so pipelines compose.
    return model_shard(
        mesh, mesh.rank(comm::Axis::pp), mesh.rank(comm::Axis::tp),
        mesh.rank(comm::Axis::cp) + mesh.size(comm::Axis::cp) * mesh.rank(comm::Axis::dp), part,
        cfg);
}

// Expert gradients reduce over the expert-data-parallel group (the dp ranks holding the same
// experts), everything else over dp.
parallel::DataParallelOptions with_expert_dp(parallel::DataParallelOptions o,
                                             const parallel::ParallelContext& ctx) {
    o.expert_dp = ctx.expert_dp_group();
    return o;
}

// The engine re-runs whole layers or nothing; selective recomputation is the planner's alone.
bool recomputes(const Layout& l) {
    WEFT_CHECK(l.recompute != Recompute::selective,
               "recompute {}: the engine recomputes whole layers (full) or nothing (none)",
               recompute_name(l.recompute));
    return l.recompute == Recompute::full;
}

// A zeroth-order step runs forward passes only, each rank over the parameters it holds and the
// same z: the layouts that split a forward over ranks otherwise are refused.
void check_zeroth_order(const Layout& l, const model::ModelConfig& cfg, std::string_view name) {
    auto refuse = [&](const char* flag, int value, const char* why) {
        fail("--optimizer {} with {} {}: {}; expected {} 1 (it runs data parallel, any --zero)",
             name, flag, value, why, flag);
    };
    if (l.pp > 1)
        refuse("--pp", l.pp,
               "the pipeline's schedules interleave backward passes, which it has not");
    if (l.tp > 1)
        refuse("--tp", l.tp,
               "its perturbation is drawn per element of the unit a rank holds, and tensor "
               "parallelism splits units over ranks");
    if (l.cp > 1)
        refuse("--cp", l.cp, "context parallelism shards sequences for the backward it has not");
    WEFT_CHECK(cfg.n_experts == 0,
               "--optimizer {}: the model has mixture-of-experts layers, whose router balancing "
               "reads a training step's statistics; expected a dense model",
               name);
}

}  // namespace

TrainState::TrainState(const model::ModelConfig& cfg, const parallel::ParallelContext& ctx,
                       parallel::DataParallelOptions options, int64_t micro, int64_t T,
                       const ModelParallelOptions& mp, const OffloadOptions& offload)
    : ctx_(ctx),
      mesh_(ctx.mesh()),
      pp_(mesh_.size(comm::Axis::pp)),
      pp_rank_(mesh_.rank(comm::Axis::pp)),
      tp_(mesh_.size(comm::Axis::tp)),
      tp_rank_(mesh_.rank(comm::Axis::tp)),
      part_(partition_for(cfg, ctx.layout(), mp)),
      // The vocabulary is padded to a multiple of 128 x tp so that it splits evenly.
      model_(model::make_model(model::config_for_tp(cfg, tp_), shard_for(mesh_, part_, cfg),
                               ctx.tp(), ctx.layout().sequence_parallel)),
      dp_(model_->layout(), ctx.gradient_group(), with_expert_dp(options, ctx)),
      tied_(mesh_.group(comm::Axis::pp), part_, model_->config().tie_embeddings,
            dp_.padded().units[0].size, options.bf16_grad_reduce),
      spec_(&optim::find_optimizer(options.optimizer)) {
    const Layout& l = ctx.layout();
    const bool recompute = recomputes(l);
    model_->set_context_parallel(ctx.cp(), T, l.cp_kind != CpKind::ring, ctx.cp_ring(),
                                 l.ring_bidirectional);
    if (ctx.expert()) model_->set_expert_comm(ctx.expert());
    if (cfg.n_experts > 0 && ctx.moe()) model_->set_moe_comm(ctx.moe());
    const int64_t T_local = T / model_->cp_size();
    // A pipeline stage keeps its own Activations per micro-batch; `act_` then only carries the
    // tokens fill() writes.
    act_ = model_->new_activations(
        micro, T_local,
        pp_ > 1 ? model::LayerSpan{0, 0, false, false} : model::LayerSpan{0, -1, true, recompute});
    if (ctx.cp()) act_->positions = model_->context_positions();
    const bool offloaded = !offload.dir.empty();
    WEFT_CHECK(offloaded || !options.bf16_working_copy,
               "internal: a bf16 working copy without offloaded master weights");
    round_grads_ = options.bf16_grads && !options.bf16_working_copy;
    if (spec_->gradients) {
        // Offloaded, the state lives in files (offload_): the optimizer counts it only.
        for (const parallel::ShardSlice& s : dp_.update_slices())
            opt_.push_back(spec_->make(dp_.padded(), s.begin, s.begin + s.size, !offloaded));
    } else {
        check_zeroth_order(l, cfg, spec_->name);
        // No state to shard, so below ZeRO 3 every rank moves the whole buffer it holds (the
        // same z and the same projected gradient everywhere) and nothing is gathered.
        if (dp_.stage() < 3)
            opt_.push_back(spec_->make(dp_.padded(), 0, dp_.padded().total, true));
        else
            for (const parallel::ShardSlice& s : dp_.update_slices())
                opt_.push_back(spec_->make(dp_.padded(), s.begin, s.begin + s.size, true));
    }
    int64_t state = 0;
    for (const auto& o : opt_) state += o->state_bytes();
    WEFT_CHECK(state == dp_.model_state_bytes().optimizer,
               "internal: the {} optimizer holds {} bytes of state, the count says {}", spec_->name,
               state, dp_.model_state_bytes().optimizer);
    if (offloaded) {
        // The optimizer's state buffers, then with a working copy the fp32 master weights, are
        // the streams of the files, cut into groups where the optimizer may be cut (8-bit
        // AdamW: at its blocks). MeZO has no state: with a working copy its master alone is on
        // disk; without one (fp32 weights, its master) nothing is.
        std::vector<std::string> names;
        std::vector<int64_t> sizes;
        for (int k = 0; k < opt_[0]->states(); ++k) names.push_back(opt_[0]->state_name(k));
        for (const auto& o : opt_) sizes.push_back(o->size());
        if (dp_.working_copy()) {
            master_stream_ = int(names.size());
            names.push_back("param");
        }
        if (!names.empty()) {
            offload::StateShape shape{
                sizes, int(names.size()),
                [this](int slice, int stream, int64_t a) {
                    return stream == master_stream_ ? 4 * a
                                                    : opt_[size_t(slice)]->state_offset(stream, a);
                },
                [this](int slice, int64_t a) { return opt_[size_t(slice)]->align_down(a); }};
            offload_ = std::make_unique<offload::StreamedState>(
                offload.dir, mesh_.world_rank(), names, std::move(shape), offload.group_floats);
        }
    }
    if (offload_) {
        if (master_stream_ >= 0 && spec_->gradients)
            grad_group_ = Buffer(offload_->max_group_floats());
        // Behind the forward only where nothing else touches the weights between the update and
        // the next forward: one rank (no gather of the updated shards), the copy in memory (in
        // files its cursor is the update's), the slices in buffer
        // order (the fence is a mark).
        update_behind_ = spec_->gradients && dp_.working_copy() && !dp_.working_copy()->files() &&
                         mesh_.world_size() == 1 && ascending(dp_.update_slices());
        // Fresh moments are zero (a checkpoint being resumed overwrites them). Writing them, then
        // reading them back, is also the disk's bandwidth as the step will see it.
        offload_init_[0] = offload_->run(
            false, true, [this](int i, int64_t a, int64_t b, std::span<std::byte* const> st) {
                for (int k = 0; k < int(st.size()); ++k)
                    std::fill(st[size_t(k)], state_at(i, k, a, b, st[size_t(k)]), std::byte{0});
            });
        offload_init_[1] =
            offload_->run(true, false, [](int, int64_t, int64_t, std::span<std::byte* const>) {});
    }
    if (pp_ > 1)
        stage_ = std::make_unique<PipelineStage>(
            *model_, dp_, part_, pp_rank_, micro, T_local, recompute,
            [this](bool last) { dp_.set_last_micro_batch(last); }, act_->positions);
}

TrainState::~TrainState() {
    if (update_thread_.joinable()) update_thread_.join();
}

double TrainState::take_update_blocked_s() {
    return update_behind_ ? dp_.working_copy()->take_blocked_s() : offload_last_.total_s;
}

void TrainState::finish_update() {
    if (!update_thread_.joinable()) return;
    update_thread_.join();
    offload_last_ = update_stats_;
    dp_.working_copy()->fence().wait(std::numeric_limits<int64_t>::max());  // its error, if any
}

std::byte* TrainState::state_at(int i, int k, int64_t a, int64_t x, std::byte* at_a) const {
    if (k == master_stream_) return at_a + 4 * (x - a);
    const optim::Optimizer& o = *opt_[size_t(i)];
    return at_a + (o.state_offset(k, x) - o.state_offset(k, a));
}

void TrainState::master_io(bool write, int64_t begin, int64_t n, float* data) const {
    WEFT_CHECK(master_stream_ >= 0, "internal: no offloaded master weights");
    // The master's slices are the optimizers' ranges (a zeroth-order one: the whole buffer).
    for (size_t i = 0; i < opt_.size(); ++i) {
        const int64_t lo = std::max(begin, opt_[i]->begin()),
                      hi = std::min(begin + n, opt_[i]->end());
        const auto [first, last] =
            offload_->groups_in(int(i), lo - opt_[i]->begin(), hi - opt_[i]->begin());
        for (int g = first; g < last; ++g) {
            const offload::StreamedState::Group& gr = offload_->groups()[size_t(g)];
            const int64_t a = std::max(lo, opt_[i]->begin() + gr.a),
                          b = std::min(hi, opt_[i]->begin() + gr.b);
            const int64_t at =
                              offload_->lead(g, master_stream_) + 4 * (a - opt_[i]->begin() - gr.a),
                          bytes = 4 * (b - a);
            if (write)
                offload_->files().write(master_stream_, g, at, bytes, data + (a - begin));
            else
                offload_->files().read(master_stream_, g, at, bytes, data + (a - begin));
        }
    }
}

void TrainState::write_master(int64_t begin, int64_t n, const float* data) {
    master_io(true, begin, n, const_cast<float*>(data));
}

void TrainState::read_master(int64_t begin, int64_t n, float* out) const {
    master_io(false, begin, n, out);
}

uint32_t TrainState::moment_streams(size_t i, int k) const {
    // Moment k is state k; an optimizer with states beyond its moments (8-bit AdamW's
    // absmaxes) reads those with either. The master is not the optimizer's.
    const optim::Optimizer& o = *opt_[i];
    uint32_t mask = 1u << k;
    for (int j = o.moments(); j < o.states(); ++j) mask |= 1u << j;
    return mask;
}

void TrainState::read_moment(size_t i, int k, int64_t at, int64_t n, float* out) {
    if (!offload_) return opt_[i]->read_moment(k, at, n, out);
    const auto [first, last] = offload_->groups_in(int(i), at, at + n);
    for (int g = first; g < last; ++g) {
        const offload::StreamedState::Group& gr = offload_->groups()[size_t(g)];
        const int64_t lo = std::max(at, gr.a), hi = std::min(at + n, gr.b);
        const std::vector<std::byte*> s = offload_->get(g, moment_streams(i, k));
        opt_[i]->read_moment(s.data(), gr.a, k, lo, hi - lo, out + (lo - at));
    }
}

void TrainState::write_moment(size_t i, int k, int64_t at, int64_t n, const float* in) {
    if (!offload_) return opt_[i]->write_moment(k, at, n, in);
    const auto [first, last] = offload_->groups_in(int(i), at, at + n);
    const uint32_t mask = moment_streams(i, k);
    for (int g = first; g < last; ++g) {
        const offload::StreamedState::Group& gr = offload_->groups()[size_t(g)];
        const int64_t lo = std::max(at, gr.a), hi = std::min(at + n, gr.b);
        const std::vector<std::byte*> s = offload_->get(g, mask);
        opt_[i]->write_moment(s.data(), gr.a, k, lo, hi - lo, in + (lo - at));
        offload_->put(g, mask);
    }
}

parallel::ModelStateBytes TrainState::model_state_bytes() const {
    parallel::ModelStateBytes b = dp_.model_state_bytes();
    if (offload_) {
        b.optimizer = offload_->pool_bytes() + grad_group_.bytes();
        b.master = 0;  // in the files
    }
    return b;
}

StepOutcome TrainState::step(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                             float loss_scale, const optim::OptimConfig& oc, float lr, int64_t t) {
    if (!spec_->gradients) return zeroth_order_step(micro_batches, fill, loss_scale, oc, lr, t);
    dp_.begin_step();
    const double loss_sum = run_micro_batches(micro_batches, fill, loss_scale);
    finish_update();  // the last step's pass, over before the backward began
    dp_.end_backward();
    tied_.sum_gradients(dp_);
    if (round_grads_) dp_.round_grads_bf16();
    // Every element of the gradient is counted once in the job: the embedding on the first
    // stage only (the last holds a copy), a tensor every tp rank keeps whole on tp rank 0 only.
    std::function<bool(const model::ParamSpec&)> counted;
    if (model_parallel()) {
        const bool first_stage = pp_rank_ == part_.owner(0);
        counted = [first_stage, tp_rank = tp_rank_](const model::ParamSpec& p) {
            return (p.unit != 0 || first_stage) && (p.tp_dim >= 0 || tp_rank == 0);
        };
    }
    // One all-reduce for both: the global loss and the squared norm, each element counted once.
    double sums[2] = {counts_loss() ? loss_sum : 0.0, dp_.grad_sum_squares(counted)};
    sum_over_model(sums);
    StepOutcome out{sums[0], std::sqrt(sums[1]), model_->take_moe_stats(), std::nullopt};
    if (out.moe.n_experts > 0) {
        // Each layer's counts live on its pipeline stage, each rank's on that rank: one sum
        // over the world (tp is 1 with experts, so no token is counted twice).
        model::MoeStats& m = out.moe;
        std::vector<double> all = m.tokens;
        all.insert(all.end(), {m.aux_loss, m.z_loss, m.dropped, m.slots});
        comm::all_reduce(mesh_.group(comm::Axis::world), std::span<double>(all));
        const size_t n = m.tokens.size();
        std::copy_n(all.begin(), n, m.tokens.begin());
        m.aux_loss = all[n], m.z_loss = all[n + 1], m.dropped = all[n + 2], m.slots = all[n + 3];
        out.router_bias_max_abs = model_->balance_routers(m);
    }
    const float scale = optim::clip_scale(oc, out.grad_norm);
    const auto& slices = dp_.update_slices();
    if (parallel::WorkingCopy* work = dp_.working_copy()) {
        // The group's master weights and moments from the files, its gradients widened from the
        // working copy; the updated master goes back to the files and, rounded, into the copy.
        const optim::StepArgs args{oc, lr, scale, t};
        auto pass = [this, work, &slices, args] {
            return offload_->run(
                true, true, [&](int i, int64_t a, int64_t b, std::span<std::byte* const> s) {
                    const parallel::ShardSlice& sl = slices[size_t(i)];
                    float* master = reinterpret_cast<float*>(s[size_t(master_stream_)]);
                    // A unit at a time (the copy in files moves its cursor once per unit); the
                    // update is element-wise (8-bit AdamW's blocks end at tensor ends), so the
                    // pieces change no bit.
                    for (int64_t lo = a, hi; lo < b; lo = hi) {
                        hi = std::min(b, work->unit_end(sl.begin + lo) - sl.begin);
                        std::vector<std::byte*> states;
                        for (int k = 0; k < int(s.size()); ++k)
                            states.push_back(state_at(i, k, a, lo, s[size_t(k)]));
                        work->read_grads(sl.begin + lo, hi - lo, grad_group_.data() + (lo - a));
                        // step_range addresses params and grads from the slice's start.
                        opt_[size_t(i)]->step_range(master - a, grad_group_.data() - a,
                                                    states.data(), lo, hi, args);
                        work->write_params(sl.begin + lo, hi - lo, master + (lo - a));
                        if (update_behind_) work->fence().advance(sl.begin + hi);
                    }
                });
        };
        if (!update_behind_) {
            offload_last_ = pass();
        } else {
            // The pass is mostly waiting on the disk: it runs while the next step's forward
            // computes, each unit's weights handed out once written (parallel/update_fence.hpp).
            // One thread of its own, so that its element-wise work does not take the forward's.
            work->fence().open();
            update_thread_ = std::thread([this, work, pass] {
                omp_set_num_threads(1);
                try {
                    update_stats_ = pass();
                    work->fence().close();
                } catch (...) {
                    work->fence().close(std::current_exception());
                }
            });
        }
    } else if (offload_) {
        offload_last_ = offload_->run(
            true, true, [&](int i, int64_t a, int64_t b, std::span<std::byte* const> s) {
                const parallel::ShardSlice& sl = slices[size_t(i)];
                opt_[size_t(i)]->step_range(dp_.update_params(sl), dp_.update_grads(sl), s.data(),
                                            a, b, {oc, lr, scale, t});
            });
    } else {
        for (size_t i = 0; i < slices.size(); ++i)
            opt_[i]->step(dp_.update_params(slices[i]), dp_.update_grads(slices[i]),
                          {oc, lr, scale, t});
    }
    dp_.after_update();
    return out;
}

double TrainState::run_micro_batches(int64_t micro_batches,
                                     const std::function<void(int64_t)>& fill, float loss_scale) {
    if (stage_) {
        const Layout& l = ctx_.layout();
        if (schedule_micro_ != micro_batches) {
            // Until a step has been measured, the zero-bubble schedules are made for F = B = W.
            schedule_ = pipeline::make_schedule(l.pp_schedule, pp_, l.vpp, int(micro_batches));
            schedule_micro_ = micro_batches;
            measure_costs_ = schedule_.split_backward();
        } else if (measured_costs_) {
            // Rebuilt at the next step, so that schedule() is the one the traced step ran.
            schedule_ = pipeline::make_schedule(l.pp_schedule, pp_, l.vpp, int(micro_batches),
                                                *measured_costs_);
            measured_costs_.reset();
        }
        PipelineStage::Fill put = [&](int64_t m, model::Activations& a) {
            fill(m);
            a.inputs = act_->inputs;
            a.targets = act_->targets;
            if (!act_->cu_seqlens.empty()) {
                a.positions = act_->positions;
                a.cu_seqlens = act_->cu_seqlens;
                a.cp_doc_blocks = act_->cp_doc_blocks;
                a.cp_doc_order = act_->cp_doc_order;
            }
        };
        stage_->set_bf16_messages(ctx_.bf16_activations());
        const double loss = stage_->step(schedule_, mesh_.group(comm::Axis::pp), put, loss_scale,
                                         trace_on_ || measure_costs_ ? &trace_ : nullptr);
        if (measure_costs_) {
            measured_costs_ = gather_stage_costs();
            measure_costs_ = false;
        }
        return loss;
    }
    double loss_sum = 0;
    for (int64_t m = 0; m < micro_batches; ++m) {
        fill(m);
        dp_.begin_forward(m + 1 == micro_batches);
        loss_sum += model_->forward(*act_, dp_, /*train=*/true, loss_scale);
        dp_.begin_backward();
        model_->backward(*act_, dp_);
    }
    return loss_sum;
}

EvalResult TrainState::evaluate(const data::TokenFile& file, int64_t B, int64_t batches) {
    // The dp ranks split the rows; the cp ranks of one dp rank share them, each reading its
    // positions of every sequence.
    const int n = mesh_.size(comm::Axis::dp);
    WEFT_CHECK(B % (n * act_->B) == 0,
               "internal: evaluation batch {} is not a multiple of dp {} x micro-batch {}", B, n,
               act_->B);
    const int64_t rows = B / n, T = act_->T * model_->cp_size();
    // Evaluation reads plain windows (docs/long_context.md): a packed step's document
    // boundaries and positions go, and the next step's fill sets them again.
    if (!act_->cu_seqlens.empty()) {
        act_->cu_seqlens.clear();
        act_->cp_doc_blocks.clear();
        act_->cp_doc_order = {};
        act_->positions.clear();
        if (model_->cp_size() > 1) act_->positions = model_->context_positions();
    }
    EvalResult part =
        evaluate_rows(file, B, T, batches, mesh_.rank(comm::Axis::dp) * rows, rows, *act_, [&] {
            if (stage_) return stage_->forward_only(mesh_.group(comm::Axis::pp), *act_);
            dp_.begin_forward(true);
            return model_->forward(*act_, dp_, /*train=*/false, 1.0f);
        });
    // Summed over the whole mesh under pipeline parallelism: counted where the loss is.
    const bool here = counts_loss();
    double sums[2] = {here ? part.loss : 0.0, here ? double(part.tokens) : 0.0};
    sum_over_model(sums);
    return {sums[0] / sums[1], int64_t(sums[1])};
}

pipeline::Costs TrainState::gather_stage_costs() {
    // Each rank timed its own chunks (the median over micro-batches); the ranks of a stage (dp,
    // tp, cp) average theirs. World rank 0's sum is broadcast: every pipeline must run the same
    // lists, or the data-parallel reductions, started after each W, would pair up wrongly.
    // Ranks that outnumber their node's cores take their actions' CPU times: an action's wall
    // time there counts the ranks that computed beside it, which the schedule will change, and
    // the schedule is made for stages that each have a processor. (With more threads a rank's
    // thread CPU time misses the others' work: wall times.)
    const int chunks = schedule_.chunks();
    const NodeShare node = node_share(mesh_);
    stage_costs_cpu_ = node.ranks > node.cores && omp_get_max_threads() == 1;
    const pipeline::Costs mine = pipeline::measured_costs(chunks, trace_, true, stage_costs_cpu_);
    std::vector<double> v(mine.chunk_forward);
    v.insert(v.end(), mine.chunk_backward.begin(), mine.chunk_backward.end());
    v.insert(v.end(), mine.chunk_weight.begin(), mine.chunk_weight.end());
    comm::Group& world = mesh_.group(comm::Axis::world);
    comm::all_reduce(world, std::span<double>(v));
    comm::broadcast(world, std::span<double>(v), 0);
    const double per_stage = double(world.size() / pp_);
    pipeline::Costs costs;
    auto part = [&](int k) {
        std::vector<double> x(v.begin() + k * chunks, v.begin() + (k + 1) * chunks);
        for (double& e : x) e /= per_stage;
        return x;
    };
    costs.chunk_forward = part(0), costs.chunk_backward = part(1), costs.chunk_weight = part(2);
    costs.send = costs.latency = 0;
    stage_costs_ = costs;
    return costs;
}

bool TrainState::counts_loss() const {
    return pp_rank_ == part_.owner(part_.chunks() - 1) && tp_rank_ == 0;
}

void TrainState::sum_over_model(std::span<double> values) {
    comm::all_reduce(model_parallel() ? mesh_.group(comm::Axis::world) : dp_.group(), values);
}

}  // namespace weft::train
