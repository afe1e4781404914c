#include "weft/ckpt/manifest.hpp"

#include <cstdint>
#include <fstream>
#include <set>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/digest.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "weft-checkpoint";
const std::set<std::string> kStates = {"param", "exp_avg", "exp_avg_sq"};

uint64_t parse_digest(const std::string& text, const std::string& where) {
    constexpr std::string_view prefix = "xxh3:";
    WEFT_CHECK(text.size() == prefix.size() + 16 && text.starts_with(prefix),
               "{}: digest '{}' is not of the form xxh3:<16 hex digits>", where, text);
    uint64_t v = 0;
    for (char c : text.substr(prefix.size())) {
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        WEFT_CHECK(d >= 0, "{}: digest '{}' is not of the form xxh3:<16 hex digits>", where, text);
        v = v * 16 + uint64_t(d);
    }
    return v;
}

// One object or array of a manifest, read strictly: a missing field or one of another JSON type
// is an error naming the file and the field's path ("shards[0].tp"), where nlohmann's exception
// would say only "type must be number, but is string".
class Fields {
  public:
    using Type = nlohmann::json::value_t;
    Fields(const nlohmann::json& j, const std::string& where, std::string path)
        : j_(j), where_(where), path_(std::move(path)) {}
    const nlohmann::json& json() const { return j_; }
    const std::string& path() const { return path_; }
    size_t size() const { return j_.size(); }
    bool has(const std::string& key) const { return j_.contains(key); }

    Fields sub(const std::string& key, Type type) const {
        return Fields(typed(member(key), key_path(key), type), where_, key_path(key));
    }
    Fields sub(size_t i, Type type) const {
        return Fields(typed(j_[i], index_path(i), type), where_, index_path(i));
    }
    std::string string(const std::string& key) const {
        return typed(member(key), key_path(key), Type::string).get<std::string>();
    }
    std::string string(size_t i) const {
        return typed(j_[i], index_path(i), Type::string).get<std::string>();
    }
    int64_t integer(const std::string& key) const {
        return typed(member(key), key_path(key), Type::number_integer).get<int64_t>();
    }
    int64_t integer(size_t i) const {
        return typed(j_[i], index_path(i), Type::number_integer).get<int64_t>();
    }
    int int32(const std::string& key) const {
        const int64_t v = integer(key);
        WEFT_CHECK(v >= INT32_MIN && v <= INT32_MAX, "{}: {} is {}, out of range", where_,
                   key_path(key), v);
        return int(v);
    }

  private:
    std::string key_path(const std::string& key) const {
        return path_.empty() ? key : path_ + "." + key;
    }
    std::string index_path(size_t i) const { return fmt::format("{}[{}]", path_, i); }
    const nlohmann::json& member(const std::string& key) const {
        auto it = j_.find(key);
        WEFT_CHECK(it != j_.end(), "{}: {} is missing", where_, key_path(key));
        return *it;
    }
    const nlohmann::json& typed(const nlohmann::json& v, const std::string& path, Type type) const {
        const bool ok = type == Type::number_integer ? v.is_number_integer() : v.type() == type;
        if (ok) return v;
        const char* expected = type == Type::number_integer ? "an integer"
                               : type == Type::string       ? "a string"
                               : type == Type::object       ? "an object"
                                                            : "an array";
        std::string value = v.dump();
        if (value.size() > 40) value = value.substr(0, 40) + "...";
        fail("{}: {} is {} ({}), expected {}", where_, path, value, v.type_name(), expected);
    }
    const nlohmann::json& j_;
    const std::string& where_;
    std::string path_;
};
}  // namespace

int64_t ShardEntry::floats() const {
    int64_t n = 0;
    for (const ShardRange& r : ranges) n += r.floats();
    return n;
}

std::string shard_file_name(int rank) {
    return fmt::format("rank_{:05}.bin", rank);
}

