#pragma once
// The model's mixture-of-experts communication (model/moe_comm.hpp) on mesh groups.
// ExpertComm over the ep group: the counts exchange is one all_to_all of int64, each row
// exchange one all_to_all_v of floats, so the accounting shows an MoE layer's traffic on the
// "ep" group: per forward one all_to_all (counts) and two all_to_all_v (dispatch, combine), per
// backward two all_to_all_v (the mirror).
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/model/moe_comm.hpp"

namespace weft::parallel {

class GroupExpertComm : public model::ExpertComm {
  public:
    explicit GroupExpertComm(comm::Group& ep) : group_(ep) {}
    int size() const override { return group_.size(); }
    int rank() const override { return group_.rank(); }
    void exchange_counts(const int64_t* send, int64_t* recv, int64_t n) override;
    void exchange_rows(const float* send, const int64_t* send_rows, float* recv,
                       const int64_t* recv_rows, int64_t width) override;

  private:
    comm::Group& group_;
    std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;
};

// MoeComm: the routing counts summed over the ranks that split the batch (the group gradients
// are reduced over). Every rank of it runs the same forwards in the same order, so a blocking
// sum between the layers cannot deadlock.
class GroupMoeComm : public model::MoeComm {
  public:
    explicit GroupMoeComm(comm::Group& group) : group_(group) {}
    void sum_counts(double* counts, int64_t n) override;

  private:
    comm::Group& group_;
};

}  // namespace weft::parallel
