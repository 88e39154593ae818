/*
 * plan.c - the launch table (xent_plan_forward) and the check of a forced
 * launch (xent_plan_forced). Every rule was measured on an H200 unless it
 * says otherwise; the pointer after each is the section of bench/NOTES.md
 * (and the versions of bench/HISTORY.md) that measured it. sm_80's rules
 * were measured on an H100 running the A100's plan over compute_80 code (a
 * proxy: bench/NOTES.md, "Every GPU"); Blackwell (sm_100+) takes the seed's
 * warps by dtype with a gradient and sm_80's rules without, unmeasured.
 */
#include "cuda/plan.h"

#include <stdio.h>
#include <string.h>

#define KB 1024LL

long long xent_plan_segments(int threads, int vecs, int es, long long vocab) {
  const long long nvec = vocab * es / 16, per_block = (long long)threads * vecs;
  return nvec <= per_block ? 1 : (nvec + per_block - 1) / per_block;
}

long long xent_plan_staged_ring_bytes(const xent_plan *p) {
  return (long long)p->slots * p->vecs * p->threads * 16;
}

/* Does a staged block of this geometry fit the GPU? */
static int staged_fits(const xent_plan *p, int sm_major, int smem_optin) {
  return sm_major >= 9 && p->threads >= 32 && p->threads % 32 == 0 &&
         p->threads + 32 <= XENT_STAGED_MAX_THREADS && p->cluster >= 1 &&
         p->cluster <= XENT_MAX_CLUSTER && (p->vecs == 4 || p->vecs == 8) && p->slots >= 2 &&
         p->slots <= XENT_STAGED_MAX_SLOTS && p->reuse >= 0 && p->reuse <= p->slots &&
         p->hold >= 0 && p->hold <= XENT_STAGED_MAX_HOLD && (p->hold == 0 || p->vecs == 4) &&
         xent_plan_staged_ring_bytes(p) + XENT_STAGED_STATIC_SMEM <= smem_optin;
}

/* A row per warp without a gradient off sm_90, and for the calls the plain
 * kernel does not take: rows under 512 KB, at least 12 a SM (NOTES: row per
 * warp; HISTORY v10). */
static int warp_rows_measured(long long row_bytes, long long rows, int sms) {
  return row_bytes < 512 * KB && rows >= 12LL * (sms > 0 ? sms : 1);
}

static void plan_init(xent_plan *p, int kernel, int threads, const char *rule) {
  memset(p, 0, sizeof *p);
  p->kernel = kernel;
  p->cluster = 1;
  p->threads = threads;
  p->warp_split = 1;
  p->rule = rule;
}

/* The plan's kernel variant and what the variant allows: the segment path
 * and the pipelined row per warp are the plain kernel's alone, the staged
 * kernels with statistics or weights take chunks of 4 vectors and hold
 * nothing in registers. */
static void plan_variant(const xent_plan_call *c, xent_plan *p) {
  p->variant = c->variant;
  if (c->variant == XENT_VARIANT_PLAIN) return;
  if (p->kernel == XENT_KERNEL_WARP_ROW) {
    p->vecs = 0;
    p->warp_split = 1;
  }
  if (p->kernel == XENT_KERNEL_STAGED) {
    p->vecs = 4;
    p->hold = 0;
  }
}

/* The forward without gradient. */
static void plan_nograd(const xent_plan_call *c, xent_plan *p) {
  const long long row = c->vocab * c->elem_bytes, per_sm = c->sms > 0 ? c->sms : 1;
  if (c->sm_major == 9 && c->rows >= 7 * per_sm) {
    /* Rows of 4 to 64 KB: a block per segment, its loads all issued at
     * once; one segment up to 32 KB, two from there with at most 256 rows
     * a SM (NOTES: segment; HISTORY v22, v23). */
    if (c->variant == XENT_VARIANT_PLAIN && row >= 4 * KB && row <= 64 * KB &&
        (row <= 32 * KB || c->rows <= 256 * per_sm)) {
      plan_init(p, XENT_KERNEL_SEGMENT,
                row <= 8 * KB ? 64 : row <= 16 * KB ? 128 : 256,
                "segment: sm_90, rows of 4 to 64 KB");
      p->vecs = row <= 4 * KB ? 4 : 8;
      p->segments = (int)xent_plan_segments(p->threads, p->vecs, c->elem_bytes, c->vocab);
      return;
    }
    /* Every other row length: 2, 4 or 8 warps a row (more for longer rows,
     * and with fewer rows a SM), merged in shared memory (NOTES: row per
     * warp; HISTORY v19, v20). The other variants a row per warp where
     * measured, else two reads. */
    if (c->variant != XENT_VARIANT_PLAIN && !warp_rows_measured(row, c->rows, c->sms)) {
      plan_init(p, XENT_KERNEL_TWO_READ, 256, "two-read, pass 1: sm_90, few or long rows");
      return;
    }
    plan_init(p, XENT_KERNEL_WARP_ROW, 256, "warp row: sm_90, at least 7 rows a SM");
    p->vecs = XENT_WARP_STAGE_VECS;
    if (c->rows >= 32 * per_sm)
      p->warp_split = row < 128 * KB ? 2 : row < 384 * KB ? 4 : 8;
    else
      p->warp_split = row >= 384 * KB ? 8 : 2;
    return;
  }
  /* Other GPUs: a row per warp where measured ahead (128 threads, the plain
   * kernel's two stages of 4 vectors; HISTORY v10, v17), else pass 1 of the
   * two-read kernel with 256 threads (HISTORY v5). */
  if (warp_rows_measured(row, c->rows, c->sms)) {
    plan_init(p, XENT_KERNEL_WARP_ROW, 128, "warp row: rows under 512 KB, 12 a SM");
    p->vecs = XENT_WARP_STAGE_VECS;
    return;
  }
  plan_init(p, XENT_KERNEL_TWO_READ, 256, "two-read, pass 1");
}

