// team_for: every chunk runs exactly once, on more than one thread, across products, team sizes
// and sleeps; a call it cannot take (one thread, inside OpenMP, the team busy) runs nothing.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "weft/kernels/chunk_team.hpp"

namespace weft::kernels {
namespace {

TEST(ChunkTeam, EveryChunkOnceOverManyCallsAndTeamSizes) {
    const int initial = omp_get_max_threads();
    std::set<std::thread::id> ran_on;
    std::mutex m;
    for (int threads : {2, 3, 2, 4}) {
        omp_set_num_threads(threads);
        for (int call = 0; call < 200; ++call) {
            const int64_t chunks = 2 + call % 37;
            std::vector<std::atomic<int>> hits(static_cast<size_t>(chunks));
            ASSERT_TRUE(team_for(chunks, [&](int64_t i) {
                hits[size_t(i)].fetch_add(1);
                // Long enough that the other threads take some.
                std::this_thread::sleep_for(std::chrono::microseconds(call % 5 == 0 ? 100 : 1));
                std::lock_guard lock(m);
                ran_on.insert(std::this_thread::get_id());
            }));
            for (int64_t i = 0; i < chunks; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << i;
            // Past the team's spin: the next call wakes sleeping threads.
            if (call % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }
    omp_set_num_threads(initial);
    EXPECT_GT(ran_on.size(), 1u);
}

TEST(ChunkTeam, DeclinesWhatItCannotTake) {
    const int initial = omp_get_max_threads();
    int ran = 0;
    auto count = [&](int64_t) { ++ran; };
    omp_set_num_threads(1);
    EXPECT_FALSE(team_for(8, count));
    omp_set_num_threads(2);
    bool inside = true;
#pragma omp parallel num_threads(2)
    {
#pragma omp master
        inside = team_for(8, count);
    }
    EXPECT_FALSE(inside);
    // A chunk's own call: the team is its caller's.
    bool nested = true;
    EXPECT_TRUE(team_for(2, [&](int64_t i) {
        if (i == 0) nested = team_for(8, count);
    }));
    EXPECT_FALSE(nested);
    EXPECT_EQ(ran, 0);
    omp_set_num_threads(initial);
}

}  // namespace
}  // namespace weft::kernels
