#pragma once
// What the planner knows of the hardware: one device type, how many per node, and two links
// (within a node, across nodes). Units in the files are the ones vendors quote (TFLOP/s, GiB,
// GB/s, µs); in memory everything is SI base units (FLOP/s, bytes, bytes/s, s).
#include <filesystem>
#include <string>
#include <vector>

namespace weft::plan {

struct Link {
    double bandwidth = 0;  // bytes/s one device can send while all others also send (per direction)
    double latency = 0;    // s per message hop (alpha of the alpha-beta model)
};

// Time of a GEMM [M,K]x[K,N] is flops / (peak * efficiency(M, N, K)) with
//   efficiency = max / (1 + m_half/M + n_half/N + k_half/K):
// a roofline-like saturation in each dimension (small dimensions waste tiles and reload data).
// `weft profile` fits the four numbers to measured shapes by least squares on 1/efficiency,
// which is linear in (1/max, m_half/max, n_half/max, k_half/max).
struct GemmEfficiency {
    double max = 0.8, m_half = 0, n_half = 0, k_half = 0;
    double operator()(double M, double N, double K) const;
};

struct Device {
    std::string name;
    std::vector<std::pair<std::string, double>> peak_flops;  // dtype -> FLOP/s (dense)
    double memory_bytes = 0;
    double memory_bandwidth = 0;  // bytes/s, for memory-bound kernels and the optimizer step
    GemmEfficiency gemm;
    // Per dtype where products of that dtype saturate differently (fp8 GEMMs reach a smaller
    // fraction of their doubled peak); `gemm` for any other.
    std::vector<std::pair<std::string, GemmEfficiency>> gemm_by_dtype;
    double attention_efficiency = 0.5;  // fraction of peak the attention core reaches
    double kernel_overhead = 0;         // s per kernel call (launch, OpenMP fork/join)
    double runtime_bytes = 0;  // memory not ours: CUDA context and allocator, or a process's
                               // resident size before the model is allocated (CPU)

    double peak(const std::string& dtype) const;  // throws listing the dtypes the file has
    GemmEfficiency gemm_for(const std::string& dtype) const;
};

// A node's disk, which `weft train --offload` streams state through: shared by the node's
// devices. 0: not given (the cluster file has no "disk"), and --offload cannot be priced.
struct Disk {
    double read = 0, write = 0;  // bytes/s
};

struct Cluster {
    std::string name, file;
    Device device;
    int devices_per_node = 1;
    int nodes = 1;
    Link intra, inter;
    Disk disk;

    int devices() const { return devices_per_node * nodes; }
};

// Reads a cluster file; errors name the file and the key. Format in docs/planner.md.
Cluster load_cluster(const std::filesystem::path& path);
// `name_or_path`: a file, or the name of a preset in configs/clusters/ (looked up relative to the
// working directory and to the weft executable's ../configs/clusters).
std::filesystem::path find_cluster_file(const std::string& name_or_path);

}  // namespace weft::plan
