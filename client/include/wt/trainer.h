/* wt/trainer.h: trainer engines, the sending half of a backend.
 *
 * A trainer engine is created for one backend by the sync client's
 * init_transfer (wt/client.h) from the trainer-engine registry, and sends one
 * round of a weight source per wt_sync_client_update. Backends register a
 * table of functions (wt_trainer_ops) under their name, directly or lazily
 * from a shared object (wt/registry.h); all built-ins are registered in one
 * place, backends/builtins_trainer.c, directly: `grpc`, `ipc`, `nccl`, `ucx`
 * where UCX is built (the GPU backends' CUDA and NCCL are modules loaded on
 * first use, wt/cuda.h and wt/nccl_seam.h).
 *
 * How the table serves each kind of backend:
 *
 *  - `grpc` moves bytes through the control channel itself: its send_weights
 *    opens a PushWeights stream to every server and the update is done when
 *    every stream is. No UpdateWeights call.
 *
 *  - `ucx`, `nccl`, `ipc` (later) move bytes outside the control channel and
 *    set WT_TRAINER_NEEDS_UPDATE_WEIGHTS. For them the client starts an
 *    UpdateWeights on every server with the asynchronous unary form of the
 *    RPC layer (wt_rpc_unary_start), whose update info carries the
 *    backend's extras (update_info: packed sizes, IPC handles), and runs
 *    send_weights while those calls are pending: each worker's receive runs
 *    while the trainer sends. If a server's UpdateWeights ends with an error
 *    while send_weights still runs, the client calls `cancel` from another
 *    thread so that send_weights stops waiting for that peer; when
 *    send_weights fails, the pending calls are cancelled. Either way the
 *    round is then aborted on every server.
 *
 *  - Rendezvous (NCCL's unique id, UCX's listener): trainer_init creates what
 *    the workers need (e.g. the ncclUniqueId), server_init_info writes it into
 *    each server's init info (the client has already set world_size and
 *    rank_offset there), and connect joins the group (ncclCommInitRank as
 *    rank 0) while every server's InitWeightTransferEngine is pending.
 *
 * Every wait inside a trainer engine has a deadline (the client's
 * wt_sync_client_data_timeout_ms, or the init info's timeout_ms).
 *
 * A backend's own settings live in its files: its table's init_info builds
 * the backend's init info from generic options ("bucket_size" = "64M"), so
 * tools (wt-push --option) and configs pass settings without knowing the
 * backend; memory_kinds says which memory it sends from.
 *
 * A built-in backend is one folder, backends/<name>/, with both halves
 * (docs/adding-a-backend.md); an outside one is a module registered
 * lazily.
 */
#ifndef WT_TRAINER_H
#define WT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "wt/client.h"
#include "wt/options.h"
#include "wt/registry.h"
#include "wt/source.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Version of wt_trainer_ops; a table that says otherwise is refused. */
#define WT_TRAINER_ABI_VERSION 6u

/* wt_trainer_ops.flags */
enum {
  /* The backend moves data while UpdateWeights is pending on every server. */
  WT_TRAINER_NEEDS_UPDATE_WEIGHTS = 1u << 0,
};

/* What a trainer engine knows of the servers: a plain context, as a worker
 * engine gets wt_worker_ctx; an engine never holds or calls the sync
 * client. The arrays have one entry per server, are owned by the client
 * that made the engine, and stay valid (their contents current) while that
 * client lives; the client outlives its trainers. */
typedef struct wt_trainer_ctx {
  size_t nservers;
  /* Server k's name as messages show it ("host:port"). */
  const char *const *targets;
  /* Server k's gRPC channel, for a backend that moves bytes over it
   * (`grpc`); entries are NULL when the control plane is not wt's own
   * (wt/control.h), and such a backend refuses at trainer_init. */
  wt_rpc_channel *const *channels;
  /* Server k's world size and first rank (1 + the world sizes before). */
  const uint32_t *world_sizes;
  const uint32_t *rank_offsets;
  /* Server k's round id in the round in progress (0: none); current during
   * send_weights and the part calls. */
  const uint64_t *round_ids;
  /* Server k's committed version when the round started: its sequence
   * and digest (wt/delta.h; 0: unknown), the base a delta round may name
   * (docs/delta.md). Current during send_weights. */
  const uint64_t *base_sequences;
  const uint64_t *base_digests;
  /* The client's deadlines, in ms: of a data call (push, update,
   * checksum; wt_client_options.data_timeout_ms) and of a control call
   * (wt_client_options.timeout_ms). An engine's own waits take
   * wt_trainer_init_args.data_timeout_ms. */
  int64_t data_timeout_ms;
  int64_t control_timeout_ms;
} wt_trainer_ctx;

/* What trainer_init receives; everything is borrowed for the trainer's
 * lifetime (the client behind ctx and the source outlive the trainer). */
