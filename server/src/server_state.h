/* server_state.h: a server's state, one sub-struct per subsystem with
 * its lock (struct wt_server below), and what the server's files offer
 * each other, grouped by the file that defines it. slot.c starts and
 * stops the subsystems of one served model, server.c those of the process
 * around it; every other file of server/src works on one of them. Not
 * installed; nothing here is part of libwt_server's API.
 *
 * Locking: the round's `mu` (round.mu) guards the round state and the
 * metrics' figures, and is only ever held for short, non-blocking work: no
 * engine call, no wait for a worker, no store lock and no network I/O runs
 * under it. Work for the workers is submitted under it (wt_worker_submit
 * never blocks, so every worker sees the ops of the server in the same
 * order) and waited for outside it; a call that waits for its ops marks
 * the round `busy` meanwhile. An abort only signals (cancels engines and
 * the push stream, queues ABORT ops) and returns at once: ops after it run
 * once the workers have aborted. Lock order: watch.mu or health.mu, then
 * round.mu, then a worker's own lock; readers.mu is taken alone.
 */
#ifndef WT_SERVER_STATE_H
#define WT_SERVER_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "wt/checksum.h"
#include "wt/clock.h"
#include "wt/engine.h"
#include "wt/rpc.h"
#include "wt/server.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/worker.h"

#include "wt/visibility.h"
#include "wt/lock.h"

/* Commits a watcher can still catch up on after falling behind. */
#define WT_VERSION_HISTORY 64
/* The longest weight_version a round may commit. */
#define WT_MAX_VERSION_BYTES 4096

typedef struct wt_version_entry {
  char *version;
  uint64_t sequence;
  int64_t committed_unix_ms;
} wt_version_entry;

/* Admission classes of the service (wt/rpc.h), by index. */
enum {
  WT_CLASS_ROUND = WT_SERVER_CLASS_ROUND,
  WT_CLASS_READER = WT_SERVER_CLASS_READER,
  WT_CLASS_WATCH = WT_SERVER_CLASS_WATCH,
  WT_CLASS_HEALTH = 3,     /* Health.Check: probes never wait behind readers */
  WT_CLASS_REFLECTION = 4, /* reflection streams hold a thread each */
  /* Health.Watch: public streams, apart from the readers' watches, so
   * token-less peers cannot take a reader's place (trust row 6). */
  WT_CLASS_HEALTH_WATCH = 5,
  WT_NCLASSES = 6
};

/* Why a round ended without a commit (metrics.c names them). */
typedef enum wt_srv_cause {
  WT_CAUSE_TRAINER_ABORT, /* AbortWeightUpdate */
  WT_CAUSE_REINIT,        /* a new InitWeightTransferEngine */
  WT_CAUSE_START,         /* StartWeightUpdate failed on a worker */
  WT_CAUSE_RECEIVE,       /* UpdateWeights or PushWeights failed */
  WT_CAUSE_FINISH,        /* FinishWeightUpdate's prepare failed */
  WT_CAUSE_TIMEOUT,       /* idle past the round timeout */
  WT_CAUSE_SHUTDOWN,      /* the server stopped */
  WT_CAUSE_COUNT
} wt_srv_cause;

/* Round durations (start to commit) are counted into these upper bounds,
 * in seconds, and one more for +Inf. */
#define WT_METRICS_BUCKETS 12

/* A round that ended, as GetServerInfo's recent_rounds lists it. */
typedef struct wt_srv_round_record {
  bool committed;
  wt_srv_cause cause; /* failed rounds */
  char *version;      /* committed rounds; malloc'd */
  uint64_t sequence;
  int64_t started_unix_ms, ended_unix_ms;
  uint64_t bytes; /* received by every worker in the round */
} wt_srv_round_record;
#define WT_RECENT_ROUNDS 16

/* What the metrics and monitors report of rounds; under the server's mu. */
typedef struct wt_srv_round_metrics {
  uint64_t committed;
  uint64_t failed[WT_CAUSE_COUNT];
  uint64_t duration_counts[WT_METRICS_BUCKETS + 1];
  double duration_sum_s;
  int64_t started_ms;      /* the open round's start */
  int64_t started_unix_ms; /* the same, on the wall clock */
  uint64_t *base_bytes;    /* each worker's bytes_received at that start */
  wt_srv_round_record recent[WT_RECENT_ROUNDS]; /* a ring, by `ended` */
  uint64_t ended;                               /* rounds recorded */
} wt_srv_round_metrics;

typedef struct wt_watcher wt_watcher;
typedef struct wt_health_watcher wt_health_watcher;

/* Fixed after wt_server_start (server.c); read without a lock. */
typedef struct wt_srv_config {
  char *listen;
  char *host;
  char *model_name;
  /* Backends' settings ("BACKEND.KEY"), copied at start: keys and values
   * are each one malloc'd string, freed with the array. */
  wt_backend_option *engine_options;
  size_t n_engine_options;
  wt_staging staging;
  wt_mem_kind memory;
  const wt_store_embedding *embed; /* the embedding engine's (borrowed) */
  uint32_t round_timeout_ms;
  /* The data deadline when an init info gives none (--engine-timeout). */
  uint32_t data_timeout_ms;
  uint32_t header_timeout_ms;
  int64_t drain_ms;
  int64_t health_grace_ms; /* how long NOT_SERVING shows before the drain */
  uint64_t max_send_bytes; /* the largest reply gRPC will send */
  int64_t started_unix_ms;
  wt_registry *engines; /* never NULL after start */
  /* What an adapter set's server (adapters.c) is made with: the start's
   * options after their defaults, with export_path and the export's uid
   * and gid lists owned (freed with the config) and every other pointer
   * NULL. */
  wt_server_options slot;
} wt_srv_config;

