// Memory formulas against hand-computed cases: the ZeRO paper's model states, Korthikanti et
// al.'s activations, and the engine profile against the engine's own allocation formulas.
#include <gtest/gtest.h>

#include "support/plan_cluster.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/model/family.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/parallel/pipeline/partition.hpp"
#include "weft/parallel/zero_layout.hpp"
#include "weft/plan/memory.hpp"

using namespace weft;
using namespace weft::plan;

namespace {

Cluster big_cluster() {
    return test::plan_cluster(4);
}

Workload workload(const std::string& model, int64_t batch, int64_t seq, const std::string& dtype,
                  MemoryProfile profile) {
    Workload w;
    w.model = load_model(model);
    w.global_batch = batch, w.seq_len = seq;
    w.prec = precision(dtype);
    w.profile = profile;
    return w;
}

Candidate layout(int dp, int tp, int pp, int zero, int64_t mb) {
    Candidate k;
    k.layout.dp = dp, k.layout.tp = tp, k.layout.pp = pp, k.layout.zero = zero;
    k.micro_batch = mb;
    return k;
}

}  // namespace

TEST(PlanMemory, Gpt2ParametersByHand) {
    const model::ModelConfig cfg = model::model_preset("gpt2");
    // 12 layers of 12C² + 13C, C = 768; wte padded to 50304 rows; wpe 1024 rows; final norm 2C.
    const double per_layer = 12.0 * 768 * 768 + 13 * 768;  // 7,087,872
    const double expected = 12 * per_layer + 50304.0 * 768 + 1024.0 * 768 + 2 * 768;
    EXPECT_DOUBLE_EQ(expected, 124475904.0);
    EXPECT_DOUBLE_EQ(stage_parameters(cfg, layout(8, 1, 1, 0, 1).layout, 0), expected);
}

// Rajbhandari et al. 2020, Fig. 1 / Sec. 5.1, mixed precision Adam (K = 12), Nd = 8:
// stage 0 (2+2+K)Ψ, stage 1 2Ψ+2Ψ+KΨ/Nd, stage 2 2Ψ+(2+K)Ψ/Nd, stage 3 (2+2+K)Ψ/Nd.
TEST(PlanMemory, ZeroStagesGpt2AtDp8) {
    const double psi = 124475904.0, nd = 8;
    const double expected[4][3] = {{2 * psi, 2 * psi, 12 * psi},
                                   {2 * psi, 2 * psi, 12 * psi / nd},
                                   {2 * psi, 2 * psi / nd, 12 * psi / nd},
                                   {2 * psi / nd, 2 * psi / nd, 12 * psi / nd}};
    const Workload w = workload("gpt2", 64, 1024, "bf16", MemoryProfile::korthikanti);
    for (int z = 0; z <= 3; ++z) {
        const MemoryBreakdown m = stage_memory(w, big_cluster(), layout(8, 1, 1, z, 1), 0, 1);
        EXPECT_DOUBLE_EQ(m.weights, expected[z][0]) << "stage " << z;
        EXPECT_DOUBLE_EQ(m.grads, expected[z][1]) << "stage " << z;
        EXPECT_DOUBLE_EQ(m.optimizer, expected[z][2]) << "stage " << z;
    }
    // Stage 0 is 16Ψ: 1.99 GB for GPT-2 small.
    const MemoryBreakdown m0 = stage_memory(w, big_cluster(), layout(8, 1, 1, 0, 1), 0, 1);
    EXPECT_DOUBLE_EQ(m0.weights + m0.grads + m0.optimizer, 16 * psi);
}

