#include "weft/plan/cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <tuple>

#include "weft/core/error.hpp"
#include "weft/data/balance.hpp"
#include "weft/model/counts.hpp"
#include "weft/model/family.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/plan/offload_time.hpp"

namespace weft::plan {

namespace {

// A group whose members are `stride` ranks apart, `size` of them: it stays inside a node when
// its extent fits in a node's block of ranks (and nodes hold whole blocks).
Placement place(const Cluster& c, int stride, int size) {
    Placement p;
    p.size = size;
    const int extent = stride * size;
    p.inter_node = !(extent <= c.devices_per_node && c.devices_per_node % extent == 0);
    p.link = p.inter_node ? c.inter : c.intra;
    // A group with g members in each node crosses nodes on g rails at once: NCCL runs one ring
    // (channel) per rail, each leaving the node once, so the node-crossing hops of the ring carry
    // 1/g of the data each (the hierarchical all-reduce's inter-node phase, reduce-scattered
    // within the node first). The per-device bandwidth is then g rails', up to NVLink's.
    if (p.inter_node && stride < c.devices_per_node) {
        const int g = std::min(size, c.devices_per_node / stride);
        p.link.bandwidth = std::min(c.intra.bandwidth, c.inter.bandwidth * g);
    }
    return p;
}

// Per-layer and per-chunk costs of one micro-batch on one device, seconds.
struct LayerCost {
    double fwd = 0, bwd = 0, tp = 0, cp = 0, ep = 0;  // tp / cp / ep: collectives in fwd + bwd
};

struct Model {
    const Workload& w;
    const Cluster& c;
    const Candidate& k;
    double peak, C, t, tokens, act;
    // Packed documents: rows a rank runs over its windows (padding: every per-token cost), and
    // the busiest rank's attention over a window's T^2 (1, 1 without documents).
    double rows, attention_share;
    Placement tp, cp, ep;
    // Products run at the dtype's peak and its fitted efficiency (fp8: Transformer Engine's fp8
    // GEMMs); attention and everything else at `peak`, the 16-bit one under fp8.
    double gemm_peak;
    GemmEfficiency gemm_eff;

    double overhead() const { return c.device.kernel_overhead; }
    // 2MNK FLOPs at the shape's efficiency.
    double gemm(double M, double N, double K) const {
        return 2 * M * N * K / (gemm_peak * gemm_eff(M, N, K)) + overhead();
    }
    // Forward GEMM [M,K]x[K,N] and its two backward products: dX [M,N]x[N,K], dW [N,M]x[M,K].
    double gemm_fwd_bwd(double M, double N, double K, double& bwd) const {
        bwd += gemm(M, K, N) + gemm(N, K, M);
        return gemm(M, N, K);
    }
    double memory_bound(double elements, int calls) const {
        return elements * act / c.device.memory_bandwidth + calls * overhead();
    }

