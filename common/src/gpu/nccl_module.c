/* nccl_module.c: libwt_nccl.so, the module that implements wt/nccl_seam.h's
 * table with NCCL. The only object that links NCCL; libwt_common loads it
 * with dlopen on first use. Every communicator is non-blocking. */

#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "wt/nccl_seam.h"

_Static_assert(sizeof(ncclUniqueId) == WT_NCCL_UNIQUE_ID_BYTES,
               "ncclUniqueId is not 128 bytes");

static wt_status *nccl_error(ncclResult_t r, const char *call) {
  const char *last = ncclGetLastError(NULL);
  wt_code code = r == ncclInvalidArgument || r == ncclInvalidUsage
                     ? WT_INVALID_ARGUMENT
                 : r == ncclSystemError || r == ncclRemoteError ? WT_UNAVAILABLE
                                                                : WT_INTERNAL;
  return wt_status_new(code, "%s: %s%s%s", call, ncclGetErrorString(r),
                       last && *last ? ": " : "", last ? last : "");
}

/* A non-blocking call that returned ncclInProgress has started. */
static wt_status *check(ncclResult_t r, const char *call) {
  return r == ncclSuccess || r == ncclInProgress ? NULL : nccl_error(r, call);
}

static int m_version_code(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

static wt_status *m_get_unique_id(unsigned char id[WT_NCCL_UNIQUE_ID_BYTES]) {
  ncclUniqueId u;
  wt_status *st = check(ncclGetUniqueId(&u), "ncclGetUniqueId");
  if (st == NULL) memcpy(id, u.internal, WT_NCCL_UNIQUE_ID_BYTES);
  return st;
}

static wt_status *m_comm_init(int nranks,
                              const unsigned char id[WT_NCCL_UNIQUE_ID_BYTES],
                              int rank, void **comm) {
  ncclUniqueId u;
  memcpy(u.internal, id, WT_NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = NULL;
  wt_status *st = check(ncclCommInitRankConfig(&c, nranks, u, rank, &config),
                        "ncclCommInitRankConfig");
  if (st != NULL && c != NULL) ncclCommAbort(c);
  *comm = st == NULL ? c : NULL;
  return st;
}

static wt_status *m_comm_state(void *comm, int *pending) {
  ncclResult_t async = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)comm, &async);
  *pending = 0;
  if (r != ncclSuccess) return nccl_error(r, "ncclCommGetAsyncError");
  if (async == ncclInProgress) {
    *pending = 1;
    return NULL;
  }
  return async == ncclSuccess ? NULL : nccl_error(async, "the communicator");
}

static void m_comm_abort(void *comm) {
  if (comm != NULL) (void)ncclCommAbort((ncclComm_t)comm);
}

/* Finalize (non-blocking: polled, for at most 5 s), then destroy; a
 * communicator that does not finalize in time is aborted instead. */
static void m_comm_destroy(void *comm) {
  if (comm == NULL) return;
  ncclComm_t c = (ncclComm_t)comm;
  ncclResult_t r = ncclCommFinalize(c), async = ncclInProgress;
  for (int i = 0; i < 100000 && (r == ncclSuccess || r == ncclInProgress);
       i++) {
    if (ncclCommGetAsyncError(c, &async) != ncclSuccess ||
        async != ncclInProgress)
      break;
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && async == ncclSuccess)
    (void)ncclCommDestroy(c);
  else
    (void)ncclCommAbort(c);
}

static wt_status *m_broadcast(const void *send, void *recv, size_t bytes,
                              int root, void *comm, void *stream) {
  return check(ncclBroadcast(send, recv, bytes, ncclUint8, root,
                             (ncclComm_t)comm, (cudaStream_t)stream),
               "ncclBroadcast");
}

static wt_status *m_all_reduce_f32(const void *send, void *recv, size_t count,
                                   void *comm, void *stream) {
  return check(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum,
                             (ncclComm_t)comm, (cudaStream_t)stream),
               "ncclAllReduce");
}

static char name[32];

static const wt_nccl_api api = {
    .version = WT_NCCL_API_VERSION,
    .name = name,
    .version_code = m_version_code,
    .get_unique_id = m_get_unique_id,
    .comm_init = m_comm_init,
    .comm_state = m_comm_state,
    .comm_abort = m_comm_abort,
    .comm_destroy = m_comm_destroy,
    .broadcast = m_broadcast,
    .all_reduce_f32 = m_all_reduce_f32,
};

const wt_nccl_api *wt_nccl_module_api(void);
const wt_nccl_api *wt_nccl_module_api(void) {
  int v = m_version_code();
  snprintf(name, sizeof(name), "NCCL %d.%d.%d", v / 10000, v / 100 % 100,
           v % 100);
  return &api;
}
