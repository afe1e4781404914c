#include "weft/kernels/matmul.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/add_transposed.hpp"
#include "weft/kernels/bf16_pack.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {

// Everything that makes one oneDNN matmul primitive differ from another.
struct GemmKey {
    int64_t M, N, K, lda, ldb, ldc;
    float alpha;
    bool trans_a, trans_b, accumulate, bias, bf16;  // bf16: A and B are bf16, C stays fp32
    // B is given in the layout the primitive prefers (oneDNN's blocked weights format), packed
    // beforehand from a plain fp32 or bf16 block that ldb and trans_b describe.
    enum class Pack : uint8_t { none, from_f32, from_bf16 } packed_b = Pack::none;
    bool c_bf16 = false;  // C is written rounded to bf16 (beta = 0 only)
    bool operator==(const GemmKey&) const = default;
};

struct GemmKeyHash {
    size_t operator()(const GemmKey& k) const {
        uint64_t h = 1469598103934665603ull;
        auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
        for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(uint64_t(v));
        uint32_t a;
        std::memcpy(&a, &k.alpha, sizeof a);
        mix(a);
        mix(uint64_t(k.trans_a) | uint64_t(k.trans_b) << 1 | uint64_t(k.accumulate) << 2 |
            uint64_t(k.bias) << 3 | uint64_t(k.bf16) << 4 | uint64_t(k.packed_b) << 5 |
            uint64_t(k.c_bf16) << 8);
        return size_t(h);
    }
};

struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory::desc a, b, c, bias, scratchpad;
    // With packed_b: the plain block B is read from ([K,N], or [N,K] stored transposed, at ldb)
    // and the reorder that (from fp32, rounding) packs it into b's layout in one pass.
    dnnl::memory::desc b_plain;
    std::optional<dnnl::reorder> pack_b;
};

// One engine for the process and the primitive cache. Primitives use a user scratchpad: with
// oneDNN's default library scratchpad a primitive may only run on the thread that created it,
// and a shared cache cannot promise that.
struct Dnnl {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    std::mutex mutex;
    std::unordered_map<GemmKey, std::shared_ptr<const Primitive>, GemmKeyHash> cache;
};

Dnnl& dnnl_state() {
    static Dnnl state;
    return state;
}

// A CPU stream is cheap; one per calling thread keeps concurrent callers (a communication
// thread, tests) from sharing an object oneDNN does not promise to be thread-safe.
dnnl::stream& thread_stream() {
    thread_local dnnl::stream stream(dnnl_state().engine);
    return stream;
}

std::vector<std::byte>& thread_scratchpad(size_t bytes) {
    thread_local std::vector<std::byte> buffer;
    if (buffer.size() < bytes) buffer.resize(bytes);
    return buffer;
}

std::shared_ptr<const Primitive> make_primitive(const GemmKey& k) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    // Transposes are strides: op(A)[m,k] sits at A[k*lda + m] when A is stored transposed.
    const dt in = k.bf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc a({k.M, k.K}, in, k.trans_a ? dims{1, k.lda} : dims{k.lda, 1});
    dnnl::memory::desc b =
        k.packed_b != GemmKey::Pack::none
            ? dnnl::memory::desc({k.K, k.N}, in, dnnl::memory::format_tag::any)
            : dnnl::memory::desc({k.K, k.N}, in, k.trans_b ? dims{1, k.ldb} : dims{k.ldb, 1});
    dnnl::memory::desc c({k.M, k.N}, k.c_bf16 ? dt::bf16 : dt::f32, dims{k.ldc, 1});
    dnnl::memory::desc bias({1, k.N}, dt::f32, dims{k.N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
    if (k.accumulate) {
        // beta = 1: the sum post-op adds the old destination after the (scaled) product.
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    auto desc = k.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c);
    dnnl::matmul::primitive_desc pd(desc, attr, dnnl_state().engine);
    auto p = std::make_shared<Primitive>();
    p->matmul = dnnl::matmul(pd);
    p->a = a;
    p->b = pd.weights_desc();
    if (k.packed_b != GemmKey::Pack::none) {
        const dt from = k.packed_b == GemmKey::Pack::from_f32 ? dt::f32 : dt::bf16;
        p->b_plain =
            dnnl::memory::desc({k.K, k.N}, from, k.trans_b ? dims{1, k.ldb} : dims{k.ldb, 1});
        p->pack_b.emplace(dnnl::reorder::primitive_desc(dnnl_state().engine, p->b_plain,
                                                        dnnl_state().engine, p->b));
    }
    p->c = c;
    p->bias = bias;
    p->scratchpad = pd.scratchpad_desc();
    return p;
}

std::shared_ptr<const Primitive> cached_primitive(const GemmKey& k) {
    Dnnl& state = dnnl_state();
    {
        std::lock_guard lock(state.mutex);
        auto it = state.cache.find(k);
        if (it != state.cache.end()) return it->second;
    }
    // Created outside the lock (it JITs code, milliseconds); a racing creator of the same key
    // only wastes its copy.
    auto p = make_primitive(k);
    std::lock_guard lock(state.mutex);
    return state.cache.try_emplace(k, std::move(p)).first->second;
}

// A and B are float or (key.bf16) uint16_t bf16 bit patterns.
void run_primitive(const GemmKey& k, const void* A, const void* B, const float* bias, void* C) {
    auto p = cached_primitive(k);
    const dnnl::engine& engine = dnnl_state().engine;
    // oneDNN takes non-const handles; it never writes the inputs.
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(p->a, engine, const_cast<void*>(A))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(p->b, engine, const_cast<void*>(B))},
        {DNNL_ARG_DST, dnnl::memory(p->c, engine, C)}};
    if (k.bias)
        args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias, engine, const_cast<float*>(bias)));
    size_t scratch = p->scratchpad.get_size();
    if (scratch > 0)
        args.emplace(DNNL_ARG_SCRATCHPAD,
                     dnnl::memory(p->scratchpad, engine, thread_scratchpad(scratch).data()));
    dnnl::stream& stream = thread_stream();
    p->matmul.execute(stream, args);
    stream.wait();
}

