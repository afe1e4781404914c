#pragma once
// The model's context-parallel communication (model::CpComm) on a comm::Group, the mesh's cp
// axis: each shift is one counted send and one counted receive, so the bytes ring attention moves
// are reported on the cp axis with everything else (docs/context_parallel.md gives the counts).
// The hybrid (USP) runs Ulysses inside groups of U consecutive cp ranks and the ring across
// them: two views of the cp group, which keep its accounting and need no communicator of their
// own (a view's all-to-all is the group's all-to-all-v with nothing for the ranks outside it).
#include <memory>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mesh.hpp"
#include "weft/core/layout.hpp"
#include "weft/model/cp_comm.hpp"

namespace weft::parallel {

class GroupCpComm : public model::CpComm {
  public:
    // The whole group, which must outlive this object.
    explicit GroupCpComm(comm::Group& group) : GroupCpComm(group, 0, 1, group.size()) {}
    // The `size` group ranks first, first + stride, ...; this rank must be one of them.
    GroupCpComm(comm::Group& group, int first, int stride, int size);

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void start_shift(const float* send, float* recv, int64_t n) override;
    void start_shift(const uint16_t* send, uint16_t* recv, int64_t n) override;
    void wait_shift() override;
    void start_return(const float* send, float* recv, int64_t n, int hops) override;
    void wait_return() override;
    void all_to_all(const float* in, float* out, int64_t n) override;
    void all_to_all(const uint16_t* in, uint16_t* out, int64_t n) override;

  private:
    int member(int i) const { return first_ + stride_ * ((i + size_) % size_); }
    // A shift and an all-to-all of n values of T (float, or bf16 as bytes).
    template <class T>
    void shift(const T* send, T* recv, int64_t n);
    template <class T>
    void exchange(const T* in, T* out, int64_t n);

    comm::Group& group_;
    int first_, stride_, size_, rank_;
    comm::Request send_, recv_, return_send_, return_recv_;
};

// What Model::set_context_parallel takes: for ring and Ulysses the whole cp group (`ring` null);
// for the hybrid this rank's Ulysses group of `cp_ulysses` consecutive cp ranks and, in `ring`,
// the ring of the ranks at the same place in every group.
struct CpComms {
    std::unique_ptr<GroupCpComm> main, ring;
};
CpComms make_cp_comms(comm::Group& cp, CpKind kind, int cp_ulysses);

}  // namespace weft::parallel
