#pragma once
// The manifest of a sharded checkpoint (format version 2): RUN_DIR/checkpoints/step_N/
//   rank_00000.bin ...   one file per rank: the float32 ranges the manifest lists for it, back
//                        to back, little-endian, nothing else
//   manifest.json        written last, by world rank 0, once every rank's file is on disk
// Each range names a state ("param", "exp_avg", "exp_avg_sq"), a logical tensor and a range
// [begin, end) of the elements of that tensor's tensor-parallel shard (tp_rank of tp) as the
// writer stored it; model::logical_index maps them to the logical tensor, so a reader of any
// layout finds its elements without knowing the writer's layout. The bytes and digest of every
// file are recorded so that a torn or corrupted shard is found before it is read.
// docs/checkpoints.md describes the format.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace weft::ckpt {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr int kCheckpointVersion = 2;

struct ShardRange {
    std::string state;   // "param", "exp_avg" or "exp_avg_sq"
    std::string tensor;  // logical name
    int64_t begin = 0, end = 0;
    int64_t floats() const { return end - begin; }
};

struct ShardEntry {
    std::string file;  // relative to the checkpoint directory
    int rank = 0;      // world rank that wrote it
    int tp_rank = 0, tp = 1;
    int64_t bytes = 0;
    uint64_t digest = 0;
    std::vector<ShardRange> ranges;
    // The expert-parallel slice of the expert tensors the writer held (ModelShard::ep_rank);
    // written to the manifest only when ep > 1.
    int ep_rank = 0, ep = 1;
    int64_t floats() const;
};

struct Manifest {
    int64_t step = 0;
    std::string layout;      // the layout it was saved with (Layout::describe)
    nlohmann::json model;    // ModelConfig::to_json
    nlohmann::json run;      // seed, batch, data and learning-rate settings
    nlohmann::json tensors;  // [{"name", "shape", "tp_dim"}] for readers and `weft ckpt inspect`
    std::vector<ShardEntry> shards;
};

// rank_00042.bin
std::string shard_file_name(int rank);

nlohmann::json manifest_to_json(const Manifest& m);
// Validates every field; errors name `where` (the manifest file) and the bad value.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);

// DIR/manifest.json, atomically (temporary, fsync, rename, fsync DIR).
void write_manifest(const std::filesystem::path& dir, const Manifest& m);
// Throws naming the file if DIR has no manifest or it is invalid; a version-1 checkpoint
// (state.json and model.safetensors) is refused with a message saying so.
Manifest read_manifest(const std::filesystem::path& dir);

// What is wrong with one shard file of the checkpoint in DIR (missing, wrong size, digest
// mismatch), or nullopt when it is intact.
std::optional<std::string> check_shard(const std::filesystem::path& dir, const ShardEntry& s);
// The first problem of any shard, as "<file>: <problem>", or nullopt when all are intact.
std::optional<std::string> check_shards(const std::filesystem::path& dir, const Manifest& m);

}  // namespace weft::ckpt