std::atomic<MatmulPrecision> g_precision{MatmulPrecision::fp32};

// bf16 copies of the operands, one growable buffer per role, per thread. Kept between calls:
// a GPT-2 step converts a few GB, and allocating that anew each call would page-fault it in
// again each time (and the logits' copy in the classifier is 100 MB).
// kPin0.. hold the compact copies of Bf16OperandScope, innermost last; kPacked0.. the packed
// copies of each scope's kPackedSlots layouts.
constexpr int kMaxPins = 4, kPackedSlots = 2;
enum Bf16Role : int {
    kRoleA,
    kRoleB,
    kRoleC,
    kPin0,
    kPacked0 = kPin0 + kMaxPins,
    kRoles = kPacked0 + kMaxPins * kPackedSlots
};

// On whole cache lines (64-byte aligned): a kernel that writes a pinned copy itself
// (Bf16OperandScope::CallerRounds) may then store whole lines with streaming stores.
struct AlignedDelete {
    void operator()(uint16_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
struct Bf16Buffer {
    std::unique_ptr<uint16_t[], AlignedDelete> data;
    int64_t size = 0;
};

thread_local Bf16Buffer t_bf16[kRoles];

uint16_t* bf16_buffer(int role, int64_t n) {
    Bf16Buffer& b = t_bf16[role];
    if (b.size < n) {
        b.data.reset();  // release the old block before taking the larger one
        b.data.reset(static_cast<uint16_t*>(
            ::operator new[](size_t(n) * sizeof(uint16_t), std::align_val_t(64))));
        b.size = n;
    }
    return b.data.get();
}

// A block Bf16OperandScope has pinned on this thread. Its copies are made at first use: the
// compact one when a product reads it as A (or, where products are emulated, as B), a packed one
// per layout of oneDNN's blocked weights format that a native product reads it as B in.
struct Pin {
    struct Packed {
        dnnl::memory::desc desc;
        const uint16_t* data;
    };
    const float* x;
    int64_t rows, cols, ld;
    int depth;
    const uint16_t* copy = nullptr;
    std::vector<Packed> packed;
};
thread_local std::vector<Pin> t_pins;

Pin* pinned(const float* x, int64_t rows, int64_t cols, int64_t ld) {
    for (Pin& p : t_pins)
        if (p.x == x && p.rows == rows && p.cols == cols && p.ld == ld) return &p;
    return nullptr;
}

// A stored operand (rows x cols at leading dimension ld) as a compact bf16 copy in `role`'s
// buffer, scaled by `scale` before rounding; a pinned copy when there is one.
const uint16_t* to_bf16(int role, const float* x, int64_t rows, int64_t cols, int64_t ld,
                        float scale = 1.0f) {
    Pin* pin = scale == 1.0f ? pinned(x, rows, cols, ld) : nullptr;
    if (pin && pin->copy) return pin->copy;
    WEFT_PROFILE("bf16_convert");
    uint16_t* dst = bf16_buffer(pin ? kPin0 + pin->depth : role, rows * cols);
    convert_fp32_to_bf16(dst, x, rows, cols, ld, scale);
    if (pin) pin->copy = dst;
    return dst;
}

bool use_bf16() {
    return g_precision.load(std::memory_order_relaxed) == MatmulPrecision::bf16;
}

// The checks every product shares. Returns false when there is nothing for oneDNN to do (an
// empty result, or K = 0 which is handled here: C = beta*C (+ bias)).
bool gemm_checks(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                 int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
    WEFT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
    WEFT_CHECK(beta == 0.0f || beta == 1.0f, "gemm: beta={} but only 0 and 1 are supported", beta);
    if (M == 0 || N == 0) return false;
    WEFT_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K),
               "gemm: lda={} too small for op(A) [{},{}] (trans_a={})", lda, M, K, trans_a);
    WEFT_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N),
               "gemm: ldb={} too small for op(B) [{},{}] (trans_b={})", ldb, K, N, trans_b);
    WEFT_CHECK(ldc >= N, "gemm: ldc={} smaller than N={}", ldc, N);
    if (K == 0) {  // an empty sum: C = beta*C (+ bias); oneDNN rejects zero-sized products
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n)
                C[m * ldc + n] = (beta == 0.0f ? 0.0f : C[m * ldc + n]) + (bias ? bias[n] : 0.0f);
        return false;
    }
    return true;
}

