/*
 * gemm.cu - the host side of xent's Hopper GEMM: what it takes, the tensor
 * maps its TMA loads read through, the tile rule, and the launch of the
 * kernel built for the product's types and layouts (sm90.cuh).
 */
#include "cuda/gemm/gemm.cuh"

#include <stdint.h>
#include <stdio.h>

#include "common/dtype.h"
#include "cuda/cuda.h"
#include "cuda/gemm/sm90.cuh"
#include "cuda/lt.cuh"

namespace xent {
namespace {

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                              const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                              const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's tensor-map encoder, fetched once (no link to libcuda). */
encode_fn encoder() {
  static const encode_fn fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return (encode_fn) nullptr;
    }
    return (encode_fn)f;
  }();
  return fn;
}

/* A matrix of `outer` rows of `inner` values, `stride` values apart, read or
 * written in boxes of box_outer rows by 128 bytes, swizzled 128 bytes. */
bool encode(CUtensorMap *m, const void *p, xent_dtype t, uint64_t inner, uint64_t outer,
            uint64_t stride, uint32_t box_outer) {
  const uint32_t es = xent_dtype_size(t);
  const cuuint64_t dims[2] = {inner, outer}, strides[1] = {stride * es};
  const cuuint32_t box[2] = {128 / es, box_outer}, ones[2] = {1, 1};
  const CUtensorMapDataType dt = t == XENT_FLOAT32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                 : t == XENT_FLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encoder()(m, dt, 2, (void *)p, dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Clusters of CM blocks of `kern` that the device holds at once, asked once
 * per device: `known` is the kernel's own table (0: not asked yet). */
template <typename K>
xent_status resident_clusters(K kern, int CM, int smem, int dev, int (&known)[32], int *out) {
  int n = __atomic_load_n(&known[dev], __ATOMIC_ACQUIRE);
  if (!n) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3((unsigned)CM, 1, 1);
    cfg.blockDim = dim3(gemm::kThreads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    set_cluster(&cfg, attr, CM, true);
    CK(cudaOccupancyMaxActiveClusters(&n, kern, &cfg));
    if (n < 1)
      return xent_fail(XENT_ERROR_UNSUPPORTED,
                       "no cluster of %d blocks of xent's GEMM fits this GPU", CM);
    __atomic_store_n(&known[dev], n, __ATOMIC_RELEASE);
  }
  *out = n;
  return XENT_OK;
}

/* The last launch of this thread (the experimental GEMM call's description):
 * the grid and what sized it. */
thread_local char t_launch[160];

template <typename T, typename TD, int BN, bool AMN, bool BMN, bool EPI, int CM, bool PP,
          bool LC = false>
xent_status launch(const gemm_product &p, const dev_props &dp, cudaStream_t stream, int group_m) {
  using namespace gemm;
  constexpr int smem = sm90_smem<BN, EPI, PP, LC>(), BM = sm90_bm<PP>();
  auto kern = sm90_gemm_kernel<T, TD, BN, AMN, BMN, EPI, CM, PP, LC>;
  /* once per device and kernel: more shared memory than the default 48 KiB,
   * and (clusters) how many clusters the device holds */
  static unsigned set_on = 0; /* a bit per device (xent serves devices 0-31 here) */
  static int resident_known[32];
  int dev = 0;
  CK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 32)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "xent's GEMM serves devices 0-31, not %d", dev);
  if (!(__atomic_load_n(&set_on, __ATOMIC_ACQUIRE) >> dev & 1)) {
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    __atomic_fetch_or(&set_on, 1u << dev, __ATOMIC_RELEASE);
  }
  /* each block of a pair loads half of B's rows (K-major) or every other box */
  CUtensorMap ma, mb, md = {};
  const bool ok =
      (AMN ? encode(&ma, p.a, p.ab_type, p.m, p.k, p.lda, kBK)
           : encode(&ma, p.a, p.ab_type, p.k, p.m, p.lda, BM)) &&
      (BMN ? encode(&mb, p.b, p.ab_type, p.n, p.k, p.ldb, kBK)
           : encode(&mb, p.b, p.ab_type, p.k, p.n, p.ldb, BN / CM)) &&
      (!EPI || encode(&md, p.d, p.d_type, p.n, p.m, p.ldd, 64));
  if (!ok)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "the driver refused a tensor map of a %lld x %lld x %lld product",
                     (long long)p.m, (long long)p.n, (long long)p.k);
  /* persistent: as many blocks (clusters) as run at once, no more than the walk has steps */
  const int64_t steps = ((p.m + (int64_t)BM * CM - 1) / ((int64_t)BM * CM)) * ((p.n + BN - 1) / BN);
  int resident = dp.sms;
  if (CM > 1) {
    xent_status st = resident_clusters(kern, CM, smem, dev, resident_known, &resident);
    if (st) return st;
  }
  const unsigned clusters = (unsigned)(steps < resident ? steps : resident);
  const sm90_args g = {(int)p.m, (int)p.n, (int)p.k, group_m, p.d, p.ldd, p.bias, p.accumulate,
                       (float2 *)p.stats, (p.n + BN - 1) / BN};
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(clusters * CM, 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  set_cluster(&cfg, attr, CM, false);
  CK(cudaLaunchKernelEx(&cfg, kern, ma, mb, md, g));
  snprintf(t_launch, sizeof t_launch,
           "xent m=%lld n=%lld k=%lld: %u blocks (clusters of %d, %d resident), tile %d x %d%s%s, "
           "%lld steps",
           (long long)p.m, (long long)p.n, (long long)p.k, clusters * CM, CM, resident, BM, BN,
           LC ? ", TMA epilogue, D loaded ahead" : EPI ? ", TMA epilogue" : "",
           PP ? ", pingpong" : "", (long long)steps);
  return XENT_OK;
}