/* The forward with gradient. */
static void plan_grad(const xent_plan_call *c, xent_plan *p, int sm_major) {
  const long long row = c->vocab * c->elem_bytes;
  /* Two reads, a row per block: 256 threads up to 112 KB rows, 512 to 256
   * KB, 1024 beyond (HISTORY v2 to v5). */
  const int threads = row <= 112 * KB ? 256 : row > 256 * KB ? 1024 : 512;
  if (sm_major == 9 && row >= 60 * KB) {
    /* Rows of 60 KB up to 8 x 320 KB: the staged path, each row over the
     * fewest blocks (1, 2, 4, 8) that leave a slice of at most 320 KB, its
     * share of L2 (NOTES: staged; HISTORY v8, v9, v12 to v18). */
    int K = 1;
    while (K < XENT_MAX_CLUSTER && row > (long long)K * 320 * KB) K *= 2;
    if (row <= (long long)K * 320 * KB) {
      const long long slice = (row / 16 + K - 1) / K; /* 16-byte vectors */
      /* Slices under 120 KB: 128 consumers, chunks of 8 vectors, 2 to 6 of
       * them, all reused: two or three blocks a SM (HISTORY v12). */
      const int small = slice * 16 < 120 * KB;
      /* fp32 slices of 160 to 256 KB: 416 consumers and 8 chunks of 26 KB,
       * not 480 and 7 of 30 KB (HISTORY v13). */
      const int fine = c->elem_bytes == 4 && slice * 16 >= 160 * KB && slice * 16 <= 256 * KB;
      plan_init(p, XENT_KERNEL_STAGED, small ? 128 : fine ? 416 : 480,
                "staged: sm_90, rows of 60 KB to 2.5 MB");
      p->cluster = K;
      p->vecs = small ? 8 : 4;
      const long long chunks = (slice + (long long)p->vecs * p->threads - 1) /
                               ((long long)p->vecs * p->threads);
      if (small) {
        p->slots = chunks < 2 ? 2 : chunks > 6 ? 6 : (int)chunks;
        p->reuse = chunks < p->slots ? (int)chunks : p->slots;
      } else {
        /* Reuse the last 7 (8) chunks, or all but one, so the next row's
         * first chunk streams in during the reduction; hold the first two
         * of the others in registers (HISTORY v18). */
        p->slots = fine ? 8 : 7;
        p->reuse = chunks > p->slots ? p->slots : (int)chunks - 1;
        p->hold = XENT_STAGED_MAX_HOLD;
        if (fine && K == 2) { /* fp32 V = 81921 to 131072: one fewer than not reused */
          const int copied = (int)chunks - p->reuse - 1;
          p->hold = copied < 0 ? 0 : copied < p->hold ? copied : p->hold;
        }
      }
      p->l2_hint = 1;
      return;
    }
  }
  /* Rows over 256 KB from sm_80: pass 1 evict-last, pass 2 evict-first
   * (HISTORY v7, not measured again since v10's flush fix). */
  p->l2_hint = 0;
  if (sm_major >= 10) {
    /* Blackwell, unmeasured here: the seed's rule, the peer's Triton kernel's
     * warps on a B200 (8 a row for 16-bit logits, 32 for fp32). */
    plan_init(p, XENT_KERNEL_TWO_READ, c->elem_bytes == 4 ? 1024 : 256,
              "two-read: sm_100+, the seed's warps by dtype (unmeasured)");
  } else {
    plan_init(p, XENT_KERNEL_TWO_READ, threads, "two-read, a row per block");
  }
  p->l2_hint = sm_major >= 8 && row > 256 * KB;
}

