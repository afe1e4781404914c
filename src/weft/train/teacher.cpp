#include "weft/train/teacher.hpp"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/model/family.hpp"
#include "weft/model/params.hpp"
#include "weft/model/row_batch.hpp"
#include "weft/train/memory.hpp"

namespace weft::train {

void check_distill_flags(const TrainOptions& o) {
    WEFT_CHECK(o.distill_weight >= 0.0f && o.distill_weight <= 1.0f,
               "--distill-weight must be between 0 and 1 (the KL's share of the loss), got {}",
               o.distill_weight);
    WEFT_CHECK(std::isfinite(o.distill_temperature) && o.distill_temperature > 0.0f,
               "--distill-temperature must be a positive number, got {}", o.distill_temperature);
    if (o.teacher.empty()) return;
    const Layout& l = o.layout;
    WEFT_CHECK(l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1,
               "--teacher distills on one process or under data parallelism only, got {} "
               "(expected tp, pp, cp and ep of 1)",
               l.describe());
    WEFT_CHECK(o.pack == "none",
               "--teacher reads plain windows: drop --pack {} (the teacher does not see the "
               "documents' boundaries)",
               o.pack);
    WEFT_CHECK(o.dtype == "fp32", "--teacher distills in fp32, got --dtype {}", o.dtype);
    WEFT_CHECK(o.optim.optimizer != "mezo",
               "--teacher needs the loss's gradient, which --optimizer mezo does not take");
}

namespace {

// The positions of a block of the teacher's KV pool (its forward and its count both take it).
constexpr int64_t kBlockTokens = 16;

// The blocks a forward over B windows of T tokens takes from its pool.
int64_t kv_blocks(int64_t B, int64_t T) {
    return B * ((T + kBlockTokens - 1) / kBlockTokens);
}

}  // namespace

std::string TeacherMemory::describe() const {
    return fmt::format("weights {} + forward {} + logits {}", mib(weights), mib(forward),
                       mib(logits));
}

TeacherMemory teacher_memory(const model::ModelConfig& cfg, int64_t B, int64_t T,
                             int64_t logit_rows, bool own_weights) {
    TeacherMemory m;
    // The layout load_model allocates (open_model_source has refused a model too large to lay
    // out).
    if (own_weights) m.weights = 4 * model::build_param_layout(cfg).total;
    m.forward = model::KvPool::bytes(kv_blocks(B, T), cfg.n_layer, cfg.kv_heads() * cfg.head_dim(),
                                     kBlockTokens, false) +
                4 * model::family_of(cfg).row_floats(cfg, B * T);
    m.logits = 4 * logit_rows * cfg.vocab_size;
    return m;
}

ModelSource open_teacher(const TrainOptions& o, const model::ModelConfig& student) {
    ModelSource source = open_model_source(o.teacher);
    WEFT_CHECK(source.cfg.vocab_size == student.vocab_size,
               "--teacher {}: its vocabulary has {} ids, the model's {} (expected a teacher with "
               "the model's tokenizer and vocabulary)",
               o.teacher.string(), source.cfg.vocab_size, student.vocab_size);
    WEFT_CHECK(source.cfg.n_positions >= o.seq_len,
               "--teacher {}: its context is {} positions, shorter than --seq-len {}",
               o.teacher.string(), source.cfg.n_positions, o.seq_len);
    return source;
}

Teacher::Teacher(const ModelSource& source)
    : loaded_(load_model(source)),
      cfg_(loaded_.model->config()),
      forward_(std::make_unique<model::RowForward>(cfg_, loaded_.model->layout(),
                                                   loaded_.params.data())),
      parameters_(loaded_.model->layout().total) {}

Teacher::Teacher(const model::ModelConfig& cfg, const float* params) : cfg_(cfg) {
    loaded_.model = model::make_model(cfg);
    forward_ = std::make_unique<model::RowForward>(cfg, loaded_.model->layout(), params);
    parameters_ = loaded_.model->layout().total;
}

std::span<const float> Teacher::window_logits(std::span<const int32_t> tokens, int64_t B,
                                              int64_t T) {
    WEFT_CHECK(int64_t(tokens.size()) == B * T && T <= cfg_.n_positions,
               "internal: {} tokens as {} windows of {} for a teacher of {} positions",
               tokens.size(), B, T, cfg_.n_positions);
    model::KvPool kv(kv_blocks(B, T), cfg_.n_layer, forward_->kv_width(), cfg_.head_dim(),
                     kBlockTokens, false);
    std::vector<model::BlockTable> tables(static_cast<size_t>(B));
    model::RowBatch b;
    for (int64_t s = 0; s < B; ++s) {
        kv.grow(tables[size_t(s)], T);
        b.add(tokens.subspan(size_t(s * T), size_t(T)), 0, tables[size_t(s)], false);
        for (int64_t r = 0; r < T; ++r) b.logit_rows.push_back(s * T + r);
    }
    return forward_->run(b, kv);
}

void Teacher::annotate(model::Activations& a, float weight, float temperature) {
    const std::span<const float> logits = window_logits(a.inputs, a.B, a.T);
    a.soft_targets = {logits.data(), weight, temperature};
}

}  // namespace weft::train
