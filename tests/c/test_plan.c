/*
 * test_plan.c - the CUDA backend's launch table (src/cuda/plan.c) as plain
 * logic, no GPU needed: the choices measured on an H200 that bench/NOTES.md
 * records, the variants the plain kernels cannot take, forced launches, and
 * the invariants every choice must keep for any architecture, element size,
 * vocabulary and variant (clusters only on sm_90, a cluster's slices within
 * their share of L2, the shared memory the table assumes per SM).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cuda/plan.h"

/* An H200 (sm_90): the most shared memory one block may have, and what one
 * SM has for all of its blocks (each block also costs 1 KB reserved). */
enum { H200_SMEM_OPTIN = 232448, H200_SMEM_PER_SM = 233472, SMEM_RESERVED = 1024 };

typedef struct want {
  int es;         /* element bytes */
  long long V;    /* vocabulary    */
  int kernel, cluster, threads, keep, hint; /* keep: always 0 (the keep path is in dev/) */
  int vecs, slots, ticket, reuse, hold; /* the staged path's; ticket: 1 for every staged plan */
  int split;      /* the warp path's warps a row (0: one) */
} want;

static xent_plan plan_of(int sm, int es, long long V, int grad, long long rows, int variant) {
  xent_plan_call c = {sm, 132, 232448, es, V, rows, grad, variant};
  xent_plan p;
  xent_plan_forward(&c, &p);
  return p;
}

/* An H200's multiprocessors; forward calls of BT = 8192 rows unless said. */
enum { H200_SMS = 132, BT = 8192 };

static void expect_pick_rows(int sm, int write_grad, long long rows, const want *w) {
  xent_plan l = plan_of(sm, w->es, w->V, write_grad, rows, XENT_VARIANT_PLAIN);
  char got[200], exp[200];
  const char *fmt = "kernel %d cluster %d threads %d keep %d hint %d vecs %d slots %d ticket %d "
                    "reuse %d hold %d split %d";
  snprintf(got, sizeof got, fmt, l.kernel, l.cluster, l.threads, 0, l.l2_hint, l.vecs, l.slots,
           l.kernel == XENT_KERNEL_STAGED, l.reuse, l.hold, l.warp_split);
  snprintf(exp, sizeof exp, fmt, w->kernel, w->cluster, w->threads, w->keep, w->hint, w->vecs,
           w->slots, w->ticket, w->reuse, w->hold, w->split > 1 ? w->split : 1);
  if (strcmp(got, exp) != 0) {
    print_message("sm_%d0 es=%d V=%lld grad=%d rows=%lld: got %s, want %s\n", sm, w->es, w->V,
                  write_grad, rows, got, exp);
    fail();
  }
}

static void expect_pick(int sm, int write_grad, const want *w) {
  expect_pick_rows(sm, write_grad, BT, w);
}

/* Forward with gradient on sm_90: the shapes xent-bench --tune measures,
 * the edges of the staged path (60 KB rows, the 120 KB switch to one block
 * per SM) and the rows just past the 8-block limit of its cluster split. */