void gemm_fp32(const GemmKey& key, const float* A, const float* B, float beta, float* C,
               const float* bias);

// bf16 operands widened back to fp32, for CPUs without bf16 matrix instructions. Per thread and
// kept between calls, as the bf16 copies are.
thread_local std::vector<float> t_widened[2];

float* widened(int role, const uint16_t* x, int64_t n) {
    std::vector<float>& b = t_widened[role];
    if (int64_t(b.size()) < n) b.resize(size_t(n));
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) b[size_t(i)] = bf16_to_fp32(x[i]);
    return b.data();
}

// The product on operands already in bf16, compact as stored: op(A) is A [M,K] or, transposed,
// A stored [K,M] (likewise B), each with its leading dimension equal to its stored width.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               const uint16_t* B, float beta, float* C, int64_t ldc, const float* bias) {
    const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
    const bool accumulate = beta == 1.0f, has_bias = bias != nullptr;
    const bool native = bf16_products_native();
    GemmKey key{M, N, K, lda, ldb, ldc, 1.0f, trans_a, trans_b, accumulate, has_bias, native};
    if (native) {
        run_primitive(key, A, B, bias, C);
        return;
    }
    // A product of two bf16 values is exact in fp32 (8 + 8 significant bits < 24), so the fp32
    // product of the widened operands is the bf16 product with fp32 accumulation, up to the
    // order of the sums: the same numbers, at fp32 speed.
    WEFT_PROFILE("bf16_emulated");
    gemm_fp32(key, widened(0, A, M * K), widened(1, B, K * N), beta, C, bias);
}

// The key of a native bf16 product on a compact A (as gemm_bf16 takes it) and a B packed from
// a plain block in fp32 (or, b_bf16, bf16).
GemmKey packed_b_key(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t ldb,
                     int64_t ldc, bool accumulate, bool bias, bool b_bf16 = false) {
    GemmKey k{M, N, K, trans_a ? M : K, ldb, ldc, 1.0f, trans_a, trans_b, accumulate, bias, true};
    k.packed_b = b_bf16 ? GemmKey::Pack::from_bf16 : GemmKey::Pack::from_f32;
    return k;
}

// Elements (bf16) of a primitive's packed B.
int64_t packed_elements(const Primitive& p) {
    return int64_t(p.b.get_size() / sizeof(uint16_t));
}

// Rounds (from fp32) and packs B, stored as key's plain block, into dst in key's layout.
void pack_b(const Primitive& p, const void* B, uint16_t* dst) {
    WEFT_PROFILE("bf16_convert");
    if (detail::pack_b_bf16(dst, p.b, B, p.b_plain)) return;
    const dnnl::engine& engine = dnnl_state().engine;
    dnnl::memory src(p.b_plain, engine, const_cast<void*>(B)), packed(p.b, engine, dst);
    dnnl::stream& stream = thread_stream();
    p.pack_b->execute(stream, src, packed);
    stream.wait();
}

// A native bf16 product on a compact A and a B packed here, into role B's buffer, for this call.
// Packing is oneDNN's own first step for a plain B; done in one pass with the rounding it saves
// the compact copy's write and read. bench_matmul's GPT-2 layer products: 2.5% less time over
// the twelve of a block (rounding included).
void gemm_bf16_packed(const GemmKey& key, const uint16_t* A, const void* B, void* C,
                      const float* bias) {
    auto p = cached_primitive(key);
    uint16_t* dst = bf16_buffer(kRoleB, packed_elements(*p));
    pack_b(*p, B, dst);
    run_primitive(key, A, dst, bias, C);
}

