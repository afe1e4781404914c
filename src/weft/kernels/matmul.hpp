#pragma once
// Matrix products through oneDNN, primitives cached by shape. Row-major throughout; a weight is
// [out, in] as in torch.nn.Linear (Hugging Face's Conv1D [in, out] is transposed at the boundary).
//
// Every product here (gemm, matmul_forward, matmul_backward) follows one process-wide precision,
// as torch.set_float32_matmul_precision does. fp32, the default, multiplies in fp32. bf16 rounds
// both operands to bf16 (to nearest even; AVX512-BF16 instructions where the CPU has them) and
// runs oneDNN's bf16 matmul primitive, which accumulates in fp32 and writes fp32: the caller's
// buffers stay fp32, a beta = 1 product (gradient accumulation) adds into the fp32 destination,
// and the bias is added in fp32. This is autocast-style mixed precision: master weights,
// gradients, optimizer moments, LayerNorm, softmax, attention (a hand-written fp32 kernel) and
// the loss all stay fp32; only the matrix products' inputs are rounded. On a CPU where oneDNN has
// no bf16 matmul (neither AVX512-BF16 nor AMX) bf16 is emulated, not refused: the rounded
// operands are widened back and multiplied in fp32, which gives the same products (a product of
// two bf16 values is exact in fp32) at fp32 speed, so a bf16 run trains the same model anywhere.
#include <cstdint>
#include <string_view>

namespace weft::kernels {

enum class MatmulPrecision { fp32, bf16 };

// The precision of every product that starts after the call (all threads). Not meant to change
// while products run on other threads.
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();
// "fp32" or "bf16" (the --dtype values); anything else is an error naming it.
MatmulPrecision parse_matmul_precision(std::string_view name);
const char* matmul_precision_name(MatmulPrecision p);

// Sets the precision for a scope and restores the previous one after it (tests, benchmarks).
class MatmulPrecisionScope {
  public:
    explicit MatmulPrecisionScope(MatmulPrecision p) : saved_(matmul_precision()) {
        set_matmul_precision(p);
    }
    ~MatmulPrecisionScope() { set_matmul_precision(saved_); }
    MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
    MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

  private:
    MatmulPrecision saved_;
};

// A matrix several bf16 products of one caller read (the classifier's embedding table feeds two
// products per chunk of rows, each chunk's input and logits two): while the scope lives, bf16
// products on this thread that read exactly this stored block (same pointer, rows, cols and
// leading dimension; alpha = 1) reuse the copies made at its first reads instead of rounding it
// again on every call. Read as A, one compact bf16 copy; read as B by a native bf16 product, one
// copy per layout in oneDNN's packed weights format (rounded and packed in one pass), which also
// spares oneDNN repacking it on every call. The caller must not write the block while the scope
// lives. Does nothing with fp32 precision. Scopes nest (up to 4), innermost last.
class Bf16OperandScope {
  public:
    Bf16OperandScope(const float* x, int64_t rows, int64_t cols, int64_t ld);
    // A scope on a block whose compact bf16 copy the caller writes, into copy() (rows·cols
    // values), before a product reads it: a kernel that produces the block can round it as it
    // goes and need not store it in fp32 at all (the classifier's logits gradient). copy() is
    // null with fp32 precision; write the block itself then.
    struct CallerRounds {};
    Bf16OperandScope(const float* x, int64_t rows, int64_t cols, int64_t ld, CallerRounds);
    ~Bf16OperandScope();
    Bf16OperandScope(const Bf16OperandScope&) = delete;
    Bf16OperandScope& operator=(const Bf16OperandScope&) = delete;

    uint16_t* copy() const { return copy_; }

  private:
    bool active_ = false;
    uint16_t* copy_ = nullptr;
};

// C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, with op(X) = X or Xᵀ, leading dimensions
// lda/ldb/ldc in elements, beta in {0, 1}. The general entry every other product here uses.
// With bf16 precision, alpha scales A before it is rounded.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[M,N] = inp[M,K] · weight[N,K]ᵀ + bias[N] (bias may be null).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N);

// Gradients of matmul_forward. Any output may be null to skip it.
//   dinp[M,K]    = dout · weight         (overwritten, or added to when accumulate_dinp)
//   dweight[N,K] += doutᵀ · inp          (always accumulates: gradient accumulation)
//   dbias[N]     += Σ_m dout[m,:]
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t M, int64_t K, int64_t N, bool accumulate_dinp);
// Floats of the scratch matmul_backward keeps on the calling thread for a layer of K inputs and
// N outputs under products of precision p: under fp32, a layer that widens (N > K) computes its
// weight gradient transposed there (N·K floats); else none. The thread keeps the largest it has
// needed.
int64_t matmul_backward_scratch_floats(int64_t K, int64_t N,
                                       MatmulPrecision p = matmul_precision());