static void test_sm90_measured_choices(void **state) {
  (void)state;
  const int T = XENT_KERNEL_TWO_READ, S = XENT_KERNEL_STAGED;
  const want wants[] = {
      {2, 30719, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},     /* just under 60 KB: two reads   */
      {2, 30720, S, 1, 128, 0, 1, 8, 4, 1, 4, 0, 0},     /* 60 KB: 4 chunks, all reused   */
      {2, 32000, S, 1, 128, 0, 1, 8, 4, 1, 4, 0, 0},     /* 62.5 KB                       */
      {2, 50304, S, 1, 128, 0, 1, 8, 6, 1, 6, 0, 0},     /* 98 KB: 7 chunks, 6 of them    */
      {2, 61439, S, 1, 128, 0, 1, 8, 6, 1, 6, 0, 0},     /* just under 120 KB             */
      {2, 61440, S, 1, 480, 0, 1, 4, 7, 1, 3, 2, 0},     /* 120 KB: 4 chunks, 3 reused    */
      {2, 102400, S, 1, 480, 0, 1, 4, 7, 1, 6, 2, 0},    /* 200 KB: 7 chunks, 6 reused    */
      {2, 128256, S, 1, 480, 0, 1, 4, 7, 1, 7, 2, 0},    /* 251 KB: 9 chunks, 7 reused    */
      {2, 152064, S, 1, 480, 0, 1, 4, 7, 1, 7, 2, 0},    /* 297 KB                        */
      {2, 163840, S, 1, 480, 0, 1, 4, 7, 1, 7, 2, 0},    /* 320 KB: the last of one block */
      {2, 163841, S, 2, 480, 0, 1, 4, 7, 1, 5, 2, 0},    /* cluster of 2: rows mailed     */
      {2, 262144, S, 2, 480, 0, 1, 4, 7, 1, 7, 2, 0},    /* 512 KB                        */
      {2, 1048576, S, 8, 480, 0, 1, 4, 7, 1, 7, 2, 0},   /* 2 MB: cluster of 8            */
      {4, 15359, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},     /* just under 60 KB: two reads   */
      {4, 32000, S, 1, 480, 0, 1, 4, 7, 1, 4, 2, 0},     /* 125 KB: 5 chunks, 4 reused    */
      {4, 40959, S, 1, 480, 0, 1, 4, 7, 1, 5, 2, 0},     /* just under 160 KB: 6 chunks   */
      /* fp32 slices of 160 to 256 KB: 416 threads, 8 chunks of 26 KB */
      {4, 40960, S, 1, 416, 0, 1, 4, 8, 1, 6, 2, 0},     /* 160 KB: 7 chunks, 6 reused    */
      {4, 50304, S, 1, 416, 0, 1, 4, 8, 1, 7, 2, 0},     /* 196 KB: 8 chunks, 7 reused    */
      {4, 102400, S, 2, 416, 0, 1, 4, 8, 1, 7, 0, 0},    /* 400 KB: 1 not reused, none held */
      {4, 128256, S, 2, 416, 0, 1, 4, 8, 1, 8, 1, 0},    /* 501 KB: 2 not reused, 1 held */
      {4, 152064, S, 2, 480, 0, 1, 4, 7, 1, 7, 2, 0},    /* 297 KB slices: 7 chunks again */
      {4, 201088, S, 4, 416, 0, 1, 4, 8, 1, 7, 2, 0},    /* 785 KB: cluster of 4, 8 chunks */
      {4, 262144, S, 4, 416, 0, 1, 4, 8, 1, 8, 2, 0},    /* 1 MB: 256 KB slices, the last */
      {4, 655360, S, 8, 480, 0, 1, 4, 7, 1, 7, 2, 0},    /* 2.5 MB: cluster of 8, the last */
      {4, 655361, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0},   /* past 8 x 320 KB: two reads    */
      {4, 1048576, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof wants / sizeof wants[0]; i++) expect_pick(9, 1, &wants[i]);
}

/* Other GPUs: no keep path and no clusters (unmeasured there); L2 policies
 * from sm_80 for rows over 256 KB. Forward without gradient: on sm_90 the
 * row-per-warp kernel for every row length with at least 7 rows per SM, in
 * 256-thread blocks, each row shared by 2, 4 or 8 warps, but the segment
 * path for rows of 4 to 32 KB (one segment) and of 32 to 64 KB with at most
 * 256 rows per SM (two segments); elsewhere a row per
 * warp for rows under 512 KB with at least 12 rows per SM; else pass 1 of
 * the two-read kernel with 256 threads. */
static void test_other_gpus_and_no_grad(void **state) {
  (void)state;
  const int T = XENT_KERNEL_TWO_READ, W = XENT_KERNEL_WARP_ROW, G = XENT_KERNEL_SEGMENT;
  const want sm80[] = {{2, 50304, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},
                       {2, 128256, T, 1, 512, 0, 0, 0, 0, 0, 0, 0, 0},
                       {2, 262144, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0},
                       {4, 128256, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0}};
  /* Blackwell with a gradient: the seed's rule, 8 warps for 16-bit logits
   * and 32 for fp32, whatever the row */
  const want sm100[] = {{2, 50304, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},
                        {2, 128256, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},
                        {2, 262144, T, 1, 256, 0, 1, 0, 0, 0, 0, 0, 0},
                        {4, 4096, T, 1, 1024, 0, 0, 0, 0, 0, 0, 0, 0},
                        {4, 128256, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0}};
  for (size_t i = 0; i < sizeof sm80 / sizeof sm80[0]; i++) expect_pick(8, 1, &sm80[i]);
  for (size_t i = 0; i < sizeof sm100 / sizeof sm100[0]; i++) {
    expect_pick(10, 1, &sm100[i]);
    expect_pick(12, 1, &sm100[i]);
  }
  const want sm70 = {4, 262144, T, 1, 1024, 0, 0, 0, 0, 0, 0, 0, 0};
  expect_pick(7, 1, &sm70);
  for (int sm = 7; sm <= 10; sm++) {
    const want nograd[] = {{2, 262144, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},  /* 512 KB rows */
                           {2, 32000, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},   /* 62.5 KB     */
                           {4, 30719, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},   /* under 120 KB */
                           {4, 32000, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},   /* 125 KB      */
                           {2, 128256, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},  /* 251 KB      */
                           {4, 65536, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},   /* 256 KB      */
                           {4, 128256, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},  /* 501 KB      */
                           {4, 262144, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0}}; /* 1 MB        */
    /* sm_90: 2 warps a row under 128 KB, 4 under 384 KB, 8 from there */
    const want nograd_sm90[] = {{2, 262144, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 8},
                                {2, 32000, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},
                                {4, 30719, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 2},
                                {4, 32000, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 2},
                                {2, 128256, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 4},
                                {4, 65536, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 4},
                                {4, 98303, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 4},
                                {4, 98304, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 8},
                                {4, 128256, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 8},
                                {4, 262144, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 8}};
    for (size_t i = 0; i < sizeof nograd / sizeof nograd[0]; i++)
      expect_pick(sm, 0, sm == 9 ? &nograd_sm90[i] : &nograd[i]);
    const want few = {2, 128256, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},
               enough = {2, 128256, W, 1, 128, 0, 0, 4, 0, 0, 0, 0, 0},
               split2_sm90 = {2, 128256, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 2},
               many_sm90 = {2, 128256, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 4};
    if (sm != 9) {
      expect_pick_rows(sm, 0, 1024, &few); /* 7.8 rows per SM */
      expect_pick_rows(sm, 0, 12 * 132 - 1, &few);
      expect_pick_rows(sm, 0, 12 * 132, &enough);
    } else { /* 2 warps a row from 7 rows per SM, 4 from 32 (rows under 384 KB) */
      expect_pick_rows(sm, 0, 7 * 132 - 1, &few);
      expect_pick_rows(sm, 0, 7 * 132, &split2_sm90);
      expect_pick_rows(sm, 0, 1024, &split2_sm90);
      expect_pick_rows(sm, 0, 32 * 132 - 1, &split2_sm90);
      expect_pick_rows(sm, 0, 32 * 132, &many_sm90);
      /* rows of 32 to 64 KB (two segments), 7 to 256 rows per SM: the
       * segment path */
      const want seg = {2, 32000, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},
                 seg_few = {2, 32000, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},
                 seg_many = {2, 32000, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 2};
      expect_pick_rows(sm, 0, 7 * 132 - 1, &seg_few);
      expect_pick_rows(sm, 0, 7 * 132, &seg);
      expect_pick_rows(sm, 0, 256 * 132, &seg);
      expect_pick_rows(sm, 0, 256 * 132 + 1, &seg_many);
      /* rows of 4 to 32 KB (one segment): from 7 rows per SM, however many */
      const want one = {2, 16000, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},
                 one_few = {2, 16000, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0};
      expect_pick_rows(sm, 0, 7 * 132 - 1, &one_few);
      expect_pick_rows(sm, 0, 7 * 132, &one);
      expect_pick_rows(sm, 0, 65536, &one);
      expect_pick_rows(sm, 0, 1 << 20, &one);
      const want edges[] = {{2, 2047, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 2},   /* under 4 KB */
                            {2, 2048, G, 1, 64, 0, 0, 4, 0, 0, 0, 0, 0},    /* 4 KB */
                            {2, 2049, G, 1, 64, 0, 0, 8, 0, 0, 0, 0, 0},    /* over 4 KB */
                            {2, 4096, G, 1, 64, 0, 0, 8, 0, 0, 0, 0, 0},    /* 8 KB */
                            {2, 4097, G, 1, 128, 0, 0, 8, 0, 0, 0, 0, 0},   /* over 8 KB */
                            {2, 8192, G, 1, 128, 0, 0, 8, 0, 0, 0, 0, 0},   /* 16 KB */
                            {2, 8193, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},   /* over 16 KB */
                            {2, 16383, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},  /* under 32 KB */
                            {2, 16384, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},  /* 32 KB */
                            {2, 32768, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},  /* 64 KB */
                            {2, 32769, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 2},  /* over 64 KB */
                            {4, 1024, G, 1, 64, 0, 0, 4, 0, 0, 0, 0, 0},    /* fp32 4 KB */
                            {4, 2048, G, 1, 64, 0, 0, 8, 0, 0, 0, 0, 0},    /* fp32 8 KB */
                            {4, 8192, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0},   /* fp32 32 KB */
                            {4, 16384, G, 1, 256, 0, 0, 8, 0, 0, 0, 0, 0}}; /* fp32 64 KB */
      for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) expect_pick(sm, 0, &edges[i]);
      /* rows of 384 KB and more: 8 warps a row from 7 rows per SM */
      const want long8 = {4, 262144, W, 1, 256, 0, 0, 4, 0, 0, 0, 0, 8};
      expect_pick_rows(sm, 0, 7 * 132, &long8);
      expect_pick_rows(sm, 0, 4096, &long8);
    }
  }
}

