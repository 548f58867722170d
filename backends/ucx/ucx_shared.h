/* backends/ucx/ucx_shared.h: what the `ucx` worker and trainer engines share
 * (built only with WT_WITH_UCX).
 *
 * Rendezvous: every worker listens (a ucp_listener on an ephemeral port of
 * the server's host) and reports host:port in the init response's
 * WorkerEndpoint; the trainer connects to every worker of every server
 * (ucp_ep_create with a sockaddr). Workers listen because the server's
 * address is the one the trainer already knows and reaches (it dials the
 * control channel there), whereas a trainer behind NAT or with several
 * interfaces would have to guess which of its addresses the workers reach.
 * Each worker also reports its packed ucp worker address. By default the
 * trainer connects through the listener, which gives both sides an endpoint
 * with peer-failure handling (a dead trainer or worker is noticed within a
 * second); with init_info.options["ucx_connect"] = "address" it connects
 * with the worker address instead (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS),
 * which, together with "ucx_peer_errors" = "off", lets UCX 1.13 use shared
 * memory on one host (its sockaddr wireup selects network transports only,
 * and its shared-memory transports lack peer-failure support); dead peers
 * are then found by the deadlines only.
 *
 * Data: the shared bucket plan (wt/packing.h); bucket b of round r travels
 * as one tagged message with tag wt_ucx_tag(r, b). Every wait goes through
 * wt_ucx_wait, which sleeps on the worker's event fd between progress calls,
 * ends at a deadline, and returns at once after wt_ucx_cancel.
 */
#ifndef WT_UCX_SHARED_H
#define WT_UCX_SHARED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "wt/clock.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* One ucp context with one worker (single-threaded use, except
 * wt_ucx_cancel). */
typedef struct wt_ucx {
  ucp_context_h context;
  ucp_worker_h worker;
  int efd;
  atomic_bool cancelled;
  /* While set, every wt_ucx_wait discards the unexpected queue
   * (wt_ucx_discard_unexpected); `discarded` counts what it dropped. */
  bool discard;
  uint64_t discarded;
  int64_t discard_log_ms;
  int64_t discard_next_ms;
  /* The memory types this context can move (ucp_context_query's
   * memory_types, 1 << ucs_memory_type_t): CUDA memory needs UCX built with
   * CUDA and its cuda_copy (and cuda_ipc) transports loaded, which also
   * needs a CUDA driver. */
  uint64_t memory_types;
} wt_ucx;

/* Creates context and worker; `transports` (may be NULL or empty: UCX's own
 * choice, UCX_TLS still applies) overrides UCX_TLS, and `net_devices` (NULL:
 * UCX's own choice) is UCX_NET_DEVICES unless that is set: the network
 * interfaces UCX may use and listen on. `stream` adds UCX's stream API (the
 * hello of listener connections; it costs about a tenth of the
 * shared-memory bandwidth, so only connections through a listener ask for
 * it). `who` names the owner in messages. The caller owns *out
 * (wt_ucx_destroy). */
wt_status *wt_ucx_new(const char *transports, const char *net_devices,
                      bool stream, const char *who, wt_ucx **out);

/* The network interfaces that hold `host`'s addresses ("127.0.0.1" ->
 * "lo"; a name as the control port resolves it, "localhost" -> "lo"), as
 * UCX_NET_DEVICES takes them (comma-separated), into buf; buf "" for a
 * wildcard (0.0.0.0, "::": every interface). An address no interface
 * holds, or interfaces that cannot be read (tried five times), is an
 * error naming the host: never taken as "every interface". */
wt_status *wt_ucx_interface_of(const char *host, char *buf, size_t cap);

/* Destroys worker and context. NULL is ignored. */
void wt_ucx_destroy(wt_ucx *u);

/* From any thread: makes a running or the next wt_ucx_wait return
 * CANCELLED, until wt_ucx_reset_cancel. */
void wt_ucx_cancel(wt_ucx *u);
void wt_ucx_reset_cancel(wt_ucx *u);

/* Default deadline of the waits that include setting up a connection and
 * the other side's start (init_info.ucx.connect_timeout_ms unset). */
#define WT_UCX_CONNECT_TIMEOUT_MS 10000

