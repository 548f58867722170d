/* wt/nccl_seam.h: wt's seam to NCCL (the `nccl` backend's logic is
 * backends/nccl/nccl_shared.h).
 *
 * The seam: the few NCCL calls wt makes (unique id, a non-blocking
 * communicator's init, its asynchronous state, abort, destroy, broadcast,
 * the warm-up all-reduce) sit in one table, wt_nccl_api, implemented by the
 * module libwt_nccl.so (common/src/nccl_module.c, built where CMake finds
 * NCCL: WT_WITH_NCCL) and loaded with dlopen the first time wt needs it, as
 * the CUDA module is (wt/cuda.h). So wt-server and libwt_client build,
 * start and serve where NCCL is missing, and asking for it says why. Tests
 * replace the table (wt_nccl_api_override) with one that emulates
 * communicators between threads of one process (tests/support/fake_nccl.h).
 *
 * Communicators are always non-blocking (ncclCommInitRankConfig with
 * config.blocking = 0): every call returns at once, and wt_nccl_wait polls
 * ncclCommGetAsyncError and cudaStreamQuery against the wait's deadline, so
 * no NCCL wait in wt is without one. On a deadline, a cancel or an error
 * the waiter aborts the communicator (ncclCommAbort, from the thread that
 * owns it, with no other NCCL call in flight): it cannot be used again.
 */
#ifndef WT_NCCL_SEAM_H
#define WT_NCCL_SEAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/cuda.h"
#include "wt/nccl.h"
#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

#define WT_NCCL_API_VERSION 1u
/* sizeof(ncclUniqueId) */
#define WT_NCCL_UNIQUE_ID_BYTES 128

typedef struct wt_nccl_api {
  uint32_t version; /* WT_NCCL_API_VERSION */
  const char *name; /* "NCCL 2.28.9", "fake" */
  /* ncclGetVersion's code (22809 for 2.28.9). */
  int (*version_code)(void);
  wt_status *(*get_unique_id)(unsigned char id[WT_NCCL_UNIQUE_ID_BYTES]);
  /* Starts joining communicator `id` as `rank` of `nranks` on the calling
   * thread's device, non-blocking: *comm is valid at once, the init
   * completes while comm_state says pending. */
  wt_status *(*comm_init)(int nranks,
                          const unsigned char id[WT_NCCL_UNIQUE_ID_BYTES],
                          int rank, void **comm);
  /* ncclCommGetAsyncError: *pending true while an operation (the init, a
   * finalize) is in progress; an error the communicator hit is returned. */
  wt_status *(*comm_state)(void *comm, int *pending);
  /* ncclCommAbort: ends everything in flight; comm is gone after it. */
  void (*comm_abort)(void *comm);
  /* ncclCommDestroy of a communicator with nothing in flight (the caller
   * waited for it); comm is gone after it. */
  void (*comm_destroy)(void *comm);
  /* ncclBroadcast of `bytes` uint8 from `root` on `stream`: `send` is read
   * on the root, `recv` written on every rank (recv == send on the root is
   * allowed, as NCCL's in-place broadcast). */
  wt_status *(*broadcast)(const void *send, void *recv, size_t bytes, int root,
                          void *comm, void *stream);
  /* ncclAllReduce of `count` float32, ncclSum, on `stream`. */
  wt_status *(*all_reduce_f32)(const void *send, void *recv, size_t count,
                               void *comm, void *stream);
} wt_nccl_api;

/* The process's table: the override if set, else the module, loaded on
 * first use. FAILED_PRECONDITION saying why when neither is available. */
wt_status *wt_nccl_api_get(const wt_nccl_api **out);
/* Replaces the table for the whole process (tests); NULL: the module. */
void wt_nccl_api_override(const wt_nccl_api *api);
/* wt_nccl_select, choosing the process's NCCL, is public: wt/nccl.h. */
/* "2.27.3" -> 22703 (ncclGetVersion's code); INVALID_ARGUMENT naming the
 * text otherwise. */
wt_status *wt_nccl_version_parse(const char *text, int *code);

/* What the module exports, under the symbol "wt_nccl_module_api". */
typedef const wt_nccl_api *(*wt_nccl_module_fn)(void);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_NCCL_SEAM_H */
