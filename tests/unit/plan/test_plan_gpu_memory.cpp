// The GPU memory model against published accounting: FlashAttention's kept statistics instead of
// Korthikanti et al.'s scores, Megatron-Core's distributed optimizer bytes, Transformer Engine's
// fp8 inputs, and what uneven pipeline stages hold.
#include <gtest/gtest.h>

#include "support/plan_cluster.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/plan/memory.hpp"
#include "weft/plan/search.hpp"

using namespace weft;
using namespace weft::plan;

namespace {

Workload gpt3(const std::string& dtype) {
    return test::plan_workload("gpt3-175b", 64, 2048, megatron_precision(dtype));
}

}  // namespace

// Korthikanti et al. 2022, Sec. 4.1: a layer keeps sbh(34 + 5as/h) bytes without
// recomputation, 5as²b of them the attention scores (softmax output, dropout mask and output).
// FlashAttention (Dao et al. 2022, Alg. 2) keeps none of them, only the fp32 log-sum-exp of each
// query row and head: 4asb bytes. At GPT-3 175B's shape (s 2048, h 12288, a 96, b 1, t 8, sp):
// sbh·34/t + 4·(a/t)·s·b, what selective recomputation keeps plus the statistics.
TEST(PlanGpuMemory, FlashAttentionKeepsNoScores) {
    const model::ModelConfig cfg = load_model("gpt3-175b").config;
    const double sbh = 2048.0 * 12288, lse = 4.0 * 96 / 8 * 2048;
    EXPECT_DOUBLE_EQ(flash_lse_bytes(cfg, 2048, 1, 8, 1, Recompute::none), lse);
    EXPECT_DOUBLE_EQ(
        korthikanti_layer_bytes(cfg, 2048, 1, 8, 1, true, Recompute::none, 2, AttentionKind::flash),
        sbh * 34 / 8 + lse);
    // The scores variant stays Table 2's: sbh(34/t + 5as/(ht)) = sbh(4.25 + 10).
    EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(cfg, 2048, 1, 8, 1, true, Recompute::none, 2,
                                             AttentionKind::scores),
                     sbh * 14.25);
    // Full recomputation keeps the layer's input alone (2sbh), flash or not.
    EXPECT_DOUBLE_EQ(
        korthikanti_layer_bytes(cfg, 2048, 1, 8, 1, true, Recompute::full, 2, AttentionKind::flash),
        2 * sbh);
    // Context parallelism: each rank keeps s/cp rows of statistics.
    EXPECT_DOUBLE_EQ(flash_lse_bytes(cfg, 2048, 1, 8, 4, Recompute::none), lse / 4);
    // The whole stage: a 1F1B first stage of pp = 8 holds 8 micro-batches of 12 layers.
    Workload w = gpt3("bf16");
    Candidate k;
    k.layout.dp = 1, k.layout.tp = 8, k.layout.pp = 8, k.layout.sequence_parallel = true;
    const Cluster c = test::plan_cluster(8);
    const double flash = stage_memory(w, c, k, 1, 8).activations;
    w.attention = AttentionKind::scores;
    const double scores = stage_memory(w, c, k, 1, 8).activations;
    EXPECT_DOUBLE_EQ(flash, 96 * (sbh * 34 / 8 + lse));
    EXPECT_DOUBLE_EQ(scores, 96 * sbh * 14.25);
}

// Megatron-Core's distributed optimizer (docs.nvidia.com/megatron-core/developer-guide/latest/
// distrib_optimizer.html): bf16 parameters with fp32 gradients take 18 bytes a parameter
// without it and 6 + 12/d with it; fp16 with fp16 gradients 20 and 4 + 16/d.
TEST(PlanGpuMemory, DistributedOptimizerBytes) {
    const double psi = 1e9, d = 16;
    Layout l;
    l.dp = int(d);
    for (auto [dtype, whole, fixed, sharded] : {std::tuple{"bf16", 18.0, 6.0, 12.0},
                                                {"fp16", 20.0, 4.0, 16.0},
                                                {"fp8", 18.0, 6.0, 12.0}}) {
        Workload w = gpt3(dtype);
        l.zero = 0;
        MemoryBreakdown m = gpu_model_states(w, l, psi, 0);
        EXPECT_DOUBLE_EQ(m.weights + m.grads + m.optimizer, whole * psi) << dtype;
        l.zero = 1;
        m = gpu_model_states(w, l, psi, 0);
        EXPECT_DOUBLE_EQ(m.weights + m.grads + m.optimizer, (fixed + sharded / d) * psi) << dtype;
    }
}

