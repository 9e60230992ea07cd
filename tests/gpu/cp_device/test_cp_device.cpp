// Device (CUDA) against Device (host) on random shapes, odd sizes and strides: copies between
// strided views in every dtype pair the engine uses, with conversion (bit-exact: both round to
// nearest even) and with fp32 accumulation, fills, and the fp32 LSE merge (rows with -inf
// partials included; expf/logf may differ from the host's by ulps).
#include "device.hpp"

#include <lca/types.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace lca::cp {
namespace {

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(const std::vector<unsigned char>& host) : bytes(host.size()) {
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the tested stream does not wait for the legacy one
  }
  ~Dev() { (void)cudaFree(p); }
  std::vector<unsigned char> host() const {
    std::vector<unsigned char> out(bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

std::vector<unsigned char> random_bytes_of(int32_t dtype, int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<unsigned char> out(static_cast<size_t>(count) * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) store_from_double(out.data(), dtype, i, u(rng));
  return out;
}

struct Case {
  int64_t n0, n1, n2;
  int64_t pad0, pad1, pad2;  // extra elements per stride level in the source layout
};

View view(void* data, int32_t dtype, int64_t n1, int64_t n2, int64_t pad1, int64_t pad2, int64_t pad0) {
  const int64_t s2 = 1 + pad2, s1 = n2 * s2 + pad1, s0 = n1 * s1 + pad0;
  return View{data, dtype, s0, s1, s2};
}

int64_t extent(const Case& c, int64_t pad0, int64_t pad1, int64_t pad2) {
  const int64_t s2 = 1 + pad2, s1 = c.n2 * s2 + pad1, s0 = c.n1 * s1 + pad0;
  return c.n0 * s0;
}

TEST(CpDevice, CopiesMatchTheHostInEveryDtypePair) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  const Device gpu(LCA_DEVICE_CUDA, stream), cpu(LCA_DEVICE_CPU, nullptr);
  std::mt19937 rng(7);
  const Case cases[] = {{37, 3, 64, 0, 0, 0},  {5, 8, 128, 128, 0, 0}, {13, 2, 64, 0, 64, 0},
                        {3, 7, 1, 5, 2, 0},    {1, 1, 1001, 0, 0, 0},  {9, 4, 33, 3, 1, 1},
                        {211, 1, 1, 0, 0, 0},  {2, 3, 5, 1, 1, 2}};
  const int32_t dtypes[] = {LCA_DTYPE_F32, LCA_DTYPE_F16, LCA_DTYPE_BF16};
  for (const Case& c : cases)
    for (int32_t st : dtypes)
      for (int32_t dt : dtypes)
        for (int add = 0; add < 2; ++add) {
          if (add && dt != LCA_DTYPE_F32) continue;
          SCOPED_TRACE(testing::Message() << "shape " << c.n0 << "x" << c.n1 << "x" << c.n2 << " pads " << c.pad0 << ","
                                          << c.pad1 << "," << c.pad2 << " " << dtype_name(st) << "->" << dtype_name(dt)
                                          << (add ? " add" : ""));
          // Source strided, destination packed (pack), or the other way round (unpack).
          for (int direction = 0; direction < 2; ++direction) {
            const bool strided_src = direction == 0;
            const int64_t src_n = strided_src ? extent(c, c.pad0, c.pad1, c.pad2) : c.n0 * c.n1 * c.n2;
            const int64_t dst_n = strided_src ? c.n0 * c.n1 * c.n2 : extent(c, c.pad0, c.pad1, c.pad2);
            auto src = random_bytes_of(st, src_n, rng);
            auto dst = random_bytes_of(dt, dst_n, rng);
            Dev dsrc(src), ddst(dst);
            auto mk = [&](void* p, int32_t t, bool strided) {
              return strided ? view(p, t, c.n1, c.n2, c.pad1, c.pad2, c.pad0) : view(p, t, c.n1, c.n2, 0, 0, 0);
            };
            gpu.copy(mk(dsrc.p, st, strided_src), mk(ddst.p, dt, !strided_src), c.n0, c.n1, c.n2, add);
            ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            cpu.copy(mk(src.data(), st, strided_src), mk(dst.data(), dt, !strided_src), c.n0, c.n1, c.n2, add);
            EXPECT_EQ(ddst.host(), dst);  // elements outside the view stay as they were, too
          }
        }
  ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

TEST(CpDevice, FillsAndZeros) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  const Device gpu(LCA_DEVICE_CUDA, stream);
  std::vector<unsigned char> raw(4 * 1237, 0x5a);
  Dev d(raw);
  gpu.fill(static_cast<float*>(d.p), 1000, -std::numeric_limits<float>::infinity());
  gpu.zero(static_cast<char*>(d.p) + 4000, 4 * 200);
  ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const auto got = d.host();
  std::vector<float> f(1237);
  std::memcpy(f.data(), got.data(), got.size());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(f[i], -std::numeric_limits<float>::infinity()) << i;
  for (int i = 1000; i < 1200; ++i) ASSERT_EQ(f[i], 0.0f) << i;
  for (size_t b = 4 * 1200; b < got.size(); ++b) ASSERT_EQ(got[b], 0x5a) << b;
  ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

TEST(CpDevice, LseMergeMatchesTheHost) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  const Device gpu(LCA_DEVICE_CUDA, stream), cpu(LCA_DEVICE_CPU, nullptr);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (const auto& [rows, heads, dim, dtype] :
       {std::tuple{77, 3, 64, LCA_DTYPE_BF16}, std::tuple{5, 8, 128, LCA_DTYPE_F16}, std::tuple{130, 1, 32, LCA_DTYPE_F32}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << heads << "x" << dim << " " << dtype_name(dtype));
    const int64_t n = int64_t(rows) * heads * dim, nl = int64_t(rows) * heads;
    std::vector<float> o(n, 0.0f), lse(nl, ninf);
    std::vector<unsigned char> ob(n * 4), lb(nl * 4);
    std::memcpy(ob.data(), o.data(), ob.size());
    std::memcpy(lb.data(), lse.data(), lb.size());
    Dev dobuf(ob), dlse(lb);
    for (int part = 0; part < 4; ++part) {  // four partials; every third row empty in one of them
      auto p = random_bytes_of(dtype, n, rng);
      std::vector<float> pl(nl);
      for (int64_t i = 0; i < nl; ++i) pl[i] = (i + part) % 3 == 0 ? ninf : u(rng);
      std::vector<unsigned char> plb(nl * 4);
      std::memcpy(plb.data(), pl.data(), plb.size());
      Dev dp(p), dpl(plb);
      gpu.merge(static_cast<float*>(dobuf.p), static_cast<float*>(dlse.p), dp.p, dtype, static_cast<const float*>(dpl.p),
                rows, heads, dim);
      ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      cpu.merge(o.data(), lse.data(), p.data(), dtype, pl.data(), rows, heads, dim);
    }
    std::vector<float> go(n), gl(nl);
    std::memcpy(go.data(), dobuf.host().data(), n * 4);
    std::memcpy(gl.data(), dlse.host().data(), nl * 4);
    for (int64_t i = 0; i < nl; ++i) {
      if (std::isinf(lse[i])) {
        EXPECT_EQ(gl[i], lse[i]) << "lse " << i;
        continue;
      }
      EXPECT_NEAR(gl[i], lse[i], 1e-5f * (1 + std::fabs(lse[i]))) << "lse " << i;
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(go[i], o[i], 1e-5f * (1 + std::fabs(o[i]))) << "o " << i;
  }
  ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

}  // namespace
}  // namespace lca::cp