/* The forward without gradient of the calls the plain kernel does not take
 * (weights, softcap, accuracy, predicted tokens, smoothing): a row per warp,
 * unsplit and unpipelined, only for rows under 512 KB with at least 12 rows
 * per SM; else pass 1 of the two-read kernel with 256 threads. With a
 * gradient, the same kernels as the plain variant, the staged ones in chunks
 * of 4 vectors and holding nothing in registers. */
static void test_variants(void **state) {
  (void)state;
  const struct {
    int es;
    long long V, rows;
    int warp; /* 1: a row per warp */
  } cases[] = {{2, 32000, BT, 1},           {4, 128256, BT, 1},     {2, 262143, BT, 1},
               {2, 262144, BT, 0},          {4, 262144, BT, 0},     {2, 128256, 12 * 132, 1},
               {2, 128256, 12 * 132 - 1, 0}, {2, 128256, 1024, 0},  {2, 1048576, 65536, 0},
               {2, 16000, BT, 1}};
  for (int v = XENT_VARIANT_STATS; v <= XENT_VARIANT_GENERAL; v++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      const xent_plan g = plan_of(9, cases[i].es, cases[i].V, 0, cases[i].rows, v);
      const int warp = g.kernel == XENT_KERNEL_WARP_ROW;
      if (warp != cases[i].warp || g.variant != v || g.warp_split != 1 || g.vecs != 0 ||
          g.threads != 256 || g.cluster != 1 || g.l2_hint ||
          (!warp && g.kernel != XENT_KERNEL_TWO_READ)) {
        print_message("variant %d es=%d V=%lld rows=%lld: kernel %d threads %d split %d\n", v,
                      cases[i].es, cases[i].V, cases[i].rows, g.kernel, g.threads, g.warp_split);
        fail();
      }
    }
  /* other GPUs: the plain variant's choice */
  for (int sm = 7; sm <= 10; sm += 3) {
    const xent_plan t = plan_of(sm, 2, 32000, 0, BT, XENT_VARIANT_PLAIN);
    const xent_plan g = plan_of(sm, 2, 32000, 0, BT, XENT_VARIANT_GENERAL);
    assert_int_equal(g.kernel, t.kernel);
    assert_int_equal(g.threads, t.threads);
    assert_int_equal(g.vecs, 0);
  }
  /* with a gradient: the staged kernels with statistics or weights */
  const xent_plan s = plan_of(9, 2, 128256, 1, BT, XENT_VARIANT_STATS);
  const xent_plan t = plan_of(9, 2, 128256, 1, BT, XENT_VARIANT_PLAIN);
  assert_int_equal(s.kernel, XENT_KERNEL_STAGED);
  assert_int_equal(s.vecs, 4);
  assert_int_equal(s.hold, 0);
  assert_int_equal(s.slots, t.slots);
  assert_int_equal(s.reuse, t.reuse);
  const xent_plan small = plan_of(9, 2, 32000, 1, BT, XENT_VARIANT_GENERAL);
  assert_int_equal(small.kernel, XENT_KERNEL_STAGED);
  assert_int_equal(small.vecs, 4);
  assert_int_equal(small.threads, 128);
}

