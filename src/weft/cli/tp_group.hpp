#pragma once
// The tensor-parallel group of the commands that run a trained model over several ranks
// (`mpirun -np N weft serve --tp N`, `weft sample --tp N`): one rank per shard, every rank holding
// its heads and MLP columns as training's tensor parallelism splits them (model::tp_shard), the
// collectives those of training (parallel::ParallelContext's TpComm), fp32 on the wire.
#include <memory>

#include "weft/comm/mesh.hpp"
#include "weft/model/config.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/parallel/parallel_context.hpp"

namespace CLI {
class App;
}

namespace weft::cli {

// --tp of the commands that run a trained model.
void add_tp_option(CLI::App* c, int& tp);

class TpGroup {
  public:
    // Checks, before any weight is read, that the job has exactly `tp` ranks and that the
    // model's heads split over them (the model's own layout check); an error naming --tp
    // otherwise. At tp 1 in a job of one rank there is no group and MPI is not started.
    TpGroup(int tp, const model::ModelConfig& cfg, const char* command);
    ~TpGroup();

    int size() const { return tp_; }
    int rank() const { return comm_ ? comm_->rank() : 0; }
    model::TpComm* comm() const { return comm_; }  // null at tp 1
    comm::Group& group() const;                    // tp > 1 only

  private:
    int tp_;
    std::unique_ptr<comm::Mesh> mesh_;
    std::unique_ptr<parallel::ParallelContext> ctx_;
    model::TpComm* comm_ = nullptr;
};

}  // namespace weft::cli