typedef struct wt_trainer_init_args {
  const Wt__V1__WeightTransferInitInfo *init_info;
  const wt_trainer_ctx *ctx;
  wt_source *source; /* may be NULL: the client passes one per update */
  /* The data deadline of this init, in ms: each of the engine's waits.
   * 0: wt_trainer_create resolves it (wt_trainer_data_deadline_ms), so an
   * engine's trainer_init always sees it set. */
  int64_t data_timeout_ms;
} wt_trainer_init_args;

/* What the last round of a `grpc` trainer engine sent (docs/delta.md):
 * the model's bytes, the bytes of the chunk messages' data on the wire
 * per server (frames or raw bytes), how many servers took a delta push
 * and how many a full one, and the seconds spent encoding (XOR, zstd and
 * digests) on the calling thread. */
typedef struct wt_grpc_delta_stats {
  uint64_t raw_bytes;
  uint64_t delta_wire_bytes; /* of the delta push (0 without one) */
  uint32_t delta_servers;
  uint32_t full_servers;
  double encode_s;
  double round_s;
} wt_grpc_delta_stats;

/* The same figures for every backend that sends delta rounds. */
typedef wt_grpc_delta_stats wt_delta_stats;

/* A backend's trainer-side table. `self` is the engine's own state, made by
 * trainer_init and released by destroy. Optional entries may be NULL. */
typedef struct wt_trainer_ops {
  wt_ops_header header; /* abi_version WT_TRAINER_ABI_VERSION, name */
  uint32_t flags;       /* WT_TRAINER_* */
  /* WT_MEM_BIT set of the source memory kinds it sends from; 0 means the
   * host kinds (WT_MEM_HOST_KINDS). */
  uint32_t memory_kinds;

  /* Optional: fills `info` (zeroed, backend set) from `opts[0..n)`. Every
   * key it does not know is INVALID_ARGUMENT naming the key and listing the
   * ones it knows; a bad value names the key. What it allocates for info's
   * fields comes from malloc, so that wt_pb_free(&info->base) frees it.
   * NULL: the backend takes no options. */
  wt_status *(*init_info)(const wt_backend_option *opts, size_t n,
                          Wt__V1__WeightTransferInitInfo *info);

  /* Creates the engine: checks the init info's backend extras and prepares
   * (for NCCL, creates the unique id). Calls no server. */
  wt_status *(*trainer_init)(const wt_trainer_init_args *args, void **self);

  /* Optional: adds this backend's extras to server k's copy of the init
   * info (memory it points to belongs to `self` and must stay valid until
   * the next call or destroy). */
  wt_status *(*server_init_info)(void *self, size_t k,
                                 Wt__V1__WeightTransferInitInfo *info);

  /* Optional: joins the workers while every server's
   * InitWeightTransferEngine is pending. */
  wt_status *(*connect)(void *self);

  /* Optional, for WT_TRAINER_NEEDS_UPDATE_WEIGHTS: adds the backend's
   * extras to server k's update info (names, dtype_names, shapes and packed
   * are already set from the source's metadata); memory as in
   * server_init_info, valid until send_weights returns. */
  wt_status *(*update_info)(void *self, wt_source *source, size_t k,
                            Wt__V1__WeightTransferUpdateInfo *info);

  /* Sends one round of `source` (already validated and rewound) to every
   * server of the context, reporting through `progress` (may be NULL). An
   * error names the server at fault. May be NULL when `parts` is set. */
  wt_status *(*send_weights)(void *self, wt_source *source,
                             wt_progress_fn progress, void *user);

  /* Optional: makes a running send_weights return soon with CANCELLED.
   * Thread-safe; called from another thread. */
  void (*cancel)(void *self);

  /* Releases `self`. */
  void (*destroy)(void *self);

  /* Optional: server k's init response (its workers' endpoints), once every
   * server answered ready. A backend whose workers listen (`ucx`) connects
   * to them here. */
  wt_status *(*init_response)(
      void *self, size_t k,
      const Wt__V1__InitWeightTransferEngineResponse *response);

  /* --- version 3: a round as several UpdateWeights calls per server --- */

  /* Optional, for WT_TRAINER_NEEDS_UPDATE_WEIGHTS (ipc packed: one call
   * per bucket of its ring). When set, the client does not call
   * update_info nor send_weights; for each round it calls
   *
   *   parts(source)           -> *nparts (the round's plan, built here)
   *   prepare_part(0)
   *   for p in 0 .. nparts-1:
   *     part_info(p, k)       for every server k, then UpdateWeights(p)
   *                           started on every server
   *     prepare_part(p + 1)   while those calls are pending (if any left)
   *     every call of part p waited for; part_done(p, k) for each server
   *     whose call succeeded
   *
   * so part p + 1 is prepared while the workers take part p, and a part's
   * memory (a ring slot) is reused only after part_done said every server
   * had finished with it. The first error anywhere ends the round (it is
   * aborted on every server); `cancel` makes a running prepare_part return
   * CANCELLED. part_info gets `info` with names, dtype_names and shapes of
   * the whole source already set (packed true) and narrows them to the
   * part's tensors; what it points to belongs to `self` and stays valid
   * until part_done(p) for every server, or the next round. */
  wt_status *(*parts)(void *self, wt_source *source, size_t *nparts);
  wt_status *(*prepare_part)(void *self, wt_source *source, size_t part);
  wt_status *(*part_info)(void *self, wt_source *source, size_t part, size_t k,
                          Wt__V1__WeightTransferUpdateInfo *info);
  void (*part_done)(void *self, size_t part, size_t k);

  /* --- version 6 --- */

  /* Optional, for a backend that sends delta rounds: the last round's
   * figures (wt_trainer_delta_stats). */
  wt_status *(*delta_stats)(const void *self, wt_delta_stats *out);
} wt_trainer_ops;

