#pragma once
// A training checkpoint in the sharded format (ckpt/manifest.hpp, docs/checkpoints.md): which
// part of the state each rank writes, and how any layout reads it back. A rank writes, of every
// unit its pipeline stage owns, ZeRO slice `dp rank` of its tensor-parallel shard of the padded
// flat buffer (with ZeRO 0 too: the replicated state is split over the dp ranks the same way, so
// each writes ~1/dp), in the three states (weights, the optimizer's two moments as fp32, zeros for
// a moment it has not: Lion's second, MeZO's both); tensors every tp rank
// keeps whole are written by tp rank 0 only, and the tied embedding by the first stage only. So
// every logical element is stored exactly once.
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "weft/ckpt/manifest.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::train {

enum class StateTensors { params, exp_avg, exp_avg_sq };
inline constexpr StateTensors kStateTensorOrder[] = {StateTensors::params, StateTensors::exp_avg,
                                                     StateTensors::exp_avg_sq};
// "param", "exp_avg", "exp_avg_sq": the manifest's names.
const char* state_name(StateTensors which);

// Elements [begin, end) of the stored shard of `spec` (an entry of the padded layout the plan
// was made from), at padded_begin.. of the padded flat buffer.
struct OwnedRange {
    const model::ParamSpec* spec;
    int64_t begin, end;
    int64_t padded_begin;
    int unit;
    int64_t floats() const { return end - begin; }
};

// What the rank holding the ZeRO slices of `z` (rank z.rank()) writes, for the units `owned`
// marks (one per unit; the units its stage is the owner of); `tp_rank` 0 also writes the
// replicated tensors. Expert tensors (ParamSpec::expert) differ across ep ranks; their slices
// are cut over the expert-data-parallel group (zero_layout.hpp), so each ep rank writes its
// own experts, split over its edp group.
std::vector<OwnedRange> owned_ranges(const parallel::ZeroLayout& z, const std::vector<bool>& owned,
                                     int tp_rank);
// The manifest's ranges of those, state by state in kStateTensorOrder: the order of the data in
// the shard file.
std::vector<ckpt::ShardRange> shard_ranges(const std::vector<OwnedRange>& owned);

// The manifest's "tensors": every logical tensor of `cfg` with its shape and tp split.
nlohmann::json manifest_tensors(const model::ModelConfig& cfg);

struct CheckpointInfo {
    std::filesystem::path dir;
    model::ModelConfig cfg;
    nlohmann::json state;  // the run settings (seed, batch, learning rate...) and "step"
    ckpt::Manifest manifest;
};
// A checkpoint directory or a run directory (its latest). The manifest is checked against its
// model (manifest_check.hpp) and every shard's size and digest: a damaged checkpoint is an error
// naming the file.
CheckpointInfo open_checkpoint(const std::filesystem::path& dir_or_run);

// For --resume: the newest intact committed checkpoint of RUN_DIR, starting at `latest`;
// nullopt when there is none at all. A damaged newest one is passed over for the previous one,
// and `warning` says so in one line naming the damaged file; none intact is an error.
struct ResumePoint {
    CheckpointInfo ck;
    std::string warning;  // empty when latest was intact
};
std::optional<ResumePoint> open_resume_checkpoint(const std::filesystem::path& run_dir);

// The parameter layout of the writer of shard tp_rank of tp, ep_rank of ep (its vocabulary padded
// as that tp pads it): how that writer's stored elements map to the logical tensors.
model::ParamLayout writer_param_layout(const model::ModelConfig& cfg, int tp_rank, int tp,
                                       int ep_rank, int ep);

// Reads a checkpoint's logical tensors into any layout (any tp shard of any units).
class CheckpointReader {
  public:
    explicit CheckpointReader(const CheckpointInfo& ck);
    ~CheckpointReader();
    CheckpointReader(const CheckpointReader&) = delete;
    CheckpointReader& operator=(const CheckpointReader&) = delete;

    // Every tensor of `layout` (its tp shard, at its offsets in `flat`) in state `which`; an
    // error names the tensor when the checkpoint does not hold all of it.
    void read(StateTensors which, const model::ParamLayout& layout, float* flat) const;

  private:
    struct Mapped;
    struct Piece {
        int shard;
        int64_t begin, end;
        const float* data;
    };
    const model::ParamLayout& writer_layout(int tp_rank, int tp, int ep_rank, int ep) const;
    // Drops a piece's mapped pages from the resident set once read.
    void release(const Piece& piece) const;

    CheckpointInfo ck_;
    std::vector<std::unique_ptr<Mapped>> files_;
    std::map<std::pair<std::string, std::string>, std::vector<Piece>> pieces_;  // (state, tensor)
    mutable std::map<std::array<int, 4>, model::ParamLayout> writer_layouts_;
};

// The whole logical model's parameters (eval, sample, export).
void load_checkpoint_params(const CheckpointInfo& ck, const model::ParamLayout& layout,
                            float* params);

}  // namespace weft::train