/* The LoRA adapter sets held beside the model (adapters.c, docs/lora.md),
 * under `mu`, which is taken alone or before a set's own locks (never
 * while a set's server starts or stops). Sets are
 * created by their first init and live until the server stops. */
typedef struct wt_srv_adapters {
  wt_mutex mu;
  wt_mutex create_mu; /* one set made at a time, taken before mu */
  struct wt_srv_adapter **list;
  size_t n;
  uint64_t bytes; /* every set's bytes, per worker */
  bool stopping;
} wt_srv_adapters;

/* The bearer tokens (server.c, at start), which the RPC server checks. */
typedef struct wt_srv_auth {
  wt_token *tokens; /* the --token-file's or generated */
  size_t ntokens;
  const char *mode; /* "tokens", "generated" or "none" (ServerInfo) */
  char *token_dir;  /* generated: the runtime directory */
  char *token_path; /* generated: the file written, removed at stop */
} wt_srv_auth;

/* The export (export.c) and its consumers' leases (leases.c); handle and
 * leases NULL without --export. */
typedef struct wt_srv_export {
  struct wt_export *handle;
  struct wt_leases *leases;
  uint32_t lease_wait_ms;
  char *path;
} wt_srv_export;

/* Readers' hashing: the low-priority threads that do it (hash_pool.c) and
 * the budgets per peer (reader_budget.c), under their own `mu`. */
typedef struct wt_srv_readers {
  struct wt_hash_pool *hashers;
  wt_mutex mu;
  struct wt_reader_budget *budgets;
  uint64_t bytes_per_sec;
} wt_srv_readers;

/* Open WatchWeightVersion streams (watch.c), under `mu` (taken before the
 * round's mu). */
typedef struct wt_srv_watch {
  wt_mutex mu;
  wt_watcher *list;
  size_t n;
} wt_srv_watch;

/* Health.Watch streams (health.c), under `mu` (taken before the round's
 * mu); `down` (NOT_SERVING before the drain) under the round's mu. */
typedef struct wt_srv_health {
  wt_mutex mu;
  wt_health_watcher *watchers;
  bool down;
} wt_srv_health;

/* Metrics (metrics.c): the rounds' figures (under the round's mu) and the
 * HTTP endpoint (--metrics-listen; NULL without). */
typedef struct wt_srv_metrics {
  wt_srv_round_metrics rounds;
  struct wt_metrics_http *http;
} wt_srv_metrics;

/* The round state machine (round.c, push.c), under `mu`; `cv` is
 * broadcast on every change. */
typedef struct wt_srv_round {
  wt_mutex mu;
  pthread_cond_t cv; /* on the monotonic clock (wt_cond_init_monotonic) */

  bool stopping;     /* shutdown began: no new work */
  bool initialized;  /* every worker has an engine */
  bool initializing; /* an InitWeightTransferEngine is running */
  char backend[64];
  /* The current init's data deadline (the init info's timeout_ms, else
   * config.data_timeout_ms): each engine wait, and how long a push stream
   * may stay silent between messages. */
  uint32_t data_timeout_ms;

  uint64_t last_round_id;
  uint64_t round_id;  /* the open round, 0 when none */
  char *abort_reason; /* why the last round was aborted */
  uint64_t aborted_round;
  atomic_int_fast64_t last_activity_ms;

  /* The call running in the open round, at most one: "StartWeightUpdate",
   * "PushWeights", "UpdateWeights", "FinishWeightUpdate"; NULL if none. */
  const char *busy;
  /* Ops a call waits for on the workers (start, receive, finish): the
   * round is not idle meanwhile, whatever the clock says. */
  int engine_calls;
  /* The last phase of a finish: the commit runs on every worker and can no
   * longer be aborted. */
  bool committing;
  uint64_t push_id; /* the active push (0: none); bumped per push */
  /* The active push's call, which an abort ends (its handler may be blocked
   * reading a client gone quiet); valid while push_id is that push's. */
  wt_rpc_call *push_call;
  uint64_t next_push_id;

  /* Committed versions, and the id of the last round that committed. */
  uint64_t sequence;
  uint64_t committed_round;
  /* Delta rounds (docs/delta.md): the committed version's digest (0:
   * unknown), and the open round's: its updates so far and the digest of
   * its one push that covered the store. */
  uint64_t committed_digest;
  uint64_t round_digest;
  unsigned round_updates;
  wt_version_entry history[WT_VERSION_HISTORY]; /* by sequence % size */
  /* The init's shard plan (multirank.c, docs/multirank.md); NULL when the
   * init had none. Set when its init begins, freed by the next init. */
  struct wt_srv_plan *plan;
} wt_srv_round;

/* A server: its subsystems' states, each with its own lock where it has
 * one (lock order: watch.mu or health.mu, then round.mu, then a worker's
 * own lock; readers.mu alone). */
struct wt_server {
  wt_srv_config config;
  uint32_t nworkers;
  wt_worker **workers;
  wt_rpc_server *rpc;
  wt_rpc_class classes[WT_NCLASSES];
  pthread_t watchdog;
  bool watchdog_started;
  wt_srv_auth auth;
  wt_srv_export ex;
  wt_srv_readers readers;
  wt_srv_round round;
  wt_srv_watch watch;
  wt_srv_health health;
  wt_srv_metrics metrics;
  wt_srv_adapters adapters;
  /* An adapter set's server: the model's server it is held beside (its
   * RPC server, tokens and metrics serve both); NULL for that server. */
  wt_server *base;
};

