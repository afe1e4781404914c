// Reading tokenizer.json (and tokenizer_config.json beside it) into HfTokenizer::Impl. Every
// field that would change the ids is either understood or refused; fields that only matter to
// training, offsets or post-processing (post_processor, trim_offsets, truncation) are ignored.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "weft/core/error.hpp"
#include "weft/data/hf_tokenizer.hpp"
#include "weft/data/hf_tokenizer_impl.hpp"
#include "weft/data/io.hpp"

namespace weft::data {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The pattern strings exactly as the models' tokenizer.json files spell them.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Ids index a table, so a corrupt id must not become a 2^31-entry allocation.
constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

// A JSON value for an error message, cut short.
std::string show(const json& j) {
    std::string s = j.dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

bool get_bool(const json& obj, const char* key, bool fallback, const fs::path& path,
              std::string_view where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    WEFT_CHECK(it->is_boolean(), "{}: {}.{} is {}, expected true or false", path.string(), where,
               key, show(*it));
    return it->get<bool>();
}

std::string get_type(const json& obj, const fs::path& path, std::string_view where) {
    WEFT_CHECK(obj.is_object() && obj.contains("type") && obj["type"].is_string(),
               "{}: {} is {}, expected an object with a \"type\"", path.string(), where, show(obj));
    return obj["type"].get<std::string>();
}

// A field that must be absent, null or `allowed` for the ids to come out as weft computes them.
void require(const json& obj, const char* key, const json& allowed, const fs::path& path,
             std::string_view where, std::string_view why) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null() || *it == allowed) return;
    fail("{}: {}.{} is {}, which weft does not support ({}); expected null or {}", path.string(),
         where, key, show(*it), why, show(allowed));
}

int32_t token_id(const json& value, std::string_view token, const fs::path& path) {
    WEFT_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 &&
                   value.get<int64_t>() <= kMaxTokenId,
               "{}: token '{}' has id {}, expected an integer in 0..{}", path.string(), token,
               show(value), kMaxTokenId);
    return static_cast<int32_t>(value.get<int64_t>());
}

void set_token(HfTokenizer::Impl& impl, int32_t id, std::string bytes) {
    if (static_cast<size_t>(id) >= impl.tokens.size()) {
        impl.tokens.resize(id + 1);
        impl.has_token.resize(id + 1);
    }
    impl.tokens[id] = std::move(bytes);
    impl.has_token[id] = true;
}

