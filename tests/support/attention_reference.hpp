#pragma once
// Softmax attention in double, the reference the attention kernel tests compare against.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "weft/kernels/attention/attention.hpp"

namespace weft::test {

inline std::vector<double> to_double(const std::vector<float>& x) {
    return {x.begin(), x.end()};
}

struct Reference {
    std::vector<double> out, lse, dq, dk, dv;
};

// Softmax attention in double over the keys each query sees by absolute position; a query that
// sees none gets lse = -inf, an output of 0 and no gradient. Gradients only if dout is given.
inline Reference reference(const kernels::AttentionShape& s, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& dout = {}) {
    Reference r;
    r.out.assign(s.B * s.Tq * s.ldo, 0.0);
    r.lse.assign(s.B * s.NH * s.Tq, -INFINITY);
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
    const double scale = 1.0 / std::sqrt(double(s.HS));
    const int64_t G = s.NKV ? s.NH / s.NKV : 1;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.Tq; ++i) {
                const int64_t qi = (b * s.Tq + i) * s.ldq + h * s.HS;
                const int64_t oi = (b * s.Tq + i) * s.ldo + h * s.HS;
                auto kv = [&](int64_t j) { return (b * s.Tk + j) * s.ldkv + (h / G) * s.HS; };
                std::vector<double> p, dp;
                for (int64_t j = 0; j < s.Tk && s.k_pos0 + j <= s.q_pos0 + i; ++j) {
                    double dot = 0;
                    for (int64_t d = 0; d < s.HS; ++d) dot += q[qi + d] * k[kv(j) + d];
                    p.push_back(dot * scale);
                }
                const int64_t n = int64_t(p.size());
                if (n == 0) continue;
                const double mx = *std::max_element(p.begin(), p.end());
                double sum = 0;
                for (double& x : p) sum += (x = std::exp(x - mx));
                r.lse[(b * s.NH + h) * s.Tq + i] = mx + std::log(sum);
                for (int64_t j = 0; j < n; ++j) {
                    p[j] /= sum;
                    for (int64_t d = 0; d < s.HS; ++d) r.out[oi + d] += p[j] * v[kv(j) + d];
                }
                if (dout.empty()) continue;
                dp.assign(n, 0.0);
                double D = 0;
                for (int64_t j = 0; j < n; ++j) {
                    for (int64_t d = 0; d < s.HS; ++d) dp[j] += dout[oi + d] * v[kv(j) + d];
                    D += p[j] * dp[j];
                }
                for (int64_t j = 0; j < n; ++j) {
                    const double ds = p[j] * (dp[j] - D) * scale;
                    for (int64_t d = 0; d < s.HS; ++d) {
                        r.dq[qi + d] += ds * k[kv(j) + d];
                        r.dk[kv(j) + d] += ds * q[qi + d];
                        r.dv[kv(j) + d] += p[j] * dout[oi + d];
                    }
                }
            }
    return r;
}

}  // namespace weft::test