/* The packed transfer's settings when the init info leaves them unset, and
 * their bounds: the same on both sides. */
#define WT_UCX_DEFAULT_BUFFER_BYTES (64ull << 20)
#define WT_UCX_DEFAULT_NUM_BUFFERS 2u
/* A worker's UCX connections a round start tolerates before the engine
 * gives itself up (wt-server --engine-option ucx.max_peer_connections):
 * a trainer needs one or two; the rest are strangers' (docs/trust.md). */
#define WT_UCX_DEFAULT_MAX_PEER_CONNECTIONS 256u
#define WT_UCX_MAX_NUM_BUFFERS 64u

/* What both halves read of an init info: the ucx message's packing and
 * connect deadline, and options["ucx_connect"], checked once here. */
typedef struct wt_ucx_init_settings {
  uint64_t buffer_bytes;       /* packed_buffer_size_bytes, or the default */
  uint32_t num_buffers;        /* packed_num_buffers, or the default */
  uint32_t connect_timeout_ms; /* 0: unset (wt_ucx_connect_timeout_ms) */
  bool by_sockaddr;            /* options["ucx_connect"] == "sockaddr" */
} wt_ucx_init_settings;

/* Fills *out from `init` (whose ucx message may be absent: the defaults).
 * INVALID_ARGUMENT naming the field: a buffer size or connect deadline of
 * 0, buffers outside 1..WT_UCX_MAX_NUM_BUFFERS, a ucx_connect that is not
 * "address" or "sockaddr". */
wt_status *wt_ucx_init_settings_read(const Wt__V1__WeightTransferInitInfo *init,
                                     wt_ucx_init_settings *out);

/* The connect deadline: `configured` (init_info.ucx.connect_timeout_ms) when
 * > 0, else the larger of WT_UCX_CONNECT_TIMEOUT_MS and `timeout_ms` (the
 * per-wait deadline once data moves). */
int64_t wt_ucx_connect_timeout_ms(int64_t configured, int64_t timeout_ms);

/* Progresses until cond(arg) holds (NULL), the monotonic time passes
 * `deadline_ms` (DEADLINE_EXCEEDED "timed out after N ms waiting for
 * <what>"), or the wait is cancelled (CANCELLED naming <what>). */
wt_status *wt_ucx_wait(wt_ucx *u, bool (*cond)(void *), void *arg,
                       int64_t deadline_ms, int64_t timeout_ms,
                       const char *what);

/* What a tagged receive's completion reports. UCX 1.13.1 reports the length
 * of a message it had already taken in when the receive was posted (an
 * "unexpected" one) neither through recv_info on immediate completion (it
 * returns NULL and leaves recv_info untouched) nor through
 * ucp_tag_recv_request_test, so wt posts every receive through
 * wt_ucx_tag_recv, whose completion callback fills this. */
typedef struct wt_ucx_recv_note {
  bool done;
  ucs_status_t status;
  size_t length; /* bytes received (status UCS_OK) */
} wt_ucx_recv_note;

/* Posts a tagged receive of `count` items of `dt` at `buf` for exactly
 * `tag` (memh: a registration of buf, or NULL). Always returns a request
 * (UCP_OP_ATTR_FLAG_NO_IMM_CMPL) or an error pointer; its completion fills
 * *note, which must stay valid until the request completes or is freed
 * (UCX calls no callback after ucp_request_free). The caller frees the
 * request. */
void *wt_ucx_tag_recv(wt_ucx *u, void *buf, size_t count, ucp_datatype_t dt,
                      ucp_mem_h memh, ucp_tag_t tag, wt_ucx_recv_note *note);

/* The state of a request returned by a *_nbx call: UCS_OK when done (or
 * when `req` is NULL: completed in place), UCS_INPROGRESS, or an error. */
ucs_status_t wt_ucx_request_status(void *req);

/* Cancels `req` if still running, progresses up to `grace_ms` for it to
 * complete, and frees it. NULL and error pointers are ignored. */
void wt_ucx_request_drop(wt_ucx *u, void *req, int64_t grace_ms);

