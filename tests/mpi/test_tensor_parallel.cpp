// Tensor parallelism over MPI ranks, with parallel::GroupTpComm on the mesh's tp axis. For the
// `tiny` model (with a small vocabulary) and one with more heads than ranks, for every tp the world
// divides into (np 1: 1; np 2: 2; np 4: 2 and 4), with and without sequence parallelism and
// recomputation: each rank's shard trains two micro-batches and matches the single-process model
// (support/tp_parity.hpp; every rank runs it too), the tensors every rank keeps whole get the same
// bits on every rank, and the tp group's counters show exactly the bytes docs/tensor_parallel.md
// derives: the same bus bytes with and without sequence parallelism for the activations, plus the
// LayerNorm gradients that sequence parallelism sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "support/tp_parity.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/parallel/tensor_parallel.hpp"

using namespace weft;
using namespace weft::comm;
using namespace weft::model;

namespace {

constexpr int64_t kB = 2, kT = 16;
constexpr int kMicroBatches = 2;

// More heads than ranks (two per rank at tp = 4), and a vocabulary (211, padded to 512 at tp = 4)
// whose last shard is padding only.
ModelConfig eight_heads() {
    ModelConfig c;
    c.vocab_size = 211;
    c.n_positions = 32;
    c.n_layer = 2;
    c.n_head = 8;
    c.n_embd = 64;
    return c;
}

// `tiny`'s shape with a vocabulary of 4099 (padded at tp 2 and 4) in place of GPT-2's 50257: the
// whole-vocabulary tensors dominated the test's time (every rank trains the single-process
// reference too, and compares every replicated tensor across ranks) and add nothing the
// sharding does not already show at 4099.
ModelConfig tiny_small_vocab() {
    ModelConfig c = model_preset("tiny");
    c.vocab_size = 4099;
    return c;
}

struct Expected {
    OpStats all_reduce, reduce_scatter, all_gather;
};

// One rank's tp traffic for one micro-batch's forward and backward (docs/tensor_parallel.md):
// A activations of S = 4·N·C bytes, each an all-reduce (2(n-1)/n·S on the wire), or with
// sequence parallelism a reduce-scatter and an all-gather ((n-1)/n·S each); the cross-entropy's
// row maxima (4N bytes) and sums (8N bytes) all-reduced per chunk; with sequence parallelism the
// LayerNorm gradients of this rank's rows all-reduced (4C floats per block, 2C for the final
// norm).
Expected expected_bytes(const ModelConfig& c, int n, bool sp, bool recompute) {
    const int64_t L = c.n_layer, C = c.n_embd, N = kB * kT;
    const int64_t chunks =
        (N + kernels::classifier_chunk_rows(N) - 1) / kernels::classifier_chunk_rows(N);
    const uint64_t A = uint64_t(2 + 4 * L + (recompute ? 2 * L : 0));
    const uint64_t S = uint64_t(4 * N * C);
    const double ring = 2.0 * (n - 1) / n, half = double(n - 1) / n;
    Expected e;
    if (n == 1) return e;  // tp = 1 calls no collective at all
    const uint64_t stats = uint64_t(12 * N);
    if (!sp) {
        e.all_reduce = {A + uint64_t(2 * chunks), A * S + stats, ring * double(A * S + stats)};
        return e;
    }
    const uint64_t ln = uint64_t(4 * (4 * L + 2) * C);
    e.all_reduce = {uint64_t(2 * chunks + L + 1), stats + ln, ring * double(stats + ln)};
    e.reduce_scatter = {A, A * S, half * double(A * S)};
    e.all_gather = {A, A * S, half * double(A * S)};
    return e;
}

void expect_op(const GroupStats& g, Op op, const OpStats& want) {
    const OpStats& got = g[op];
    EXPECT_EQ(got.calls, want.calls * kMicroBatches) << op_name(op);
    EXPECT_EQ(got.bytes, want.bytes * kMicroBatches) << op_name(op);
    EXPECT_NEAR(got.bus_bytes, want.bus_bytes * kMicroBatches, 1e-6 * want.bus_bytes)
        << op_name(op);
}

double bus_total(const GroupStats& g) {
    return g.total().bus_bytes;
}

class TensorParallel : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallel, MatchesOneProcessAndMovesTheAnalyticBytes) {
    const int world = world_size();
    const ModelConfig base = std::string(GetParam()) == "tiny" ? tiny_small_vocab() : eight_heads();
    const std::vector<test::TokenBatch> batches =
        test::make_token_batches(base, kB, kT, kMicroBatches);
    Gpt2 whole(base);
    const test::TrainRun ref = test::train_micro_batches(whole, batches, kB, kT, false);

