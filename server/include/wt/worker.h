/* wt/worker.h: one receiver of a server: a device, the thread bound to it,
 * a param store, the engine of the backend the trainer chose, and the round
 * state machine they share.
 *
 * Thread: a worker owns one thread for its whole life, bound to its device
 * at start (for a cuda:N worker, CUDA's current device; wt/cuda.h). Every
 * operation that touches the engine or the store's round (init, start,
 * receive, the push ops, prepare, commit, abort, release, loading the
 * store) is an op (wt_worker_op) that runs on that thread, in the order it
 * was submitted. Submitting never blocks, so the server submits ops to all
 * its workers under its own lock and waits for them outside it
 * (wt_worker_wait): no engine call ever runs under a lock of the server's.
 * Only wt_worker_cancel reaches the engine from another thread.
 *
 * States (wt_worker_state_name), as the worker's thread moves through them:
 *   uninitialized --INIT--> initializing --> ready --START--> updating
 *   updating --COMMIT--> ready;  updating --ABORT--> ready, or needs_init
 *   when the engine does not survive an abort (WT_ENGINE_SURVIVES_ABORT),
 *   which also destroys it; any --RELEASE--> uninitialized; a new INIT
 *   replaces the engine from any state. An op that finds the worker in the
 *   wrong state fails with FAILED_PRECONDITION naming the worker and state;
 *   START on a needs_init worker says why it needs a new init. While an
 *   ABORT is queued or running the state reads "aborting".
 */
#ifndef WT_WORKER_H
#define WT_WORKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "wt/engine.h"
#include "wt/memory.h"
#include "wt/param_store.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef enum wt_worker_state {
  WT_WORKER_UNINITIALIZED = 0,
  WT_WORKER_INITIALIZING = 1,
  WT_WORKER_READY = 2,
  WT_WORKER_UPDATING = 3,
  WT_WORKER_ABORTING = 4,
  WT_WORKER_NEEDS_INIT = 5,
} wt_worker_state;

/* "uninitialized", "initializing", "ready", "updating", "aborting",
 * "needs_init". Static. */
const char *wt_worker_state_name(wt_worker_state state);

typedef struct wt_worker_options {
  uint32_t rank; /* within the server */
  uint32_t num_workers;
  wt_device device; /* cpu (zero) or cuda:N */
  const char *host; /* where listening engines bind; NULL: loopback */
  /* The data deadline when the init info says 0 (0: 60 s). */
  uint32_t data_timeout_ms;
  uint64_t max_message_bytes; /* the control channel's receive limit */
  wt_registry *engines;       /* where backends are found; NULL: global */
  /* Every backend's server settings ("BACKEND.KEY"), borrowed: they must
   * outlive the worker (the server's copy). */
  const wt_backend_option *engine_options;
  size_t n_engine_options;
  /* How often a ready engine is asked, between rounds, whether it must be
   * given up (its needs_reinit: strangers' connections past its cap). One
   * that must is destroyed then, which frees what the strangers held; the
   * worker still reads "ready" (health unchanged: the weights are whole)
   * until the next round's start, which needs a new init as it would have
   * found anyway. 0: WT_WORKER_ENGINE_CHECK_MS; -1: at a round's start
   * only. */
  int engine_check_ms;
} wt_worker_options;

#define WT_WORKER_ENGINE_CHECK_MS 1000

typedef struct wt_worker wt_worker;

/* Starts the worker's thread and binds it to o->device; a CUDA device
 * without CUDA, or one that does not exist, is FAILED_PRECONDITION naming
 * it. The worker has no store yet (WT_WORKER_OP_CALL loads one, then
 * wt_worker_set_store). Strings in `o` are copied. The caller owns *out and
 * releases it with wt_worker_destroy(). */
wt_status *wt_worker_new(const wt_worker_options *o, wt_worker **out);

/* Aborts a round, destroys the engine and the store on the worker's thread,
 * and ends the thread. NULL is ignored. */
void wt_worker_destroy(wt_worker *w);

/* Hands the worker `store`, which it owns from now on and destroys on its
 * thread. Only while no op runs. */
void wt_worker_set_store(wt_worker *w, wt_param_store *store);

uint32_t wt_worker_rank(const wt_worker *w);
wt_device wt_worker_device(const wt_worker *w);
/* "cpu", "cuda:0": owned by the worker. */
const char *wt_worker_device_name(const wt_worker *w);
wt_param_store *wt_worker_store(const wt_worker *w);

/* What the worker's thread last published; any thread. */
typedef struct wt_worker_status {
  wt_worker_state state;
  char backend[64];  /* "" without an engine */
  char reason[512];  /* needs_init: why; "" otherwise */
  uint64_t round_id; /* the worker's open round, 0 when none */
  /* Since the worker started: bytes its engine received (rounds that
   * failed included) and forwarded to another worker (the ucx chain). */
  uint64_t bytes_received;
  uint64_t bytes_forwarded;
} wt_worker_status;
void wt_worker_get_status(const wt_worker *w, wt_worker_status *out);