// The same products with the input already rounded to bf16 (bf16 bit patterns, compact [M,K]): an
// activation stored as bf16 for backward (model::LayerSpan::bf16). Bit for bit what
// matmul_forward / matmul_backward give on the fp32 values it was rounded from, since those round
// their input to nearest even on every call; here it is read as it is. Only with bf16 precision.
void matmul_forward_bf16_input(float* out, const uint16_t* inp, const float* weight,
                               const float* bias, int64_t M, int64_t K, int64_t N);
// matmul_forward_bf16_input with the output rounded to bf16 (to nearest even) as oneDNN writes it,
// for a layer whose output is only kept as bf16: it spares writing, re-reading and rounding an
// fp32 copy. Only where bf16 products are native (bf16_products_native()).
void matmul_forward_bf16_in_out(uint16_t* out, const uint16_t* inp, const float* weight,
                                const float* bias, int64_t M, int64_t K, int64_t N);
void matmul_backward_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                const uint16_t* inp, const float* weight, int64_t M, int64_t K,
                                int64_t N, bool accumulate_dinp);

// matmul_backward_bf16_input with the input gradient written rounded to bf16 (oneDNN dst bf16),
// for a caller that only reads it rounded (the bf16 attention's backward takes its output's
// gradient so): no fp32 copy is written and rounded after. Nearly always the same bits as
// rounding the fp32 gradient (oneDNN may sum in another order for a bf16 destination). Only
// where bf16 products are native (bf16_products_native()).
void matmul_backward_bf16_in_out(uint16_t* dinp, float* dweight, float* dbias, const float* dout,
                                 const uint16_t* inp, const float* weight, int64_t M, int64_t K,
                                 int64_t N);

// matmul_backward_bf16_input with dout too already rounded to bf16 (compact [M,N]), as the
// kernel before it wrote it (gelu_backward_bf16), and without the bias: that kernel summed its
// gradient. Bit for bit matmul_backward_bf16_input on the fp32 dout whose rounding this is.
void matmul_backward_bf16_dout(float* dinp, float* dweight, const uint16_t* dout,
                               const uint16_t* inp, const float* weight, int64_t M, int64_t K,
                               int64_t N, bool accumulate_dinp);
// Whether this CPU runs bf16 products natively (oneDNN has a bf16 matmul for it); false: they
// are emulated on the fp32 units.
bool bf16_products_native();

// Bytes of bf16 operand copies this thread holds for bf16 products (kept between calls so that
// a step does not allocate and page them in again), and, where products are emulated, of the
// fp32 buffers the copies of A and B are widened into.
int64_t matmul_bf16_scratch_bytes();

// What matmul_bf16_scratch_bytes comes to on a thread that runs the given bf16 products: each
// operand role's buffer grows to the largest operand of that role, and so (emulated) do the two
// widened ones. The memory estimate lists a step's products here (model/bf16_scratch.hpp), by the
// role rules the products above follow (test_gpt2_bf16 checks a step against the real buffers).
class Bf16ScratchCount {
  public:
    // gemm(trans_a, trans_b, M, N, K, ..., beta = accumulate, ...); an operand under a
    // Bf16OperandScope (pinned) is not rounded into its role's buffer.
    void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, bool accumulate,
              bool a_pinned = false, bool b_pinned = false);
    // The block pinned at nesting depth `depth` (a Bf16OperandScope) read as A: its compact copy
    // of n values.
    void pinned_a(int depth, int64_t n);
    // ... read as B by the product gemm(trans_a, trans_b, M, N, K, beta = accumulate), the
    // layout's `slot`-th distinct packed layout in the scope's life: on a native CPU a copy in
    // oneDNN's packed layout for that product, where emulated the compact copy.
    void pinned_b(int depth, int slot, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  bool accumulate);
    // matmul_forward (bf16_input: matmul_forward_bf16_input) of [M,K] by [N,K]ᵀ.
    void forward(int64_t M, int64_t K, int64_t N, bool bf16_input);
    // matmul_backward (bf16_input: matmul_backward_bf16_input; bf16_dout too:
    // matmul_backward_bf16_dout) with dinp and dweight.
    void backward(int64_t M, int64_t K, int64_t N, bool bf16_input, bool bf16_dout = false);
    // Bytes of bf16 copies, and of widened fp32 operands where products are emulated.
    int64_t bytes(bool emulated = !bf16_products_native()) const;

  private:
    void product(int64_t a, int64_t b);  // one bf16 product of operands with a and b elements
    // A native product's B packed into role B's buffer (ldb the stored width, ldc = N).
    void packed_b(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, bool accumulate,
                  bool b_bf16 = false);
    int64_t a_ = 0, b_ = 0, c_ = 0, packed_b_ = 0, wide_a_ = 0, wide_b_ = 0;
    int64_t pin_a_[4] = {}, pin_b_[4] = {}, packed_[8] = {};  // 4 scopes, 2 packed layouts each
};

}  // namespace weft::kernels
