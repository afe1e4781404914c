#pragma once
// Reader and writer of the safetensors format (huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "string value"}}
// then the data buffer; offsets are relative to its start. The reader validates everything the
// format promises (offsets inside the buffer, sizes matching shape x dtype, the buffer covered
// exactly once, no duplicate names) so that a corrupt or truncated file fails at open with a
// message that says what is wrong, instead of yielding silently wrong weights.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::ckpt {

struct TensorInfo {
    std::string name;
    std::string dtype;  // as in the file: "F32", "F16", "BF16", "F64", "I64", ...
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // byte offsets into the data buffer
};

// Bytes per element of a safetensors dtype name, or 0 if the name is not a safetensors dtype.
size_t safetensors_dtype_size(std::string_view dtype);

// An open safetensors file, memory-mapped read-only. Move-only; the mapping lives as long as the
// object.
class SafetensorsFile {
  public:
    static SafetensorsFile open(const std::filesystem::path& path);

    SafetensorsFile(SafetensorsFile&& other) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;
    ~SafetensorsFile();

    // In file order (by data offset).
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    // nullptr if absent.
    const TensorInfo* find(std::string_view name) const;
    // Throws weft::Error naming the tensor and the file if absent.
    const TensorInfo& at(std::string_view name) const;
    // The tensor's raw bytes in the file's dtype (little-endian, possibly unaligned).
    std::span<const std::byte> bytes(const TensorInfo& info) const;

    // Converts F32, F16, BF16 and F64 to float into out[0 .. numel). The element count must equal
    // product(expected_shape); the dims themselves may differ, so a caller can read a tensor
    // flattened or reshaped. Throws naming tensor, file, expected and actual shape otherwise.
    void read_f32(std::string_view name, std::span<const int64_t> expected_shape, float* out) const;

    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::filesystem::path& path() const { return path_; }

  private:
    SafetensorsFile() = default;
    void release() noexcept;

    std::filesystem::path path_;
    void* map_ = nullptr;
    size_t map_size_ = 0;
    const std::byte* data_ = nullptr;  // start of the data buffer inside the mapping
    size_t data_size_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
    std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
    std::string name;
    std::vector<int64_t> shape;
    const float* data;  // product(shape) floats
};

// Writes the tensors as F32 in the given order, atomically (temporary file, fsync, rename). The
// header is padded with spaces to a multiple of 8 bytes so that the data buffer is 8-aligned.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// An error naming the file, the tensor and the first element that is NaN or infinite: weights
// that would otherwise load silently and end the first step as a "diverged" loss.
void check_finite_tensor(std::span<const float> values, std::string_view tensor,
                         std::string_view file);

// "[a, b, c]": how every error message in ckpt/ prints a tensor shape.
std::string shape_text(std::span<const int64_t> shape);

}  // namespace weft::ckpt