TEST(PlanMemory, Fp32ByteFactors) {
    // This engine: 4 bytes of parameters, 4 of gradients, 8 of AdamW moments; no master copy.
    const Precision p = precision("fp32");
    EXPECT_EQ(p.param, 4);
    EXPECT_EQ(p.grad, 4);
    EXPECT_EQ(p.optimizer, 8);
    EXPECT_EQ(p.activation, 4);
    const Precision b = precision("bf16");
    EXPECT_EQ(b.param + b.grad + b.optimizer, 16);  // 2 + 2 + K, K = 12
    EXPECT_THROW(precision("int8"), weft::Error);
    // The engine under bf16: fp32 state (as fp32), bf16 on the tp / pp wire, fp32 gradients.
    const Precision e = engine_precision("bf16");
    EXPECT_EQ(e.param, p.param);
    EXPECT_EQ(e.grad, p.grad);
    EXPECT_EQ(e.optimizer, p.optimizer);
    EXPECT_EQ(e.update, p.update);
    EXPECT_EQ(e.activation, 2);
    EXPECT_EQ(engine_precision("fp32").activation, 4);
    EXPECT_THROW(engine_precision("fp16"), weft::Error);
}

// Korthikanti et al. 2022, Sec. 4 / Table 2, at GPT-3 175B's shape: s = 2048, h = 12288, a = 96,
// b = 1, t = 8. 5as/(ht) = 5·96·2048/(12288·8) = 10.
TEST(PlanMemory, KorthikantiTable2) {
    const model::ModelConfig cfg = load_model("gpt3-175b").config;
    const double sbh = 2048.0 * 1 * 12288;
    auto bytes = [&](int t, bool sp, Recompute r) {
        return korthikanti_layer_bytes(cfg, 2048, 1, t, 1, sp, r, 2);
    };
    // No parallelism: sbh(34 + 5as/h) = sbh(34 + 80).
    EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::none), sbh * (34 + 80));
    // Tensor parallel: sbh(10 + 24/t + 5as/(ht)) = sbh(10 + 3 + 10).
    EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::none), sbh * 23);
    // Tensor + sequence parallel: sbh(34/t + 5as/(ht)) = sbh(4.25 + 10).
    EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::none), sbh * 14.25);
    // Selective recomputation: sbh(10 + 24/t); with sequence parallel sbh·34/t.
    EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::selective), sbh * 13);
    EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::selective), sbh * 4.25);
    // Full recomputation: 2sbh.
    EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::full), 2 * sbh);
    // fp32 activations double everything.
    EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(cfg, 2048, 1, 8, 1, true, Recompute::full, 4),
                     4 * sbh);
}

// The engine profile reproduces train::estimate_memory: model::Gpt2Activations::floats,
// Gpt2::scratch_floats, the classifier's scratch, the ZeRO layout's shards and buckets.
TEST(PlanMemory, EngineProfileMatchesEngineFormulas) {
    for (const char* name : {"tiny", "gpt2"})
        for (int dp : {1, 2, 4})
            for (int z = 0; z <= 3; ++z) {
                const int64_t B = 4, T = 64;
                const Workload w = workload(name, B * dp, T, "fp32", MemoryProfile::engine);
                const model::ModelConfig& cfg = w.model.config;
                Cluster c = big_cluster();
                c.device.runtime_bytes = 12345;
                const MemoryBreakdown m = stage_memory(w, c, layout(dp, 1, 1, z, B), 0, 1);
                const parallel::ZeroLayout zl(model::build_param_layout(cfg), dp, 0);
                const double total = double(zl.padded().total), shard = double(zl.shard_floats());
                SCOPED_TRACE(testing::Message() << name << " dp " << dp << " zero " << z);
                EXPECT_DOUBLE_EQ(m.weights, 4 * (z == 3 ? shard : total));
                EXPECT_DOUBLE_EQ(m.grads, 4 * (z >= 2 ? shard : total));
                EXPECT_DOUBLE_EQ(m.optimizer, 8 * (z == 0 ? total : shard));
                EXPECT_DOUBLE_EQ(m.activations,
                                 4.0 * double(model::Gpt2Activations::floats(cfg, B, T)));
                const double working = double(parallel::zero_working_bytes(zl, z, 25 << 20, false));
                EXPECT_DOUBLE_EQ(m.buffers, 4.0 * double(model::Gpt2::scratch_floats(cfg, B, T) +
                                                         kernels::classifier_scratch_floats(
                                                             B * T, cfg.vocab_size)) +
                                                working);
                EXPECT_DOUBLE_EQ(m.runtime, 12345);
            }
}

