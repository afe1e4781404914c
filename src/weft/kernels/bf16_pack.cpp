#include "weft/kernels/bf16_pack.hpp"

#include <type_traits>

#include "weft/kernels/lanes.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::kernels::detail {

namespace {

constexpr int64_t kBlockK = 32, kBlockN = 64, kBlock = kBlockK * kBlockN;

// Whether `packed` is [K, N] bf16 in BA16a64b2a, dense, padded (with zeros) to whole blocks:
// element (k, n) at (n / 64)·(Kp / 32)·2048 + (k / 32)·2048 + (k % 32 / 2)·128 + (n % 64)·2 +
// k % 2, Kp = K padded.
bool handled(const dnnl_memory_desc_t& md) {
    if (md.ndims != 2 || md.data_type != dnnl_bf16 || md.format_kind != dnnl_blocked ||
        md.offset0 != 0 || md.extra.flags != 0 || md.padded_offsets[0] || md.padded_offsets[1])
        return false;
    const int64_t Kp = md.padded_dims[0], Np = md.padded_dims[1];
    if (Kp % kBlockK || Np % kBlockN || Kp < md.dims[0] || Kp - md.dims[0] >= kBlockK ||
        Np < md.dims[1] || Np - md.dims[1] >= kBlockN)
        return false;
    const auto& b = md.format_desc.blocking;
    return b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 &&
           b.inner_blks[1] == 64 && b.inner_idxs[1] == 1 && b.inner_blks[2] == 2 &&
           b.inner_idxs[2] == 0 && b.strides[0] == kBlock && b.strides[1] == Kp / kBlockK * kBlock;
}

// A block reaching past K or N (the classifier's vocabulary, 50257): element by element, the
// padding zero.
template <typename T>
void block_edge(uint16_t* blk, const T* s, int64_t sk, int64_t sn, int64_t K, int64_t N, int64_t k0,
                int64_t n0) {
    for (int64_t k = 0; k < kBlockK; ++k)
        for (int64_t n = 0; n < kBlockN; ++n) {
            uint16_t w = 0;
            if (k0 + k < K && n0 + n < N) {
                const T x = s[(k0 + k) * sk + (n0 + n) * sn];
                if constexpr (std::is_same_v<T, float>)
                    w = fp32_to_bf16(x);
                else
                    w = x;
            }
            blk[k / 2 * 128 + n * 2 + k % 2] = w;
        }
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
// One 32 x 64 block (k0, n0) from a plain source: `at(k, n)` is element (k, n)'s address.
// Row-major sources pair two rows into words; transposed fp32 ones (a weight [N, K] read as
// Wᵀ) give 16 pairs along each of their rows, transposed 16 x 16 words at a time.
void block_rows_f32(uint16_t* blk, const float* s, int64_t ld, int64_t k0, int64_t n0) {
    for (int64_t p = 0; p < kBlockK / 2; ++p) {
        const float* r0 = s + (k0 + 2 * p) * ld + n0;
        for (int64_t v = 0; v < kBlockN / 16; ++v)
            _mm512_storeu_si512(
                blk + p * 128 + v * 32,
                lanes::pair_words(_mm512_loadu_ps(r0 + 16 * v), _mm512_loadu_ps(r0 + ld + 16 * v)));
    }
}

void block_rows_bf16(uint16_t* blk, const uint16_t* s, int64_t ld, int64_t k0, int64_t n0) {
    for (int64_t p = 0; p < kBlockK / 2; ++p) {
        const uint16_t* r0 = s + (k0 + 2 * p) * ld + n0;
        for (int64_t v = 0; v < kBlockN / 16; ++v) {
            const __m512i lo = _mm512_cvtepu16_epi32(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + 16 * v)));
            const __m512i hi = _mm512_cvtepu16_epi32(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + ld + 16 * v)));
            _mm512_storeu_si512(blk + p * 128 + v * 32,
                                _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

void block_cols_f32(uint16_t* blk, const float* s, int64_t ld, int64_t k0, int64_t n0) {
    for (int64_t g = 0; g < kBlockN / 16; ++g) {
        __m512i z[16];
        for (int64_t i = 0; i < 16; ++i) {
            const float* r = s + (n0 + 16 * g + i) * ld + k0;
            // cvtne2ps puts its second operand first: words in k order, pairs (2j, 2j + 1).
            z[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r + 16), _mm512_loadu_ps(r));
        }
        lanes::transpose16x16(z);
        for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(blk + j * 128 + g * 32, z[j]);
    }
}
#endif

}  // namespace

bool pack_b_bf16(uint16_t* dst, const dnnl::memory::desc& packed, const void* src,
                 const dnnl::memory::desc& plain) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (!lanes::vectors<uint16_t>() || !handled(packed.data)) return false;
    const dnnl_memory_desc_t& pd = plain.data;
    if (pd.ndims != 2 || pd.format_kind != dnnl_blocked || pd.offset0 != 0 ||
        pd.format_desc.blocking.inner_nblks != 0 || pd.dims[0] != packed.data.dims[0] ||
        pd.dims[1] != packed.data.dims[1])
        return false;
    const bool f32 = pd.data_type == dnnl_f32;
    if (!f32 && pd.data_type != dnnl_bf16) return false;
    const int64_t K = pd.dims[0], N = pd.dims[1];
    const int64_t sk = pd.format_desc.blocking.strides[0], sn = pd.format_desc.blocking.strides[1];
    const bool rows = sn == 1, cols = sk == 1 && f32;  // row-major [K, N], or fp32 stored [N, K]
    if (!rows && !cols) return false;
    const int64_t KB = packed.data.padded_dims[0] / kBlockK;
    const int64_t NB = packed.data.padded_dims[1] / kBlockN;
#pragma omp parallel for collapse(2) schedule(static) if (K * N >= (1 << 16))
    for (int64_t nb = 0; nb < NB; ++nb)
        for (int64_t kb = 0; kb < KB; ++kb) {
            uint16_t* blk = dst + (nb * KB + kb) * kBlock;
            const int64_t k0 = kb * kBlockK, n0 = nb * kBlockN;
            if (k0 + kBlockK > K || n0 + kBlockN > N) {
                if (f32)
                    block_edge(blk, static_cast<const float*>(src), sk, sn, K, N, k0, n0);
                else
                    block_edge(blk, static_cast<const uint16_t*>(src), sk, sn, K, N, k0, n0);
            } else if (cols)
                block_cols_f32(blk, static_cast<const float*>(src), sn, k0, n0);
            else if (f32)
                block_rows_f32(blk, static_cast<const float*>(src), sk, k0, n0);
            else
                block_rows_bf16(blk, static_cast<const uint16_t*>(src), sk, k0, n0);
        }
    return true;
#else
    (void)dst, (void)packed, (void)src, (void)plain;
    return false;
#endif
}

}  // namespace weft::kernels::detail
