#include "weft/train/run_eval.hpp"

#include <fmt/format.h>

namespace weft::train {

void RunEvaluation::run(int64_t step) {
    if (!val_) return;
    heartbeat_.beat(Phase::eval, step);
    const EvalResult r = st_.evaluate(*val_, B_, batches_);
    log_.write({{"step", step}, {"val_loss", r.loss}, {"val_tokens", r.tokens}});
    log_.note(fmt::format("step {} | val loss {:.4f} ({} tokens)", step, r.loss, r.tokens));
}

}  // namespace weft::train
