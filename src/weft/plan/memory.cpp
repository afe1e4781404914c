#include "weft/plan/memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/bf16_scratch.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/family.hpp"
#include "weft/model/params.hpp"
#include "weft/offload/state_files.hpp"
#include "weft/offload/streamed_state.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/parallel/pipeline/partition.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::plan {

double korthikanti_layer_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp,
                               int cp, bool sp, Recompute r, double activation_bytes,
                               AttentionKind attention) {
    const double s = double(seq) / cp, h = double(cfg.n_embd);
    const double t = tp, B = double(b), S = double(seq);
    const model::ActivationTerms k = model::family_of(cfg).korthikanti_terms(cfg);
    double bytes;
    if (r == Recompute::full) {
        bytes = 2 * s * B * h;
    } else {
        bytes = s * B * (sp ? (k.replicated + k.split) / t : k.replicated + k.split / t);
        // Scores over the sequence, unless FlashAttention recomputes them from q, k, v.
        if (r == Recompute::none && attention == AttentionKind::scores)
            bytes += k.scores * s * S * B / t;
    }
    bytes *= activation_bytes / 2;
    if (attention == AttentionKind::flash) bytes += flash_lse_bytes(cfg, seq, b, tp, cp, r);
    return bytes;
}

double flash_lse_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, int cp,
                       Recompute r) {
    if (r == Recompute::full) return 0;
    return 4.0 * double(cfg.n_head) / tp * double(seq) / cp * double(b);
}

double fp8_saved_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, int cp,
                       bool sp, Recompute r) {
    if (r == Recompute::full) return 0;
    const model::ActivationTerms k = model::family_of(cfg).korthikanti_terms(cfg);
    const double t = tp;
    // Counted at two bytes an element; fp8 keeps one of them.
    return double(seq) / cp * double(b) *
           (sp ? (k.fp8_replicated + k.fp8_split) / t : k.fp8_replicated + k.fp8_split / t) / 2;
}

double fused_glu_saved_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, int cp,
                             Recompute r, double activation_bytes) {
    if (r == Recompute::full) return 0;
    const model::ActivationTerms k = model::family_of(cfg).korthikanti_terms(cfg);
    // A split term: each tp rank keeps its F/t columns, with or without sequence parallelism.
    return double(seq) / cp * double(b) * k.glu_product / tp * activation_bytes / 2;
}

double engine_layer_floats(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, bool sp,
                           Recompute r) {
    // What one more layer adds to the Activations the model allocates (the family's count):
    // with full recomputation only its input residual, the one recomputed layer's buffers being
    // there once.
    const model::Family& f = model::family_of(cfg);
    const bool full = r == Recompute::full;
    const int n = full ? 2 : 1;
    const model::LayerSpan more{0, n, false, full, tp, sp}, fewer{0, n - 1, false, full, tp, sp};
    return double(f.activation_floats(cfg, b, seq, more) - f.activation_floats(cfg, b, seq, fewer));
}

double engine_head_floats(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, bool sp) {
    const model::Family& f = model::family_of(cfg);
    const model::LayerSpan head{0, 0, true, false, tp, sp}, none{0, 0, false, false, tp, sp};
    return double(f.activation_floats(cfg, b, seq, head) - f.activation_floats(cfg, b, seq, none));
}

double moe_received_floats(const model::ModelConfig& cfg, int64_t tokens, int ep, double imbalance,
                           int tp) {
    if (cfg.n_experts == 0 || ep <= 1) return 0;
    const double rows = imbalance * double(tokens) * double(cfg.experts_per_token);
    return rows * (double(cfg.n_embd) + 3.0 * double(cfg.ffn()) / tp);
}