// Transformer Engine keeps fp8 copies of the linear layers' inputs: at GPT-3's shape the QKV and
// MLP-up inputs (2h each) and the MLP-down input (8h) take one byte instead of two.
TEST(PlanGpuMemory, Fp8KeepsLinearInputsInOneByte) {
    const model::ModelConfig cfg = load_model("gpt3-175b").config;
    const double sbh = 2048.0 * 12288;
    EXPECT_DOUBLE_EQ(fp8_saved_bytes(cfg, 2048, 1, 8, 1, true, Recompute::none), sbh * 6 / 8);
    EXPECT_DOUBLE_EQ(fp8_saved_bytes(cfg, 2048, 1, 8, 1, true, Recompute::full), 0);
    Candidate k;
    k.layout.dp = 1, k.layout.tp = 8, k.layout.sequence_parallel = true;
    const Cluster c = test::plan_cluster(1);
    const double bf16 = stage_memory(gpt3("bf16"), c, k, 0, 1).activations;
    const double fp8 = stage_memory(gpt3("fp8"), c, k, 0, 1).activations;
    EXPECT_DOUBLE_EQ(bf16 - fp8, 96 * sbh * 6 / 8);
}

// A fused SwiGLU (xformers' _SwiGLUFusedFunc: gate and up kept, their product recomputed by the
// backward kernel that reads them) keeps 2F s b/t bytes less a layer than one whose down
// projection keeps the product: Llama 3 8B's F = 14336 at s 8192, t 4, with or without sequence
// parallelism (the product is split over tp either way); nothing under full recomputation, and
// nothing to save in a family without a gate, which --swiglu fused refuses by name.
TEST(PlanGpuMemory, FusedSwigluKeepsNoProduct) {
    Workload w = test::plan_workload("llama-3-8b", 64, 8192, megatron_precision("bf16"));
    const model::ModelConfig& cfg = w.model.config;
    const double product = 2.0 * 14336 * 8192 / 4;
    EXPECT_DOUBLE_EQ(fused_glu_saved_bytes(cfg, 8192, 1, 4, 1, Recompute::none, 2), product);
    EXPECT_DOUBLE_EQ(fused_glu_saved_bytes(cfg, 8192, 2, 4, 2, Recompute::none, 2), product);
    EXPECT_DOUBLE_EQ(fused_glu_saved_bytes(cfg, 8192, 1, 4, 1, Recompute::full, 2), 0);
    Candidate k;
    k.layout.dp = 1, k.layout.tp = 4, k.layout.sequence_parallel = true;
    const Cluster c = test::plan_cluster(4);
    const double kept = stage_memory(w, c, k, 0, 1).activations;
    w.glu = GluBackward::fused;
    EXPECT_NO_THROW(check_glu_backward(w));
    EXPECT_DOUBLE_EQ(kept - stage_memory(w, c, k, 0, 1).activations, 32 * product);
    k.layout.recompute = Recompute::full;
    const double full = stage_memory(w, c, k, 0, 1).activations;
    w.glu = GluBackward::kept;
    EXPECT_DOUBLE_EQ(stage_memory(w, c, k, 0, 1).activations, full);

    Workload g = gpt3("bf16");
    EXPECT_DOUBLE_EQ(fused_glu_saved_bytes(g.model.config, 2048, 1, 8, 1, Recompute::none, 2), 0);
    g.glu = GluBackward::fused;
    EXPECT_THROW(check_glu_backward(g), std::exception);
    w.glu = GluBackward::fused;
    w.prec = megatron_precision("fp8");
    EXPECT_THROW(check_glu_backward(w), std::exception);
    w.prec = megatron_precision("bf16"), w.profile = MemoryProfile::engine;
    EXPECT_THROW(check_glu_backward(w), std::exception);
}