// A pinned block as the B operand of the product `key` (packed_b), packed at its first use in
// that layout and reused after. Measured on the classifier's products (bench_matmul, 2 threads,
// Zen 5): oneDNN repacks a plain B on every call, which costs 15-25% of a product whose B is
// read by many rows of A; packed once, dx = dlogits·wte runs 683 -> 864 GFLOP/s and
// dwte += dlogitsᵀ·x 561 -> 683.
const uint16_t* packed_copy(Pin& pin, const GemmKey& key) {
    auto p = cached_primitive(key);
    for (const Pin::Packed& packed : pin.packed)
        if (packed.desc == p->b) return packed.data;
    // Layouts beyond the slots share the last one, repacked when it alternates.
    const int slot = std::min<int>(int(pin.packed.size()), kPackedSlots - 1);
    if (slot < int(pin.packed.size())) pin.packed.erase(pin.packed.begin() + slot);
    uint16_t* dst = bf16_buffer(kPacked0 + pin.depth * kPackedSlots + slot, packed_elements(*p));
    pack_b(*p, pin.x, dst);
    pin.packed.push_back({p->b, dst});
    return dst;
}

void gemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias) {
    if (!gemm_checks(trans_a, trans_b, M, N, K, lda, ldb, beta, C, ldc, bias)) return;
    if (use_bf16()) {
        // alpha is folded into A's rounding: the bf16 primitive then needs no output scale.
        const uint16_t* a =
            trans_a ? to_bf16(kRoleA, A, K, M, lda, alpha) : to_bf16(kRoleA, A, M, K, lda, alpha);
        if (bf16_products_native()) {
            const GemmKey key =
                packed_b_key(trans_a, trans_b, M, N, K, ldb, ldc, beta == 1.0f, bias != nullptr);
            Pin* pin = trans_b ? pinned(B, N, K, ldb) : pinned(B, K, N, ldb);
            if (pin) return run_primitive(key, a, packed_copy(*pin, key), bias, C);
            return gemm_bf16_packed(key, a, B, C, bias);
        }
        const uint16_t* b = trans_b ? to_bf16(kRoleB, B, N, K, ldb) : to_bf16(kRoleB, B, K, N, ldb);
        gemm_bf16(trans_a, trans_b, M, N, K, a, b, beta, C, ldc, bias);
        return;
    }
    const bool accumulate = beta == 1.0f, has_bias = bias != nullptr;
    GemmKey key{M, N, K, lda, ldb, ldc, alpha, trans_a, trans_b, accumulate, has_bias, false};
    gemm_fp32(key, A, B, beta, C, bias);
}

dnnl_status_t sgemm(const GemmKey& key, int64_t M, int64_t N, const float* A, const float* B,
                    float beta, float* C) {
    return dnnl_sgemm(key.trans_a ? 'T' : 'N', key.trans_b ? 'T' : 'N', M, N, key.K, key.alpha, A,
                      key.lda, B, key.ldb, beta, C, key.ldc);
}

// Products of at least this many multiply-adds are cut into slabs, one per thread.
constexpr int64_t kSlabWork = int64_t(1) << 22;

// C as one slab of its rows or columns per OpenMP thread, each a single-threaded sgemm (oneDNN
// runs one thread inside a parallel region), instead of sgemm's own split over its threads.
// Zen 5, 2 threads, GPT-2 B4 T1024's shapes, the two interleaved in one process (median ms,
// sgemm's split -> slabs of the larger of M and N): the classifier's table gradient 167.0 ->
// 161.1 and logits 163.4 -> 161.6 a chunk, fc_proj forward 40.8 -> 40.2, qkv and fc input
// gradients 30.4 -> 29.9 and 40.0 -> 39.4; the rest within 0.7 ms either way, and the square
// products the peak is measured on within 2%. In a whole step the gain is larger: the same
// build with and without slabs, alternating, 7.28-7.34 -> 7.07-7.15 s (docs/performance.md).
void sgemm_slabs(const GemmKey& key, const float* A, const float* B, float beta, float* C) {
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const bool rows = key.M >= key.N;
    const int64_t extent = rows ? key.M : key.N;
    // Column slabs in whole 16-float vectors, so that no slab starts mid-vector.
    const int64_t align = rows ? 1 : 16;
    const int64_t slab = ((extent + threads - 1) / threads + align - 1) / align * align;
    dnnl_status_t status = dnnl_success;
    if (threads < 2 || key.M * key.N * key.K < kSlabWork || slab >= extent) {
        status = sgemm(key, key.M, key.N, A, B, beta, C);
    } else {
        // Nothing may throw inside the region: each slab's status is kept, the first failure
        // reported after it.
        std::atomic<int> failed{int(dnnl_success)};
#pragma omp parallel num_threads(threads)
        {
            const int64_t from = std::min(extent, omp_get_thread_num() * slab);
            const int64_t n = std::min(extent, from + slab) - from;
            dnnl_status_t s = dnnl_success;
            if (n > 0 && rows)
                s = sgemm(key, n, key.N, key.trans_a ? A + from : A + from * key.lda, B, beta,
                          C + from * key.ldc);
            else if (n > 0)
                s = sgemm(key, key.M, n, A, key.trans_b ? B + from * key.ldb : B + from, beta,
                          C + from);
            int ok = int(dnnl_success);
            if (s != dnnl_success) failed.compare_exchange_strong(ok, int(s));
        }
        status = dnnl_status_t(failed.load());
    }
    WEFT_CHECK(status == dnnl_success, "gemm: dnnl_sgemm failed with status {} (M={} N={} K={})",
               int(status), key.M, key.N, key.K);
}

