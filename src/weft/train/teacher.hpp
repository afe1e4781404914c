#pragma once
// `weft train --teacher RUN`: knowledge distillation of the model being trained from a frozen
// one with the same tokenizer (Hinton et al. 2015; for a speculative-decoding draft, DistillSpec,
// Zhou et al. 2024): each micro-batch's windows are first read by the teacher, and the head's
// loss becomes (1 - a) CE + a t^2 KL(teacher_t || student_t) over every row
// (kernels/distill_rows.hpp). A frozen model run as rows through model::RowForward, never
// stepped, its weights only read: --ppd-tokens' base model is one too (PpdTrainer's targets).
// One process or data parallelism (each rank's teacher reads its own rows).
#include <memory>
#include <span>
#include <string>

#include "weft/model/generate.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/model.hpp"
#include "weft/train/model_source.hpp"
#include "weft/train/options.hpp"

namespace weft::train {

// --teacher, --distill-weight, --distill-temperature against the rest of the flags: one error
// naming the first one that does not fit, before anything is read.
void check_distill_flags(const TrainOptions& o);

// What a teacher of `cfg` holds while it reads B windows of up to T tokens, in bytes: its fp32
// weights as loaded (none when they are another's: --ppd-tokens' base is the model's own), its
// forward's KV pool and row buffers (freed once the logits are out), and the logits of
// `logit_rows` rows it hands on (kept until its next call): B * T for --teacher's head, B for
// --ppd-tokens' continuations. Each from the count of the code that allocates it.
struct TeacherMemory {
    int64_t weights = 0, forward = 0, logits = 0;
    int64_t total() const { return weights + forward + logits; }
    std::string describe() const;
};
TeacherMemory teacher_memory(const model::ModelConfig& cfg, int64_t B, int64_t T,
                             int64_t logit_rows, bool own_weights = true);

// --teacher's model, opened but not read: its vocabulary and context checked against the
// student's config and --seq-len, so that its memory can be counted before its weights are read.
ModelSource open_teacher(const TrainOptions& o, const model::ModelConfig& student);

class Teacher {
  public:
    // The teacher open_teacher opened, its weights read.
    explicit Teacher(const ModelSource& source);
    // A model in memory (`params` must outlive the teacher): --ppd-tokens' base model, tests.
    Teacher(const model::ModelConfig& cfg, const float* params);

    // The teacher's logits of every row of `a`'s B windows of T inputs, into a.soft_targets with
    // the mix (valid until the next call).
    void annotate(model::Activations& a, float weight, float temperature);
    // Logits [B * T, V] of every row of B windows of T tokens (valid until the next call).
    std::span<const float> window_logits(std::span<const int32_t> tokens, int64_t B, int64_t T);

    // Its rows forward, for a caller that runs its own batches (PpdTrainer's continuations).
    model::RowForward& rows() { return *forward_; }
    int64_t parameters() const { return parameters_; }

  private:
    LoadedModel loaded_;  // empty when built from memory
    model::ModelConfig cfg_;
    std::unique_ptr<model::RowForward> forward_;
    int64_t parameters_ = 0;
};

}  // namespace weft::train