void xent_plan_forward(const xent_plan_call *c, xent_plan *p) {
  if (!c->write_grad) {
    plan_nograd(c, p);
  } else {
    plan_grad(c, p, c->sm_major);
    if (p->kernel == XENT_KERNEL_STAGED) {
      /* The table assumes an H200's 227 KB a block: with less, fewer chunks,
       * and failing that the rules of GPUs without the staged path. */
      while (p->slots > 2 && !staged_fits(p, c->sm_major, c->smem_optin)) {
        p->slots--;
        if (p->reuse > p->slots) p->reuse = p->slots;
      }
      if (!staged_fits(p, c->sm_major, c->smem_optin)) plan_grad(c, p, 8);
    }
  }
  plan_variant(c, p);
  /* Programmatic launches gain 1 to 4 us a call for a block per row and
   * cost clustered launches 0.2 to 1 % (HISTORY v14, v15). */
  p->programmatic = c->sm_major >= 9 && p->cluster == 1;
}

int xent_plan_forced(const xent_plan_call *c, const xent_experimental_launch *f, xent_plan *p,
                     char *why, size_t n) {
  const char *reason = NULL;
  const int plain = c->variant == XENT_VARIANT_PLAIN;
  const long long row = c->vocab * c->elem_bytes;
  switch (f->path) {
    case XENT_EXPERIMENTAL_TWO_READ:
      plan_init(p, XENT_KERNEL_TWO_READ, f->threads, "forced: two-read");
      p->l2_hint = f->l2_hint;
      if (f->l2_hint && c->sm_major < 8) reason = "L2 policies need sm_80+";
      break;
    case XENT_EXPERIMENTAL_STAGED:
      plan_init(p, XENT_KERNEL_STAGED, f->threads, "forced: staged");
      p->cluster = f->cluster > 0 ? f->cluster : 1;
      p->vecs = f->vecs;
      p->slots = f->slots;
      p->reuse = f->reuse;
      p->hold = f->hold;
      p->l2_hint = f->l2_hint;
      if (!staged_fits(p, c->sm_major, c->smem_optin))
        reason = "the staged path needs sm_90+ and a block that fits its shared memory";
      break;
    case XENT_EXPERIMENTAL_WARP_ROW:
      plan_init(p, XENT_KERNEL_WARP_ROW, f->threads, "forced: warp row");
      p->vecs = XENT_WARP_STAGE_VECS;
      p->warp_split = f->warp_split > 1 ? f->warp_split : 1;
      if (c->write_grad) reason = "the warp-row path has no gradient";
      else if (f->threads > XENT_MAX_WARP_THREADS) reason = "more threads than its 256";
      else if (f->threads % (32 * p->warp_split)) reason = "threads not whole split rows";
      break;
    case XENT_EXPERIMENTAL_SEGMENT:
      plan_init(p, XENT_KERNEL_SEGMENT, f->threads, "forced: segment");
      p->vecs = f->vecs;
      p->segments = (int)xent_plan_segments(f->threads, f->vecs, c->elem_bytes, c->vocab);
      if (c->write_grad) reason = "the segment path has no gradient";
      else if (f->threads > XENT_SEGMENT_MAX_THREADS) reason = "more threads than its 256";
      else if (plain && (p->segments > XENT_SEGMENT_MAX ||
                         c->rows * p->segments > 0x7fffffffLL))
        reason = "the row needs more segments than two, or the grid is too large";
      else if (!plain) {
        /* The plain kernel's path alone: other calls as the table maps them
         * (a row per warp where measured, else two reads). */
        if (warp_rows_measured(row, c->rows, c->sms)) {
          plan_init(p, XENT_KERNEL_WARP_ROW, 256, "forced segment, not plain: warp row");
        } else {
          plan_init(p, XENT_KERNEL_TWO_READ, 256, "forced segment, not plain: two-read");
        }
      }
      break;
    default: reason = "not a forced path";
  }
  if (reason) {
    snprintf(why, n, "%s (threads %d, cluster %d, vecs %d, slots %d, V = %lld, grad %d)", reason,
             f->threads, f->cluster, f->vecs, f->slots, c->vocab, c->write_grad);
    return -1;
  }
  plan_variant(c, p);
  p->programmatic = c->sm_major >= 9 && p->cluster == 1;
  return 0;
}
