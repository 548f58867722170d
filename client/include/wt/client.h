/* wt/client.h: the sync client, a trainer's handle on one or many servers.
 *
 * The role of vLLM's VLLMWeightSyncClient. A client drives its servers
 * through a control plane (wt/control.h): wt's own, one gRPC channel per
 * server target ("host:port"), made by wt_sync_client_new; or a caller's
 * own, handed to wt_sync_client_new_with. The calls of a round (init, start,
 * update, finish, abort) are fanned out to every server, in parallel (each
 * server's call is started before any is waited for); the inspection calls
 * (info, parameters, version, watch, checksums) address one server by index.
 *
 * Ranks: the trainer is rank 0; the world is 1 + the sum of every server's
 * GetWorldSize; server k's first worker is rank `rank_offset(k)`, i.e. 1 +
 * the world sizes of the servers before it. init_transfer writes both into
 * each server's init info (rank_offset, world_size), for every backend.
 *
 * Re-init: a worker whose engine cannot continue after an abort (an aborted
 * NCCL communicator) goes to state needs_init, and its server refuses the
 * next StartWeightUpdate. wt_sync_client_start then re-initialises every
 * server with the last init_transfer's info (and the trainer engine it made,
 * in place: the handle stays valid) and starts again, once, logging why;
 * with manual_reinit it returns the error instead.
 *
 * Errors: every error names the server it came from ("127.0.0.1:50051
 * /wt.v1.WeightTransfer/StartWeightUpdate: FAILED_PRECONDITION: ..."). When
 * servers fail in one fan-out, the first in target order is returned and the
 * others are logged.
 *
 * Deadlines: every call has one. Control calls use `timeout_ms`; the calls
 * that move or digest data (PushWeights, UpdateWeights, ChecksumWeights) use
 * `data_timeout_ms`.
 *
 * A client is used from one thread at a time (a trainer's control loop);
 * trainer engines it creates may use its channels from their own threads
 * during wt_sync_client_update.
 */
#ifndef WT_CLIENT_H
#define WT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/checksum.h"
#include "wt/rpc_types.h"
#include "wt/source.h"
#include "wt/status.h"
#include "wt/tensor.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Deadline of control calls when the options say 0. */
#define WT_CLIENT_DEFAULT_TIMEOUT_MS 30000
/* Deadline of data calls when the options say 0: long, since a round of a
 * large model over a slow link takes minutes; the server's round timeout
 * catches a trainer that went quiet much earlier. */
#define WT_CLIENT_DEFAULT_DATA_TIMEOUT_MS (30 * 60 * 1000)

/* 20 s, gRPC's own default: a healthy server on a host whose CPUs are
 * busy with inference (vLLM's threads spin) left a ping unanswered for
 * more than 1 s, and once (CI) for more than 10 s; a cut link is noticed
 * in about 21 s, far inside the data deadline. */
#define WT_CLIENT_DEFAULT_KEEPALIVE_TIMEOUT_MS 20000

/* 1 s: a cut link swallows the next bucket, or the keepalive ping sent
 * after a second without a read, and is noticed within 3 s of the cut; a
 * loaded server's kernel still acknowledges what it is sent, so load
 * alone never reaches it (a server process that reads nothing for a
 * second while its window is full does: see docs/failures.md). */
#define WT_CLIENT_DEFAULT_TCP_USER_TIMEOUT_MS 1000

typedef struct wt_sync_client wt_sync_client;
typedef struct wt_trainer wt_trainer;
typedef struct wt_trainer_ctx wt_trainer_ctx;
typedef struct wt_control_plane wt_control_plane;

