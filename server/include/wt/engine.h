/* wt/engine.h: the worker-engine table, one per backend.
 *
 * A worker engine is a backend's receiving side on one worker: it takes the
 * bytes the trainer sends and writes them into the worker's param store, in
 * the staging buffers the store hands out (wt/param_store.h). The worker
 * (wt/worker.h) owns the round: it commits or aborts the store around the
 * engine's calls, so an engine never decides what readers see.
 *
 * Lifetime of one engine, all calls from the worker unless said otherwise:
 *
 *   create -> init_transfer -> { start_update -> (receive | push_*)* ->
 *             finish_update | abort_update }* -> destroy
 *
 * The table is built for every backend, not only `grpc`:
 *  - each backend reads its own extras from the protobuf messages it is
 *    given: the init info's `backend_init` oneof (grpc, ucx, nccl, ipc),
 *    timeout and options map at create/init_transfer, and the update info's
 *    `backend_update` oneof (packed sizes, IPC handles) at receive. Nothing
 *    backend-specific is in this header;
 *  - init_transfer may block (an NCCL communicator, a UCX connection): the
 *    server calls it on every worker at once, each on its own thread, because
 *    a collective rendezvous needs every rank inside it together (each on its
 *    worker's thread). It reports
 *    where the worker listens, if it does (UCX: workers listen and the
 *    trainer connects), through a wt_engine_endpoint;
 *  - receive runs while the trainer sends: the trainer's UpdateWeights is
 *    pending (the client's asynchronous unary call) and its data moves
 *    outside the control channel. The server calls receive on every worker at
 *    once and answers UpdateWeights when all returned. Every wait inside has
 * the context's deadline;
 *  - cancel is the one call made from another thread, at any time, while
 *    receive or init_transfer may be blocked: it must make them return
 *    promptly (CANCELLED or ABORTED) and may only signal (set a flag, wake a
 *    condition, abort a communicator). The server cancels when a round is
 *    aborted, times out, or the server shuts down. A cancel stays in effect
 *    until the next start_update or abort_update;
 *  - the stream ops (push_begin, push_chunk, push_end) exist for backends
 *    whose bytes arrive inside the control channel (`grpc`: PushWeights).
 *    The thread that reads the stream hands each chunk to every worker's
 *    thread and reads on; a few chunks are in flight per worker, so
 *    push_chunk should copy and return (it must not wait for the trainer).
 *    The server calls them for one push at a time per engine. A backend without
 *    them sets all three to NULL; a backend without receive sets it to NULL
 *    and UpdateWeights then answers FAILED_PRECONDITION.
 *
 * Threads: every call but cancel runs on the worker's own thread, which is
 * bound to the worker's device (CUDA's current device is per thread) for
 * the engine's whole life, so an engine may create streams and
 * communicators in create or init_transfer and use them in every later call.
 * Calls other than cancel are never concurrent on one engine; different
 * workers' engines run in parallel, each on its worker's thread.
 *
 * Capabilities (the table's memory_kinds and caps): the memory kinds of
 * param store an engine can receive into (a worker whose store is of
 * another kind refuses the init, naming both), whether trainer and workers
 * may sit on different hosts, and whether an engine takes another round
 * after abort_update. One that does not (an aborted NCCL communicator is
 * dead) is destroyed after an abort and its worker goes to `needs_init`.
 *
 * Registration: a table starts with wt_ops_header {WT_ENGINE_ABI_VERSION,
 * name} and is registered in the worker-engine registry
 * (wt_engine_registry(), built-ins in backends/builtins_worker.c, all
 * registered directly; a third-party backend lazily, as a shared object
 * exporting the table under a symbol). What is lazy about the built-in GPU
 * backends is their driver libraries: CUDA and NCCL sit in modules (wt/cuda.h,
 * wt/nccl_seam.h) loaded on first use.
 */
#ifndef WT_ENGINE_H
#define WT_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "wt/box.h"
#include "wt/options.h"
#include "wt/packing.h"
#include "wt/param_store.h"
#include "wt/registry.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Bumped whenever wt_engine_ops, wt_worker_ctx, wt_update or
 * wt_engine_endpoint change layout or meaning. */
#define WT_ENGINE_ABI_VERSION 8u

