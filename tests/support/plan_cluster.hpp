#pragma once
// A made-up cluster for the planner's tests: `nodes` nodes of 8 devices of 80 GiB, fast links
// inside a node and slower ones between. Each test changes the fields it is about.
#include "weft/plan/candidate.hpp"
#include "weft/plan/cluster.hpp"

namespace weft::test {

inline plan::Cluster plan_cluster(int nodes) {
    plan::Cluster c;
    c.name = "test";
    c.device.name = "dev";
    c.device.peak_flops = {{"bf16", 100e12}, {"fp32", 10e12}};
    c.device.memory_bytes = 80.0 * (1 << 30);
    c.device.memory_bandwidth = 2e12;
    c.devices_per_node = 8, c.nodes = nodes;
    c.intra = {300e9, 2e-6}, c.inter = {25e9, 5e-6};
    return c;
}

// A GPU workload of `model` (a planner preset), `batch` sequences of `seq` tokens.
inline plan::Workload plan_workload(const std::string& model, int64_t batch, int64_t seq,
                                    plan::Precision prec) {
    plan::Workload w;
    w.model = plan::load_model(model);
    w.global_batch = batch, w.seq_len = seq;
    w.prec = std::move(prec);
    return w;
}

}  // namespace weft::test