nlohmann::json manifest_to_json(const Manifest& m) {
    nlohmann::json shards = nlohmann::json::array();
    for (const ShardEntry& s : m.shards) {
        nlohmann::json ranges = nlohmann::json::array();
        for (const ShardRange& r : s.ranges) ranges.push_back({r.state, r.tensor, r.begin, r.end});
        shards.push_back({{"file", s.file},
                          {"rank", s.rank},
                          {"tp_rank", s.tp_rank},
                          {"tp", s.tp},
                          {"bytes", s.bytes},
                          {"digest", digest_text(s.digest)},
                          {"ranges", ranges}});
        if (s.ep > 1) shards.back().update({{"ep_rank", s.ep_rank}, {"ep", s.ep}});
    }
    return {{"format", kFormat},    {"version", kCheckpointVersion},
            {"step", m.step},       {"layout", m.layout},
            {"model", m.model},     {"run", m.run},
            {"tensors", m.tensors}, {"shards", shards}};
}

Manifest manifest_from_json(const nlohmann::json& j, const std::string& where) {
    WEFT_CHECK(j.is_object() && j.value("format", "") == kFormat,
               "{}: not a weft checkpoint manifest (format is not '{}')", where, kFormat);
    const nlohmann::json version = j.value("version", nlohmann::json(0));
    WEFT_CHECK(version == kCheckpointVersion,
               "{}: checkpoint format version {}, expected {} (this weft reads only sharded "
               "checkpoints of version {})",
               where, version.dump(), kCheckpointVersion, kCheckpointVersion);
    using Type = nlohmann::json::value_t;
    const Fields top(j, where, "");
    Manifest m;
    m.step = top.integer("step");
    m.layout = top.string("layout");
    m.model = top.sub("model", Type::object).json();
    m.run = top.sub("run", Type::object).json();
    const Fields tensors = top.sub("tensors", Type::array);
    m.tensors = tensors.json();
    std::set<std::string> names;
    for (size_t t = 0; t < tensors.size(); ++t) {
        const Fields f = tensors.sub(t, Type::object);
        const std::string name = f.string("name");
        WEFT_CHECK(names.insert(name).second, "{}: tensor {} is listed twice", where, name);
        const Fields shape = f.sub("shape", Type::array);
        for (size_t d = 0; d < shape.size(); ++d)
            WEFT_CHECK(shape.integer(d) > 0, "{}: {} is {}, expected positive integers", where,
                       shape.path(), shape.json().dump());
        const int64_t tp_dim = f.integer("tp_dim");
        WEFT_CHECK(-1 <= tp_dim && tp_dim < int64_t(shape.size()),
                   "{}: {} of tensor {} is {}, expected -1 (not split) or a dimension of its "
                   "shape {}",
                   where, f.path() + ".tp_dim", name, tp_dim, shape.json().dump());
    }
    const Fields shards = top.sub("shards", Type::array);
    for (size_t i = 0; i < shards.size(); ++i) {
        const Fields s = shards.sub(i, Type::object);
        ShardEntry e;
        e.file = s.string("file");
        // A file name with a directory in it would let a manifest read outside the checkpoint.
        WEFT_CHECK(!e.file.empty() && fs::path(e.file).filename() == e.file,
                   "{}: shard file '{}' is not a plain file name", where, e.file);
        e.rank = s.int32("rank");
        e.tp_rank = s.int32("tp_rank");
        e.tp = s.int32("tp");
        e.ep_rank = s.has("ep_rank") ? s.int32("ep_rank") : 0;
        e.ep = s.has("ep") ? s.int32("ep") : 1;
        e.bytes = s.integer("bytes");
        e.digest = parse_digest(s.string("digest"), where);
        const Fields ranges = s.sub("ranges", Type::array);
        for (size_t k = 0; k < ranges.size(); ++k) {
            const Fields r = ranges.sub(k, Type::array);
            WEFT_CHECK(r.size() == 4,
                       "{}: {} of shard {} is {}, expected [state, tensor, begin, end]", where,
                       r.path(), e.file, r.json().dump());
            ShardRange sr{r.string(0), r.string(1), r.integer(2), r.integer(3)};
            WEFT_CHECK(kStates.count(sr.state),
                       "{}: shard {} has state '{}', expected param, exp_avg or exp_avg_sq", where,
                       e.file, sr.state);
            WEFT_CHECK(names.count(sr.tensor),
                       "{}: {} of shard {} names tensor '{}', which the manifest's tensors do not "
                       "list",
                       where, r.path(), e.file, sr.tensor);
            WEFT_CHECK(0 <= sr.begin && sr.begin < sr.end,
                       "{}: shard {} range of {} is [{}, {}), expected 0 <= begin < end", where,
                       e.file, sr.tensor, sr.begin, sr.end);
            e.ranges.push_back(std::move(sr));
        }
        WEFT_CHECK(0 <= e.tp_rank && e.tp_rank < e.tp,
                   "{}: shard {} has tp_rank {} of tp {}, expected 0 <= tp_rank < tp", where,
                   e.file, e.tp_rank, e.tp);
        WEFT_CHECK(0 <= e.ep_rank && e.ep_rank < e.ep,
                   "{}: shard {} has ep_rank {} of ep {}, expected 0 <= ep_rank < ep", where,
                   e.file, e.ep_rank, e.ep);
        WEFT_CHECK(e.bytes == 4 * e.floats(),
                   "{}: shard {} is said to hold {} bytes but its ranges add up to {} floats "
                   "({} bytes)",
                   where, e.file, e.bytes, e.floats(), 4 * e.floats());
        m.shards.push_back(std::move(e));
    }
    WEFT_CHECK(m.step >= 0, "{}: step {} is negative", where, m.step);
    WEFT_CHECK(!m.shards.empty(), "{}: lists no shard files", where);
    return m;
}

