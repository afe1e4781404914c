// Serving's forward over rows (Model::forward_rows) on tensor-parallel shards against the whole
// model, for every family: tp 2 and 4 ranks as threads (support/thread_tp.hpp), two sequences
// in one batch (a prompt and a shorter one), then a decode step of each, the first followed by
// a row that is no token (an extra input: Parallel Prompt Decoding's). Every rank gets the
// same logits bits, their argmax is the whole model's, and they differ from the whole model's by
// the order of the ranks' partial sums only: within 1e-5 (measured: at most 1.8e-7 at tp 2 and
// 4, logits up to 1.2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "support/family_cases.hpp"
#include "support/thread_tp.hpp"
#include "weft/core/buffer.hpp"
#include "weft/model/family.hpp"
#include "weft/model/generate.hpp"

using namespace weft;
using namespace weft::model;

namespace {

// The logits of both steps' logit rows, one rank's (or the whole model's with tp null).
std::vector<float> run_rows(const ModelConfig& c, TpComm* tp) {
    const ParamLayout layout = build_param_layout(c, tp_shard(tp));
    Buffer params(layout.total);
    init_params(params.data(), layout, 7);  // any shard: the whole model's numbers
    RowForward f(c, layout, params.data(), false, tp);
    KvPool pool(4, c.n_layer, f.kv_width(), c.head_dim(), 8);
    BlockTable a, b;
    EXPECT_TRUE(pool.grow(a, 13) && pool.grow(b, 5));
    const std::vector<int32_t> prompt = {5, 17, 3, 9, 28, 11, 40, 2, 33, 19, 7}, other = {21, 4, 6};
    std::vector<float> out;
    RowBatch batch;
    batch.add(prompt, 0, a, true);
    batch.add(other, 0, b, true);
    const std::span<const float> first = f.run(batch, pool);
    out.assign(first.begin(), first.end());
    batch.clear();
    // The extra row is every rank's own copy: the vocabulary-sharded embedding holds no row of it.
    std::vector<float> extra(size_t(c.n_embd));
    for (size_t j = 0; j < extra.size(); ++j) extra[j] = 0.02f * float(int(j % 7) - 3);
    const int32_t next[3] = {13, int32_t(c.vocab_size), 8};
    batch.extra = extra.data();
    batch.extra_count = 1;
    batch.add_from(std::span<const int32_t>(next, 2), int64_t(prompt.size()), a, 0);
    batch.add(std::span<const int32_t>(next + 2, 1), int64_t(other.size()), b, true);
    const std::span<const float> second = f.run(batch, pool);
    out.insert(out.end(), second.begin(), second.end());
    return out;
}

class RowsTp : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RowsTp, ShardsGiveTheWholeModelsLogits) {
    const auto [preset, tp] = GetParam();
    ModelConfig c = test::small_family_config(preset, 97, 32, 2);
    // Heads that split over tp 4, kv heads too, of 16 (Qwen2's packed bias wants a multiple).
    c.n_head = 8;
    if (c.n_kv_head > 0) c.n_kv_head = 4;
    c.n_embd = 128;
    const std::vector<float> whole = run_rows(c, nullptr);
    ASSERT_EQ(whole.size(), size_t(5 * c.vocab_size));
    std::vector<std::vector<float>> ranks(static_cast<size_t>(tp));
    test::ThreadTpGroup(tp).run(
        [&](TpComm& comm) { ranks[size_t(comm.rank())] = run_rows(c, &comm); });
    float worst = 0, largest = 0;
    for (int r = 0; r < tp; ++r) {
        ASSERT_EQ(ranks[size_t(r)].size(), whole.size());
        EXPECT_EQ(std::memcmp(ranks[size_t(r)].data(), ranks[0].data(), whole.size() * 4), 0)
            << "rank " << r << " has other bits than rank 0";
    }
    const std::vector<float>& got = ranks[0];
    for (size_t i = 0; i < whole.size(); ++i) {
        worst = std::max(worst, std::abs(got[i] - whole[i]));
        largest = std::max(largest, std::abs(whole[i]));
    }
    for (size_t row = 0; row < 5; ++row) {
        const auto at = [&](const std::vector<float>& l) {
            const auto first = l.begin() + std::ptrdiff_t(row * size_t(c.vocab_size));
            return std::max_element(first, first + c.vocab_size) - first;
        };
        EXPECT_EQ(at(got), at(whole)) << "row " << row;
    }
    EXPECT_LT(worst, 1e-5f);
    std::printf("%s tp %d: max |logit - whole model's| = %.3g, logits up to %.3g\n", preset.c_str(),
                tp, worst, largest);
}

// What rank 0 of a tensor-parallel server sends the others each step: a tree's rows, the count
// of extra inputs (each rank holds their rows) and the KV moves of the last verifies' kept
// nodes come back as they were.
TEST(RowsTp, PackedBatchComesBackWhole) {
    BlockTable a = {3, 1}, b = {2};
    RowBatch batch;
    const int32_t tree[4] = {5, 97, 6, 98}, parents[4] = {-1, 0, 0, 2};
    batch.add_tree(tree, parents, 9, a);
    const int32_t one = 4;
    batch.add(std::span<const int32_t>(&one, 1), 3, b, true);
    const float rows[2] = {};
    batch.extra = rows;
    batch.extra_count = 2;
    batch.kv_moves = {26, 25, 40, 33};
    std::vector<BlockTable> tables;
    RowBatch got;
    got.unpack(batch.pack(), tables);
    EXPECT_EQ(got.tokens, batch.tokens);
    EXPECT_EQ(got.positions, batch.positions);
    EXPECT_EQ(got.logit_rows, batch.logit_rows);
    EXPECT_EQ(got.kv_moves, batch.kv_moves);
    EXPECT_EQ(got.extra_count, 2);
    EXPECT_EQ(got.extra, nullptr);
    ASSERT_EQ(got.seqs.size(), 2u);
    EXPECT_EQ(*got.seqs[0].table, a);
    EXPECT_EQ(got.seqs[0].parents, batch.seqs[0].parents);
    EXPECT_EQ(*got.seqs[1].table, b);
    EXPECT_EQ(got.seqs[1].pos0, 3);
}

INSTANTIATE_TEST_SUITE_P(Families, RowsTp,
                         ::testing::Combine(test::family_presets(), ::testing::Values(2, 4)),
                         [](const auto& i) {
                             std::string n = std::get<0>(i.param);
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n + "_tp" + std::to_string(std::get<1>(i.param));
                         });

}  // namespace
