/* fake_cuda.h: a wt_cuda_api (wt/cuda.h) that emulates GPUs in host memory,
 * so that device stores, bounce-buffer copies and device binding are tested
 * on machines without one.
 *
 * "Device memory" is a memfd mapped twice: the address handed out is mapped
 * PROT_NONE, so any CPU access through it faults (the test crashes, under
 * ASan with a report), and the copies go through a second, writable
 * mapping. Every call that names a device checks that the calling thread
 * is bound to it, as the real module does. */
#ifndef WT_TEST_FAKE_CUDA_H
#define WT_TEST_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "wt/cuda.h"

typedef struct fake_cuda_stats {
  uint64_t device_bytes[8]; /* allocated now, per device */
  uint64_t host_bytes;      /* pinned, allocated now */
  uint64_t copies_in, copies_out;
  uint64_t largest_copy;
  uint64_t binding_errors; /* calls from a thread bound elsewhere */
  uint64_t syncs;          /* stream and event synchronisations */
  uint64_t ipc_exports;    /* handles made (ipc_export) */
  uint64_t ipc_opens;      /* handles opened */
  int64_t ipc_open_now;    /* opened and not closed */
  uint64_t copies_d2d;     /* copy_async calls */
  int64_t host_registered; /* host_register calls not yet unregistered */
  uint64_t host_registered_read_only; /* of them, read-only (ever) */
} fake_cuda_stats;

/* Streams and events: pass a pointer to an int as the cudaStream_t or
 * cudaEvent_t; synchronising waits until the test sets it to 1.
 *
 * Installs the fake with `devices` GPUs (1..8) for the whole process
 * (wt_cuda_api_override) and zeroes its counters. */
void fake_cuda_install(int devices);
/* Back to the real module (the fake's allocations must be freed by then). */
void fake_cuda_uninstall(void);
fake_cuda_stats fake_cuda_get_stats(void);
/* The device the calling thread is bound to, -1 when none. */
int fake_cuda_current(void);
/* While set, every stream created with stream_create reports its copies
 * "not done" (a copy that hangs: the caller's deadline must end it). */
void fake_cuda_hold_copies(int hold);
/* For other fakes: work queued on a stream made with stream_create (it is
 * "not done" while the count is above 0), and the writable mirror of
 * emulated device memory [ptr, ptr + len) (NULL when it is none). */
void fake_cuda_stream_busy(void *stream, int delta);
void *fake_cuda_mirror(const void *ptr, size_t len);

#endif