TEST(PlanMemory, PipelineInFlightScalesActivations) {
    // 1F1B: the first stage holds pp micro-batches of L/pp layers, i.e. L layers' worth
    // (Korthikanti et al. Sec. 4.2.3), the same as one micro-batch without a pipeline.
    const Workload w = workload("gpt3-175b", 64, 2048, "bf16", MemoryProfile::korthikanti);
    Candidate k = layout(1, 8, 8, 0, 1);
    k.layout.sequence_parallel = true;
    const MemoryBreakdown one = stage_memory(w, big_cluster(), k, 3, 1);
    const MemoryBreakdown eight = stage_memory(w, big_cluster(), k, 3, 8);
    const double layer = korthikanti_layer_bytes(w.model.config, 2048, 1, 8, 1, true,
                                                 Recompute::none, 2, w.attention);
    EXPECT_DOUBLE_EQ(one.activations, 12 * layer);
    EXPECT_DOUBLE_EQ(eight.activations, 96 * layer);
}

// The zero-bubble schedules hold each layer's output-gradient copies from B to W: GPT-2's 9C
// floats a token (its four products' widths), the count the trainer's estimate reads too.
TEST(PlanMemory, EngineCountsTheCopiesWWaitsOn) {
    const Workload w = workload("gpt2", 8, 1024, "fp32", MemoryProfile::engine);
    Candidate k = layout(1, 1, 2, 0, 1);
    const MemoryBreakdown onef = stage_memory(w, big_cluster(), k, 0, 2);
    k.layout.pp_schedule = ScheduleKind::zb_h1;
    const MemoryBreakdown zb = stage_memory(w, big_cluster(), k, 0, 2);
    EXPECT_DOUBLE_EQ(zb.activations - onef.activations, 2.0 * 6 * 1024 * 9 * 768 * 4);
}

// zb-v places chunk c on rank c for c < pp and on 2pp - 1 - c after (pipeline::rank_chunks, which
// the schedule reads too): the embedding and the head's chunk both sit on stage 0, with the
// head's logits, and no stage holds the tied embedding's exchange. With "1,2,3,6" stage 0 runs
// chunks 0 and 3 (layers 0 and 6..11) and stage 1 chunks 1 and 2 (layers 1..5); by c % pp it
// would run 0 and 2.
TEST(PlanMemory, EngineStagesFollowTheVOfZbV) {
    const Workload w = workload("gpt2", 8, 256, "fp32", MemoryProfile::engine);
    const model::ModelConfig& cfg = w.model.config;
    Candidate k = layout(1, 1, 2, 0, 1);
    k.layout.pp_schedule = ScheduleKind::zb_v;
    k.layout.vpp = 2;
    k.pp_layers = "1,2,3,6";
    auto bytes = [&](int first, int n, bool head) {
        return 4.0 * double(model::activation_floats(
                         cfg, 1, 256, {first, n, head, false, 1, false, false, false, true}));
    };
    const int in_flight = 4;  // chunk activations; per chunk, in_flight / vpp on average
    const MemoryBreakdown s0 = stage_memory(w, big_cluster(), k, 0, in_flight);
    const MemoryBreakdown s1 = stage_memory(w, big_cluster(), k, 1, in_flight);
    EXPECT_DOUBLE_EQ(s0.activations, (bytes(0, 1, false) + bytes(6, 6, true)) * in_flight / 2);
    EXPECT_DOUBLE_EQ(s1.activations, (bytes(1, 2, false) + bytes(3, 3, false)) * in_flight / 2);
    const double logits = 4.0 * double(kernels::classifier_scratch_floats(256, cfg.vocab_size));
    EXPECT_DOUBLE_EQ(s0.buffers - s1.buffers, logits);
    // The model state: stage 0 holds the embedding, 7 layers and the final norm.
    EXPECT_GT(s0.weights, s1.weights);
}

