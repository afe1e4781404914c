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

#include "weft/model/generate.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/model.hpp"
#include "weft/train/model_source.hpp"
#include "weft/train/options.hpp"

namespace weft::train {

// --teacher, --distill-weight, --distill-temperature against the rest of the flags: one error
// naming the first one that does not fit, before anything is read.
void check_distill_flags(const TrainOptions& o);

class Teacher {
  public:
    // The teacher of o.teacher for a student of `student`: the two vocabularies and the
    // teacher's context are checked against the student and --seq-len from the configs, before
    // its weights are read.
    Teacher(const TrainOptions& o, const model::ModelConfig& student);
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
