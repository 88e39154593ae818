/*
 * sm90.cuh - xent's own Hopper GEMM (sm_90a): D (M x N, row-major) (+)=
 * A B^T (+ bias), A M x K and B N x K in 16-bit values, each K-major or
 * MN-major in memory, fp32 accumulation rounded once into D.
 *
 * One persistent block per SM walks the output tiles (BM x BN) in an order
 * that keeps concurrent blocks on shared operands in L2. Warpgroup 0 is the
 * producer: one thread streams each tile's K blocks of A and B (BK = 64
 * values deep, 128-byte rows swizzled for the tensor cores) into a ring of
 * STAGES shared-memory stages by TMA, and an mbarrier per stage says when
 * its bytes are in ("full") and when its readers are done ("empty").
 * Warpgroups 1 and 2 each multiply 64 of the tile's rows by its BN columns
 * with wgmma from shared memory, one commit group per stage with the
 * previous one still in flight, then write their accumulators: through
 * registers (any D type, bias, D read when accumulating, edges checked), or
 * (TMA_EPI) through two 8 KiB swizzled boxes per warpgroup sent by TMA, a
 * store or, accumulating, an add in L2 in D's type (for a 16-bit D, two
 * roundings: the product's part, then the sum).
 * While they write, the producer is already loading the next tile.
 *
 * PP ("ping-pong"): the two consumers take alternate tiles of 64 rows
 * instead of halves of one, so that one writes its tile while the other
 * multiplies; their main loops take turns (an mbarrier each says "my main
 * loop of this tile is done"), which keeps the stages they wait on in
 * order. The tensor cores then wait for no epilogue, at the price of B's
 * tile loaded for 64 rows instead of 128, which pairs of blocks (CM 2)
 * sharing B by multicast take back: 64-row tiles a consumer, taking turns,
 * over pairs, is the tile cuBLASLt runs the loss's dW product with (256 x 64
 * in its column-major terms, clusters of 1 x 2).
 */
#ifndef XENT_CUDA_GEMM_SM90_CUH
#define XENT_CUDA_GEMM_SM90_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/elem.cuh"
#include "cuda/gemm/ptx.cuh"

namespace xent {
namespace gemm {

constexpr int kBM = 128, kBK = 64; /* BK: 64 16-bit values, one 128-byte swizzle row */
constexpr int kChunk = 64 * kBK * 2; /* 64 rows of a stage's operand: 8 KiB */
constexpr int kThreads = 384;        /* the producer warpgroup and two consumers */

struct sm90_args {
  int m, n, k, group_m;
  void *d;
  int64_t ldd;
  const void *bias; /* n values of D's type, added to every row, or NULL */
  int accumulate;   /* D += A B^T: D is read (or added to by TMA) */
  float2 *stats;    /* or NULL: each row's (max, sum of exp(d - max)) over each column
                       tile's values of D as stored, at stats[row * stats_ld + tile] */
  int64_t stats_ld;
};

/* LC keeps two consumers' halves of D's tile in shared memory beside the
 * ring, which then holds one stage fewer. */
template <int BN, bool LC = false>
__host__ __device__ constexpr int sm90_stages() { return (BN == 256 ? 4 : 6) - (LC ? 1 : 0); }

/* Rows of a consumer's tile: half of a 128-row tile, or (PP) a tile of its own. */
template <bool PP>
__host__ __device__ constexpr int sm90_bm() { return PP ? 64 : kBM; }

/* The epilogue's shared memory: two boxes a consumer, or (LC) a consumer's
 * 64 rows by BN columns of a 16-bit D (BN / 64 boxes, at least two). */
template <int BN, bool TMA_EPI, bool LC>
__host__ __device__ constexpr int sm90_epi_bytes() {
  return LC ? 2 * (BN / 64 > 2 ? BN / 64 : 2) * kChunk : TMA_EPI ? 4 * kChunk : 0;
}

/* Shared memory a block needs (the ring, the epilogue's boxes, the
 * barriers, and room to align the ring to 1 KiB). */
template <int BN, bool TMA_EPI, bool PP, bool LC = false>
__host__ __device__ constexpr int sm90_smem() {
  return sm90_stages<BN, LC>() * (sm90_bm<PP>() + BN) * kBK * 2 +
         sm90_epi_bytes<BN, TMA_EPI, LC>() + (2 * sm90_stages<BN, LC>() + 6) * 8 + 1024;
}

template <typename T> struct wg_op;
template <> struct wg_op<__nv_bfloat16> {
  template <int BN, int TA, int TB>
  static __device__ __forceinline__ void mma(float (&d)[BN / 2], uint64_t a, uint64_t b, int acc) {
    if constexpr (BN == 256) wgmma_n256_bf16<TA, TB>(d, a, b, acc);
    else wgmma_n128_bf16<TA, TB>(d, a, b, acc);
  }
};
template <> struct wg_op<__half> {
  template <int BN, int TA, int TB>
  static __device__ __forceinline__ void mma(float (&d)[BN / 2], uint64_t a, uint64_t b, int acc) {
    if constexpr (BN == 256) wgmma_n256_f16<TA, TB>(d, a, b, acc);
    else wgmma_n128_f16<TA, TB>(d, a, b, acc);
  }
};

__device__ __forceinline__ float2 load2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float2 load2(const __nv_bfloat16 *p) {
  return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}
__device__ __forceinline__ float2 load2(const __half *p) { return __half22float2(*(const __half2 *)p); }
__device__ __forceinline__ void store2(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }
__device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b) {
  *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half *p, float a, float b) {
  *(__half2 *)p = __floats2half2_rn(a, b);
}
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename TD> __device__ __forceinline__ TD from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half(x); }

