#pragma once
// `weft run --elastic`: after a fault that names lost ranks, the next attempt runs on the ranks
// that are left. The layout keeps the model-parallel degrees (tp, pp, cp) and the micro-batch of
// the last committed checkpoint and lowers dp, so the global batch is kept by raising gradient
// accumulation (docs/supervisor.md). The new layout reaches the command by rewriting the
// launcher's rank count and appending --dp and --micro-batch-size (the last flag given wins).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace weft::supervise {

// Where the launcher's rank count is in a command's words: `-np N`, `-n N`, `--np N`, `--n N`
// or `--np=N` / `-np=N` / `-n=N`, among the words before the weft program.
struct RankCount {
    size_t word = 0;     // the word holding the number
    std::string prefix;  // what precedes the number in that word ("" or "--np=")
    int ranks = 0;
};

// The launcher's rank count of `argv`, or nullopt when it has none (e.g. `weft train` run
// directly). Throws weft::Error for a count that is not a whole number >= 1.
std::optional<RankCount> find_rank_count(const std::vector<std::string>& argv);

// `argv` with its rank count (as found by find_rank_count) set to `ranks`.
std::vector<std::string> with_rank_count(std::vector<std::string> argv, const RankCount& count,
                                         int ranks);

// The layout and batch settings a committed checkpoint was trained with.
struct SavedLayout {
    int64_t step = 0;
    int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
    int64_t batch_size = 0, micro_batch_size = 0;
    int world() const { return dp * tp * pp * cp; }
};

// From a manifest's layout ("dp=4 tp=1 pp=1 cp=1 ep=1 zero=0 ...", Layout::describe) and run
// settings (batch_size, micro_batch_size); errors name `where` and the bad value.
SavedLayout parse_saved_layout(const std::string& layout, const nlohmann::json& run,
                               const std::string& where);

// That of the checkpoint RUN/checkpoints/latest names, or nullopt when none is committed.
std::optional<SavedLayout> read_saved_layout(const std::filesystem::path& run_dir);

struct ElasticPlan {
    int old_world = 0;   // ranks of the failed attempt
    int ranks_left = 0;  // those the fault did not name
    int new_world = 0;   // dp' x tp x pp x cp: ranks of the next attempt
    int old_dp = 0, new_dp = 0;
    int64_t micro_batch_size = 0;
    int64_t old_accumulation = 0, new_accumulation = 0;
    std::string refused;  // why no layout fits, or "" when the plan holds

    nlohmann::json to_json() const;
    // "world 4 -> 2 (3 ranks left), dp 4 -> 2, gradient accumulation 1 -> 2"
    std::string describe() const;
};

// The layout of the next attempt: world `world` minus the `lost` ranks (those outside
// [0, world) and repeats ignored), the largest dp' with dp' x tp x pp x cp <= ranks left,
// --batch-size divisible by dp' x micro-batch size and ep dividing dp'. `refused` says why none
// fits, or that it would run on fewer than `min_ranks` ranks.
ElasticPlan plan_elastic(const SavedLayout& saved, int world, const std::vector<int>& lost,
                         int min_ranks);

// The words appended to the command for a plan: --dp dp' --micro-batch-size m.
std::vector<std::string> elastic_flags(const ElasticPlan& plan);

}  // namespace weft::supervise