// Uneven stages (--pp-layers): the first stage, which also holds the embedding, gets a layer
// less; its parameters and activations follow its own layer count.
TEST(PlanGpuMemory, UnevenStagesHoldTheirOwnLayers) {
    const Workload w = gpt3("bf16");
    const model::ModelConfig& cfg = w.model.config;
    Candidate even, uneven;
    even.layout.dp = uneven.layout.dp = 1;
    even.layout.tp = uneven.layout.tp = 8;
    even.layout.pp = uneven.layout.pp = 4;
    uneven.pp_layers = "23,25,24,24";
    ASSERT_FALSE(check_candidate(w, uneven).has_value());
    const double layer = unit_parameters(cfg, 8, 1);
    EXPECT_DOUBLE_EQ(stage_parameters(cfg, uneven.layout, 0, uneven.pp_layers),
                     stage_parameters(cfg, even.layout, 0) - layer);
    EXPECT_DOUBLE_EQ(stage_parameters(cfg, uneven.layout, 1, uneven.pp_layers),
                     stage_parameters(cfg, even.layout, 1) + layer);
    const Cluster c = test::plan_cluster(4);
    EXPECT_DOUBLE_EQ(stage_memory(w, c, uneven, 1, 1).activations * 24,
                     stage_memory(w, c, even, 1, 1).activations * 25);
    Candidate bad = uneven;
    bad.pp_layers = "24,24,24";
    EXPECT_EQ(check_candidate(w, bad)->reason, "invalid: pp-layers");
}

// MoE experts split over tp (Megatron-Core's expert tensor parallelism at its default, the tp
// degree): each tp rank holds 1/t of every expert's gate, up and down on the GPU profile, and
// 1/ep of the experts; the engine, which replicates its MoE layers over tp, still refuses it.
TEST(PlanGpuMemory, ExpertsSplitOverTensorParallelism) {
    Workload w = test::plan_workload("mixtral-8x7b", 64, 4096, megatron_precision("bf16"));
    Candidate k;
    k.layout.dp = 4, k.layout.ep = 2, k.layout.tp = 2, k.layout.sequence_parallel = true;
    ASSERT_FALSE(check_candidate(w, k).has_value());
    Layout one = k.layout;
    one.tp = 1;
    const model::ModelConfig& cfg = w.model.config;
    EXPECT_NEAR(gpu_expert_parameters(cfg, k.layout, 0, ""),
                stage_expert_parameters(cfg, one, 0) / 2,
                1e-9 * stage_expert_parameters(cfg, one, 0));
    const MemoryBreakdown m = stage_memory(w, test::plan_cluster(1), k, 0, 1);
    const double dense =
        stage_parameters(cfg, k.layout, 0) - stage_expert_parameters(cfg, k.layout, 0);
    const double pe = gpu_expert_parameters(cfg, k.layout, 0, "");
    EXPECT_DOUBLE_EQ(m.weights, 2 * (dense + pe / 2));
    w.profile = MemoryProfile::engine;
    EXPECT_EQ(check_candidate(w, k)->reason, "unsupported: experts with tp > 1");
}