/* The statistics epilogue: the (max, sum of exponentials) of this thread's
 * rows over the tile's columns, taken over D's values as they are stored.
 * The accumulators become those values (bias added, rounded to TD: the
 * epilogue then stores them as they are, adding no bias), so that the sum's
 * pass and the store read them without converting again. The four threads
 * of a row merged by shuffles, written by the first. Columns past n take no
 * part. */
template <typename TD, int BN>
__device__ __forceinline__ void tile_stats(float (&acc)[BN / 2], const sm90_args &g, int row0,
                                           int pn, int warp, int lane) {
  const TD *bias = (const TD *)g.bias;
  const int c0 = pn * BN + 2 * (lane % 4);
  float mx[2] = {-INFINITY, -INFINITY}, sm[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < BN / 8; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int col = c0 + 8 * j + e;
      const float b = bias && col < g.n ? to_f(bias[col]) : 0.0f;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float &v = acc[4 * j + 2 * h + e];
        v = to_f(from_f<TD>(v + b));
        if (col < g.n) mx[h] = fmaxf(mx[h], v);
      }
    }
#pragma unroll
  for (int h = 0; h < 2; h++)
#pragma unroll
    for (int o = 1; o < 4; o *= 2) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
  /* exp(v - max) as 2^(v log2 e - max log2 e); a tile of -inf alone (a
   * masked one) sums 2^-inf = 0 terms, not NaN */
  const float mb[2] = {mx[0] == -INFINITY ? 0.0f : mx[0] * kLog2e,
                       mx[1] == -INFINITY ? 0.0f : mx[1] * kLog2e};
#pragma unroll
  for (int j = 0; j < BN / 8; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      if (c0 + 8 * j + e >= g.n) continue;
#pragma unroll
      for (int h = 0; h < 2; h++)
        sm[h] += fast_exp2(fmaf(acc[4 * j + 2 * h + e], kLog2e, -mb[h]));
    }
#pragma unroll
  for (int h = 0; h < 2; h++)
#pragma unroll
    for (int o = 1; o < 4; o *= 2) sm[h] += __shfl_xor_sync(0xffffffffu, sm[h], o);
  if (lane % 4) return;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = row0 + warp * 16 + lane / 4 + 8 * h;
    if (row < g.m) g.stats[(int64_t)row * g.stats_ld + pn] = make_float2(mx[h], sm[h]);
  }
}

/* The tile of step t of the walk, for block `rank` of a cluster of CM along M:
 * over tmc = tm / CM (rounded up) rows of clusters, groups of gm of them, each
 * group walked down its columns, so that concurrent blocks share rows of A
 * and columns of B; the producer and the consumers take the same steps. */
template <int CM>
__device__ __forceinline__ void tile_of(int t, int tmc, int tn, int gm, int rank, int *pm,
                                        int *pn) {
  const int per = gm * tn, first = t / per * gm, size = min(tmc - first, gm), r = t % per;
  *pm = (first + r % size) * CM + rank;
  *pn = r / size;
}

/* A stage is free again: each consumer warp tells every block of the cluster
 * whose producer wrote into it (all of them, with multicast). */
