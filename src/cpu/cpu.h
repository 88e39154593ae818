/*
 * cpu.h - the CPU backend's entry points, called by the API layer.
 */
#ifndef XENT_CPU_H
#define XENT_CPU_H

#include "common/call.h"
#include "common/linear.h"

#ifdef __cplusplus
extern "C" {
#endif

xent_status xent_cpu_forward(const xent_call *c);
xent_status xent_cpu_backward(const xent_scale_call *c);
xent_status xent_cpu_linear(const xent_linear_call *c);
xent_status xent_cpu_vp_stats(const xent_vp_call *v);
xent_status xent_cpu_vp_forward(const xent_vp_call *v);
/* Threads a call with num_threads 0 uses. */
int xent_cpu_default_threads(void);

#ifdef __cplusplus
}
#endif
#endif
