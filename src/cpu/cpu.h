/*
 * cpu.h - the CPU backend's entry points, called by the API layer.
 */
#ifndef XENT_CPU_H
#define XENT_CPU_H

#include "common/call.h"
#include "common/linear.h"
#include "cpu/isa.h"

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
/* The x86-64 level the CPU kernels run at: 1, 3 or 4 in a portable build
 * (dispatch.c); 0 in a build for its own machine. */
int xent_cpu_level(void);

#ifdef __cplusplus
}
#endif
#endif
