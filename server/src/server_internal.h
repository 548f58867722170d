/* server_internal.h: what server.c (lifecycle), round.c (the round state
 * machine across workers) and service.c (the RPC handlers) share. Not
 * installed; nothing here is part of libwt_server's API.
 *
 * Locking: `mu` guards every field below it; it is held only for short,
 * non-blocking work. Blocking work (an engine's init_transfer or receive, a
 * chunk's copies, a stream read or write, checksums) runs without it, under
 * a count (`receivers`, `writers`) that an abort waits to drain, so that an
 * abort never frees what a running copy writes into. A store's rwlock is
 * never taken while holding mu (a checksum holds it for seconds and takes mu
 * inside; a finish takes the write locks first, then mu).
 */
#ifndef WT_SERVER_INTERNAL_H
#define WT_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "wt/engine.h"
#include "wt/rpc.h"
#include "wt/server.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/worker.h"

#define WT_HIDDEN __attribute__((visibility("hidden")))

/* Commits a watcher can still catch up on after falling behind. */
#define WT_VERSION_HISTORY 64
/* The longest weight_version a round may commit. */
#define WT_MAX_VERSION_BYTES 4096

typedef struct wt_version_entry {
  char *version;
  uint64_t sequence;
  int64_t committed_unix_ms;
} wt_version_entry;

struct wt_server {
  /* Fixed after start. */
  char *listen;
  char *host;
  char *model_name;
  wt_staging staging;
  uint32_t round_timeout_ms;
  uint32_t engine_timeout_ms;
  int64_t drain_ms;
  wt_registry *engines; /* never NULL after start */
  uint32_t nworkers;
  wt_worker **workers;
  wt_rpc_server *rpc;
  pthread_t watchdog;
  bool watchdog_started;

  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast on every change below */

  bool stopping;     /* shutdown began: no new work */
  bool initialized;  /* every worker has an engine */
  bool initializing; /* an InitWeightTransferEngine is running */
  char backend[64];

  uint64_t last_round_id;
  uint64_t round_id;  /* the open round, 0 when none */
  bool aborting;      /* an abort is draining the round */
  char *abort_reason; /* why the last round was aborted */
  uint64_t aborted_round;
  int64_t last_activity_ms;

  /* The data call in progress in the open round: at most one. */
  /* "PushWeights" / "UpdateWeights" / "FinishWeightUpdate", NULL if none */
  const char *busy;
  uint64_t push_id; /* the active push (0: none); bumped per push */
  /* The active push's call, which an abort ends (its handler may be blocked
   * reading a client gone quiet); valid while push_id is that push's. */
  wt_rpc_call *push_call;
  uint64_t next_push_id;
  int receivers; /* workers inside receive */
  int writers;   /* chunks being copied; a finish waiting for readers */

  /* Committed versions. */
  uint64_t sequence;
  wt_version_entry history[WT_VERSION_HISTORY]; /* by sequence % size */
};

/* Monotonic milliseconds. */
WT_HIDDEN int64_t wt_srv_now_ms(void);
/* Wall-clock milliseconds since the epoch. */
WT_HIDDEN int64_t wt_srv_unix_ms(void);

/* "uninitialized", "ready", "updating" for the server as a whole; under mu. */
WT_HIDDEN const char *wt_srv_state_locked(const wt_server *srv);

/* --- round.c ---------------------------------------------------------------
 */

/* A validated update (see wt_update), with its arrays. */
typedef struct wt_srv_resolved {
  wt_update u;
  size_t *index;
  uint64_t *nbytes;
} wt_srv_resolved;

WT_HIDDEN void wt_srv_resolved_clear(wt_srv_resolved *r);

/* Validates `info` against the model (worker 0's store): equal list
 * lengths, names in the model, no duplicates, dtypes and shapes (and stated
 * packed sizes) equal the model's. Fills *out (cleared with
 * wt_srv_resolved_clear). INVALID_ARGUMENT naming the parameter and the
 * difference. */
WT_HIDDEN wt_status *wt_srv_resolve_update(
    wt_server *srv, const Wt__V1__WeightTransferUpdateInfo *info,
    wt_srv_resolved *out);

/* InitWeightTransferEngine on every worker (in parallel). The endpoints
 * array (nworkers entries) is filled; the caller frees each
 * worker_address. */
WT_HIDDEN wt_status *wt_srv_init_engine(
    wt_server *srv, const Wt__V1__WeightTransferInitInfo *init,
    wt_engine_endpoint *endpoints);

WT_HIDDEN wt_status *wt_srv_start(wt_server *srv, uint64_t *round_id);

/* UpdateWeights: validates, then runs receive on every worker in
 * parallel. */
WT_HIDDEN wt_status *wt_srv_update(wt_server *srv, uint64_t round_id,
                                   const Wt__V1__WeightTransferUpdateInfo *info,
                                   wt_receive_stats *stats);

/* PushWeights: begin (header), chunk (data), end (the stream ended or
 * broke). begin sets *push_id, which the other two take; `call` is the
 * PushWeights call, which an abort of the round cancels until end. */
WT_HIDDEN wt_status *wt_srv_push_begin(
    wt_server *srv, wt_rpc_call *call, uint64_t round_id,
    const Wt__V1__WeightTransferUpdateInfo *info, uint64_t packed_buffer_bytes,
    uint64_t *push_id);
WT_HIDDEN wt_status *wt_srv_push_chunk(wt_server *srv, uint64_t push_id,
                                       uint32_t bucket, uint64_t offset,
                                       const struct iovec *iov, size_t iovcnt);
WT_HIDDEN wt_status *wt_srv_push_end(wt_server *srv, uint64_t push_id,
                                     bool stream_ended,
                                     wt_receive_stats *stats);

WT_HIDDEN wt_status *wt_srv_finish(wt_server *srv, uint64_t round_id,
                                   const char *version);

/* AbortWeightUpdate: *aborted false when no round was open. */
WT_HIDDEN wt_status *wt_srv_abort(wt_server *srv, uint64_t round_id,
                                  const char *reason, bool *aborted);

/* Aborts the open round (if any) for `reason`; waits for running copies and
 * receives to stop. Called with mu held; may release it while waiting. */
WT_HIDDEN void wt_srv_abort_round_locked(wt_server *srv, const char *reason);

/* --- service.c -------------------------------------------------------------
 */

/* The method table of wt.v1.WeightTransfer. */
WT_HIDDEN const wt_rpc_method *wt_srv_methods(size_t *n);

#endif /* WT_SERVER_INTERNAL_H */