/* Zero (or a NULL options pointer) means the default for every field. */
typedef struct wt_client_options {
  int64_t timeout_ms;      /* control calls; default 30 s */
  int64_t data_timeout_ms; /* push, update, checksum; default 30 min */
  /* Never re-init by itself when a server needs it: start returns the
   * server's FAILED_PRECONDITION, and the caller calls init_transfer. */
  bool manual_reinit;
  /* TLS to every server (NULL: plaintext): the CA that signed the servers'
   * certificates, and the client's own certificate and key for servers that
   * require one (mutual TLS). Paths; read by wt_sync_client_new. */
  const wt_rpc_tls *tls;
  /* A file holding the bearer token sent on every call (see wt/secure.h,
   * wt_token_read). NULL: no token (the tools take $WT_TOKEN_FILE and
   * pass it here; the library reads no environment). Never a
   * token on a command line, where every user of the host can read it. */
  const char *token_file;
  /* Without token_file, a server on loopback whose user is this process's
   * gets the trainer token it generated (wt_token_discover: the runtime
   * directory of runtime_base; tools pass $XDG_RUNTIME_DIR, NULL takes
   * /run/user/UID or /tmp/wt-UID). no_token_discovery: never look. */
  const char *runtime_base;
  bool no_token_discovery;
  /* The LoRA adapter set every call of this client names (docs/lora.md):
   * its rounds, versions, checksums and parameters instead of the model's.
   * NULL: the model, or the set an init's adapter spec names
   * (WeightTransferInitInfo.adapter). Copied. */
  const char *adapter;
  /* How long a server may leave an HTTP/2 keepalive ping unanswered while
   * a call to it is open (a ping every second) before its connection is
   * closed and its calls fail UNAVAILABLE: how soon a cut link or a
   * vanished host is noticed, and how long a loaded but healthy host may
   * stall. 0: WT_CLIENT_DEFAULT_KEEPALIVE_TIMEOUT_MS; < 0: no keepalive
   * (a dead peer is then noticed at the call's deadline, or at
   * tcp_user_timeout_ms while bytes are on their way). */
  int64_t keepalive_timeout_ms;
  /* TCP_USER_TIMEOUT of the connections to the servers: how long bytes
   * sent to a server may stay unacknowledged by its kernel, or its
   * receive window stay shut, before the connection is dropped and its
   * calls fail UNAVAILABLE naming this setting. The kernel of a loaded
   * but healthy server still acknowledges, so this notices a cut link
   * without failing a slow host, which keepalive_timeout_ms leaves time
   * for; but a server process that stops reading (stopped, or hung) for
   * this long while this client has bytes for it is dropped too. 0:
   * WT_CLIENT_DEFAULT_TCP_USER_TIMEOUT_MS; < 0: gRPC's own (the keepalive
   * timeout). Taken with gRPC 1.51 only; another gRPC keeps its own, and
   * its channels say so in the log. */
  int64_t tcp_user_timeout_ms;
} wt_client_options;

/* Progress of a transfer, reported by trainer engines. */
typedef struct wt_progress {
  uint64_t tensors_done;
  uint64_t tensors_total;
  uint64_t bytes_done;
  uint64_t bytes_total;
} wt_progress;

/* Called on the thread running the update, at least once at the end with
 * done == total. Must not call back into the client. */
typedef void (*wt_progress_fn)(const wt_progress *progress, void *user);

/* Connects to `targets[0..n)` (n >= 1, "host:port", no duplicates). Channels
 * connect lazily: an absent server shows up on the first call. `opts` may be
 * NULL; strings are copied. The caller owns *out (wt_sync_client_destroy()).
 */
wt_status *wt_sync_client_new(const char *const *targets, size_t n,
                              const wt_client_options *opts,
                              wt_sync_client **out);

/* A client over the control plane `cp` (wt/control.h): its round
 * orchestration is the same as over wt's own. Takes `cp` whatever the
 * outcome (it is zeroed; the client releases it, or this call does when it
 * fails). opts' deadlines and manual_reinit apply; tls and token_file are
 * the control plane's business. The caller owns *out. */
wt_status *wt_sync_client_new_with(wt_control_plane *cp,
                                   const wt_client_options *opts,
                                   wt_sync_client **out);

