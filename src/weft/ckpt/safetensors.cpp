#include "weft/ckpt/safetensors.hpp"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/resident_pages.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

// The format is little-endian; so are the hosts weft targets, which lets data be copied as is.
static_assert(std::endian::native == std::endian::little, "weft assumes a little-endian host");

namespace {

// A header beyond this is not a real file's: the largest real headers (tens of thousands of
// tensors) are a few MB. The limit keeps a garbage length from allocating gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// product(shape), or -1 on a negative dim or overflow.
int64_t checked_numel(std::span<const int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
        if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
    return n;
}

// IEEE binary16 -> binary32, exact for every value including subnormals, inf and NaN.
float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal: shift the mantissa up until its leading one is the implicit bit
        exp = 127 - 15 + 1;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    return std::bit_cast<float>(bits);
}

float bf16_to_f32(uint16_t h) {
    return std::bit_cast<float>(uint32_t(h) << 16);
}

// The data buffer need not be aligned (other writers do not pad), so elements are memcpy'd.
template <typename T>
T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// nlohmann::json keeps one value of a duplicated key silently; the parser callback sees every
// key, so duplicates (a tensor name twice would be an ambiguous file) are reported instead.
json parse_header(std::string_view text, const fs::path& path) {
    std::vector<std::set<std::string>> seen;  // keys of each open object, innermost last
    auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) {
            seen.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
            seen.pop_back();
        } else if (event == json::parse_event_t::key) {
            const auto& key = parsed.get_ref<const std::string&>();
            WEFT_CHECK(seen.back().insert(key).second,
                       "safetensors header of {}: duplicate {} '{}'", path.string(),
                       depth == 1 ? "tensor name" : "key", key);
        }
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), callback);
    } catch (const json::exception& e) {
        fail("safetensors header of {} is not valid JSON: {}", path.string(), e.what());
    }
}

int64_t get_nonneg(const json& v, const std::string& what, const std::string& name,
                   const fs::path& path) {
    WEFT_CHECK(v.is_number_integer(), "tensor '{}' in {}: {} must be integers, got {}", name,
               path.string(), what, v.dump());
    if (v.is_number_unsigned()) {
        uint64_t u = v.get<uint64_t>();
        WEFT_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()),
                   "tensor '{}' in {}: {} value {} is too large", name, path.string(), what, u);
        return int64_t(u);
    }
    int64_t s = v.get<int64_t>();
    WEFT_CHECK(s >= 0, "tensor '{}' in {}: negative value {} in {} (expected >= 0)", name,
               path.string(), s, what);
    return s;
}

const json& require(const json& entry, const char* key, const std::string& name,
                    const fs::path& path) {
    auto it = entry.find(key);
    WEFT_CHECK(it != entry.end(),
               "tensor '{}' in {} has no \"{}\" (expected dtype, shape and "
               "data_offsets)",
               name, path.string(), key);
    return *it;
}

TensorInfo parse_entry(const std::string& name, const json& entry, const fs::path& path) {
    WEFT_CHECK(entry.is_object(), "tensor '{}' in {}: expected an object, got {}", name,
               path.string(), entry.type_name());
    TensorInfo info;
    info.name = name;

    const json& dtype = require(entry, "dtype", name, path);
    WEFT_CHECK(dtype.is_string(), "tensor '{}' in {}: dtype must be a string, got {}", name,
               path.string(), dtype.dump());
    info.dtype = dtype.get<std::string>();
    size_t elem = safetensors_dtype_size(info.dtype);
    WEFT_CHECK(elem != 0,
               "tensor '{}' in {}: unknown dtype '{}' (expected one of F64, F32, F16, "
               "BF16, F8_E4M3, F8_E5M2, C64, I64, I32, I16, I8, U64, U32, U16, U8, BOOL)",
               name, path.string(), info.dtype);

    const json& shape = require(entry, "shape", name, path);
    WEFT_CHECK(shape.is_array(), "tensor '{}' in {}: shape must be an array, got {}", name,
               path.string(), shape.dump());
    for (const json& d : shape) info.shape.push_back(get_nonneg(d, "shape dims", name, path));

    const json& offsets = require(entry, "data_offsets", name, path);
    WEFT_CHECK(offsets.is_array() && offsets.size() == 2,
               "tensor '{}' in {}: data_offsets must be an array [begin, end], got {}", name,
               path.string(), offsets.dump());
    info.begin = get_nonneg(offsets[0], "data_offsets", name, path);
    info.end = get_nonneg(offsets[1], "data_offsets", name, path);
    WEFT_CHECK(info.begin <= info.end, "tensor '{}' in {}: data_offsets [{}, {}] end before begin",
               name, path.string(), info.begin, info.end);

    int64_t numel = checked_numel(info.shape);
    int64_t bytes;
    WEFT_CHECK(numel >= 0 && !__builtin_mul_overflow(numel, int64_t(elem), &bytes),
               "tensor '{}' in {}: shape {} is too large", name, path.string(),
               shape_text(info.shape));
    WEFT_CHECK(info.end - info.begin == bytes,
               "tensor '{}' in {}: data_offsets [{}, {}] span {} bytes, but shape {} of {} needs "
               "{} bytes",
               name, path.string(), info.begin, info.end, info.end - info.begin,
               shape_text(info.shape), info.dtype, bytes);
    return info;
}