/* Closes `ep` (flushing when `flush`, else forcing) within `grace_ms`. */
void wt_ucx_ep_close(wt_ucx *u, ucp_ep_h ep, bool flush, int64_t grace_ms);

/* Registers [base, base + len) with u's context once (ucp_mem_map), so that
 * operations on it that pass the handle (ucp_request_param_t.memh) skip
 * per-operation registration; `cuda` says it is CUDA device memory (the
 * memory type is passed, not guessed). The caller owns *memh
 * (wt_ucx_mem_unmap). Errors name `what`. */
wt_status *wt_ucx_mem_map(wt_ucx *u, void *base, size_t len, bool cuda,
                          const char *what, ucp_mem_h *memh);

/* NULL when u's context moves CUDA device memory; otherwise
 * FAILED_PRECONDITION naming `who`, the UCX version and the memory types
 * it has, and what would give it CUDA (UCX 1.22 from libucx-cu13 with a
 * CUDA driver). */
wt_status *wt_ucx_need_cuda(const wt_ucx *u, const char *who);

/* Releases a handle of wt_ucx_mem_map. NULL is ignored. */
void wt_ucx_mem_unmap(wt_ucx *u, ucp_mem_h memh);

/* How many wt_ucx_mem_map calls succeeded in this process, for tests that
 * check memory is registered once rather than per round. */
uint64_t wt_ucx_mem_map_count(void);

/* host:port into a socket address (numeric or resolvable host);
 * INVALID_ARGUMENT naming the address when it does not resolve. */
wt_status *wt_ucx_sockaddr(const char *host, uint32_t port,
                           struct sockaddr_storage *ss, socklen_t *len);

/* Bytes of an init's secret (init_info.ucx.auth_secret). */
#define WT_UCX_SECRET_BYTES 32

/* The tag of bucket `bucket` of round `round_id` under an init's secret:
 * the first 8 bytes of HMAC-SHA-256(secret, round || bucket), so that a
 * process without the secret can neither match a message of a round nor
 * send one a worker would take. */
ucp_tag_t wt_ucx_tag(const uint8_t secret[WT_UCX_SECRET_BYTES],
                     uint64_t round_id, uint64_t bucket);

/* The bucket number a tag carries: bucket `bucket` (or
 * WT_UCX_ROUTE_BUCKET) of trainer rank `rank` of a shard plan's round
 * (docs/multirank.md), whose ranks send at once, each with its own bucket
 * plan; a round of one sender (ranked false) keeps the bucket as it is. */
uint64_t wt_ucx_rank_bucket(bool ranked, uint32_t rank, uint64_t bucket);

/* The init's secret: init_info.ucx.auth_secret (32 bytes), or, for a
 * backend built on the ucx engines that has no ucx message of its own (its
 * name is not "ucx"), init_info.options["ucx_auth_secret"] as 64 hex
 * digits. INVALID_ARGUMENT naming both when neither is there or right. */
wt_status *wt_ucx_init_secret(const Wt__V1__WeightTransferInitInfo *init,
                              uint8_t out[WT_UCX_SECRET_BYTES]);

/* The hello a connection to a worker's listener must send first, on UCX's
 * stream API: 8 bytes of magic and HMAC-SHA-256(secret, "wt-ucx-hello"). */
#define WT_UCX_HELLO_BYTES 40
void wt_ucx_hello(const uint8_t secret[WT_UCX_SECRET_BYTES],
                  uint8_t out[WT_UCX_HELLO_BYTES]);

/* Discards every message in the worker's unexpected queue (received into
 * nothing, so UCX drops it and a rendezvous is never fetched); returns how
 * many. For a worker whose every legitimate receive is posted: whatever is
 * left over is a stranger's. */
size_t wt_ucx_discard_unexpected(wt_ucx *u);

/* The route of a round: before its buckets, every worker the trainer (or a
 * worker forwarding to it) sends to receives one route message, tag
 * wt_ucx_tag(round, WT_UCX_ROUTE_BUCKET), listing the workers it forwards
 * the round's buckets to: none (parallel and sequential fan-out), or the
 * rest of the chain (pipelined chain fan-out: trainer -> w1 -> w2 -> ...;
 * w1 connects to the first hop, sends it the route less that hop, and
 * forwards every bucket once it has landed). */
