// The optimizer's pass behind the next forward (parallel/update_fence.hpp): the model, reading a
// unit, gets the weights the pass wrote for it, never the step's before; the step's zeroing of
// the gradients waits until the pass has read them; and the pass's error reaches the reader. The
// pass here sleeps before each unit, so that a reader that did not wait would run ahead of it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/update_fence.hpp"
#include "weft/parallel/working_copy.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {
namespace {

using namespace std::chrono_literals;

ZeroLayout small_layout() {
    model::ModelConfig cfg = model::model_preset("tiny");
    cfg.n_layer = 3, cfg.n_embd = 32, cfg.n_head = 2, cfg.vocab_size = 300;
    return ZeroLayout(model::build_param_layout(cfg), 1, 0);
}

TEST(UpdateFence, WaitsForTheMarkAndPassesTheError) {
    UpdateFence f;
    EXPECT_FALSE(f.is_open());
    EXPECT_EQ(f.wait(1 << 30), 0.0);  // closed: everything is ready
    f.open();
    EXPECT_TRUE(f.is_open());
    std::thread pass([&] {
        std::this_thread::sleep_for(30ms);
        f.advance(100);
        std::this_thread::sleep_for(30ms);
        f.close(std::make_exception_ptr(std::runtime_error("disk full")));
    });
    EXPECT_GT(f.wait(100), 0.01);  // blocked until the mark passed 100
    EXPECT_THROW(f.wait(101), std::runtime_error);
    pass.join();
    EXPECT_FALSE(f.is_open());
    f.open();  // a new step forgets the last one's error
    f.close();
    EXPECT_NO_THROW(f.wait(1 << 30));
}

TEST(UpdateFence, TheModelReadsWhatThePassWroteAndZeroesWhatItRead) {
    const ZeroLayout z = small_layout();
    const model::ParamLayout& p = z.padded();
    const int units = int(p.units.size());
    for (bool bf16 : {true, false}) {
        BufferPool pool;
        WorkingCopy w(p, pool, bf16);
        // The step before: weights 1, gradients 0.5 everywhere (exact in bf16).
        w.write_params(0, p.total, std::vector<float>(size_t(p.total), 1.0f).data());
        w.zero_grads();
        for (int u = 0; u < units; ++u) {
            float* g = w.grads(u);
            for (int64_t i = 0; i < p.units[size_t(u)].size; ++i) g[i] = 0.5f;
            w.grads_ready(u);
        }
        // The pass: per unit, reads its gradients, then writes weights 2 and advances the mark.
        std::vector<float> seen(size_t(p.total), -1.0f);
        w.fence().open();
        std::thread pass([&] {
            for (int u = 0; u < units; ++u) {
                const model::Unit& un = p.units[size_t(u)];
                std::this_thread::sleep_for(5ms);
                w.read_grads(un.offset, un.size, seen.data() + un.offset);
                w.write_params(un.offset, un.size,
                               std::vector<float>(size_t(un.size), 2.0f).data());
                w.fence().advance(un.offset + un.size);
            }
            w.fence().close();
        });
        // The next step, at once: its zeroing is owed until the pass has read each unit.
        w.zero_grads();
        w.set_forward(true);
        for (int u = 0; u < units; ++u) {
            const float* a = w.params(u);
            for (int64_t i = 0; i < p.units[size_t(u)].size; ++i)
                ASSERT_EQ(a[i] == 2.0f || a[i] == 0.0f, true)
                    << "unit " << u << " element " << i << " read " << a[i] << " (bf16 " << bf16
                    << ")";
            w.release(u);
        }
        w.set_forward(false);  // every owed zeroing done: the pass is over
        pass.join();
        EXPECT_GT(w.take_blocked_s(), 0.0);
        for (int u = 0; u < units; ++u) {
            const model::Unit& un = p.units[size_t(u)];
            // The pass read the step before's gradients (padding reads as 0), not zeros.
            int64_t halves = 0;
            for (int64_t i = 0; i < un.size; ++i) halves += seen[size_t(un.offset + i)] == 0.5f;
            EXPECT_GT(halves, 0) << "unit " << u;
        }
        std::vector<float> g(size_t(p.total), -1.0f);
        w.read_grads(0, p.total, g.data());
        for (int64_t i = 0; i < p.total; ++i) ASSERT_EQ(g[size_t(i)], 0.0f) << i;
    }
}

}  // namespace
}  // namespace weft::parallel
