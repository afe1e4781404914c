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
    // The same for n bf16 values (--dtype bf16's key/value blocks).
    virtual void start_shift(const uint16_t* send, uint16_t* recv, int64_t n) = 0;
    virtual void wait_shift() = 0;
    // TokenRing's other link direction: starts sending send[n] to rank - hops and receiving n
    // floats from rank + hops (mod size) into recv, while a shift may be in flight; one return in
    // flight at a time, completed by wait_return(). Partial results go straight to the rank whose
    // queries they answer, as the TokenRing paper's fully connected GPUs do.
    virtual void start_return(const float* send, float* recv, int64_t n, int hops) = 0;
    virtual void wait_return() = 0;
    // Ulysses: block j of in[size * n] goes to rank j, which stores it as block rank() of out.
    virtual void all_to_all(const float* in, float* out, int64_t n) = 0;
    // The same for n bf16 values a block (--dtype bf16's Ulysses).
    virtual void all_to_all(const uint16_t* in, uint16_t* out, int64_t n) = 0;
};

}  // namespace weft::model