/* Forced launches: what can run is planned as asked, the rest refused with a
 * reason; the segment path of a call it cannot take runs as the table maps
 * such calls. */
static void test_forced(void **state) {
  (void)state;
  char why[256];
  xent_plan p;
  const xent_plan_call h200_grad = {9, 132, 232448, 2, 128256, BT, 1, XENT_VARIANT_PLAIN};
  const xent_plan_call h200_fwd = {9, 132, 232448, 2, 128256, BT, 0, XENT_VARIANT_PLAIN};
  const xent_plan_call a100_grad = {8, 108, 166912, 2, 128256, BT, 1, XENT_VARIANT_PLAIN};
  xent_experimental_launch staged = {XENT_EXPERIMENTAL_STAGED, 2, 480, 4, 7, 7, 2, 0, 1};
  assert_int_equal(xent_plan_forced(&h200_grad, &staged, &p, why, sizeof why), 0);
  assert_int_equal(p.kernel, XENT_KERNEL_STAGED);
  assert_int_equal(p.cluster, 2);
  assert_int_equal(p.hold, 2);
  assert_int_equal(p.programmatic, 0);
  assert_int_equal(xent_plan_forced(&a100_grad, &staged, &p, why, sizeof why), -1);
  assert_non_null(strstr(why, "sm_90"));
  staged.slots = 16; /* 16 x 30 KB: more than a block's shared memory */
  assert_int_equal(xent_plan_forced(&h200_grad, &staged, &p, why, sizeof why), -1);
  const xent_experimental_launch warp = {XENT_EXPERIMENTAL_WARP_ROW, 0, 256, 0, 0, 0, 0, 4, 0};
  assert_int_equal(xent_plan_forced(&h200_grad, &warp, &p, why, sizeof why), -1);
  assert_int_equal(xent_plan_forced(&h200_fwd, &warp, &p, why, sizeof why), 0);
  assert_int_equal(p.warp_split, 4);
  assert_int_equal(p.vecs, XENT_WARP_STAGE_VECS);
  const xent_experimental_launch warp_bad = {XENT_EXPERIMENTAL_WARP_ROW, 0, 96, 0, 0, 0, 0, 2, 0};
  assert_int_equal(xent_plan_forced(&h200_fwd, &warp_bad, &p, why, sizeof why), -1);
  const xent_experimental_launch seg = {XENT_EXPERIMENTAL_SEGMENT, 0, 256, 8, 0, 0, 0, 0, 0};
  assert_int_equal(xent_plan_forced(&h200_fwd, &seg, &p, why, sizeof why), -1); /* 251 KB rows */
  xent_plan_call seg_call = h200_fwd;
  seg_call.vocab = 32000;
  assert_int_equal(xent_plan_forced(&seg_call, &seg, &p, why, sizeof why), 0);
  assert_int_equal(p.segments, 2);
  seg_call.variant = XENT_VARIANT_STATS;
  assert_int_equal(xent_plan_forced(&seg_call, &seg, &p, why, sizeof why), 0);
  assert_int_equal(p.kernel, XENT_KERNEL_WARP_ROW);
  assert_int_equal(p.vecs, 0);
  const xent_experimental_launch two = {XENT_EXPERIMENTAL_TWO_READ, 0, 512, 0, 0, 0, 0, 0, 1};
  assert_int_equal(xent_plan_forced(&h200_grad, &two, &p, why, sizeof why), 0);
  assert_int_equal(p.kernel, XENT_KERNEL_TWO_READ);
  assert_int_equal(p.l2_hint, 1);
  assert_int_equal(p.programmatic, 1);
}