/* Closes every channel. A round still open is left to the servers' round
 * timeout (call wt_sync_client_abort first to end it at once). NULL is
 * ignored. */
void wt_sync_client_destroy(wt_sync_client *c);

size_t wt_sync_client_server_count(const wt_sync_client *c);
/* The adapter set this client's calls name (docs/lora.md): the options',
 * else that of its last init's adapter spec; "" for the model. Owned by the
 * client. */
const char *wt_sync_client_adapter(const wt_sync_client *c);
/* Target of server k as given; owned by the client. */
const char *wt_sync_client_target(const wt_sync_client *c, size_t k);

/* --- inspection (one server) ------------------------------------------- */

/* The caller owns *info and frees it with wt_pb_free(). */
wt_status *wt_sync_client_server_info(wt_sync_client *c, size_t k,
                                      Wt__V1__ServerInfo **info);

/* Asks every server for its world size (in parallel) and sets *world_size to
 * 1 + their sum; remembers each server's rank offset. */
wt_status *wt_sync_client_world_size(wt_sync_client *c, uint32_t *world_size);

/* Rank of server k's first worker, as computed by the last successful
 * wt_sync_client_world_size (or init_transfer); 0 before. */
uint32_t wt_sync_client_rank_offset(const wt_sync_client *c, size_t k);
/* Server k's own world size, as last asked; 0 before. */
uint32_t wt_sync_client_server_world_size(const wt_sync_client *c, size_t k);

/* Every parameter of server k whose name starts with `prefix` (NULL or "":
 * all), in the server's order, following pages. The caller owns *metas and
 * frees it with wt_tensor_meta_array_free(*metas, *n). */
wt_status *wt_sync_client_list_parameters(wt_sync_client *c, size_t k,
                                          const char *prefix,
                                          wt_tensor_meta **metas, size_t *n);

/* A committed version as a server reports it. */
typedef struct wt_weight_version {
  char *version; /* "" before the first commit; owned by the struct */
  uint64_t sequence;
  int64_t committed_unix_ms;
} wt_weight_version;

/* Frees v->version and zeroes *v. NULL is ignored. */
void wt_weight_version_clear(wt_weight_version *v);

/* The caller clears *out with wt_weight_version_clear(). */
wt_status *wt_sync_client_get_version(wt_sync_client *c, size_t k,
                                      wt_weight_version *out);

/* Called for each version a watch receives (the committed one first, if
 * any); the version is borrowed for the call. Return false to stop. */
typedef bool (*wt_version_fn)(const wt_weight_version *v, void *user);

/* Streams server k's versions to `fn` until it returns false (then returns
 * NULL), the server ends the stream, or `deadline_ms` passes
 * (WT_RPC_NO_DEADLINE: never). */
wt_status *wt_sync_client_watch(wt_sync_client *c, size_t k,
                                int64_t deadline_ms, wt_version_fn fn,
                                void *user);

/* One parameter's digest as a server reports it. */
typedef struct wt_param_checksum {
  char *name;
  char digest[WT_DIGEST_HEX_MAX];
  uint32_t worker;
} wt_param_checksum;

/* Digests of server k's committed bytes for `names[0..n)` (n == 0: every
 * parameter, in model order) with `alg`, on every worker when `all_workers`
 * (else worker 0). The caller frees *out with wt_param_checksums_free(). */
wt_status *wt_sync_client_checksums(wt_sync_client *c, size_t k,
                                    const char *const *names, size_t n,
                                    wt_hash_alg alg, bool all_workers,
                                    wt_param_checksum **out, size_t *nout);
void wt_param_checksums_free(wt_param_checksum *sums, size_t n);

/* --- rounds (every server) ----------------------------------------------- */