// model: vocab -> tokens, merges -> impl.bpe. Returns spelled token -> id for the caller's
// lookups of names (eos_token).
std::unordered_map<std::string, int32_t> read_model(const json& root, const fs::path& path,
                                                    HfTokenizer::Impl& impl) {
    WEFT_CHECK(root.contains("model"), "{}: no \"model\"", path.string());
    const json& model = root["model"];
    WEFT_CHECK(model.is_object(), "{}: \"model\" is {}, expected an object", path.string(),
               show(model));
    if (model.contains("type") || !model.contains("merges")) {
        std::string type = get_type(model, path, "model");
        WEFT_CHECK(type == "BPE",
                   "{}: model type '{}' is not supported; weft reads byte-level BPE tokenizers "
                   "(model type \"BPE\")",
                   path.string(), type);
    }
    require(model, "dropout", 0, path, "model", "BPE dropout is for training");
    require(model, "continuing_subword_prefix", "", path, "model", "not byte-level BPE");
    require(model, "end_of_word_suffix", "", path, "model", "not byte-level BPE");
    require(model, "byte_fallback", false, path, "model", "not byte-level BPE");
    impl.ignore_merges = get_bool(model, "ignore_merges", false, path, "model");

    const json& vocab = model.contains("vocab") ? model["vocab"] : json();
    WEFT_CHECK(vocab.is_object() && !vocab.empty(),
               "{}: model.vocab is {}, expected an object of token -> id", path.string(),
               show(vocab));
    std::unordered_map<std::string, int32_t> spelled_ids;
    std::unordered_map<std::string, int32_t> byte_ids;
    spelled_ids.reserve(vocab.size());
    byte_ids.reserve(vocab.size());
    for (const auto& [spelled, value] : vocab.items()) {
        int32_t id = token_id(value, spelled, path);
        WEFT_CHECK(static_cast<size_t>(id) >= impl.has_token.size() || !impl.has_token[id],
                   "{}: token '{}' has id {}, which another token of model.vocab has too",
                   path.string(), spelled, id);
        spelled_ids.emplace(spelled, id);
        // Hugging Face's ByteLevel decoder gives a token outside the alphabet as its own UTF-8.
        std::optional<std::string> bytes = byte_level_unspell(spelled);
        if (bytes) byte_ids.emplace(*bytes, id);
        set_token(impl, id, bytes ? *std::move(bytes) : spelled);
    }
    for (int b = 0; b < 256; ++b) {
        auto it = byte_ids.find(std::string(1, static_cast<char>(b)));
        WEFT_CHECK(it != byte_ids.end(),
                   "{}: model.vocab has no token for byte 0x{:02X}; byte-level BPE needs all 256",
                   path.string(), b);
        impl.bpe.set_byte_token(static_cast<uint8_t>(b), it->second);
    }
    if (impl.ignore_merges) impl.model_ids.insert(byte_ids.begin(), byte_ids.end());

    const json& merges = model.contains("merges") ? model["merges"] : json();
    WEFT_CHECK(merges.is_array(), "{}: model.merges is {}, expected an array", path.string(),
               show(merges));
    auto id_of = [&](const std::string& spelled, size_t rank, const json& merge) {
        auto it = spelled_ids.find(spelled);
        WEFT_CHECK(it != spelled_ids.end(),
                   "{}: merge {} ({}) needs token '{}', which is not in model.vocab", path.string(),
                   rank, show(merge), spelled);
        return it->second;
    };
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const json& m = merges[rank];
        std::string left, right;
        if (m.is_string()) {  // "left right", the older form
            const std::string& s = m.get_ref<const std::string&>();
            size_t space = s.find(' ');
            WEFT_CHECK(space != 0 && space != std::string::npos && space + 1 < s.size() &&
                           s.find(' ', space + 1) == std::string::npos,
                       "{}: merge {} is {}, expected \"left right\"", path.string(), rank, show(m));
            left = s.substr(0, space);
            right = s.substr(space + 1);
        } else {
            WEFT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                       "{}: merge {} is {}, expected \"left right\" or [\"left\", \"right\"]",
                       path.string(), rank, show(m));
            left = m[0].get<std::string>();
            right = m[1].get<std::string>();
        }
        int32_t a = id_of(left, rank, m), b = id_of(right, rank, m);
        int32_t result = id_of(left + right, rank, m);
        WEFT_CHECK(impl.bpe.add_merge(a, b, result), "{}: merge {} ({}) appears twice",
                   path.string(), rank, show(m));
    }
    return spelled_ids;
}

// Hugging Face's tokenizers does not take an added token's id from the file: it gives the token
// its id in model.vocab, or else the next id after the vocabulary's and the added tokens' before
// it (AddedVocabulary::add_tokens), and only warns when that differs. Real files agree with that
// rule; one that does not is refused, since which ids its model was trained with is unknowable.
void read_added_tokens(const json& root, const fs::path& path,
                       const std::unordered_map<std::string, int32_t>& spelled_ids,
                       HfTokenizer::Impl& impl) {
    if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
    const json& added = root["added_tokens"];
    WEFT_CHECK(added.is_array(), "{}: added_tokens is {}, expected an array", path.string(),
               show(added));
    const auto vocab_count = static_cast<int32_t>(spelled_ids.size());
    std::unordered_map<std::string, int32_t> added_ids;
    int32_t max_added = -1;
    for (const json& t : added) {
        WEFT_CHECK(t.is_object() && t.contains("content") && t["content"].is_string() &&
                       !t["content"].get_ref<const std::string&>().empty() && t.contains("id"),
                   "{}: added token {} has no content or id", path.string(), show(t));
        const std::string& content = t["content"].get_ref<const std::string&>();
        const int32_t id = token_id(t["id"], content, path);
        int32_t expected = max_added >= vocab_count ? max_added + 1 : vocab_count;
        if (auto it = added_ids.find(content); it != added_ids.end()) {
            expected = it->second;
        } else if (auto v = spelled_ids.find(content); v != spelled_ids.end()) {
            expected = v->second;
        }
        WEFT_CHECK(id == expected,
                   "{}: added token '{}' has id {}, but Hugging Face's tokenizers gives it id {} "
                   "(its id in model.vocab, else the next after model.vocab's {} tokens and the "
                   "added tokens before it); expected the two to agree",
                   path.string(), content, id, expected, vocab_count);
        added_ids[content] = id;
        max_added = std::max(max_added, id);
        // These change where a token matches; no byte-level model of weft's sets them.
        for (const char* key : {"single_word", "lstrip", "rstrip"})
            WEFT_CHECK(!get_bool(t, key, false, path, "added token"),
                       "{}: added token '{}' sets {}, which weft does not support", path.string(),
                       content, key);
        set_token(impl, id, content);
        impl.added_by_first_byte[static_cast<unsigned char>(content[0])].push_back({content, id});
    }
    for (auto& list : impl.added_by_first_byte)
        std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
            return a.content.size() > b.content.size();
        });
}