// fp32 products run on dnnl_sgemm (oneDNN 2.6's JIT GEMM driver, which takes transposes and
// leading dimensions natively and needs no primitive), not the matmul primitive (its brgemm
// kernel): bench_matmul measured both on every product of a GPT-2 124M step (2 threads, AMD EPYC
// Zen 5), and sgemm was as fast or faster on all of them, by 5-25% on the backward products
// (e.g. fc_proj dinp 485 vs 380 GFLOP/s, dW 417 vs 322). A bias is written into C first and the
// product added to it (beta = 1): the layer forwards then run 2-11% faster than with the
// primitive's bias epilogue (BM_forward_bias: qkv 434 -> 481 GFLOP/s, fc 439 -> 475; 133 -> 125
// ms for a block's four).
void gemm_fp32(const GemmKey& key, const float* A, const float* B, float beta, float* C,
               const float* bias) {
    if (bias) {
        const int64_t M = key.M, N = key.N, ldc = key.ldc;
        const bool add = beta == 1.0f;
#pragma omp parallel for schedule(static) if (M * N >= (1 << 16))
        for (int64_t m = 0; m < M; ++m) {
            float* row = C + m * ldc;
            if (add)
                for (int64_t n = 0; n < N; ++n) row[n] += bias[n];
            else
                std::memcpy(row, bias, sizeof(float) * size_t(N));
        }
        beta = 1.0f;
    }
    sgemm_slabs(key, A, B, beta, C);
}

// dweight[N,K] += doutᵀ · inp. Where the layer widens (N > K: qkv, fc), sgemm runs this product
// well below the transposed one, inpᵀ · dout ([K,N], the wide dimension last): Zen 5, 2
// threads, M = 4096 (GPT-2 B4 T1024; bench_matmul's dweight and dweight_w_in_out rows): fc
// (N 3072, K 768) 44.8 ms against 40.4, qkv (N 2304) 31.0 against 29.9, N 1024 15.7 against
// 13.6. So those layers take the transposed product into a scratch kept per thread and add it
// back transposed, which costs 0.3 ms for fc's 2.4M values.
void weight_gradient_fp32(float* dweight, const float* dout, const float* inp, int64_t M, int64_t K,
                          int64_t N) {
    const int64_t scratch = matmul_backward_scratch_floats(K, N);
    if (scratch == 0)
        return gemm_impl(true, false, N, K, M, 1.0f, dout, N, inp, K, 1.0f, dweight, K, nullptr);
    thread_local std::vector<float> transposed;
    if (transposed.size() < size_t(scratch)) {
        transposed = {};  // release the smaller block before taking the larger one
        transposed.resize(size_t(scratch));
    }
    gemm_impl(true, false, K, N, M, 1.0f, inp, K, dout, N, 0.0f, transposed.data(), N, nullptr);
    add_transposed(dweight, K, transposed.data(), N, N, K);
}

// dbias[n] += Σ_m dout[m,n]: each thread owns a band of columns, so no reduction is needed and
// every row is read in contiguous pieces.
void bias_backward(float* dbias, const float* dout, int64_t M, int64_t N) {
    constexpr int64_t band = 64;
#pragma omp parallel for schedule(static)
    for (int64_t n0 = 0; n0 < N; n0 += band) {
        int64_t n1 = std::min(N, n0 + band);
        float acc[band] = {};
        for (int64_t m = 0; m < M; ++m) {
            const float* row = dout + m * N;
#pragma omp simd
            for (int64_t n = n0; n < n1; ++n) acc[n - n0] += row[n];
        }
        for (int64_t n = n0; n < n1; ++n) dbias[n] += acc[n - n0];
    }
}

}  // namespace

bool bf16_products_native() {
    // oneDNN 2.x builds bf16 matmul kernels only for AVX512-BF16 (avx512_core_bf16) and AMX;
    // asking it for one on another CPU is the reliable test of what this oneDNN can do here.
    static const bool native = [] {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        const dnnl::memory::dims dims{16, 16};
        try {
            dnnl::memory::desc a(dims, dt::bf16, tag::ab), c(dims, dt::f32, tag::ab);
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), dnnl_state().engine);
            return true;
        } catch (const dnnl::error&) {
            return false;
        }
    }();
    return native;
}

