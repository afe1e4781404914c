// The logical-index metadata of sharded checkpoints, without MPI: for layouts of dp (ZeRO
// slices), tp, pp and ep (expert slices over dp / ep) and their combinations, on GPT-2, Llama and
// its MoE, the ranks' owned ranges store every logical element exactly once; and shards written by
// one layout read back into every other (tp shards of any degree, the whole model) as exactly the
// logical tensors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/shard_writer.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/pipeline/partition.hpp"
#include "weft/train/checkpoint.hpp"

namespace weft::train {
namespace {

namespace fs = std::filesystem;

// The tensors here are small: OpenMP threads would only add waits at their barriers (seconds on
// a loaded machine), so the test runs on one.
const int kOneThread = (omp_set_num_threads(1), 0);

struct Shape {
    const char* model;
    int dp, tp, pp;
    int ep = 1;  // expert parallelism folded over dp: the experts' slices go over dp / ep
};

// A value that names (state, tensor, element): a misplaced element cannot match by chance.
float value_of(int state, size_t name_hash, int64_t i) {
    return float(state * 1000003 + int64_t(name_hash % 997) * 7919 + i % 100003) * 0.001f;
}

model::ModelConfig small(const char* preset) {
    model::ModelConfig cfg = model::model_preset(preset);
    cfg.vocab_size = 1000;
    return cfg;
}

using Logical = std::map<std::string, std::vector<float>>;

Logical logical_tensors(const model::ModelConfig& cfg, int state) {
    Logical out;
    for (const model::ParamSpec& p : model::build_param_layout(cfg).tensors) {
        std::vector<float> v(size_t(p.numel_logical()));
        const size_t h = std::hash<std::string>{}(p.name);
        for (int64_t i = 0; i < p.numel_logical(); ++i) v[size_t(i)] = value_of(state, h, i);
        out[p.name] = std::move(v);
    }
    return out;
}

// What every rank of `s` writes, as the trainer plans it: ZeRO slice d of the (stage, tp)
// shard's padded buffer, the units the stage owns (the tied embedding: the first stage).
struct Writer {
    int rank, tp_rank, ep_rank;
    std::unique_ptr<parallel::ZeroLayout> z;
    std::vector<OwnedRange> owned;
};

std::vector<Writer> writers(const model::ModelConfig& cfg, const Shape& s) {
    const int L = int(cfg.n_layer);
    const pipeline::Partition part = pipeline::partition_layers(L, s.pp, 1, "");
    std::vector<Writer> out;
    int rank = 0;
    for (int stage = 0; stage < s.pp; ++stage)
        for (int d = 0; d < s.dp; ++d)
            for (int t = 0; t < s.tp; ++t) {
                model::ModelShard shard;
                if (s.pp > 1) shard.units = part.units_of(stage, cfg);
                shard.tp_rank = t;
                shard.tp = s.tp;
                shard.ep_rank = d % s.ep;
                shard.ep = s.ep;
                if (s.ep > 1) shard.expert_align = parallel::zero_expert_align(s.dp);
                Writer w{
                    rank++,
                    t,
                    shard.ep_rank,
                    std::make_unique<parallel::ZeroLayout>(
                        model::build_param_layout(model::config_for_tp(cfg, s.tp), shard), s.dp, d),
                    {}};
                std::vector<bool> owned(size_t(L + 2));
                for (int u = 0; u < L + 2; ++u)
                    owned[size_t(u)] = u == 0 ? stage == 0 : shard.holds(u);
                w.owned = owned_ranges(*w.z, owned, t);
                out.push_back(std::move(w));
            }
    return out;
}

const Shape kShapes[] = {
    {"tiny", 1, 1, 1},       {"tiny", 2, 1, 1},        {"tiny", 3, 1, 1},
    {"tiny", 1, 2, 1},       {"tiny", 1, 1, 2},        {"tiny", 2, 2, 2},
    {"tiny", 1, 4, 1},       {"llama-tiny", 2, 1, 1},  {"llama-tiny", 1, 2, 2},
    {"llama-tiny", 2, 2, 1}, {"moe-tiny", 4, 1, 1, 2}, {"moe-tiny", 2, 1, 2, 2}};

TEST(CheckpointShards, EveryElementStoredOnce) {
    for (const Shape& s : kShapes) {
        const model::ModelConfig cfg = small(s.model);
        std::map<std::string, std::vector<int>> seen;
        for (const model::ParamSpec& p : model::build_param_layout(cfg).tensors)
            seen[p.name].assign(size_t(p.numel_logical()), 0);
        for (const Writer& w : writers(cfg, s))
            for (const OwnedRange& r : w.owned)
                for (int64_t i = r.begin; i < r.end; ++i) {
                    const int64_t j = model::logical_index(*r.spec, w.tp_rank, s.tp, i);
                    if (j >= 0) ++seen[r.spec->name][size_t(j)];
                }
        for (const auto& [name, counts] : seen)
            for (size_t j = 0; j < counts.size(); ++j)
                ASSERT_EQ(counts[j], 1)
                    << s.model << " dp " << s.dp << " tp " << s.tp << " pp " << s.pp << " ep "
                    << s.ep << ": " << name << " element " << j;
    }
}

// Writes the checkpoint of layout `s` (three states of known logical values) into `dir`.
void write_checkpoint(const fs::path& dir, const model::ModelConfig& cfg, const Shape& s,
                      const std::vector<Logical>& states) {
    ckpt::Manifest m;
    m.step = 3;
    m.layout = "test";
    m.model = cfg.to_json();
    m.run = nlohmann::json::object();
    m.tensors = manifest_tensors(cfg);
    ckpt::ShardWriter writer;
    for (const Writer& w : writers(cfg, s)) {
        std::vector<float> data;
        for (int state = 0; state < 3; ++state) {
            std::vector<float> padded(size_t(w.z->padded().total));
            for (const model::ParamSpec& p : w.z->padded().tensors)
                model::take_shard(p, w.tp_rank, s.tp, states[size_t(state)].at(p.name).data(),
                                  padded.data() + p.offset);
            for (const OwnedRange& r : w.owned)
                data.insert(data.end(), padded.begin() + r.padded_begin,
                            padded.begin() + r.padded_begin + r.floats());
        }
        writer.start(dir / ckpt::shard_file_name(w.rank), data, true);
        const ckpt::FileDigest d = writer.wait();
        m.shards.push_back({ckpt::shard_file_name(w.rank), w.rank, w.tp_rank, s.tp, d.bytes,
                            d.digest, shard_ranges(w.owned)});
        m.shards.back().ep_rank = w.ep_rank;
        m.shards.back().ep = s.ep;
    }
    ckpt::write_manifest(dir, m);
}

TEST(CheckpointShards, AnyLayoutReadsAnyOther) {
    const StateTensors kinds[] = {StateTensors::params, StateTensors::exp_avg,
                                  StateTensors::exp_avg_sq};
    for (const Shape& s : kShapes) {
        const model::ModelConfig cfg = small(s.model);
        std::vector<Logical> states;
        for (int state = 0; state < 3; ++state) states.push_back(logical_tensors(cfg, state));
        test::TempDir dir;
        write_checkpoint(dir.path(), cfg, s, states);
        const CheckpointInfo ck = open_checkpoint(dir.path());
        EXPECT_EQ(ck.state.at("step"), 3);
        EXPECT_EQ(ck.cfg.to_json(), cfg.to_json());
        const CheckpointReader reader(ck);
        // Read back at tp 1 and 2, or for a MoE (no tp) whole and as ep 2 slices of the experts.
        const bool experts = cfg.n_experts > 0;
        for (int n : {1, 2}) {
            const int tp = experts ? 1 : n, ep = experts ? n : 1;
            for (int t = 0; t < n; ++t) {
                model::ModelShard shard;
                shard.tp_rank = experts ? 0 : t;
                shard.tp = tp;
                shard.ep_rank = experts ? t : 0;
                shard.ep = ep;
                const model::ParamLayout layout =
                    model::build_param_layout(model::config_for_tp(cfg, tp), shard);
                for (int state = 0; state < 3; ++state) {
                    std::vector<float> got(size_t(layout.total), -1.0f), want(got.size(), -1.0f);
                    reader.read(kinds[state], layout, got.data());
                    for (const model::ParamSpec& p : layout.tensors)
                        model::take_shard(p, shard.tp_rank, tp,
                                          states[size_t(state)].at(p.name).data(),
                                          want.data() + p.offset);
                    for (const model::ParamSpec& p : layout.tensors)
                        for (int64_t i = 0; i < p.numel_stored; ++i)
                            ASSERT_EQ(got[size_t(p.offset + i)], want[size_t(p.offset + i)])
                                << s.model << " written at dp " << s.dp << " tp " << s.tp << " pp "
                                << s.pp << ", read at rank " << t << " of tp " << tp << " ep " << ep
                                << ": " << state_name(kinds[state]) << " " << p.name << " [" << i
                                << "]";
                }
            }
        }
    }
}

TEST(CheckpointShards, MissingPiecesAndDamageAreErrors) {
    const model::ModelConfig cfg = small("tiny");
    const Shape s{"tiny", 2, 1, 1};
    std::vector<Logical> states;
    for (int state = 0; state < 3; ++state) states.push_back(logical_tensors(cfg, state));
    test::TempDir dir;
    write_checkpoint(dir.path(), cfg, s, states);

    // A shard altered after the manifest was written: open_checkpoint names the file.
    std::string bytes = test::read_bytes(dir / "rank_00001.bin");
    bytes[100] ^= 1;
    test::write_bytes(dir / "rank_00001.bin", bytes);
    std::string e = test::error_of([&] { open_checkpoint(dir.path()); });
    EXPECT_NE(e.find("rank_00001.bin: digest"), std::string::npos) << e;
    bytes[100] ^= 1;
    test::write_bytes(dir / "rank_00001.bin", bytes);

    // A manifest that lists only rank 0's shard: opening it says what is missing, before any
    // shard is read.
    ckpt::Manifest m = ckpt::read_manifest(dir.path());
    m.shards.pop_back();
    ckpt::write_manifest(dir.path(), m);
    e = test::error_of([&] { open_checkpoint(dir.path()); });
    EXPECT_NE(e.find("are in no shard's range"), std::string::npos) << e;
    // One range listed in place of another of the same length (the counts still add up): the
    // element held twice is named.
    m = ckpt::read_manifest(dir.path());
    std::vector<ckpt::ShardRange>& r = m.shards[0].ranges;
    const auto same_length = std::find_if(r.begin() + 1, r.end(), [&](const ckpt::ShardRange& x) {
        return x.floats() == r[0].floats();
    });
    ASSERT_NE(same_length, r.end());
    *same_length = r[0];
    ckpt::write_manifest(dir.path(), m);
    e = test::error_of([&] { open_checkpoint(dir.path()); });
    EXPECT_NE(e.find("is held twice"), std::string::npos) << e;
}

}  // namespace
}  // namespace weft::train
