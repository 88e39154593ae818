/*
 * cli.c - xent-bench's flags (--help lists them) and the points of a run.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const int64_t sweep_vocab_values[] = {32000, 50304, 102400, 128256, 152064, 201088, 262144};
static const int64_t sweep_bt_values[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};

void die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xent-bench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(run xent-bench --help for the flags)\n");
  va_end(ap);
  exit(2);
}

static void usage(void) {
  printf(
      "usage: xent-bench [flags]\n"
      "\n"
      "Times xent's fused cross-entropy on the GPU when there is one, else on the CPU.\n"
      "Without flags: fwd+grad at BT=8192, V = 32000, 128256, 262144 (GPU) or at\n"
      "4096 x 32000, 1024 x 128256 and 512 x 262144 (CPU), bf16 and fp32.\n"
      "\n"
      "  --cpu | --gpu             force the backend\n"
      "  --sweep vocab|bt|all      V in {32000 ... 262144} at BT=8192, BT in {1024 ... 65536}\n"
      "                            at V=128256; points that do not fit are skipped\n"
      "  --mode M[,M...]           forward (fwd+grad) | backward | full | forward_nograd\n"
      "                            | all (default forward; all for --quick)\n"
      "  --dtype D[,D...]          bf16 | fp32 | fp16 | all (= bf16,fp32; default all)\n"
      "  --bt N, --vocab N         a single point (the other one defaults)\n"
      "  --iters N, --warmup N     timed and warm-up iterations (default 40 and 20;\n"
      "                            --quick: 5 and 3)\n"
      "  --threads N               CPU threads (default: the library's)\n"
      "  --csv FILE                write the results as CSV\n"
      "  --quick                   tiny shapes, few iterations (a smoke test)\n"
      "  --checked                 GPU: the default checked mode (the forward waits\n"
      "                            for the device's target check) instead of\n"
      "                            XENT_TARGETS_UNCHECKED\n"
      "  --reduction mean|sum|none the loss's reduction (default mean); none writes\n"
      "                            BT losses (no finalize kernel after the forward)\n"
      "  --flush write|read        GPU: the L2 flush before each timed call writes\n"
      "                            256 MiB (default) or reads them, which leaves no\n"
      "                            dirty lines for the timed call to write back\n"
      "  --no-pdl                  GPU: launch every kernel in the ordinary way, not\n"
      "                            programmatically behind the one ahead (sm_90+)\n"
      "  --pdl N                   GPU: 0 as --no-pdl, 1 the library's rule (default),\n"
      "                            2 every launch programmatic, clustered forwards too\n"
      "  --seed N                  random inputs' seed (default 1234)\n"
      "  --help\n");
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || v < lo || v > hi)
    die_usage("%s wants an integer in [%lld, %lld], got '%s'", flag, lo, hi, s);
  return v;
}

static void parse_dtypes(config *c, const char *s) {
  c->n_dtypes = 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "all")) {
      c->dtypes[0] = XENT_BFLOAT16;
      c->dtypes[1] = XENT_FLOAT32;
      c->n_dtypes = 2;
      continue;
    }
    xent_dtype dt;
    if (!strcmp(tok, "bf16") || !strcmp(tok, "bfloat16")) dt = XENT_BFLOAT16;
    else if (!strcmp(tok, "fp32") || !strcmp(tok, "float32") || !strcmp(tok, "f32"))
      dt = XENT_FLOAT32;
    else if (!strcmp(tok, "fp16") || !strcmp(tok, "float16") || !strcmp(tok, "f16"))
      dt = XENT_FLOAT16;
    else die_usage("unknown dtype '%s'", tok);
    int dup = 0;
    for (int i = 0; i < c->n_dtypes; i++) dup |= c->dtypes[i] == dt;
    if (!dup && c->n_dtypes < MAX_DTYPES) c->dtypes[c->n_dtypes++] = dt;
  }
  if (c->n_dtypes == 0) die_usage("--dtype needs a value");
}

static void parse_modes(config *c, const char *s) {
  memset(c->modes, 0, sizeof c->modes);
  c->modes_given = 1;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  int any = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "all")) {
      for (int m = 0; m < MODE_COUNT; m++) c->modes[m] = 1;
      any = 1;
      continue;
    }
    int found = 0;
    for (int m = 0; m < MODE_COUNT; m++)
      if (!strcmp(tok, mode_names[m])) c->modes[m] = found = 1;
    if (!found) die_usage("unknown mode '%s'", tok);
    any = 1;
  }
  if (!any) die_usage("--mode needs a value");
}

void parse_args(config *c, int argc, char **argv) {
  memset(c, 0, sizeof *c);
  c->iters = c->warmup = c->pdl = -1;
  c->seed = 1234;
  c->dtypes[0] = XENT_BFLOAT16;
  c->dtypes[1] = XENT_FLOAT32;
  c->n_dtypes = 2;
  c->modes[MODE_FORWARD] = 1;
  for (int i = 1; i < argc; i++) {
    char *arg = argv[i], *val = NULL;
    char name[64];
    snprintf(name, sizeof name, "%s", arg);
    char *eq = strchr(name, '=');
    if (eq) {
      *eq = '\0';
      val = arg + (eq - name) + 1;
    }
#define NEXT_VAL()                                                      \
  do {                                                                  \
    if (!val) {                                                         \
      if (i + 1 >= argc) die_usage("%s needs a value", name);           \
      val = argv[++i];                                                  \
    }                                                                   \
  } while (0)
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
      usage();
      exit(0);
    } else if (!strcmp(name, "--cpu")) c->force_cpu = 1;
    else if (!strcmp(name, "--gpu")) c->force_gpu = 1;
    else if (!strcmp(name, "--quick")) c->quick = 1;
    else if (!strcmp(name, "--checked")) c->checked = 1;
    else if (!strcmp(name, "--no-pdl")) c->pdl = 0;
    else if (!strcmp(name, "--pdl")) {
      NEXT_VAL();
      c->pdl = (int)parse_int(name, val, 0, 2);
    }
    else if (!strcmp(name, "--reduction")) {
      NEXT_VAL();
      if (!strcmp(val, "mean")) c->reduction = XENT_REDUCTION_MEAN;
      else if (!strcmp(val, "sum")) c->reduction = XENT_REDUCTION_SUM;
      else if (!strcmp(val, "none")) c->reduction = XENT_REDUCTION_NONE;
      else die_usage("--reduction wants mean, sum or none, got '%s'", val);
    }
    else if (!strcmp(name, "--flush")) {
      NEXT_VAL();
      if (!strcmp(val, "write")) c->flush_read = 0;
      else if (!strcmp(val, "read")) c->flush_read = 1;
      else die_usage("--flush wants write or read, got '%s'", val);
    }
    else if (!strcmp(name, "--sweep")) {
      NEXT_VAL();
      if (!strcmp(val, "vocab")) c->sweep_vocab = 1;
      else if (!strcmp(val, "bt")) c->sweep_bt = 1;
      else if (!strcmp(val, "all")) c->sweep_vocab = c->sweep_bt = 1;
      else die_usage("--sweep wants vocab, bt or all, got '%s'", val);
    } else if (!strcmp(name, "--mode")) {
      NEXT_VAL();
      parse_modes(c, val);
    } else if (!strcmp(name, "--dtype")) {
      NEXT_VAL();
      parse_dtypes(c, val);
    } else if (!strcmp(name, "--bt")) {
      NEXT_VAL();
      c->bt = parse_int(name, val, 1, (long long)1 << 40);
    } else if (!strcmp(name, "--vocab")) {
      NEXT_VAL();
      c->vocab = parse_int(name, val, 1, INT32_MAX);
    } else if (!strcmp(name, "--iters")) {
      NEXT_VAL();
      c->iters = (int)parse_int(name, val, 1, 100000);
    } else if (!strcmp(name, "--warmup")) {
      NEXT_VAL();
      c->warmup = (int)parse_int(name, val, 0, 100000);
    } else if (!strcmp(name, "--threads")) {
      NEXT_VAL();
      c->threads = (int)parse_int(name, val, 0, 4096);
    } else if (!strcmp(name, "--csv")) {
      NEXT_VAL();
      c->csv_path = val;
    } else if (!strcmp(name, "--seed")) {
      NEXT_VAL();
      c->seed = (uint64_t)parse_int(name, val, 0, INT64_MAX);
    } else {
      die_usage("unknown flag '%s'", arg);
    }
#undef NEXT_VAL
  }
  if (c->force_cpu && c->force_gpu) die_usage("--cpu and --gpu exclude each other");
  if (c->quick && !c->modes_given)
    for (int m = 0; m < MODE_COUNT; m++) c->modes[m] = 1;
}

/* The points of this run, in order. */
int build_points(const config *c, int gpu, point *pts) {
  int n = 0;
  if (c->quick) {
    const int64_t qv[] = {1000, 4099, 32000};
    for (int i = 0; i < 3; i++) pts[n++] = (point){gpu ? 256 : 64, qv[i], "V"};
    return n;
  }
  if (c->sweep_vocab)
    for (size_t i = 0; i < sizeof sweep_vocab_values / sizeof *sweep_vocab_values; i++)
      pts[n++] = (point){c->bt ? c->bt : 8192, sweep_vocab_values[i], "V"};
  if (c->sweep_bt)
    for (size_t i = 0; i < sizeof sweep_bt_values / sizeof *sweep_bt_values; i++)
      pts[n++] = (point){sweep_bt_values[i], c->vocab ? c->vocab : 128256, "BT"};
  if (n) return n;
  if (c->bt || c->vocab) {
    pts[n++] = (point){c->bt ? c->bt : (gpu ? 8192 : 4096), c->vocab ? c->vocab : (gpu ? 128256 : 32000), "V"};
    return n;
  }
  if (gpu) {
    const int64_t dv[] = {32000, 128256, 262144};
    for (int i = 0; i < 3; i++) pts[n++] = (point){8192, dv[i], "V"};
  } else { /* about 131 M elements each */
    pts[n++] = (point){4096, 32000, "V"};
    pts[n++] = (point){1024, 128256, "V"};
    pts[n++] = (point){512, 262144, "V"};
  }
  return n;
}
