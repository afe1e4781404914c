// The planner's engine profile under bf16 (issue 16): its activation bytes are what the engine's
// model allocates for the run (the family's count for the span Model::activation_span fills in
// under bf16 products), under context parallelism too (q, k, v and the attention output kept as
// bf16, as the families keep them).
#include <gtest/gtest.h>

#include "support/plan_cluster.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/family.hpp"
#include "weft/model/model.hpp"
#include "weft/plan/memory.hpp"

using namespace weft;
using namespace weft::plan;

namespace {

Cluster one_device() {
    return test::plan_cluster(1);
}

MemoryBreakdown engine_memory(const std::string& model, int64_t B, int64_t T, int cp,
                              CpKind kind = CpKind::ring) {
    Workload w;
    w.model = load_model(model);
    w.global_batch = B, w.seq_len = T;
    w.prec = precision("bf16");
    w.profile = MemoryProfile::engine;
    Candidate k;
    k.micro_batch = B;
    k.layout.dp = k.layout.tp = k.layout.pp = 1;
    k.layout.cp = cp, k.layout.cp_kind = kind;
    return stage_memory(w, one_device(), k, 0, 1);
}

}  // namespace

TEST(PlanBf16Memory, ActivationsAreWhatTheEngineAllocates) {
    const kernels::MatmulPrecisionScope bf16(kernels::MatmulPrecision::bf16);
    for (const char* name : {"gpt2", "llama-tiny"}) {
        const model::ModelConfig cfg = load_model(name).config;
        const int64_t B = 2, T = 64;
        const std::unique_ptr<model::Model> m = model::family_of(cfg).make(cfg, {}, nullptr, false);
        const model::LayerSpan span = m->activation_span();
        ASSERT_TRUE(span.bf16);
        EXPECT_EQ(engine_memory(name, B, T, 1).activations,
                  4.0 * double(model::family_of(cfg).activation_floats(cfg, B, T, span)))
            << name;
    }
}

// Ring context parallelism keeps no whole-sequence copies, and q, k, v and the attention output
// stay bf16 under it: a cp rank keeps what one rank holding its T/cp rows keeps.
TEST(PlanBf16Memory, ContextParallelKeepsWhatItsRowsKeep) {
    for (const char* name : {"gpt2", "llama-tiny"}) {
        const model::ModelConfig cfg = load_model(name).config;
        const int64_t B = 2, T = 64, cp = 2, s = T / cp;
        const double cp_bytes = engine_memory(name, B, T, int(cp)).activations;
        const double local_bytes = engine_memory(name, B, s, 1).activations;
        EXPECT_GT(cp_bytes, 0);
        EXPECT_DOUBLE_EQ(cp_bytes, local_bytes) << name;
    }
}