// Megatron-LM frees a chunk's output once it is sent (deallocate_pipeline_outputs), and so does
// Llama 3 (Dubey et al. 2024, Sec. 3.3.2); torch.distributed.pipelining keeps it in its forward
// cache until the chunk's backward. Kept, each (micro-batch, chunk) in flight adds one boundary,
// [s·b, h]/t in 16 bits with sequence parallelism (GPT-3 175B, tp 8: 2048·12288/8·2 bytes), for
// the chunks that send: all but the model's last.
TEST(PlanGpuMemory, KeptStageOutputs) {
    Workload w = gpt3("bf16");
    Candidate k;
    k.layout.dp = 1, k.layout.tp = 8, k.layout.pp = 8, k.layout.sequence_parallel = true;
    const Cluster c = test::plan_cluster(8);
    const double boundary = 2048.0 * 12288 / 8 * 2;
    const double first = stage_memory(w, c, k, 0, 8).activations;
    const double last = stage_memory(w, c, k, 7, 1).activations;
    EXPECT_EQ(kept_output_bytes(w, k, 0), 0);
    w.pp_outputs_kept = true;
    EXPECT_DOUBLE_EQ(stage_memory(w, c, k, 0, 8).activations - first, 8 * boundary);
    EXPECT_DOUBLE_EQ(stage_memory(w, c, k, 7, 1).activations, last);  // the head's stage sends none
    // Interleaved, vpp 2: rank 7's chunk 7 sends to rank 0; its chunk 15 is the model's last.
    k.layout.vpp = 2, k.layout.pp_schedule = ScheduleKind::interleaved;
    EXPECT_DOUBLE_EQ(kept_output_bytes(w, k, 0), boundary);
    EXPECT_DOUBLE_EQ(kept_output_bytes(w, k, 7), boundary / 2);
}

// What a stage holds at its peak is the chunks it really has in flight, each with its own layers,
// not its in-flight count times its average chunk. Llama 3 405B's first stage at 8K GPUs
// (interleaved, pp 16, vpp 2, 32 micro-batches, chunks 3,4,...,4,3): Megatron's order holds
// micro-batches 0-15 of chunks 0 and 16 and 16-30 of chunk 0, 31 x 3 + 16 x 4 = 157 layers, not
// 47 x 3.5. Only the micro-batches in flight on chunk 0 keep the embedding's dropout mask, and
// Llama, without dropout, keeps none.
TEST(PlanGpuMemory, StagesHoldTheChunksInFlight) {
    const pipeline::Schedule s = pipeline::make_schedule(ScheduleKind::interleaved, 16, 2, 32);
    std::vector<int> layers(32, 4);
    layers.front() = layers.back() = 3;
    EXPECT_EQ(held_at_peak(s, 0, layers), (std::vector<double>{31, 16}));
    EXPECT_EQ(held_at_peak(s, 1, layers), (std::vector<double>{29, 16}));  // 45 chunks of 4

    Workload w = test::plan_workload("llama-3.1-405b", 2048, 8192, megatron_precision("bf16"));
    Candidate k;
    k.layout.dp = 64, k.layout.tp = 8, k.layout.pp = 16, k.layout.vpp = 2;
    k.layout.pp_schedule = ScheduleKind::interleaved, k.layout.sequence_parallel = true;
    k.pp_layers = "3,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,3";
    ASSERT_FALSE(check_candidate(w, k).has_value());
    const Cluster c = test::plan_cluster(8192);
    const double layer = korthikanti_layer_bytes(w.model.config, 8192, 1, 8, 1, true,
                                                 Recompute::none, 2, AttentionKind::flash);
    EXPECT_NEAR(stage_memory(w, c, k, 0, held_at_peak(s, 0, layers)).activations, 157 * layer, 1);
    EXPECT_NEAR(stage_memory(w, c, k, 0, 47).activations, 47 * 3.5 * layer, 1);
    EXPECT_NEAR(stage_memory(w, c, k, 1, held_at_peak(s, 1, layers)).activations,
                stage_memory(w, c, k, 1, 45).activations, 1);

    // GPT-3 175B (dropout): pp 8, vpp 2, 16 micro-batches; the first stage's mask, sbh/t bytes,
    // on each micro-batch in flight on chunk 0.
    Workload g = gpt3("bf16");
    g.global_batch = 16;
    Candidate gk = k;
    gk.layout.dp = 1, gk.layout.pp = 8, gk.pp_layers = "";
    ASSERT_FALSE(check_candidate(g, gk).has_value());
    const pipeline::Schedule gs = pipeline::make_schedule(ScheduleKind::interleaved, 8, 2, 16);
    const std::vector<double> held = held_at_peak(gs, 0, std::vector<int>(16, 6));
    const double glayer = korthikanti_layer_bytes(g.model.config, 2048, 1, 8, 1, true,
                                                  Recompute::none, 2, AttentionKind::flash);
    EXPECT_LT(held[0], held[0] + held[1]);
    EXPECT_NEAR(stage_memory(g, c, gk, 0, held).activations,
                (held[0] + held[1]) * 6 * glayer + held[0] * 2048.0 * 12288 / 8, 1);

    // With equal chunks the peak is the simulator's, under every schedule (zero-bubble ones free
    // at the weight backward).
    for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                              ScheduleKind::interleaved, ScheduleKind::zb_h1, ScheduleKind::zb_v}) {
        const int vpp = kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_v ? 2 : 1;
        const pipeline::Schedule e = pipeline::make_schedule(kind, 4, vpp, 8);
        const std::vector<int> peak = pipeline::simulate(e, {}).peak_in_flight;
        for (int r = 0; r < 4; ++r) {
            double sum = 0;
            for (double h : held_at_peak(e, r, std::vector<int>(size_t(4 * vpp), 2))) sum += h;
            EXPECT_EQ(sum, peak[size_t(r)]) << format_schedule_kind(kind) << " rank " << r;
        }
    }
}