/* Sets *out to the process's trainer-engine registry, created on first use
 * (pthread_once) with the built-ins registered. Owned by the library; lives
 * until exit. Fails only when creating it failed, and then every time. */
wt_status *wt_trainer_registry(wt_registry **out);

/* Registers every built-in backend's trainer table in `reg` (a registry
 * created with WT_TRAINER_ABI_VERSION): how wt_trainer_registry() fills
 * itself, and how an embedder builds a registry of its own. */
wt_status *wt_trainer_register_builtins(wt_registry *reg);

/* Registers a backend's table (borrowed; must outlive the process) or a lazy
 * one; see wt_registry_register(_lazy). */
wt_status *wt_trainer_register(const char *name, const wt_trainer_ops *ops);
wt_status *wt_trainer_register_lazy(const char *name, const char *shared_object,
                                    const char *symbol);

/* The table registered under `name`; NOT_FOUND lists the names. */
wt_status *wt_trainer_lookup(const char *name, const wt_trainer_ops **ops);

/* The registered names joined by ", "; the caller frees *out. */
wt_status *wt_trainer_names(char **out);

/* A new init info for backend `name` built by the backend from `opts`
 * (wt_trainer_ops.init_info): NOT_FOUND for an unknown backend, the
 * backend's INVALID_ARGUMENT for an option it does not take. The caller
 * frees *out with wt_pb_free(&(*out)->base). */
wt_status *wt_trainer_init_info(const char *name, const wt_backend_option *opts,
                                size_t n, Wt__V1__WeightTransferInitInfo **out);

/* Creates a trainer engine of backend `name` (trainer_init). Usually called
 * by wt_sync_client_init_transfer. The caller owns *out. */
wt_status *wt_trainer_create(const char *name, const wt_trainer_init_args *args,
                             wt_trainer **out);

/* The one resolution of an init's data deadline on the trainer's side:
 * the init info's timeout_ms, else ctx's data_timeout_ms (either may be
 * NULL; then the client's default). */
int64_t wt_trainer_data_deadline_ms(const Wt__V1__WeightTransferInitInfo *init,
                                    const wt_trainer_ctx *ctx);

/* Releases the engine. NULL is ignored. */
void wt_trainer_destroy(wt_trainer *t);

/* The engine's table, backend name (owned by the table) and source given at
 * init (may be NULL). */
const wt_trainer_ops *wt_trainer_get_ops(const wt_trainer *t);
void *wt_trainer_self(const wt_trainer *t);
const char *wt_trainer_backend(const wt_trainer *t);
wt_source *wt_trainer_source(const wt_trainer *t);
bool wt_trainer_needs_update_weights(const wt_trainer *t);

/* The lists of an update info (names, dtype_names, shapes) for a source's
 * metadata, shared by every backend that states an update. The strings and
 * dims point into the source's metadata (valid while the source lives); the
 * arrays are owned by the struct and released with wt_update_lists_free(). */
typedef struct wt_update_lists {
  size_t n;
  char **names;
  char **dtype_names;
  Wt__V1__Shape *shapes;
  Wt__V1__Shape **shape_ptrs;
} wt_update_lists;

wt_status *wt_update_lists_build(const wt_source *source, wt_update_lists *l);
void wt_update_lists_free(wt_update_lists *l);
/* Points `info`'s names, dtype_names and shapes at `l` and sets packed. */
void wt_update_lists_apply(const wt_update_lists *l,
                           Wt__V1__WeightTransferUpdateInfo *info);

/* Fills *out with the last round's delta figures for a trainer of a
 * backend that sends delta rounds (its table's delta_stats: `grpc`,
 * `ucx`); FAILED_PRECONDITION naming the backend for any other. */
wt_status *wt_trainer_delta_stats(const wt_trainer *t, wt_delta_stats *out);
/* The same, under its first name (it has taken `ucx` too since). */
wt_status *wt_grpc_trainer_delta_stats(const wt_trainer *t,
                                       wt_grpc_delta_stats *out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_TRAINER_H */
