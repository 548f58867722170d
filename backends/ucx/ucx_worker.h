/* ucx_worker.h: what the files of the `ucx` worker engine share
 * (built with WT_WITH_UCX; see ucx_worker.c for the engine as a whole):
 *
 *   ucx_worker.c  the engine's table: create, init (listener, registered
 *                 staging memory), the round's bucket receives
 *   ucx_worker_conn.c the trainer's connections, and a failed round's stray
 *                 receives that must end before the next round writes
 *   ucx_worker_chain.c chain fan-out: the round's route and forwarding each
 *                 landed bucket to the next worker
 */
#ifndef WT_UCX_ENGINE_INTERNAL_H
#define WT_UCX_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "wt/engine.h"
#include "wt/packing.h"
#include "backends/ucx/ucx_shared.h"

#include "wt/visibility.h"

/* How long an abort waits for a posted receive to give up its buffers. */
#define UCX_GRACE_MS 1000
/* How long a failed receive waits for its cancelled bucket receives to end
 * before it returns (and its round fails everywhere): short, since one UCX
 * has matched already is kept as a stray, which the next round waits for
 * (wt_ucxe_check_strays). */
#define UCX_SETTLE_MS 100
/* How long every trainer connection must stay broken before a receive gives
 * up on the trainer (see wt_ucxe_recv_done). */
#define UCX_PEER_GONE_MS 1000
/* How long an abort spends discarding a failed round's leftover buckets. */
#define UCX_DRAIN_MS 500

/* How long a new connection to the listener has to send its hello
 * (wt_ucx_hello) before it is closed, and how many may be waiting to at
 * once; past that, new connections are refused until one proves itself or
 * its time is up. Strangers thus never take a trainer's place. */
#define UCX_HELLO_MS 2000
#define UCX_MAX_PENDING 16
/* Of those, from one client address. Past either limit a new connection
 * takes the place of the oldest one owing its hello (of its address, or of
 * all): a trainer's connection sends its hello at once, so strangers that
 * never do cannot keep it out. */
#define UCX_MAX_PENDING_PER_ADDR 8
/* Connection slots of a worker. A connection that made room for a newer
 * one keeps its slot until it is closed, outside UCX's callbacks, and a
 * burst of connection requests is handled inside one progress call: 64
 * strangers arriving at once filled 64 slots and the trainer's request
 * behind them was refused ("a trainer behind strangers on a listener").
 * The slots absorb a burst this large; a larger one between two progress
 * calls still refuses a newcomer (docs/trust.md, row 4). */
#define UCX_MAX_PEERS 1024

/* A connection from the trainer (normally one per init), or one still
 * owing its hello. */
typedef struct peer {
  bool used; /* slot holds a connection (closed broken ones are reused) */
  ucp_ep_h ep;
  bool failed;
  ucs_status_t why;
  uint64_t gen;    /* proved itself as the engine's gen-th connection */
  bool authed;     /* sent the init's hello */
  void *close_req; /* a stranger being closed: the slot waits for it */
  bool closing;
  void *hello_req; /* the stream receive of the hello, while pending */
  size_t hello_len;
  int64_t hello_deadline_ms;
  bool evicted;  /* owing its hello, it made room for a newer one */
  char addr[64]; /* the client's address, "?" when UCX cannot say */
  uint8_t hello[WT_UCX_HELLO_BYTES];
} peer;

/* One posted bucket receive. */
typedef struct slot {
  void *req;
  wt_ucx_recv_note *note; /* malloc'd with the request, freed with it */
  size_t bucket;
  uint32_t rank;     /* a shard plan's round: the sending trainer rank */
  ucp_dt_iov_t *iov; /* into the round's iov array, at the bucket's first */
  size_t iovcnt;
  /* A delta round's bucket: received into dmsg (the engine's bounce
   * buffer), dlen bytes once landed; NULL: straight into staging. */
  unsigned char *dmsg;
  size_t dlen;
} slot;

