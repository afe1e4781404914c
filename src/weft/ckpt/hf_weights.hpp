#pragma once
// The weights of a Hugging Face model directory, as transformers' save_pretrained writes them:
// either one `model.safetensors`, or shards `model-00001-of-0000N.safetensors` listed by
// `model.safetensors.index.json`:
//   {"metadata": {"total_size": N}, "weight_map": {"tensor name": "shard file name", ...}}
// The reader checks the index against the shards (every shard opens, every tensor is where the
// map says, no tensor is unlisted or listed twice) so a half-downloaded or mixed-up directory
// fails at open, naming the file at fault, instead of loading some tensors from the wrong place.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/ckpt/safetensors.hpp"

namespace weft::ckpt {

inline constexpr std::string_view kHfWeightsFile = "model.safetensors";
inline constexpr std::string_view kHfWeightsIndexFile = "model.safetensors.index.json";
// transformers' default max_shard_size ("5GB").
inline constexpr uint64_t kHfMaxShardBytes = 5'000'000'000;

// Every shard memory-mapped read-only for the object's lifetime. Move-only.
class HfWeights {
  public:
    // Opens DIR/model.safetensors if it exists, else DIR/model.safetensors.index.json and its
    // shards. Throws weft::Error naming the directory or the file at fault.
    static HfWeights open(const std::filesystem::path& dir);

    bool has(std::string_view name) const;
    // Throws naming the tensor and the directory if absent.
    const TensorInfo& info(std::string_view name) const;
    // The file (model.safetensors or a shard) that holds the tensor.
    const std::filesystem::path& file_of(std::string_view name) const;
    // Every tensor name, sorted.
    const std::vector<std::string>& names() const { return names_; }

    // Converts F32, BF16, F16 (and F64) to float into out[0 .. numel). Unlike
    // SafetensorsFile::read_f32 the dims must match exactly, not only the element count: a
    // Hugging Face tensor's shape is fixed by the architecture, and a same-sized tensor of other
    // dims (a transposed [in, out] matrix) would load as silently wrong weights. Throws naming the
    // tensor, its file, and the expected and actual shape.
    void read_f32(std::string_view name, std::span<const int64_t> expected_shape, float* out) const;

    const std::filesystem::path& dir() const { return dir_; }
    // The files read: one, or the shards in name order.
    const std::vector<SafetensorsFile>& files() const { return files_; }

  private:
    HfWeights() = default;
    void open_index(const std::filesystem::path& index);
    size_t file_index(std::string_view name) const;

    std::filesystem::path dir_;
    std::vector<SafetensorsFile> files_;
    std::map<std::string, size_t, std::less<>> file_of_;  // tensor name -> position in files_
    std::vector<std::string> names_;
};

// Writes the tensors (as F32) to DIR the way save_pretrained does: DIR/model.safetensors when
// their data fits in max_shard_bytes, else shards of at most max_shard_bytes of data each (a
// larger tensor gets a shard of its own), filled greedily in the given order, plus
// model.safetensors.index.json with metadata.total_size = all tensors' data bytes. Every file is
// written atomically and the index last, so a reader never sees an index naming a shard not yet
// complete. Afterwards the files of the other layout (a model.safetensors, which transformers
// would prefer over the new index; a stale index; shards of another count) are removed. Several
// files cannot change at once: a directory that must switch from one complete version to the next
// is written under write_dir_atomic.
void write_hf_weights(const std::filesystem::path& dir, std::span<const TensorToWrite> tensors,
                      uint64_t max_shard_bytes = kHfMaxShardBytes);

}  // namespace weft::ckpt
