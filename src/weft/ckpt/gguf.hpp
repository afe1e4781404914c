#pragma once
// A writer of GGUF version 3, the file format of ggml and llama.cpp (ggml's docs/gguf.md): the
// magic "GGUF", the version, the tensor and key/value counts, typed key/value metadata, one info
// per tensor (name, dimensions innermost first, ggml type, offset into the data), then the tensor
// data, each tensor starting on a 32-byte boundary (general.alignment's default). Everything is
// little-endian. Only the unquantised types weft exports are written: F32, F16 and BF16.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::ckpt {

// ggml_type's values for the types written here.
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, bf16 = 30 };

// "f32", "f16" or "bf16" (what --gguf-type takes); anything else is an error naming `flag`.
GgmlType parse_ggml_type(std::string_view text, std::string_view flag);
std::string_view ggml_type_name(GgmlType t);

// Key/value pairs in the order added (llama.cpp reads them by key; the order is for people).
class GgufMetadata {
  public:
    void add_u32(std::string_view key, uint32_t v);
    void add_i32(std::string_view key, int32_t v);
    void add_f32(std::string_view key, float v);
    void add_bool(std::string_view key, bool v);
    void add_string(std::string_view key, std::string_view v);
    void add_string_array(std::string_view key, std::span<const std::string> v);
    void add_i32_array(std::string_view key, std::span<const int32_t> v);

    uint64_t count() const { return count_; }
    const std::string& bytes() const { return bytes_; }

  private:
    void key(std::string_view k, uint32_t value_type);
    std::string bytes_;
    uint64_t count_ = 0;
};

struct GgufTensor {
    std::string name;
    // Row-major, outermost first, as PyTorch and safetensors write shapes; the file stores
    // ggml's ne[], innermost first.
    std::vector<int64_t> shape;
    GgmlType type;      // how the file stores it: converted from `data`, rounded to nearest even
    const float* data;  // numel(shape) floats
};

// Writes `file` atomically (ckpt/atomic.hpp): complete under its name or not there at all.
void write_gguf(const std::filesystem::path& file, const GgufMetadata& metadata,
                std::span<const GgufTensor> tensors);

}  // namespace weft::ckpt
