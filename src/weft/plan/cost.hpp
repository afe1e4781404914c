#pragma once
// Step time of a candidate layout: per-layer compute from FLOPs and a shape-dependent GEMM
// efficiency, memory-bound kernels from bytes and memory bandwidth, collectives with
// latency-bandwidth (alpha-beta) costs on the link each mesh axis lands on, the pipeline from
// the shared schedule simulator (parallel/pipeline), and data-parallel reduction overlapped with
// the last backward. See docs/planner.md for every formula.
#include <array>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/plan/candidate.hpp"
#include "weft/plan/cluster.hpp"
#include "weft/plan/memory.hpp"

namespace weft::plan {

enum class MeshAxis { tp, cp, ep, dp, pp };

// Megatron's rank order (tp fastest, then cp, ep, dp, pp; see comm::Mesh): the members of an
// axis group are `stride` apart, stride = the product of the faster axes. ep folds over dp (it
// is the dp ranks' fastest part: ep's stride is tp x cp, dp's too, pp's tp x cp x dp). The group
// lies within one node when its whole extent stays inside a node's block of ranks.
struct Placement {
    int size = 1;
    bool inter_node = false;
    Link link;
};
Placement place_axis(const Cluster& c, const Layout& l, MeshAxis axis);

// Ring algorithms (the reference algorithms of docs/comm.md), n ranks, S bytes:
//   all-reduce 2(n-1)α + 2(n-1)/n · S/β; reduce-scatter, all-gather (n-1)α + (n-1)/n · S/β;
//   point-to-point α + S/β.
double all_reduce_time(const Placement& p, double bytes);
double reduce_scatter_time(const Placement& p, double bytes);  // == all-gather
double p2p_time(const Placement& p, double bytes);

// Mixture of experts with ep > 1: the bytes one rank sends in one of an MoE layer's four row
// all-to-alls (dispatch and combine forward, their mirrors backward) for one micro-batch of
// `tokens`: its k x tokens rows of width C, at the imbalance factor, of which (ep-1)/ep leave
// the rank (a balanced router sends each ep rank an equal share). fp32 rows under the engine
// profile (the engine's ExpertComm), else the activation size. 0 at ep 1.
double moe_all_to_all_bytes(const Workload& w, const Layout& l, double tokens);

struct Estimate {
    Candidate cand;
    int64_t micro_batches = 0;
    double step_s = 0, tokens_per_s = 0, mfu = 0;
    // Components of the step, seconds: the simulated pipeline (compute + tp/cp/ep collectives +
    // p2p + bubble), its bubble fraction, the parts of it that are collectives, the
    // data-parallel communication and what of it is not hidden, the optimizer step.
    double pipeline_s = 0, bubble = 0, tp_comm_s = 0, cp_comm_s = 0, pp_comm_s = 0, ep_comm_s = 0;
    double dp_comm_s = 0, dp_exposed_s = 0, optimizer_s = 0;
    // --offload (offload_time.hpp): the step's transfers to and from the offload files (bytes
    // and seconds at this rank's share of the node's disk), the optimizer's pass (which holds
    // the update, optimizer_s), whether it runs behind the next forward, and what of it the step
    // sees: the step is the pipeline, the exposed dp communication and this (not optimizer_s).
    bool offloaded = false, offload_behind = false;
    double offload_read_bytes = 0, offload_written_bytes = 0;
    double offload_io_s = 0, offload_pass_s = 0, offload_exposed_s = 0;
    // Packed documents (Workload::documents): what they did to this layout's attention.
    std::optional<DocumentMix> documents;
    MemoryBreakdown memory;  // of the pipeline stage that needs most
    int memory_stage = 0;
    double capacity = 0;
    std::vector<std::string> axes;  // "tp 8 intra-node", ...
    bool pruned = false;            // step_s is only a lower bound (EvalCache::prune_above)
};

// What a search shares between evaluations. The most activations each pipeline rank holds
// depends only on the order of its actions, not on their costs, so it is simulated once per
// schedule shape; whole simulations are reused when only the ZeRO stage differs.
struct EvalCache {
    std::map<std::array<int64_t, 4>, std::vector<int>> in_flight;  // (kind, pp, vpp, m)
    // Per rank, the micro-batches of each chunk held at its peak (held_at_peak), by shape and
    // the layers of every chunk.
    std::map<std::pair<std::array<int64_t, 4>, std::vector<int>>, std::vector<std::vector<double>>>
        held;
    std::map<std::vector<double>, std::pair<double, double>> sims;  // key -> (makespan, bubble)
    // The workload's model FLOPs per token (0: not yet counted). Counting builds the model's
    // parameter layout, which cost more than pricing a candidate.
    double flops_per_token = 0;
    // Packed documents laid out for each (dp, micro-batch, cp ring, whether the ring runs the
    // per-document zigzag): the same for every other choice.
    std::map<std::tuple<int, int64_t, int, bool>, DocumentMix> documents;
    // When the compute alone (a lower bound of the pipeline time) exceeds this, the estimate
    // is returned with `pruned` set and no pipeline simulated: it cannot make the top list.
    double prune_above = std::numeric_limits<double>::infinity();
};

// Makespan and bubble of one step's pipeline: the schedule of `l` (pp_schedule, pp, vpp) for
// `micro_batches`, run by the shared simulator (parallel/pipeline/simulator.hpp) with `costs`.
std::pair<double, double> simulate_pipeline(const Layout& l, int micro_batches,
                                            const pipeline::Costs& costs, EvalCache* cache);

// Throws weft::Error when the candidate is not valid for the workload (callers check first).
Estimate evaluate(const Workload& w, const Cluster& c, const Candidate& k,
                  EvalCache* cache = nullptr);

}  // namespace weft::plan