namespace {

// Model state of the engine on pipeline rank `stage` (tp rank 0: every tp rank holds the same
// sizes), exactly as TrainState allocates it: the family's tensors for this stage's units and
// this tp shard (model::build_param_layout, the Model's own layout), cut by ZeRO over the
// gradient group dp x cp, counted by parallel::zero_state_bytes and zero_working_bytes, the
// functions DataParallel itself reports. With ep > 1 the rank holds E/ep experts (the layout's
// own ep shard); at ZeRO >= 1 its expert tensors are cut over the expert-data-parallel group
// (dp/ep x cp ranks holding the same experts) and the rest over dp x cp, each part padded as
// ZeroLayout pads a unit. fp32 whatever the dtype: see docs/planner.md.
// Memoized: a search prices many candidates of few shapes, and building a layout declares
// every tensor.
struct EngineState {
    parallel::ModelStateBytes state;
    int64_t working = 0, unit0 = 0;  // unit0: this stage's padded embedding unit (floats)
};

EngineState engine_state(const model::ModelConfig& cfg, const Layout& l, int stage,
                         const std::string& pp_layers, double bucket_mb, bool bf16_reduce,
                         const std::string& optimizer, bool working_copy, bool copy_in_files) {
    static std::mutex mutex;
    static std::map<std::string, EngineState> cache;
    const std::string key =
        fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {}", l.tp, l.pp, l.vpp, stage,
                    l.dp * l.cp, l.ep, l.zero, bucket_mb, bf16_reduce, pp_layers, optimizer,
                    working_copy, copy_in_files, cfg.to_json().dump());
    {
        std::lock_guard lock(mutex);
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    model::ModelShard shard;
    if (l.pp > 1)
        shard.units =
            pipeline::partition_layers(int(cfg.n_layer), l, pp_layers).units_of(stage, cfg);
    shard.tp = l.tp;
    shard.ep = l.ep;
    // As the trainer lays out an ep shard (train::model_shard): expert runs aligned so that
    // ZeRO slices them over the expert-data-parallel group and the rest over dp.
    if (l.ep > 1) shard.expert_align = parallel::zero_expert_align(l.dp * l.cp);
    const model::ParamLayout full =
        model::build_param_layout(model::config_for_tp(cfg, l.tp), shard);
    const parallel::ZeroLayout z(full, l.dp * l.cp, 0);
    EngineState e{parallel::zero_state_bytes(z, l.zero, optimizer, working_copy, copy_in_files),
                  parallel::zero_working_bytes(
                      z, l.zero, int64_t(bucket_mb * (1 << 20)), bf16_reduce,
                      optim::find_optimizer(optimizer).gradients, working_copy, copy_in_files),
                  z.padded().units[0].size};
    std::lock_guard lock(mutex);
    cache.emplace(key, e);
    return e;
}

}  // namespace

double gpu_expert_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                             const std::string& pp_layers) {
    Layout whole = l;
    whole.tp = 1;
    return stage_expert_parameters(cfg, whole, stage, pp_layers) / l.tp;
}

MemoryBreakdown gpu_model_states(const Workload& w, const Layout& l, double psi, double psi_e) {
    // Rajbhandari et al. 2020 (ZeRO), Sec. 5.1 / Fig. 1: (2 + 2 + K)Psi per device for stage 0;
    // stage 1 divides the K term by Nd, stage 2 also the gradients, stage 3 also the parameters.
    // With experts, a device holds E/ep of them, cut by ZeRO over the dp/ep x cp ranks that hold
    // the same ones (the expert-data-parallel group); the rest over dp x cp.
    const Precision& p = w.prec;
    const double shards = double(l.dp) * l.cp, psi_d = psi - psi_e;
    const double eshards = double(l.dp * l.cp / l.ep), pe = psi_e / l.ep;
    MemoryBreakdown m;
    m.weights = p.param * (psi_d / (l.zero == 3 ? shards : 1) + pe / (l.zero == 3 ? eshards : 1));
    m.grads = p.grad * (psi_d / (l.zero >= 2 ? shards : 1) + pe / (l.zero >= 2 ? eshards : 1));
    m.optimizer =
        p.optimizer * (psi_d / (l.zero >= 1 ? shards : 1) + pe / (l.zero >= 1 ? eshards : 1));
    return m;
}

namespace {

// The output chunk c keeps per micro-batch in flight once sent (Workload::pp_outputs_kept): one
// [s/cp x b, h] boundary (/t with sequence parallelism) when its successor is on another rank.
double kept_chunk_output_bytes(const Workload& w, const Candidate& k, int stage, int c) {
    const Layout& l = k.layout;
    if (!w.pp_outputs_kept || l.pp == 1) return 0;
    if (c + 1 == l.pp * l.vpp || pipeline::chunk_owner(c + 1, l) == stage) return 0;
    const double boundary = double(w.seq_len / l.cp * k.micro_batch * w.model.config.n_embd) /
                            (l.sequence_parallel ? l.tp : 1);
    return boundary * w.prec.activation;
}

}  // namespace