template <typename T, typename TD, bool AMN, bool BMN, int CM, bool PP>
xent_status by_epilogue(const gemm_product &p, const dev_props &dp, cudaStream_t s, int bn, int gm) {
  /* D loaded ahead: built for the weight gradient's layout alone (the refusal
   * keeps every other product away) */
  if constexpr (AMN && BMN && CM == 1 && !PP && sizeof(TD) == 2)
    if (p.tma_epilogue && p.load_c)
      return bn == 256 ? launch<T, TD, 256, AMN, BMN, true, CM, PP, true>(p, dp, s, gm)
                       : launch<T, TD, 128, AMN, BMN, true, CM, PP, true>(p, dp, s, gm);
  if (p.tma_epilogue)
    return bn == 256 ? launch<T, TD, 256, AMN, BMN, true, CM, PP>(p, dp, s, gm)
                     : launch<T, TD, 128, AMN, BMN, true, CM, PP>(p, dp, s, gm);
  return bn == 256 ? launch<T, TD, 256, AMN, BMN, false, CM, PP>(p, dp, s, gm)
                   : launch<T, TD, 128, AMN, BMN, false, CM, PP>(p, dp, s, gm);
}

template <typename T, typename TD, bool AMN, bool BMN>
xent_status by_tile(const gemm_product &p, const dev_props &dp, cudaStream_t s, int bn, int gm) {
  if (p.cluster_m == 2)
    return p.pingpong ? by_epilogue<T, TD, AMN, BMN, 2, true>(p, dp, s, bn, gm)
                      : by_epilogue<T, TD, AMN, BMN, 2, false>(p, dp, s, bn, gm);
  return p.pingpong ? by_epilogue<T, TD, AMN, BMN, 1, true>(p, dp, s, bn, gm)
                    : by_epilogue<T, TD, AMN, BMN, 1, false>(p, dp, s, bn, gm);
}

template <typename T>
xent_status by_layout(const gemm_product &p, const dev_props &dp, cudaStream_t s, int bn, int gm) {
  if (p.a_mn) /* the weight gradient's layout, the only one with an fp32 D */
    return p.d_type == XENT_FLOAT32 ? by_tile<T, float, true, true>(p, dp, s, bn, gm)
                                    : by_tile<T, T, true, true>(p, dp, s, bn, gm);
  return p.b_mn ? by_tile<T, T, false, true>(p, dp, s, bn, gm)
                : by_tile<T, T, false, false>(p, dp, s, bn, gm);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

}  // namespace

const char *gemm_sm90_refusal(const gemm_product &p, const dev_props &dp) {
#if !defined(XENT_GEMM_SM90A)
  (void)p;
  (void)dp;
  return "this build of xent has no sm_90a code (XENT_CUDA_ARCHITECTURES without 90a)";
#else
  if (dp.device_arch != 90) return "xent's GEMM runs on compute capability 9.0 (H100, H200)";
  if (p.ab_type != XENT_BFLOAT16 && p.ab_type != XENT_FLOAT16)
    return "xent's GEMM multiplies bf16 or fp16 operands";
  if (p.a_mn && !p.b_mn) return "xent's GEMM is not built for an M-major A with a K-major B";
  if (p.d_type != p.ab_type && !(p.d_type == XENT_FLOAT32 && p.a_mn))
    return "xent's GEMM writes D in the operands' type (fp32 only for an M-major A)";
  if (p.bn != 0 && p.bn != 128 && p.bn != 256) return "the tile's columns are 128 or 256";
  if (p.cluster_m < 0 || p.cluster_m > 2) return "clusters along M are of 1 or 2 blocks";
  if (p.load_c && (!p.a_mn || !p.b_mn || p.d_type == XENT_FLOAT32 || p.cluster_m == 2 ||
                   p.pingpong || !p.tma_epilogue))
    return "D loaded ahead is built for the weight gradient's layout through the TMA epilogue: "
           "a 16-bit D, single blocks, no pingpong";
  if (p.stats && (p.bn == 0 || p.accumulate || p.d_type != p.ab_type || ((uintptr_t)p.stats & 7)))
    return "the statistics epilogue needs the tile's columns, a fresh D of the operands' type "
           "and 8-byte aligned statistics";
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.m > INT32_MAX || p.n > INT32_MAX || p.k > INT32_MAX)
    return "xent's GEMM takes extents from 1 to 2^31 - 1";
  const int64_t ds = xent_dtype_size(p.d_type);
  if (!aligned16(p.a) || !aligned16(p.b) || !aligned16(p.d) || p.lda % 8 || p.ldb % 8 ||
      p.ldd * ds % 16)
    return "xent's GEMM needs 16-byte aligned operands and rows (TMA)";
  if (!encoder()) return "the driver has no cuTensorMapEncodeTiled";
  return nullptr;