// Per layer, the engine profile counts what model::Activations allocates under tensor and
// sequence parallelism (a span of n layers without the head minus a span of none).
TEST(PlanMemory, EngineLayerFloatsFollowTheModelUnderTensorParallelism) {
    const model::ModelConfig cfg = model::model_preset("gpt2");
    const int64_t B = 2, T = 128;
    for (int tp : {1, 2, 4})
        for (bool sp : {false, true}) {
            const model::LayerSpan layers{0, 3, false, false, tp, sp},
                none{0, 0, false, false, tp, sp};
            const int64_t per_layer = (model::Gpt2Activations::floats(cfg, B, T, layers) -
                                       model::Gpt2Activations::floats(cfg, B, T, none)) /
                                      3;
            EXPECT_DOUBLE_EQ(engine_layer_floats(cfg, T, B, tp, sp, Recompute::none),
                             double(per_layer))
                << "tp " << tp << (sp ? " sp" : "");
        }
}

// With a pipeline the engine's first and last stages each hold a receive buffer for the other
// end's gradient of the tied embeddings (TrainState::sum_tied_embedding: this tp rank's rows of
// the padded wte, and wpe); a middle stage does not.
TEST(PlanMemory, EngineEndStagesHoldTheTiedEmbeddingExchange) {
    const Workload w = workload("gpt2", 8, 256, "fp32", MemoryProfile::engine);
    const model::ModelConfig& cfg = w.model.config;
    for (int tp : {1, 2}) {
        Candidate k = layout(1, tp, 4, 0, 1);
        const double exchange =
            4.0 * double(tp_padded_vocab(cfg, tp) / tp + cfg.n_positions) * double(cfg.n_embd);
        const MemoryBreakdown first = stage_memory(w, big_cluster(), k, 0, 1);
        const MemoryBreakdown middle = stage_memory(w, big_cluster(), k, 1, 1);
        const MemoryBreakdown last = stage_memory(w, big_cluster(), k, 3, 1);
        SCOPED_TRACE(testing::Message() << "tp " << tp);
        // First and middle stages run the same scratch; only the exchange buffer differs.
        EXPECT_DOUBLE_EQ(first.buffers - middle.buffers, exchange);
        // The last stage also has the classifier's logits; take them out.
        const double logits =
            4.0 * double(kernels::classifier_scratch_floats(256, cfg.vocab_size)) / tp;
        EXPECT_DOUBLE_EQ(last.buffers - middle.buffers - logits, exchange);
    }
}

// Issue 16: the planner's engine profile and the trainer's estimate read the same model state.
// The trainer reports DataParallel::model_state_bytes, i.e. parallel::zero_state_bytes of the
// ZeroLayout over the Model's layout; that layout is built here as TrainState builds it
// (model::build_param_layout of the tp-padded config for this pipeline rank's units and tp
// shard), independently of the planner's code path. fp32 and bf16 must give the same bytes:
// the engine keeps fp32 weights, gradients and moments under --dtype bf16.
TEST(PlanMemory, EngineModelStateEqualsTheTrainersForEveryLayout) {
    struct Case {
        int dp, tp, pp, vpp;
    };
    const Case cases[] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {4, 1, 1, 1}, {1, 2, 1, 1},
                          {2, 2, 1, 1}, {1, 1, 2, 1}, {2, 1, 2, 1}, {1, 2, 2, 1},
                          {1, 1, 2, 2}, {2, 2, 2, 1}, {1, 4, 1, 1}, {1, 1, 4, 1}};
    for (const char* name : {"tiny", "gpt2"})
        for (const char* dtype : {"fp32", "bf16"})
            for (const Case& c : cases)
                for (int z = 0; z <= 3; ++z) {
                    if (z >= 2 && c.pp > 1) continue;  // the engine refuses it (docs/planner.md)
                    const Workload w = workload(name, 8 * c.dp, 64, dtype, MemoryProfile::engine);
                    const model::ModelConfig& cfg = w.model.config;
                    if (cfg.n_layer % (c.pp * c.vpp) != 0) continue;  // tiny has 2 layers
                    Candidate k = layout(c.dp, c.tp, c.pp, z, 1);
                    k.layout.vpp = c.vpp;
                    for (int stage = 0; stage < c.pp; ++stage) {
                        model::ModelShard shard;
                        if (c.pp > 1)
                            shard.units =
                                pipeline::partition_layers(int(cfg.n_layer), c.pp, c.vpp, "")
                                    .units_of(stage, cfg);
                        shard.tp = c.tp;
                        for (int tp_rank = 0; tp_rank < c.tp; ++tp_rank) {
                            shard.tp_rank = tp_rank;
                            const parallel::ZeroLayout zl(
                                model::build_param_layout(model::config_for_tp(cfg, c.tp), shard),
                                c.dp, 0);
                            const parallel::ModelStateBytes trainer =
                                parallel::zero_state_bytes(zl, z);
                            const MemoryBreakdown m = stage_memory(w, big_cluster(), k, stage, 1);
                            SCOPED_TRACE(testing::Message()
                                         << name << " " << dtype << " " << k.describe() << " stage "
                                         << stage << " tp rank " << tp_rank);
                            EXPECT_EQ(m.weights, double(trainer.params));
                            EXPECT_EQ(m.grads, double(trainer.grads));
                            EXPECT_EQ(m.optimizer, double(trainer.optimizer));
                            // fp32 bytes: 4 per weight, 4 per gradient, 8 per moment pair.
                            const double total = double(zl.padded().total);
                            EXPECT_EQ(m.weights, 4 * (z == 3 ? total / c.dp : total));
                            EXPECT_EQ(m.optimizer, 8 * (z == 0 ? total : total / c.dp));
                        }
                    }
                }
}