void set_matmul_precision(MatmulPrecision p) {
    g_precision.store(p, std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() {
    return g_precision.load(std::memory_order_relaxed);
}

MatmulPrecision parse_matmul_precision(std::string_view name) {
    if (name == "fp32") return MatmulPrecision::fp32;
    if (name == "bf16") return MatmulPrecision::bf16;
    fail("unknown matmul precision (--dtype) '{}'; expected fp32 or bf16", name);
}

const char* matmul_precision_name(MatmulPrecision p) {
    return p == MatmulPrecision::bf16 ? "bf16" : "fp32";
}

Bf16OperandScope::Bf16OperandScope(const float* x, int64_t rows, int64_t cols, int64_t ld) {
    if (!use_bf16()) return;
    const size_t depth = t_pins.size();
    WEFT_CHECK(depth < size_t(kMaxPins),
               "Bf16OperandScope: {} scopes already open on this thread, at most {}", depth,
               kMaxPins);
    WEFT_CHECK(rows >= 0 && cols >= 0 && ld >= cols,
               "Bf16OperandScope: rows={} cols={} ld={}, expected ld >= cols >= 0", rows, cols, ld);
    t_pins.push_back({x, rows, cols, ld, int(depth), nullptr, {}});
    active_ = true;
}

Bf16OperandScope::Bf16OperandScope(const float* x, int64_t rows, int64_t cols, int64_t ld,
                                   CallerRounds)
    : Bf16OperandScope(x, rows, cols, ld) {
    if (!active_) return;
    Pin& pin = t_pins.back();
    copy_ = bf16_buffer(kPin0 + pin.depth, rows * cols);
    pin.copy = copy_;
}

Bf16OperandScope::~Bf16OperandScope() {
    if (active_) t_pins.pop_back();
}

int64_t matmul_backward_scratch_floats(int64_t K, int64_t N, MatmulPrecision p) {
    return N > K && p == MatmulPrecision::fp32 ? N * K : 0;
}

int64_t matmul_bf16_scratch_bytes() {
    int64_t total = 0;
    for (const Bf16Buffer& b : t_bf16) total += b.size * int64_t(sizeof(uint16_t));
    for (const std::vector<float>& w : t_widened) total += int64_t(w.size() * sizeof(float));
    return total;
}

// The role rules of the products above: gemm_impl rounds A (M·K) into role A and B (K·N) into
// role B; matmul_backward rounds dout (M·N) into A, the weight (N·K) into B and the input (M·K)
// into C; gemm_bf16 widens its two operands (the product's M·K and K·N) into t_widened.
void Bf16ScratchCount::product(int64_t a, int64_t b) {
    wide_a_ = std::max(wide_a_, a);
    wide_b_ = std::max(wide_b_, b);
}

namespace {
// What a native product gemm(trans_a, trans_b, M, N, K, ..., beta = accumulate) on a compact B
// (ldb its stored width, ldc = N) packs B into, in elements; 0 where products are emulated (no
// packed layouts to ask oneDNN for).
int64_t packed_b_elements(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          bool accumulate, bool b_bf16) {
    if (!bf16_products_native()) return 0;
    return packed_elements(*cached_primitive(
        packed_b_key(trans_a, trans_b, M, N, K, trans_b ? K : N, N, accumulate, false, b_bf16)));
}
}  // namespace

void Bf16ScratchCount::packed_b(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                bool accumulate, bool b_bf16) {
    packed_b_ =
        std::max(packed_b_, packed_b_elements(trans_a, trans_b, M, N, K, accumulate, b_bf16));
}

void Bf16ScratchCount::gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            bool accumulate, bool a_pinned, bool b_pinned) {
    if (!a_pinned) a_ = std::max(a_, M * K);
    if (!b_pinned) {
        b_ = std::max(b_, K * N);
        packed_b(trans_a, trans_b, M, N, K, accumulate);
    }
    product(M * K, K * N);
}

void Bf16ScratchCount::pinned_a(int depth, int64_t n) {
    WEFT_CHECK(depth >= 0 && depth < kMaxPins, "Bf16ScratchCount: depth {} outside 0..{}", depth,
               kMaxPins - 1);
    pin_a_[depth] = std::max(pin_a_[depth], n);
}

void Bf16ScratchCount::pinned_b(int depth, int slot, bool trans_a, bool trans_b, int64_t M,
                                int64_t N, int64_t K, bool accumulate) {
    WEFT_CHECK(depth >= 0 && depth < kMaxPins && slot >= 0 && slot < kPackedSlots,
               "Bf16ScratchCount: depth {} slot {} outside 0..{}, 0..{}", depth, slot, kMaxPins - 1,
               kPackedSlots - 1);
    pin_b_[depth] = std::max(pin_b_[depth], K * N);
    int64_t& packed = packed_[depth * kPackedSlots + slot];
    packed = std::max(packed, packed_b_elements(trans_a, trans_b, M, N, K, accumulate, false));
}

void Bf16ScratchCount::forward(int64_t M, int64_t K, int64_t N, bool bf16_input) {
    if (!bf16_input) a_ = std::max(a_, M * K);
    b_ = std::max(b_, N * K);
    packed_b(false, true, M, N, K, false);
    product(M * K, K * N);
}

void Bf16ScratchCount::backward(int64_t M, int64_t K, int64_t N, bool bf16_input, bool bf16_dout) {
    if (!bf16_dout) a_ = std::max(a_, M * N);
    b_ = std::max(b_, N * K);
    if (!bf16_input) c_ = std::max(c_, M * K);
    packed_b(false, false, M, K, N, false);
    packed_b(true, false, N, K, M, true, bf16_input);
    product(M * N, N * K);  // dinp = dout · weight: [M,N] by [N,K]
    product(N * M, M * K);  // dweight += doutᵀ · inp: [N,M] by [M,K]
}

int64_t Bf16ScratchCount::bytes(bool emulated) const {
    // A pin's compact copy serves its A reads and, where products are emulated, its B reads.
    // Native products pack B (and the input of dweight) into one buffer instead of the compact
    // B and C.
    int64_t n = a_ + (emulated ? b_ + c_ : packed_b_);
    for (int d = 0; d < kMaxPins; ++d) n += std::max(pin_a_[d], emulated ? pin_b_[d] : 0);
    if (!emulated)
        for (int64_t p : packed_) n += p;
    return int64_t(sizeof(uint16_t)) * n +
           (emulated ? int64_t(sizeof(float)) * (wide_a_ + wide_b_) : 0);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    WEFT_PROFILE("gemm");
    gemm_impl(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N) {
    WEFT_PROFILE("matmul_fwd");
    gemm_impl(false, true, M, N, K, 1.0f, inp, K, weight, K, 0.0f, out, N, bias);
}

namespace {

// matmul_backward's bf16 products on dout already rounded (d, compact [M,N]); the input is taken
// already rounded (inp16) or rounded here.
void backward_products_bf16(float* dinp, float* dweight, const uint16_t* d, const float* inp,
                            const uint16_t* inp16, const float* weight, int64_t M, int64_t K,
                            int64_t N, bool accumulate_dinp, uint16_t* dinp16 = nullptr) {
    const bool native = bf16_products_native();
    if (dinp16) {  // written rounded by the product (native only, no accumulation)
        GemmKey key = packed_b_key(false, false, M, K, N, K, K, false, false);
        key.c_bf16 = true;
        gemm_bf16_packed(key, d, weight, dinp16, nullptr);
    }
    if (dinp) {
        WEFT_CHECK(weight, "matmul_backward: dinp asked for without the weight");
        if (native)
            gemm_bf16_packed(packed_b_key(false, false, M, K, N, K, K, accumulate_dinp, false), d,
                             weight, dinp, nullptr);
        else
            gemm_bf16(false, false, M, K, N, d, to_bf16(kRoleB, weight, N, K, K),
                      accumulate_dinp ? 1.0f : 0.0f, dinp, K, nullptr);
    }
    if (dweight) {
        WEFT_CHECK(inp || inp16, "matmul_backward: dweight asked for without the input");
        if (native)
            gemm_bf16_packed(packed_b_key(true, false, N, K, M, K, K, true, false, inp16), d,
                             inp16 ? static_cast<const void*>(inp16) : inp, dweight, nullptr);
        else
            gemm_bf16(true, false, N, K, M, d, inp16 ? inp16 : to_bf16(kRoleC, inp, M, K, K), 1.0f,
                      dweight, K, nullptr);
    }
}

// matmul_backward's bf16 products; dout is rounded here, once for both, with the bias gradient
// summed in the same pass (column_sums.hpp's order, not bias_backward's: one read of dout less,
// GPT-2's 63 MB a layer at B4 T1024).
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const uint16_t* inp16, const float* weight, int64_t M,
                          int64_t K, int64_t N, bool accumulate_dinp, uint16_t* dinp16 = nullptr) {
    const uint16_t* d = nullptr;
    if (dbias) {
        WEFT_PROFILE("bf16_convert");
        uint16_t* dst = bf16_buffer(kRoleA, M * N);
        convert_fp32_to_bf16_sum_columns(dst, dbias, dout, M, N);
        d = dst;
    } else {
        d = to_bf16(kRoleA, dout, M, N, N);
    }
    backward_products_bf16(dinp, dweight, d, inp, inp16, weight, M, K, N, accumulate_dinp, dinp16);
}

void check_bf16_input(const char* who) {
    WEFT_CHECK(use_bf16(),
               "internal: {} given a bf16 input while the matmul precision is fp32 (the "
               "activations were built for --dtype bf16)",
               who);
}

// For the entries whose product writes bf16 (oneDNN dst bf16), which emulation cannot give.
void check_native(const char* who) {
    WEFT_CHECK(bf16_products_native(),
               "internal: {} needs native bf16 products (this CPU emulates them)", who);
}

}  // namespace

void matmul_forward_bf16_input(float* out, const uint16_t* inp, const float* weight,
                               const float* bias, int64_t M, int64_t K, int64_t N) {
    WEFT_PROFILE("matmul_fwd");
    check_bf16_input("matmul_forward_bf16_input");
    if (!gemm_checks(false, true, M, N, K, K, K, 0.0f, out, N, bias)) return;
    if (bf16_products_native())
        return gemm_bf16_packed(packed_b_key(false, true, M, N, K, K, N, false, bias != nullptr),
                                inp, weight, out, bias);
    gemm_bf16(false, true, M, N, K, inp, to_bf16(kRoleB, weight, N, K, K), 0.0f, out, N, bias);
}

void matmul_forward_bf16_in_out(uint16_t* out, const uint16_t* inp, const float* weight,
                                const float* bias, int64_t M, int64_t K, int64_t N) {
    WEFT_PROFILE("matmul_fwd");
    check_bf16_input("matmul_forward_bf16_in_out");
    check_native("matmul_forward_bf16_in_out");
    WEFT_CHECK(M >= 0 && N >= 0 && K > 0, "matmul_forward_bf16_in_out: M={} N={} K={}", M, N, K);
    if (M == 0 || N == 0) return;
    GemmKey key = packed_b_key(false, true, M, N, K, K, N, false, bias != nullptr);
    key.c_bf16 = true;
    gemm_bf16_packed(key, inp, weight, out, bias);
}

void matmul_backward_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                const uint16_t* inp, const float* weight, int64_t M, int64_t K,
                                int64_t N, bool accumulate_dinp) {
    WEFT_PROFILE("matmul_bwd");
    check_bf16_input("matmul_backward_bf16_input");
    if (M > 0 && N > 0 && K > 0)
        return matmul_backward_bf16(dinp, dweight, dbias, dout, nullptr, inp, weight, M, K, N,
                                    accumulate_dinp);
    matmul_backward(dinp, dweight, dbias, dout, nullptr, weight, M, K, N, accumulate_dinp);
}

