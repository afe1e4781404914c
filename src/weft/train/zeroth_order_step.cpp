// TrainState's step for an optimizer without gradients (MeZO, optim/mezo.hpp): two forward
// passes over the step's micro-batches, at w + eps z and at w - eps z, then the update along z.
#include <cmath>

#include "weft/comm/collectives.hpp"
#include "weft/optim/mezo.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

StepOutcome TrainState::zeroth_order_step(int64_t micro_batches,
                                          const std::function<void(int64_t)>& fill,
                                          float loss_scale, const optim::OptimConfig& oc, float lr,
                                          int64_t t) {
    const auto& slices = dp_.update_slices();
    // The parameters each optimizer covers: the whole buffer below ZeRO 3, else its slices.
    auto params_of = [&](size_t i) {
        return dp_.stage() < 3 ? dp_.update_params({-1, 0, 0, 0}) : dp_.update_params(slices[i]);
    };
    // With the master in the offload files (a working copy: --dtype bf16 or optimizer+params)
    // each perturbation is a pass over it, rounded into the copy the forward reads; the restore
    // and the update are one pass, element by element the same operations as in memory.
    if (offload_) offload_last_ = {};
    auto perturb = [&](float scale, const optim::StepArgs* update) {
        // A ZeRO-3 prefetch may still read the shard.
        dp_.settle();
        if (offload_) {
            offload_last_ += zeroth_order_pass(scale, oc.seed, t, update);
            return;
        }
        for (size_t i = 0; i < opt_.size(); ++i) {
            dynamic_cast<const optim::ZerothOrder&>(*opt_[i]).perturb(params_of(i), scale, oc.seed,
                                                                      t);
            if (update) opt_[i]->step(params_of(i), nullptr, *update);
        }
    };
    auto loss = [&] {
        double sum = 0;
        for (int64_t m = 0; m < micro_batches; ++m) {
            fill(m);
            dp_.begin_forward(m + 1 == micro_batches);
            sum += model_->forward(*act_, dp_, /*train=*/false, loss_scale);
        }
        return sum;
    };
    const float eps = oc.mezo_eps;
    perturb(eps, nullptr);
    const double plus = loss();
    perturb(-2 * eps, nullptr);
    const double minus = loss();
    // Both losses over the global batch: every rank then takes the same projected gradient.
    double sums[2] = {plus, minus};
    comm::all_reduce(dp_.group(), std::span<double>(sums, 2));
    // A non-finite loss ends the run at the trainer, which reports it.
    const double g = (sums[0] - sums[1]) * double(loss_scale) / (2.0 * double(eps));
    // Back to w, then the step along z.
    const optim::StepArgs args{oc, lr, 1.0f, t, g};
    perturb(eps, &args);
    // The loss reported is the mean of the two, L(w) up to O(eps^2); the norm is |g|.
    return {0.5 * (sums[0] + sums[1]), std::fabs(g), {}, std::nullopt};
}

offload::PassStats TrainState::zeroth_order_pass(float scale, uint64_t seed, int64_t t,
                                                 const optim::StepArgs* args) {
    parallel::WorkingCopy& work = *dp_.working_copy();
    const offload::PassStats p =
        offload_->run(true, true, [&](int i, int64_t a, int64_t b, std::span<std::byte* const> s) {
            const optim::Optimizer& o = *opt_[size_t(i)];
            // At element 0 of the optimizer's range, as step_range addresses it.
            float* master = reinterpret_cast<float*>(s[size_t(master_stream_)]) - a;
            dynamic_cast<const optim::ZerothOrder&>(o).perturb_range(master, scale, seed, t, a, b);
            if (args) opt_[size_t(i)]->step_range(master, nullptr, nullptr, a, b, *args);
            work.write_params(o.begin() + a, b - a, master + a);
        });
    work.flush();
    return p;
}

}  // namespace weft::train
