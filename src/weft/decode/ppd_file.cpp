#include "weft/decode/ppd_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/manifest.hpp"
#include "weft/ckpt/shard_writer.hpp"
#include "weft/core/error.hpp"

namespace weft::decode {

namespace fs = std::filesystem;

namespace {

// `k` rows (a prompt's depth each) of rates in [0, 1], best rank first.
Acceptance read_acceptance(const fs::path& file, int64_t k) {
    std::ifstream in(file);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    const char* expected = "expected {\"acceptance\": [[rate, ...] a prompt]} with rates in [0, 1]";
    WEFT_CHECK(!j.is_discarded() && j.is_object() && j.contains("acceptance") &&
                   j["acceptance"].is_array(),
               "{} is not JSON of acceptance rates ({})", file.string(), expected);
    const nlohmann::json& rows = j["acceptance"];
    WEFT_CHECK(int64_t(rows.size()) == k, "{} has rates for {} prompts, the checkpoint has {}",
               file.string(), rows.size(), k);
    Acceptance acc;
    for (const nlohmann::json& row : rows) {
        WEFT_CHECK(row.is_array(), "{}: {} is not a list of rates ({})", file.string(), row.dump(),
                   expected);
        acc.emplace_back();
        for (const nlohmann::json& r : row) {
            WEFT_CHECK(r.is_number() && r.get<double>() >= 0 && r.get<double>() <= 1,
                       "{}: rate {} is not a number in [0, 1]", file.string(), r.dump());
            acc.back().push_back(r.get<double>());
        }
    }
    return acc;
}

}  // namespace

void save_ppd(const fs::path& run_dir, int64_t step, const PpdPrompts& p, const nlohmann::json& run,
              int shards) {
    const int64_t n = int64_t(p.embeddings.size());
    WEFT_CHECK(n == p.tokens * p.base.n_embd && shards >= 1 && shards <= std::max<int64_t>(n, 1),
               "internal: {} prompt floats of {} tokens in {} shards", n, p.tokens, shards);
    ckpt::Manifest m;
    m.step = step;
    m.layout = "ppd";
    m.model = p.base.to_json();
    m.run = run;
    m.run["ppd_tokens"] = p.tokens;
    m.tensors = nlohmann::json::array(
        {{{"name", kPpdTensor}, {"shape", {p.tokens, p.base.n_embd}}, {"tp_dim", -1}}});
    fs::create_directories(run_dir / "checkpoints");
    ckpt::write_dir_atomic(ckpt::checkpoint_path(run_dir, step), [&](const fs::path& tmp) {
        for (int s = 0; s < shards; ++s) {
            const int64_t begin = n * s / shards, end = n * (s + 1) / shards;
            ckpt::ShardWriter w;
            w.start(tmp / ckpt::shard_file_name(s),
                    std::span<const float>(p.embeddings.data() + begin, size_t(end - begin)),
                    false);
            const ckpt::FileDigest d = w.wait();
            m.shards.push_back({ckpt::shard_file_name(s),
                                s,
                                0,
                                1,
                                d.bytes,
                                d.digest,
                                {{"param", kPpdTensor, begin, end}}});
        }
        ckpt::write_manifest(tmp, m);
    });
    ckpt::commit_latest(run_dir, step);
}

PpdPrompts load_ppd(const fs::path& dir_or_run) {
    const fs::path dir = ckpt::resolve_checkpoint(dir_or_run);
    const ckpt::Manifest m = ckpt::read_manifest(dir);
    const fs::path where = dir / ckpt::kManifestFile;
    const bool ppd = m.tensors.size() == 1 && m.tensors[0].value("name", "") == kPpdTensor;
    WEFT_CHECK(ppd,
               "{} is not a Parallel Prompt Decoding checkpoint (expected the one tensor {}, from "
               "`weft train --ppd-tokens`)",
               dir.string(), kPpdTensor);
    if (auto bad = ckpt::check_shards(dir, m)) WEFT_CHECK(false, "{}: {}", dir.string(), *bad);
    PpdPrompts p;
    p.base = model::ModelConfig::from_json(m.model, where.string());
    const nlohmann::json& shape = m.tensors[0]["shape"];
    WEFT_CHECK(shape.size() == 2 && shape[1].get<int64_t>() == p.base.n_embd,
               "{}: {} has shape {}, expected [tokens, {}] (the model's width)", where.string(),
               kPpdTensor, shape.dump(), p.base.n_embd);
    p.tokens = shape[0].get<int64_t>();
    p.embeddings.assign(size_t(p.tokens * p.base.n_embd), 0.0f);
    // Which elements the shards cover, to find a gap: a tensor read in part would guess from
    // zeros without a word.
    std::vector<char> covered(p.embeddings.size(), 0);
    for (const ckpt::ShardEntry& s : m.shards) {
        std::ifstream in(dir / s.file, std::ios::binary);
        for (const ckpt::ShardRange& r : s.ranges) {
            WEFT_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= int64_t(covered.size()),
                       "{}: shard {} holds elements {}..{} of {}, which has {}", where.string(),
                       s.file, r.begin, r.end, kPpdTensor, covered.size());
            std::vector<float> skip;
            float* to = r.state == "param" ? p.embeddings.data() + r.begin
                                           : (skip.resize(size_t(r.floats())), skip.data());
            in.read(reinterpret_cast<char*>(to), std::streamsize(4 * r.floats()));
            WEFT_CHECK(in.good(), "{}: could not read {} floats of {}", (dir / s.file).string(),
                       r.floats(), s.file);
            if (r.state == "param") std::fill_n(covered.begin() + r.begin, r.floats(), 1);
        }
    }
    const auto gap = std::find(covered.begin(), covered.end(), 0);
    WEFT_CHECK(gap == covered.end(), "{}: no shard holds element {} of {}", where.string(),
               gap - covered.begin(), kPpdTensor);
    const fs::path rates = dir / kPpdAcceptanceFile;
    if (fs::exists(rates)) p.acceptance = read_acceptance(rates, p.tokens);
    return p;
}

fs::path save_ppd_acceptance(const fs::path& dir_or_run, const Acceptance& acc,
                             const nlohmann::json& about) {
    const fs::path file = ckpt::resolve_checkpoint(dir_or_run) / kPpdAcceptanceFile;
    nlohmann::json j = about;
    j["acceptance"] = acc;
    ckpt::write_file_atomic(file, j.dump(1) + "\n");
    return file;
}

void check_ppd_base(const PpdPrompts& p, const model::ModelConfig& cfg, const fs::path& file) {
    const nlohmann::json want = p.base.to_json(), have = cfg.to_json();
    for (const auto& [key, value] : want.items())
        WEFT_CHECK(have.contains(key) && have[key] == value,
                   "--ppd {}: its prompt tokens were trained for another model ({} {}, the model "
                   "has {}); train them on this one with `weft train --ppd-tokens K --base ...`",
                   file.string(), key, value.dump(),
                   have.contains(key) ? have[key].dump() : "none");
}

}  // namespace weft::decode
