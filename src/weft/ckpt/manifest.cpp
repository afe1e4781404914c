#include "weft/ckpt/manifest.hpp"

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
    const int version = j.value("version", 0);
    WEFT_CHECK(version == kCheckpointVersion,
               "{}: checkpoint format version {}, expected {} (this weft reads only sharded "
               "checkpoints of version {})",
               where, version, kCheckpointVersion, kCheckpointVersion);
    Manifest m;
    try {
        m.step = j.at("step").get<int64_t>();
        m.layout = j.at("layout").get<std::string>();
        m.model = j.at("model");
        m.run = j.at("run");
        m.tensors = j.at("tensors");
        for (const auto& s : j.at("shards")) {
            ShardEntry e;
            e.file = s.at("file").get<std::string>();
            e.rank = s.at("rank").get<int>();
            e.tp_rank = s.at("tp_rank").get<int>();
            e.tp = s.at("tp").get<int>();
            e.ep_rank = s.value("ep_rank", 0);
            e.ep = s.value("ep", 1);
            e.bytes = s.at("bytes").get<int64_t>();
            e.digest = parse_digest(s.at("digest").get<std::string>(), where);
            for (const auto& r : s.at("ranges")) {
                WEFT_CHECK(r.is_array() && r.size() == 4,
                           "{}: shard {} has a range {} that is not [state, tensor, begin, end]",
                           where, e.file, r.dump());
                ShardRange sr{r[0].get<std::string>(), r[1].get<std::string>(), r[2].get<int64_t>(),
                              r[3].get<int64_t>()};
                WEFT_CHECK(kStates.count(sr.state),
                           "{}: shard {} has state '{}', expected param, exp_avg or exp_avg_sq",
                           where, e.file, sr.state);
                WEFT_CHECK(0 <= sr.begin && sr.begin < sr.end,
                           "{}: shard {} range of {} is [{}, {}), expected 0 <= begin < end", where,
                           e.file, sr.tensor, sr.begin, sr.end);
                e.ranges.push_back(std::move(sr));
            }
            // A file name with a directory in it would let a manifest read outside the
            // checkpoint.
            WEFT_CHECK(!e.file.empty() && fs::path(e.file).filename() == e.file,
                       "{}: shard file '{}' is not a plain file name", where, e.file);
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
    } catch (const nlohmann::json::exception& e) {
        fail("{}: malformed manifest: {}", where, e.what());
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
