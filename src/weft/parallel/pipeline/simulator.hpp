#pragma once
// Event-driven simulation of a pipeline schedule: the one place that turns action lists and costs
// into times. The `weft pipeline` command, the tests and the planner (with measured costs) all use
// it. Model of a run:
// - each rank executes its actions in order, one at a time;
// - forward / backward of chunk c take forward_cost(c) / backward_cost(c);
// - a send occupies its rank for `send` and never blocks; its message arrives `latency` later;
// - a recv blocks until its message has arrived, then completes at once;
// - with Costs::cores, the ranks share that many processors: each rank computing or sending
//   progresses at min(1, cores / such ranks) of its speed (processor sharing, as the scheduler of
//   a node whose ranks outnumber its cores gives each runnable rank an equal share);
// - with Costs::rank_core, each rank is bound to one core and shares it only with the ranks bound
//   to the same one: at 1 / (such ranks computing or sending on its core).
#include <string>
#include <vector>

#include "weft/parallel/pipeline/schedule.hpp"

namespace weft::pipeline {

// Time per chunk, in any unit (unit costs for theory, seconds when measured). The bubble formulas
// hold exactly with forward = f, backward = 2f (any f > 0), send = latency = 0; see
// docs/pipeline.md.
struct Costs {
    double forward = 1, backward = 2, send = 0, latency = 0;
    // Split schedules: the share of a backward that is W (the weights' gradients); B takes the
    // rest. A linear layer's backward is two products of the forward's size, one for each.
    double weight_share = 0.5;
    // Optional per-chunk costs (size pp * vpp) that override forward / backward, e.g. measured
    // times or an uneven layer split. Per-rank costs are the case chunk_x[c] = x[c % pp].
    // chunk_weight overrides weight_share: W's time per chunk (at most its backward; B takes the
    // rest), as measured, since a head's or an embedding's backward has no W to speak of.
    std::vector<double> chunk_forward, chunk_backward, chunk_weight;
    // Processors the ranks share (not necessarily whole: a node's cores divided among the
    // pipelines it holds); 0 gives every rank its own, and so does any value >= pp, to the bit.
    // The costs are then the work of an action at full speed (its CPU time when measured).
    double cores = 0;
    // Per rank (size pp), the core it is bound to: ranks of the same value share that one core,
    // ranks of different values never wait for each other's. Binding makes the sharing known:
    // the kernel moves unbound ranks between cores as it likes, and 3 ranks on 2 cores do not
    // each get 2/3 of one. Empty: `cores` decides; with it, `cores` must be 0.
    std::vector<int> rank_core;

    double forward_cost(int chunk) const;
    double backward_cost(int chunk) const;  // B + W in split schedules
    double weight_cost(int chunk) const;    // W
    // The time of a compute action: forward, fused backward, B or W.
    double cost(const Action& a) const;
};

// Throws weft::Error for per-chunk vectors of a size other than 0 or `chunks`, negative costs or
// cores, a weight share outside [0, 1], a chunk's W longer than its backward, or a rank_core of a
// size other than 0 or `pp`, with a negative core or beside `cores`.
void check_costs(const Costs& costs, int chunks, int pp);

// Costs of one whole pipeline stage spread evenly over its vpp chunks, so that schedules with
// different vpp compare at equal work per rank: forward / vpp and backward / vpp per chunk.
Costs stage_costs(int vpp, double forward = 1, double backward = 2);

struct TimedAction {
    double start, end;  // for a recv, [time the rank reached it, time its message had arrived]
    Action action;
};

struct SimResult {
    double makespan = 0;  // time at which the last rank finishes
    double bubble = 0;    // 1 - total compute / (pp * makespan)
    // Per rank: time computing; time busy (computing or sending); idle = makespan - busy. Wall
    // times: with shared cores an action can last longer than its cost.
    std::vector<double> compute, busy, idle;
    // Per rank: most (micro, chunk) activations held at once (forward done, backward not yet;
    // in split schedules, W not yet).
    // With vpp == 1 this counts micro-batches; with interleaving each unit is 1/vpp of a stage.
    std::vector<int> peak_in_flight;
    std::vector<std::vector<TimedAction>> timeline;  // per rank, in execution order
};

// Simulates `s` (which should have passed validate()). Throws weft::Error if the schedule
// deadlocks, i.e. no rank can progress while some have actions left; the message names every
// stuck rank, the action it is blocked on and why (its message is sent later in a blocked rank's
// list, or never). Also throws for costs of the wrong size or negative.
SimResult simulate(const Schedule& s, const Costs& costs);

// The bubble fraction of the papers: (p-1)/(m+p-1) for gpipe and 1f1b (Huang et al. 2019,
// Narayanan et al. 2021), (p-1)/(v*m+p-1) for interleaved; for zb-h1 (p-1)/(3m+p-1), the
// bubble (p-1)(F+B-2W) of Qi et al. 2024 at F = B = W; for zb-v 0 (the paper's schedule has none
// once m >= 2p at F = B = W; the simulated one says what is left).
double ideal_bubble(ScheduleKind kind, int pp, int vpp, int micro_batches);

}  // namespace weft::pipeline