/* --- state.c ---------------------------------------------------------------
 */

/* The calling thread's log lines name round `round_id` from now on (the
 * RPC layer restores a handler thread's context after each call). */
WT_HIDDEN void wt_srv_log_round(uint64_t round_id);

/* Marks the round active now (any thread). */
WT_HIDDEN void wt_srv_touch(wt_server *srv);

/* The first worker that needs a new init (its status in *ws), or -1. */
WT_HIDDEN long wt_srv_needs_init_worker(const wt_server *srv,
                                        wt_worker_status *ws);

/* "uninitialized", "initializing", "ready", "updating", "needs_init" for
 * the server as a whole; under mu. */
WT_HIDDEN const char *wt_srv_state_locked(const wt_server *srv);

/* The error a data call of `round` gets once the round was aborted; under
 * mu. */
WT_HIDDEN wt_status *wt_srv_aborted_error(const wt_server *srv,
                                          const char *call, uint64_t round);

/* --- param_store.c --------------------------------------------------------
 */

/* The store's readers-writer lock is the index-th of its rank in the lock
 * order (wt/lock.h): its worker's rank, so a finish that write-locks every
 * store takes them in worker order. Before the store is shared. */
WT_HIDDEN void wt_param_store_set_lock_index(wt_param_store *s, unsigned index);

/* --- validate.c ------------------------------------------------------------
 */

/* A validated update (see wt_update), with its arrays. */
typedef struct wt_srv_resolved {
  wt_update u;
  size_t *index;
  uint64_t *nbytes;
  wt_box *boxes; /* a shard plan's push (multirank.c); else NULL */
  int64_t *dims; /* the boxes' shapes, offsets and sizes (owned copies) */
  /* A shard plan's receive of every rank (wt_srv_plan_update_whole): the
   * ranks' update infos, owned (nranks of them). */
  size_t *rank_first;
  Wt__V1__WeightTransferUpdateInfo **rank_info;
  uint32_t nranks;
} wt_srv_resolved;

WT_HIDDEN void wt_srv_resolved_clear(wt_srv_resolved *r);
/* Points r->u at r's arrays: n tensors of `info` (borrowed). */
WT_HIDDEN void wt_srv_resolved_done(
    wt_srv_resolved *r, size_t n, const Wt__V1__WeightTransferUpdateInfo *info);

/* Validates `info` against the model (worker 0's store): equal list
 * lengths, names in the model, no duplicates, dtypes and shapes (and stated
 * packed sizes) equal the model's. Fills *out (cleared with
 * wt_srv_resolved_clear). INVALID_ARGUMENT naming the parameter and the
 * difference. */
WT_HIDDEN wt_status *wt_srv_resolve_update(
    wt_server *srv, const Wt__V1__WeightTransferUpdateInfo *info,
    wt_srv_resolved *out);

/* --- round.c ---------------------------------------------------------------
 */

/* InitWeightTransferEngine on every worker (in parallel), or, for a rank
 * of the shard plan the server has (init->shard_plan), a join of that init
 * (`peer`, the caller, is named when two claim one rank). The endpoints
 * array (nworkers entries) is filled; the caller frees each
 * worker_address. */
WT_HIDDEN wt_status *wt_srv_init_engine(
    wt_server *srv, const Wt__V1__WeightTransferInitInfo *init,
    const char *peer, wt_engine_endpoint *endpoints);

/* StartWeightUpdate; under a shard plan, rank `trainer_rank` of the plan
 * `plan_digest` opens the plan's round or joins the one in progress. */
WT_HIDDEN wt_status *wt_srv_start(wt_server *srv, uint32_t trainer_rank,
                                  const char *plan_digest, uint64_t *round_id);

/* UpdateWeights: validates, then runs receive on every worker in
 * parallel (under a shard plan, once every rank's came: multirank.c). Any
 * failure once the round is named (validation, a worker's receive, a deadline,
 * `call` cancelled by a trainer that is gone) fails the round on every worker
 * at once. `call` may be NULL. */
WT_HIDDEN wt_status *wt_srv_update(wt_server *srv, wt_rpc_call *call,
                                   uint64_t round_id, uint32_t trainer_rank,
                                   const Wt__V1__WeightTransferUpdateInfo *info,
                                   wt_receive_stats *stats);

/* FinishWeightUpdate; under a shard plan, of rank `trainer_rank`, which
 * returns when every rank finished and the last one committed (`call`,
 * which may be NULL, is watched meanwhile for a trainer gone). */
WT_HIDDEN wt_status *wt_srv_finish(wt_server *srv, wt_rpc_call *call,
                                   uint64_t round_id, uint32_t trainer_rank,
                                   const char *version);

/* AbortWeightUpdate: *aborted false when no round was open. */
WT_HIDDEN wt_status *wt_srv_abort(wt_server *srv, uint64_t round_id,
                                  const char *reason, bool *aborted);

