/*
 * test_launch_table.c - the CUDA backend's launch table (src/cuda/launch_table.h)
 * as plain logic, no GPU needed: the choices measured on an H200 that
 * bench/NOTES.md records, and the invariants every choice must keep for any
 * architecture, element size and vocabulary (clusters only on sm_90, a
 * cluster's slices within their share of L2, the shared memory the table
 * assumes per SM, the staged path's row counter only without a cluster).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cuda/launch_table.h"

/* An H200 (sm_90): the most shared memory one block may have, and what one
 * SM has for all of its blocks (each block also costs 1 KB reserved). */
enum { H200_SMEM_OPTIN = 232448, H200_SMEM_PER_SM = 233472, SMEM_RESERVED = 1024 };

typedef struct want {
  int es;         /* element bytes */
  long long V;    /* vocabulary    */
  int path, cluster, threads, keep, hint;
  int vecs, slots, ticket, reuse, hold; /* the staged path's */
  int split;      /* the warp path's warps a row */
} want;

/* An H200's multiprocessors; forward calls of BT = 8192 rows unless said. */
enum { H200_SMS = 132, BT = 8192 };

static void expect_pick_rows(int sm, int write_grad, long long rows, const want *w) {
  xent_launch l = xent_launch_pick(sm, w->es, w->V, write_grad, rows, H200_SMS);
  char got[200], exp[200];
  const char *fmt = "path %d cluster %d threads %d keep %d hint %d vecs %d slots %d ticket %d "
                    "reuse %d hold %d split %d";
  snprintf(got, sizeof got, fmt, l.path, l.cluster, l.threads, l.keep, l.hint, l.vecs, l.slots,
           l.ticket, l.reuse, l.hold, l.warp_split);
  snprintf(exp, sizeof exp, fmt, w->path, w->cluster, w->threads, w->keep, w->hint, w->vecs,
           w->slots, w->ticket, w->reuse, w->hold, w->split);
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
  const int T = XENT_PATH_TWOREAD, S = XENT_PATH_STAGED;
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
  const int T = XENT_PATH_TWOREAD, W = XENT_PATH_WARP, G = XENT_PATH_SEGMENT;
  const want sm80[] = {{2, 50304, T, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0},
                       {2, 128256, T, 1, 512, 0, 0, 0, 0, 0, 0, 0, 0},
                       {2, 262144, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0},
                       {4, 128256, T, 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0}};
  for (size_t i = 0; i < sizeof sm80 / sizeof sm80[0]; i++) {
    expect_pick(8, 1, &sm80[i]);
    expect_pick(10, 1, &sm80[i]);
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
 * unsplit, only for rows under 512 KB with at least 12 rows per SM; else
 * pass 1 of the two-read kernel with 256 threads. */
static void test_nograd_general(void **state) {
  (void)state;
  const struct {
    int es;
    long long V, rows;
    int warp; /* 1: a row per warp (the table's launch, or unsplit after the segment path) */
  } cases[] = {{2, 32000, BT, 1},           {4, 128256, BT, 1},     {2, 262143, BT, 1},
               {2, 262144, BT, 0},          {4, 262144, BT, 0},     {2, 128256, 12 * 132, 1},
               {2, 128256, 12 * 132 - 1, 0}, {2, 128256, 1024, 0},  {2, 1048576, 65536, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const xent_launch t = xent_launch_pick(9, cases[i].es, cases[i].V, 0, cases[i].rows, H200_SMS);
    const xent_launch g =
        xent_launch_nograd_general(t, cases[i].es, cases[i].V, cases[i].rows, H200_SMS);
    if ((t.path != XENT_PATH_WARP && t.path != XENT_PATH_SEGMENT) ||
        (g.path == XENT_PATH_WARP) != cases[i].warp ||
        (g.path != XENT_PATH_WARP && (g.path != XENT_PATH_TWOREAD || g.threads != 256 ||
                                      g.cluster != 1 || g.hint || g.warp_split))) {
      print_message("es=%d V=%lld rows=%lld: table path %d, general path %d threads %d\n",
                    cases[i].es, cases[i].V, cases[i].rows, t.path, g.path, g.threads);
      fail();
    }
    /* the table's warp launch stays; the segment path's calls a row per warp */
    const xent_launch row_per_warp = {XENT_PATH_WARP, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (g.path == XENT_PATH_WARP &&
        memcmp(&g, t.path == XENT_PATH_SEGMENT ? &row_per_warp : &t, sizeof g) != 0)
      fail();
  }
  /* other GPUs: the table's choice already is the general one */
  for (int sm = 7; sm <= 10; sm += 3) {
    const xent_launch t = xent_launch_pick(sm, 2, 32000, 0, BT, H200_SMS);
    const xent_launch g = xent_launch_nograd_general(t, 2, 32000, BT, H200_SMS);
    assert_int_equal(memcmp(&g, &t, sizeof g), 0);
  }
}

/* Every choice, over many V: what the kernels and the measurements behind
 * the table require of it. */
static void test_invariants(void **state) {
  (void)state;
  long bad = 0, picks = 0;
  const long long rows_set[] = {1, 1024, 8192, 65536};
  for (int sm = 7; sm <= 10; sm++)
    for (int es = 2; es <= 4; es += 2)
      for (int grad = 0; grad < 2; grad++)
        for (int ri = 0; ri < 4; ri++)
          for (long long V = 1; V <= (1LL << 22); V = V * 9 / 8 + 1, picks++) {
            const long long rows = rows_set[ri];
            const xent_launch l = xent_launch_pick(sm, es, V, grad, rows, H200_SMS);
            const long long row = V * es;
            const char *why = NULL;
            const int staged = l.path == XENT_PATH_STAGED;
            if (l.path != XENT_PATH_TWOREAD && l.path != XENT_PATH_KEEP &&
                l.path != XENT_PATH_WARP && l.path != XENT_PATH_SEGMENT && !staged)
              why = "a path the table never picks";
            else if (l.path == XENT_PATH_SEGMENT &&
                     (grad || sm != 9 || rows < 7 * H200_SMS || row < 4 * 1024 ||
                      row > 64 * 1024 || (row > 32 * 1024 && rows > 256 * H200_SMS) ||
                      !xent_segment_fits(&l, es, V) ||
                      xent_segment_count(&l, es, V) != (row > 32 * 1024 ? 2 : 1) ||
                      l.threads * l.vecs * 16 < (row > 32 * 1024 ? 32 * 1024 : row) / 2))
              why = "the segment path outside sm_90's forward without gradient, from 7 rows a "
                    "SM, and rows of 4 to 32 KB (one segment, at least half of it used) or of "
                    "32 to 64 KB with at most 256 rows a SM (two segments)";
            else if (l.path == XENT_PATH_WARP &&
                     (grad || l.threads > XENT_MAX_WARP_THREADS ||
                      (sm == 9 ? rows < 7 * H200_SMS
                               : rows < 12 * H200_SMS || row >= 512 * 1024)))
              why = "a row per warp with a gradient, past its launch bounds, with few rows "
                    "(7 per SM on sm_90, 12 elsewhere) or, off sm_90, with rows of 512 KB and "
                    "more";
            else if (l.path == XENT_PATH_WARP && l.vecs != 0 && l.vecs != 4 && l.vecs != 6 &&
                     l.vecs != 8)
              why = "a pipelined row per warp the kernel does not have";
            else if (l.warp_split != 0 &&
                     (l.path != XENT_PATH_WARP || sm != 9 || l.vecs != 4 ||
                      (l.warp_split != 2 && l.warp_split != 4 && l.warp_split != 8) ||
                      l.threads % (32 * l.warp_split) != 0))
              why = "rows split over warps other than on sm_90's warp path (2, 4 or 8 warps, "
                    "4 vectors a stage, whole rows a block)";
            else if (l.path == XENT_PATH_WARP && sm == 9 && l.warp_split < 2)
              why = "a warp launch on sm_90 with rows not split";
            else if (l.path == XENT_PATH_WARP || l.path == XENT_PATH_SEGMENT || staged
                         ? l.threads % 32 != 0
                         : l.threads != 256 && l.threads != 512 && l.threads != 1024)
              why = "threads";
            else if (l.cluster != 1 && l.cluster != 2 && l.cluster != 4 && l.cluster != 8)
              why = "cluster not a power of 2 up to 8";
            else if (l.cluster > 1 && sm != 9)
              why = "clusters off sm_90";
            else if ((l.path == XENT_PATH_KEEP || staged) && sm != 9)
              why = "keep or staged path off sm_90";
            else if (l.path == XENT_PATH_KEEP && !grad)
              why = "keep path without a gradient";
            else if (staged && !grad)
              why = "staged without a gradient (v20: the warp path instead)";
            else if (staged && (row < 60 * 1024 || !xent_staged_fits(&l, sm, H200_SMEM_OPTIN) ||
                                (long long)l.slots * l.vecs * l.threads * 16 +
                                        XENT_STAGED_STATIC_SMEM + SMEM_RESERVED >
                                    H200_SMEM_PER_SM))
              why = "staged path under 60 KB rows, or its block does not fit an SM";
            else if (staged && grad ? l.reuse < 1 || l.reuse > l.slots : l.reuse != 0)
              why = "staged reuse not 1 to slots chunks with a gradient (or set elsewhere)";
            else if (staged && grad && l.vecs == 4
                         ? (es == 4 && l.cluster == 2 && l.threads == 416
                                ? l.hold > 1 /* one fewer than not reused: at most 1 */
                                : l.hold != XENT_STAGED_MAX_HOLD)
                         : l.hold != 0)
              why = "chunks held in registers other than by every staged launch of 4 vectors "
                    "a thread with a gradient (fp32 slices of 26 KB chunks over 2 blocks: at "
                    "most 1)";
            else if (l.ticket != staged)
              why = "the staged path without its row counter (or one elsewhere)";
            else if (l.per_row != (l.path == XENT_PATH_KEEP))
              why = "keep launches not a row per block (or per_row set off the keep path)";
            else if (l.hint && !staged &&
                     (l.path != XENT_PATH_TWOREAD || sm < 8 || !grad || row <= 256 * 1024))
              why = "L2 policies where they were not measured";
            else if (l.cluster > 1 && (row > (long long)l.cluster * 320 * 1024 ||
                                       row <= (long long)l.cluster / 2 * 320 * 1024))
              why = "not the fewest blocks leaving each slice at most 320 KB";
            else if (l.path == XENT_PATH_KEEP &&
                     (!xent_keep_fits(&l, es, V, H200_SMEM_OPTIN) ||
                      (1024 / l.threads) * ((long long)xent_keep_vecs(&l, es, V) * l.threads * 16 +
                                            XENT_TWOREAD_STATIC_SMEM + SMEM_RESERVED) >
                          H200_SMEM_PER_SM))
              why = "keep blocks do not fit an SM as the table assumes (1024 / threads of them)";
            if (why) {
              print_message("sm_%d0 es=%d V=%lld grad=%d rows=%lld: %s (path %d cluster %d "
                            "threads %d)\n",
                            sm, es, V, grad, rows, why, l.path, l.cluster, l.threads);
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
      cmocka_unit_test(test_nograd_general),
      cmocka_unit_test(test_invariants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
