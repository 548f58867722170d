/* nccl_shared.c: the nccl backend's logic that needs no GPU
 * (backends/nccl/nccl_shared.h). */

#include "backends/nccl/nccl_shared.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/clock.h"
#include "wt/init_info.h"
#include "wt/log.h"

/* --- init info ------------------------------------------------------------ */

wt_status *wt_nccl_check_init(const Wt__V1__WeightTransferInitInfo *init,
                              uint32_t nworkers, wt_nccl_settings *out) {
  memset(out, 0, sizeof(*out));
  const Wt__V1__NcclInitInfo *x =
      init != NULL && init->backend_init_case ==
                          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL
          ? init->nccl
          : NULL;
  if (x == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.nccl is missing: the nccl backend needs "
                         "the trainer's nccl_unique_id");
  if (x->nccl_unique_id.len != WT_NCCL_UNIQUE_ID_BYTES)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.nccl.nccl_unique_id is %zu bytes; an "
                         "ncclUniqueId is %d",
                         x->nccl_unique_id.len, WT_NCCL_UNIQUE_ID_BYTES);
  memcpy(out->unique_id, x->nccl_unique_id.data, WT_NCCL_UNIQUE_ID_BYTES);
  out->world_size = init->world_size;
  out->rank_offset = init->rank_offset;
  if (out->world_size < 2)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.world_size is %" PRIu32
                         "; the trainer (rank 0) and at least one worker "
                         "make 2",
                         out->world_size);
  if (out->world_size > WT_NCCL_MAX_WORLD)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.world_size is %" PRIu32 "; at most %u",
                         out->world_size, WT_NCCL_MAX_WORLD);
  wt_status *ranks = wt_init_info_check_ranks(init, nworkers);
  if (ranks != NULL) return ranks;
  out->packed = x->packed;
  return wt_nccl_packing(x, &out->buffer_bytes, &out->num_buffers);
}

/* --- schedule ------------------------------------------------------------- */

wt_status *wt_nccl_schedule(const wt_pack_plan *plan, uint32_t num_buffers,
                            wt_nccl_step **out) {
  *out = NULL;
  if (num_buffers == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "num_buffers is 0");
  wt_nccl_step *s = calloc(plan->nbuckets ? plan->nbuckets : 1, sizeof(*s));
  if (s == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "out of memory for a schedule of %zu buckets",
                         plan->nbuckets);
  for (size_t b = 0; b < plan->nbuckets; b++) {
    s[b].bucket = b;
    s[b].buffer = (uint32_t)(b % num_buffers);
    s[b].waits = b >= num_buffers;
    s[b].after = s[b].waits ? b - num_buffers : 0;
  }
  *out = s;
  return NULL;
}

/* --- waits ---------------------------------------------------------------- */

wt_status *wt_nccl_wait(const wt_nccl_api *nccl, const wt_cuda_api *cuda,
                        void **comm, void *stream, int64_t deadline_ms,
                        const atomic_bool *cancel, const char *what) {
  int64_t start = wt_mono_ms();
  wt_status *st = NULL;
  for (;;) {
    int pending = 0, done = 1;
    st = nccl->comm_state(*comm, &pending);
    if (st != NULL) {
      st = wt_status_prefix(st, "%s", what);
      break;
    }
    if (!pending && stream != NULL) {
      st = cuda->stream_query(stream, &done);
      if (st != NULL) {
        st = wt_status_prefix(st, "%s", what);
        break;
      }
    }
    if (!pending && done) return NULL;
    if (cancel != NULL && atomic_load(cancel)) {
      st = wt_status_new(WT_CANCELLED, "%s: cancelled", what);
      break;
    }
    if (wt_mono_ms() >= deadline_ms) {
      st = wt_status_new(WT_DEADLINE_EXCEEDED,
                         "%s: no progress within %" PRId64
                         " ms (a peer is gone, stopped, or never came)",
                         what, deadline_ms - start);
      break;
    }
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
  }
  /* Nothing of this communicator can be trusted to end by itself. */
  nccl->comm_abort(*comm);
  *comm = NULL;
  return wt_status_prefix(st, "communicator aborted");
}

/* --- one rank ---------------------------------------------------------------
 */