/* What the worker's engines of one backend moved since the worker started
 * (rounds that failed included): for the metrics, by backend. */
typedef struct wt_worker_totals {
  char backend[64];
  uint64_t tensors_received;
  uint64_t bytes_received;
  uint64_t bytes_forwarded;
} wt_worker_totals;
#define WT_WORKER_MAX_TOTALS 8

/* Copies up to `cap` of the worker's totals, one per backend it has run,
 * into out[] and returns how many there are (at most
 * WT_WORKER_MAX_TOTALS; later backends are added to the last). */
size_t wt_worker_get_totals(const wt_worker *w, wt_worker_totals *out,
                            size_t cap);

/* The engine's table, NULL without an engine; for the server's checks
 * (e.g. whether it has stream ops). Only between ops that replace it. */
const wt_engine_ops *wt_worker_engine_ops(const wt_worker *w);

/* From any thread: unblocks the engine's init_transfer, receive or finish
 * (wt_engine_ops.cancel). */
void wt_worker_cancel(wt_worker *w);

/* --- ops ------------------------------------------------------------------ */

typedef enum wt_worker_op_kind {
  /* Replace the engine with one of init->backend: aborts a round, destroys
   * the old engine, checks the store's memory kind against the backend's,
   * creates and runs init_transfer; fills endpoint. */
  WT_WORKER_OP_INIT,
  /* Destroy the engine (after aborting a round): uninitialized. */
  WT_WORKER_OP_RELEASE,
  /* ready -> updating in round `round_id`: the store's round and the
   * engine's start_update. */
  WT_WORKER_OP_START,
  /* The engine's receive of `update` in round `round_id`; fills stats. */
  WT_WORKER_OP_RECEIVE,
  /* The stream ops for push `push_id` of round `round_id`. A chunk whose
   * push is not the worker's current one (aborted, ended) does nothing and
   * fails with ABORTED. */
  WT_WORKER_OP_PUSH_BEGIN,
  WT_WORKER_OP_PUSH_CHUNK,
  WT_WORKER_OP_PUSH_END,
  /* Round `round_id` may commit: no partly received tensor, and the
   * engine's finish_update. Changes nothing on error (the server then
   * aborts the round). */
  WT_WORKER_OP_PREPARE,
  /* Commit round `round_id`: updating -> ready. The submitter holds the
   * store's write lock (wt_param_store_write_lock, which waits for readers)
   * until the op is done, so readers see the whole flip or none of it. */
  WT_WORKER_OP_COMMIT,
  /* Drop round `round_id` (0: whatever round is open): the engine's
   * abort_update, the store's abort; ready, or needs_init. A round that is
   * no longer open is left alone. Never fails. */
  WT_WORKER_OP_ABORT,
  /* Run fn(worker, arg) on the worker's thread (load or inspect a store). */
  WT_WORKER_OP_CALL,
} wt_worker_op_kind;

typedef struct wt_worker_op wt_worker_op;

/* One operation and its result. The submitter owns the op and everything
 * it points to until the op is done (wt_worker_wait returned, or on_done
 * ran). */
struct wt_worker_op {
  wt_worker_op_kind kind;
  uint64_t round_id;
  uint64_t push_id;
  const Wt__V1__WeightTransferInitInfo *init; /* INIT */
  wt_engine_endpoint *endpoint;               /* INIT: filled (zeroed) */
  const wt_update *update;                    /* RECEIVE, PUSH_BEGIN */
  uint32_t bucket;                            /* PUSH_CHUNK */
  uint64_t offset;
  const struct iovec *iov;
  size_t iovcnt;
  /* A delta chunk (engine push_delta): iov[0] is its zstd frame, raw_len
   * the bucket bytes it covers, base_digest their committed digest. */
  bool delta;
  uint64_t raw_len;
  uint64_t base_digest;
  bool stream_ended;      /* PUSH_END */
  const char *reason;     /* ABORT: why (copied into needs_init's reason) */
  wt_receive_stats stats; /* RECEIVE, PUSH_END: filled */
  wt_status *(*fn)(wt_worker *w, void *arg); /* CALL */
  void *arg;
  /* Detached ops: called on the worker's thread once the op ran, with its
   * status (owned by on_done); wt_worker_wait is then not used. */
  void (*on_done)(wt_worker_op *op, wt_status *st, void *user);
  void *user;

  /* The worker's: */
  wt_status *st;
  bool failed; /* it returned an error (kept after wt_worker_wait) */
  bool done;
  wt_worker_op *next;
};

/* Queues `op` on the worker's thread and returns at once. Never blocks;
 * fails only after destroy began (UNAVAILABLE). */
wt_status *wt_worker_submit(wt_worker *w, wt_worker_op *op);

/* Waits until the submitted `op` ran and returns its status (the caller
 * owns it). */
wt_status *wt_worker_wait(wt_worker *w, wt_worker_op *op);

/* Submits and waits. */
wt_status *wt_worker_run(wt_worker *w, wt_worker_op *op);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_WORKER_H */