double kept_output_bytes(const Workload& w, const Candidate& k, int stage) {
    double sum = 0;
    for (int c : pipeline::rank_chunks(stage, k.layout))
        sum += kept_chunk_output_bytes(w, k, stage, c);
    return sum / k.layout.vpp;
}

std::vector<double> held_at_peak(const pipeline::Schedule& s, int rank,
                                 const std::vector<int>& layers) {
    const std::vector<int> mine =
        pipeline::rank_chunks(rank, s.pp, s.vpp, pipeline::places_in_vee(s.kind));
    std::vector<double> held(mine.size(), 0), best = held;
    int64_t load = 0, most = -1, count = 0, most_count = 0;
    for (const pipeline::Action& a : s.ranks[size_t(rank)]) {
        const int sign =
            a.kind == pipeline::Action::forward ? 1
            : a.kind == pipeline::Action::backward || a.kind == pipeline::Action::backward_weight
                ? -1
                : 0;
        if (sign == 0) continue;
        const size_t i = size_t(std::find(mine.begin(), mine.end(), a.chunk) - mine.begin());
        WEFT_CHECK(i < mine.size(), "internal: rank {} runs chunk {}, not one of its own", rank,
                   a.chunk);
        held[i] += sign;
        load += sign * layers[size_t(a.chunk)];
        count += sign;
        if (load > most || (load == most && count > most_count))
            most = load, most_count = count, best = held;
    }
    return best;
}

OffloadedState offloaded_state(const Workload& w, const Candidate& k, int stage) {
    if (w.profile != MemoryProfile::engine || w.offload_group_floats <= 0) return {};
    const EngineState e =
        engine_state(w.model.config, k.layout, stage, k.pp_layers, w.bucket_mb,
                     w.prec.grad_wire == 2, w.optimizer, w.bf16_working_copy, w.params_offloaded);
    const double copy =
        e.state.copy_files > 0 ? double(e.state.copy_files) / 2 - double(offload::kHeaderBytes) : 0;
    return {double(e.state.optimizer), double(e.state.master), copy,
            copy > 0 ? 4.0 * double(e.unit0) : 0};
}

MemoryBreakdown stage_memory(const Workload& w, const Cluster& c, const Candidate& k, int stage,
                             int in_flight) {
    return stage_memory(
        w, c, k, stage,
        std::vector<double>(size_t(k.layout.vpp), double(in_flight) / k.layout.vpp));
}

