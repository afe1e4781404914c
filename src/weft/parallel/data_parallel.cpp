#include "weft/parallel/data_parallel.hpp"

#include <algorithm>

#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/zero_grads.hpp"
#include "weft/parallel/zero_params.hpp"

namespace weft::parallel {

DataParallel::DataParallel(const model::ParamLayout& layout, comm::Group& dp,
                           DataParallelOptions options)
    : dp_(dp),
      edp_(options.expert_dp),
      stage_(options.zero),
      optimizer_(options.optimizer),
      gradients_(optim::find_optimizer(options.optimizer).gradients),
      z_(layout, dp.size(), dp.rank()) {
    WEFT_CHECK(stage_ >= 0 && stage_ <= 3, "--zero must be 0, 1, 2 or 3, got {}", stage_);
    // The layout slices expert parts over edp (zero_layout.hpp), so the group must be there.
    WEFT_CHECK((edp_ != nullptr) == (z_.ep() > 1) && (!edp_ || edp_->size() * z_.ep() == dp.size()),
               "internal: a layout of expert-parallel degree {} over dp {} with an expert-data-"
               "parallel group of {}",
               z_.ep(), dp.size(), edp_ ? edp_->size() : 0);
    WEFT_CHECK(options.bucket_mb > 0, "--bucket-mb must be positive, got {}", options.bucket_mb);
    bucket_bytes_ = int64_t(options.bucket_mb * (1 << 20));
    bf16_reduce_ = options.bf16_grad_reduce;
    buckets_ = make_buckets(z_, bucket_bytes_);
    if (stage_ == 0) {
        update_ = {{-1, 0, z_.padded().total, 0}};
    } else {
        update_ = z_.slices();
    }
    param_ticket_.resize(z_.slices().size());
    copy_bf16_ = options.bf16_working_copy;
    copy_files_ = !options.params_dir.empty();
    if (copy_bf16_ || copy_files_) {
        WEFT_CHECK(stage_ <= 1 && !edp_, "internal: a working copy at ZeRO {} over dp {}", stage_,
                   dp.size());
        // Without model parallelism (refused with a working copy) the dp rank is the world's.
        work_ = std::make_unique<WorkingCopy>(z_.padded(), pool_, copy_bf16_, options.params_dir,
                                              dp.rank(), gradients_);
        return;
    }
    params_ = Buffer(stage_ < 3 ? z_.padded().total : z_.shard_floats());
    if (gradients_) grads_ = Buffer(stage_ < 2 ? z_.padded().total : z_.shard_floats());
    reducer_ = std::make_unique<GradReducer>(z_, buckets_, bucket_bytes_, dp_, inflight_, pool_,
                                             grads_.data(), stage_ >= 2, bf16_reduce_, edp_);
    if (stage_ == 3)
        gatherer_ =
            std::make_unique<ParamGatherer>(z_, dp_, inflight_, pool_, params_.data(), edp_);
}

DataParallel::~DataParallel() {
    inflight_.wait_all();
}

void DataParallel::load_params(const UnitFill& fill, const UnitKeep& master) {
    settle();
    if (!work_) return fill_units(z_, fill, params_.data(), /*whole=*/stage_ < 3);
    fill_units(
        z_, fill,
        [&](int, int64_t at, int64_t n, const float* data) {
            work_->write_params(at, n, data);
            if (master) master(-1, at, n, data);
        },
        /*whole=*/true);
    work_->flush();
}

const float* DataParallel::gather_params(float* out) {
    settle();
    if (work_) {
        work_->read_params(0, z_.padded().total, out);
        return out;
    }
    if (stage_ < 3) return params_.data();
    gather_shard(params_.data(), out);
    return out;
}

void DataParallel::gather_shard(const float* shard, float* out) {
    // Slice by slice, so that no message exceeds a unit and rank 0 receives in place.
    constexpr int kTag = comm::tags::kZeroShardGather;
    // Rank 0 holds its own experts only: the other ep ranks' slices have no place in its buffer.
    WEFT_CHECK(!edp_, "internal: gathering the whole model on one rank under expert parallelism");
    const auto& slices = z_.slices();
    if (dp_.rank() != 0) {
        for (const ShardSlice& s : slices)
            comm::send(dp_, std::span<const float>(shard + s.shard_offset, size_t(s.size)), 0,
                       kTag);
        return;
    }
    for (const ShardSlice& s : slices) std::copy_n(shard + s.shard_offset, s.size, out + s.begin);
    for (int r = 1; r < dp_.size(); ++r)
        for (const ShardSlice& s : slices)
            comm::recv(dp_, std::span<float>(out + z_.slice_begin(s, r), size_t(s.size)), r, kTag);
}

void DataParallel::begin_step() {
    if (work_) return work_->zero_grads();
    grads_.zero();
}

void DataParallel::begin_forward(bool last_micro_batch) {
    last_micro_ = last_micro_batch;
    if (work_) work_->set_forward(true);
    if (gatherer_) gatherer_->begin_phase(true);
}

void DataParallel::begin_backward() {
    if (work_) work_->set_forward(false);
    if (gatherer_) gatherer_->begin_phase(false);
}

void DataParallel::end_backward() {
    inflight_.wait_all();
    if (reducer_) reducer_->finish();
}

float* DataParallel::update_params(const ShardSlice& s) {
    WEFT_CHECK(!work_, "internal: update_params with a bf16 working copy");
    return params_.data() + (stage_ < 3 ? s.begin : s.shard_offset);
}

const float* DataParallel::update_grads(const ShardSlice& s) {
    WEFT_CHECK(!work_, "internal: update_grads with a bf16 working copy");
    return grads_.data() + (stage_ < 2 ? s.begin : s.shard_offset);
}

void DataParallel::set_last_micro_batch(bool last) {
    WEFT_CHECK(stage_ < 2, "internal: ZeRO stage {} reduces every micro-batch", stage_);
    last_micro_ = last;
}

double DataParallel::grad_sum_squares(const std::function<bool(const model::ParamSpec&)>& counted) {
    // The ranges of the padded buffer this rank counts, and where their gradients are.
    struct Range {
        int64_t begin, size;
        const float* grads;
    };
    if (work_) {
        // The ranges the in-memory sum below takes (no model parallelism: nothing to filter).
        WEFT_CHECK(!counted, "internal: a bf16 working copy under model parallelism");
        if (stage_ == 0) {
            const int64_t part = z_.padded().total / dp_.size();
            return work_->grad_sum_squares(dp_.rank() * part, part);
        }
        double sum = 0;
        for (const ShardSlice& s : update_) sum += work_->grad_sum_squares(s.begin, s.size);
        return sum;
    }
    std::vector<Range> mine;
    if (stage_ == 0) {
        // Every rank holds the whole reduced gradient; each sums its 1/dp of the buffer (the
        // padded total is a multiple of dp). With dp = 1 this is the single-process sum.
        const int64_t part = grads_.size() / dp_.size();
        mine.push_back({dp_.rank() * part, part, grads_.data() + dp_.rank() * part});
    } else {
        for (const ShardSlice& s : update_) mine.push_back({s.begin, s.size, update_grads(s)});
    }
    double sum = 0;
    if (edp_ && stage_ == 0) {
        // Stage 0: dense tensors on this rank's 1/dp of the buffer; an expert tensor's elements
        // differ across ep ranks, so each ep rank counts its own, split over its edp group.
        const int64_t total = grads_.size();
        const int64_t part = total / dp_.size(), epart = total / edp_->size();
        for (const model::ParamSpec& t : z_.padded().tensors) {
            if (counted && !counted(t)) continue;
            const int64_t lo = t.expert ? edp_->rank() * epart : dp_.rank() * part;
            const int64_t hi = lo + (t.expert ? epart : part);
            const int64_t b = std::max(lo, t.offset);
            const int64_t e = std::min(hi, t.offset + t.numel_stored);
            if (b < e) sum += kernels::sum_squares(grads_.data() + b, e - b);
        }
        return sum;
    }
    for (const Range& r : mine) {
        if (!counted) {
            sum += kernels::sum_squares(r.grads, r.size);
            continue;
        }
        for (const model::ParamSpec& t : z_.padded().tensors) {
            if (!counted(t)) continue;
            const int64_t b = std::max(r.begin, t.offset);
            const int64_t e = std::min(r.begin + r.size, t.offset + t.numel_stored);
            if (b < e) sum += kernels::sum_squares(r.grads + (b - r.begin), e - b);
        }
    }
    return sum;
}

void DataParallel::round_grads_bf16() {
    // Where the rank keeps the gradient of padded range [begin, begin + size).
    struct Range {
        int64_t begin, size;
        float* grads;
    };
    std::vector<Range> held;
    if (stage_ < 2)
        held.push_back({0, grads_.size(), grads_.data()});
    else
        for (const ShardSlice& s : z_.slices())
            held.push_back({s.begin, s.size, grads_.data() + s.shard_offset});
    for (const model::ParamSpec& t : z_.padded().tensors) {
        if (!kept_bf16(z_.padded(), t)) continue;
        for (const Range& r : held) {
            const int64_t b = std::max(r.begin, t.offset);
            const int64_t e = std::min(r.begin + r.size, t.offset + t.numel_stored);
            float* g = r.grads - r.begin;
#pragma omp parallel for schedule(static) if (e - b > 65536)
            for (int64_t i = b; i < e; ++i)
                g[i] = kernels::bf16_to_fp32(kernels::fp32_to_bf16(g[i]));
        }
    }
}

void DataParallel::after_update() {
    if (work_ && stage_ == 1 && dp_.size() > 1) {
        // Each rank updated its slices of the copy: every rank gets every slice, as fp32 (the
        // bf16 parts exactly, so that storing them again rounds nothing). Blocking, a unit's
        // part at a time.
        Buffer mine, all;
        for (const ShardSlice& s : z_.slices()) {
            const int64_t part = s.size * dp_.size();
            mine.ensure(s.size);
            all.ensure(part);
            work_->read_params(s.begin, s.size, mine.data());
            comm::all_gather(dp_, std::span<const float>(mine.data(), size_t(s.size)),
                             std::span<float>(all.data(), size_t(part)));
            work_->write_params(s.part_begin, part, all.data());
        }
    }
    if (work_) work_->flush();
    if (work_ || (stage_ != 1 && stage_ != 2)) return;
    const auto& slices = z_.slices();
    for (size_t i = 0; i < slices.size(); ++i) {
        const ShardSlice& s = slices[i];
        float* part = params_.data() + s.part_begin;
        param_ticket_[i] = inflight_.add(comm::all_gather_async(
            s.expert ? *edp_ : dp_,
            std::span<const float>(params_.data() + s.begin, size_t(s.size)),
            std::span<float>(part, size_t(s.size) * size_t(z_.group_size(s)))));
    }
}

void DataParallel::settle() {
    inflight_.wait_all();
    if (work_) work_->flush();
    for (auto& t : param_ticket_) t.reset();
}

ModelStateBytes zero_state_bytes(const ZeroLayout& z, int stage, std::string_view optimizer,
                                 bool bf16_working_copy, bool copy_in_files) {
    const int64_t f = sizeof(float), total = z.padded().total, shard = z.shard_floats();
    const bool gradients = optim::find_optimizer(optimizer).gradients;
    int64_t state = 0;
    if (stage == 0)
        state = optim::optimizer_state_bytes(optimizer, z.padded(), 0, total);
    else
        for (const ShardSlice& s : z.slices())
            state += optim::optimizer_state_bytes(optimizer, z.padded(), s.begin, s.begin + s.size);
    if (bf16_working_copy || copy_in_files) {
        // The working copy's weights and gradients (one rank: the whole buffer), in files the
        // records memory holds at most; the master of what the rank updates (stage 0 the whole
        // buffer, else its slices: the same floats).
        const int64_t stored = WorkingCopy::stored_bytes(z.padded(), bf16_working_copy);
        const int64_t held =
            copy_in_files ? WorkingCopy::resident_bytes(z.padded(), bf16_working_copy) : stored;
        // Without gradients (zeroth order) the copy holds weights only, and every rank moves
        // the whole buffer (no state to shard), so its master is the whole buffer.
        ModelStateBytes b{held, gradients ? held : 0, state,
                          (stage == 0 || !gradients ? total : shard) * f};
        if (copy_in_files) b.copy_files = (gradients ? 2 : 1) * (stored + offload::kHeaderBytes);
        return b;
    }
    return {(stage < 3 ? total : shard) * f, gradients ? (stage < 2 ? total : shard) * f : 0,
            state};
}

int64_t zero_working_bytes(const ZeroLayout& z, int stage, int64_t bucket_bytes, bool bf16_reduce,
                           bool gradients, bool bf16_working_copy, bool copy_in_files) {
    // A widened unit's weights and its accumulating gradient (WorkingCopy), nothing reduced.
    if (bf16_working_copy || copy_in_files)
        return (gradients ? 2 : 1) * WorkingCopy::widened_floats(z.padded(), bf16_working_copy) *
               int64_t(sizeof(float));
    // Stage 3's gathered units: unit 0 and two others (ParamGatherer).
    const auto& units = z.padded().units;
    int64_t other = 0;
    for (size_t u = 1; u < units.size(); ++u) other = std::max(other, units[u].size);
    const int64_t gathered = stage == 3 ? units[0].size + 2 * other : 0;
    const int64_t reducer = gradients
                                ? reducer_temp_bytes(z, make_buckets(z, bucket_bytes), bucket_bytes,
                                                     stage >= 2, bf16_reduce && z.dp() > 1)
                                : 0;
    return reducer + gathered * int64_t(sizeof(float));
}

ModelStateBytes DataParallel::model_state_bytes() const {
    const ModelStateBytes b = zero_state_bytes(z_, stage_, optimizer_, copy_bf16_, copy_files_);
    WEFT_CHECK(work_ || (b.params == params_.size() * int64_t(sizeof(float)) &&
                         b.grads == grads_.size() * int64_t(sizeof(float))),
               "internal: zero_state_bytes counts {} + {} bytes, the buffers hold {} + {}",
               b.params, b.grads, params_.size() * sizeof(float), grads_.size() * sizeof(float));
    return b;
}

int64_t DataParallel::working_bytes() const {
    return zero_working_bytes(z_, stage_, bucket_bytes_, bf16_reduce_, gradients_, copy_bf16_,
                              copy_files_);
}

float* DataParallel::params(int unit) {
    if (work_) return work_->params(unit);
    inflight_.poll();
    if (gatherer_) return gatherer_->acquire(unit);
    for (int i = z_.first_slice(unit); i < z_.first_slice(unit + 1); ++i)
        if (auto& t = param_ticket_[size_t(i)]) {
            inflight_.wait(*t);
            t.reset();
        }
    return params_.data() + z_.padded().units[unit].offset;
}

float* DataParallel::grads(int unit) {
    if (work_) return work_->grads(unit);
    return reducer_->unit_grads(unit);
}

void DataParallel::release(int unit) {
    if (work_) return work_->release(unit);
    if (gatherer_) gatherer_->release(unit);
    inflight_.poll();
}

void DataParallel::grads_ready(int unit) {
    if (work_) {
        if (dp_.size() == 1) return work_->grads_ready(unit, {}, last_micro_);
        return work_->grads_ready(
            unit,
            [&](float* data, int64_t n) {
                comm::all_reduce(dp_, std::span<float>(data, size_t(n)));
            },
            last_micro_);
    }
    reducer_->ready(unit, last_micro_);
    inflight_.poll();
}

void DataParallel::progress() {
    inflight_.poll();
}

}  // namespace weft::parallel
