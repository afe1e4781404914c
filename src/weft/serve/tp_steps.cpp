#include "weft/serve/tp_steps.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"

namespace weft::serve {

namespace {
// The first message of a step: the words of its packed batch, or this for the end.
constexpr int64_t kExit = -1;
}  // namespace

void TpSteps::send(const model::RowBatch& b) {
    std::vector<int64_t> words = b.pack();
    int64_t n = int64_t(words.size());
    comm::broadcast(group_, std::span<int64_t>(&n, 1), 0);
    comm::broadcast(group_, std::span<int64_t>(words), 0);
}

void TpSteps::send_exit() {
    int64_t n = kExit;
    comm::broadcast(group_, std::span<int64_t>(&n, 1), 0);
}

void TpSteps::follow(model::RowForward& forward, model::KvPool& pool,
                     std::span<const float> extra) {
    const int64_t C = forward.config().n_embd;
    model::RowBatch b;
    std::vector<model::BlockTable> tables;
    std::vector<int64_t> words;
    for (;;) {
        int64_t n = 0;
        comm::Request next = comm::broadcast_async(group_, std::span<int64_t>(&n, 1), 0);
        // Steps follow each other within microseconds while requests run; an idle server sends
        // nothing for as long as it likes, so the wait backs off to sleeps of a millisecond.
        for (int polls = 0; !next.test(); ++polls)
            if (polls > 100)
                std::this_thread::sleep_for(std::chrono::microseconds(std::min(polls, 1000)));
        if (n == kExit) return;
        words.resize(size_t(n));
        comm::broadcast(group_, std::span<int64_t>(words), 0);
        b.unpack(words, tables);
        WEFT_CHECK(b.extra_count * C <= int64_t(extra.size()),
                   "internal: a step with {} extra inputs on a rank that holds {} of width {}",
                   b.extra_count, int64_t(extra.size()) / C, C);
        if (b.extra_count > 0) b.extra = extra.data();
        for (size_t i = 0; i + 1 < b.kv_moves.size(); i += 2)
            pool.copy_slot(b.kv_moves[i], b.kv_moves[i + 1]);
        forward.run(b, pool);
    }
}

}  // namespace weft::serve
