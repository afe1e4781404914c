#include "weft/supervise/elastic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/manifest.hpp"
#include "weft/core/error.hpp"

namespace weft::supervise {

namespace fs = std::filesystem;

namespace {

// A whole number >= 1, or nullopt.
std::optional<int64_t> positive(const std::string& text) {
    if (text.empty() || text.size() > 12) return std::nullopt;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (*end != '\0' || v < 1) return std::nullopt;
    return v;
}

// The weft program's word: the launcher's own flags come before it, weft's after.
size_t program_word(const std::vector<std::string>& argv) {
    for (size_t i = 1; i < argv.size(); ++i)
        if (fs::path(argv[i]).filename() == "weft") return i;
    return argv.size();
}

}  // namespace

std::optional<RankCount> find_rank_count(const std::vector<std::string>& argv) {
    if (argv.empty() || fs::path(argv[0]).filename() == "weft") return std::nullopt;
    const size_t stop = program_word(argv);
    std::optional<RankCount> found;
    for (size_t i = 1; i < stop; ++i) {
        RankCount c;
        std::string value;
        const std::string& w = argv[i];
        if (w == "-np" || w == "-n" || w == "--np" || w == "--n") {
            WEFT_CHECK(i + 1 < stop, "the supervised command's {} has no rank count after it", w);
            c.word = ++i;
            value = argv[i];
        } else {
            bool joined = false;
            for (const char* flag : {"-np=", "-n=", "--np=", "--n="}) {
                if (w.rfind(flag, 0) != 0) continue;
                c.word = i;
                c.prefix = flag;
                value = w.substr(c.prefix.size());
                joined = true;
                break;
            }
            if (!joined) continue;
        }
        const std::optional<int64_t> n = positive(value);
        WEFT_CHECK(n && *n <= (1 << 24),
                   "the supervised command's rank count '{}' is not a whole number >= 1", value);
        c.ranks = int(*n);
        found = c;  // the last one given, as the launcher reads it
    }
    return found;
}

std::vector<std::string> with_rank_count(std::vector<std::string> argv, const RankCount& count,
                                         int ranks) {
    argv.at(count.word) = count.prefix + std::to_string(ranks);
    return argv;
}

SavedLayout parse_saved_layout(const std::string& layout, const nlohmann::json& run,
                               const std::string& where) {
    SavedLayout s;
    std::set<std::string> seen;
    size_t at = 0;
    while (at < layout.size()) {
        size_t end = layout.find(' ', at);
        if (end == std::string::npos) end = layout.size();
        const std::string word = layout.substr(at, end - at);
        at = end + 1;
        const size_t eq = word.find('=');
        if (eq == std::string::npos) continue;  // "sp", "recompute": no degree
        const std::string key = word.substr(0, eq);
        int* degree = key == "dp"   ? &s.dp
                      : key == "tp" ? &s.tp
                      : key == "pp" ? &s.pp
                      : key == "cp" ? &s.cp
                      : key == "ep" ? &s.ep
                                    : nullptr;
        if (!degree) continue;
        const std::optional<int64_t> v = positive(word.substr(eq + 1));
        WEFT_CHECK(v && *v <= (1 << 24), "{}: layout '{}' has {}, expected a whole number >= 1",
                   where, layout, word);
        *degree = int(*v);
        seen.insert(key);
    }
    for (const char* key : {"dp", "tp", "pp", "cp"})
        WEFT_CHECK(seen.count(key), "{}: layout '{}' does not say {}=<degree>", where, layout, key);
    auto setting = [&](const char* key) {
        WEFT_CHECK(
            run.contains(key) && run[key].is_number_integer() && run[key].get<int64_t>() >= 1,
            "{}: the run settings have no {} (a whole number >= 1); got {}", where, key,
            run.contains(key) ? run[key].dump() : "none");
        return run[key].get<int64_t>();
    };
    s.batch_size = setting("batch_size");
    s.micro_batch_size = setting("micro_batch_size");
    return s;
}

std::optional<SavedLayout> read_saved_layout(const fs::path& run_dir) {
    const std::optional<fs::path> latest = ckpt::find_latest(run_dir);
    if (!latest) return std::nullopt;
    const ckpt::Manifest m = ckpt::read_manifest(*latest);
    SavedLayout s = parse_saved_layout(m.layout, m.run, (*latest / ckpt::kManifestFile).string());
    s.step = m.step;
    return s;
}

nlohmann::json ElasticPlan::to_json() const {
    return {{"old_world", old_world},
            {"ranks_left", ranks_left},
            {"new_world", new_world},
            {"old_dp", old_dp},
            {"new_dp", new_dp},
            {"micro_batch_size", micro_batch_size},
            {"old_accumulation", old_accumulation},
            {"new_accumulation", new_accumulation},
            {"refused", refused}};
}

std::string ElasticPlan::describe() const {
    return fmt::format(
        "world {} -> {} ({} rank(s) left), dp {} -> {}, gradient accumulation {} "
        "-> {}",
        old_world, new_world, ranks_left, old_dp, new_dp, old_accumulation, new_accumulation);
}

ElasticPlan plan_elastic(const SavedLayout& saved, int world, const std::vector<int>& lost,
                         int min_ranks) {
    ElasticPlan p;
    p.old_world = world;
    p.old_dp = saved.dp;
    p.micro_batch_size = saved.micro_batch_size;
    p.old_accumulation = saved.batch_size / (saved.micro_batch_size * saved.dp);
    std::set<int> gone;
    for (int r : lost)
        if (r >= 0 && r < world) gone.insert(r);
    p.ranks_left = world - int(gone.size());
    const int model_parallel = saved.tp * saved.pp * saved.cp;
    for (int dp = p.ranks_left / model_parallel; dp >= 1; --dp) {
        if (saved.batch_size % (int64_t(dp) * saved.micro_batch_size) != 0) continue;
        if ((dp * saved.cp) % saved.ep != 0) continue;  // ep folds over cp x dp
        p.new_dp = dp;
        break;
    }
    if (p.new_dp == 0) {
        if (p.ranks_left < model_parallel)
            p.refused = fmt::format(
                "{} rank(s) left, fewer than the model-parallel degrees need (tp {} x pp {} x cp "
                "{} = {})",
                p.ranks_left, saved.tp, saved.pp, saved.cp, model_parallel);
        else
            p.refused = fmt::format(
                "no dp' <= {} divides --batch-size {} into micro-batches of {} with ep {} "
                "dividing dp'",
                p.ranks_left / model_parallel, saved.batch_size, saved.micro_batch_size, saved.ep);
        return p;
    }
    p.new_world = p.new_dp * model_parallel;
    p.new_accumulation = saved.batch_size / (saved.micro_batch_size * p.new_dp);
    if (p.new_world < min_ranks)
        p.refused =
            fmt::format("the re-planned layout runs on {} rank(s), fewer than --min-ranks {}",
                        p.new_world, min_ranks);
    return p;
}

std::vector<std::string> elastic_flags(const ElasticPlan& plan) {
    return {"--dp", std::to_string(plan.new_dp), "--micro-batch-size",
            std::to_string(plan.micro_batch_size)};
}

}  // namespace weft::supervise
