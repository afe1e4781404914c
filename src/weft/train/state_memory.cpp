#include "weft/train/state_memory.hpp"

#include "weft/kernels/classifier.hpp"
#include "weft/kernels/classifier_parallel.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/bf16_scratch.hpp"
#include "weft/model/family.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/train/state_checkpoint.hpp"

namespace weft::train {

int64_t activation_bytes(const TrainState& st) {
    if (const PipelineStage* stage = st.stage()) return stage->activation_bytes();
    const model::Model& model = st.model();
    const model::ModelConfig& cfg = model.config();
    const model::Activations& act = st.activations();
    return 4 * model::family_of(cfg).activation_floats(
                   cfg, act.B, act.T, model.activation_span({0, -1, true, act.recompute}));
}

MemoryEstimate memory_estimate(const TrainState& st, int64_t baseline_rss, int64_t micro_batches) {
    const parallel::DataParallel& dp = st.dp();
    const model::Model& model = st.model();
    const model::ModelConfig& cfg = model.config();
    const model::Activations& act = st.activations();
    const parallel::ModelStateBytes b = st.model_state_bytes();  // --offload: the pool
    MemoryEstimate m = estimate_memory(cfg, b.params, b.grads, b.optimizer, dp.working_bytes(),
                                       act.B, act.T, baseline_rss);
    if (const PipelineStage* stage = st.stage()) {
        // The schedule says how many micro-batches this rank holds at once.
        const Layout& l = st.layout();
        const pipeline::Schedule s =
            pipeline::make_schedule(l.pp_schedule, l.pp, l.vpp, int(micro_batches));
        const int in_flight = pipeline::simulate(s, {}).peak_in_flight[size_t(st.pipeline_rank())];
        m.activations = 4 * stage->activation_floats(in_flight, s.split_backward());
    } else {
        m.activations = activation_bytes(st);
    }
    // The model's backward scratch, and the head's logits chunk (for 1/tp of the vocabulary)
    // on the one rank of a pipeline that runs the head (zb-v: the first), as the planner counts
    // them: the first stage of gpt2 at pp 2 had its estimate 7.5% over its peak for the 196 MiB
    // chunk.
    const int tp = st.mesh().size(comm::Axis::tp);
    const pipeline::Partition& part = st.partition();
    const bool head = !st.stage() || st.pipeline_rank() == part.owner(part.chunks() - 1);
    const int64_t BT = act.B * act.T;
    const int64_t logits =
        !head    ? 0
        : tp > 1 ? kernels::classifier_shard_scratch_floats(BT, cfg.padded_vocab() / tp)
                 : kernels::classifier_scratch_floats(BT, cfg.vocab_size);
    m.scratch = 4 * (model::family_of(cfg).scratch_floats(cfg, act.B, act.T, tp,
                                                          model.sequence_parallel()) +
                     logits);
    m.scratch += st.tied_embedding().scratch_bytes();
    // Context parallel: the ring's blocks or Ulysses' staging, one set for every layer.
    m.scratch += 4 * model.cp_scratch_floats(act.B, act.T);
    if (kernels::matmul_precision() == kernels::MatmulPrecision::bf16) {
        m.bf16_operands = model::bf16_operand_scratch_bytes(cfg, act.B, act.T, tp, head,
                                                            !kernels::bf16_products_native());
        // The bf16 kernel's scratch for what one call sees: the whole sequence, or a cp
        // region's calls.
        m.bf16_attention =
            model::bf16_attention_scratch_bytes(cfg, model.attention_call_length(act.T), tp);
    }
    m.checkpoint += save_state_bytes(st);
    return m;
}

}  // namespace weft::train
