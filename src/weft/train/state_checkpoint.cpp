#include "weft/train/state_checkpoint.hpp"

#include <algorithm>

#include "weft/ckpt/hf_weights.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"

namespace weft::train {

namespace fs = std::filesystem;

namespace {

float* moments(optim::AdamW& adam, bool second) {
    return second ? adam.exp_avg_sq().data() : adam.exp_avg().data();
}

// AdamW moments <-> a buffer shaped as this rank's shard (stage 0: the whole buffer).
void copy_moments(TrainState& st, float* shard, bool second, bool to_shard) {
    const auto& slices = st.dp().update_slices();
    for (size_t i = 0; i < slices.size(); ++i) {
        float* m = moments(st.optimizers()[i], second);
        float* s = shard + slices[i].shard_offset;
        if (to_shard)
            std::copy_n(m, slices[i].size, s);
        else
            std::copy_n(s, slices[i].size, m);
    }
}

// The pipeline rank that holds unit `unit` (0: the embeddings, L + 1: the final norm).
int stage_of(const pipeline::Partition& part, int L, int unit) {
    if (unit == 0) return part.owner(0);
    if (unit == L + 1) return part.owner(part.chunks() - 1);
    for (int c = 0; c < part.chunks(); ++c)
        if (unit - 1 < part.first[c] + part.count[c]) return part.owner(c);
    return 0;
}

// Every sender's padded layout (the same ZeRO padding as its dp group's), by (stage, tp rank).
std::vector<parallel::ZeroLayout> sender_layouts(const TrainState& st) {
    const model::ModelConfig& cfg = st.model().config();
    const pipeline::Partition& part = st.partition();
    const int pp = st.mesh().size(comm::Axis::pp), tp = st.mesh().size(comm::Axis::tp);
    std::vector<parallel::ZeroLayout> senders;
    for (int stage = 0; stage < pp; ++stage)
        for (int t = 0; t < tp; ++t) {
            model::ModelShard shard;
            if (pp > 1) shard.units = part.units_of(stage, cfg);
            shard.tp_rank = t;
            shard.tp = tp;
            senders.emplace_back(model::build_param_layout(cfg, shard),
                                 st.mesh().size(comm::Axis::dp), 0);
        }
    return senders;
}

// Collective over the mesh: the whole padded buffer of dp rank 0 of every (tp, pp) position
// into the logical model on world rank 0 (`full`, laid out as build_param_layout(cfg)).
void assemble(TrainState& st, const float* local, float* full) {
    comm::Mesh& mesh = st.mesh();
    const model::ModelConfig& cfg = st.model().config();
    const bool root = mesh.world_rank() == 0;
    const int L = int(cfg.n_layer), tp = mesh.size(comm::Axis::tp);
    const model::ParamLayout full_layout = model::build_param_layout(cfg);
    comm::Group& world = mesh.group(comm::Axis::world);
    const bool sender = mesh.rank(comm::Axis::dp) == 0;
    const std::vector<parallel::ZeroLayout> senders = sender_layouts(st);
    WEFT_CHECK(L + 2 <= comm::tags::kCheckpointUnits.count,
               "a checkpoint of {} units needs more message tags than weft reserves ({})", L + 2,
               comm::tags::kCheckpointUnits.count);
    Buffer tmp;
    for (int u = 0; u < L + 2; ++u) {
        const int stage = stage_of(st.partition(), L, u);
        for (int t = 0; t < tp; ++t) {
            const int src = mesh.world_rank_of({t, 0, 0, 0, stage});
            const parallel::ZeroLayout& z = senders[size_t(stage * tp + t)];
            const model::Unit& unit = z.padded().units[size_t(u)];
            if (sender && src == mesh.world_rank() && !root) {
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
                model::place_shard(p, t, tp, data + (p.offset - unit.offset),
                                   full + full_layout.find(p.name).offset);
            }
        }
    }
}

// With model parallelism every stage and shard sends its part to world rank 0, which writes
// the logical model; otherwise dp rank 0 writes its (ZeRO-padded) buffers.
bool writes_checkpoint(const TrainState& st) {
    if (st.model_parallel()) return st.mesh().world_rank() == 0;
    return st.mesh().rank(comm::Axis::dp) == 0;
}

}  // namespace

void init_state(TrainState& st, uint64_t seed) {
    parallel::DataParallel& dp = st.dp();
    dp.load_params([&](int unit, float* buf) {
        model::init_params(buf, parallel::unit_layout(dp.padded(), unit), seed);
    });
}

void load_hf_state(TrainState& st, const fs::path& model_dir) {
    const ckpt::HfWeights weights = ckpt::HfWeights::open(model_dir);
    parallel::DataParallel& dp = st.dp();
    dp.load_params([&](int unit, float* buf) {
        model::read_hf_weights(weights, st.model().config(),
                               parallel::unit_layout(dp.padded(), unit), buf);
    });
}

void load_state(TrainState& st, const CheckpointInfo& ck) {
    parallel::DataParallel& dp = st.dp();
    auto reader = [&](const char* file, const char* prefix) {
        return [&, file, prefix](int unit, float* buf) {
            model::read_tensors(ck.dir / file, st.model().config(),
                                parallel::unit_layout(dp.padded(), unit), buf, model::Naming::weft,
                                prefix);
        };
    };
    dp.load_params(reader("model.safetensors", ""));
    // Stage 0 keeps the moments whole; the others keep this rank's slices.
    const bool whole = dp.stage() == 0;
    Buffer shard(dp.zero_layout().shard_floats());
    for (bool second : {false, true}) {
        auto fill = second ? reader("optimizer_v.safetensors", "exp_avg_sq.")
                           : reader("optimizer_m.safetensors", "exp_avg.");
        if (whole) {
            parallel::fill_units(dp.zero_layout(), fill, moments(st.optimizers()[0], second), true);
        } else {
            parallel::fill_units(dp.zero_layout(), fill, shard.data(), false);
            copy_moments(st, shard.data(), second, false);
        }
    }
}

fs::path save_state(TrainState& st, const fs::path& run_dir, int64_t step,
                    const nlohmann::json& state) {
    parallel::DataParallel& dp = st.dp();
    const bool dp_root = dp.group().rank() == 0;
    const bool mp = st.model_parallel();
    const bool writer = writes_checkpoint(st);
    const model::ParamLayout layout =
        mp ? model::build_param_layout(st.model().config()) : dp.padded();
    // One file's whole tensors exist on the writer at a time, only while it writes them.
    Buffer gathered(dp_root && dp.stage() > 0 ? dp.padded().total : 0);
    Buffer shard(dp.stage() > 0 ? dp.zero_layout().shard_floats() : 0);
    Buffer full(mp && writer ? layout.total : 0);
    // Collective: every rank calls it for each file, in kStateTensorOrder.
    auto source = [&](StateTensors which) -> const float* {
        const float* local = nullptr;
        if (which == StateTensors::params) {
            local = dp.gather_params(gathered.data());
        } else {
            const bool second = which == StateTensors::exp_avg_sq;
            if (dp.stage() == 0) {
                local = moments(st.optimizers()[0], second);
            } else {
                copy_moments(st, shard.data(), second, true);
                dp.gather_shard(shard.data(), gathered.data());
                local = gathered.data();
            }
        }
        if (!mp) return local;
        assemble(st, local, full.data());
        return full.data();
    };
    if (!writer) {
        for (StateTensors which : kStateTensorOrder) source(which);
        return {};
    }
    return save_checkpoint(run_dir, step, st.model().config(), layout, source, state);
}

int64_t save_state_bytes(const TrainState& st) {
    if (!writes_checkpoint(st)) return 0;
    int64_t bytes = 0;
    if (st.dp().stage() > 0) bytes += 4 * st.dp().padded().total;
    if (st.model_parallel()) bytes += 4 * model::build_param_layout(st.model().config()).total;
    return bytes;
}

}  // namespace weft::train
