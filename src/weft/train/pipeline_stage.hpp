#pragma once
// One pipeline rank's part of the model as the executor's StageWork: the chunks it holds, an
// Activations value per micro-batch in flight on each, the messages' buffers, and the step's
// loss. The executor decides the order; this class only runs what it is told.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/buffer.hpp"
#include "weft/model/model.hpp"
#include "weft/parallel/pipeline/executor.hpp"
#include "weft/parallel/pipeline/partition.hpp"

namespace weft::train {

class PipelineStage : public pipeline::StageWork {
  public:
    // `fill(m, a)` puts micro-batch m's tokens into a.inputs and a.targets (packed documents:
    // a.positions and a.cu_seqlens too); called for every chunk.
    using Fill = std::function<void(int64_t micro, model::Activations& a)>;
    // `last_micro(bool)` is told before each backward whether it is its chunk's last of the step
    // (data parallelism reduces the gradients after it). T is this rank's rows per sequence;
    // with context parallelism T / cp at `positions` (Model::context_positions()), which every
    // chunk's Activations carry: the first stage's position embedding reads them, and so do the
    // rotary angles of every stage's layers. Empty: positions 0 .. T-1.
    PipelineStage(model::Model& model, model::UnitAccess& w, const pipeline::Partition& part,
                  int rank, int64_t micro, int64_t T, bool recompute,
                  std::function<void(bool)> last_micro, std::vector<int64_t> positions = {});

    // Runs one training step's list; returns this rank's loss sum (the last chunk's rank only).
    double step(const pipeline::Schedule& s, comm::Group& pp, const Fill& fill, float loss_scale,
                std::vector<pipeline::TraceRecord>* trace);
    // Forward only, one micro-batch through every chunk in order (evaluation); `io` holds its
    // tokens. Returns the loss sum on the last chunk's rank, 0 elsewhere.
    double forward_only(comm::Group& pp, const model::Activations& io);

    // Training messages (activations and their gradients) travel as bf16 (--dtype bf16);
    // evaluation's stay fp32.
    void set_bf16_messages(bool on) { bf16_messages_ = on; }

    // Most Activations values this rank held at once during the last step.
    int peak_in_flight() const { return peak_live_; }
    // Bytes of activation buffers this rank has allocated (kept for reuse across steps): the
    // most it ever held at once; with a split backward, also the copies of output gradients
    // its W's wait on.
    int64_t activation_bytes() const;
    // Analytic floats of the activations of `in_flight` micro-batches per chunk; with
    // `split_backward` (zb-h1, zb-v), also the output-gradient copies their W's wait on.
    int64_t activation_floats(int in_flight, bool split_backward) const;

    void forward(int micro, int chunk) override;
    void backward(int micro, int chunk) override;
    void backward_input(int micro, int chunk) override;
    void backward_weight(int micro, int chunk) override;
    std::span<float> act_in(int micro, int chunk) override;
    std::span<const float> act_out(int micro, int chunk) override;
    std::span<float> grad_in(int micro, int chunk) override;
    std::span<const float> grad_out(int micro, int chunk) override;

  private:
    using Key = std::pair<int, int>;  // (micro, chunk)
    model::LayerSpan span(int chunk) const;
    model::Activations& acquire(int micro, int chunk);
    // The fused backward, or with `split` its B (the weights' gradients queued for the W).
    void backward_chunk(int micro, int chunk, bool split);
    void release(int micro, int chunk);

    model::Model& model_;
    model::UnitAccess& w_;
    pipeline::Partition part_;
    int rank_;
    int64_t B_, T_;
    std::vector<int64_t> positions_;
    bool recompute_;
    std::function<void(bool)> last_micro_;
    bool holds_embedding_copy_;  // the tied embedding held for the head only (not chunk 0)
    bool bf16_messages_ = false;

    // Per step.
    const Fill* fill_ = nullptr;
    float loss_scale_ = 1;
    int micro_batches_ = 0;
    double loss_ = 0;
    int live_ = 0, peak_live_ = 0;
    int64_t allocated_floats_ = 0;
    std::map<Key, std::unique_ptr<model::Activations>> acts_;
    std::map<int, std::vector<std::unique_ptr<model::Activations>>> pool_;  // by chunk
    std::map<Key, Buffer> grad_in_, grad_out_;
    std::map<int, std::unique_ptr<model::Activations>> eval_;  // by chunk
};

}  // namespace weft::train
