#pragma once
// The communication context parallelism needs, as the model sees it: one ring shift over the
// ranks of a context-parallel group (ring attention) and an all-to-all (Ulysses), with no MPI in
// sight (parallel/context_parallel.hpp implements it over a comm::Group, as TpComm is for tensor
// parallelism). A shift is split into start and wait so that the attention of the block in hand
// runs while the next one travels.
#include <cstdint>

namespace weft::model {

class CpComm {
  public:
    virtual ~CpComm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Starts sending send[n] to rank + 1 and receiving n floats from rank - 1 (mod size) into
    // recv; neither buffer may be touched until wait_shift(). One shift in flight at a time.
    virtual void start_shift(const float* send, float* recv, int64_t n) = 0;
    virtual void wait_shift() = 0;
    // Ulysses: block j of in[size * n] goes to rank j, which stores it as block rank() of out.
    virtual void all_to_all(const float* in, float* out, int64_t n) = 0;
};

}  // namespace weft::model