    for (int tp : {1, 2, 4}) {
        if (world % tp != 0) continue;
        SCOPED_TRACE("tp " + std::to_string(tp));
        Layout layout;
        layout.tp = tp;  // dp takes the rest of the world: each dp rank runs the same test
        Mesh mesh(layout);
        Group& g = mesh.group(Axis::tp);
        parallel::GroupTpComm comm(g);
        ASSERT_EQ(comm.size(), tp);
        const ModelConfig cfg = config_for_tp(base, tp);
        for (bool recompute : {false, true}) {
            double bus[2] = {0, 0};  // without, with sequence parallelism
            for (bool sp : {false, true}) {
                SCOPED_TRACE(std::string(sp ? "sp" : "no sp") + (recompute ? ", recompute" : ""));
                Gpt2 model(cfg, ModelShard{{}, g.rank(), tp}, &comm, sp);
                mesh.reset_stats();
                const test::TrainRun run =
                    test::train_micro_batches(model, batches, kB, kT, recompute);
                const GroupStats stats = g.stats();
                EXPECT_NEAR(run.loss, ref.loss, 1e-5 * std::abs(ref.loss));
                test::expect_grad_shards(ref, run, g.rank(), tp);

                const Expected want = expected_bytes(base, tp, sp, recompute);
                expect_op(stats, Op::all_reduce, want.all_reduce);
                expect_op(stats, Op::reduce_scatter, want.reduce_scatter);
                expect_op(stats, Op::all_gather, want.all_gather);
                EXPECT_EQ(stats.total().calls, (want.all_reduce.calls + want.reduce_scatter.calls +
                                                want.all_gather.calls) *
                                                   kMicroBatches)
                    << "a collective of another kind";
                bus[sp] = bus_total(stats);

                // Replicated tensors: the same bits on every rank of the group.
                for (const ParamSpec& p : run.layout.tensors) {
                    if (p.tp_dim >= 0) continue;
                    std::vector<float> lo(run.grads.begin() + p.offset,
                                          run.grads.begin() + p.offset + p.numel_stored);
                    std::vector<float> hi = lo;
                    for (float& v : lo) v = -v;  // min as -max(-x)
                    all_reduce(g, std::span<float>(hi), ReduceOp::max);
                    all_reduce(g, std::span<float>(lo), ReduceOp::max);
                    int64_t differ = 0;
                    for (size_t i = 0; i < hi.size(); ++i) differ += hi[i] != -lo[i];
                    EXPECT_EQ(differ, 0) << p.name << " differs between the tp ranks";
                }
            }
            // Sequence parallelism moves the activations' bytes of plain tensor parallelism and
            // adds only the LayerNorm gradients' all-reduce, (4L + 2)·C floats per micro-batch.
            const double ln = tp == 1 ? 0
                                      : 2.0 * (tp - 1) / tp * 4.0 * double(4 * base.n_layer + 2) *
                                            double(base.n_embd) * kMicroBatches;
            EXPECT_NEAR(bus[1] - bus[0], ln, 1e-6 * bus[0]);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallel, ::testing::Values("tiny", "eight_heads"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                             return std::string(i.param);
                         });

}  // namespace
