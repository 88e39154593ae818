/*
 * error.c - the per-thread message behind xent_last_error().
 */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

xent_status xent_fail(xent_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

void xent_clear_error(void) { last_error[0] = '\0'; }

const char *xent_last_error(void) { return last_error; }

const char *xent_status_string(xent_status status) {
  switch (status) {
    case XENT_OK: return "success";
    case XENT_ERROR_NULL_POINTER: return "a required pointer is NULL";
    case XENT_ERROR_BAD_SHAPE: return "bad shape (rows < 0, vocab < 1 or vocab > INT32_MAX)";
    case XENT_ERROR_BAD_STRIDE: return "bad row stride (smaller than vocab, or the extent overflows)";
    case XENT_ERROR_BAD_TARGET: return "a target is outside [0, vocab) and is not ignore_index";
    case XENT_ERROR_BAD_LABEL_SMOOTHING: return "label_smoothing is outside [0, 1]";
    case XENT_ERROR_BAD_SOFTCAP: return "softcap must be finite and > 0 when enabled";
    case XENT_ERROR_BAD_WEIGHT: return "a class weight is NaN or infinite";
    case XENT_ERROR_BAD_ENUM: return "an enum argument has an unknown value";
    case XENT_ERROR_BAD_ARGUMENT: return "bad argument";
    case XENT_ERROR_UNSUPPORTED: return "not supported by this build or machine";
    case XENT_ERROR_CUDA: return "CUDA runtime error";
    case XENT_ERROR_OUT_OF_MEMORY: return "out of memory";
  }
  return "unknown status";
}