/* wt_engine_ops.caps */
enum {
  /* The trainer and the workers may be on different hosts. */
  WT_ENGINE_CROSS_HOST = 1u << 0,
  /* After abort_update the engine takes the next round; without this the
   * worker destroys the engine and needs a new InitWeightTransferEngine. */
  WT_ENGINE_SURVIVES_ABORT = 1u << 1,
  /* receive takes delta rounds (wt_update.delta: the update info named a
   * base the server checked is its committed version; docs/delta.md) and
   * reports the digest of what it landed (wt_receive_stats.digest). */
  WT_ENGINE_RECEIVES_DELTA = 1u << 2,
  /* Takes updates of boxes (wt_update.boxes: one trainer rank's boxes of a
   * shard plan, docs/multirank.md). A server refuses an init with a shard
   * plan for an engine without it. */
  WT_ENGINE_TAKES_BOXES = 1u << 3,
};

/* A backend's engine state; each backend defines its own struct. */
typedef struct wt_engine wt_engine;

/* What a worker lends its engine; borrowed, valid until destroy. */
typedef struct wt_worker_ctx {
  uint32_t rank;           /* worker within this server, 0..num_workers-1 */
  uint32_t num_workers;    /* workers on this server */
  wt_device device;        /* the worker's device; its thread is bound to it */
  const char *device_name; /* "cpu", "cuda:0", ... */
  wt_param_store *store;   /* where received bytes go (staging buffers); its
                              memory kind is wt_param_store_memory(store) */
  /* The data deadline, in ms: of each wait (a bucket, a connection),
   * resolved once by the worker: the init info's timeout_ms, or the
   * server's data_timeout_ms when that is 0. Never 0. */
  uint32_t data_timeout_ms;
  /* Host the server listens on: the address a listening engine binds to and
   * reports (loopback unless the server was told otherwise). */
  const char *host;
  /* Largest message the control channel accepts, in bytes: a bound for what
   * a stream op may be sent in one chunk. */
  uint64_t max_message_bytes;
  /* This backend's settings from the server (wt_server_options'
   * engine_options: wt-server --engine-option BACKEND.KEY=VALUE), keys
   * without the "BACKEND." prefix, in the order given; already accepted by
   * the table's check_options at server start. Valid during create only
   * (unlike the rest of the context): an engine copies what it keeps. */
  const wt_backend_option *options;
  size_t n_options;
} wt_worker_ctx;

/* What init_transfer tells the trainer about this worker (the init
 * response's WorkerEndpoint). Zeroed by the caller; an engine that does not
 * listen leaves it so. `worker_address` is malloc'd by the engine and freed
 * by the caller with free(). */
typedef struct wt_engine_endpoint {
  char address[256];
  uint32_t port;
  unsigned char *worker_address; /* e.g. a packed ucp worker address */
  size_t worker_address_len;
} wt_engine_endpoint;

/* One validated update: every name exists in the model, dtypes and shapes
 * equal the model's, no duplicates. Borrowed for the call only (receive,
 * push_begin): an engine keeps a copy of what it needs later. */
typedef struct wt_update {
  size_t n;               /* tensors, in the sender's order */
  const size_t *index;    /* index[k]: tensor k's index in the store */
  const uint64_t *nbytes; /* nbytes[k]: its size */
  uint64_t total_bytes;
  /* Packed updates: the engine builds the bucket plan from nbytes[] and
   * packed_buffer_bytes (wt_pack_plan_build), the same plan the sender
   * computed; 0 means the engine's own value from the init info. */
  bool packed;
  uint64_t packed_buffer_bytes;
  /* The request's update info: the backend's own extras. */
  const Wt__V1__WeightTransferUpdateInfo *info;
  /* A delta round (docs/delta.md): the push's header (push_delta chunks
   * may come) or the update info (receive: every bucket is a delta
   * bucket) named a base the server checked is its committed version. */
  bool delta;
  /* A shard plan's round (docs/multirank.md, WT_ENGINE_TAKES_BOXES):
   * tensor k's nbytes[k] bytes are box boxes[k] of the store's tensor
   * index[k], dense and row-major; the engine scatters them with
   * wt_box_runs, stages the tensor (wt_param_store_stage) before its first
   * byte and records each box landed with wt_param_store_staged_part.
   * NULL: every tensor whole. */
  const wt_box *boxes;
  /* A shard plan's round on an engine that receives (receive, not push):
   * every trainer rank's boxes in one update, rank by rank. Rank r sent
   * tensors [rank_first[r], rank_first[r + 1]) with its own update info
   * rank_info[r] (its own bucket plan over them, its own tags). 0: one
   * sender, the whole update. */
  uint32_t nranks;
  const size_t *rank_first; /* nranks + 1 entries */
  const Wt__V1__WeightTransferUpdateInfo *const *rank_info;
} wt_update;