#define WT_UCX_ROUTE_BUCKET 0xffffffffu
#define WT_UCX_ROUTE_MAX 16384      /* bytes of a route message, at most */
#define WT_UCX_ROUTE_HOPS 64        /* hops of a route, at most */
#define WT_UCX_ROUTE_BY_ADDRESS 1u  /* connect with the worker address */
#define WT_UCX_ROUTE_PEER_ERRORS 2u /* with peer-failure handling */

/* Delta rounds (docs/delta.md; wt/delta.h for the codec): a round whose
 * update info names a delta_base sends every bucket as a delta bucket, one
 * tagged message as a full bucket is: the bucket's raw bytes cut into
 * segments of WT_UCX_DELTA_SEGMENT_BYTES (the last shorter), each a
 * WT_UCX_DELTA_HEADER_BYTES header (little-endian u64 raw_len, u64
 * base_digest, u64 data_len) and data_len bytes: with base_digest 0 the
 * new bytes themselves (data_len == raw_len), else a zstd frame of new XOR
 * base, base_digest being the xxh3-64 of the base's bytes there, which the
 * worker checks before it applies the segment. The encoder sends raw
 * segments whenever the frame would not be smaller, so a delta bucket is
 * at most wt_ucx_delta_bound(raw) bytes. A chain hop forwards the message
 * as it received it and decodes it for itself. */
#define WT_UCX_DELTA_SEGMENT_BYTES (1u << 20)
#define WT_UCX_DELTA_HEADER_BYTES 24u

/* The largest delta bucket message for a bucket of `raw` bytes. */
uint64_t wt_ucx_delta_bound(uint64_t raw);

/* Writes / reads one segment header (WT_UCX_DELTA_HEADER_BYTES). */
void wt_ucx_delta_header_put(unsigned char *out, uint64_t raw_len,
                             uint64_t base_digest, uint64_t data_len);
void wt_ucx_delta_header_get(const unsigned char *in, uint64_t *raw_len,
                             uint64_t *base_digest, uint64_t *data_len);

/* One segment of a delta bucket, as wt_ucx_delta_walk hands it on:
 * bytes [pos, pos + raw_len) of the bucket, data[0..data_len) the raw
 * bytes (base_digest 0) or the zstd frame. */
typedef wt_status *(*wt_ucx_delta_segment_fn)(void *arg, uint64_t pos,
                                              uint64_t raw_len,
                                              uint64_t base_digest,
                                              const unsigned char *data,
                                              size_t data_len);

/* Walks the delta message msg[0..len) of a bucket of `raw` bytes, checking
 * each segment before `seg` sees it: its header is whole, it covers the
 * plan's next WT_UCX_DELTA_SEGMENT_BYTES (or the rest), its data lies in
 * the message, a raw segment holds exactly its bytes; and that nothing
 * follows the last. Stops at the first error, its own (INVALID_ARGUMENT
 * or DATA_LOSS naming `where` and the byte) or seg's. */
wt_status *wt_ucx_delta_walk(const unsigned char *msg, size_t len, uint64_t raw,
                             const char *where, wt_ucx_delta_segment_fn seg,
                             void *arg);

/* One worker of a route; `worker_address` borrowed (NULL: connect to
 * host:port through its listener). */
typedef struct wt_ucx_hop {
  uint64_t round;
  char host[256];
  uint32_t port;
  const unsigned char *worker_address;
  size_t worker_address_len;
} wt_ucx_hop;

/* Writes the route `flags` + hops[0..n) into buf[0..cap); returns its size,
 * or 0 when it does not fit (or n > WT_UCX_ROUTE_HOPS). */
size_t wt_ucx_route_pack(unsigned char *buf, size_t cap, uint32_t flags,
                         const wt_ucx_hop *hops, size_t n);

/* Reads a route message; hops[i].worker_address points into buf.
 * DATA_LOSS naming `who` when it is malformed. */
wt_status *wt_ucx_route_parse(const unsigned char *buf, size_t len,
                              const char *who, uint32_t *flags,
                              wt_ucx_hop *hops, size_t *n);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_UCX_SHARED_H */
