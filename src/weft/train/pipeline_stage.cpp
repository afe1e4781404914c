#include "weft/train/pipeline_stage.hpp"

#include <algorithm>

#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/error.hpp"
#include "weft/model/family.hpp"

namespace weft::train {

PipelineStage::PipelineStage(model::Model& model, model::UnitAccess& w,
                             const pipeline::Partition& part, int rank, int64_t micro, int64_t T,
                             bool recompute, std::function<void(bool)> last_micro,
                             std::vector<int64_t> positions)
    : model_(model),
      w_(w),
      part_(part),
      rank_(rank),
      B_(micro),
      T_(T),
      positions_(std::move(positions)),
      recompute_(recompute),
      last_micro_(std::move(last_micro)),
      // A tied head reads the embedding on the last stage too; an untied one does not.
      holds_embedding_copy_(model.config().tie_embeddings &&
                            rank == part.owner(part.chunks() - 1) && rank != part.owner(0)) {}

model::LayerSpan PipelineStage::span(int chunk) const {
    return model_.activation_span({part_.first[size_t(chunk)], part_.count[size_t(chunk)],
                                   chunk == part_.chunks() - 1, recompute_});
}

int64_t PipelineStage::activation_floats(int in_flight, bool split_backward) const {
    int64_t sum = 0;
    for (int c : part_.chunks_of(rank_)) {
        model::LayerSpan s = span(c);
        s.deferred_weights = split_backward;
        sum += model::activation_floats(model_.config(), B_, T_, s);
    }
    return sum * in_flight / std::max<int64_t>(1, part_.vpp);
}

int64_t PipelineStage::activation_bytes() const {
    int64_t floats = allocated_floats_;
    auto add = [&](const model::Activations& a) {
        for (const model::WeightGradQueue& q : a.weight_grads) floats += q.allocated_floats();
    };
    for (const auto& [key, a] : acts_) add(*a);
    for (const auto& [chunk, pool] : pool_)
        for (const auto& a : pool) add(*a);
    return 4 * floats;
}

model::Activations& PipelineStage::acquire(int micro, int chunk) {
    auto& slot = acts_[{micro, chunk}];
    if (slot) return *slot;
    auto& pool = pool_[chunk];
    if (!pool.empty()) {
        slot = std::move(pool.back());
        pool.pop_back();
    } else {
        slot = model_.new_activations(B_, T_, span(chunk));
        slot->positions = positions_;
        allocated_floats_ += model::family_of(model_.config())
                                 .activation_floats(model_.config(), B_, T_, span(chunk));
    }
    peak_live_ = std::max(peak_live_, ++live_);
    return *slot;
}

void PipelineStage::release(int micro, int chunk) {
    auto it = acts_.find({micro, chunk});
    pool_[chunk].push_back(std::move(it->second));
    acts_.erase(it);
    --live_;
}

double PipelineStage::step(const pipeline::Schedule& s, comm::Group& pp, const Fill& fill,
                           float loss_scale, std::vector<pipeline::TraceRecord>* trace) {
    fill_ = &fill;
    loss_scale_ = loss_scale;
    micro_batches_ = s.micro_batches;
    loss_ = 0;
    peak_live_ = live_ = 0;
    std::vector<pipeline::TraceRecord> records =
        pipeline::run_schedule(s, rank_, pp, *this, {trace != nullptr, bf16_messages_});
    if (trace) *trace = std::move(records);
    // The head wrote the tied embedding's gradient in forward. On a rank with no embedding
    // backward, unit 0 is complete only when every chunk's backward is: it completes the bucket
    // it starts, so it is signalled after the rank's last backward.
    if (holds_embedding_copy_) {
        last_micro_(true);
        w_.grads_ready(0);
    }
    WEFT_CHECK(acts_.empty() && grad_in_.empty(),
               "internal: the schedule left {} activations and {} gradients behind", acts_.size(),
               grad_in_.size());
    grad_out_.clear();
    fill_ = nullptr;
    return loss_;
}

namespace {

// At the turn of a V the next chunk is on the same rank: its input is copied, not sent.
void hand_over(const model::Activations& from, model::Activations& to) {
    std::copy_n(from.resid_in(from.first_layer + from.n_layers), to.boundary_floats(),
                to.resid_in(to.first_layer));
}

}  // namespace

void PipelineStage::forward(int micro, int chunk) {
    model::Activations& a = acquire(micro, chunk);
    const bool first = chunk == 0, last = chunk == part_.chunks() - 1;
    if (!first && part_.owner(chunk - 1) == rank_) {
        // The previous chunk is this rank's too (the turn of a V): its output is here.
        hand_over(acquire(micro, chunk - 1), a);
    }
    // Every chunk: packed documents give each chunk's attention its boundaries (and its rotary
    // angles their positions); a window of tokens costs nothing beside a chunk's layers.
    (*fill_)(micro, a);
    a.loss_scale = loss_scale_;
    if (first) model_.embed_forward(a, w_);
    for (int l = a.first_layer; l < a.first_layer + a.n_layers; ++l) model_.block_forward(a, w_, l);
    if (last) loss_ += model_.head_forward(a, w_, /*train=*/true, loss_scale_);
}

void PipelineStage::backward(int micro, int chunk) {
    backward_chunk(micro, chunk, false);
}

void PipelineStage::backward_input(int micro, int chunk) {
    backward_chunk(micro, chunk, true);
}

void PipelineStage::backward_weight(int micro, int chunk) {
    model::Activations& a = acquire(micro, chunk);
    last_micro_(micro == micro_batches_ - 1);
    // The fused backward's order, last layer first, so that units complete as they would there.
    for (int l = a.first_layer + a.n_layers - 1; l >= a.first_layer; --l)
        model_.block_backward_weight(a, w_, l);
    // The embedding's gradient was complete at B, but a data-parallel bucket holding it and
    // the first layers starts with it: signalled after those layers' W.
    if (chunk == 0) w_.grads_ready(0);
    release(micro, chunk);
}

void PipelineStage::backward_chunk(int micro, int chunk, bool split) {
    model::Activations& a = acquire(micro, chunk);
    const int64_t n = a.boundary_floats();
    last_micro_(micro == micro_batches_ - 1);
    model::HoldGradsReady held(w_);
    model::UnitAccess& w = split ? static_cast<model::UnitAccess&>(held) : w_;
    if (chunk == part_.chunks() - 1) {
        model_.head_backward(a, w);
    } else if (part_.owner(chunk + 1) == rank_) {
        // The next chunk is this rank's too (the turn of a V): its input's gradient is here.
        const Buffer& g = grad_out_.at({micro, chunk + 1});
        std::copy_n(g.data(), n, model_.dresid(B_, T_));
    } else {
        auto it = grad_in_.find({micro, chunk});
        WEFT_CHECK(it != grad_in_.end(),
                   "internal: no gradient received for micro-batch {} chunk {}", micro, chunk);
        std::copy_n(it->second.data(), n, model_.dresid(B_, T_));
        grad_in_.erase(it);
    }
    for (int l = a.first_layer + a.n_layers - 1; l >= a.first_layer; --l) {
        if (split)
            model_.block_backward_input(a, w_, l);
        else
            model_.block_backward(a, w_, l);
    }
    if (chunk == 0) {
        model_.embed_backward(a, w);
    } else {
        Buffer& out = grad_out_[{micro, chunk}];
        if (out.size() != n) out = Buffer(n);
        std::copy_n(model_.dresid(B_, T_), n, out.data());
    }
    if (!split) release(micro, chunk);  // else kept for the W
}

std::span<float> PipelineStage::act_in(int micro, int chunk) {
    model::Activations& a = acquire(micro, chunk);
    return {a.resid_in(a.first_layer), size_t(a.boundary_floats())};
}

std::span<const float> PipelineStage::act_out(int micro, int chunk) {
    model::Activations& a = acquire(micro, chunk);
    return {a.resid_in(a.first_layer + a.n_layers), size_t(a.boundary_floats())};
}

std::span<float> PipelineStage::grad_in(int micro, int chunk) {
    const int64_t n = acquire(micro, chunk).boundary_floats();
    Buffer& b = grad_in_[{micro, chunk}];
    if (b.size() != n) b = Buffer(n);
    return {b.data(), size_t(n)};
}

std::span<const float> PipelineStage::grad_out(int micro, int chunk) {
    const Buffer& b = grad_out_.at({micro, chunk});
    return {b.data(), size_t(b.size())};
}

double PipelineStage::forward_only(comm::Group& pp, const model::Activations& io) {
    // Chunks in forward order; each rank runs its own and hands the residual stream on. Every
    // rank walks the chunks in the same order, so the blocking messages cannot deadlock.
    constexpr int kTag = comm::tags::kPipelineEval;
    double loss = 0;
    const int chunks = part_.chunks();
    for (int c = 0; c < chunks; ++c) {
        if (part_.owner(c) != rank_) continue;
        auto& slot = eval_[c];
        if (!slot || slot->B != io.B) {
            model::LayerSpan sp = span(c);
            sp.recompute = false;
            slot = model_.new_activations(io.B, T_, sp);
            slot->positions = positions_;
        }
        model::Activations& a = *slot;
        const int64_t n = a.boundary_floats();
        a.inputs = io.inputs;
        a.targets = io.targets;
        a.loss_scale = 0;
        if (c == 0) {
            model_.embed_forward(a, w_);
        } else if (part_.owner(c - 1) == rank_) {  // the turn of a V: handed over here
            hand_over(*eval_.at(c - 1), a);
        } else {
            comm::recv(pp, std::span<float>(a.resid_in(a.first_layer), size_t(n)),
                       part_.owner(c - 1), kTag);
        }
        for (int l = a.first_layer; l < a.first_layer + a.n_layers; ++l)
            model_.block_forward(a, w_, l);
        if (c + 1 < chunks && part_.owner(c + 1) != rank_) {
            comm::send(pp,
                       std::span<const float>(a.resid_in(a.first_layer + a.n_layers), size_t(n)),
                       part_.owner(c + 1), kTag);
        } else if (c + 1 == chunks) {
            loss = model_.head_forward(a, w_, /*train=*/false, 1.0f);
        }
    }
    return loss;
}

}  // namespace weft::train
