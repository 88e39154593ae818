/*
 * experimental.h - the calling thread's experimental settings
 * (include/xent_experimental.h), as the entry points copy them into a call.
 */
#ifndef XENT_API_EXPERIMENTAL_H
#define XENT_API_EXPERIMENTAL_H

#include "xent_experimental.h"

xent_experimental xent_experimental_current(void);

#endif