// Chunks with no layer at the ends (--pp-layers 0,...,0: the embedding alone, the head alone, as
// Llama 3 405B's pipeline): the GPU profile prices them, the first stage keeps the embeddings and
// the chunk after it starts at layer 0 without them; the engine gives every chunk a layer, so
// the engine profile refuses them.
TEST(PlanGpuMemory, EmptyEndChunks) {
    Workload w = test::plan_workload("llama-3.1-405b", 2048, 8192, megatron_precision("bf16"));
    const model::ModelConfig& cfg = w.model.config;
    Candidate k;
    k.layout.dp = 64, k.layout.tp = 8, k.layout.pp = 16, k.layout.vpp = 8;
    k.layout.pp_schedule = ScheduleKind::interleaved, k.layout.sequence_parallel = true;
    k.pp_layers = "0";
    for (int i = 0; i < 126; ++i) k.pp_layers += ",1";
    k.pp_layers += ",0";
    ASSERT_FALSE(check_candidate(w, k).has_value());
    const double layer = unit_parameters(cfg, 8, 1), embedding = unit_parameters(cfg, 8, 0);
    const double head = unit_parameters(cfg, 8, int(cfg.n_layer) + 1);
    EXPECT_DOUBLE_EQ(stage_parameters(cfg, k.layout, 0, k.pp_layers), 7 * layer + embedding);
    EXPECT_DOUBLE_EQ(stage_parameters(cfg, k.layout, 1, k.pp_layers), 8 * layer);
    EXPECT_DOUBLE_EQ(stage_parameters(cfg, k.layout, 15, k.pp_layers), 7 * layer + head);
    // Rank 0's embedding-only chunk keeps no layer: at 32 micro-batches it holds 112 layers
    // (7 of them for micro-batches 0-15), where rank 1 holds 141.
    const pipeline::Schedule s = pipeline::make_schedule(ScheduleKind::interleaved, 16, 8, 32);
    const std::vector<int> counts = chunk_layers(cfg, k.layout, k.pp_layers);
    const Cluster c = test::plan_cluster(8192);
    const double bytes =
        korthikanti_layer_bytes(cfg, 8192, 1, 8, 1, true, Recompute::none, 2, AttentionKind::flash);
    EXPECT_NEAR(stage_memory(w, c, k, 0, held_at_peak(s, 0, counts)).activations, 112 * bytes, 1);
    EXPECT_NEAR(stage_memory(w, c, k, 1, held_at_peak(s, 1, counts)).activations, 141 * bytes, 1);
    w.profile = MemoryProfile::engine;
    EXPECT_EQ(check_candidate(w, k)->reason, "unsupported: chunk with no layer");
}
