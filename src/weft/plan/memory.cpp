#include "weft/plan/memory.hpp"

#include <algorithm>

#include "weft/kernels/classifier.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::plan {

double korthikanti_layer_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp,
                               int cp, bool sp, Recompute r, double activation_bytes) {
    const double s = double(seq) / cp, h = double(cfg.n_embd), a = double(cfg.n_head);
    const double t = tp, B = double(b), S = double(seq);
    const double sbh = s * B * h;
    double bytes;
    if (r == Recompute::full) {
        bytes = 2 * sbh;
    } else {
        bytes = sbh * (sp ? 34 / t : 10 + 24 / t);
        if (r == Recompute::none) bytes += 5 * a * s * S * B / t;  // the 5as/(ht) term, times sbh
    }
    return bytes * activation_bytes / 2;
}

double engine_layer_floats(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, bool sp,
                           Recompute r) {
    const double BT = double(b * seq), C = double(cfg.n_embd), t = tp;
    if (r == Recompute::full) return BT * C;  // the block's input residual
    // As model::Activations allocates them: qkv, atty, fch, fch_gelu (12C) are split over tp;
    // resid and resid2 (2C) and the LayerNorm statistics are replicated, or 1/tp of the rows
    // with sequence parallelism; ln1 and ln2 (2C), the inputs of the column-parallel
    // projections, are kept whole either way (all-gathered under sequence parallelism, not
    // gathered again in backward: docs/tensor_parallel.md).
    const double rows = sp ? 1 / t : 1;
    const double width = 2 * C + 2 * C * rows + 12 * C / t;
    return BT * width + 4 * BT * rows + double(b * cfg.n_head * seq) / t;
}

namespace {

// Model state of the engine, exactly as parallel::DataParallel::model_state_bytes and
// working_bytes count it (padded ZeRO layout, 16·dp-float slices, gradient buckets).
void engine_exact_state(const Workload& w, const Candidate& k, MemoryBreakdown& m) {
    const model::ModelConfig& cfg = w.model.config;
    const parallel::ZeroLayout z(model::build_param_layout(cfg), k.layout.dp, 0);
    const int stage = k.layout.zero;
    const double total = double(z.padded().total), shard = double(z.shard_floats());
    m.weights = 4 * (stage == 3 ? shard : total);
    m.grads = 4 * (stage >= 2 ? shard : total);
    m.optimizer = 2 * 4 * (stage == 0 ? total : shard);
    int64_t bucket = 0, unit = 0;
    for (const parallel::Bucket& b : parallel::make_buckets(z, int64_t(w.bucket_mb * (1 << 20))))
        bucket = std::max(bucket, b.end - b.begin);
    for (const model::Unit& u : z.padded().units) unit = std::max(unit, u.size);
    m.buffers += 4.0 * double((stage >= 2 ? 3 * bucket : 0) + (stage == 3 ? 3 * unit : 0));
}

}  // namespace

