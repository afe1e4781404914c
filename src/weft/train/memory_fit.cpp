#include "weft/train/memory_fit.hpp"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/model/counts.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/plan/memory.hpp"
#include "weft/train/process.hpp"

namespace weft::train {

namespace {

double gib(double bytes) {
    return bytes / double(1 << 30);
}

// GiB, or MiB below one GiB, where a small node's figures would all read 0.0 GiB.
std::string size_text(double bytes) {
    return bytes >= double(1 << 30) ? fmt::format("{:.1f} GiB", gib(bytes))
                                    : fmt::format("{:.1f} MiB", bytes / double(1 << 20));
}

// The first number in a file; -1 when it is absent or not a number ("max").
int64_t file_number(const char* path) {
    std::ifstream f(path);
    int64_t v = -1;
    return f >> v ? v : -1;
}

// The one message of a refusal: the need, the node's free memory and the share a run may take,
// and `expected`, what would shrink the need.
[[noreturn]] void refuse_need(const std::string& what, double need, int ranks,
                              const std::string& detail, int64_t available, const char* expected) {
    fail(
        "{} needs about {} on this node's {} rank(s) ({}), but the node has {} available and a "
        "run may take {:.0f}% of it ({}); expected {}",
        what, size_text(need), ranks, detail, size_text(double(available)), 100 * kMemoryHeadroom,
        size_text(kMemoryHeadroom * double(available)), expected);
}

}  // namespace

int64_t meminfo_bytes(std::string_view field) {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    int64_t kib = 0;
    while (f >> key >> kib && std::getline(f, unit))
        if (key.size() == field.size() + 1 && key.starts_with(field) && key.back() == ':')
            return kib * 1024;
    return -1;
}

int64_t available_memory_bytes() {
    // A testing aid: a smaller node than this one, so that a test can see a run refused without
    // sizes that would take the machine if the check let them through.
    if (const char* env = std::getenv("WEFT_TEST_MEMORY_MIB"); env && *env) {
        long long mib = -1;
        char extra = 0;
        WEFT_CHECK(std::sscanf(env, "%lld%c", &mib, &extra) == 1 && mib >= 1,
                   "WEFT_TEST_MEMORY_MIB='{}': expected a whole number of MiB >= 1 (a testing "
                   "aid: the memory the node has available)",
                   env);
        return int64_t(mib) << 20;
    }
    int64_t available = meminfo_bytes("MemAvailable");
    // A container's limit, cgroup v2 then v1 (whose "unlimited" is a huge number).
    const std::pair<const char*, const char*> cgroups[] = {
        {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (const auto& [limit_file, usage_file] : cgroups) {
        const int64_t limit = file_number(limit_file), usage = file_number(usage_file);
        if (limit <= 0 || usage < 0) continue;
        const int64_t left = std::max<int64_t>(0, limit - usage);
        available = available < 0 ? left : std::min(available, left);
    }
    return available;
}

void check_memory_fits(const RunShape& run, const std::string& what) {
    const int64_t available = available_memory_bytes();
    if (available <= 0) return;  // an OS that does not say: nothing to compare with
    const Layout& l = run.layout;
    const int world = l.world_size(), local = std::clamp(ranks_on_node(), 1, world);
    const double limit = kMemoryHeadroom * double(available);
    const plan::Precision prec = plan::with_optimizer(
        plan::with_grad_reduce(plan::engine_precision(run.dtype), run.grad_reduce_dtype),
        run.optimizer);
    const double params = double(model::num_parameters(run.cfg));
    // Every parameter's weight, gradient and moments live on some rank: spread evenly over the
    // job, that is a floor of the count that needs no tensor declared, so that a 10^9-layer
    // model is refused here rather than while its layout is built.
    // With --offload the moments are on disk: the memory holds weights and gradients.
    // With the bf16 working copy, 2 + 2 bytes (a floor: some tensors stay fp32) and the master
    // joins the moments; with the copy in files too, memory holds a few layers (no floor) and
    // the disk's floor is the master, the moments and the copy's weights and gradients.
    // (MeZO keeps no gradients: the copy holds the weights alone.)
    const double copies = optim::find_optimizer(run.optimizer).gradients ? 2.0 : 1.0;
    const double in_memory =
        run.params_offloaded ? 0.0
        : run.bf16_working_copy
            ? 2.0 * copies
            : prec.param + prec.grad + (run.offload_group_floats > 0 ? 0 : prec.optimizer);
    const double floor = in_memory * params / world * local;
    constexpr const char* kState =
        "a smaller model (fewer layers, a smaller width), or more ranks on more nodes to divide "
        "its state (--zero 1-3 over dp, --tp, --pp)";
    constexpr const char* kActivations =
        "a smaller --micro-batch-size or --seq-len, --recompute, or more ranks on more nodes to "
        "divide the activations (--tp, --cp, --pp)";
    constexpr const char* kTeacher =
        "a smaller --teacher, or a smaller --micro-batch-size or --seq-len (the teacher reads "
        "and keeps the logits of every row of a micro-batch)";
    auto refuse = [&](double need, const std::string& detail, const char* expected) {
        refuse_need(what, need, local, detail, available, expected);
    };
    if (floor > limit)
        refuse(floor,
               fmt::format("at least {:.3g} parameters x {:.0f} bytes of weights, gradients{} "
                           "over {} rank(s)",
                           params, in_memory,
                           run.offload_group_floats > 0
                               ? fmt::format(" ({} state on disk)", run.optimizer)
                               : fmt::format(" and {} state", run.optimizer),
                           world),
               kState);
    const char* on_disk =
        run.params_offloaded ? "state, master and working weights and gradients" : "state";
    // The disk's room, free now (the offload files of an earlier run are removed at its end).
    auto check_disk = [&](double need) {
        struct statvfs v {};
        if (run.offload_dir.empty() || ::statvfs(run.offload_dir.c_str(), &v) != 0) return;
        const double free_bytes = double(v.f_bavail) * double(v.f_frsize);
        WEFT_CHECK(need <= free_bytes,
                   "{} with --offload needs about {:.3g} GiB of {} {} on this node's {} rank(s) "
                   "under --offload-dir {}, but the disk has {:.3g} GiB free; expected a disk "
                   "with room for them",
                   what, gib(need), run.optimizer, on_disk, local, run.offload_dir.string(),
                   gib(free_bytes));
    };
    if (run.params_offloaded)
        check_disk((4 + prec.optimizer + copies * (run.bf16_working_copy ? 2.0 : 4.0)) * params /
                   world * local);

    plan::Workload w;
    w.model = {"", run.cfg};
    w.global_batch = run.micro * run.micro_batches * l.dp;
    w.seq_len = run.seq_len;
    w.prec = prec;
    w.profile = plan::MemoryProfile::engine;
    w.bucket_mb = run.bucket_mb;
    w.offload_group_floats = run.offload_group_floats;
    w.bf16_working_copy = run.bf16_working_copy;
    w.params_offloaded = run.params_offloaded;
    w.optimizer = run.optimizer;
    const plan::Cluster c;  // runtime 0: what the ranks hold now is no longer available
    const plan::Candidate k{l, run.micro, "", false};
    // Micro-batches each pipeline rank holds at once, as the trainer's estimate takes them.
    std::vector<int> in_flight{1};
    if (l.pp > 1)
        in_flight =
            pipeline::simulate(
                pipeline::make_schedule(l.pp_schedule, l.pp, l.vpp, int(run.micro_batches)), {})
                .peak_in_flight;
    plan::MemoryBreakdown most;
    double sum = 0, disk_sum = 0, disk_most = 0;
    for (int r = 0; r < l.pp; ++r) {
        const plan::MemoryBreakdown m = plan::stage_memory(w, c, k, r, in_flight[size_t(r)]);
        if (m.total() > most.total()) most = m;
        sum += m.total();
        disk_sum += m.offloaded;
        disk_most = std::max(disk_most, m.offloaded);
    }
    // A node that holds the whole job holds world / pp ranks of every stage; one of several
    // may hold ranks of the largest stage only.
    // --teacher (tp = pp = 1): each rank's own teacher on top.
    const double teacher = double(run.teacher_bytes);
    const double need =
        (local == world ? sum * (world / l.pp) : most.total() * local) + teacher * local;
    const double state = most.weights + most.grads + most.optimizer,
                 working = most.activations + most.buffers;
    if (need > limit)
        refuse(need,
               // Each term in GiB or MiB: a small run's would all read 0.0 GiB.
               fmt::format(
                   "per rank up to weights {} + gradients {} + optimizer {} + activations "
                   "{} + buffers {}{}",
                   size_text(most.weights), size_text(most.grads), size_text(most.optimizer),
                   size_text(most.activations), size_text(most.buffers),
                   teacher > 0
                       ? fmt::format(" + teacher {} ({})", size_text(teacher), run.teacher_detail)
                       : ""),
               teacher > std::max(state, working) ? kTeacher
               : working < state                  ? kState
                                                  : kActivations);
    // --offload: the moments of this node's ranks, on the offload directory's disk (the same
    // count as StateFiles allocates, checked here before the weights are).
    if (run.offload_group_floats > 0)
        check_disk(local == world ? disk_sum * (world / l.pp) : disk_most * local);
}

void check_estimate_fits(const MemoryEstimate& m, const std::string& what, const char* expected) {
    const int64_t available = available_memory_bytes();
    MemoryEstimate more = m;  // what it will allocate: the baseline is resident already
    more.baseline = 0;
    const double need = double(more.total());
    if (available > 0 && need > kMemoryHeadroom * double(available))
        refuse_need(what, need, 1, more.describe(), available, expected);
}

void check_weights_fit(const model::ModelConfig& cfg, const std::string& what) {
    const int64_t available = available_memory_bytes();
    if (available <= 0) return;
    const double params = double(model::num_parameters(cfg)), need = 4 * params;
    if (need > kMemoryHeadroom * double(available))
        refuse_need(what, need, 1,
                    fmt::format("{:.3g} parameters x 4 bytes of fp32 weights", params), available,
                    "a smaller model, or weft train's layouts to spread it over ranks");
}

}  // namespace weft::train