struct wt_engine {
  wt_worker_ctx ctx;
  uint64_t buffer_bytes;
  uint32_t num_buffers;
  size_t nslots; /* the running receive's bucket receives: one per bucket */
  /* The route wait's deadline (init_info.ucx.connect_timeout_ms); 0: the
   * default, WT_UCX_CONNECT_TIMEOUT_MS or the bucket deadline if larger. */
  int64_t connect_timeout_ms;
  char *transports;
  bool listen; /* options["ucx_connect"] = "sockaddr": open a listener */
  bool transports_from_server; /* not the init info's: the server default */
  uint8_t secret[WT_UCX_SECRET_BYTES]; /* init_info.ucx.auth_secret */
  uint8_t hello[WT_UCX_HELLO_BYTES];   /* what a connection must send */
  uint64_t refused; /* connections refused: too many owing a hello */
  /* The ports this engine's UCX worker listens on (its TCP transport, its
   * listener), and how many connections to them a round start tolerates
   * before the engine gives itself up (ucx.max_peer_connections). */
  uint16_t own_ports[16];
  size_t nown;
  uint32_t max_peers;
  uint64_t rejected; /* connections closed: no or a wrong hello */
  uint64_t evicted;  /* of those, closed to make room for a newer one */
  wt_ucx *ucx;
  ucp_listener_h listener;
  peer *peers;
  size_t npeers, cap;
  char where[64];        /* "worker N" for messages */
  int64_t gone_since_ms; /* every trainer connection broken since; 0: no */
  /* Strangers counted during a round too (trust row 10): the last count's
   * time, and how many it found past max_peers (0: none). */
  int64_t peers_checked_ms;
  size_t peers_over;
  void **orphans; /* buffers UCX may still write (a stray round's); freed at
                     destroy */
  size_t norphans;
  /* Bucket receives of a failed round that UCX had matched and that neither
   * finished nor failed (see settle_receives): UCX may still write through
   * them into the staging buffers, so no round starts while one is left. */
  slot *strays; /* req and note of each; the rest unused */
  size_t nstrays;
  uint64_t round_id; /* the round in progress, from start_update */
  uint64_t stray_round;
  uint64_t conns;          /* connections accepted so far */
  uint64_t stray_mark;     /* conns when the strays were left */
  size_t stray_bucket;     /* the first of them, for messages */
  ucp_dt_iov_t *stray_iov; /* their iov arrays, which UCX reads until then */
  /* Chain fan-out (ucx_shared.h): the round's route and the connection
   * to the next worker, which gets every bucket once it has landed. */
  unsigned char *route_in, *route_out;
  wt_ucx_hop *hops;
  peer fwd; /* kept across rounds while the route stays the same */
  uint32_t fwd_flags;
  uint64_t fwd_addr_id; /* digest of its worker address (0: by listener) */
  char next[320];       /* "the next worker in the chain (HOST:PORT)" */
  /* The store's regions, registered once at init_transfer. */
  wt_param_region regions[WT_PARAM_STORE_MAX_REGIONS];
  ucp_mem_h memh[WT_PARAM_STORE_MAX_REGIONS];
  size_t nregions;
  /* The store is CUDA device memory: registered and moved as such (the
   * init refused a UCX that cannot), every bucket one contiguous run. */
  bool cuda;
  /* Delta rounds (ucx_worker_delta.c, docs/delta.md). hashing: this round
   * covers the (host) store and the trainer asked for its digest
   * (update_info.ucx.digest), the base a later delta names. A delta round
   * receives its buckets into dbuf (dcap bytes, kept across rounds: the
   * model's size plus the segment headers) and decodes each segment
   * through dscratch and dbase. */
  bool hashing;
  struct wt_delta_hasher *hash;
  struct wt_delta_codec *codec;
  unsigned char *dbuf, *dscratch, *dbase;
  size_t dcap;
};

typedef struct wait_arg {
  wt_engine *e;
  void *req;
} wait_arg;

/* Gives a slot's request back to UCX (which calls no callback after this)
 * and frees its note. */
WT_HIDDEN void wt_ucxe_slot_release(slot *s);

/* The registration covering [buf, buf + len), or NULL. */
WT_HIDDEN ucp_mem_h wt_ucxe_memh_of(const wt_engine *e, const void *buf,
                                    size_t len);

WT_HIDDEN void wt_ucxe_peer_error(void *arg, ucp_ep_h ep, ucs_status_t status);

/* Accepts the trainer's connection; runs inside ucp_worker_progress. The
 * peer array never moves (error callbacks hold a pointer into it), so it is
 * allocated at its final capacity and slots of closed connections are
 * reused (wt_ucxe_reap_peers). */
WT_HIDDEN void wt_ucxe_on_conn(ucp_conn_request_h req, void *arg);

/* Discards the unexpected messages left from an aborted round (buckets the
 * trainer sent after this worker stopped receiving), so that they neither
 * pile up nor hold the trainer's old connection. */
WT_HIDDEN void wt_ucxe_drain_unexpected(wt_engine *e);

/* Closes the broken trainer connections (outside UCX callbacks) and frees
 * their slots; settles the hellos (wt_ucxe_check_hellos). */
WT_HIDDEN void wt_ucxe_reap_peers(wt_engine *e);

/* Marks the connections whose hello arrived and matches as the trainer's;
 * closes (without waiting) those whose hello is wrong, failed or late.
 * Outside UCX callbacks; every wait of the engine runs it. */
WT_HIDDEN void wt_ucxe_check_hellos(wt_engine *e);

/* The error of a broken trainer connection, for messages. */
WT_HIDDEN ucs_status_t wt_ucxe_last_error(const wt_engine *e);

/* A wait also ends once every trainer connection has been broken for
 * UCX_PEER_GONE_MS: not at the first error, because after a failed round the
 * trainer replaces its endpoints and the new connection may come in after
 * the old one's error. A trainer connected by worker address leaves no
 * connection here; the deadline alone bounds that wait. */
WT_HIDDEN bool wt_ucxe_recv_done(void *arg);