/* What GetServerInfo shows of the round, read under one hold of mu. */
typedef struct wt_srv_round_info {
  const char *state;             /* wt_srv_state_locked's (static) */
  char *weight_version;          /* the committed one; NULL before any */
  bool open;                     /* a round is open */
  int64_t round_started_unix_ms; /* the open round's start (0: none) */
  size_t nrecent;
  /* The rounds that ended, newest first; each version an owned copy. */
  wt_srv_round_record recent[WT_RECENT_ROUNDS];
  bool plan; /* the init had a shard plan: */
  char *plan_digest;
  uint32_t plan_world_size, plan_joined, plan_ranks_in_round, plan_parked;
} wt_srv_round_info;
/* Fills *out, and for an open round round_bytes[i], the bytes worker i
 * received in it (its received_now[i] so far: wt_srv_round_bytes_locked);
 * nworkers entries each. Takes mu. Freed with wt_srv_round_info_clear. */
WT_HIDDEN wt_status *wt_srv_round_info_get(wt_server *srv,
                                           const uint64_t *received_now,
                                           uint64_t *round_bytes,
                                           wt_srv_round_info *out);
WT_HIDDEN void wt_srv_round_info_clear(wt_srv_round_info *info);

/* Preconditions of a round's calls, under mu: FAILED_PRECONDITION naming
 * `call` and the state when there is no open round `round_id` (0: the
 * current one), or when another call of the round still runs. */
WT_HIDDEN wt_status *wt_srv_need_round_locked(const wt_server *srv,
                                              const char *call,
                                              uint64_t round_id);
WT_HIDDEN wt_status *wt_srv_need_idle_locked(const wt_server *srv,
                                             const char *call);

/* A delta round's named base (docs/delta.md) against what the server
 * holds: FAILED_PRECONDITION naming `call`, the backend when it takes no
 * delta rounds (`takes` false), or both versions when the base is not the
 * committed one ("the <what> is relative to ..."). NULL base: NULL. */
WT_HIDDEN wt_status *wt_srv_check_delta_base_locked(
    const wt_server *srv, const char *call, const char *what,
    const Wt__V1__DeltaBase *base, bool takes);

/* Under mu: submits a copy of `proto` to every worker, in rank order.
 * `ops` (nworkers entries) keeps each worker's results. On an error (only
 * while the workers are being destroyed) the ops already submitted have
 * been waited for and every op is marked done. */
WT_HIDDEN wt_status *wt_srv_submit_all(wt_server *srv, wt_worker_op *ops,
                                       const wt_worker_op *proto);
/* Outside mu: waits for every op of wt_srv_submit_all; returns the lowest
 * rank's error (the others freed). */
WT_HIDDEN wt_status *wt_srv_wait_all(wt_server *srv, wt_worker_op *ops);
/* Both, for a caller that holds no lock. */
WT_HIDDEN wt_status *wt_srv_run_all(wt_server *srv, wt_worker_op *ops,
                                    const wt_worker_op *proto);

/* --- round_abort.c ---------------------------------------------------------
 */

/* Queues an op of `kind` on every worker without waiting for it (its memory
 * is freed when it is done). */
WT_HIDDEN void wt_srv_submit_detached(wt_server *srv, wt_worker_op_kind kind,
                                      uint64_t round, const char *reason);

/* Aborts the open round (if any, and unless it is committing) for
 * `reason`, counted under `cause` (the metrics' wt_round_failures_total):
 * ends the push stream, cancels the engines, queues an ABORT on every
 * worker and completes the calls a shard plan parked in the round
 * (wt_srv_plan_settle_locked). Never waits. Under mu. Returns whether it
 * aborted. */
WT_HIDDEN bool wt_srv_abort_round_locked(wt_server *srv, wt_srv_cause cause,
                                         const char *reason);

/* --- push.c ----------------------------------------------------------------
 */

/* One PushWeights stream's path into the workers. */
typedef struct wt_srv_push wt_srv_push;

/* A parked push's continuation (wt_rpc_call_resume's fn and arg) and what
 * frees its arg when the call is completed instead (the round failed). */
typedef struct wt_srv_plan_waiter {
  wt_rpc_call *call;
  wt_rpc_resume_fn resume;
  void *arg;
  void (*free_arg)(void *arg);
} wt_srv_plan_waiter;

/* Validates the header and begins the push on every worker; under a
 * shard plan, rank `trainer_rank`'s push of its boxes, which waits its
 * turn parked: then this returns wt_rpc_call_park's status (the caller
 * returns it at once, touching the call no more) and `resume` runs when
 * the turn comes (and calls this again), or resume->free_arg when the
 * round fails first (wt_srv_plan_push_turn). `call` is the PushWeights
 * call, which an abort of the round cancels until end. The caller owns
 * *out and ends it with wt_srv_push_end. A header that names the open
 * round but fails (validation, an engine) fails that round. */
WT_HIDDEN wt_status *wt_srv_push_begin(
    wt_server *srv, wt_rpc_call *call, uint64_t round_id, uint32_t trainer_rank,
    const Wt__V1__WeightTransferUpdateInfo *info, uint64_t packed_buffer_bytes,
    const Wt__V1__DeltaBase *delta_base, const wt_srv_plan_waiter *resume,
    wt_srv_push **out);

/* As wt_srv_push_chunk for a DeltaChunk: frame[0..len) (owner's) covers
 * raw_len bytes at `offset` of `bucket`, against base bytes that hash to
 * base_digest (wt/delta.h). */
WT_HIDDEN wt_status *wt_srv_push_delta(wt_srv_push *p, uint32_t bucket,
                                       uint64_t offset, uint64_t raw_len,
                                       uint64_t base_digest, const void *frame,
                                       size_t len, void (*release)(void *owner),
                                       void *owner);

