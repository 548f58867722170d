/* wt/server.h: a wt server inside any process (wt-server's main is one
 * caller; tests and the client's tests start one in-process).
 *
 * wt_server_start loads the model into every worker's param store, starts
 * the round watchdog and the gRPC service (wt.v1.WeightTransfer), and returns
 * once the port is bound. wt_server_stop aborts a running round, lets
 * in-flight calls end (watch streams end at once), and frees everything.
 */
#ifndef WT_SERVER_H
#define WT_SERVER_H

#include <stdint.h>

#include "wt/memory.h"
#include "wt/options.h"
#include "wt/param_store.h"
#include "wt/registry.h"
#include "wt/rpc_types.h"
#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* What GetServerInfo reports as server_version. */
#define WT_SERVER_VERSION "0.1.0"

#define WT_SERVER_DEFAULT_LISTEN "127.0.0.1:50051"
#define WT_SERVER_DEFAULT_MODEL "synthetic:llama-256m"
#define WT_SERVER_DEFAULT_ROUND_TIMEOUT_MS 60000u
#define WT_SERVER_DEFAULT_DATA_TIMEOUT_MS 60000u
#define WT_SERVER_DEFAULT_DRAIN_MS 1000
#define WT_SERVER_DEFAULT_HEADER_TIMEOUT_MS 10000u
/* Admission (wt/rpc.h): handler threads of the round calls (init, start,
 * update, push, finish, abort) and of the readers (info, world size,
 * parameters, version, checksums); open watch streams. */
#define WT_SERVER_DEFAULT_ROUND_CALLS 16
#define WT_SERVER_DEFAULT_READER_CALLS 16
#define WT_SERVER_DEFAULT_WATCHERS 16384
#define WT_SERVER_DEFAULT_LEASE_WAIT_MS 10000u
#define WT_SERVER_DEFAULT_MAX_ADAPTERS 16u
#define WT_SERVER_DEFAULT_MAX_ADAPTER_BYTES (8ull << 30)
/* One peer's share (a user on this host, an address beyond it): reader
 * calls running or waiting, watch streams open, and the bytes a second its
 * checksums may hash. */
#define WT_SERVER_DEFAULT_READER_CALLS_PER_PEER 8
#define WT_SERVER_DEFAULT_WATCHERS_PER_PEER 1024
#define WT_SERVER_DEFAULT_READER_BYTES_PER_SEC (256ull << 20)
/* The niceness of the threads that hash for readers (ChecksumWeights):
 * below every other thread of the server when the CPU is short, while the
 * reader calls that hash nothing keep their normal priority. */
#define WT_SERVER_READER_NICE 19

