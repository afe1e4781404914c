#pragma once
// Whether a run fits the machine, decided before anything is allocated: the memory its ranks on
// this node will allocate, from the config and the layout alone (the planner's engine profile,
// the count the trainer's own estimate is checked against), against what the node has free.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "weft/core/layout.hpp"
#include "weft/model/config.hpp"
#include "weft/train/memory.hpp"

namespace weft::train {

// A run as the memory count sees it: `micro` sequences of `seq_len` tokens per forward,
// `micro_batches` of them per step and rank, products in `dtype`, gradients reduced in
// `grad_reduce_dtype` in buckets of `bucket_mb`, the state of `optimizer`.
struct RunShape {
    model::ModelConfig cfg;
    Layout layout;  // resolved
    int64_t micro = 1, micro_batches = 1, seq_len = 1;
    std::string dtype = "fp32", grad_reduce_dtype = "fp32";
    double bucket_mb = 25;
    std::string optimizer = "adamw";    // optim/registry.hpp
    int64_t offload_group_floats = 0;   // --offload optimizer: the state on disk (plan::Workload)
    std::filesystem::path offload_dir;  // ... under this directory
    bool bf16_working_copy = false;  // ... with the fp32 master (TrainOptions::bf16_working_copy)
    bool params_offloaded = false;   // ... and the working copy too (optimizer+params)
    // --teacher: what each rank's frozen teacher holds (train::teacher_memory), and its terms
    // as the refusal names them.
    int64_t teacher_bytes = 0;
    std::string teacher_detail{};
};

// A field of /proc/meminfo ("MemTotal", "MemAvailable") in bytes; -1 where it is absent.
int64_t meminfo_bytes(std::string_view field);

// Bytes this process may still allocate: /proc/meminfo's MemAvailable, or the cgroup's limit
// less its usage when that is lower; WEFT_TEST_MEMORY_MIB (a testing aid) in their place.
int64_t available_memory_bytes();

// Runs are refused when the ranks on this node need more than this share of what it has free:
// the rest is for what the count leaves out (checkpoint staging, the allocator's slack).
inline constexpr double kMemoryHeadroom = 0.9;

// Throws weft::Error before a run that would exhaust the node: the bytes its ranks on this node
// (ranks_on_node()) will allocate beyond what they hold now exceed kMemoryHeadroom x
// available_memory_bytes(). The message, which starts with `what` (the model and where it came
// from), gives the need, the limit and what would shrink the need.
void check_memory_fits(const RunShape& run, const std::string& what);

// The same for a process whose estimate is counted already (--ppd-tokens): its total less the
// baseline it holds now, against the node's free memory; `expected` says what would shrink it.
void check_estimate_fits(const MemoryEstimate& m, const std::string& what, const char* expected);

// The same for a command that holds a whole model in one process (eval, sample, export, ckpt
// convert): its fp32 weights, the bulk of what it allocates, against the node's free memory.
void check_weights_fit(const model::ModelConfig& cfg, const std::string& what);

}  // namespace weft::train
