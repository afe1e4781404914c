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
    auto perturb = [&](float scale) {
        // A ZeRO-3 prefetch may still read the shard.
        dp_.settle();
        for (size_t i = 0; i < opt_.size(); ++i)
            dynamic_cast<const optim::ZerothOrder&>(*opt_[i]).perturb(params_of(i), scale, oc.seed,
                                                                      t);
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
    perturb(eps);
    const double plus = loss();
    perturb(-2 * eps);
    const double minus = loss();
    perturb(eps);
    // Both losses over the global batch: every rank then takes the same projected gradient.
    double sums[2] = {plus, minus};
    comm::all_reduce(dp_.group(), std::span<double>(sums, 2));
    // A non-finite loss ends the run at the trainer, which reports it.
    const double g = (sums[0] - sums[1]) * double(loss_scale) / (2.0 * double(eps));
    optim::StepArgs args{oc, lr, 1.0f, t, g};
    for (size_t i = 0; i < opt_.size(); ++i) opt_[i]->step(params_of(i), nullptr, args);
    // The loss reported is the mean of the two, L(w) up to O(eps^2); the norm is |g|.
    return {0.5 * (sums[0] + sums[1]), std::fabs(g), {}, std::nullopt};
}

}  // namespace weft::train
