#include "weft/ckpt/hf_weights.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_file(const fs::path& p) {
    std::error_code ec;  // unreadable counts as absent here; opening it then says why
    return fs::is_regular_file(p, ec);
}

// nlohmann::json keeps one value of a repeated key silently; a tensor listed twice in weight_map
// (perhaps with two different shards) must be an error, so every key is checked as it is parsed.
json parse_index(const fs::path& index) {
    std::ifstream in(index, std::ios::binary);
    WEFT_CHECK(in.good(), "cannot read {}", index.string());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::set<std::string>> seen;  // keys of each open object, innermost last
    auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) {
            seen.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
            seen.pop_back();
        } else if (event == json::parse_event_t::key) {
            const auto& key = parsed.get_ref<const std::string&>();
            WEFT_CHECK(seen.back().insert(key).second,
                       "{}: \"{}\" is listed twice in one object (expected each tensor name and "
                       "key once)",
                       index.string(), key);
        }
        return true;
    };
    try {
        return json::parse(text, callback);
    } catch (const json::exception& e) {
        fail("{} is not valid JSON: {}", index.string(), e.what());
    }
}

// transformers joins shard names onto the model directory; weft accepts only plain names so that
// an index cannot point outside the directory it describes.
bool is_plain_file_name(const std::string& name) {
    return !name.empty() && name != "." && name != ".." &&
           name.find_first_of("/\\") == std::string::npos;
}

// save_pretrained's shard names, model-00001-of-00003.safetensors: what a rewrite may remove.
bool is_shard_name(const std::string& name) {
    constexpr std::string_view pattern = "model-#####-of-#####.safetensors";
    if (name.size() != pattern.size()) return false;
    for (size_t i = 0; i < name.size(); ++i) {
        if (pattern[i] == '#' ? !std::isdigit(static_cast<unsigned char>(name[i]))
                              : name[i] != pattern[i])
            return false;
    }
    return true;
}

void remove_file(const fs::path& p) {
    std::error_code ec;
    fs::remove(p, ec);
    WEFT_CHECK(!ec, "cannot remove stale {}: {}", p.string(), ec.message());
}

}  // namespace

HfWeights HfWeights::open(const fs::path& dir) {
    HfWeights w;
    w.dir_ = dir;
    const fs::path single = dir / kHfWeightsFile;
    const fs::path index = dir / kHfWeightsIndexFile;
    // transformers' from_pretrained takes model.safetensors when it exists and reads the index
    // only otherwise; doing the same means weft loads the weights transformers would from the
    // same directory.
    if (is_file(single)) {
        w.files_.push_back(SafetensorsFile::open(single));
        for (const TensorInfo& t : w.files_[0].tensors()) w.file_of_.emplace(t.name, 0);
    } else if (std::error_code ec; fs::exists(index, ec)) {
        w.open_index(index);
    } else {
        const bool bin = fs::exists(dir / "pytorch_model.bin") ||
                         fs::exists(dir / "pytorch_model.bin.index.json");
        fail("{} has neither {} nor {} (expected a Hugging Face model directory){}", dir.string(),
             kHfWeightsFile, kHfWeightsIndexFile,
             bin ? "; it holds pytorch_model.bin weights, which weft does not read: save them as "
                   "safetensors (save_pretrained(..., safe_serialization=True))"
                 : "");
    }
    for (const auto& entry : w.file_of_) w.names_.push_back(entry.first);
    return w;
}

void HfWeights::open_index(const fs::path& index) {
    const json doc = parse_index(index);
    WEFT_CHECK(doc.is_object(), "{} must hold a JSON object, got {}", index.string(),
               doc.type_name());
    if (auto meta = doc.find("metadata"); meta != doc.end())
        WEFT_CHECK(meta->is_object() || meta->is_null(),
                   "{}: \"metadata\" must be an object, got {}", index.string(), meta->dump());
    // metadata.total_size is not checked: writers disagree on what it counts (tied weights,
    // padding), and transformers ignores it too.
    auto map_it = doc.find("weight_map");
    WEFT_CHECK(map_it != doc.end() && map_it->is_object() && !map_it->empty(),
               "{}: expected \"weight_map\", an object mapping tensor names to shard files, got {}",
               index.string(), map_it == doc.end() ? "nothing" : map_it->dump());

    std::map<std::string, std::string> shard_of;         // tensor -> shard file name
    std::map<std::string, std::string> first_tensor_of;  // shard file name -> a tensor it holds
    for (const auto& [tensor, shard] : map_it->items()) {
        WEFT_CHECK(shard.is_string() && is_plain_file_name(shard.get<std::string>()),
                   "{}: weight_map gives tensor '{}' the shard {}; expected the name of a file in "
                   "{}",
                   index.string(), tensor, shard.dump(), dir_.string());
        shard_of.emplace(tensor, shard.get<std::string>());
        first_tensor_of.emplace(shard.get<std::string>(), tensor);
    }

    std::map<std::string, size_t> position;  // shard file name -> position in files_
    for (const auto& [shard, tensor] : first_tensor_of) {
        const fs::path path = dir_ / shard;
        WEFT_CHECK(is_file(path),
                   "{} names shard {} (holding tensor '{}'), but {} does not exist (incomplete "
                   "download?)",
                   index.string(), shard, tensor, path.string());
        position.emplace(shard, files_.size());
        files_.push_back(SafetensorsFile::open(path));
    }

    for (const auto& [tensor, shard] : shard_of) {
        const SafetensorsFile& file = files_[position.at(shard)];
        WEFT_CHECK(file.find(tensor), "{} maps tensor '{}' to {}, but {} does not hold it",
                   index.string(), tensor, shard, file.path().string());
        file_of_.emplace(tensor, position.at(shard));
    }
    // A tensor the map does not place in this shard is either unlisted or also stored in the
    // shard the map names: either way the directory does not say which copy is the weight.
    for (const auto& [shard, pos] : position) {
        for (const TensorInfo& t : files_[pos].tensors()) {
            auto it = shard_of.find(t.name);
            WEFT_CHECK(it != shard_of.end(), "{} holds tensor '{}', which {} does not list",
                       files_[pos].path().string(), t.name, index.string());
            WEFT_CHECK(it->second == shard, "{} holds tensor '{}', but {} places it in {}",
                       files_[pos].path().string(), t.name, index.string(), it->second);
        }
    }
}