void write_manifest(const fs::path& dir, const Manifest& m) {
    write_file_atomic(dir / kManifestFile, manifest_to_json(m).dump(1) + "\n");
}

Manifest read_manifest(const fs::path& dir) {
    const fs::path file = dir / kManifestFile;
    if (!fs::exists(file)) {
        WEFT_CHECK(!fs::exists(dir / "state.json"),
                   "{} is a version 1 checkpoint (state.json, model.safetensors), which this weft "
                   "no longer reads; expected {} (a sharded checkpoint of version {}). Export it "
                   "with the weft that wrote it (weft export) and start from the Hugging Face "
                   "directory with --model-dir",
                   dir.string(), kManifestFile, kCheckpointVersion);
        WEFT_CHECK(!fs::exists(dir / "config.json"),
                   "{} is a Hugging Face model directory (config.json), not a weft checkpoint "
                   "(expected {}); pass it as --model-dir, or give a weft checkpoint or run "
                   "directory",
                   dir.string(), kManifestFile);
        fail("checkpoint {} has no {}: it was never committed (a save that did not finish)",
             dir.string(), kManifestFile);
    }
    std::ifstream f(file);
    WEFT_CHECK(f.good(), "cannot read {}", file.string());
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", file.string(), e.what());
    }
    return manifest_from_json(j, file.string());
}

std::optional<std::string> check_shard(const fs::path& dir, const ShardEntry& s) {
    const fs::path path = dir / s.file;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return fmt::format("cannot be read ({})", ec.message());
    if (int64_t(size) != s.bytes)
        return fmt::format("holds {} bytes, expected {} (truncated or overwritten)", size, s.bytes);
    const FileDigest d = digest_file(path);
    if (d.bytes != s.bytes) return fmt::format("read {} bytes, expected {}", d.bytes, s.bytes);
    if (d.digest != s.digest)
        return fmt::format("digest {} does not match the manifest's {} (corrupted)",
                           digest_text(d.digest), digest_text(s.digest));
    return std::nullopt;
}

std::optional<std::string> check_shards(const fs::path& dir, const Manifest& m) {
    for (const ShardEntry& s : m.shards)
        if (auto problem = check_shard(dir, s))
            return fmt::format("{}: {}", (dir / s.file).string(), *problem);
    return std::nullopt;
}

}  // namespace weft::ckpt