MemoryBreakdown stage_memory(const Workload& w, const Cluster& c, const Candidate& k, int stage,
                             const std::vector<double>& held) {
    const model::ModelConfig& cfg = w.model.config;
    const Layout& l = k.layout;
    const Precision& p = w.prec;
    const int64_t b = k.micro_batch, T = w.seq_len, s = T / l.cp;
    // The layers of this stage's chunks, on average per chunk (in-flight counts are of chunks),
    // placed as the schedule places them (zb-v: in a V).
    const std::vector<int> counts = chunk_layers(cfg, l, k.pp_layers);
    const std::vector<int> mine = pipeline::rank_chunks(stage, l);
    WEFT_CHECK(held.size() == mine.size(), "internal: {} in-flight counts for {} chunks",
               held.size(), mine.size());
    const int chunks = l.pp * l.vpp;
    double stage_layers = 0, in_flight = 0, held_layers = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
        stage_layers += counts[size_t(mine[i])];
        in_flight += held[i];
        held_layers += held[i] * counts[size_t(mine[i])];
    }
    // The stages of the embedding and of the head: one in a V.
    const bool first = pipeline::chunk_owner(0, l) == stage,
               last = pipeline::chunk_owner(chunks - 1, l) == stage;
    // The engine stores scratch and model state in fp32 whatever --dtype is; the families count
    // their activations in floats' worth of bytes, bf16 buffers at half a float each.
    constexpr double kEngineBytes = sizeof(float);
    const double psi = stage_parameters(cfg, l, stage, k.pp_layers);
    const double per_layer_params = unit_parameters(cfg, l.tp, 1);
    MemoryBreakdown m;
    m.runtime = c.device.runtime_bytes;

    if (w.profile == MemoryProfile::engine) {
        const EngineState e =
            engine_state(cfg, l, stage, k.pp_layers, w.bucket_mb, p.grad_wire == 2, w.optimizer,
                         w.offload_group_floats > 0 && w.bf16_working_copy,
                         w.offload_group_floats > 0 && w.params_offloaded);
        m.weights = double(e.state.params);
        m.grads = double(e.state.grads);
        m.optimizer = double(e.state.optimizer);
        if (w.offload_group_floats > 0) {
            // With the working copy the master is one more stream, and a group's gradients are
            // widened beside the pool (train::TrainState::step).
            const bool master = e.state.master > 0;
            m.offloaded = m.optimizer + double(e.state.master) + double(e.state.copy_files);
            if (e.state.copy_files > 0)
                m.offloaded_params = double(e.state.master) + double(e.state.copy_files);
            std::vector<double> widths = optim::offload_widths(w.optimizer);
            if (master) widths.push_back(4.0);
            m.optimizer =
                widths.empty() ? 0.0 : double(offload::pool_bytes(w.offload_group_floats, widths));
            if (master && optim::find_optimizer(w.optimizer).gradients)
                m.optimizer += 4.0 * double(w.offload_group_floats);
        }
        m.buffers += double(e.working);
        // The Activations of each of this stage's chunks, as the model allocates them (the
        // family's count), times the micro-batches the schedule holds at once per chunk, as
        // train::PipelineStage keeps them. Full recomputation keeps each layer's input and one
        // layer's buffers per micro-batch; selective recomputation is not the engine's. Ulysses
        // (and the hybrid) also keep each layer's whole-sequence q, k, v, out of its heads.
        // Under bf16 the family keeps its activations as bf16 (LayerSpan::bf16), with or without
        // context parallelism.
        const model::Family& f = model::family_of(cfg);
        const bool ulysses_kept = l.cp > 1 && l.cp_kind != CpKind::ring;
        const bool bf16 = p.name == "bf16";
        double floats = 0;
        for (int c : mine) {
            int first_layer = 0;
            for (int before = 0; before < c; ++before) first_layer += counts[before];
            floats += double(model::activation_floats(
                cfg, b, s,
                {first_layer, counts[c], c == chunks - 1, l.recompute == Recompute::full, l.tp,
                 l.sequence_parallel, ulysses_kept, bf16, splits_backward(l.pp_schedule)}));
        }
        // Expert parallelism: each MoE layer also keeps the rows its experts received.
        const double layers = stage_layers;
        floats += layers * moe_received_floats(cfg, b * s, l.ep, moe_imbalance(w));
        m.activations = kEngineBytes * floats * in_flight / l.vpp;
        // Backward scratch (the family's) and the classifier's logits chunk.
        double scratch = double(f.scratch_floats(cfg, b, s, 1, false)) / l.tp;
        // ... and with ep > 1 the experts' scratch over the received rows (outputs, their
        // gradients, the gradients of gate|up and of the product: 2C + 3F a row, one layer's).
        if (l.ep > 1)
            scratch += moe_received_floats(cfg, b * s, l.ep, moe_imbalance(w)) /
                       double(cfg.n_embd + 3 * cfg.ffn()) * double(2 * cfg.n_embd + 3 * cfg.ffn());
        if (last)
            scratch += double(kernels::classifier_scratch_floats(b * s, cfg.vocab_size)) / l.tp;
        // Context parallel: the region's own scratch (ring blocks, Ulysses' staging) for this
        // tp rank's heads (CpAttention::scratch_floats), TokenRing's when the ring runs both
        // ways; and the positions one of its attention calls sees (the whole sequence without).
        int64_t call = s;
        if (l.cp > 1) {
            const model::CpRegion region =
                l.cp_kind == CpKind::ring
                    ? (l.ring_bidirectional ? model::CpRegion::token_ring : model::CpRegion::ring)
                : l.cp_kind == CpKind::ulysses ? model::CpRegion::ulysses
                                               : model::CpRegion::hybrid;
            const int U = l.cp_kind == CpKind::hybrid ? std::max(l.cp_ulysses, 1) : 1;
            scratch += double(model::CpAttention::scratch_floats(
                region, b, s, cfg.n_head / l.tp, cfg.kv_heads() / l.tp, cfg.head_dim(), U, bf16));
            call = model::cp_call_length(region, s, l.cp, U);
        }
        m.buffers += kEngineBytes * scratch;
        // With a pipeline, the first and last stages each receive the other's gradient of the
        // tied embeddings (the embedding unit as this tp rank stores it) to sum them; an
        // untied head needs no exchange, nor a V, whose one end stage holds both.
        if (cfg.tie_embeddings && l.pp > 1 && first != last)
            m.buffers += kEngineBytes * double(e.unit0);
        // bf16's per-thread operand copies, and the widened fp32 buffers where this machine
        // emulates bf16 products; and the bf16 attention kernel's scratch for its calls.
        if (bf16) {
            m.buffers += double(model::bf16_operand_scratch_bytes(
                cfg, b, s, l.tp, last, !kernels::bf16_products_native()));
            m.buffers += double(model::bf16_attention_scratch_bytes(cfg, call, l.tp));
        }
        return m;
    }

    const double psi_e = gpu_expert_parameters(cfg, l, stage, k.pp_layers);
    const MemoryBreakdown states = gpu_model_states(
        w, l, psi - stage_expert_parameters(cfg, l, stage, k.pp_layers) + psi_e, psi_e);
    m.weights = states.weights, m.grads = states.grads, m.optimizer = states.optimizer;

    const double sbh = double(s * b * cfg.n_embd);
    const double t = l.tp;
    // What a layer keeps under recomputation r, less what fp8 products and a fused SwiGLU do
    // not keep.
    auto kept_bytes = [&](Recompute r) {
        double bytes = korthikanti_layer_bytes(cfg, T, b, l.tp, l.cp, l.sequence_parallel, r,
                                               p.activation, w.attention);
        if (p.name == "fp8")
            bytes -= fp8_saved_bytes(cfg, T, b, l.tp, l.cp, l.sequence_parallel, r);
        if (w.glu == GluBackward::fused)
            bytes -= fused_glu_saved_bytes(cfg, T, b, l.tp, l.cp, r, p.activation);
        return bytes;
    };
    const double layer_bytes = kept_bytes(l.recompute);
    m.activations = held_layers * layer_bytes;
    for (size_t i = 0; i < mine.size(); ++i)
        m.activations += held[i] * kept_chunk_output_bytes(w, k, stage, mine[i]);
    // Korthikanti et al. Sec. 4.3: the embedding dropout mask (sbh bytes per micro-batch in
    // flight on the first chunk, / t with sequence parallelism; none in a family without
    // dropout) on the first stage; on the last, the final norm and output projection inputs
    // (4sbh/t) and the fp32 logits of the cross entropy (4sbv/t).
    const double mask = double(s * b) * model::family_of(cfg).korthikanti_terms(cfg).embedding /
                        (l.sequence_parallel ? t : 1);
    for (size_t i = 0; i < mine.size(); ++i)
        if (mine[i] == 0) m.activations += held[i] * mask;
    // Expert parallelism: the rows each MoE layer's experts receive (at the activation size).
    m.activations +=
        held_layers * moe_received_floats(cfg, b * s, l.ep, moe_imbalance(w), l.tp) * p.activation;
    if (last) m.activations += 4 * sbh / t + 4 * double(s * b * tp_padded_vocab(cfg, l.tp)) / t;

    const double bucket = w.bucket_mb * (1 << 20);
    if (l.zero >= 2) m.buffers += 2 * bucket;  // reduce-scatter buckets in flight
    if (l.zero == 3) m.buffers += 2 * per_layer_params * p.param;  // gathered + prefetched layer
    if (l.pp > 1) m.buffers += 4 * sbh / (l.sequence_parallel ? t : 1) * p.activation;  // p2p
    // All-gather context parallelism: one layer's whole-sequence K and V, gathered.
    if (l.cp > 1 && k.cp_all_gather)
        m.buffers +=
            2.0 * double(T * b) * double(cfg.kv_heads() * cfg.head_dim()) / t * p.activation;
    if (l.recompute == Recompute::full)  // the layer being recomputed holds its full activations
        m.buffers += kept_bytes(Recompute::none);
    return m;
}

}  // namespace weft::plan
