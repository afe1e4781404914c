#include "weft/ckpt/gguf.hpp"

#include <bit>
#include <cstring>
#include <set>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {

static_assert(std::endian::native == std::endian::little, "GGUF files are little-endian");

namespace {

// gguf_type, the tag of a metadata value.
enum : uint32_t {
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
};
constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;

template <typename T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, std::string_view s) {
    put(out, uint64_t(s.size()));
    out.append(s);
}

uint64_t padding(uint64_t offset) {
    return (kAlignment - offset % kAlignment) % kAlignment;
}

// Round to nearest, ties to even, keeping denormals and NaNs as gguf-py's conversion does (the
// training kernels' fp32_to_bf16 flushes denormals, as AVX512-BF16 does; a file keeps them).
uint16_t to_bf16(float x) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // a quiet NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// IEEE half by the compiler's conversion (round to nearest even; overflow to infinity, as numpy's
// astype(float16) in convert_hf_to_gguf.py).
uint16_t to_f16(float x) {
    return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
}

size_t element_size(GgmlType t) {
    return t == GgmlType::f32 ? 4 : 2;
}

}  // namespace

GgmlType parse_ggml_type(std::string_view text, std::string_view flag) {
    if (text == "f32") return GgmlType::f32;
    if (text == "f16") return GgmlType::f16;
    if (text == "bf16") return GgmlType::bf16;
    fail("{} '{}' is not a GGUF type weft writes; expected f32, f16 or bf16", flag, text);
}

std::string_view ggml_type_name(GgmlType t) {
    switch (t) {
        case GgmlType::f32:
            return "F32";
        case GgmlType::f16:
            return "F16";
        case GgmlType::bf16:
            return "BF16";
    }
    return "?";
}

void GgufMetadata::key(std::string_view k, uint32_t value_type) {
    put_string(bytes_, k);
    put(bytes_, value_type);
    ++count_;
}

void GgufMetadata::add_u32(std::string_view k, uint32_t v) {
    key(k, kU32);
    put(bytes_, v);
}

void GgufMetadata::add_i32(std::string_view k, int32_t v) {
    key(k, kI32);
    put(bytes_, v);
}

void GgufMetadata::add_f32(std::string_view k, float v) {
    key(k, kF32);
    put(bytes_, v);
}

void GgufMetadata::add_bool(std::string_view k, bool v) {
    key(k, kBool);
    put(bytes_, uint8_t(v));
}

void GgufMetadata::add_string(std::string_view k, std::string_view v) {
    key(k, kString);
    put_string(bytes_, v);
}

void GgufMetadata::add_string_array(std::string_view k, std::span<const std::string> v) {
    key(k, kArray);
    put(bytes_, kString);
    put(bytes_, uint64_t(v.size()));
    for (const std::string& s : v) put_string(bytes_, s);
}

void GgufMetadata::add_i32_array(std::string_view k, std::span<const int32_t> v) {
    key(k, kArray);
    put(bytes_, kI32);
    put(bytes_, uint64_t(v.size()));
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

void write_gguf(const std::filesystem::path& file, const GgufMetadata& metadata,
                std::span<const GgufTensor> tensors) {
    std::string head;
    put(head, uint32_t(0x46554747));  // "GGUF"
    put(head, kVersion);
    put(head, uint64_t(tensors.size()));
    put(head, metadata.count());
    head += metadata.bytes();

    std::set<std::string_view> names;
    std::vector<uint64_t> sizes;
    uint64_t offset = 0;
    for (const GgufTensor& t : tensors) {
        WEFT_CHECK(names.insert(t.name).second, "cannot write {}: tensor name '{}' appears twice",
                   file.string(), t.name);
        WEFT_CHECK(!t.shape.empty(), "internal: tensor '{}' for {} has no dimensions", t.name,
                   file.string());
        uint64_t numel = 1;
        put_string(head, t.name);
        put(head, uint32_t(t.shape.size()));
        for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) {
            put(head, uint64_t(*d));
            numel *= uint64_t(*d);
        }
        put(head, uint32_t(t.type));
        offset += padding(offset);
        put(head, offset);
        sizes.push_back(numel * element_size(t.type));
        offset += sizes.back();
    }
    head.append(padding(head.size()), '\0');

    AtomicFileWriter out(file);
    out.write(head.data(), head.size());
    std::vector<uint16_t> half;
    uint64_t written = 0;
    const std::string zeros(kAlignment, '\0');
    for (size_t i = 0; i < tensors.size(); ++i) {
        const GgufTensor& t = tensors[i];
        out.write(zeros.data(), padding(written));
        written += padding(written);
        const size_t n = sizes[i] / element_size(t.type);
        if (t.type == GgmlType::f32) {
            out.write(t.data, sizes[i]);
        } else {
            half.resize(n);
            for (size_t j = 0; j < n; ++j)
                half[j] = t.type == GgmlType::f16 ? to_f16(t.data[j]) : to_bf16(t.data[j]);
            out.write(half.data(), sizes[i]);
        }
        written += sizes[i];
    }
    out.commit();
}

}  // namespace weft::ckpt