size_t HfWeights::file_index(std::string_view name) const {
    auto it = file_of_.find(name);
    WEFT_CHECK(it != file_of_.end(), "tensor '{}' not found in the weights of {} ({} tensors)",
               name, dir_.string(), file_of_.size());
    return it->second;
}

bool HfWeights::has(std::string_view name) const {
    return file_of_.find(name) != file_of_.end();
}

const TensorInfo& HfWeights::info(std::string_view name) const {
    return files_[file_index(name)].at(name);
}

const fs::path& HfWeights::file_of(std::string_view name) const {
    return files_[file_index(name)].path();
}

void HfWeights::read_f32(std::string_view name, std::span<const int64_t> expected_shape,
                         float* out) const {
    const SafetensorsFile& file = files_[file_index(name)];
    const TensorInfo& t = file.at(name);
    WEFT_CHECK(
        std::equal(t.shape.begin(), t.shape.end(), expected_shape.begin(), expected_shape.end()),
        "tensor '{}' in {} has shape {}, expected {}", name, file.path().string(),
        shape_text(t.shape), shape_text(expected_shape));
    file.read_f32(name, expected_shape, out);
}

void write_hf_weights(const fs::path& dir, std::span<const TensorToWrite> tensors,
                      uint64_t max_shard_bytes) {
    WEFT_CHECK(max_shard_bytes > 0, "cannot write weights to {}: max_shard_bytes is 0",
               dir.string());
    WEFT_CHECK(!tensors.empty(), "cannot write weights to {}: no tensors", dir.string());

    // Shards are cut before anything is written, so that a bad tensor leaves the directory as is.
    std::set<std::string_view> names;
    std::vector<std::vector<TensorToWrite>> shards(1);
    uint64_t shard_bytes = 0, total_bytes = 0;
    for (const TensorToWrite& t : tensors) {
        WEFT_CHECK(names.insert(t.name).second,
                   "cannot write weights to {}: tensor name '{}' appears twice", dir.string(),
                   t.name);
        uint64_t bytes = sizeof(float);
        for (int64_t d : t.shape)
            WEFT_CHECK(d >= 0 && !__builtin_mul_overflow(bytes, uint64_t(d), &bytes),
                       "cannot write tensor '{}' to {}: bad shape {}", t.name, dir.string(),
                       shape_text(t.shape));
        if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shards.back().push_back(t);
        shard_bytes += bytes;
        total_bytes += bytes;
    }

    // transformers refuses a safetensors file whose metadata "format" is not a framework it knows.
    const std::map<std::string, std::string> metadata = {{"format", "pt"}};
    std::set<std::string> written;
    if (shards.size() == 1) {
        write_safetensors(dir / kHfWeightsFile, tensors, metadata);
        written.insert(std::string(kHfWeightsFile));
    } else {
        json weight_map = json::object();
        for (size_t i = 0; i < shards.size(); ++i) {
            const std::string name =
                fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
            write_safetensors(dir / name, shards[i], metadata);
            for (const TensorToWrite& t : shards[i]) weight_map[t.name] = name;
            written.insert(name);
        }
        // As save_pretrained writes it: sorted keys (json's std::map), indent 2.
        const json index = {{"metadata", {{"total_size", total_bytes}}},
                            {"weight_map", std::move(weight_map)}};
        write_file_atomic(dir / kHfWeightsIndexFile, index.dump(2) + "\n");
        written.insert(std::string(kHfWeightsIndexFile));
    }

    std::vector<fs::path> stale;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        const bool ours =
            name == kHfWeightsFile || name == kHfWeightsIndexFile || is_shard_name(name);
        if (ours && !written.contains(name)) stale.push_back(entry.path());
    }
    for (const fs::path& p : stale) remove_file(p);
    if (!stale.empty()) fsync_path(dir);
}

}  // namespace weft::ckpt
