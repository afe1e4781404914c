// What the gradient reducer holds in flight (reducer_temp_bytes), counted by hand for GPT-2 small
// at dp 2 with the default 25 MiB buckets. Open MPI's nonblocking reductions copy each message
// (twice for a reduce-scatter), so the reducer cuts the tied embedding's 39.4M-float bucket into
// pieces of at least a bucket's worth and keeps two pieces in flight: the largest message is then
// a block's bucket, not the embedding. The MPI side (that the engine's peak RSS stays within the
// estimate) is tests/mpi/dp_train.sh's `estimate` case.
#include <gtest/gtest.h>

#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/parallel/zero_grads.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {
namespace {

TEST(ZeroGrads, InFlightBytesOfGpt2AtDp2) {
    const model::ModelConfig cfg = model::model_preset("gpt2");
    const ZeroLayout z(model::build_param_layout(cfg), 2, 0);
    const auto& units = z.padded().units;
    const int64_t L = cfg.n_layer, f = sizeof(float), bucket = 25 << 20;
    ASSERT_EQ(int64_t(units.size()), L + 2);  // embeddings, the blocks, the final norm
    const int64_t embed = units[0].size, block = units[1].size;
    const int64_t last = units[size_t(L)].size + units[size_t(L + 1)].size;
    // Every block is a bucket of its own (7.1M floats, above 25 MiB), the last one with the
    // final norm, and the embedding's bucket is the embedding alone.
    const std::vector<Bucket> buckets = make_buckets(z, bucket);
    ASSERT_EQ(int64_t(buckets.size()), L + 1);
    EXPECT_EQ(buckets.front().end - buckets.front().begin, last);
    EXPECT_EQ(buckets.back().first_unit, 0);
    EXPECT_EQ(buckets.back().end - buckets.back().begin, embed);
    // The embedding (39.4M floats) goes in floor(39.4M / 6.55M) = 6 pieces, each smaller than
    // the last block's bucket, so the largest message is that bucket.
    const int64_t min = bucket / f;
    ASSERT_EQ(embed / min, 6);
    ASSERT_LT((embed + 5) / 6 + 32, last);
    ASSERT_GT(last, block);

    // ZeRO 0-1, fp32: libnbc's copy of each of the two messages in flight.
    EXPECT_EQ(reducer_temp_bytes(z, buckets, bucket, false, false), 2 * last * f);
    // bf16: the wire out and in (2 + 2 bytes a float) of two pieces, the rounded sums of the
    // whole buffer, kept until finish() all-gathers them, and one piece's fp32 sum.
    EXPECT_EQ(reducer_temp_bytes(z, buckets, bucket, false, true),
              2 * last * f + z.padded().total * 2 + last * f);
    // ZeRO 2-3, fp32: the embedding's bucket and the largest other, both in fp32; per piece in
    // flight its packed message and the all-to-all's received one (no libnbc copy).
    EXPECT_EQ(reducer_temp_bytes(z, buckets, bucket, true, false),
              (embed + last) * f + 2 * (last + last) * f);
    // bf16: one fp32 piece being rounded, and the bf16 wire out and in of two.
    EXPECT_EQ(reducer_temp_bytes(z, buckets, bucket, true, true),
              (embed + last) * f + last * f + 2 * last * 2 * 2);
    // Stage 3 adds its gathered units: the embedding and two blocks (the last unit, the final
    // norm, is smaller).
    EXPECT_EQ(zero_working_bytes(z, 3, bucket, false) - zero_working_bytes(z, 2, bucket, false),
              (embed + 2 * block) * f);
}

TEST(ZeroGrads, OneRankSendsNothing) {
    const model::ModelConfig cfg = model::model_preset("gpt2");
    const ZeroLayout z(model::build_param_layout(cfg), 1, 0);
    const std::vector<Bucket> buckets = make_buckets(z, 25 << 20);
    EXPECT_EQ(reducer_temp_bytes(z, buckets, 25 << 20, false, false), 0);
    EXPECT_EQ(zero_working_bytes(z, 0, 25 << 20, true), 0);
}

}  // namespace
}  // namespace weft::parallel
