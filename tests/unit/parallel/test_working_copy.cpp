// The working copy in files (--offload optimizer+params) against the same copy in memory: the
// weights the model reads (in the forward and the backward order, with reads ahead) and the
// gradients it leaves (written behind, over two micro-batches) are bit for bit the same; an
// update's pass (each unit's gradients read, its weights written whole) reads no weights, and a
// write of part of a unit keeps the rest; and a record that comes back short is an error naming
// the file and the unit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "weft/core/error.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/working_copy.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {
namespace {

namespace fs = std::filesystem;

ZeroLayout small_layout() {
    model::ModelConfig cfg = model::model_preset("tiny");
    cfg.n_layer = 3, cfg.n_embd = 32, cfg.n_head = 2, cfg.vocab_size = 300;
    return ZeroLayout(model::build_param_layout(cfg), 1, 0);
}

std::vector<float> values(int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * std::sin(0.37f * float(i)) + 1e-3f;
    return v;
}

// Sets the weights, reads every unit forward then backward, and leaves two micro-batches of
// gradients; returns the weights read and the gradients stored.
std::vector<float> exercise(WorkingCopy& w, const model::ParamLayout& p) {
    const int units = int(p.units.size());
    const std::vector<float> x = values(p.total, 0.75f);
    w.write_params(0, p.total, x.data());
    w.flush();
    std::vector<float> out;
    w.zero_grads();
    for (int m = 0; m < 2; ++m) {
        w.set_forward(true);
        for (int u = 0; u < units; ++u) {
            const float* a = w.params(u);
            out.insert(out.end(), a, a + p.units[size_t(u)].size);
            w.release(u);
        }
        w.set_forward(false);
        for (int u = units - 1; u >= 0; --u) {
            w.params(u);
            float* g = w.grads(u);
            const std::vector<float> d = values(p.units[size_t(u)].size, 0.1f * float(m + 1));
            for (size_t i = 0; i < d.size(); ++i) g[i] += d[i];
            w.release(u);
            w.grads_ready(u, {}, m == 1);
        }
    }
    std::vector<float> g(size_t(p.total));
    w.read_grads(0, p.total, g.data());
    out.insert(out.end(), g.begin(), g.end());
    return out;
}

TEST(WorkingCopy, InFilesIsTheCopyInMemoryBitForBit) {
    const ZeroLayout z = small_layout();
    const model::ParamLayout& p = z.padded();
    for (bool bf16 : {true, false}) {
        test::TempDir dir("weft_copy");
        BufferPool pool_mem, pool_files;
        WorkingCopy mem(p, pool_mem, bf16);
        WorkingCopy files(p, pool_files, bf16, dir.path, 0);
        const std::vector<float> a = exercise(mem, p), b = exercise(files, p);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "bf16 " << bf16;
        const offload::PassStats io = files.take_io_stats();
        EXPECT_GT(io.read_bytes, 0);
        EXPECT_GT(io.written_bytes, 0);
    }
}

TEST(WorkingCopy, AnUpdateReadsNoWeightsAndAPartialWriteKeepsTheRest) {
    const ZeroLayout z = small_layout();
    const model::ParamLayout& p = z.padded();
    test::TempDir dir("weft_copy");
    BufferPool pool_mem, pool_files;
    WorkingCopy mem(p, pool_mem);
    WorkingCopy files(p, pool_files, true, dir.path, 0);
    const std::vector<float> x = values(p.total, 0.5f), y = values(p.total, 2.0f);
    std::vector<float> g(size_t(p.total)), a(size_t(p.total)), b(size_t(p.total));
    for (WorkingCopy* w : {&mem, &files}) {
        exercise(*w, p);
        w->take_io_stats();
        // The update's order: a unit's gradients, then its new weights.
        for (const model::Unit& u : p.units) {
            w->read_grads(u.offset, u.size, g.data() + u.offset);
            w->write_params(u.offset, u.size, x.data() + u.offset);
        }
        w->flush();
        const offload::PassStats io = w->take_io_stats();
        if (w->files()) {
            EXPECT_EQ(io.read_bytes, WorkingCopy::stored_bytes(p)) << "weights read";
        }
        // A rank's part of every unit (ZeRO-1): the rest of the record stays as it was.
        for (const model::Unit& u : p.units)
            w->write_params(u.offset + u.size / 3, u.size / 2, y.data() + u.offset);
        w->flush();
        w->read_params(0, p.total, (w == &mem ? a : b).data());
    }
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(a.data(), x.data(), a.size() * sizeof(float)), 0);
}

TEST(WorkingCopy, AShortRecordIsAnErrorNamingTheFile) {
    const ZeroLayout z = small_layout();
    const model::ParamLayout& p = z.padded();
    test::TempDir dir("weft_copy");
    BufferPool pool;
    WorkingCopy w(p, pool, true, dir.path, 0);
    const std::vector<float> x = values(p.total, 1.0f);
    w.write_params(0, p.total, x.data());
    w.flush();
    // Cut the weights file inside unit 2's record.
    const fs::path weights = w.files()->path(0);
    fs::resize_file(weights, w.files()->offset(0, 2) + 4096);
    try {
        w.params(2);
        FAIL() << "a short read passed";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("reading unit 2's weights"), std::string::npos) << m;
        EXPECT_NE(m.find(weights.string()), std::string::npos) << m;
    }
}

}  // namespace
}  // namespace weft::parallel