/* The committed version a delta round may name: its sequence and digest
 * (0: none known). */
WT_HIDDEN void wt_srv_committed(wt_server *srv, uint64_t *sequence,
                                uint64_t *digest);

/* Hands one chunk (iov[0..iovcnt) of bucket `bucket` at `offset`) to every
 * worker's thread and returns without waiting for the copies, unless a few
 * chunks are in flight already. The memory stays `owner`'s, released with
 * release(owner) once every worker copied it (also on error). Returns the
 * first error a worker reported for this push so far. */
WT_HIDDEN wt_status *wt_srv_push_chunk(wt_srv_push *p, uint32_t bucket,
                                       uint64_t offset, const struct iovec *iov,
                                       size_t iovcnt,
                                       void (*release)(void *owner),
                                       void *owner);

/* Waits for the chunks in flight and ends the push on every worker.
 * `cause` (borrowed; NULL when the client half-closed) is what ended the
 * stream otherwise. A push that fails (a cause, a worker's error, bytes
 * missing) fails its round: every worker aborts it at once. Frees p. */
WT_HIDDEN wt_status *wt_srv_push_end(wt_srv_push *p, const wt_status *cause,
                                     wt_receive_stats *stats);

/* The end of a stream that broke, or sent a bad message (`st`, which this
 * returns; NULL: the end's error): wt_srv_push_end with it as the cause,
 * so the push's round fails (nothing it sent is committed). Frees p. */
WT_HIDDEN wt_status *wt_srv_push_abandon(wt_srv_push *p, wt_status *st);

/* How long a PushWeights stream may stay silent before its next message:
 * the header must come promptly (config.header_timeout_ms); while
 * `pushing`, the round's data deadline. Takes mu. */
WT_HIDDEN int64_t wt_srv_push_read_timeout(wt_server *srv, bool pushing);

/* --- multirank.c (docs/multirank.md; all under the round's mu) ----------
 */

typedef struct wt_srv_plan wt_srv_plan;

/* What a check of the plan found that fails the round: the caller aborts
 * the round with it (wt_srv_abort_round_locked(srv, cause, why)) at once,
 * under the same hold of mu. why[0] is '\0' when nothing fails it. */
typedef struct wt_srv_plan_fail {
  wt_srv_cause cause;
  char why[1024];
} wt_srv_plan_fail;

/* Checks an init's shard plan (wt_shard_plan_check) and against the model
 * (names, dtypes, shapes); *out is a copy the caller owns. */
WT_HIDDEN wt_status *wt_srv_plan_new(wt_server *srv,
                                     const Wt__V1__ShardPlan *msg,
                                     wt_srv_plan **out);
WT_HIDDEN void wt_srv_plan_free(wt_srv_plan *p);
WT_HIDDEN const char *wt_srv_plan_digest(const wt_srv_plan *p);
/* The plan's generation (0: unordered) and its trainer ranks. */
WT_HIDDEN uint64_t wt_srv_plan_generation(const wt_srv_plan *p);
WT_HIDDEN uint32_t wt_srv_plan_world(const wt_srv_plan *p);
WT_HIDDEN void wt_srv_plan_info(const wt_srv_plan *p, uint32_t *world,
                                uint32_t *joined);
/* The open round of the plan: ranks that started it, calls parked. */
WT_HIDDEN void wt_srv_plan_round_info(const wt_server *srv, uint32_t *in_round,
                                      uint32_t *parked);
/* Rank `rank` joins the init; ALREADY_EXISTS when it did (two processes
 * claim it; `peer` names the second). */
WT_HIDDEN wt_status *wt_srv_plan_join_locked(wt_srv_plan *p, uint32_t rank,
                                             const char *peer);
/* The init's endpoints, kept for the ranks that join it, and copies of
 * them (out[i].worker_address the caller's). */
WT_HIDDEN wt_status *wt_srv_plan_keep_endpoints(wt_srv_plan *p,
                                                const wt_engine_endpoint *eps,
                                                uint32_t n);
WT_HIDDEN wt_status *wt_srv_plan_endpoints(const wt_srv_plan *p,
                                           wt_engine_endpoint *out, uint32_t n);
/* A StartWeightUpdate's plan_digest and rank against the plan. */
WT_HIDDEN wt_status *wt_srv_plan_check_start(const wt_srv_plan *p,
                                             uint32_t rank, const char *digest);
/* Rank `rank` joins round `round_id` (the first join of a round resets the
 * round's record); FAILED_PRECONDITION when it did already. */
WT_HIDDEN wt_status *wt_srv_plan_round_join(wt_srv_plan *p, uint64_t round_id,
                                            uint32_t rank);
/* How often the watchdog looks at parked calls (a trainer that died while
 * it waited) and the data deadline while any are parked. */
#define WT_PLAN_WATCH_MS 50

/* PushWeights of `rank` in `round`: checks it may push and its `info`
 * against its boxes (a mismatch fails the round: *fail); NULL when its turn
 * is now (turns go in rank order, one push at a time). Otherwise parks
 * `call` (returns wt_rpc_call_park's status: the caller returns it at
 * once) until the ranks before it pushed; then `resume` runs (its fn calls
 * this again, and gets NULL), or, when the round fails first, the call is
 * completed with the round's error and resume->free_arg frees its arg. */