/* What a receive or a push moved: tensors and bytes landed in this
 * worker's staging, and bytes it forwarded to another worker (the ucx
 * chain) once they all went. */
typedef struct wt_receive_stats {
  uint64_t tensors;
  uint64_t bytes;
  uint64_t forwarded_bytes;
  /* The digest (wt/delta.h) of every byte the push landed, in its order,
   * when it covered the whole store; 0 otherwise (the version then has
   * no digest and the next round is full). */
  uint64_t digest;
} wt_receive_stats;

typedef struct wt_engine_ops {
  wt_ops_header header; /* {WT_ENGINE_ABI_VERSION, "<backend>"} */
  /* WT_MEM_BIT set of the store memory kinds it receives into; 0 means
   * the host kinds (WT_MEM_HOST_KINDS). */
  uint32_t memory_kinds;
  uint32_t caps; /* WT_ENGINE_* */

  /* Allocates the engine for the worker `ctx` from the init info (checks the
   * backend's own fields: INVALID_ARGUMENT naming the field). No network
   * activity. The one place an engine is handed the init info: borrowed,
   * valid until init_transfer returns (keep a copy of what later calls
   * need). The worker owns *out and releases it with destroy. */
  wt_status *(*create)(const Wt__V1__WeightTransferInitInfo *init,
                       const wt_worker_ctx *ctx, wt_engine **out);

  /* Joins the trainer's transfer (connect, rendezvous); may block up to the
   * context's deadline; cancel unblocks it. Fills `endpoint` when the
   * worker listens. */
  wt_status *(*init_transfer)(wt_engine *e, wt_engine_endpoint *endpoint);

  /* A round begins; the store's round has begun already. `round_id` is the
   * round's, the one id an engine tags its data with (`ucx` keys every tag
   * with it); it is the server's secret: never in a message a client sees. */
  wt_status *(*start_update)(wt_engine *e, uint64_t round_id);

  /* Receives the tensors of `u` into the store's staging buffers
   * (wt_param_store_stage, or wt_param_store_stage_write for a copy, then
   * wt_param_store_staged once a tensor's bytes all landed). Returns when every
   * byte landed, or with an error when a wait's deadline passed
   * (DEADLINE_EXCEEDED naming what it waited for) or cancel was called. NULL in
   * a backend whose data arrives through the stream ops. */
  wt_status *(*receive)(wt_engine *e, const wt_update *u,
                        wt_receive_stats *stats);

  /* The round's data is complete (e.g. wait for in-flight copies); the worker
   * commits the store afterwards. */
  wt_status *(*finish_update)(wt_engine *e);

  /* Drops the round (after cancel, if something was blocked); the worker
   * aborts the store afterwards. Never fails. */
  void (*abort_update)(wt_engine *e);

  /* From any thread, at any time: make a blocked init_transfer or receive
   * return promptly. Only signals. */
  void (*cancel)(wt_engine *e);

  /* Releases everything. NULL is ignored. */
  void (*destroy)(wt_engine *e);

  /* --- stream ops (optional; all three or none) --------------------------- */

  /* A push of `u` begins. Checks what only the backend knows (e.g. that the
   * update is packed), INVALID_ARGUMENT naming the field. */
  wt_status *(*push_begin)(wt_engine *e, const wt_update *u);

  /* One chunk: the bytes of iov[0..iovcnt), in that order, at `offset` of
   * bucket `bucket`. Checks order, size and bounds of the whole chunk
   * (INVALID_ARGUMENT naming bucket and offset), then writes it straight
   * into the staging buffers of the tensors it covers. The pieces are the
   * received message's own buffers (a chunk arrives in several), borrowed
   * for the call, so a chunk is copied once, into the store. */
  wt_status *(*push_chunk)(wt_engine *e, uint32_t bucket, uint64_t offset,
                           const struct iovec *iov, size_t iovcnt);

  /* Ends the push. `stream_ended` is true when the sender half-closed the
   * stream (false: it broke); either way the push is over. DATA_LOSS
   * "stream ended after X of Y bytes" when bytes are missing. */
  wt_status *(*push_end)(wt_engine *e, bool stream_ended,
                         wt_receive_stats *stats);

  /* Optional (ABI 3): whether this host has what the backend needs (CUDA,
   * a device, a library), without creating anything; NULL when it does,
   * else FAILED_PRECONDITION saying what is missing. GetServerInfo reports
   * it per backend. NULL entry: always available. */
  wt_status *(*probe)(void);

  /* Optional (ABI 4): whether the backend can move memory of `kind` on this
   * host, beyond taking it (memory_kinds): `ucx` into device memory needs a
   * UCX that moves CUDA memory. Same contract as probe; the answer may be
   * computed once and kept. NULL entry: every kind it takes. */
  wt_status *(*probe_memory)(wt_mem_kind kind);

  /* Optional (ABI 5): checks this backend's server settings (keys without
   * the "BACKEND." prefix) when the server starts: INVALID_ARGUMENT naming
   * the key it does not take (wt_option_unknown) or the bad value. create
   * then finds them in wt_worker_ctx.options. NULL: the backend takes
   * none, and any is refused. */
  wt_status *(*check_options)(const wt_backend_option *opts, size_t n);

  /* Optional (ABI 6), with the stream ops: a DeltaChunk of a delta push
   * (u->delta): bytes [offset, offset + raw_len) of bucket `bucket` are
   * the committed ones XOR the zstd frame frame[0..len) decodes to, and
   * the committed ones there hash to base_digest (wt/delta.h). Checks all
   * of it (order and bounds as push_chunk, the frame's claimed size, the
   * base's digest) before any byte of staging changes. NULL: the backend
   * takes no delta pushes, and the server refuses their headers. */
  wt_status *(*push_delta)(wt_engine *e, uint32_t bucket, uint64_t offset,
                           uint64_t raw_len, uint64_t base_digest,
                           const void *frame, size_t len);

  /* Optional (ABI 6): asked before each round's start_update. True (with
   * why[0..n) saying why) when the engine must be given up, for example
   * because strangers hold more of its connections than it tolerates:
   * the worker destroys it (its resources reclaimed) and goes to
   * needs_init, and the trainer's client inits again. */
  bool (*needs_reinit)(wt_engine *e, char *why, size_t n);
} wt_engine_ops;

