#include "weft/cli/tp_group.hpp"

#include <CLI/CLI.hpp>

#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"
#include "weft/model/params.hpp"

namespace weft::cli {

void add_tp_option(CLI::App* c, int& tp) {
    c->add_option("--tp", tp,
                  "Tensor-parallel degree: the model's heads and MLP split over this many ranks "
                  "(mpirun -np N)")
        ->capture_default_str();
}

TpGroup::TpGroup(int tp, const model::ModelConfig& cfg, const char* command) : tp_(tp) {
    WEFT_CHECK(tp >= 1, "--tp must be at least 1, got {}", tp);
    // Before MPI starts: without mpirun the job is this process alone.
    const int world = comm::under_mpirun() ? comm::world_size() : 1;
    WEFT_CHECK(world == tp,
               "weft {} --tp {} runs one rank per tensor-parallel shard, but the job has {} "
               "rank{} (expected mpirun -np {} weft {} --tp {} ...)",
               command, tp, world, world == 1 ? "" : "s", tp, command, tp);
    model::ModelShard shard;
    shard.tp = tp;
    (void)model::build_param_layout(cfg, shard);  // the family's error when its heads do not split
    if (tp == 1) return;
    Layout layout;
    layout.tp = tp;
    layout.dp = 1;
    mesh_ = std::make_unique<comm::Mesh>(layout);
    // fp32 on the wire: the sums of serving are compared with one process's.
    ctx_ = std::make_unique<parallel::ParallelContext>(*mesh_, layout, false);
    comm_ = ctx_->tp();
}

TpGroup::~TpGroup() = default;

comm::Group& TpGroup::group() const {
    WEFT_CHECK(mesh_, "internal: no tensor-parallel group at --tp 1");
    return mesh_->group(comm::Axis::tp);
}

}  // namespace weft::cli