MemoryBreakdown stage_memory(const Workload& w, const Cluster& c, const Candidate& k, int stage,
                             int in_flight) {
    const model::ModelConfig& cfg = w.model.config;
    const Layout& l = k.layout;
    const Precision& p = w.prec;
    const int64_t b = k.micro_batch, T = w.seq_len, s = T / l.cp;
    const double layers_per_chunk = double(cfg.n_layer) / (l.pp * l.vpp);
    const bool first = stage == 0, last = stage == l.pp - 1;
    const double shards = double(l.dp) * l.cp;  // ZeRO shards over the gradient group, dp x cp
    const double psi = stage_parameters(cfg, l, stage);
    const double per_layer_params = (12.0 * cfg.n_embd * cfg.n_embd + 7.0 * cfg.n_embd) / l.tp;
    MemoryBreakdown m;
    m.runtime = c.device.runtime_bytes;

    if (w.profile == MemoryProfile::engine) {
        const bool exact = l.tp == 1 && l.pp == 1 && l.cp == 1;
        if (exact) {
            engine_exact_state(w, k, m);
        } else {  // the same rules on the logical count of this stage
            m.weights = p.param * psi / (l.zero == 3 ? shards : 1);
            m.grads = p.grad * psi / (l.zero >= 2 ? shards : 1);
            m.optimizer = p.optimizer * psi / (l.zero >= 1 ? shards : 1);
            const double bucket = w.bucket_mb * (1 << 20);
            m.buffers +=
                (l.zero >= 2 ? 3 * bucket : 0) + (l.zero == 3 ? 3 * per_layer_params * p.param : 0);
        }
        // model::Activations::floats = L * per_block + the head's 3C + 5 per token.
        const double per_layer =
            engine_layer_floats(cfg, s, b, l.tp, l.sequence_parallel, k.recompute);
        const double BT = double(b * s);
        double floats = in_flight * layers_per_chunk * per_layer;
        if (last) floats += BT * double(cfg.n_embd) * 3 + BT * 3 + 2 * BT;
        m.activations = p.activation * floats;
        // Backward scratch (Gpt2::scratch_floats) and the classifier's logits chunk.
        double scratch = double(model::Gpt2::scratch_floats(cfg, b, s)) / l.tp;
        if (last)
            scratch += double(kernels::classifier_scratch_floats(b * s, cfg.vocab_size)) / l.tp;
        if (k.recompute == Recompute::full)  // one block's activations while it is recomputed
            scratch += engine_layer_floats(cfg, s, b, l.tp, l.sequence_parallel, Recompute::none);
        m.buffers += p.activation * scratch;
        // With a pipeline, the first and last stages each receive the other's gradient of the
        // tied embeddings (wte's rows of this tp rank, and wpe) to sum them.
        if (l.pp > 1 && (first || last))
            m.buffers += p.grad * double(tp_padded_vocab(cfg, l.tp) / l.tp + cfg.n_positions) *
                         double(cfg.n_embd);
        return m;
    }

    // Rajbhandari et al. 2020 (ZeRO), Sec. 5.1 / Fig. 1: (2 + 2 + K)Ψ per device for stage 0;
    // stage 1 divides the K term by Nd, stage 2 also the gradients, stage 3 also the parameters.
    m.weights = p.param * psi / (l.zero == 3 ? shards : 1);
    m.grads = p.grad * psi / (l.zero >= 2 ? shards : 1);
    m.optimizer = p.optimizer * psi / (l.zero >= 1 ? shards : 1);

    const double sbh = double(s * b * cfg.n_embd);
    const double t = l.tp;
    m.activations = in_flight * layers_per_chunk *
                    korthikanti_layer_bytes(cfg, T, b, l.tp, l.cp, l.sequence_parallel, k.recompute,
                                            p.activation);
    // Korthikanti et al. Sec. 4.3: the embedding dropout mask (sbh bytes per micro-batch in
    // flight, / t with sequence parallelism) on the first stage; on the last, the final norm and
    // output projection inputs (4sbh/t) and the fp32 logits of the cross entropy (4sbv/t).
    if (first) m.activations += in_flight * sbh / (l.sequence_parallel ? t : 1);
    if (last) m.activations += 4 * sbh / t + 4 * double(s * b * tp_padded_vocab(cfg, l.tp)) / t;

    const double bucket = w.bucket_mb * (1 << 20);
    if (l.zero >= 2) m.buffers += 2 * bucket;  // reduce-scatter buckets in flight
    if (l.zero == 3) m.buffers += 2 * per_layer_params * p.param;  // gathered + prefetched layer
    if (l.pp > 1) m.buffers += 4 * sbh / (l.sequence_parallel ? t : 1) * p.activation;  // p2p
    if (k.recompute == Recompute::full)  // the layer being recomputed holds its full activations
        m.buffers += korthikanti_layer_bytes(cfg, T, b, l.tp, l.cp, l.sequence_parallel,
                                             Recompute::none, p.activation);
    return m;
}

}  // namespace weft::plan
