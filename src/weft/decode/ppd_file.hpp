#pragma once
// The trained prompt tokens of Parallel Prompt Decoding (Chen et al. 2024; decode/ppd.hpp) as a
// checkpoint of their own: RUN_DIR/checkpoints/step_N/ with a manifest (ckpt/manifest.hpp) whose
// one tensor is ppd.prompt_embeddings [k, n_embd] and whose model is the base model they were
// trained on. Any number of shards holding ranges of it reads back as the whole (a writer of n
// ranks splits it n ways), so it loads and reshards as any weft checkpoint does.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "weft/decode/tree_shape.hpp"
#include "weft/model/config.hpp"

namespace weft::decode {

inline constexpr const char* kPpdTensor = "ppd.prompt_embeddings";
// Beside the manifest: the prompts' acceptance rates measured on held-out text (measure_ppd),
// which --spec-tree chooses its tree from. Not a tensor: the checkpoint's digests do not cover it,
// and a checkpoint without one is whole.
inline constexpr const char* kPpdAcceptanceFile = "ppd_acceptance.json";

struct PpdPrompts {
    model::ModelConfig base;        // the model they guess for
    int64_t tokens = 0;             // k
    std::vector<float> embeddings;  // [k, base.n_embd]
    Acceptance acceptance;          // [depth][rank], or empty when never measured

    const float* embedding(int64_t j) const { return embeddings.data() + j * base.n_embd; }
};

// Writes `p` as step `step` of RUN_DIR in `shards` shard files (ranges of the tensor, as that
// many ranks would), committing it as the run's latest; `run` goes to the manifest's run
// settings.
void save_ppd(const std::filesystem::path& run_dir, int64_t step, const PpdPrompts& p,
              const nlohmann::json& run, int shards = 1);
// A checkpoint directory or a run directory (its latest), with its acceptance rates when
// measured. Errors name the path: not a PPD checkpoint, a damaged shard, a tensor not covered
// whole, rates that are not k rows of numbers in [0, 1].
PpdPrompts load_ppd(const std::filesystem::path& dir_or_run);
// Writes `acc` (with `about`: how it was measured) beside the prompts in `dir_or_run`'s
// checkpoint, replacing any before; returns the file written.
std::filesystem::path save_ppd_acceptance(const std::filesystem::path& dir_or_run,
                                          const Acceptance& acc, const nlohmann::json& about);
// An error unless `p` was trained for a model of `cfg`'s architecture (`what` names the model).
void check_ppd_base(const PpdPrompts& p, const model::ModelConfig& cfg,
                    const std::filesystem::path& file);

}  // namespace weft::decode