void matmul_backward_bf16_in_out(uint16_t* dinp, float* dweight, float* dbias, const float* dout,
                                 const uint16_t* inp, const float* weight, int64_t M, int64_t K,
                                 int64_t N) {
    WEFT_PROFILE("matmul_bwd");
    check_bf16_input("matmul_backward_bf16_in_out");
    check_native("matmul_backward_bf16_in_out");
    WEFT_CHECK(M >= 0 && N > 0 && K > 0, "matmul_backward_bf16_in_out: M={} K={} N={}", M, K, N);
    if (M == 0) return;
    matmul_backward_bf16(nullptr, dweight, dbias, dout, nullptr, inp, weight, M, K, N, false, dinp);
}

void matmul_backward_bf16_dout(float* dinp, float* dweight, const uint16_t* dout,
                               const uint16_t* inp, const float* weight, int64_t M, int64_t K,
                               int64_t N, bool accumulate_dinp) {
    WEFT_PROFILE("matmul_bwd");
    check_bf16_input("matmul_backward_bf16_dout");
    WEFT_CHECK(M >= 0 && N > 0 && K > 0, "matmul_backward_bf16_dout: M={} K={} N={}", M, K, N);
    if (M == 0) return;  // no rows: no input gradient, and nothing adds to the weight's
    backward_products_bf16(dinp, dweight, dout, nullptr, inp, weight, M, K, N, accumulate_dinp);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t M, int64_t K, int64_t N, bool accumulate_dinp) {
    WEFT_PROFILE("matmul_bwd");
    if (use_bf16() && (dinp || dweight) && M > 0 && N > 0 && K > 0)
        return matmul_backward_bf16(dinp, dweight, dbias, dout, inp, nullptr, weight, M, K, N,
                                    accumulate_dinp);
    if (dinp)
        gemm_impl(false, false, M, K, N, 1.0f, dout, N, weight, K, accumulate_dinp ? 1.0f : 0.0f,
                  dinp, K, nullptr);
    if (dweight) weight_gradient_fp32(dweight, dout, inp, M, K, N);
    if (dbias) bias_backward(dbias, dout, M, N);
}

}  // namespace weft::kernels
