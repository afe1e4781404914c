// --elastic's re-planning and argv rewriting (supervise/elastic.hpp), without a job.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/supervise/elastic.hpp"

namespace fs = std::filesystem;
using namespace weft::supervise;
using Words = std::vector<std::string>;

namespace {

SavedLayout saved(int dp, int tp, int pp, int cp, int ep, int64_t batch, int64_t micro) {
    SavedLayout s;
    s.dp = dp, s.tp = tp, s.pp = pp, s.cp = cp, s.ep = ep;
    s.batch_size = batch, s.micro_batch_size = micro;
    return s;
}

// The answer by its definition, counted independently: the largest dp with dp x mp <= left,
// batch % (dp x micro) == 0 and dp % ep == 0, or 0.
int brute_dp(const SavedLayout& s, int left) {
    int best = 0;
    for (int dp = 1; dp * s.tp * s.pp * s.cp <= left; ++dp)
        if (s.batch_size % (dp * s.micro_batch_size) == 0 && dp % s.ep == 0) best = dp;
    return best;
}

}  // namespace

TEST(Elastic, FindsTheLaunchersRankCount) {
    for (const Words& argv : {Words{"mpirun", "-np", "4", "weft", "train", "--out", "r"},
                              Words{"mpirun", "-n", "4", "/x/weft", "train"},
                              Words{"mpiexec", "--np", "4", "weft", "train"},
                              Words{"mpirun", "--np=4", "weft", "train"}}) {
        const auto c = find_rank_count(argv);
        ASSERT_TRUE(c);
        EXPECT_EQ(c->ranks, 4);
        const Words out = with_rank_count(argv, *c, 2);
        EXPECT_NE(out, argv);
        const auto again = find_rank_count(out);
        ASSERT_TRUE(again);
        EXPECT_EQ(again->ranks, 2);
        EXPECT_EQ(out.size(), argv.size());
    }
    // -n after the weft program is weft's business, not the launcher's.
    EXPECT_FALSE(find_rank_count({"mpirun", "weft", "train", "-n", "3"}));
    EXPECT_FALSE(find_rank_count({"weft", "train", "--out", "r"}));
    EXPECT_FALSE(find_rank_count({"/b/weft", "train", "-n", "2"}));
    EXPECT_EQ(with_rank_count({"mpirun", "--np=4", "weft"},
                              *find_rank_count({"mpirun", "--np=4", "weft"}), 3),
              (Words{"mpirun", "--np=3", "weft"}));
    EXPECT_THROW(find_rank_count({"mpirun", "-np", "four", "weft"}), weft::Error);
    EXPECT_THROW(find_rank_count({"mpirun", "-np", "0", "weft"}), weft::Error);
    EXPECT_THROW(find_rank_count({"mpirun", "-np"}), weft::Error);
}

TEST(Elastic, ParsesTheSavedLayout) {
    const nlohmann::json run = {{"batch_size", 8}, {"micro_batch_size", 2}};
    const SavedLayout s =
        parse_saved_layout("dp=4 tp=2 pp=3 cp=1 ep=2 zero=1 sp 1f1b recompute", run, "m");
    EXPECT_EQ(s.dp, 4);
    EXPECT_EQ(s.tp, 2);
    EXPECT_EQ(s.pp, 3);
    EXPECT_EQ(s.cp, 1);
    EXPECT_EQ(s.ep, 2);
    EXPECT_EQ(s.batch_size, 8);
    EXPECT_EQ(s.micro_batch_size, 2);
    EXPECT_EQ(s.world(), 24);
    EXPECT_THROW(parse_saved_layout("tp=1 pp=1 cp=1", run, "m"), weft::Error);
    EXPECT_THROW(parse_saved_layout("dp=x tp=1 pp=1 cp=1", run, "m"), weft::Error);
    EXPECT_THROW(parse_saved_layout("dp=1 tp=1 pp=1 cp=1", {{"batch_size", 8}}, "m"), weft::Error);
}

TEST(Elastic, ReadsNoLayoutWithoutACommittedCheckpoint) {
    const fs::path dir = fs::temp_directory_path() / ("weft_elastic_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "checkpoints");
    EXPECT_FALSE(read_saved_layout(dir));
    fs::remove_all(dir);
}

TEST(Elastic, TheBriefsCase) {
    // dp 4, batch 8 (micro 2), one rank lost: 8 does not split over 3, so dp 2, accumulation 2.
    const ElasticPlan p = plan_elastic(saved(4, 1, 1, 1, 1, 8, 2), 4, {1}, 0);
    EXPECT_EQ(p.refused, "");
    EXPECT_EQ(p.ranks_left, 3);
    EXPECT_EQ(p.new_dp, 2);
    EXPECT_EQ(p.new_world, 2);
    EXPECT_EQ(p.old_accumulation, 1);
    EXPECT_EQ(p.new_accumulation, 2);
    EXPECT_EQ(p.describe(),
              "world 4 -> 2 (3 rank(s) left), dp 4 -> 2, gradient accumulation 1 -> 2");
    EXPECT_EQ(elastic_flags(p), (Words{"--dp", "2", "--micro-batch-size", "2"}));
}

TEST(Elastic, KeepsModelParallelismAndMatchesTheDefinition) {
    for (int tp : {1, 2})
        for (int pp : {1, 2})
            for (int ep : {1, 2})
                for (int64_t batch : {6, 8, 12})
                    for (int64_t micro : {1, 2})
                        for (int lost = 0; lost <= 6; ++lost) {
                            const int dp = 4, world = dp * tp * pp;
                            const SavedLayout s = saved(dp, tp, pp, 1, ep, batch, micro);
                            std::vector<int> gone;
                            for (int r = 0; r < lost; ++r) gone.push_back(r);
                            const ElasticPlan p = plan_elastic(s, world, gone, 0);
                            const int left = std::max(0, world - lost);
                            EXPECT_EQ(p.ranks_left, left);
                            const int want = brute_dp(s, left);
                            EXPECT_EQ(p.new_dp, want) << tp << pp << ep << batch << micro << lost;
                            EXPECT_EQ(p.refused.empty(), want > 0);
                            if (want == 0) continue;
                            EXPECT_EQ(p.new_world, want * tp * pp);
                            EXPECT_LE(p.new_world, left);
                            // The global batch is kept: dp x micro x accumulation.
                            EXPECT_EQ(p.new_dp * micro * p.new_accumulation, batch);
                        }
}

TEST(Elastic, RefusesWhatCannotFit) {
    // Fewer ranks left than tp x pp: named.
    const ElasticPlan few = plan_elastic(saved(1, 2, 2, 1, 1, 8, 8), 4, {0, 3}, 0);
    EXPECT_NE(few.refused.find("2 rank(s) left, fewer than the model-parallel degrees need (tp "
                               "2 x pp 2 x cp 1 = 4)"),
              std::string::npos)
        << few.refused;
    // Below --min-ranks.
    const ElasticPlan min = plan_elastic(saved(4, 1, 1, 1, 1, 8, 2), 4, {1}, 3);
    EXPECT_NE(min.refused.find("fewer than --min-ranks 3"), std::string::npos) << min.refused;
    // Ranks outside the world and repeats count once or not at all.
    const ElasticPlan odd = plan_elastic(saved(4, 1, 1, 1, 1, 8, 2), 4, {1, 1, 7, -1}, 0);
    EXPECT_EQ(odd.ranks_left, 3);
}
