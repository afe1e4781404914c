#include "weft/train/state_checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/hf_weights.hpp"
#include "weft/ckpt/manifest.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"

namespace weft::train {

namespace fs = std::filesystem;

namespace {

// The checkpoint's moment `which` is the optimizer's moment k (exp_avg 0, exp_avg_sq 1); one it
// does not have (Lion's second, MeZO's both) is stored as zeros.
int moment_index(StateTensors which) {
    return which == StateTensors::exp_avg_sq ? 1 : 0;
}

int moments_of(TrainState& st) {
    return st.optimizers().empty() ? 0 : st.optimizers()[0]->moments();
}

// Floats [at, at + n) of slice i's moment k: in the optimizer, or with --offload in its files.
void read_moments(TrainState& st, size_t i, int k, int64_t at, int64_t n, float* out) {
    if (k >= moments_of(st)) {
        std::fill_n(out, n, 0.0f);
        return;
    }
    st.read_moment(i, k, at, n, out);
}

// The pipeline rank that holds unit `unit` (0: the embeddings, L + 1: the final norm).
int stage_of(const pipeline::Partition& part, int L, int unit) {
    if (unit == 0) return part.owner(0);
    if (unit == L + 1) return part.owner(part.chunks() - 1);
    for (int c = 0; c < part.chunks(); ++c)
        if (unit - 1 < part.first[c] + part.count[c]) return part.owner(c);
    return 0;
}

// With a bf16 working copy, where the fp32 weights loaded go too: the master in the offload
// files.
parallel::UnitKeep master_of(TrainState& st) {
    if (st.master_stream() < 0) return {};
    return [&st](int, int64_t at, int64_t n, const float* data) { st.write_master(at, n, data); };
}

}  // namespace

void init_state(TrainState& st, uint64_t seed) {
    parallel::DataParallel& dp = st.dp();
    dp.load_params(
        [&](int unit, float* buf) {
            model::init_params(buf, parallel::unit_layout(dp.padded(), unit), seed);
        },
        master_of(st));
}

void load_hf_state(TrainState& st, const fs::path& model_dir) {
    const ckpt::HfWeights weights = model::open_hf_weights(model_dir, st.model().config());
    parallel::DataParallel& dp = st.dp();
    dp.load_params(
        [&](int unit, float* buf) {
            model::read_hf_weights(weights, st.model().config(),
                                   parallel::unit_layout(dp.padded(), unit), buf);
        },
        master_of(st));
}

void load_state(TrainState& st, const CheckpointInfo& ck) {
    parallel::DataParallel& dp = st.dp();
    const CheckpointReader r(ck);
    auto reader = [&](StateTensors which) {
        return [&, which](int unit, float* buf) {
            r.read(which, parallel::unit_layout(dp.padded(), unit), buf);
        };
    };
    dp.load_params(reader(StateTensors::params), master_of(st));
    // Stage 0 keeps the moments whole; the others keep this rank's slices. The optimizer takes
    // them as fp32 (an 8-bit one requantises them). With --offload they go to its files a unit
    // at a time, with no copy of a whole moment in memory.
    const int moments = moments_of(st);
    const bool whole = dp.stage() == 0;
    if (st.offloaded()) {
        for (int k = 0; k < moments; ++k)
            parallel::fill_units(
                dp.zero_layout(), reader(k == 1 ? StateTensors::exp_avg_sq : StateTensors::exp_avg),
                [&](int slice, int64_t at, int64_t n, const float* data) {
                    if (slice < 0)
                        st.write_moment(0, k, at, n, data);  // the whole buffer's one slice
                    else
                        st.write_moment(size_t(slice), k, 0, n, data);
                },
                whole);
        return;
    }
    if (moments == 0) return;
    Buffer buf(whole ? dp.padded().total : dp.zero_layout().shard_floats());
    const auto& slices = dp.update_slices();
    for (int k = 0; k < moments; ++k) {
        auto fill = reader(k == 1 ? StateTensors::exp_avg_sq : StateTensors::exp_avg);
        parallel::fill_units(dp.zero_layout(), fill, buf.data(), whole);
        for (size_t i = 0; i < slices.size(); ++i)
            st.optimizers()[i]->write_moment(k, 0, slices[i].size,
                                             buf.data() + (whole ? 0 : slices[i].shard_offset));
    }
}

RankPlan plan_rank(const TrainState& st, int world_rank) {
    const comm::Mesh& mesh = st.mesh();
    const model::ModelConfig& cfg = st.model().config();
    const pipeline::Partition& part = st.partition();
    const int L = int(cfg.n_layer);
    const int tp = mesh.size(comm::Axis::tp), dp = mesh.size(comm::Axis::dp),
              pp = mesh.size(comm::Axis::pp), cp = mesh.size(comm::Axis::cp),
              ep = mesh.size(comm::Axis::ep);
    // The state is replicated, and ZeRO-sharded, over cp x dp (context-parallel ranks hold the
    // same weights, as data-parallel ones do); a rank's slice is its index in that group, whose
    // ranks follow world-rank order: c + cp * d.
    for (int s = 0; s < pp; ++s)
        for (int d = 0; d < dp; ++d)
            for (int c = 0; c < cp; ++c)
                for (int t = 0; t < tp; ++t) {
                    if (mesh.world_rank_of({t, c, 0, d, s}) != world_rank) continue;
                    const model::ModelShard shard = model_shard(mesh, s, t, c + cp * d, part, cfg);
                    RankPlan plan{world_rank,
                                  t,
                                  tp,
                                  std::make_unique<parallel::ZeroLayout>(
                                      model::build_param_layout(cfg, shard), dp * cp, c + cp * d),
                                  {}};
                    // A unit two stages hold (the tied embedding) is written by its owner only.
                    std::vector<bool> owned(size_t(L + 2));
                    for (int u = 0; u < L + 2; ++u) owned[size_t(u)] = stage_of(part, L, u) == s;
                    plan.owned = owned_ranges(*plan.z, owned, t);
                    plan.ep_rank = shard.ep_rank;
                    plan.ep = ep;
                    return plan;
                }
    fail("internal: world rank {} has no place in the mesh {}", world_rank, st.layout().describe());
}

namespace {

int64_t owned_floats(const std::vector<OwnedRange>& owned) {
    int64_t n = 0;
    for (const OwnedRange& r : owned) n += r.floats();
    return n;
}

// A run of one state tensor of this rank's part, within one update slice.
struct Piece {
    StateTensors which;
    size_t slice;
    int64_t at, floats;  // at: in the slice
};

// This rank's part of the state in the order shard_ranges lists it (the shard file's).
std::vector<Piece> state_pieces(TrainState& st, const RankPlan& plan) {
    parallel::DataParallel& dp = st.dp();
    const auto& slices = dp.update_slices();
    std::vector<Piece> pieces;
    for (StateTensors which : kStateTensorOrder) {
        for (const OwnedRange& r : plan.owned) {
            // Stage 0 updates the whole buffer as one slice; the others their ZeRO slices, of
            // which r (cut from one) lies in the last that starts at or before it.
            size_t i = 0;
            if (dp.stage() > 0) {
                const auto& z = dp.zero_layout();
                i = size_t(z.first_slice(r.unit));
                while (i + 1 < size_t(z.first_slice(r.unit + 1)) &&
                       slices[i + 1].begin <= r.padded_begin)
                    ++i;
            }
            pieces.push_back({which, i, r.padded_begin - slices[i].begin, r.floats()});
        }
    }
    return pieces;
}

// Floats [from, from + n) of a piece into `out`.
void copy_piece(TrainState& st, const Piece& p, int64_t from, int64_t n, float* out) {
    parallel::DataParallel& dp = st.dp();
    if (p.which == StateTensors::params && st.master_stream() >= 0)
        st.read_master(dp.update_slices()[p.slice].begin + p.at + from, n, out);
    else if (p.which == StateTensors::params)
        std::memcpy(out, dp.update_params(dp.update_slices()[p.slice]) + p.at + from,
                    size_t(n) * sizeof(float));
    else
        read_moments(st, p.slice, moment_index(p.which), p.at + from, n, out);
}

// Copies this rank's part of the state into `out`, in the order shard_ranges lists it.
void stage_state(TrainState& st, const RankPlan& plan, float* out) {
    st.dp().settle();
    for (const Piece& p : state_pieces(st, plan)) {
        copy_piece(st, p, 0, p.floats, out);
        out += p.floats;
    }
}

// The same as a source of consecutive pieces for ShardWriter::write_from.
ckpt::ShardWriter::Source state_source(TrainState& st, const RankPlan& plan) {
    st.dp().settle();
    struct Cursor {
        std::vector<Piece> pieces;
        size_t piece = 0;
        int64_t within = 0, done = 0;
    };
    auto c = std::make_shared<Cursor>(Cursor{state_pieces(st, plan)});
    return [&st, c](int64_t at, int64_t n, float* out) {
        WEFT_CHECK(at == c->done, "internal: checkpoint source read at {} after {}", at, c->done);
        for (c->done += n; n > 0;) {
            const Piece& p = c->pieces[c->piece];
            const int64_t take = std::min(n, p.floats - c->within);
            copy_piece(st, p, c->within, take, out);
            out += take, n -= take, c->within += take;
            if (c->within == p.floats) ++c->piece, c->within = 0;
        }
    };
}

}  // namespace

CheckpointSaver::CheckpointSaver(TrainState& st, fs::path run_dir, bool async, int keep,
                                 Committed committed)
    : st_(st),
      run_dir_(std::move(run_dir)),
      async_(async),
      keep_(keep),
      committed_(std::move(committed)),
      plan_(plan_rank(st, st.mesh().world_rank())) {
    WEFT_CHECK(plan_.z->padded().total == st.dp().padded().total,
               "internal: the checkpoint plan of rank {} lays out {} floats, its state {}",
               st.mesh().world_rank(), plan_.z->padded().total, st.dp().padded().total);
}

CheckpointSaver::~CheckpointSaver() = default;

void CheckpointSaver::save(int64_t step, const nlohmann::json& run) {
    st_.finish_update();  // the state saved is the step's, written whole
    if (pending_) commit();
    const int64_t floats = 3 * owned_floats(plan_.owned);
    const fs::path final_dir = ckpt::checkpoint_path(run_dir_, step);
    // The same name on every rank (no pid): they all write into it. A crashed run's leftover
    // was removed at start (remove_stale_temporaries), and a step is saved once per run.
    const fs::path tmp =
        final_dir.parent_path() / (std::string(ckpt::kTempPrefix) + final_dir.filename().string());
    if (st_.offloaded()) {
        // The moments are on disk already: written straight from the weights and the offload
        // files, without a copy of the whole (12 bytes a parameter) in memory.
        fs::create_directories(tmp);
        pending_ = Pending{step, run, tmp};
        stage_s_ = 0;
        writer_.write_from(tmp / ckpt::shard_file_name(st_.mesh().world_rank()), floats,
                           state_source(st_, plan_));
        commit();
        return;
    }
    // The synchronous path holds the copy only while it writes; the asynchronous one keeps it.
    const auto t0 = std::chrono::steady_clock::now();
    if (staging_.size() != floats) staging_ = Buffer(floats);
    stage_state(st_, plan_, staging_.data());
    stage_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fs::create_directories(tmp);
    pending_ = Pending{step, run, tmp};
    writer_.start(tmp / ckpt::shard_file_name(st_.mesh().world_rank()),
                  {staging_.data(), size_t(floats)}, async_);
    if (!async_) {
        commit();
        staging_ = Buffer();
    }
}

void CheckpointSaver::poll() {
    if (!pending_) return;
    int32_t done = writer_.done() ? 1 : 0;
    comm::all_reduce(st_.mesh().group(comm::Axis::world), std::span<int32_t>(&done, 1),
                     comm::ReduceOp::min);
    if (done) commit();
}

void CheckpointSaver::finish() {
    if (pending_) commit();
}

void CheckpointSaver::commit() {
    comm::Mesh& mesh = st_.mesh();
    const Pending p = std::move(*pending_);
    pending_.reset();
    ckpt::FileDigest written;
    std::string error;
    try {
        written = writer_.wait();
    } catch (const std::exception& e) {
        error = e.what();
    }
    // Every rank learns whether every shard was written, so none waits for a manifest that
    // will not come.
    const int64_t mine[3] = {error.empty() ? 1 : 0, written.bytes, int64_t(written.digest)};
    std::vector<int64_t> all(size_t(3 * mesh.world_size()));
    comm::all_gather(mesh.group(comm::Axis::world), std::span<const int64_t>(mine, 3),
                     std::span<int64_t>(all));
    WEFT_CHECK(error.empty(), "checkpoint of step {}: {}", p.step, error);
    last_ = {written.bytes, stage_s_, written.seconds};
    for (int r = 0; r < mesh.world_size(); ++r)
        WEFT_CHECK(all[size_t(3 * r)] == 1,
                   "checkpoint of step {}: rank {} could not write its shard (its error says why)",
                   p.step, r);
    if (mesh.world_rank() != 0) return;

    const model::ModelConfig& cfg = st_.model().config();
    ckpt::Manifest m;
    m.step = p.step;
    m.layout = st_.layout().describe();
    m.model = cfg.to_json();
    m.run = p.run;
    m.tensors = manifest_tensors(cfg);
    for (int r = 0; r < mesh.world_size(); ++r) {
        const RankPlan plan = r == 0 ? RankPlan{} : plan_rank(st_, r);
        const RankPlan& rp = r == 0 ? plan_ : plan;
        ckpt::ShardEntry e{ckpt::shard_file_name(r),
                           r,
                           rp.tp_rank,
                           rp.tp,
                           all[size_t(3 * r + 1)],
                           uint64_t(all[size_t(3 * r + 2)]),
                           shard_ranges(rp.owned)};
        e.ep_rank = rp.ep_rank;
        e.ep = rp.ep;
        WEFT_CHECK(e.bytes == 4 * e.floats(),
                   "internal: rank {} wrote {} bytes of checkpoint, its plan says {} floats", r,
                   e.bytes, e.floats());
        m.shards.push_back(std::move(e));
    }
    ckpt::write_manifest(p.tmp, m);
    ckpt::fsync_path(p.tmp);
    const fs::path dir = ckpt::checkpoint_path(run_dir_, p.step);
    ckpt::replace_dir(p.tmp, dir);
    ckpt::commit_latest(run_dir_, p.step);
    ckpt::keep_last(run_dir_, keep_);
    if (committed_) committed_(dir, last_);
}

int64_t save_state_bytes(const TrainState& st) {
    // With offload a save streams the state through one piece (ShardWriter::write_from).
    if (st.offloaded()) return int64_t(16) << 20;
    return 3 * 4 * owned_floats(plan_rank(st, st.mesh().world_rank()).owned);
}

}  // namespace weft::train