#endif
}

bool gemm_from_lt(const lt_gemm &g, bool tma_epilogue, gemm_product *p) {
  if (g.alpha != 1.0f || (g.beta != 0.0f && g.beta != 1.0f) || g.a_type != g.b_type) return false;
  /* column-major D (m x n) is row-major D^T (n x m): rows of op(B)^T times
   * rows of op(A) */
  *p = {g.n, g.m, g.k, g.b, g.ldb, g.trans_b, g.a, g.lda, !g.trans_a, g.a_type, g.d, g.ldd,
        g.d_type, g.bias, g.beta == 1.0f, 0, 0, tma_epilogue, 0, nullptr, false, false};
  return true;
}

xent_status gemm_sm90(const gemm_product &p, const dev_props &dp, cudaStream_t stream) {
  const char *why = gemm_sm90_refusal(p, dp);
  if (why) return xent_fail(XENT_ERROR_UNSUPPORTED, "%s", why);
  /* BN 256 (the larger tile reads less per product) unless it leaves SMs idle */
  int bn = p.bn;
  if (bn == 0) {
    const int64_t bm = p.pingpong ? 64 : 128;
    const int64_t tiles256 = ((p.m + bm - 1) / bm) * ((p.n + 255) / 256);
    bn = tiles256 < dp.sms ? 128 : 256;
  }
  /* an M-major A (the weight gradient: few K) is walked a row tile at a time,
   * all of B held in L2; otherwise 16 row tiles share each column tile */
  const int gm = p.group_m > 0 ? p.group_m : p.a_mn ? 1 : 16;
  /* The TMA epilogue where D's rows end on a 16-byte boundary: on an H100
   * (2026-12-06) a TMA add into a 16-bit D of 129 columns changed column
   * 129, past the tensor map's extent, so a row that ends inside a 16-byte
   * unit is written through registers, which check each column. */
  gemm_product q = p;
  q.tma_epilogue = p.tma_epilogue && (p.n * (int64_t)xent_dtype_size(p.d_type)) % 16 == 0;
  return p.ab_type == XENT_FLOAT16 ? by_layout<__half>(q, dp, stream, bn, gm)
                                   : by_layout<__nv_bfloat16>(q, dp, stream, bn, gm);
}

}  // namespace xent

/* xent_experimental_gemm_run's product on the engine it names. */
extern "C" xent_status xent_cuda_gemm(const xent_experimental_gemm *x) {
  using namespace xent;
  device_scope scope;
  xent_status st = enter_device(x->device, &scope);
  if (st) return st;
  const xent_experimental defaults = XENT_EXPERIMENTAL_INIT;
  dev_props dp;
  st = get_props(x->device, defaults, &dp);
  cudaStream_t stream = (cudaStream_t)x->stream;
  if (!st && x->engine == XENT_EXPERIMENTAL_GEMM_XENT) {
    const gemm_product p = {x->m, x->n, x->k, x->a, x->lda, x->a_m_major != 0, x->b, x->ldb,
                            x->b_n_major != 0, x->dtype, x->d, x->ldd, x->d_dtype, x->bias,
                            x->accumulate != 0, x->tile_n, 0, x->tma_epilogue != 0,
                            x->cluster_m, x->stats, x->pingpong != 0,
                            x->tma_epilogue == 2};
    st = gemm_sm90(p, dp, stream);
    if (!st) lt_set_last(t_launch);
  } else if (!st && x->stats) {
    st = xent_fail(XENT_ERROR_UNSUPPORTED, "cuBLASLt has no statistics epilogue");
  } else if (!st) {
    /* row-major D is column-major D^T (n x m) = op(B) op(A): B's storage as
     * cuBLAS's A (transposed when K-major), A's as its B */
    const bool chunk_k = x->engine == XENT_EXPERIMENTAL_GEMM_CUBLASLT_LOSS && x->a_m_major &&
                         x->accumulate; /* as linear.cu marks dW's product over a chunk */
    const lt_gemm g = {!x->b_n_major, x->a_m_major != 0, x->n, x->m, x->k, x->b, x->ldb,
                       x->dtype, x->a, x->lda, x->dtype, x->d, x->ldd, x->d_dtype, 1.0f,
                       x->accumulate ? 1.0f : 0.0f, x->bias, chunk_k};
    st = lt_matmul(g, x->workspace, x->workspace_bytes, stream);
  }
  leave_device(&scope);
  return st;
}
