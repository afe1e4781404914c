#include "weft/train/train_state.hpp"

#include <algorithm>
#include <cmath>

#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/classifier_parallel.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/model/family.hpp"
#include "weft/model/state_io.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/parallel/tensor_parallel.hpp"

namespace weft::train {

namespace fs = std::filesystem;

namespace {

pipeline::Partition partition_for(const model::ModelConfig& cfg, const Layout& l,
                                  const ModelParallelOptions& mp) {
    if (l.pp == 1) {
        WEFT_CHECK(mp.pp_layers.empty(), "--pp-layers '{}' needs --pp greater than 1",
                   mp.pp_layers);
        return pipeline::partition_layers(int(cfg.n_layer), 1, 1, "");
    }
    return pipeline::partition_layers(int(cfg.n_layer), l.pp, l.vpp, mp.pp_layers);
}

std::unique_ptr<model::TpComm> tp_comm_for(comm::Mesh& mesh) {
    if (mesh.size(comm::Axis::tp) == 1) return nullptr;
    return std::make_unique<parallel::GroupTpComm>(mesh.group(comm::Axis::tp));
}

model::ModelShard shard_for(const comm::Mesh& mesh, const pipeline::Partition& part,
                            const model::ModelConfig& cfg) {
    model::ModelShard shard;
    if (part.pp > 1) shard.units = part.units_of(mesh.rank(comm::Axis::pp), cfg);
    shard.tp_rank = mesh.rank(comm::Axis::tp);
    shard.tp = mesh.size(comm::Axis::tp);
    return shard;
}

}  // namespace

TrainState::TrainState(const model::ModelConfig& cfg, comm::Group& dp,
                       parallel::DataParallelOptions options, int64_t micro, int64_t T,
                       const ModelParallelOptions& mp)
    : mesh_(dp.mesh()),
      pp_(mesh_.size(comm::Axis::pp)),
      pp_rank_(mesh_.rank(comm::Axis::pp)),
      tp_(mesh_.size(comm::Axis::tp)),
      tp_rank_(mesh_.rank(comm::Axis::tp)),
      part_(partition_for(cfg, mesh_.layout(), mp)),
      tp_comm_(tp_comm_for(mesh_)),
      // The vocabulary is padded to a multiple of 128 x tp so that it splits evenly.
      model_(model::make_model(model::config_for_tp(cfg, tp_), shard_for(mesh_, part_, cfg),
                               tp_comm_.get(), mesh_.layout().sequence_parallel)),
      dp_(model_->layout(), dp, options),
      act_(model_->new_activations(micro, T,
                                   pp_ > 1
                                       ? model::LayerSpan{0, 0, false, false}
                                       : model::LayerSpan{0, -1, true, mesh_.layout().recompute})) {
    const Layout& l = mesh_.layout();
    WEFT_CHECK(pp_ == 1 || options.zero <= 1,
               "--zero {} with --pp {}: ZeRO stages 2 and 3 reduce (and gather) per micro-batch, "
               "which a pipeline's interleaved backward defeats; use --zero 0 or 1 with "
               "pipeline parallelism (as DeepSpeed and Megatron-LM do)",
               options.zero, pp_);
    WEFT_CHECK(pp_ > 1 || l.vpp == 1, "--vpp {} needs --pp greater than 1", l.vpp);
    for (const parallel::ShardSlice& s : dp_.update_slices())
        adam_.emplace_back(dp_.padded(), s.begin, s.begin + s.size);
    if (pp_ > 1)
        stage_ =
            std::make_unique<PipelineStage>(*model_, dp_, part_, pp_rank_, micro, T, l.recompute,
                                            [this](bool last) { dp_.set_last_micro_batch(last); });
}

TrainState::~TrainState() = default;

void TrainState::init(uint64_t seed) {
    dp_.load_params([&](int unit, float* buf) {
        model::init_params(buf, parallel::unit_layout(dp_.padded(), unit), seed);
    });
}

void TrainState::load_hf(const fs::path& model_dir) {
    const ckpt::HfWeights weights = ckpt::HfWeights::open(model_dir);
    dp_.load_params([&](int unit, float* buf) {
        model::read_hf_weights(weights, model_->config(), parallel::unit_layout(dp_.padded(), unit),
                               buf);
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
            model::read_tensors(ck.dir / file, model_->config(),
                                parallel::unit_layout(dp_.padded(), unit), buf, model::Naming::weft,
                                prefix);
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

void TrainState::assemble(const float* local, float* full) {
    const model::ModelConfig& cfg = model_->config();
    const bool root = mesh_.world_rank() == 0;
    const int L = int(cfg.n_layer);
    const model::ParamLayout full_layout = model::build_param_layout(cfg);
    auto stage_of = [&](int unit) {
        if (unit == 0) return part_.owner(0);
        if (unit == L + 1) return part_.owner(part_.chunks() - 1);
        for (int c = 0; c < part_.chunks(); ++c)
            if (unit - 1 < part_.first[c] + part_.count[c]) return part_.owner(c);
        return 0;
    };
    comm::Group& world = mesh_.group(comm::Axis::world);
    const bool sender = mesh_.rank(comm::Axis::dp) == 0;
    // Every sender's padded layout (the same ZeRO padding as its dp group's), by (stage, tp rank).
    std::vector<parallel::ZeroLayout> senders;
    for (int stage = 0; stage < pp_; ++stage)
        for (int t = 0; t < tp_; ++t) {
            model::ModelShard shard;
            if (pp_ > 1) shard.units = part_.units_of(stage, cfg);
            shard.tp_rank = t;
            shard.tp = tp_;
            senders.emplace_back(model::build_param_layout(cfg, shard), dp_.group().size(), 0);
        }
    WEFT_CHECK(L + 2 <= comm::tags::kCheckpointUnits.count,
               "a checkpoint of {} units needs more message tags than weft reserves ({})", L + 2,
               comm::tags::kCheckpointUnits.count);
    Buffer tmp;
    for (int u = 0; u < L + 2; ++u) {
        const int stage = stage_of(u);
        for (int t = 0; t < tp_; ++t) {
            const int src = mesh_.world_rank_of({t, 0, 0, 0, stage});
            const parallel::ZeroLayout& z = senders[size_t(stage * tp_ + t)];
            const model::Unit& unit = z.padded().units[size_t(u)];
            if (sender && src == mesh_.world_rank() && !root) {
                comm::send(world, std::span<const float>(local + unit.offset, size_t(unit.size)), 0,
                           comm::tags::kCheckpointUnits.at(u));
            }
            if (!root) continue;
            const float* data = local + unit.offset;
            if (src != 0) {
                if (tmp.size() < unit.size) tmp = Buffer(unit.size);
                comm::recv(world, std::span<float>(tmp.data(), size_t(unit.size)), src,
                           comm::tags::kCheckpointUnits.at(u));
                data = tmp.data();
            }
            for (int i = 0; i < unit.tensors; ++i) {
                const model::ParamSpec& p = z.padded().tensors[size_t(unit.first_tensor + i)];
                model::place_shard(p, t, tp_, data + (p.offset - unit.offset),
                                   full + full_layout.find(p.name).offset);
            }
        }
    }
}

fs::path TrainState::save(const fs::path& run_dir, int64_t step, const nlohmann::json& state) {
    const bool dp_root = dp_.group().rank() == 0;
    const bool mp = model_parallel();
    // With model parallelism every stage and shard sends its part to world rank 0, which writes
    // the logical model; otherwise dp rank 0 writes its (ZeRO-padded) buffers.
    const bool writer = mp ? mesh_.world_rank() == 0 : dp_root;
    const model::ParamLayout layout =
        mp ? model::build_param_layout(model_->config()) : dp_.padded();
    // One file's whole tensors exist on the writer at a time, only while it writes them.
    Buffer gathered(dp_root && dp_.stage() > 0 ? dp_.padded().total : 0);
    Buffer shard(dp_.stage() > 0 ? dp_.zero_layout().shard_floats() : 0);
    Buffer full(mp && writer ? layout.total : 0);
    // Collective: every rank calls it for each file, in kStateTensorOrder.
    auto source = [&](StateTensors which) -> const float* {
        const float* local = nullptr;
        if (which == StateTensors::params) {
            local = dp_.gather_params(gathered.data());
        } else {
            const bool second = which == StateTensors::exp_avg_sq;
            if (dp_.stage() == 0) {
                local = second ? adam_[0].exp_avg_sq().data() : adam_[0].exp_avg().data();
            } else {
                copy_moments(shard.data(), second, true);
                dp_.gather_shard(shard.data(), gathered.data());
                local = gathered.data();
            }
        }
        if (!mp) return local;
        assemble(local, full.data());
        return full.data();
    };
    if (!writer) {
        for (StateTensors which : kStateTensorOrder) source(which);
        return {};
    }
    return save_checkpoint(run_dir, step, model_->config(), layout, source, state);
}

void TrainState::sum_tied_embedding() {
    const int first = part_.owner(0), last = part_.owner(part_.chunks() - 1);
    if (!model_->config().tie_embeddings || pp_ == 1 || (pp_rank_ != first && pp_rank_ != last))
        return;
    // Both stages add the other's gradient to their own: the same sum, so the two copies of the
    // embedding take the same update and stay equal.
    constexpr int kTag = comm::tags::kTiedEmbedding;
    const model::Unit& u = dp_.padded().units[0];
    float* g = dp_.grads(0);
    Buffer other(u.size);
    comm::Group& pp = mesh_.group(comm::Axis::pp);
    const int peer = pp_rank_ == first ? last : first;
    comm::Request r = comm::send_async(pp, std::span<const float>(g, size_t(u.size)), peer, kTag);
    comm::recv(pp, std::span<float>(other.data(), size_t(u.size)), peer, kTag);
    r.wait();
    kernels::add_inplace(g, other.data(), u.size);
}

StepOutcome TrainState::step(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                             float loss_scale, const optim::OptimConfig& oc, float lr, int64_t t) {
    dp_.begin_step();
    double loss_sum = 0;
    if (stage_) {
        if (schedule_micro_ != micro_batches) {
            const Layout& l = mesh_.layout();
            schedule_ = pipeline::make_schedule(pipeline::parse_schedule_kind(l.pp_schedule), pp_,
                                                l.vpp, int(micro_batches));
            schedule_micro_ = micro_batches;
        }
        PipelineStage::Fill put = [&](int64_t m, model::Activations& a) {
            fill(m);
            a.inputs = act_->inputs;
            a.targets = act_->targets;
        };
        loss_sum = stage_->step(schedule_, mesh_.group(comm::Axis::pp), put, loss_scale,
                                trace_on_ ? &trace_ : nullptr);
    } else {
        for (int64_t m = 0; m < micro_batches; ++m) {
            fill(m);
            dp_.begin_forward(m + 1 == micro_batches);
            loss_sum += model_->forward(*act_, dp_, /*train=*/true, loss_scale);
            dp_.begin_backward();
            model_->backward(*act_, dp_);
        }
    }
    dp_.end_backward();
    sum_tied_embedding();
    // Every element of the gradient is counted once in the job: the embedding on the first
    // stage only (the last holds a copy), a tensor every tp rank keeps whole on tp rank 0 only.
    std::function<bool(const model::ParamSpec&)> counted;
    if (model_parallel()) {
        const bool first_stage = pp_rank_ == part_.owner(0);
        counted = [first_stage, tp_rank = tp_rank_](const model::ParamSpec& p) {
            return (p.unit != 0 || first_stage) && (p.tp_dim >= 0 || tp_rank == 0);
        };
    }
    // The loss exists on the last stage, the same on every tp rank of it.
    const bool loss_here = pp_rank_ == part_.owner(part_.chunks() - 1) && tp_rank_ == 0;
    // One all-reduce for both: the global loss and the squared norm, each element counted once.
    double sums[2] = {loss_here ? loss_sum : 0.0, dp_.grad_sum_squares(counted)};
    comm::all_reduce(model_parallel() ? mesh_.group(comm::Axis::world) : dp_.group(),
                     std::span<double>(sums));
    StepOutcome out{sums[0], std::sqrt(sums[1])};
    const float scale = optim::clip_scale(oc, out.grad_norm);
    const auto& slices = dp_.update_slices();
    for (size_t i = 0; i < slices.size(); ++i)
        adam_[i].step(dp_.update_params(slices[i]), dp_.update_grads(slices[i]), oc, lr, scale, t);
    dp_.after_update();
    return out;
}

int64_t TrainState::activation_bytes() const {
    if (stage_) return stage_->activation_bytes();
    const model::ModelConfig& cfg = model_->config();
    return 4 * model::family_of(cfg).activation_floats(
                   cfg, act_->B, act_->T, model_->activation_span({0, -1, true, act_->recompute}));
}

MemoryEstimate TrainState::memory_estimate(int64_t baseline_rss, int64_t micro_batches) const {
    const parallel::ModelStateBytes b = dp_.model_state_bytes();
    MemoryEstimate m = estimate_memory(model_->config(), b.params, b.grads, b.optimizer,
                                       dp_.working_bytes(), act_->B, act_->T, baseline_rss);
    if (stage_) {
        // The schedule says how many micro-batches this rank holds at once.
        const Layout& l = mesh_.layout();
        const pipeline::Schedule s = pipeline::make_schedule(
            pipeline::parse_schedule_kind(l.pp_schedule), pp_, l.vpp, int(micro_batches));
        const int in_flight = pipeline::simulate(s, {}).peak_in_flight[size_t(pp_rank_)];
        m.activations = 4 * stage_->activation_floats(in_flight);
    } else {
        m.activations = activation_bytes();
    }
    if (tp_ > 1) {
        // The sharded model's scratch, and the head's logits for 1/tp of the vocabulary.
        const model::ModelConfig& cfg = model_->config();
        const int64_t BT = act_->B * act_->T;
        m.scratch = 4 * (model::family_of(cfg).scratch_floats(cfg, act_->B, act_->T, tp_,
                                                              model_->sequence_parallel()) +
                         kernels::classifier_shard_scratch_floats(BT, cfg.padded_vocab() / tp_)) +
                    dp_.working_bytes();
    }
    // sum_tied_embedding's receive buffer: the other end's embedding gradient (wte and wpe).
    const int chunks = part_.chunks();
    if (stage_ && model_->config().tie_embeddings &&
        (pp_rank_ == part_.owner(0) || pp_rank_ == part_.owner(chunks - 1)))
        m.scratch += 4 * dp_.padded().units[0].size;
    // What save() allocates on the writer: ZeRO's gathered buffer and the logical model.
    const bool dp_root = mesh_.rank(comm::Axis::dp) == 0;
    if (model_parallel() ? mesh_.world_rank() == 0 : dp_root) {
        if (dp_.stage() > 0) m.checkpoint += 4 * dp_.padded().total;
        if (model_parallel()) m.checkpoint += 4 * model::build_param_layout(model_->config()).total;
    }
    return m;
}

EvalResult TrainState::evaluate(const data::TokenFile& file, int64_t B, int64_t batches) {
    const int n = dp_.group().size();
    WEFT_CHECK(B % (n * act_->B) == 0,
               "internal: evaluation batch {} is not a multiple of dp {} x micro-batch {}", B, n,
               act_->B);
    const int64_t rows = B / n;
    EvalResult part = evaluate_rows(file, B, batches, dp_.group().rank() * rows, rows, *act_, [&] {
        if (stage_) return stage_->forward_only(mesh_.group(comm::Axis::pp), *act_);
        dp_.begin_forward(true);
        return model_->forward(*act_, dp_, /*train=*/false, 1.0f);
    });
    const bool loss_here = pp_rank_ == part_.owner(part_.chunks() - 1) && tp_rank_ == 0;
    double sums[2] = {loss_here ? part.loss : 0.0, loss_here ? double(part.tokens) : 0.0};
    comm::all_reduce(model_parallel() ? mesh_.group(comm::Axis::world) : dp_.group(),
                     std::span<double>(sums));
    return {sums[0] / sums[1], int64_t(sums[1])};
}

}  // namespace weft::train