// Issue 35: with another --optimizer the planner counts what its optimizer allocates for each
// ZeRO slice (optim::optimizer_state_bytes through zero_state_bytes), and MeZO no gradients.
TEST(PlanMemory, EngineModelStateFollowsTheOptimizer) {
    for (const char* opt : {"adamw8bit", "lion", "mezo"})
        for (int dp : {1, 2, 4})
            for (int z = 0; z <= 3; ++z) {
                Workload w = workload("gpt2", 8 * dp, 64, "fp32", MemoryProfile::engine);
                w.optimizer = opt;
                w.prec = with_optimizer(w.prec, opt);
                const Candidate k = layout(dp, 1, 1, z, 1);
                const parallel::ZeroLayout zl(
                    model::build_param_layout(w.model.config, model::ModelShard{}), dp, 0);
                const parallel::ModelStateBytes trainer = parallel::zero_state_bytes(zl, z, opt);
                const MemoryBreakdown m = stage_memory(w, big_cluster(), k, 0, 1);
                SCOPED_TRACE(testing::Message() << opt << " " << k.describe());
                EXPECT_EQ(m.optimizer, double(trainer.optimizer));
                EXPECT_EQ(m.grads, double(trainer.grads));
                const double total = double(zl.padded().total), shard = z == 0 ? total : total / dp;
                if (std::string(opt) == "lion") {
                    EXPECT_EQ(m.optimizer, 4 * shard);
                }
                if (std::string(opt) == "mezo") {
                    EXPECT_EQ(m.grads + m.optimizer, 0);
                }
                if (std::string(opt) == "adamw8bit") {
                    // Blocks' 8-bit codes, fp32 for the embeddings and small tensors.
                    EXPECT_LT(m.optimizer, 4 * shard);
                    EXPECT_GT(m.optimizer, 2 * shard);
                }
            }
}