void read_normalizer(const json& n, const fs::path& path, HfTokenizer::Impl& impl) {
    if (n.is_null()) return;
    std::string type = get_type(n, path, "normalizer");
    if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
        for (const json& m : n["normalizers"]) read_normalizer(m, path, impl);
        return;
    }
    WEFT_CHECK(type == "NFC", "{}: normalizer '{}' is not supported, expected null or \"NFC\"",
               path.string(), type);
    impl.nfc = true;
}

void read_pre_tokenizer(const json& p, const fs::path& path, HfTokenizer::Impl& impl) {
    const std::string type = get_type(p, path, "pre_tokenizer");
    const char* where = "pre_tokenizer";
    HfPreTokenizer step;
    if (type == "Sequence") {
        WEFT_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(),
                   "{}: pre_tokenizer Sequence has no \"pretokenizers\" array", path.string());
        for (const json& member : p["pretokenizers"]) read_pre_tokenizer(member, path, impl);
        return;
    } else if (type == "ByteLevel") {
        // Hugging Face's defaults for a field left out.
        step.add_prefix_space = get_bool(p, "add_prefix_space", true, path, where);
        step.use_regex = get_bool(p, "use_regex", true, path, where);
    } else if (type == "Digits") {
        step.kind = HfPreTokenizer::Kind::kDigits;
        step.individual_digits = get_bool(p, "individual_digits", false, path, where);
    } else if (type == "Split") {
        step.kind = HfPreTokenizer::Kind::kSplit;
        const json pattern = p.value("pattern", json());
        WEFT_CHECK(pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(),
                   "{}: Split pattern {} is not supported, expected {{\"Regex\": ...}} with "
                   "GPT-2's, Llama 3's or Qwen2's pre-tokenizer regex",
                   path.string(), show(pattern));
        const std::string& regex = pattern["Regex"].get_ref<const std::string&>();
        if (regex == kGpt2Regex) {
            step.regex = HfSplitRegex::kGpt2;
        } else if (regex == kLlama3Regex) {
            step.regex = HfSplitRegex::kLlama3;
        } else if (regex == kQwen2Regex) {
            step.regex = HfSplitRegex::kQwen2;
        } else {
            fail(
                "{}: Split regex '{}' is not supported; weft matches GPT-2's, Llama 3's and "
                "Qwen2's pre-tokenizer regexes only",
                path.string(), regex);
        }
        WEFT_CHECK(
            p.value("behavior", json()) == "Isolated" && !get_bool(p, "invert", false, path, where),
            "{}: Split behavior {} with invert {} is not supported, expected \"Isolated\" "
            "and false",
            path.string(), show(p.value("behavior", json())), show(p.value("invert", json())));
    } else {
        fail(
            "{}: pre_tokenizer '{}' is not supported; weft reads byte-level BPE tokenizers "
            "(ByteLevel, Split, Digits, Sequence)",
            path.string(), type);
    }
    WEFT_CHECK(impl.pre_tokenizers.empty() ||
                   impl.pre_tokenizers.back().kind != HfPreTokenizer::Kind::kByteLevel,
               "{}: pre_tokenizer {} comes after ByteLevel, expected ByteLevel last", path.string(),
               type);
    impl.pre_tokenizers.push_back(step);
}

