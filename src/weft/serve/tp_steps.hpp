#pragma once
// Tensor-parallel serving's messages (docs/serving.md): rank 0 of the tp group runs the HTTP
// front and the engine, and just before each engine step's forward tells the other ranks the
// step's rows (RowBatch::pack: tokens, positions, block tables); they run the same forward on
// their shard of the model, whose sums and gathers meet rank 0's over the same group. Their KV
// pools hold their own kv heads in the blocks rank 0's pool names, so they need no scheduler.
// When rank 0 has drained, it tells them to return.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::serve {

class TpSteps {
  public:
    // `group`: the tensor-parallel group; its rank 0 leads. Must outlive this object.
    explicit TpSteps(comm::Group& group) : group_(group) {}

    // Rank 0: the next step's rows (EngineTp::announce), and the end.
    void send(const model::RowBatch& b);
    void send_exit();
    // The other ranks: each step rank 0 sends, run on this rank's shard into its pool (first
    // making the KV moves it made), until the end; `extra`: this rank's copy of the extra inputs
    // (--spec ppd's prompt tokens) that rank 0's steps may name. Waits for as long as the server
    // is idle (polling, not bounded by the comm watchdog's timeout: an idle server is no hang).
    void follow(model::RowForward& forward, model::KvPool& pool, std::span<const float> extra = {});

  private:
    comm::Group& group_;
};

}  // namespace weft::serve
