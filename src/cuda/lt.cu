/*
 * lt.cu - cuBLASLt loaded at run time, and one cached product (lt.cuh).
 */
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "cuda/device.cuh"
#include "cuda/lt.cuh"

#define XENT_STR2(x) #x
#define XENT_STR(x) XENT_STR2(x)

namespace xent {

namespace {

/* The entry points xent uses, loaded once. */
struct lt_api {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) config_get;
  decltype(&cublasLtMatmulAlgoConfigSetAttribute) config_set;
  decltype(&cublasLtMatmulAlgoCheck) check;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtGetStatusString) status_string;
};

lt_api g_api;
bool g_loaded = false;
char g_tried[1024];

void load_api() {
  const char *env = getenv("XENT_CUBLASLT");
  const char *names[] = {env, "libcublasLt.so." XENT_STR(CUBLAS_VER_MAJOR),
#ifdef XENT_CUBLASLT_DIR
                         XENT_CUBLASLT_DIR "/libcublasLt.so." XENT_STR(CUBLAS_VER_MAJOR),
#endif
                         "libcublasLt.so"};
  size_t used = 0;
  for (const char *name : names) {
    if (!name || !name[0]) continue;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      int n = snprintf(g_tried + used, sizeof g_tried - used, "%s%s", used ? ", " : "", name);
      if (n > 0 && (size_t)n < sizeof g_tried - used) used += (size_t)n;
      continue;
    }
    lt_api a;
    bool ok = true;
#define XENT_LT_SYM(field, sym)                              \
  a.field = (decltype(a.field))dlsym(h, #sym);               \
  ok = ok && a.field != nullptr;
    XENT_LT_SYM(create, cublasLtCreate)
    XENT_LT_SYM(desc_create, cublasLtMatmulDescCreate)
    XENT_LT_SYM(desc_destroy, cublasLtMatmulDescDestroy)
    XENT_LT_SYM(desc_set, cublasLtMatmulDescSetAttribute)
    XENT_LT_SYM(layout_create, cublasLtMatrixLayoutCreate)
    XENT_LT_SYM(layout_destroy, cublasLtMatrixLayoutDestroy)
    XENT_LT_SYM(pref_create, cublasLtMatmulPreferenceCreate)
    XENT_LT_SYM(pref_destroy, cublasLtMatmulPreferenceDestroy)
    XENT_LT_SYM(pref_set, cublasLtMatmulPreferenceSetAttribute)
    XENT_LT_SYM(heuristic, cublasLtMatmulAlgoGetHeuristic)
    XENT_LT_SYM(config_get, cublasLtMatmulAlgoConfigGetAttribute)
    XENT_LT_SYM(config_set, cublasLtMatmulAlgoConfigSetAttribute)
    XENT_LT_SYM(check, cublasLtMatmulAlgoCheck)
    XENT_LT_SYM(matmul, cublasLtMatmul)
    XENT_LT_SYM(status_string, cublasLtGetStatusString)
#undef XENT_LT_SYM
    if (ok) {
      g_api = a;
      g_loaded = true;
      return;
    }
    dlclose(h);
    int n = snprintf(g_tried + used, sizeof g_tried - used, "%s%s (symbols missing)",
                     used ? ", " : "", name);
    if (n > 0 && (size_t)n < sizeof g_tried - used) used += (size_t)n;
  }
}

xent_status lt_load() {
  static std::once_flag once;
  std::call_once(once, load_api);
  if (!g_loaded)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "the fused linear loss on the GPU needs cuBLASLt, which could not be loaded "
                     "(tried %s); set XENT_CUBLASLT to the library's file",
                     g_tried);
  return XENT_OK;
}

xent_status lt_fail(cublasStatus_t s, const char *what) {
  return xent_fail(XENT_ERROR_CUDA, "cuBLASLt %s: %s (%d)", what, g_api.status_string(s), (int)s);
}

#define LT(call, what)                                   \
  do {                                                   \
    cublasStatus_t s_ = (call);                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) return lt_fail(s_, what); \
  } while (0)