/* The process's worker-engine registry, created (with every built-in
 * backend registered) on first use; thread-safe. It lives until the process
 * exits. */
wt_status *wt_engine_registry(wt_registry **out);

/* Registers every built-in backend in `reg` (a registry created with
 * WT_ENGINE_ABI_VERSION): how wt_engine_registry() fills itself, and how an
 * embedder builds a registry of its own with extra backends
 * (wt_server_options.engine_registry). */
wt_status *wt_engine_register_builtins(wt_registry *reg);

/* The ops of `backend` in `reg` (NULL: the process's registry); NOT_FOUND
 * listing the registered backends when unknown. The table stays valid as
 * long as the registry. */
wt_status *wt_engine_lookup(wt_registry *reg, const char *backend,
                            const wt_engine_ops **ops);

/* The backend names of `reg` (NULL: the process's registry) joined by ", ";
 * the caller frees *out. */
wt_status *wt_engine_names(wt_registry *reg, char **out);

/* Checks `opts[0..n)` ("BACKEND.KEY" = VALUE) against `reg` (NULL: the
 * process's registry): a key without a backend, an unknown backend
 * (listing the registered ones) or a setting the backend's check_options
 * refuses is INVALID_ARGUMENT naming the option. */
wt_status *wt_engine_options_check(wt_registry *reg,
                                   const wt_backend_option *opts, size_t n);

/* The settings of `backend` among `opts[0..n)`, prefix stripped: *out is a
 * new array (the caller frees it with free(); the strings point into
 * `opts`), *nout its length (0 and *out NULL when there are none). */
wt_status *wt_engine_options_for(const char *backend,
                                 const wt_backend_option *opts, size_t n,
                                 wt_backend_option **out, size_t *nout);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_ENGINE_H */
