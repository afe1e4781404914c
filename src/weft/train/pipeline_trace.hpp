#pragma once
// The measured pipeline timeline of one step, from every rank of world rank 0's pipeline, as one
// Chrome-trace JSON file that Perfetto opens (one track per rank).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/layout.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::train {

// The bubble of a measured step against what the simulator predicts from the step's own mean
// forward and backward times per chunk, and against the paper's formula.
struct BubbleReport {
    double measured = 0, simulated = 0, ideal = 0;
    double makespan_s = 0;
    // The processors the simulation shared between the stages, from each action's CPU time;
    // 0: one a stage, from wall times.
    double cores = 0;
    // Non-empty when the stages were bound to cores and the simulation shared each core only
    // among the stages bound to it (Costs::rank_core): per stage, its core.
    std::vector<int> rank_core;
    // Per stage: the one core its rank was bound to, -1 when it could run on more (recorded
    // whether or not the simulation shared them; write_pipeline_trace fills it).
    std::vector<int> stage_cores;
    // Per stage (pipeline rank): the share of the step it did not compute, measured and simulated.
    std::vector<double> idle_measured, idle_simulated;
    // Per stage: its peak resident memory so far and the activation bytes it allocated
    // (write_pipeline_trace gathers them; measure_bubble leaves them empty).
    std::vector<int64_t> peak_rss_bytes, activation_bytes;
    std::string describe() const;
};

// What this rank holds, for its stage's entry in the report.
struct StageMemory {
    int64_t peak_rss_bytes = 0, activation_bytes = 0;
};

// Collective over the mesh; world rank 0 writes `path` (atomically) and returns the bubble of
// its pipeline and each stage's memory (other ranks return zeros).
BubbleReport write_pipeline_trace(comm::Mesh& mesh, const pipeline::Schedule& schedule,
                                  const std::vector<pipeline::TraceRecord>& records,
                                  const StageMemory& memory, const std::filesystem::path& path);

// How the stages of a pipeline share processors: a pool of `cores` (Costs::cores), or each stage
// the core it is bound to (Costs::rank_core); neither: a processor a stage.
struct CoreSharing {
    double cores = 0;
    std::vector<int> rank_core;
    bool shared() const { return cores > 0 || !rank_core.empty(); }
};

// From one pipeline's records (rank = pipeline rank): busy time over ranks x makespan, and the
// simulation of `schedule` with the measured mean costs: the wall durations, or when the stages
// share processors the CPU times on them.
BubbleReport measure_bubble(const pipeline::Schedule& schedule,
                            const std::vector<pipeline::TraceRecord>& records,
                            const CoreSharing& sharing = {});

// Where a pipeline's stage runs.
struct StagePlace {
    int64_t node = 0;  // NodeShare's
    int node_ranks = 1, node_cores = 1;
    int threads = 1;  // the stage's OpenMP threads
    int core = -1;    // NodeShare's: the one core the stage's rank is bound to, or -1
};
// How the stages of a pipeline share processors, for measure_bubble, when they run one thread
// each on one node whose ranks outnumber its cores: when every rank of the node is one of the
// pipeline's and bound to one core, each stage shares its core with the stages bound to it (what
// the kernel does, to the run queue); else a pool of the pipeline's part of the node's cores (the
// node's other ranks, data-parallel replicas, run the same lists at the same time). Else none:
// with more threads a rank's thread CPU time misses its other threads' work, and across nodes
// the simulator has no model: those stay at a processor a stage, as before.
CoreSharing shared_cores(const std::vector<StagePlace>& stages);

// The costs per chunk a zero-bubble schedule was made for (measured in the first step; `cpu`:
// CPU times), and what that schedule gains over the one made for F = B = W, as the simulator
// sees it at those costs: a metrics line (event pipeline_costs) and a sentence for the log.
std::pair<nlohmann::json, std::string> stage_costs_report(const Layout& l, int micro_batches,
                                                          const pipeline::Costs& costs, bool cpu);

}  // namespace weft::train