int32_t find_eot(const fs::path& path, const json& root,
                 const std::unordered_map<std::string, int32_t>& spelled_ids) {
    auto added_id = [&](std::string_view name) -> int32_t {
        for (const json& t : root.value("added_tokens", json::array()))
            if (t["content"] == std::string(name)) return t["id"].get<int32_t>();
        return -1;
    };
    const fs::path config = path.parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (fs::exists(config, ec)) {
        if (std::string eos =
                configured_token(parse_json(config, "tokenizer config"), "eos_token", config);
            !eos.empty()) {
            int32_t id = added_id(eos);
            if (auto it = spelled_ids.find(eos); id < 0 && it != spelled_ids.end()) id = it->second;
            WEFT_CHECK(id >= 0, "{}: eos_token '{}' is not a token of {}", config.string(), eos,
                       path.string());
            return id;
        }
    }
    for (std::string_view name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
        if (int32_t id = added_id(name); id >= 0) return id;
    fail(
        "{}: no end-of-text token: no eos_token in a tokenizer_config.json beside it, and no "
        "added token '<|endoftext|>', '<|end_of_text|>' or '</s>'",
        path.string());
}

}  // namespace

HfTokenizer HfTokenizer::load(const fs::path& path) {
    const json root = parse_json(path, "tokenizer.json");
    auto impl = std::make_unique<Impl>();
    try {
        WEFT_CHECK(root.is_object(), "{}: expected a JSON object, found {}", path.string(),
                   show(root));
        std::unordered_map<std::string, int32_t> spelled_ids = read_model(root, path, *impl);
        read_added_tokens(root, path, spelled_ids, *impl);
        read_normalizer(root.value("normalizer", json()), path, *impl);

        const json pre = root.value("pre_tokenizer", json());
        WEFT_CHECK(!pre.is_null(),
                   "{}: pre_tokenizer is null; weft reads byte-level BPE tokenizers, whose "
                   "pre_tokenizer ends in ByteLevel",
                   path.string());
        read_pre_tokenizer(pre, path, *impl);
        WEFT_CHECK(impl->pre_tokenizers.back().kind == HfPreTokenizer::Kind::kByteLevel,
                   "{}: pre_tokenizer has no ByteLevel; weft reads byte-level BPE tokenizers",
                   path.string());

        const json decoder = root.value("decoder", json());
        WEFT_CHECK(decoder.is_object() && decoder.value("type", json()) == "ByteLevel",
                   "{}: decoder {} is not supported, expected {{\"type\": \"ByteLevel\"}}",
                   path.string(), show(decoder));
        impl->eot = find_eot(path, root, spelled_ids);
    } catch (const json::exception& e) {
        // A value of an unexpected JSON type that no check above caught.
        fail("{}: unexpected content: {}", path.string(), e.what());
    }
    return HfTokenizer(std::move(impl));
}

std::string configured_token(const json& config, const char* key, const fs::path& path) {
    json t = config.is_object() ? config.value(key, json()) : json();
    if (t.is_object()) t = t.value("content", json());
    if (t.is_null()) return "";
    WEFT_CHECK(t.is_string() && !t.get_ref<const std::string&>().empty(),
               "{}: {} is {}, expected a token's name", path.string(), key, show(t));
    return t.get<std::string>();
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& path) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return std::make_unique<HfTokenizer>(HfTokenizer::load(path));
    const fs::path file = path / "tokenizer.json";
    WEFT_CHECK(fs::is_regular_file(file, ec),
               "tokenizer directory '{}' has no tokenizer.json, expected a Hugging Face "
               "tokenizer.json in it",
               path.string());
    return std::make_unique<HfTokenizer>(HfTokenizer::load(file));
}

std::unique_ptr<Tokenizer> open_tokenizer(const fs::path& tokenizer, const fs::path& gpt2_dir) {
    if (!tokenizer.empty()) return load_tokenizer(tokenizer);
    return std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::load(gpt2_dir / "encoder.json", gpt2_dir / "vocab.bpe"));
}

}  // namespace weft::data
