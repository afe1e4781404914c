#include "weft/train/memory.hpp"

#include <fmt/format.h>

#include <fstream>
#include <string>

#include "weft/kernels/classifier.hpp"
#include "weft/model/family.hpp"

namespace weft::train {

std::string mib(int64_t b) {
    return fmt::format("{:.1f} MiB", double(b) / (1 << 20));
}

std::string MemoryEstimate::describe() const {
    const std::string zero = working ? fmt::format(" + ZeRO temporaries {}", mib(working)) : "";
    const std::string ckpt =
        checkpoint ? fmt::format(" + checkpoint staging {}", mib(checkpoint)) : "";
    const std::string bf16 =
        (bf16_operands ? fmt::format(" + bf16 operands {}", mib(bf16_operands)) : "") +
        (bf16_attention ? fmt::format(" + bf16 attention {}", mib(bf16_attention)) : "") +
        (teacher ? fmt::format(" + teacher {}", mib(teacher)) : "");
    return fmt::format(
        "weights {} + grads {} + optimizer {} + activations {} + scratch {}{}{} + baseline {}{} = "
        "{}",
        mib(weights), mib(grads), mib(optimizer), mib(activations), mib(scratch), zero, bf16,
        mib(baseline), ckpt, mib(total()));
}

MemoryEstimate estimate_memory(const model::ModelConfig& cfg, int64_t weights, int64_t grads,
                               int64_t optimizer, int64_t working_bytes, int64_t B, int64_t T,
                               int64_t baseline_bytes) {
    MemoryEstimate m;
    m.weights = weights;
    m.grads = grads;
    m.optimizer = optimizer;
    const model::Family& f = model::family_of(cfg);
    m.activations = 4 * f.activation_floats(cfg, B, T, {});
    m.scratch = 4 * (f.scratch_floats(cfg, B, T, 1, false) +
                     kernels::classifier_scratch_floats(B * T, cfg.vocab_size));
    m.working = working_bytes;
    m.baseline = baseline_bytes;
    return m;
}

static int64_t status_kib(const char* key) {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
    return 0;
}

int64_t current_rss_bytes() {
    return status_kib("VmRSS:") * 1024;
}
int64_t peak_rss_bytes() {
    return status_kib("VmHWM:") * 1024;
}

}  // namespace weft::train