WT_HIDDEN wt_status *wt_srv_plan_push_turn(
    wt_server *srv, wt_rpc_call *call, uint32_t rank, uint64_t round,
    const Wt__V1__WeightTransferUpdateInfo *info,
    const wt_srv_plan_waiter *resume, wt_srv_plan_fail *fail);
/* Resumes the parked push whose turn came, when no call runs. */
WT_HIDDEN void wt_srv_plan_kick_locked(wt_server *srv);
/* Completes the parked calls whose wait is over: every one when the round
 * ended (finishes OK when it committed, the round's error otherwise),
 * updates when the receive landed. */
WT_HIDDEN void wt_srv_plan_settle_locked(wt_server *srv);
/* The watchdog's look at parked calls: a cut one, or the data deadline
 * passed since the round's last progress, fails the round naming the
 * ranks (*fail). True while calls stay parked (look again in
 * WT_PLAN_WATCH_MS). */
WT_HIDDEN bool wt_srv_plan_watch_locked(wt_server *srv, wt_srv_plan_fail *fail);
/* Resolves a rank's update against its boxes of the plan: exactly those,
 * each once (`in_order`: in the plan's order), dtype and shape (the box's
 * sizes) equal; fills *out with u.boxes set, the boxes' arrays its own.
 * INVALID_ARGUMENT naming the rank and the tensor (the caller names its
 * call). */
WT_HIDDEN wt_status *wt_srv_plan_resolve(
    const wt_server *srv, uint32_t rank,
    const Wt__V1__WeightTransferUpdateInfo *info, bool in_order,
    wt_srv_resolved *out);
/* UpdateWeights of `rank` (a receiving backend): checks and keeps its
 * update info (its boxes in the plan's order); *last when every rank's
 * came (the caller then runs the one receive of them all). */
WT_HIDDEN wt_status *wt_srv_plan_update_arrive(
    wt_server *srv, uint32_t rank, uint64_t round,
    const Wt__V1__WeightTransferUpdateInfo *info, bool *last);
/* The receive of every rank's boxes, rank by rank (u.nranks). */
WT_HIDDEN wt_status *wt_srv_plan_update_whole(wt_server *srv,
                                              wt_srv_resolved *out);
/* That receive landed: every rank's boxes are in. */
WT_HIDDEN void wt_srv_plan_received(wt_srv_plan *p, uint64_t round);
/* A rank whose update came before the last one's: parks `call` (returns
 * wt_rpc_call_park's status) until the one receive of every rank's
 * landed (completed OK) or the round failed (its error); see
 * wt_srv_plan_watch_locked for ranks that do not come. */
WT_HIDDEN wt_status *wt_srv_plan_update_wait(wt_server *srv, wt_rpc_call *call,
                                             uint32_t rank, uint64_t round);
/* Rank `rank`'s push in `round` landed in full. */
WT_HIDDEN void wt_srv_plan_pushed(wt_srv_plan *p, uint64_t round,
                                  uint32_t rank);
/* FinishWeightUpdate of `rank`: records it; *last when every rank has
 * finished (the caller then commits). Otherwise parks `call` (returns
 * wt_rpc_call_park's status) until the last rank's finish committed the
 * round (completed OK) or it failed (its error). A rank that did not
 * push, or another version, fails the round (*fail). */
WT_HIDDEN wt_status *wt_srv_plan_finish(wt_server *srv, wt_rpc_call *call,
                                        uint32_t rank, uint64_t round,
                                        const char *version, bool *last,
                                        wt_srv_plan_fail *fail);

/* --- service.c -------------------------------------------------------------
 */

/* The method table of wt.v1.WeightTransfer. */
WT_HIDDEN const wt_rpc_method *wt_srv_methods(size_t *n);

/* ---- watch streams (watch.c) ---- */

/* A WatchWeightVersion stream opened on `srv` (the server its request
 * names: service.c routes it), on the polling thread: the current version
 * first, then every commit after it. */
WT_HIDDEN wt_status *wt_srv_watch_open(wt_server *srv, wt_rpc_stream *s);
/* WatchWeightVersion's close handler, for the method table. */
WT_HIDDEN void wt_srv_watch_closed(wt_rpc_stream *s, void *user);
/* Sends every committed version a watcher has not seen yet; after each
 * commit, outside mu. */
WT_HIDDEN void wt_srv_notify_watchers(wt_server *srv);
/* Ends every watch stream (shutdown). */
WT_HIDDEN void wt_srv_end_watchers(wt_server *srv);

/* ---- health (health.c) ------------------------------------------------------
 */

WT_HIDDEN wt_status *wt_srv_health_check(wt_rpc_call *call,
                                         const ProtobufCMessage *request,
                                         void *user);
WT_HIDDEN wt_status *wt_srv_health_watch_open(wt_rpc_stream *s,
                                              const ProtobufCMessage *request,
                                              void *user);
WT_HIDDEN void wt_srv_health_watch_closed(wt_rpc_stream *s, void *user);
/* Tells every Health.Watch stream the status, when it changed. Takes
 * health_mu and mu: call it holding neither. */
WT_HIDDEN void wt_srv_health_changed(wt_server *srv);
/* Ends every Health.Watch stream (the stop). */
WT_HIDDEN void wt_srv_health_end(wt_server *srv);

/* --- reflection.c ------------------------------------------------------------
 */

/* grpc.reflection.v1(alpha).ServerReflection/ServerReflectionInfo: answers
 * each request of the stream from the build's descriptor set. */
WT_HIDDEN wt_status *wt_srv_reflection(wt_rpc_call *call,
                                       const ProtobufCMessage *request,
                                       void *user);