/* Every choice, over many V and every variant: what the kernels and the
 * measurements behind the table require of it. */
static void test_invariants(void **state) {
  (void)state;
  long bad = 0, picks = 0;
  const long long rows_set[] = {1, 1024, 8192, 65536};
  for (int sm = 7; sm <= 10; sm++)
    for (int es = 2; es <= 4; es += 2)
      for (int grad = 0; grad < 2; grad++)
        for (int var = 0; var < 3; var++)
          for (int ri = 0; ri < 4; ri++)
            for (long long V = 1; V <= (1LL << 22); V = V * 9 / 8 + 1, picks++) {
              const long long rows = rows_set[ri];
              const xent_plan l = plan_of(sm, es, V, grad, rows, var);
              const long long row = V * es;
              const char *why = NULL;
              const int staged = l.kernel == XENT_KERNEL_STAGED;
              const int warp = l.kernel == XENT_KERNEL_WARP_ROW;
              const int seg = l.kernel == XENT_KERNEL_SEGMENT;
              if (l.kernel != XENT_KERNEL_TWO_READ && !warp && !seg && !staged)
                why = "not a kernel of the library";
              else if (l.variant != var)
                why = "not the call's variant";
              else if (seg &&
                       (grad || var || sm != 9 || rows < 7 * H200_SMS || row < 4 * 1024 ||
                        row > 64 * 1024 || (row > 32 * 1024 && rows > 256 * H200_SMS) ||
                        l.segments != (row > 32 * 1024 ? 2 : 1) ||
                        l.segments != xent_plan_segments(l.threads, l.vecs, es, V) ||
                        l.threads > XENT_SEGMENT_MAX_THREADS || (l.vecs != 4 && l.vecs != 8) ||
                        l.threads * l.vecs * 16 < (row > 32 * 1024 ? 32 * 1024 : row) / 2))
                why = "the segment path outside sm_90's plain forward without gradient, from 7 "
                      "rows a SM, and rows of 4 to 32 KB (one segment, at least half of it used) "
                      "or of 32 to 64 KB with at most 256 rows a SM (two segments)";
              else if (warp && (grad || l.threads > XENT_MAX_WARP_THREADS ||
                                (sm == 9 && !var ? rows < 7 * H200_SMS
                                                 : rows < 12 * H200_SMS || row >= 512 * 1024)))
                why = "a row per warp with a gradient, past its launch bounds, with few rows "
                      "(7 per SM on sm_90's plain kernel, 12 elsewhere) or, off it, with rows of "
                      "512 KB and more";
              else if (warp && (var ? l.vecs != 0 : l.vecs != XENT_WARP_STAGE_VECS))
                why = "a row per warp the kernel does not have";
              else if (l.warp_split != 1 &&
                       (!warp || sm != 9 || var ||
                        (l.warp_split != 2 && l.warp_split != 4 && l.warp_split != 8) ||
                        l.threads % (32 * l.warp_split) != 0))
                why = "rows split over warps other than on sm_90's plain warp path (2, 4 or 8 "
                      "warps, whole rows a block)";
              else if (warp && sm == 9 && !var && l.warp_split < 2)
                why = "a plain warp launch on sm_90 with rows not split";
              else if (warp || seg || staged ? l.threads % 32 != 0
                                             : l.threads != 256 && l.threads != 512 &&
                                                   l.threads != 1024)
                why = "threads";
              else if (l.cluster != 1 && l.cluster != 2 && l.cluster != 4 && l.cluster != 8)
                why = "cluster not a power of 2 up to 8";
              else if (l.cluster > 1 && (sm != 9 || !staged))
                why = "clusters off sm_90's staged path";
              else if (staged && (sm != 9 || !grad))
                why = "the staged path off sm_90 or without a gradient";
              else if (staged && var && (l.vecs != 4 || l.hold != 0))
                why = "a staged kernel with statistics or weights in chunks of 8 or holding";
              else if (staged &&
                       (row < 60 * 1024 || l.threads + 32 > XENT_STAGED_MAX_THREADS ||
                        xent_plan_staged_ring_bytes(&l) + XENT_STAGED_STATIC_SMEM >
                            H200_SMEM_OPTIN ||
                        xent_plan_staged_ring_bytes(&l) + XENT_STAGED_STATIC_SMEM +
                                SMEM_RESERVED >
                            H200_SMEM_PER_SM))
                why = "staged path under 60 KB rows, or its block does not fit an SM";
              else if (staged ? l.reuse < 1 || l.reuse > l.slots : l.reuse != 0)
                why = "staged reuse not 1 to slots chunks (or set elsewhere)";
              else if (staged && !var && l.vecs == 4
                           ? (es == 4 && l.cluster == 2 && l.threads == 416
                                  ? l.hold > 1 /* one fewer than not reused: at most 1 */
                                  : l.hold != XENT_STAGED_MAX_HOLD)
                           : l.hold != 0)
                why = "chunks held in registers other than by every plain staged launch of 4 "
                      "vectors a thread (fp32 slices of 26 KB chunks over 2 blocks: at most 1)";
              else if (l.l2_hint && !staged &&
                       (l.kernel != XENT_KERNEL_TWO_READ || sm < 8 || !grad ||
                        row <= 256 * 1024))
                why = "L2 policies where they were not measured";
              else if (l.cluster > 1 && (row > (long long)l.cluster * 320 * 1024 ||
                                         row <= (long long)l.cluster / 2 * 320 * 1024))
                why = "not the fewest blocks leaving each slice at most 320 KB";
              else if (l.programmatic != (sm >= 9 && l.cluster == 1))
                why = "programmatic launches other than for a block per row on sm_90+";
              if (why) {
                print_message("sm_%d0 es=%d V=%lld grad=%d variant=%d rows=%lld: %s (kernel %d "
                              "cluster %d threads %d)\n",
                              sm, es, V, grad, var, rows, why, l.kernel, l.cluster, l.threads);
                bad++;
              }
            }
  assert_true(picks > 1000);
  assert_int_equal(bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sm90_measured_choices),
      cmocka_unit_test(test_other_gpus_and_no_grad),
      cmocka_unit_test(test_variants),
      cmocka_unit_test(test_forced),
      cmocka_unit_test(test_invariants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