/* Zero in any field means its default. Strings are copied at start. */
typedef struct wt_server_options {
  const char *listen; /* "host:port"; port 0: an ephemeral port */
  /* A safetensors file, a sharded checkpoint's *.safetensors.index.json, or
   * "synthetic:NAME" (wt/synthetic.h, filled for seed 0). */
  const char *model;
  /* Workers: one per device of `devices` ("cuda:0,cuda:1"), or, for NULL or
   * "cpu", `workers` host workers (1); each holds the whole model. */
  const char *devices;
  uint32_t workers;
  wt_staging staging; /* WT_STAGING_SHADOW (0) or _INPLACE */
  /* The host workers' memory kind: WT_MEM_HOST (0), WT_MEM_SHARED (a memfd
   * another process can map) or WT_MEM_PINNED (CUDA only). cuda:N workers
   * hold device memory. */
  wt_mem_kind memory;
  /* A round idle this long between calls or chunks is aborted; 60 s. */
  uint32_t round_timeout_ms;
  /* The data deadline when the init info's timeout_ms is 0: each engine
   * wait, and a push stream's silence between messages; 60 s. */
  uint32_t data_timeout_ms;
  /* gRPC message limits (wt/rpc.h): 0 the defaults (16 MiB), -1 none. */
  int max_receive_message_bytes;
  int max_send_message_bytes;
  /* How long wt_server_stop lets in-flight calls finish before cancelling
   * them, in ms; 1 s. */
  int64_t drain_ms;
  /* A PushWeights stream that sends no header this long is ended; 10 s.
   * Between messages the round's data deadline applies (the init info's
   * timeout_ms, else data_timeout_ms). */
  uint32_t header_timeout_ms;
  /* Admission: round calls running at once (the trainer's; kept apart from
   * readers), reader calls running at once (more wait, up to 64 times as
   * many), watch streams open. 0: the defaults above. */
  int max_round_calls;
  int max_reader_calls;
  int max_watchers;
  /* One peer's share of them (a user id for a connection from this host,
   * else an IP address), and the bytes a second one peer's checksums may
   * hash (its budget; 0: the defaults above). */
  int max_reader_calls_per_peer;
  int max_watchers_per_peer;
  uint64_t reader_bytes_per_sec;
  /* Worker-engine registry to create engines from (borrowed; must outlive
   * the server). NULL: the process's registry of built-in backends. An
   * embedder adds its own backends with wt_engine_register_builtins() and
   * wt_registry_register() on a registry of its own. */
  wt_registry *engine_registry;
  /* Backends' own settings, "BACKEND.KEY" = VALUE (wt-server
   * --engine-option ucx.transports=tcp): checked at start by each backend
   * (wt_engine_options_check), handed to its engines. Copied. */
  const wt_backend_option *engine_options;
  size_t n_engine_options;
  /* How often each worker's engine is asked between rounds whether it must
   * be given up (wt_worker_options.engine_check_ms: 0 the default, 1 s;
   * -1 at a round's start only). */
  int engine_check_ms;
  /* Trust (see docs/trust.md). tls_cert and tls_key (PEM files)
   * turn TLS on; tls_ca then requires every client to present a
   * certificate signed by it (mutual TLS). token_file (wt_tokens_load: lines
   * "trainer TOKEN" / "reader TOKEN", mode 600) makes every call carry a
   * bearer token of the method's scope. A listen address beyond loopback
   * without TLS is refused unless `insecure` is set. */
  const char *tls_cert;
  const char *tls_key;
  const char *tls_ca;
  const char *token_file;
  bool insecure;
  /* Secure by default (wt-server's default; docs/trust.md): without
   * token_file, generate_tokens makes a fresh trainer and reader token and
   * writes them, mode 0600, to tokens-PORT in the runtime directory of
   * runtime_base (wt_runtime_dir; tools pass $XDG_RUNTIME_DIR), where
   * clients of the same user on this host find them; the file is removed
   * at stop. With neither every call is allowed, and GetServerInfo's
   * `auth` says "none". */
  bool generate_tokens;
  const char *runtime_base;
  /* The inference-side export (docs/export.md): a Unix-domain socket at
   * export_path (mode 0600, in a directory others cannot write) handing
   * committed versions of the workers' stores (memory WT_MEM_SHARED, or
   * cuda:N workers' device memory through CUDA IPC handles) to
   * consumers of this user, or of the uids/gids listed (borrowed during
   * start). A round waits at most lease_wait_ms (10 s) for the leases that
   * pin bytes it would write, then fails naming the holder. */
  const char *export_path;
  const unsigned *export_allow_uids;
  size_t n_export_allow_uids;
  const unsigned *export_allow_gids;
  size_t n_export_allow_gids;
  uint32_t lease_wait_ms;
  /* An export connection holding no lease and asking nothing for
   * export_idle_ms (60 s) is closed, and one whose request does not arrive
   * whole within export_frame_ms (5 s) of its first byte; a uid holds at
   * most its share of the 64 connections and 1024 leases (its part among
   * the uids holding some and one more). 0: the defaults. */
  uint32_t export_idle_ms;
  uint32_t export_frame_ms;
  /* Connections (wt/rpc.h, wt_rpc_server_options; docs/trust.md): at most
   * max_connections open (WT_RPC_DEFAULT_MAX_CONNECTIONS, lowered to what
   * ulimit -n allows), each closed when it has made no authorized call
   * within auth_grace_ms (WT_RPC_DEFAULT_AUTH_GRACE_MS). 0: the defaults. */
  int max_connections;
  int auth_grace_ms;
  /* Embedding (docs/embedding.md): an engine that links libwt_server gives
   * every worker's store its own buffers and learns of each commit
   * (wt/param_store.h, wt_store_embedding; the store's name, "worker-N",
   * says whose). Borrowed: it must outlive the server. NULL: the server
   * allocates. */
  const wt_store_embedding *embed;
  /* On wt_server_stop, the health service (grpc.health.v1) answers
   * NOT_SERVING this long, still serving every call, before the drain, so
   * that load balancers and probes move away first. 0: at once. */
  uint32_t health_grace_ms;
  /* Prometheus metrics (docs/operations.md) over HTTP at
   * http://metrics_listen/metrics, "HOST:PORT" (port 0: an ephemeral one);
   * NULL: none. A host beyond loopback needs `insecure`, as `listen` does
   * without TLS (the metrics are plaintext and carry no token). */
  const char *metrics_listen;
  /* LoRA adapter sets (docs/lora.md), each made by its first init: at most
   * max_adapters of them (WT_SERVER_DEFAULT_MAX_ADAPTERS), holding at most
   * max_adapter_bytes per worker in all (WT_SERVER_DEFAULT_MAX_ADAPTER_BYTES;
   * on top of the model). 0: the defaults. */
  uint32_t max_adapters;
  uint64_t max_adapter_bytes;
} wt_server_options;