wt_status *wt_nccl_rank_open(wt_nccl_rank *r, wt_device device,
                             uint32_t nstreams, const char *where,
                             const char *again_hint) {
  wt_status *st = NULL;
  atomic_init(&r->cancelled, false);
  r->device = device;
  r->again_hint = again_hint;
  snprintf(r->where, sizeof(r->where), "%s", where);
  WT_CHECK(wt_status_prefix(wt_cuda_api_get(&r->cuda), "%s", r->where));
  WT_CHECK(wt_status_prefix(wt_nccl_api_get(&r->nccl), "%s", r->where));
  if (r->cuda->version < 2 || r->cuda->stream_query == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "%s: the CUDA module (%s) has no asynchronous calls", r->where,
            r->cuda->name);
  if (nstreams > WT_NCCL_MAX_BUFFERS) nstreams = WT_NCCL_MAX_BUFFERS;
  for (uint32_t i = 0; i < nstreams; i++) {
    WT_CHECK(wt_status_prefix(
        r->cuda->stream_create(device.index, &r->streams[i]), "%s", r->where));
    r->nstreams = i + 1;
  }
  WT_CHECK(wt_mem_alloc(WT_MEM_DEVICE, device, sizeof(float), "nccl warm-up",
                        &r->one));
out:
  if (st != NULL) wt_nccl_rank_close(r);
  return st;
}

wt_status *wt_nccl_rank_wait(wt_nccl_rank *r, void *stream, int64_t timeout_ms,
                             const char *fmt, ...) {
  if (r->comm == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: the communicator was aborted; %s", r->where,
                         r->again_hint);
  char what[384];
  int n = snprintf(what, sizeof(what), "%s: ", r->where);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what + n, sizeof(what) - (size_t)n, fmt, ap);
  va_end(ap);
  return wt_nccl_wait(r->nccl, r->cuda, &r->comm, stream,
                      wt_mono_ms() + timeout_ms, &r->cancelled, what);
}

wt_status *wt_nccl_rank_join(wt_nccl_rank *r,
                             const unsigned char id[WT_NCCL_UNIQUE_ID_BYTES],
                             uint32_t world, int rank, int64_t timeout_ms,
                             const char *join_what) {
  wt_status *st = NULL;
  WT_CHECK(wt_status_prefix(r->nccl->comm_init((int)world, id, rank, &r->comm),
                            "%s", r->where));
  WT_CHECK(wt_nccl_rank_wait(r, NULL, timeout_ms, "%s", join_what));
  /* vLLM's warm-up, before any other collective. */
  WT_CHECK(wt_status_prefix(r->nccl->all_reduce_f32(r->one.base, r->one.base, 1,
                                                    r->comm, r->streams[0]),
                            "%s: warm-up all-reduce", r->where));
  WT_CHECK(
      wt_nccl_rank_wait(r, r->streams[0], timeout_ms, "warm-up all-reduce"));
out:
  return st;
}

static void free_buffers(wt_nccl_rank *r) {
  for (uint32_t i = 0; i < WT_NCCL_MAX_BUFFERS; i++)
    if (r->bufs[i].len) wt_mem_free(&r->bufs[i]);
  r->buf_bytes = 0;
  r->nbufs = 0;
}

wt_status *wt_nccl_rank_buffers(wt_nccl_rank *r, uint32_t n, uint64_t bytes,
                                const char *what) {
  if (n > WT_NCCL_MAX_BUFFERS) n = WT_NCCL_MAX_BUFFERS;
  if (r->buf_bytes >= bytes && r->nbufs >= n) return NULL;
  free_buffers(r);
  for (uint32_t i = 0; i < n; i++) {
    wt_status *st = wt_mem_alloc(WT_MEM_DEVICE, r->device, bytes ? bytes : 1,
                                 what, &r->bufs[i]);
    if (st != NULL) {
      free_buffers(r);
      return wt_status_prefix(st, "%s", r->where);
    }
  }
  r->buf_bytes = bytes;
  r->nbufs = n;
  return NULL;
}

void wt_nccl_rank_abort(wt_nccl_rank *r) {
  if (r->comm != NULL) {
    r->nccl->comm_abort(r->comm);
    r->comm = NULL;
  }
}

void wt_nccl_rank_close(wt_nccl_rank *r) {
  if (r->comm != NULL) {
    r->nccl->comm_destroy(r->comm);
    r->comm = NULL;
  }
  free_buffers(r);
  if (r->one.len) wt_mem_free(&r->one);
  for (uint32_t i = 0; i < WT_NCCL_MAX_BUFFERS; i++)
    if (r->streams[i] != NULL) {
      r->cuda->stream_destroy(r->streams[i]);
      r->streams[i] = NULL;
    }
  r->nstreams = 0;
}
