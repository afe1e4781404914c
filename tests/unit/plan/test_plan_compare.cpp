// `weft plan` says why its first layout beat the second: the parts of the step that differ.
#include <gtest/gtest.h>

#include <cmath>

#include "support/plan_cluster.hpp"
#include "weft/plan/compare.hpp"
#include "weft/plan/report.hpp"

using namespace weft;
using namespace weft::plan;

TEST(PlanCompare, TermsThatDifferLargestFirst) {
    const Workload w = test::plan_workload("gpt3-175b", 64, 2048, megatron_precision("bf16"));
    const Cluster c = test::plan_cluster(8);
    Candidate a, b;
    a.layout.dp = 8, a.layout.tp = 8, a.layout.pp = 1, a.layout.zero = 3;
    b = a;
    b.layout.dp = 4, b.layout.pp = 2, b.layout.zero = 1;
    const Estimate ea = evaluate(w, c, a), eb = evaluate(w, c, b);
    // Against itself nothing differs; against a pipeline, the bubble does.
    EXPECT_TRUE(step_differences(ea, ea).empty());
    const std::vector<TermDiff> d = step_differences(ea, eb, 0);
    ASSERT_EQ(d.size(), 9u);  // every term (offload exposed among them), with min_share 0
    double sum_a = 0, sum_b = 0;
    for (size_t i = 0; i < d.size(); ++i) {
        sum_a += d[i].best, sum_b += d[i].other;
        if (i > 0) {
            EXPECT_GE(std::abs(d[i - 1].best - d[i - 1].other), std::abs(d[i].best - d[i].other));
        }
    }
    EXPECT_NEAR(sum_a, ea.step_s, 1e-9 * ea.step_s);  // the terms add up to the step
    EXPECT_NEAR(sum_b, eb.step_s, 1e-9 * eb.step_s);
    bool bubble = false;
    for (const TermDiff& t : d)
        if (t.term == "bubble") bubble = t.best == 0 && t.other > 0;
    EXPECT_TRUE(bubble);
    EXPECT_NE(why_text(ea, eb).find("bubble"), std::string::npos);
    // When no part differs, the line says what decided: the step, the memory, or nothing.
    EXPECT_NE(why_text(ea, ea).find("a tie"), std::string::npos) << why_text(ea, ea);
    Estimate heavier = ea;
    heavier.memory.runtime += 1.5 * (1 << 30);
    EXPECT_NE(why_text(ea, heavier).find("1.50 GiB less memory"), std::string::npos)
        << why_text(ea, heavier);
    Estimate slower = ea;
    slower.step_s *= 1.001;
    EXPECT_NE(why_text(ea, slower).find("faster)"), std::string::npos) << why_text(ea, slower);
    // The search's JSON names the runner-up and the terms.
    SearchSpace s;
    s.tp = 8;
    const SearchResult r = search(w, c, s, 3);
    ASSERT_GE(r.best.size(), 2u);
    const nlohmann::json j = result_json(w, c, r);
    EXPECT_EQ(j["why_best"]["runner_up"], r.best[1].cand.describe());
    EXPECT_NE(result_text(w, c, r).find("why 1 over 2"), std::string::npos);
}