/* --- metrics.c -------------------------------------------------------------
 */

/* The open round began: its clocks and each worker's bytes so far. */
WT_HIDDEN void wt_srv_round_began_locked(wt_server *srv);
/* The open round ended: committed as `version` (sequence `seq`; into the
 * duration histogram too) or failed for `cause`; into recent_rounds. */
WT_HIDDEN void wt_srv_round_ended_locked(wt_server *srv, bool committed,
                                         wt_srv_cause cause,
                                         const char *version, uint64_t seq);
/* Bytes worker i received in the open round (0 without one). */
WT_HIDDEN uint64_t wt_srv_round_bytes_locked(wt_server *srv, uint32_t i,
                                             uint64_t received_now);
WT_HIDDEN void wt_srv_rounds_free(wt_server *srv);
/* The name of a cause ("timeout"). Static. */
WT_HIDDEN const char *wt_srv_cause_name(wt_srv_cause cause);
/* The rounds that ended, newest first (at most WT_RECENT_ROUNDS pointers
 * into the ring, valid while mu is held); returns how many. */
WT_HIDDEN size_t wt_srv_recent_rounds_locked(const wt_server *srv,
                                             const wt_srv_round_record **out);

/* Serves GET /metrics on `listen` ("HOST:PORT", HOST as wt_srv_listen_host
 * gives it in `host`; port 0: an ephemeral one) until wt_srv_metrics_stop.
 * UNAVAILABLE naming the address when it cannot bind. */
WT_HIDDEN wt_status *wt_srv_metrics_start(wt_server *srv, const char *listen,
                                          const char *host,
                                          struct wt_metrics_http **out);
WT_HIDDEN int wt_srv_metrics_port(const struct wt_metrics_http *h);
WT_HIDDEN void wt_srv_metrics_stop(struct wt_metrics_http *h);

/* --- adapters.c ------------------------------------------------------------
 */

/* The server a call naming `adapter` works on: srv itself for NULL or "",
 * else the adapter set's. NOT_FOUND naming the adapter when the server has
 * no such set (INVALID_ARGUMENT for a name no set can have). */
WT_HIDDEN wt_status *wt_srv_route(wt_server *srv, const char *adapter,
                                  wt_server **out);

/* The adapter set `spec` describes: made from it at its first init (a
 * store per worker, its own round and export; RESOURCE_EXHAUSTED past
 * --max-adapters or --max-adapter-bytes), else checked against the spec
 * that made it (wt_adapter_spec_same). */
WT_HIDDEN wt_status *wt_srv_adapter_open(wt_server *srv,
                                         const Wt__V1__AdapterSpec *spec,
                                         wt_server **out);

/* GetServerInfo's adapters: *out (n entries, each with its strings) is
 * freed with wt_srv_adapters_info_free. */
WT_HIDDEN wt_status *wt_srv_adapters_info(wt_server *srv,
                                          Wt__V1__AdapterInfo ***out,
                                          size_t *n);
WT_HIDDEN void wt_srv_adapters_info_free(Wt__V1__AdapterInfo **info, size_t n);

/* From the server's shutdown: every set's round ends and no set is made
 * from now on. */
WT_HIDDEN void wt_srv_adapters_shutdown(wt_server *srv);
/* Stops and frees every set (after the RPC server stopped). */
WT_HIDDEN void wt_srv_adapters_stop(wt_server *srv);

/* --- slot.c ----------------------------------------------------------------
 */

/* The host of "host:port" or "[v6]:port"; the caller frees it. */
WT_HIDDEN wt_status *wt_srv_listen_host(const char *listen, char **out);

/* The steps of a slot's start, in this order (server.c adds the process's
 * between them, wt_srv_slot_start an adapter set's). */

/* A server with its fixed settings from `o` (after their defaults) and its
 * locks, for nworkers workers, no thread yet. Once *out is set, also on an
 * error, wt_srv_slot_free releases it. */
WT_HIDDEN wt_status *wt_srv_slot_new(const wt_server_options *o,
                                     uint32_t nworkers, wt_server **out);
/* One worker per device, each with the data deadline and the engines. */
WT_HIDDEN wt_status *wt_srv_slot_workers_start(wt_server *srv,
                                               const wt_server_options *o,
                                               const wt_device *devices);
/* Every worker loads the whole model ("synthetic:LAYOUT" or a checkpoint)
 * into its own store, all at once, each on its own thread (so device
 * memory is filled on its device). */
WT_HIDDEN wt_status *wt_srv_slot_load_model(wt_server *srv, const char *model);
/* The round watchdog (aborts a round idle past the round timeout, and
 * looks at a shard plan's parked calls). */
WT_HIDDEN wt_status *wt_srv_slot_watchdog_start(wt_server *srv);
/* The export and its leases (o->export_path; none without). */
WT_HIDDEN wt_status *wt_srv_slot_export_start(wt_server *srv,
                                              const wt_server_options *o);

/* An adapter set's server beside `base`: base's settings and devices, a
 * store of metas[0..n) per worker (zeros, no version yet), its own round,
 * watchdog, hashing thread and, when export_path is not NULL, its export
 * there. No RPC server: base's routes calls to it (wt_srv_route). Stopped
 * with wt_srv_slot_stop. */
WT_HIDDEN wt_status *wt_srv_slot_start(wt_server *base, const char *name,
                                       const wt_tensor_meta *metas, size_t n,
                                       const char *export_path,
                                       wt_server **out);