typedef struct wt_server wt_server;

/* Fills every option of *o left 0 or NULL with its default (the
 * WT_SERVER_DEFAULT_* values above, which wt-server's --help shows too):
 * the one place the defaults are applied; wt_server_start calls it on its
 * copy of the options. */
void wt_server_options_defaults(wt_server_options *o);

/* Starts one thread per worker (bound to its device), loads the model into
 * every worker's param store (each on its own thread), binds and serves.
 * Errors name what failed: the model ("model 'x': ..."), the address
 * (UNAVAILABLE), a device or memory kind this machine lacks
 * (FAILED_PRECONDITION naming it and why), an option (INVALID_ARGUMENT
 * naming it). The caller owns *out and releases it with wt_server_stop(). */
wt_status *wt_server_start(const wt_server_options *opts, wt_server **out);

/* The bound port. */
int wt_server_port(const wt_server *srv);

/* Number of workers. */
uint32_t wt_server_workers(const wt_server *srv);

/* Worker `rank`'s param store (NULL when out of range), owned by the server,
 * for reading committed bytes in-process (wt/param_store.h readers). */
wt_param_store *wt_server_store(wt_server *srv, uint32_t rank);

/* Calls refused for want of a valid token, or for a reader's token on a
 * trainer's call, since the server started. */
void wt_server_auth_counts(wt_server *srv, wt_rpc_auth_counts *out);
/* The control port's connections (wt_rpc_conn_counts); zeros for NULL. */
void wt_server_conn_counts(wt_server *srv, wt_rpc_conn_counts *out);

/* The service's admission classes (wt/rpc.h): the trainer's round calls,
 * the readers', and the watch streams. */
typedef enum wt_server_class {
  WT_SERVER_CLASS_ROUND = 0,
  WT_SERVER_CLASS_READER = 1,
  WT_SERVER_CLASS_WATCH = 2,
} wt_server_class;

/* Calls of admission class `cls` running and waiting now, and that class's
 * threads (each may be NULL); for tests and monitoring. */
void wt_server_admission(wt_server *srv, wt_server_class cls, int *running,
                         int *queued, int *threads);

/* The Prometheus text exposition (format 0.0.4) of the server's metrics,
 * as GET /metrics serves it (docs/operations.md lists them). The caller
 * frees *text; *len (may be NULL) is its length. */
wt_status *wt_server_metrics_text(wt_server *srv, char **text, size_t *len);

/* The metrics endpoint's bound port; 0 without metrics_listen. */
int wt_server_metrics_port(const wt_server *srv);

/* Stops serving: aborts a running round, ends watch streams, gives
 * in-flight calls drain_ms to finish, cancels the rest, and frees the
 * server. NULL is ignored. Not from a handler. */
void wt_server_stop(wt_server *srv);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SERVER_H */
