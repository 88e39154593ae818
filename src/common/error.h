/*
 * error.h - error reporting shared by every layer: a status with a message
 * kept per thread for xent_last_error(). Below the API layer and the
 * backends, so that both report the same way without calling each other.
 */
#ifndef XENT_COMMON_ERROR_H
#define XENT_COMMON_ERROR_H

#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a message for xent_last_error() and return `status`. */
xent_status xent_fail(xent_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Forget this thread's message (every public entry point starts here). */
void xent_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