// Context parallelism in the engine profile: each rank holds T/cp rows; Ulysses and the hybrid
// also keep every layer's whole-sequence q, k, v and out of their heads/cp heads until its
// backward, B·(T/cp)·2(NH + NKV)·HS floats a layer (model::CpAttention::kept_floats, checked
// against the same count in test_cp_attention), and ZeRO shards over dp x cp, as the trainer's
// estimate (train::memory_estimate) counts them.
TEST(PlanMemory, EngineProfileCountsContextParallelism) {
    for (const char* name : {"tiny", "llama-tiny"})
        for (int cp : {2, 4})
            for (CpKind kind : {CpKind::ring, CpKind::ulysses, CpKind::hybrid})
                for (int z : {0, 3}) {
                    const int64_t B = 2, T = 64, s = T / cp;
                    const Workload w = workload(name, B, T, "fp32", MemoryProfile::engine);
                    const model::ModelConfig& cfg = w.model.config;
                    Candidate k = layout(1, 1, 1, z, B);
                    k.layout.cp = cp, k.layout.cp_kind = kind;
                    const MemoryBreakdown m = stage_memory(w, big_cluster(), k, 0, 1);
                    SCOPED_TRACE(testing::Message() << name << " cp " << cp << " "
                                                    << cp_kind_name(kind) << " zero " << z);
                    const model::Family& f = model::family_of(cfg);
                    const double plain = double(f.activation_floats(cfg, B, s, {}));
                    const double kept =
                        kind == CpKind::ring
                            ? 0.0
                            : double(cfg.n_layer * B * s * 2 * (cfg.n_head + cfg.kv_heads()) *
                                     cfg.head_dim());
                    EXPECT_DOUBLE_EQ(m.activations, 4 * (plain + kept));
                    const parallel::ZeroLayout zl(model::build_param_layout(cfg), cp, 0);
                    const double total = double(zl.padded().total),
                                 shard = double(zl.shard_floats());
                    EXPECT_DOUBLE_EQ(m.weights, 4 * (z == 3 ? shard : total));
                    EXPECT_DOUBLE_EQ(m.optimizer, 8 * (z == 0 ? total : shard));
                }
}

// --offload optimizer: the state the engine profile counts moves to disk (`offloaded`, out of
// the total), and memory keeps the streaming pool, offload::pool_bytes: 3 groups of each state
// array at its width (AdamW's two moments, Lion's one, 8-bit AdamW's codes of m and v priced at
// 4 bytes an element where a tensor stays fp32, and its absmaxes, 8 per block of 2048, a page
// over); MeZO, without state or (in fp32) a master apart from its weights, moves nothing.
TEST(PlanMemory, OffloadMovesTheStateToDiskAndKeepsThePool) {
    const double g = double(1 << 20);
    const std::pair<const char*, double> pools[] = {
        {"adamw", 3 * 8 * g},
        {"lion", 3 * 4 * g},
        {"adamw8bit", 3 * (8 * g + 8 * g / 2048 + 4096)},
        {"mezo", 0}};
    for (const auto& [optimizer, pool] : pools) {
        SCOPED_TRACE(optimizer);
        Workload w = workload("gpt2", 8, 64, "fp32", MemoryProfile::engine);
        w.prec = with_optimizer(w.prec, optimizer);
        w.optimizer = optimizer;
        const Candidate k = layout(2, 1, 1, 1, 1);
        const MemoryBreakdown in_memory = stage_memory(w, big_cluster(), k, 0, 1);
        w.offload_group_floats = int64_t(1) << 20;
        const MemoryBreakdown offloaded = stage_memory(w, big_cluster(), k, 0, 1);
        EXPECT_DOUBLE_EQ(offloaded.offloaded, in_memory.optimizer);
        EXPECT_DOUBLE_EQ(offloaded.optimizer, pool);
        EXPECT_DOUBLE_EQ(offloaded.weights, in_memory.weights);
        EXPECT_DOUBLE_EQ(offloaded.grads, in_memory.grads);
        EXPECT_DOUBLE_EQ(in_memory.total() - offloaded.total(),
                         in_memory.optimizer - offloaded.optimizer);
        // On disk, per parameter (ZeRO-1 over 2 ranks: half on each): 8 bytes of AdamW, 4 of
        // Lion; 8-bit AdamW's 2 and its absmaxes on the blocks' tensors, 8 on its fp32 ones
        // (GPT-2's embeddings: 32% of it), 3.91.
        const double per_param = 2 * offloaded.offloaded / 124475904.0;
        const double expected = std::string(optimizer) == "adamw"  ? 8.0
                                : std::string(optimizer) == "lion" ? 4.0
                                : std::string(optimizer) == "mezo" ? 0.0
                                                                   : 3.91;
        EXPECT_NEAR(per_param, expected, 0.01);
    }
}