// The spec requires the tensors to cover the data buffer exactly once: no overlap (two tensors
// aliasing bytes), no gap (hidden bytes), nothing past the end.
void check_coverage(const std::vector<TensorInfo>& tensors, size_t data_size,
                    const fs::path& path) {
    int64_t covered = 0;
    const TensorInfo* prev = nullptr;
    for (const TensorInfo& t : tensors) {
        WEFT_CHECK(uint64_t(t.end) <= data_size,
                   "tensor '{}' in {}: data_offsets [{}, {}] lie outside the data buffer of {} "
                   "bytes (file truncated?)",
                   t.name, path.string(), t.begin, t.end, data_size);
        WEFT_CHECK(t.begin >= covered, "tensors '{}' and '{}' in {} overlap: [{}, {}] and [{}, {}]",
                   prev ? prev->name : "", t.name, path.string(), prev ? prev->begin : 0,
                   prev ? prev->end : 0, t.begin, t.end);
        WEFT_CHECK(t.begin == covered,
                   "gap in the data buffer of {}: bytes [{}, {}) before tensor '{}' belong to no "
                   "tensor",
                   path.string(), covered, t.begin, t.name);
        covered = t.end;
        prev = &t;
    }
    WEFT_CHECK(uint64_t(covered) == data_size,
               "gap in the data buffer of {}: bytes [{}, {}) after the last tensor belong to no "
               "tensor",
               path.string(), covered, data_size);
}

}  // namespace

size_t safetensors_dtype_size(std::string_view dtype) {
    static const std::map<std::string_view, size_t> sizes = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
        {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
        {"I64", 8},  {"U64", 8}, {"F64", 8},  {"C64", 8}};
    auto it = sizes.find(dtype);
    return it == sizes.end() ? 0 : it->second;
}

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
    SafetensorsFile f;
    f.path_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    WEFT_CHECK(fd >= 0, "cannot open safetensors file {}: {}", path.string(),
               std::error_code(errno, std::generic_category()).message());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{} is not a regular file (expected a safetensors file)", path.string());
    }
    const uint64_t size = uint64_t(st.st_size);
    if (size < 8) {
        ::close(fd);
        fail(
            "{} is {} bytes long, too short for a safetensors file (expected at least the 8-byte "
            "header length)",
            path.string(), size);
    }
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    WEFT_CHECK(map != MAP_FAILED, "cannot map {}: {}", path.string(),
               std::error_code(err, std::generic_category()).message());
    f.map_ = map;
    f.map_size_ = size;
    const auto* base = static_cast<const std::byte*>(map);

    const uint64_t header_len = load<uint64_t>(base);
    WEFT_CHECK(header_len <= kMaxHeaderBytes,
               "{}: header length {} is absurd (limit {} bytes); not a safetensors file?",
               path.string(), header_len, kMaxHeaderBytes);
    WEFT_CHECK(header_len <= size - 8,
               "{}: header length {} is larger than the {} bytes after the length field (file "
               "truncated?)",
               path.string(), header_len, size - 8);
    f.data_ = base + 8 + header_len;
    f.data_size_ = size - 8 - header_len;

    const json header =
        parse_header(std::string_view(reinterpret_cast<const char*>(base + 8), header_len), path);
    WEFT_CHECK(header.is_object(), "safetensors header of {} must be a JSON object, got {}",
               path.string(), header.type_name());
    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            WEFT_CHECK(value.is_object(), "__metadata__ in {} must be an object, got {}",
                       path.string(), value.type_name());
            for (const auto& [k, v] : value.items()) {
                WEFT_CHECK(v.is_string(), "__metadata__ key '{}' in {} must be a string, got {}", k,
                           path.string(), v.dump());
                f.metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        f.tensors_.push_back(parse_entry(key, value, path));
    }
    std::stable_sort(f.tensors_.begin(), f.tensors_.end(), [](const auto& a, const auto& b) {
        return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
    });
    check_coverage(f.tensors_, f.data_size_, path);
    for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
    return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept {
    *this = std::move(other);
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
    if (this != &other) {
        release();
        path_ = std::move(other.path_);
        map_ = std::exchange(other.map_, nullptr);
        map_size_ = std::exchange(other.map_size_, 0);
        data_ = std::exchange(other.data_, nullptr);
        data_size_ = std::exchange(other.data_size_, 0);
        tensors_ = std::move(other.tensors_);
        index_ = std::move(other.index_);
        metadata_ = std::move(other.metadata_);
    }
    return *this;
}