cudaDataType_t lt_type(xent_dtype d) {
  return d == XENT_FLOAT32 ? CUDA_R_32F : d == XENT_BFLOAT16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The largest power of two (up to 256) that divides the address. */
uint32_t alignment(const void *p) {
  uintptr_t v = (uintptr_t)p;
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

/* A cached product: everything that decides the algorithm. */
struct lt_key {
  int dev;
  bool ta, tb, beta0, bias, chunk_k;
  int64_t m, n, k, lda, ldb, ldd;
  xent_dtype at, bt, dt;
  uint32_t aa, ab, ad, abias;
  size_t ws;
  bool operator==(const lt_key &o) const { return memcmp(this, &o, sizeof o) == 0; }
};

struct lt_entry {
  lt_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  bool measured; /* the configuration of prefer_chunk_k, not the heuristic's */
};

struct lt_cache {
  cublasLtHandle_t handle[16] = {};
  lt_entry e[32];
  int count = 0, next = 0;
};

thread_local lt_cache t_cache;
thread_local char t_last[160] = "none";

/* The weight gradient's product over a chunk (k = the chunk's rows, D read
 * and written whole), in bf16, where it was measured: where the heuristic
 * picks cuBLASLt's SM90 algorithm (id 66), a 256 x 64 tile over clusters of
 * 1 x 2 with custom option 2 in place of the heuristic's configuration. Of
 * every configuration timed one by one at 8192 x 4096 x 128256 with 488-row
 * chunks (dev/cuda/lt_algos.cu, v28) it was the fastest, 643 TFLOP/s against
 * the heuristic's 563; the step of each benchmark shape with it is in
 * bench/NOTES.md. Where cuBLASLt does not accept it, the heuristic's stays. */
/* Up to which k the forced configuration pays: dev/cuda/lt_dwk.cu on an
 * H100 (2026-12-05, three heads) has it 0.87 to 0.93 of the heuristic's time
 * at k = 232 and 488, 0.97 to 1.10 at 976 and 1.13 to 1.25 at 4096 and 8192
 * (bench/NOTES.md, v36): the default chunks take it, whole batches do not. */
constexpr int64_t kChunkKMax = 640;

void prefer_chunk_k(cublasLtHandle_t h, lt_entry *e, uint64_t ws) {
  const lt_api &A = g_api;
  int id = 0;
  size_t w = 0;
  if (A.config_get(&e->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w) != CUBLAS_STATUS_SUCCESS ||
      id != 66)
    return;
  cublasLtMatmulAlgo_t x = e->algo;
  const uint32_t tile = CUBLASLT_MATMUL_TILE_256x64, custom = 2;
  const uint16_t cluster = CUBLASLT_CLUSTER_SHAPE_1x2x1;
  cublasLtMatmulHeuristicResult_t r;
  if (A.config_set(&x, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile) == CUBLAS_STATUS_SUCCESS &&
      A.config_set(&x, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster) ==
          CUBLAS_STATUS_SUCCESS &&
      A.config_set(&x, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom) ==
          CUBLAS_STATUS_SUCCESS &&
      A.check(h, e->desc, e->la, e->lb, e->ld, e->ld, &x, &r) == CUBLAS_STATUS_SUCCESS &&
      r.workspaceSize <= ws) {
    e->algo = x;
    e->measured = true;
  }
}

xent_status make_entry(cublasLtHandle_t h, const lt_gemm &g, const lt_key &key, lt_entry *e) {
  const lt_api &A = g_api;
  e->key = key;
  LT(A.desc_create(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const int32_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(A.desc_set(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
  LT(A.desc_set(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
  if (g.bias) {
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bt = lt_type(g.d_type);
    LT(A.desc_set(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
    LT(A.desc_set(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), "bias type");
    LT(A.desc_set(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias), "bias");
  }
  /* op(A) is m x k: A itself is k x m when transposed */
  LT(A.layout_create(&e->la, lt_type(g.a_type), g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k,
                     g.lda), "layout of A");
  LT(A.layout_create(&e->lb, lt_type(g.b_type), g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n,
                     g.ldb), "layout of B");
  LT(A.layout_create(&e->ld, lt_type(g.d_type), g.m, g.n, g.ldd), "layout of D");
  cublasLtMatmulPreference_t pref;
  LT(A.pref_create(&pref), "preference");
  const uint64_t ws = key.ws;
  cublasStatus_t s = A.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const uint32_t al[4] = {key.aa, key.ab, key.ad, key.ad};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
    s = A.pref_set(pref, which[i], &al[i], sizeof al[i]);
  /* A 16-bit D is rounded once (xent.h): a split k adds its parts in fp32,
   * never in D itself (the in-place scheme) or in D's type. */
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (s == CUBLAS_STATUS_SUCCESS && g.d_type != XENT_FLOAT32)
    s = A.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = A.heuristic(h, e->desc, e->la, e->lb, e->ld, e->ld, pref, 1, &r, &found);
  A.pref_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(s, "algorithm heuristic");
  if (found < 1)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "cuBLASLt has no algorithm for a %lld x %lld x %lld product here",
                     (long long)g.m, (long long)g.n, (long long)g.k);
  e->algo = r.algo;
  e->measured = false;
  /* cublasLtMatmulAlgoCheck sees no pointers: the configuration is tried only
   * where every operand is 16-byte aligned, rows and columns alike. */
  const bool aligned = key.aa >= 16 && key.ab >= 16 && key.ad >= 16 && g.lda % 8 == 0 &&
                       g.ldb % 8 == 0 && g.ldd % 8 == 0;
  if (g.chunk_k && g.k <= kChunkKMax && aligned && g.a_type == XENT_BFLOAT16 &&
      g.b_type == XENT_BFLOAT16 && g.d_type == XENT_BFLOAT16)
    prefer_chunk_k(h, e, ws);
  return XENT_OK;
}

void drop_entry(lt_entry *e) {
  g_api.desc_destroy(e->desc);
  g_api.layout_destroy(e->la);
  g_api.layout_destroy(e->lb);
  g_api.layout_destroy(e->ld);
}

}  // namespace

xent_status lt_matmul(const lt_gemm &g, void *ws, size_t ws_bytes, cudaStream_t stream) {
  xent_status st = lt_load();
  if (st) return st;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 16)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "device %d: the fused linear loss serves devices 0-15", dev);
  lt_cache &c = t_cache;
  if (!c.handle[dev]) {
    cublasLtHandle_t h;
    LT(g_api.create(&h), "handle");
    c.handle[dev] = h;
  }
  lt_key key;
  memset(&key, 0, sizeof key); /* padding too: keys compare as bytes */
  key.dev = dev;
  key.ta = g.trans_a;
  key.tb = g.trans_b;
  key.beta0 = g.beta == 0.0f;
  key.bias = g.bias != nullptr;
  key.chunk_k = g.chunk_k;
  key.m = g.m, key.n = g.n, key.k = g.k;
  key.lda = g.lda, key.ldb = g.ldb, key.ldd = g.ldd;
  key.at = g.a_type, key.bt = g.b_type, key.dt = g.d_type;
  key.aa = alignment(g.a), key.ab = alignment(g.b), key.ad = alignment(g.d);
  key.abias = g.bias ? alignment(g.bias) : 0;
  key.ws = ws_bytes;
  lt_entry *e = nullptr;
  for (int i = 0; i < c.count; i++)
    if (c.e[i].key == key) e = &c.e[i];
  if (!e) {
    lt_entry fresh;
    if ((st = make_entry(c.handle[dev], g, key, &fresh))) return st;
    if (c.count < 32) {
      e = &c.e[c.count++];
    } else { /* round robin */
      e = &c.e[c.next];
      drop_entry(e);
      c.next = (c.next + 1) % 32;
    }
    *e = fresh;
  } else if (g.bias) {
    LT(g_api.desc_set(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
       "bias");
  }
  LT(g_api.matmul(c.handle[dev], e->desc, &g.alpha, g.a, e->la, g.b, e->lb, &g.beta, g.d, e->ld,
                  g.d, e->ld, &e->algo, ws, ws_bytes, stream),
     "matmul");
  snprintf(t_last, sizeof t_last, "lt m=%lld n=%lld k=%lld%s%s%s", (long long)g.m, (long long)g.n,
           (long long)g.k, g.trans_a ? " At" : "", g.trans_b ? " Bt" : "",
           e->measured ? " measured" : "");
  return XENT_OK;
}

const char *lt_last(void) { return t_last; }

void lt_set_last(const char *what) { snprintf(t_last, sizeof t_last, "%s", what); }

}  // namespace xent

extern "C" const char *xent_cuda_last_product(void) { return xent::lt_last(); }
