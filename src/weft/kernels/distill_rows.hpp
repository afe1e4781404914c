#pragma once
// The rows of a distillation loss (Hinton et al. 2015; DistillSpec): a student's logits against
// a frozen teacher's over the same vocabulary, mixed with the plain cross-entropy of the data's
// token. The fused classifier runs it on each chunk of logits in place of its plain rows.
#include <cstdint>

namespace weft::kernels {

// The teacher's logits [N, V] for the rows of the classifier's x, and the mix. With weight a
// and temperature t, row n's loss is
//   (1 - a) * CE(z_n, target_n) + a * t^2 * KL(softmax(u_n / t) || softmax(z_n / t))
// for the student's logits z_n and the teacher's u_n, and its gradient in z_n
//   (1 - a) * (softmax(z_n) - onehot(target_n)) + a * t * (softmax(z_n / t) - softmax(u_n / t))
// (t^2 keeps the soft part's gradient the size of the hard one's whatever t, as Hinton's).
struct SoftTargets {
    const float* logits = nullptr;  // null: no distillation
    float weight = 1.0f;
    float temperature = 1.0f;
};

// The losses of r rows of student logits (row-major, V wide; loss may be null) against the
// teacher's rows `teacher` [r, V] and, with `grad`, scale times their gradient in place. A row
// whose target is negative has no loss and no gradient (as the plain rows).
void distill_rows(float* logits, float* loss, const int32_t* targets, const float* teacher,
                  int64_t r, int64_t V, float scale, bool grad, float weight, float temperature);

}  // namespace weft::kernels
