// Distillation through the model (weft train --teacher): the teacher's logits line up with the
// student's rows (a student that is its teacher has no loss at weight 1), weight 0 is the plain
// loss, a few gradient steps of a smaller student lower its KL, and the teacher's weights are
// the same bits before and after (every family); the memory the trainer's estimate counts for it
// is what its forward takes.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "support/family_cases.hpp"
#include "support/model_run.hpp"
#include "weft/model/family.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/teacher.hpp"

using namespace weft;

namespace {

struct Student {
    std::unique_ptr<model::Model> model;
    Buffer params, grads;
    std::unique_ptr<model::Activations> a;

    Student(const model::ModelConfig& cfg, uint64_t seed, int64_t B, int64_t T)
        : model(model::make_model(cfg)),
          params(model->layout().total),
          grads(model->layout().total),
          a(model->new_activations(B, T, model->activation_span())) {
        model::init_params(params.data(), model->layout(), seed);
        test::fill_tokens(*a, cfg.vocab_size, 9);
    }
    // The mean training loss, its gradient into grads.
    double step() {
        grads.zero();
        model::FlatAccess w(model->layout(), params.data(), grads.data());
        const float scale = 1.0f / float(a->B * a->T);
        const double sum = model->forward(*a, w, true, scale);
        model->backward(*a, w);
        return sum * scale;
    }
};

class Distill : public ::testing::TestWithParam<std::string> {};

TEST_P(Distill, TeacherRowsLineUpAndTheStudentLearnsThem) {
    const int64_t B = 2, T = 12, V = 61;
    const model::ModelConfig tcfg = test::small_family_config(GetParam(), V, 48, 2);
    Student self(tcfg, 3, B, T);
    const std::vector<float> before(self.params.data(), self.params.data() + self.params.size());

    // The student is its teacher: no loss, whatever the temperature.
    train::Teacher teacher(tcfg, self.params.data());
    teacher.annotate(*self.a, 1.0f, 2.0f);
    EXPECT_NEAR(self.step(), 0.0, 1e-5);

    // Weight 0: the plain cross-entropy, as without a teacher.
    teacher.annotate(*self.a, 0.0f, 2.0f);
    const double mixed = self.step();
    self.a->soft_targets = {};
    EXPECT_NEAR(mixed, self.step(), 1e-5);

    // A smaller student (one layer) of another init learns the teacher's distributions.
    model::ModelConfig scfg = tcfg;
    scfg.n_layer = 1;
    Student small(scfg, 7, B, T);
    for (size_t i = 0; i < small.a->inputs.size(); ++i) small.a->inputs[i] = self.a->inputs[i];
    for (size_t i = 0; i < small.a->targets.size(); ++i) small.a->targets[i] = self.a->targets[i];
    teacher.annotate(*small.a, 1.0f, 1.0f);
    const double first = small.step();
    double last = first;
    for (int s = 0; s < 20; ++s) {
        for (int64_t i = 0; i < small.params.size(); ++i) small.params[i] -= 0.5f * small.grads[i];
        last = small.step();
    }
    EXPECT_GT(first, 0.01);
    EXPECT_LT(last, 0.7 * first) << "the student did not learn the teacher's distributions";
    EXPECT_EQ(std::memcmp(before.data(), self.params.data(), before.size() * sizeof(float)), 0)
        << "distillation changed the teacher's weights";
}

// teacher_memory against the OS: the resident peak a teacher's forward over B windows of T adds
// (its KV pool, row buffers and the logits it keeps) is its count: at most 2% over (the count
// leaves out the batch's block tables and attention's per-thread scores), at most 10% under
// (measured 1-5% under: blocks below the mmap threshold may reuse heap pages an earlier test left
// resident). Its weights are the caller's here, as --ppd-tokens' base model's are.
TEST_P(Distill, TeacherMemoryIsWhatItsForwardTakes) {
#if defined(WEFT_SANITIZED_LIBRARY) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "a sanitizer's shadow memory and quarantine are in the resident size";
#endif
    const int64_t B = 8, T = 64;
    model::ModelConfig cfg = test::small_family_config(GetParam(), 4096, T, 2);
    cfg.n_embd = 128;
    const std::unique_ptr<model::Model> m = model::make_model(cfg);
    Buffer params(m->layout().total);
    model::init_params(params.data(), m->layout(), 5);
    std::vector<int32_t> tokens(size_t(B * T));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7919 % 4096);
    train::Teacher teacher(cfg, params.data());
    // The threads, the rotary table and the other once-only allocations, on a small batch.
    teacher.window_logits(std::span<const int32_t>(tokens).first(8), 1, 8);
    // Every large block from mmap and back to the OS when freed: glibc's threshold otherwise
    // rises past blocks an earlier test freed, which then come from an already resident heap.
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    std::ofstream("/proc/self/clear_refs") << "5";  // the peak back to the current size
    // The peak just after the reset is the baseline: a page or two may be touched between the
    // reset and any read (CI saw 12-90 KiB), so peak and current size need not be equal; a
    // kernel that does not reset leaves the earlier tests' peak, megabytes above.
    const int64_t before = train::peak_rss_bytes();
    ASSERT_LT(before - train::current_rss_bytes(), int64_t(1) << 20)
        << "this kernel does not reset the resident peak";
    teacher.window_logits(tokens, B, T);
    const double grown = double(train::peak_rss_bytes() - before);
    const train::TeacherMemory count = train::teacher_memory(cfg, B, T, B * T, false);
    EXPECT_EQ(count.weights, 0);
    EXPECT_EQ(count.logits, 4 * B * T * cfg.vocab_size);
    EXPECT_LE(grown, 1.02 * double(count.total())) << count.describe();
    EXPECT_GE(grown, 0.9 * double(count.total()))
        << "resident peak grew by " << grown << " bytes; counted " << count.describe();
    EXPECT_EQ(train::teacher_memory(cfg, B, T, B * T).weights, 4 * m->layout().total);
}

INSTANTIATE_TEST_SUITE_P(Families, Distill,
                         ::testing::Values("tiny", "llama-tiny", "qwen2-tiny", "moe-tiny"));

}  // namespace