/* From the server's shutdown (server.c's on_shutdown, for the model's and
 * each adapter set's): no new work, the open round aborted so that
 * handlers waiting on it return, the engines' calls cancelled, the watch
 * and health streams ended. */
WT_HIDDEN void wt_srv_slot_shutdown(wt_server *srv);
/* After wt_srv_slot_shutdown: joins the watchdog and frees the server and
 * all it holds (the model's server's RPC server, tokens and metrics
 * endpoint too, which server.c made). */
WT_HIDDEN void wt_srv_slot_free(wt_server *srv);
/* An adapter set's stop: wt_srv_slot_shutdown, then wt_srv_slot_free (srv
 * may be NULL). */
WT_HIDDEN void wt_srv_slot_stop(wt_server *srv);

/* What GetServerInfo shows of a backend of the slot's registry. */
typedef struct wt_srv_backend_info {
  const char *name; /* the registry's */
  bool loaded, available, cross_host, survives_abort;
  const char *memory_kinds[WT_MEM_KIND_COUNT]; /* static names */
  size_t n_memory_kinds;
  char reason[256]; /* why it is not available; "" when it is */
} wt_srv_backend_info;
/* Every backend of config.engines; a lazy module that is not loaded stays
 * unloaded. *out (*n entries) is the caller's to free. */
WT_HIDDEN wt_status *wt_srv_backends_info(wt_server *srv,
                                          wt_srv_backend_info **out, size_t *n);

/* What GetServerInfo shows of a worker and its store. */
typedef struct wt_srv_worker_info {
  uint32_t rank;
  const char *device;      /* the worker's */
  wt_worker_status status; /* wt_worker_get_status */
  const char *memory_kind; /* static */
  uint64_t bytes_held;
  bool store_complete;
} wt_srv_worker_info;
/* Each worker's, in rank order: out has nworkers entries. Takes each
 * worker's lock in turn. */
WT_HIDDEN void wt_srv_workers_info(const wt_server *srv,
                                   wt_srv_worker_info *out);

/* --- export.c ------------------------------------------------------------- */

typedef struct wt_export wt_export;
/* Serves o->export_path (the worker 0 store must be shared memory); the
 * caller owns *out (wt_export_stop). Errors name --export and why. */
WT_HIDDEN wt_status *wt_export_start(wt_server *srv, const wt_server_options *o,
                                     wt_export **out);
/* Closes every consumer (their leases end), the socket, its path. */
WT_HIDDEN void wt_export_stop(wt_export *e);
/* Consumers refused (another user, too many) and closed for misbehaving. */
WT_HIDDEN void wt_export_counts(wt_export *e, uint64_t *refused,
                                uint64_t *dropped);

/* --- hash_pool.c ---------------------------------------------------------- */

/* Threads at a lower priority (niceness `nice`) that run readers' hashing,
 * one part at a time, so that reader calls that hash nothing keep their
 * normal priority. The caller owns *out (wt_hash_pool_free). */
typedef struct wt_hash_pool wt_hash_pool;
WT_HIDDEN wt_status *wt_hash_pool_new(unsigned threads, int nice,
                                      wt_hash_pool **out);
WT_HIDDEN void wt_hash_pool_free(wt_hash_pool *p);
/* Runs fn(arg) on one of the pool's threads and returns once it did (on
 * this thread when p is NULL). */
WT_HIDDEN void wt_hash_pool_run(wt_hash_pool *p, void (*fn)(void *), void *arg);

/* One digest of wt_srv_checksum's answer. */
typedef struct wt_srv_digest {
  const char *name; /* the store's (borrowed) */
  char hex[WT_DIGEST_HEX_MAX];
  uint32_t worker;
} wt_srv_digest;

/* ChecksumWeights on `srv`: the digest (`alg`) of each tensor named (every
 * tensor when n_names is 0; each once, in the order first asked for) in
 * worker 0's store, or every worker's (`all_workers`), all of one version
 * (ABORTED when a commit lands during the pass). Each tensor is hashed in
 * parts under its store's read lock, a reader's on the pool's niced
 * threads, and paid for from the peer's budget (reader_budget.c); `call`
 * cancelled or the server stopping ends it (CANCELLED). RESOURCE_EXHAUSTED
 * for too many names or a reply above config.max_send_bytes. *out (*n
 * entries, by worker then tensor) is the caller's to free. */
WT_HIDDEN wt_status *wt_srv_checksum(wt_server *srv, wt_rpc_call *call,
                                     wt_hash_alg alg, char *const *names,
                                     size_t n_names, bool all_workers,
                                     wt_srv_digest **out, size_t *n);

/* --- reader_budget.c ------------------------------------------------------ */

typedef struct wt_reader_budget wt_reader_budget;
/* The budget of peer `key` (made on first use), held until released; NULL
 * when out of memory (the call then goes unmetered). */
WT_HIDDEN wt_reader_budget *wt_srv_budget_take(wt_server *srv, const char *key);
WT_HIDDEN void wt_srv_budget_release(wt_server *srv, wt_reader_budget *b);
/* Takes `bytes` from the budget, sleeping while it is overdrawn; false
 * when stop(arg) said to give up while waiting. */
WT_HIDDEN bool wt_srv_budget_spend(wt_server *srv, wt_reader_budget *b,
                                   uint64_t bytes, bool (*stop)(void *arg),
                                   void *arg);

#endif /* WT_SERVER_STATE_H */