SafetensorsFile::~SafetensorsFile() {
    release();
}

void SafetensorsFile::release() noexcept {
    if (map_) ::munmap(map_, map_size_);
    map_ = nullptr;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
    const TensorInfo* info = find(name);
    WEFT_CHECK(info, "tensor '{}' not found in {} ({} tensors)", name, path_.string(),
               tensors_.size());
    return *info;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
    return {data_ + info.begin, size_t(info.end - info.begin)};
}

void SafetensorsFile::read_f32(std::string_view name, std::span<const int64_t> expected_shape,
                               float* out) const {
    const TensorInfo& info = at(name);
    const int64_t want = checked_numel(expected_shape);
    const int64_t have = checked_numel(info.shape);
    WEFT_CHECK(want >= 0 && want == have,
               "tensor '{}' in {} has shape {} ({} elements), expected shape {} ({} elements)",
               name, path_.string(), shape_text(info.shape), have, shape_text(expected_shape),
               want);
    const std::byte* p = data_ + info.begin;
    const size_t n = size_t(have);
    if (info.dtype == "F32") {
        if (n) std::memcpy(out, p, n * sizeof(float));
    } else if (info.dtype == "F16") {
        for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(p + 2 * i));
    } else if (info.dtype == "BF16") {
        for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(p + 2 * i));
    } else if (info.dtype == "F64") {
        for (size_t i = 0; i < n; ++i) out[i] = float(load<double>(p + 8 * i));
    } else {
        fail("tensor '{}' in {} has dtype {}; expected a floating type (F32, F16, BF16, F64)", name,
             path_.string(), info.dtype);
    }
    drop_resident_pages(map_, map_size_, p, info.end - info.begin);
}

void check_finite_tensor(std::span<const float> values, std::string_view tensor,
                         std::string_view file) {
    const auto bad =
        std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
    if (bad == values.end()) return;
    fail("{}: tensor '{}' holds {} at element {}; expected finite weights", file, tensor,
         std::isnan(*bad) ? "NaN" : "an infinity", bad - values.begin());
}

void write_safetensors(const fs::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) meta[k] = v;
    }
    std::set<std::string_view> names;
    std::vector<size_t> sizes;
    uint64_t offset = 0;
    for (const TensorToWrite& t : tensors) {
        WEFT_CHECK(!t.name.empty() && t.name != "__metadata__",
                   "cannot write tensor named '{}' to {}: expected a non-empty name other than "
                   "__metadata__",
                   t.name, path.string());
        WEFT_CHECK(names.insert(t.name).second, "cannot write {}: tensor name '{}' appears twice",
                   path.string(), t.name);
        int64_t numel = checked_numel(t.shape);
        WEFT_CHECK(numel >= 0, "cannot write tensor '{}' to {}: bad shape {}", t.name,
                   path.string(), shape_text(t.shape));
        WEFT_CHECK(t.data || numel == 0, "cannot write tensor '{}' to {}: data is null", t.name,
                   path.string());
        sizes.push_back(size_t(numel) * sizeof(float));
        header[t.name] = {{"dtype", "F32"},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + sizes.back()}}};
        offset += sizes.back();
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& e) {
        fail("cannot write {}: a tensor name or metadata entry is not valid UTF-8: {}",
             path.string(), e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    const uint64_t len = text.size();

    AtomicFileWriter out(path);
    out.write(&len, sizeof len);  // little-endian host, asserted above
    out.write(text.data(), text.size());
    for (size_t i = 0; i < tensors.size(); ++i) out.write(tensors[i].data, sizes[i]);
    out.commit();
}

std::string shape_text(std::span<const int64_t> shape) {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace weft::ckpt