    LayerCost layer() const {
        LayerCost l;
        const double m = tokens;
        double bwd = 0, fwd = 0;
        // The block's matrix products as the model family declares them (GPT-2: QKV, attention
        // projection, MLP up and down; Llama: QKV with its kv heads, output, gate-up, down),
        // split the Megatron way (column-parallel: out / t; row-parallel: in / t).
        // Routed experts count the k a token goes to (active parameters); with ep > 1 the
        // busiest rank's experts multiply the imbalance factor times the balanced rows.
        const model::ModelConfig& cfg = w.model.config;
        const double routed_rows = k.layout.ep > 1 ? m * moe_imbalance(w) : m;
        for (const model::LinearShape& s : model::family_of(cfg).layer_linears(cfg)) {
            if (s.out == 0 || s.in == 0) continue;  // no shared experts: no product (0/0 otherwise)
            const double out = double(s.out), in = double(s.in);
            const bool routed = std::string_view(s.name).find(".experts.") != std::string::npos;
            const double rows = routed ? routed_rows : m;
            fwd += s.column_parallel ? gemm_fwd_bwd(rows, out / t, in, bwd)
                                     : gemm_fwd_bwd(rows, out, in / t, bwd);
        }
        // Causal attention core: 2·T·(heads·head width) FLOPs per token forward (QKᵀ and PV,
        // halved by the mask, as model::train_flops_per_token counts), backward
        // twice that.
        const double T = double(w.seq_len), A = double(cfg.n_head * cfg.head_dim());
        const double attn_f =
            2 * m / rows * T * attention_share * A / t / (peak * c.device.attention_efficiency) +
            overhead();
        const double attn_b = 2 * attn_f;
        // Memory-bound kernels per token: two LayerNorms and two residual adds (about 10C
        // elements read or written, replicated across tp unless sequence parallel) and the MLP's
        // activation (twice the feed-forward width over t: GELU's 4C in and out); backward
        // moves about twice as much.
        const double rep = k.layout.sequence_parallel ? t : 1;
        const double elems = m * (10 * C / rep + 2 * double(cfg.ffn()) / t);
        const double elem_f = memory_bound(elems, 5), elem_b = memory_bound(2 * elems, 6);
        // Tensor parallel (Shoeybi et al. 2019): two all-reduces of the [tokens, C] activation
        // in forward and two in backward; with sequence parallelism (Korthikanti et al. 2022)
        // an all-gather and a reduce-scatter replace each, moving the same bytes.
        double tp_f = t > 1 ? 2 * all_reduce_time(tp, m * C * act) : 0;
        // --tp-overlap (Megatron-Core's tp_comm_overlap): each collective is split in chunks
        // that run under the neighbouring product (Wang et al. 2022), so only what outlasts the
        // layer's products shows.
        if (w.tp_overlap) tp_f = std::max(0.0, tp_f - fwd);
        // Context parallelism (docs/context_parallel.md counts the bytes). Ring: each rank
        // receives the other ranks' K and V blocks (kv heads only), cp-1 shifts of 2·m·KV, while
        // it computes; backward also returns their gradients, about twice that; only the excess
        // over the attention compute shows. Ulysses: four all-to-alls of [m, width] each way (q,
        // k, v, out; dout, dq, dk, dv), (cp-1)/cp of each leaving the rank, in line with the
        // compute. The hybrid: Ulysses over groups of U, then a ring over the cp/U groups with
        // blocks of the same size (U times the rows, 1/U of the heads). TokenRing
        // (--ring-bidirectional): K/V stay home; forward a rank's queries (m·A) go one way while
        // the partial (out, lse) of the queries it served (m·(A + heads)) come back the other,
        // backward queries, dO, out and lse (m·(3A + heads)) one way and dQ (m·A) back. Both
        // directions of a link run at once, so each shift costs its larger direction.
        double cp_f = 0, cp_b = 0;
        if (k.layout.cp > 1) {
            const double KV = double(cfg.kv_heads() * cfg.head_dim());
            const CpKind kind = k.layout.cp_kind;
            const int U = kind == CpKind::ring      ? 1
                          : kind == CpKind::ulysses ? k.layout.cp
                                                    : std::max(1, k.layout.cp_ulysses);
            Placement ring = cp, heads = cp;
            ring.size = k.layout.cp / U, heads.size = U;
            // Bytes a value, as the engine sends them (model::CpAttention::forward): the
            // activations' width (bf16 under --dtype bf16) for what is only moved (the ring's
            // K/V blocks, Ulysses' q, k, v, out and dout, TokenRing's queries, dO and out);
            // fp32 for what is summed (the ring's travelling dK/dV, Ulysses' dq, dk, dv,
            // TokenRing's partial results and dQ) and the lse.
            const double kv = reduce_scatter_time(ring, 2 * m * ring.size * KV / t * act);
            const double dkv = reduce_scatter_time(ring, 2 * m * ring.size * KV / t * 4);
            const double a2a_f = 2 * reduce_scatter_time(heads, m * A / t * act) +
                                 2 * reduce_scatter_time(heads, m * KV / t * act);
            const double a2a_b = reduce_scatter_time(heads, m * A / t * act) +
                                 reduce_scatter_time(heads, m * A / t * 4) +
                                 2 * reduce_scatter_time(heads, m * KV / t * 4);
            cp_f = std::max(0.0, kv - attn_f) + a2a_f;
            cp_b = std::max(0.0, kv + dkv - attn_b) + a2a_b;
            if (k.cp_all_gather) {
                // Llama 3: every rank gathers the whole sequence's K and V (grouped-query
                // attention keeps them small) before attending with its own queries, and
                // reduce-scatters their gradients (fp32) in backward; not overlapped.
                Placement all = cp;
                all.size = k.layout.cp;
                cp_f = reduce_scatter_time(all, 2 * m * all.size * KV / t * act);
                cp_b = reduce_scatter_time(all, 2 * m * all.size * KV / t * 4);
            } else if (kind == CpKind::ring && k.layout.ring_bidirectional) {
                const double NH = double(cfg.n_head);
                const double q_f = std::max(A * act, (A + NH) * 4);
                const double q_b = std::max(3 * A * act + NH * 4, A * 4);
                cp_f = std::max(0.0, reduce_scatter_time(ring, m * ring.size * q_f / t) - attn_f);
                cp_b = std::max(0.0, reduce_scatter_time(ring, m * ring.size * q_b / t) - attn_b);
            }
        }
        // Expert parallelism: two row all-to-alls forward (dispatch, combine) and two backward,
        // in line with the compute (the experts wait for their rows).
        const double ep_f = k.layout.ep > 1
                                ? 2 * reduce_scatter_time(ep, moe_all_to_all_bytes(w, k.layout, m) *
                                                                  ep.size / (ep.size - 1))
                                : 0;
        l.fwd = fwd + attn_f + elem_f + tp_f + cp_f + ep_f;
        l.bwd = bwd + attn_b + elem_b + tp_f + cp_b + ep_f;
        l.tp = 2 * tp_f;
        l.cp = cp_f + cp_b;
        l.ep = 2 * ep_f;
        if (k.layout.recompute == Recompute::full) {  // the forward runs again inside backward
            l.bwd += l.fwd;
            l.tp += tp_f;
            l.cp += cp_f;
            l.ep += ep_f;
        } else if (k.layout.recompute == Recompute::selective) {
            l.bwd += attn_f;
        }
        return l;
    }