/* Initialises the transfer engine `info->backend` (or the oneof's backend,
 * wt/init_info.h) on every server and, when `trainer` is not NULL, creates
 * the matching trainer engine from the trainer registry (wt/trainer.h) with
 * `source` (borrowed, may be NULL; it must outlive the trainer). Steps:
 * world size and rank offsets; the trainer's trainer_init; per server a copy
 * of `info` with rank_offset and world_size set and the trainer's
 * server_init_info applied; every server's InitWeightTransferEngine
 * started; the trainer's connect (a rendezvous) while they are pending; then
 * every answer. `info` stays the caller's (the client keeps a copy for a
 * re-init). A backend not in the registry is NOT_FOUND listing the names,
 * before any server is called. With an adapter set (info->adapter, or the
 * client's options.adapter), the spec is completed first from `source`'s
 * tensors (wt/adapter_spec.h: its tensors, rank and target modules when
 * left out; alpha must be given) and every server makes or checks the set.
 * The caller owns *trainer (wt_trainer_destroy()). */
wt_status *wt_sync_client_init_transfer(
    wt_sync_client *c, const Wt__V1__WeightTransferInitInfo *info,
    wt_source *source, wt_trainer **trainer);

/* Starts a round on every server and remembers each one's round id, which
 * every later call of the round carries. If some servers fail, the round is
 * aborted on the others; if one of them has a worker in needs_init, the
 * client re-inits (see above) and starts once more. */
wt_status *wt_sync_client_start(wt_sync_client *c);

/* Round id of server k in the round in progress; 0 when none. */
uint64_t wt_sync_client_round_id(const wt_sync_client *c, size_t k);

/* Sends one round's worth of `source` (NULL: the trainer's own) through
 * `trainer`. The source is validated first (wt_source_validate), before any
 * byte moves. For a backend that needs UpdateWeights, the client starts
 * UpdateWeights on every server (asynchronous form), runs the trainer's
 * send_weights while they are pending, then waits for them; for `grpc`,
 * send_weights alone pushes through PushWeights. `progress` may be NULL.
 * On any failure the round is aborted on every server and the error names
 * the server at fault. */
wt_status *wt_sync_client_update(wt_sync_client *c, wt_trainer *trainer,
                                 wt_source *source, wt_progress_fn progress,
                                 void *user);

/* Commits the round on every server as `weight_version` (non-empty, else
 * INVALID_ARGUMENT naming weight_version before any call). The commits are
 * one call per server, in parallel, so they are atomic per server only: when
 * one server fails, the others may already have committed; the error names
 * the server that failed. */
wt_status *wt_sync_client_finish(wt_sync_client *c, const char *weight_version);

/* Drops this client's round, best effort: every server where it runs is
 * asked to drop exactly that round (its round ids) even when some fail, and
 * the first failure is returned. Without a round of this client it does
 * nothing: a server refuses round id 0, so nobody drops another trainer's
 * round. `reason` may be NULL. */
wt_status *wt_sync_client_abort(wt_sync_client *c, const char *reason);

/* --- for trainer engines ------------------------------------------------- */

/* The context the client gives the trainer engines it makes (wt/trainer.h),
 * for a caller that creates one itself (wt_trainer_create). Owned by the
 * client; valid while it lives. */
const wt_trainer_ctx *wt_sync_client_trainer_ctx(const wt_sync_client *c);

/* The init info of the client's last init as it went to the servers
 * (before each server's backend extras); NULL before any init. Owned by
 * the client; valid until its next init or its destruction. */
const Wt__V1__WeightTransferInitInfo *wt_sync_client_init_info(
    const wt_sync_client *c);

/* Server k's channel (NULL when the control plane has none); owned by the
 * client's control plane. */
wt_rpc_channel *wt_sync_client_channel(wt_sync_client *c, size_t k);
/* Effective deadlines in milliseconds. */
int64_t wt_sync_client_timeout_ms(const wt_sync_client *c);
int64_t wt_sync_client_data_timeout_ms(const wt_sync_client *c);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CLIENT_H */