template <int CM>
__device__ __forceinline__ void release_stage(uint64_t *empty) {
  if constexpr (CM == 1)
    bar_arrive(empty);
  else
    for (uint32_t r = 0; r < (uint32_t)CM; r++) bar_arrive_cluster(empty, r);
}

/* CM: blocks of a cluster along M (1 or 2). With 2, the pair takes row tiles
 * 2 i and 2 i + 1 of the same column tile, and each block loads half of the
 * shared B tile and multicasts it to both: B is read from L2 once per pair.
 * PP: the consumers take turns (above); in a pair, consumer c of both
 * blocks takes the same steps of the walk, so each stage is read by the
 * same consumer in both.
 * LC ("load C"), for an accumulating 16-bit D through the TMA epilogue: the
 * producer loads each consumer's 64 rows of D's old tile into shared memory
 * while the tile's products run (once the ring is full), and the consumers
 * add their sums to it there and store the tile whole: D is read ahead of
 * its use instead of at the end by the L2's add, and rounded once. */
template <typename T, typename TD, int BN, bool AMN, bool BMN, bool TMA_EPI, int CM, bool PP,
          bool LC = false>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap ma, const __grid_constant__ CUtensorMap mb,
                     const __grid_constant__ CUtensorMap md, sm90_args g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(CM == 1 || CM == 2, "clusters of 1 or 2 blocks");
  static_assert(!LC || (TMA_EPI && CM == 1 && !PP && sizeof(TD) == 2),
                "D loaded ahead: a 16-bit D through TMA, single blocks, consumers on halves");
  constexpr int STAGES = sm90_stages<BN, LC>(), BM = sm90_bm<PP>();
  constexpr int A_BYTES = BM * kBK * 2, ST = A_BYTES + BN * kBK * 2;
  constexpr int C_HALF = 64 * BN * 2; /* LC: a consumer's rows of D's tile */
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  unsigned char *boxes = smem + STAGES * ST; /* LC: consumer c's rows of D at c * C_HALF */
  uint64_t *full = (uint64_t *)(boxes + sm90_epi_bytes<BN, TMA_EPI, LC>()), *empty = full + STAGES;
  uint64_t *turn = empty + STAGES; /* PP: consumer c's main loop of a tile is done */
  uint64_t *cfull = turn + 2, *cfree = cfull + 2; /* LC: consumer c's rows of D in; free */
  const bool load_c = LC && g.accumulate;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int rank = CM == 1 ? 0 : (int)cluster_rank();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      bar_init(&full[s], 1);
      bar_init(&empty[s], (PP ? 4 : 8) * CM); /* lane 0 of each warp reading it, cluster-wide */
    }
    if (PP) {
      bar_init(&turn[0], 4);
      bar_init(&turn[1], 4);
    }
    if (LC)
      for (int c = 0; c < 2; c++) {
        bar_init(&cfull[c], 1);
        bar_init(&cfree[c], 1);
      }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (CM == 1)
    __syncthreads();
  else
    cluster_sync(); /* no block arrives on or writes into a peer's barriers before they exist */
  /* the walk over pairs (CM = 2) of row tiles: both blocks of a cluster take the same steps */
  const int tm = (g.m + BM - 1) / BM, tn = (g.n + BN - 1) / BN;
  const int tmc = (tm + CM - 1) / CM, tiles = tmc * tn, first = blockIdx.x / CM, step = gridDim.x / CM;
  const int nk = (g.k + kBK - 1) / kBK;
  if (wg == 0) { /* the producer */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      int it = 0, lt = 0; /* lt: this block's tiles so far */
      for (int t = first; t < tiles; t += step, lt++) {
        int pm, pn;
        tile_of<CM>(t, tmc, tn, g.group_m, rank, &pm, &pn);
        for (int kb = 0; kb < nk; kb++, it++) {
          const int s = it % STAGES;
          bar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          bar_expect(&full[s], ST); /* A's bytes and all of B's, half of them from the peer */
          unsigned char *sa = smem + s * ST, *sb = sa + A_BYTES;
          if (AMN) /* boxes of BK rows of K by 64 values along M */
            for (int j = 0; j < BM / 64; j++)
              tma_load(sa + j * kChunk, &ma, pm * BM + 64 * j, kb * kBK, &full[s]);
          else /* one box of BM rows by BK values */
            tma_load(sa, &ma, kb * kBK, pm * BM, &full[s]);
          if constexpr (CM == 1) {
            if (BMN)
              for (int j = 0; j < BN / 64; j++)
                tma_load(sb + j * kChunk, &mb, pn * BN + 64 * j, kb * kBK, &full[s]);
            else
              tma_load(sb, &mb, kb * kBK, pn * BN, &full[s]);
          } else { /* this block's half of B, to both */
            const uint16_t both = (1u << CM) - 1;
            if (BMN)
              for (int j = rank; j < BN / 64; j += CM)
                tma_load_multicast(sb + j * kChunk, &mb, pn * BN + 64 * j, kb * kBK, &full[s], both);
            else
              tma_load_multicast(sb + rank * (BN / CM) * 128, &mb, kb * kBK,
                                 pn * BN + rank * (BN / CM), &full[s], both);
          }
          /* LC: D's old tile once the ring is full (the wait for the previous
           * tile's stores would otherwise hold back this tile's first stages) */
          if (load_c && kb == (nk < STAGES ? nk : STAGES) - 1)
            for (int c = 0; c < 2; c++) {
              bar_wait(&cfree[c], (lt & 1) ^ 1);
              bar_expect(&cfull[c], C_HALF);
              for (int q = 0; q < BN / 64; q++)
                tma_load(boxes + c * C_HALF + q * kChunk, &md, pn * BN + 64 * q,
                         pm * kBM + c * 64, &cfull[c]);
            }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int c = wg - 1, warp = tid / 32, lane = tid % 32;
    float acc[BN / 2];
    /* PP: this consumer's tiles are the block's tiles c, c + 2, ... (local
     * index i), each after the other consumer's main loop of tile i - 1 */
    int i = PP ? c : 0, it = i * nk, lt = 0;
    for (int t = first + (PP ? c * step : 0); t < tiles; t += (PP ? 2 : 1) * step, lt++) {
      int pm, pn;
      tile_of<CM>(t, tmc, tn, g.group_m, rank, &pm, &pn);
      if (PP) {
        it = i * nk;
        if (i > 0) bar_wait(&turn[1 - c], ((i - 1) / 2) & 1);
      }
      for (int kb = 0; kb < nk; kb++, it++) {
        const int s = it % STAGES;
        bar_wait(&full[s], (it / STAGES) & 1);
        /* this consumer's 64 rows of A lie kChunk into the stage in either
         * layout (64 K-major rows of 128 bytes, or the second 64-wide M box) */
        const uint32_t a0 = smem_u32(smem + s * ST) + (PP ? 0 : c * kChunk),
                       b0 = smem_u32(smem + s * ST + A_BYTES);
        wgmma_fence();
  #pragma unroll
        for (int kk = 0; kk < kBK / 16; kk++) {
          /* 16 more values of K: 32 bytes along a K-major row, or two 1 KiB
           * atoms of an MN-major box */
          const uint64_t da = AMN ? smem_desc(a0 + kk * 2048, kChunk, 1024) : smem_desc(a0 + kk * 32, 16, 1024);
          const uint64_t db = BMN ? smem_desc(b0 + kk * 2048, kChunk, 1024) : smem_desc(b0 + kk * 32, 16, 1024);
          wg_op<T>::template mma<BN, AMN, BMN>(acc, da, db, (kb | kk) != 0);
        }
        wgmma_commit();
        wgmma_wait<1>(); /* the previous stage's products are done: free it */
        if (kb > 0 && lane == 0) release_stage<CM>(&empty[(it - 1) % STAGES]);
      }
      if (PP) {
        __syncwarp();
        if (lane == 0) bar_arrive(&turn[c]); /* every stage of this tile waited on: your turn */
        i += 2;
      }
      wgmma_wait<0>();
      if (lane == 0 && nk > 0) release_stage<CM>(&empty[(it - 1) % STAGES]);
      if (nk == 0)
        for (int e = 0; e < BN / 2; e++) acc[e] = 0.0f;
      /* thread (warp w, lane l) holds, for each 8 columns j, rows 16 w + l / 4
       * and + 8, columns 8 j + 2 (l % 4) and + 1 */
      const int rr = warp * 16 + lane / 4, row0 = PP ? pm * BM : pm * kBM + c * 64;
      if (g.stats) tile_stats<TD, BN>(acc, g, row0, pn, warp, lane);
      if (load_c) {
        /* LC: the sums added to D's old values where they wait in shared
         * memory (in place, the boxes' swizzle), then the tile stored */
        unsigned char *rows = boxes + c * C_HALF;
        bar_wait(&cfull[c], lt & 1);
  #pragma unroll
        for (int j = 0; j < BN / 8; j++)
  #pragma unroll
          for (int h = 0; h < 2; h++) {
            const int r = rr + 8 * h, byte = (8 * (j % 8) + 2 * (lane % 4)) * 2;
            unsigned char *at = rows + (j / 8) * kChunk + r * 128 +
                                (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
            const float2 o = load2((const TD *)at);
            float v0 = acc[4 * j + 2 * h] + o.x, v1 = acc[4 * j + 2 * h + 1] + o.y;
            if (g.bias) {
              const int col = pn * BN + 8 * j + 2 * (lane % 4);
              const TD *b = (const TD *)g.bias;
              if (col < g.n) v0 += to_f(b[col]);
              if (col + 1 < g.n) v1 += to_f(b[col + 1]);
            }
            store2((TD *)at, v0, v1);
          }
        fence_async_smem();
        warpgroup_sync(1 + c);
        if (tid == 0) {
          for (int q = 0; q < BN / 64; q++)
            tma_store<false>(&md, pn * BN + 64 * q, row0, rows + q * kChunk);
          tma_store_wait<0>(); /* read: the producer may load the next tile's rows */
          bar_arrive(&cfree[c]);
        }
      } else if constexpr (TMA_EPI) {
        /* BC columns at a time (128 bytes of D's type: 64 16-bit values or 32
         * fp32) into a 64-row box swizzled as the TMA unit reads it (16-byte
         * chunk x of row r at chunk x ^ (r % 8)), sent by one thread; a box is
         * rewritten once its last store has read it */
        constexpr int BC = 128 / (int)sizeof(TD);
        unsigned char *box0 = boxes + c * 2 * kChunk;
  #pragma unroll
        for (int q = 0; q < BN / BC; q++) {
          unsigned char *box = box0 + (q & 1) * kChunk;
          if (tid == 0) tma_store_wait<1>();
          warpgroup_sync(1 + c);
  #pragma unroll
          for (int jj = 0; jj < BC / 8; jj++)
  #pragma unroll
            for (int h = 0; h < 2; h++) {
              const int j = q * (BC / 8) + jj, r = rr + 8 * h;
              const int byte = (8 * jj + 2 * (lane % 4)) * (int)sizeof(TD);
              const int at = r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
              float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
              if (g.bias && !g.stats) { /* the statistics added it already */
                const int col = pn * BN + 8 * j + 2 * (lane % 4);
                const TD *b = (const TD *)g.bias;
                if (col < g.n) v0 += to_f(b[col]);
                if (col + 1 < g.n) v1 += to_f(b[col + 1]);
              }
              store2((TD *)(box + at), v0, v1);
            }
          fence_async_smem();
          warpgroup_sync(1 + c);
          if (tid == 0) {
            if (g.accumulate)
              tma_store<true>(&md, pn * BN + BC * q, row0, box);
            else
              tma_store<false>(&md, pn * BN + BC * q, row0, box);
          }
        }
      } else {
        TD *D = (TD *)g.d;
        const TD *bias = g.stats ? nullptr : (const TD *)g.bias; /* as above */
        const int r0 = row0 + rr, c0 = pn * BN + 2 * (lane % 4);
  #pragma unroll
        for (int j = 0; j < BN / 8; j++) {
  #pragma unroll
          for (int h = 0; h < 2; h++) {
            const int row = r0 + 8 * h, col = c0 + 8 * j;
            if (row >= g.m || col >= g.n) continue;
            TD *p = D + (size_t)row * g.ldd + col;
            float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (col + 1 < g.n) {
              if (bias) {
                v0 += to_f(bias[col]);
                v1 += to_f(bias[col + 1]);
              }
              if (g.accumulate) {
                const float2 o = load2(p);
                v0 += o.x;
                v1 += o.y;
              }
              store2(p, v0, v1);
            } else {
              if (bias) v0 += to_f(bias[col]);
              if (g.accumulate) v0 += to_f(*p);
              *p = from_f<TD>(v0);
            }
          }
        }
      }
    }
    if (TMA_EPI && tid == 0) tma_store_wait<0>(); /* the boxes outlive their stores */
  }
  if constexpr (CM > 1) { /* no block leaves while a peer may still write into it or arrive */
    __syncwarp();
    cluster_sync();
  }
#else
  __trap(); /* built without sm_90a code: the host side never launches it (gemm.cu) */
#endif
}

}  // namespace gemm
}  // namespace xent

#endif