    // Embedding lookup and its gradient (first chunk); final norm, logits and cross entropy
    // (last chunk). With tp the vocabulary is split and the embedding output all-reduced.
    void ends(double& embed_f, double& embed_b, double& head_f, double& head_b,
              double& comm) const {
        const double m = tokens, V = double(tp_padded_vocab(w.model.config, k.layout.tp)) / t;
        const double ar = t > 1 ? all_reduce_time(tp, m * C * act) : 0;
        embed_f = memory_bound(3 * m * C, 1) + ar;
        embed_b = memory_bound(3 * m * C, 1);
        double bwd = 0;
        head_f = gemm_fwd_bwd(m, V, C, bwd) + memory_bound(2 * m * C + 2 * m * V, 2) + ar;
        head_b = bwd + memory_bound(2 * m * C + 2 * m * V, 2) + ar;
        comm = 3 * ar;
    }
};

}  // namespace

Placement place_axis(const Cluster& c, const Layout& l, MeshAxis axis) {
    // ep folds over dp: both start after cp, and dp's extent already spans ep's.
    switch (axis) {
        case MeshAxis::tp:
            return place(c, 1, l.tp);
        case MeshAxis::cp:
            return place(c, l.tp, l.cp);
        case MeshAxis::ep:  // ep consecutive ranks of cp x dp (MoE parallel folding)
            return place(c, l.tp, l.ep);
        case MeshAxis::dp:
            return place(c, l.tp * l.cp, l.dp);
        case MeshAxis::pp:
            return place(c, l.tp * l.cp * l.dp, l.pp);
    }
    fail("internal: mesh axis {}", int(axis));
}

double moe_all_to_all_bytes(const Workload& w, const Layout& l, double tokens) {
    const model::ModelConfig& cfg = w.model.config;
    if (cfg.n_experts == 0 || l.ep <= 1) return 0;
    const double bytes = w.profile == MemoryProfile::engine ? sizeof(float) : w.prec.activation;
    // With sequence parallelism each tp rank routes its 1/t of the tokens.
    const double share = l.sequence_parallel ? double(l.tp) : 1.0;
    return moe_imbalance(w) * double(cfg.experts_per_token) * tokens * double(cfg.n_embd) * bytes *
           (l.ep - 1) / l.ep / share;
}

double all_reduce_time(const Placement& p, double bytes) {
    if (p.size <= 1) return 0;
    const double n = p.size;
    return 2 * (n - 1) * p.link.latency + 2 * (n - 1) / n * bytes / p.link.bandwidth;
}

double reduce_scatter_time(const Placement& p, double bytes) {
    if (p.size <= 1) return 0;
    const double n = p.size;
    return (n - 1) * p.link.latency + (n - 1) / n * bytes / p.link.bandwidth;
}

double p2p_time(const Placement& p, double bytes) {
    return p.link.latency + bytes / p.link.bandwidth;
}

std::pair<double, double> simulate_pipeline(const Layout& l, int micro_batches,
                                            const pipeline::Costs& costs, EvalCache* cache) {
    const pipeline::ScheduleKind kind = l.pp_schedule;
    std::vector<double> key = costs.chunk_forward;
    key.insert(key.end(), costs.chunk_backward.begin(), costs.chunk_backward.end());
    key.insert(key.end(),
               {double(kind), double(l.pp), double(l.vpp), double(micro_batches), costs.forward,
                costs.backward, costs.send, costs.latency, costs.weight_share});
    if (cache)
        if (auto it = cache->sims.find(key); it != cache->sims.end()) return it->second;
    const pipeline::SimResult sim =
        pipeline::simulate(pipeline::make_schedule(kind, l.pp, l.vpp, micro_batches, costs), costs);
    std::pair<double, double> r{sim.makespan, sim.bubble};
    if (cache) cache->sims.emplace(std::move(key), r);
    return r;
}

Estimate evaluate(const Workload& w, const Cluster& c, const Candidate& k, EvalCache* cache) {
    const Layout& l = k.layout;
    const model::ModelConfig& cfg = w.model.config;
    Estimate e;
    e.cand = k;
    e.micro_batches = k.micro_batches(w);
    WEFT_CHECK(e.micro_batches >= 1 && e.micro_batches * l.dp * k.micro_batch == w.global_batch,
               "layout {}: global batch {} is not a multiple of dp x micro-batch", k.describe(),
               w.global_batch);
    const Placement tp = place_axis(c, l, MeshAxis::tp), cp = place_axis(c, l, MeshAxis::cp);
    const Placement pp = place_axis(c, l, MeshAxis::pp), ep = place_axis(c, l, MeshAxis::ep);
    const bool fp8 = w.prec.name == "fp8";
    EvalCache local;
    EvalCache& cc = cache ? *cache : local;
    if (w.documents) {
        const std::tuple<int, int64_t, int, bool> key{
            l.dp, k.micro_batch, data::balance_ring(l),
            data::per_document_ring(l, w.documents->balance) > 1};
        auto it = cc.documents.find(key);
        if (it == cc.documents.end()) {
            // The trainer's step cost (train/trainer.cpp), so that the layouts are its.
            const data::StepCost step_cost{model::attention_train_flops(cfg, 1),
                                           model::train_flops_per_token(cfg, 0)};
            DocumentMix mix = document_mix(
                *w.documents, w.global_batch, l.dp, k.micro_batch, data::balance_ring(l),
                data::per_document_ring(l, w.documents->balance) > 1, step_cost);
            mix.busiest_attention_flops = model::attention_train_flops(cfg, mix.busiest_squares);
            it = cc.documents.emplace(key, mix).first;
        }
        e.documents = it->second;
    }
    const double rows = e.documents ? e.documents->rows : 1;
    Model m{w,
            c,
            k,
            c.device.peak(fp8 ? "bf16" : w.prec.name),
            double(cfg.n_embd),
            double(l.tp),
            double(k.micro_batch * w.seq_len / l.cp) * rows,
            w.prec.activation,
            rows,
            e.documents ? e.documents->attention_kept * e.documents->imbalance : 1,
            tp,
            cp,
            ep,
            c.device.peak(w.prec.name),
            c.device.gemm_for(w.prec.name)};

    // Pipeline: chunk costs per micro-batch, the shared schedule generator and simulator.
    const LayerCost layer = m.layer();
    double embed_f, embed_b, head_f, head_b, head_comm;
    m.ends(embed_f, embed_b, head_f, head_b, head_comm);
    const int chunks = l.pp * l.vpp;
    const std::vector<int> counts = chunk_layers(cfg, l, k.pp_layers);
    pipeline::Costs costs;
    for (int ch = 0; ch < chunks; ++ch) {
        costs.chunk_forward.push_back(counts[ch] * layer.fwd + (ch == 0 ? embed_f : 0) +
                                      (ch == chunks - 1 ? head_f : 0));
        costs.chunk_backward.push_back(counts[ch] * layer.bwd + (ch == 0 ? embed_b : 0) +
                                       (ch == chunks - 1 ? head_b : 0));
    }
    double p2p = 0;
    if (l.pp > 1) {
        // Megatron's scatter-gather: with sequence parallelism each tp rank sends its 1/t.
        p2p = p2p_time(pp, m.tokens * m.C * m.act / (l.sequence_parallel ? m.t : 1));
        costs.send = c.device.kernel_overhead;
        costs.latency = p2p;
    }
    const pipeline::ScheduleKind kind = l.pp_schedule;
    const int mbs = int(e.micro_batches);
    const std::array<int64_t, 4> shape = {int64_t(kind), l.pp, l.vpp, mbs};
    auto fl = cc.in_flight.find(shape);
    if (fl == cc.in_flight.end()) {
        pipeline::SimResult unit =
            pipeline::simulate(pipeline::make_schedule(kind, l.pp, l.vpp, mbs), pipeline::Costs{});
        fl = cc.in_flight.emplace(shape, unit.peak_in_flight).first;
    }
    const std::vector<int>& in_flight = fl->second;
    // On GPUs, the chunks each rank holds at its peak, for stages whose chunks differ; the engine
    // profile counts the simulator's peak, as the engine's own estimate does.
    const std::vector<std::vector<double>>* held = nullptr;
    if (w.profile != MemoryProfile::engine) {
        const auto key = std::make_pair(shape, counts);
        auto hl = cc.held.find(key);
        if (hl == cc.held.end()) {
            const pipeline::Schedule s = pipeline::make_schedule(kind, l.pp, l.vpp, mbs);
            std::vector<std::vector<double>> ranks;
            for (int r = 0; r < l.pp; ++r) ranks.push_back(held_at_peak(s, r, counts));
            hl = cc.held.emplace(key, std::move(ranks)).first;
        }
        held = &hl->second;
    }
    const double M = double(e.micro_batches);
    e.tp_comm_s = M * (cfg.n_layer / l.pp * layer.tp + head_comm);
    e.cp_comm_s = M * cfg.n_layer / l.pp * layer.cp;
    e.ep_comm_s = M * cfg.n_layer / l.pp * layer.ep;
    e.pp_comm_s = l.pp > 1 ? 2 * M * p2p : 0;

    // Data parallel, on the stage with the most parameters; the gradient group is dp x cp.
    // Expert tensors (E/ep experts of them here) reduce over the expert-data-parallel group
    // instead, dp/ep x cp ranks: priced as one more reduction of their bytes on that group.
    double psi = 0, psi_e = 0, fwd_mb = 0, bwd_mb = 0;
    for (int r = 0; r < l.pp; ++r) {
        // On GPUs the experts split over tp (gpu_expert_parameters); the engine keeps them whole.
        const double stored_e = stage_expert_parameters(cfg, l, r, k.pp_layers);
        const double e = w.profile == MemoryProfile::engine
                             ? stored_e
                             : gpu_expert_parameters(cfg, l, r, k.pp_layers);
        const double total = stage_parameters(cfg, l, r, k.pp_layers) - stored_e + e;
        if (total > psi) psi = total, psi_e = e / l.ep;
        double f = 0, b = 0;
        for (int ch : pipeline::rank_chunks(r, l))
            f += costs.chunk_forward[ch], b += costs.chunk_backward[ch];
        fwd_mb = std::max(fwd_mb, f), bwd_mb = std::max(bwd_mb, b);
    }
    const double psi_d = psi - psi_e * l.ep;  // the dense part
    const Placement dpg = place(c, l.tp, l.cp * l.dp);
    Placement grad_group = dpg, expert_group = dpg;
    grad_group.size = l.dp * l.cp;
    expert_group.size = l.dp * l.cp / l.ep;
    auto over = [&](double (*op)(const Placement&, double), double per_param) {
        return op(grad_group, psi_d * per_param) + op(expert_group, psi_e * per_param);
    };
    // Buckets hold fp32 (prec.grad) gradients; each goes on the wire as prec.grad_wire bytes.
    const double G = (psi_d + psi_e) * w.prec.grad_wire;
    const double bucket = w.bucket_mb * (1 << 20) * w.prec.grad_wire / w.prec.grad;
    const double tail = all_reduce_time(grad_group, std::min(G, bucket));
    const double ar = over(all_reduce_time, w.prec.grad_wire),
                 rs = over(reduce_scatter_time, w.prec.grad_wire);
    const double ag = over(reduce_scatter_time, w.prec.param);
    double comm = 0, exposed = 0;
    if (grad_group.size > 1) {
        // Gradients are reduced bucket by bucket as backward produces them, so only what
        // outlasts the last micro-batch's backward shows, and at least the last bucket.
        switch (l.zero) {
            case 0:
                comm = ar, exposed = std::max(tail, ar - bwd_mb);
                break;
            case 1: {  // the engine all-reduces, Megatron's distributed optimizer reduce-scatters
                const double red = w.profile == MemoryProfile::engine ? ar : rs;
                // Updated shards are all-gathered while the next step's first forward runs.
                comm = red + ag,
                exposed = std::max(tail, red - bwd_mb) + std::max(0.0, ag - fwd_mb);
                break;
            }
            case 2:  // reduce-scatter every micro-batch (DeepSpeed, the engine)
                comm = M * rs + ag;
                exposed = M * std::max(tail / 2, rs - bwd_mb) + std::max(0.0, ag - fwd_mb);
                break;
            default:  // 3: gather before each forward and backward, prefetched one layer ahead
                // Backward's gathers and reduce-scatters share the links (a ring moves (n-1)/n
                // of each both ways), so together they have the backward to hide behind.
                comm = M * (2 * ag + rs);
                exposed = M * (std::max(0.0, ag - fwd_mb) + std::max(tail / 2, ag + rs - bwd_mb));
        }
    }
    if (!w.dp_overlap) exposed = comm;
    // Tied word embeddings: first and last stage all-reduce their gradient, unless one rank
    // holds both ends (zb-v's V).
    if (l.pp > 1 && pipeline::chunk_owner(0, l) != pipeline::chunk_owner(chunks - 1, l)) {
        Placement pair = pp;
        pair.size = 2;
        const double tied = all_reduce_time(
            pair, double(tp_padded_vocab(cfg, l.tp)) * m.C / m.t * w.prec.grad_wire);
        comm += tied, exposed += tied;
    }
    e.dp_comm_s = comm;
    e.dp_exposed_s = exposed;
    // AdamW is memory-bound: every state read and written once, plus the norm and zeroing.
    const double updated = psi_d / (l.zero >= 1 ? double(l.dp) * l.cp : 1) +
                           psi_e / (l.zero >= 1 ? double(l.dp * l.cp / l.ep) : 1);
    e.optimizer_s = updated * w.prec.update / c.device.memory_bandwidth + 4 * m.overhead();

    for (int r = 0; r < l.pp; ++r) {
        MemoryBreakdown mem = held ? stage_memory(w, c, k, r, (*held)[size_t(r)])
                                   : stage_memory(w, c, k, r, in_flight[r]);
        if (r == 0 || mem.total() > e.memory.total()) e.memory = mem, e.memory_stage = r;
    }
    e.capacity = c.device.memory_bytes;

    // Every rank computes all its chunks for every micro-batch: a lower bound of the pipeline.
    double busiest = 0;
    for (int r = 0; r < l.pp; ++r) {
        double t = 0;
        for (int ch : pipeline::rank_chunks(r, l))
            t += costs.chunk_forward[ch] + costs.chunk_backward[ch];
        busiest = std::max(busiest, M * t);
    }
    double update = e.optimizer_s;
    if (w.profile == MemoryProfile::engine && w.offload_group_floats > 0) {
        // The pass runs behind the next forward only with the bf16 copy in memory on one rank
        // (train::TrainState: nothing else touches the weights before that forward).
        e.offloaded = true;
        e.offload_behind = w.bf16_working_copy && !w.params_offloaded && l.world_size() == 1;
        const bool gathered = w.params_offloaded && l.zero == 1 && l.dp * l.cp > 1;
        // The node's ranks share its disk.
        const double sharing = std::min(l.world_size(), c.devices_per_node);
        const Disk disk{c.disk.read / sharing, c.disk.write / sharing};
        for (int r = 0; r < l.pp; ++r) {
            const OffloadTraffic t =
                offload_traffic(offloaded_state(w, k, r), e.micro_batches, gathered);
            const OffloadTime o =
                offload_time(t, disk, e.offload_behind, e.optimizer_s, fwd_mb - head_f, busiest);
            if (r > 0 && o.exposed_s <= e.offload_exposed_s) continue;
            e.offload_read_bytes = t.pass_read + t.norm_read + t.layers_read;
            e.offload_written_bytes = t.pass_written + t.layers_written;
            e.offload_io_s = o.io_s, e.offload_pass_s = o.pass_s;
            e.offload_exposed_s = o.exposed_s;
        }
        update = e.offload_exposed_s;
    }
    if (busiest + e.dp_exposed_s + update > cc.prune_above) {
        e.pruned = true;
        e.pipeline_s = busiest;
    } else {
        std::tie(e.pipeline_s, e.bubble) = simulate_pipeline(l, mbs, costs, &cc);
    }
    e.step_s = e.pipeline_s + e.dp_exposed_s + update;
    const double tokens = double(w.global_batch * w.seq_len);
    e.tokens_per_s = tokens / e.step_s;
    if (cc.flops_per_token == 0) cc.flops_per_token = model::train_flops_per_token(cfg, w.seq_len);
    e.mfu = cc.flops_per_token * e.tokens_per_s / (double(l.world_size()) * m.peak);

    const std::pair<const char*, MeshAxis> names[] = {{"tp", MeshAxis::tp},
                                                      {"cp", MeshAxis::cp},
                                                      {"ep", MeshAxis::ep},
                                                      {"dp", MeshAxis::dp},
                                                      {"pp", MeshAxis::pp}};
    for (auto [name, axis] : names) {
        Placement p = place_axis(c, l, axis);
        if (p.size > 1)
            e.axes.push_back(
                fmt::format("{} {} {}", name, p.size, p.inter_node ? "inter-node" : "intra-node"));
    }
    return e;
}

}  // namespace weft::plan