/* Waits up to timeout_ms for the receive `req` of `what` (wt_ucxe_recv_done
 * ends it early once the trainer is gone); errors name the worker, `what`,
 * and whether the trainer's connection broke. */
WT_HIDDEN wt_status *wt_ucxe_wait_recv(wt_engine *e, void *req,
                                       int64_t timeout_ms, const char *what);

/* Ends the bucket receives a failed round left posted, so that nothing of
 * that round lands in the staging buffers later (when the next round, or
 * readers, own them). A receive UCX has not matched yet is cancelled. One
 * it has matched (the trainer had begun sending the bucket) cannot be
 * cancelled: UCX keeps writing as the rest of the bucket arrives (over TCP
 * the sender's puts land whatever became of the request), which a stalled
 * trainer or a cut link may deliver seconds later. Such a receive is kept in
 * e->strays, together with the iov arrays UCX reads, and the next round
 * first waits for it to end (wt_ucxe_check_strays): the bucket completes, or
 * fails once UCX sees the trainer's connection break. (Closing the connection
 * here instead would end it at once, but UCX 1.13's TCP transport can then
 * trip an assertion over a put in flight and abort the process.) Takes
 * *iov_all when it keeps strays. */
WT_HIDDEN void wt_ucxe_settle_receives(wt_engine *e, slot *slots,
                                       uint64_t round_id,
                                       ucp_dt_iov_t **iov_all);

/* Waits up to `timeout` ms for the strays to end and frees them; fails,
 * naming the bucket, if one is still going (or the wait is cancelled).
 * Once the trainer has connected anew, the connections the strays came
 * through are obsolete (the trainer closed its ends before reconnecting,
 * though over a cut link this side may not hear of it for seconds): they
 * are closed, so that nothing more arrives through them, and the strays
 * are released to UCX. */
WT_HIDDEN wt_status *wt_ucxe_check_strays(wt_engine *e, int64_t timeout);

/* Receives the round's route (ucx_shared.h) into e->hops. */
/* A shard plan's round (u->nranks ranks): every rank's route message,
 * all posted before the first wait; each must name no hop (such a round
 * fans out in parallel). */
WT_HIDDEN wt_status *wt_ucxe_recv_routes_ranked(wt_engine *e,
                                                const wt_update *u,
                                                int64_t timeout);
WT_HIDDEN wt_status *wt_ucxe_recv_route(wt_engine *e, const wt_update *u,
                                        int64_t timeout, uint32_t *flags,
                                        size_t *nhops);

/* Connects to the route's first hop and sends it the rest of the route. */
WT_HIDDEN wt_status *wt_ucxe_fwd_start(wt_engine *e, uint32_t flags,
                                       size_t nhops, void **route_req);

/* Forwards landed bucket `s` to the next worker, from the staging buffers. */
WT_HIDDEN wt_status *wt_ucxe_fwd_bucket(wt_engine *e, const slot *s,
                                        void **req);

/* Waits for the forwarded sends (reqs[0..n)) and frees them. */
WT_HIDDEN wt_status *wt_ucxe_fwd_finish(wt_engine *e, void **reqs, size_t n,
                                        int64_t timeout);

/* --- ucx_worker_socks.c: strangers' connections (docs/trust.md, row 6)
 * --------- */

/* The TCP ports this process listens on, up to `cap` of them into
 * ports[]; returns how many. */
WT_HIDDEN size_t wt_ucxe_listening_ports(uint16_t *ports, size_t cap);
/* This process's established TCP connections whose local port is one of
 * ports[0..n): the peers connected to those listeners; SIZE_MAX when the
 * process has no descriptor left to look with. */
WT_HIDDEN size_t wt_ucxe_count_peers(const uint16_t *ports, size_t n);

/* ---- delta rounds (ucx_worker_delta.c) ---- */

/* Readies a delta round of `u` under `plan`: the receive buffer dbuf
 * (grown to the plan's delta bound: bucket b at the sum of the earlier
 * buckets' wt_ucx_delta_bound), the codec; FAILED_PRECONDITION for a device
 * store (delta rounds decode on the host). */
WT_HIDDEN wt_status *wt_ucxe_delta_prepare(wt_engine *e, const wt_update *u,
                                           const wt_pack_plan *plan);
/* Checks and applies landed delta bucket `s` (s->dmsg[0..s->dlen)): every
 * segment's framing and bounds, its frame's claimed size and its base's
 * digest against the committed bytes, before its bytes are written into
 * staging; feeds the new bytes to the round's digest. */
WT_HIDDEN wt_status *wt_ucxe_delta_land(wt_engine *e, const wt_update *u,
                                        const wt_pack_plan *plan,
                                        const slot *s);
/* Feeds landed full bucket `s` (its staging runs) to the round's digest. */
WT_HIDDEN void wt_ucxe_hash_bucket(wt_engine *e, const slot *s);
/* Frees the delta state. */
WT_HIDDEN void wt_ucxe_delta_free(wt_engine *e);

#endif /* WT_UCX_ENGINE_INTERNAL_H */
