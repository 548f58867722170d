/* rpc_internal.h: what the parts of the RPC layer share. Private to
 * common/src/rpc_*.c.
 *
 *   rpc_server.c  the server: lifecycle, the polling thread, request slots,
 *                 admission classes and their handler-thread pools
 *   rpc_call.c    a call as its handler sees it (reads, writes, the status)
 *   rpc_stream.c  WT_RPC_WATCH streams, fed from any thread
 *   rpc_client.c  the client half
 */
#ifndef WT_RPC_INTERNAL_H
#define WT_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "wt/clock.h"
#include "wt/rpc.h"

#include "wt/visibility.h"
#include "wt/lock.h"
#define RPC_MOD "rpc"

/* Fills args[0] and args[1] with the receive and send message limits (0: the
 * layer's default; -1: unlimited, as gRPC reads it). Returns the number of
 * args written, 2. */
static inline size_t wt_rpc_message_limit_args(grpc_arg *args, int max_receive,
                                               int max_send) {
  memset(args, 0, 2 * sizeof(*args));
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer =
      max_receive == 0 ? WT_RPC_DEFAULT_MAX_RECEIVE_BYTES : max_receive;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer =
      max_send == 0 ? WT_RPC_DEFAULT_MAX_SEND_BYTES : max_send;
  return 2;
}

typedef enum rpc_tag_kind {
  TAG_REQUEST,      /* a registered-method slot: a call arrived (or shutdown) */
  TAG_READ,         /* an authorized call's request message arrived */
  TAG_GENERIC,      /* the catch-all slot: an unknown method */
  TAG_REJECT,       /* a call answered by the polling thread itself finished */
  TAG_CALL_OP,      /* a handler's batch completed */
  TAG_CALL_CLOSE,   /* a call's RECV_CLOSE_ON_SERVER completed */
  TAG_CALL_STATUS,  /* a call's status (and response) went out */
  TAG_STREAM_SEND,  /* a stream's message (or status) went out */
  TAG_STREAM_CLOSE, /* a stream's RECV_CLOSE_ON_SERVER completed */
  TAG_SHUTDOWN,     /* grpc_server_shutdown_and_notify completed */
} rpc_tag_kind;

typedef struct rpc_tag {
  rpc_tag_kind kind;
  void *owner;
} rpc_tag;

typedef enum rpc_state {
  STATE_NEW,
  STATE_RUNNING,
  STATE_SHUTTING_DOWN,
  STATE_DONE,
} rpc_state;

/* One admission class: its limits, its queue of calls waiting for a thread,
 * and its threads. Under the server's mu. */
/* What one peer holds of one admission class (max_per_peer). Under the
 * server's mu; freed when it holds nothing. */
typedef struct rpc_peer {
  struct rpc_peer *next;
  size_t cls;
  int held;
  char key[80]; /* "uid:1000", "ip:10.0.0.5" */
} rpc_peer;

/* The listening sockets and their connections (rpc_listener.c). */
typedef struct rpc_listener rpc_listener;
/* A server's TLS (rpc_relay.c). */
typedef struct rpc_tls_server rpc_tls_server;

typedef struct rpc_pool {
  wt_rpc_class cfg;
  size_t index;
  wt_rpc_server *server;
  int running;     /* calls in a handler (or streams open) */
  int queued;      /* calls waiting for a thread */
  int parked;      /* calls waiting for another party, without a thread */
  int queue_floor; /* the queue admits at least this many (0: cfg's) */
  int idle;        /* threads waiting for a call */
  /* Threads sending the status of a call they handled: about to take the
   * next call, so no new thread is started for it. */
  int finishing;
  uint64_t refused; /* calls refused for want of room, since start */
  int peers;        /* peers holding some of its room (rpc_peer entries) */
  wt_rpc_call *head, *tail;
  pthread_cond_t work_cv;
  pthread_t *threads;
  int nthreads;
} rpc_pool;

struct wt_rpc_server {
  const wt_rpc_method *methods;
  size_t n_methods;
  void **registered; /* grpc_server_register_method handles, per method */
  void *user;
  char *listen;
  int requests_per_method;
  void (*on_shutdown)(void *user);
  rpc_pool *pools;
  size_t trainer_class; /* the class with wt_rpc_class.trainers; SIZE_MAX */
  size_t npools;

  grpc_server *server;
  grpc_completion_queue *cq;
  int port;
  pthread_t poller;
  bool poller_started;
  rpc_tag shutdown_tag;

  wt_mutex mu;       /* guards everything below, and the pools */
  pthread_cond_t cv; /* shutdown_notified, a pool's load changed */
  rpc_state state;
  bool shutdown_notified;
  bool pools_quit;

  /* Authentication: borrowed tokens, TLS file paths (copied), counters. */
  const wt_token *tokens;
  size_t ntokens;
  char *tls_cert, *tls_key, *tls_ca;
  int max_concurrent_streams, max_metadata_bytes, handshake_timeout_ms;
  int max_connections, auth_grace_ms, idle_ms;
  rpc_listener *listener;
  rpc_tls_server *tls; /* TLS servers */
  atomic_uint_fast64_t unauthenticated, denied;
  rpc_peer *peers; /* under mu */
  int max_reads;
  int64_t max_held_bytes;
  /* Polling thread only: requests being read, and those waiting their
   * turn (rpc_server.c's request_read). */
  int reads, read_waiting;
  struct request_read *read_head, *read_tail;
  atomic_int_fast64_t held_bytes; /* requests held by admitted calls */
  int64_t auth_log_ms; /* polling thread only: the last refusal logged */
  uint64_t auth_unlogged;
};

struct wt_rpc_call {
  wt_rpc_server *server;
  const wt_rpc_method *method;
  rpc_pool *pool;
  grpc_call *call;
  gpr_timespec deadline; /* GPR_CLOCK_MONOTONIC */
  char *peer;            /* gpr_malloc'd */
  ProtobufCMessage *request;
  grpc_byte_buffer *response;
  rpc_peer *peer_slot; /* its place in its peer's quota, or NULL */
  uint32_t scope;      /* WT_SCOPE_*: what authorization granted its caller */
  int64_t held_bytes;  /* its request's share of server->held_bytes */
  rpc_tag op_tag;
  rpc_tag close_tag;
  rpc_tag status_tag;
  grpc_slice status_details; /* kept until the status batch completes */
  atomic_int status_code;    /* a wt_code: read on the polling thread */
  /* One for the pool (dropped once the status is on its way), one for the
   * RECV_CLOSE_ON_SERVER batch and one for the status batch (each dropped
   * when it completes). */
  atomic_int refs;
  atomic_bool cancelled;

  wt_mutex mu; /* batch starts, op_done, op_ok */
  pthread_cond_t cv;
  bool op_done;
  int op_ok;
  int close_cancelled;        /* written by gRPC for RECV_CLOSE_ON_SERVER */
  bool initial_metadata_sent; /* handler thread only */

  wt_mutex cb_mu; /* cancel_fn, cancel_arg */
  void (*cancel_fn)(void *arg);
  void *cancel_arg;

  wt_rpc_call *next; /* in its pool's queue */
  /* A parked call's continuation (wt_rpc_call_resume), run instead of the
   * method's handler when a thread takes it. */
  wt_rpc_resume_fn resume_fn;
  void *resume_arg;
};

/* A deadline that many ms from now. */
WT_HIDDEN gpr_timespec rpc_deadline_after_ms(int64_t ms);
WT_HIDDEN const char *rpc_kind_name(wt_rpc_kind kind);

/* A status message as gRPC can carry it (long ones cut in the middle). */
WT_HIDDEN grpc_slice rpc_status_details(const char *msg);
/* Whether the server began shutting down. */
static inline bool rpc_server_stopping(wt_rpc_server *s) {
  wt_mutex_lock(&s->mu);
  bool stopping = s->state >= STATE_SHUTTING_DOWN;
  wt_mutex_unlock(&s->mu);
  return stopping;
}

/* --- rpc_listener.c ------------------------------------------------------- */

/* The connection cap `max_connections` (0: the default) leaves under the
 * descriptor limit, which goes to *nofile (may be NULL). */
WT_HIDDEN int rpc_listener_budget(int max_connections, int per_connection,
                                  int *nofile);
/* Binds `listen` and starts accepting onto the started server `gs`: TLS
 * with `tls` (borrowed; must outlive the listener), plaintext when NULL.
 * The caller owns *out (rpc_listener_destroy). A busy or invalid address
 * is UNAVAILABLE naming it; a descriptor limit with no room
 * FAILED_PRECONDITION. */
WT_HIDDEN wt_status *rpc_listener_start(grpc_server *gs, const char *listen,
                                        rpc_tls_server *tls,
                                        int max_connections, int grace_ms,
                                        int handshake_ms, rpc_listener **out,
                                        int *port);
/* Stops accepting: no connection is handed to gRPC from here, and the
 * listening sockets close (within a tick). Open connections stay gRPC's;
 * TLS ones are still relayed until rpc_listener_destroy, so calls in
 * flight can finish. Idempotent. */
WT_HIDDEN void rpc_listener_stop(rpc_listener *l);
/* Stops, joins the thread, closes what is left and frees; NULL is
 * ignored. */
WT_HIDDEN void rpc_listener_destroy(rpc_listener *l);
/* The connection gRPC names `grpc_peer` ("fd:N") made an authorized call of
 * `scope`. l may be NULL. */
WT_HIDDEN void rpc_listener_authorized(rpc_listener *l, const char *grpc_peer,
                                       uint32_t scope);
/* Takes `grpc_peer` (gpr_malloc'd) and returns the peer's address in its
 * place ("ipv4:127.0.0.1:5555", gpr_malloc'd) when it names one of l's
 * connections, else grpc_peer itself. l may be NULL. */
WT_HIDDEN char *rpc_listener_peer(rpc_listener *l, char *grpc_peer);
WT_HIDDEN void rpc_listener_counts(rpc_listener *l, wt_rpc_conn_counts *out);
/* The quota key of the connection gRPC names `grpc_peer` (see rpc_peer),
 * worked out on its first use and kept; false when l does not know it. */
WT_HIDDEN bool rpc_listener_peer_key(rpc_listener *l, const char *grpc_peer,
                                     char *key, size_t n);

/* --- rpc_peer.c: peers and their shares ----------------------------------- */

/* A place in `key`'s share of class `cls` (wt_rpc_class.max_per_peer: a
 * fair share of the class's room among the peers holding some, never below
 * the configured floor); NULL when its share is full (*held: what it holds,
 * *limit: its share now; *held -1: out of memory). Under s->mu. */
WT_HIDDEN rpc_peer *rpc_peer_take_locked(wt_rpc_server *s, const char *key,
                                         size_t cls, int *held, int *limit);
/* A peer leaves its place in a class (slot may be NULL). Under s->mu. */
WT_HIDDEN void rpc_peer_release_locked(wt_rpc_server *s, rpc_peer *slot);
/* grpc_call_get_peer, with the address for a connection the listener
 * accepted (gpr_malloc'd). */
WT_HIDDEN char *rpc_server_peer(wt_rpc_server *s, grpc_call *call);
/* The quota key of the call's peer (see rpc_peer). */
WT_HIDDEN void rpc_server_peer_key(wt_rpc_server *s, grpc_call *call, char *key,
                                   size_t n);

/* --- rpc_relay.c: TLS terminated by wt ------------------------------------ */

/* A server's TLS: certificate chain, key and (mutual TLS) the clients' CA,
 * from the files in `tls` (read without blocking; errors name the option
 * and the file). The caller owns *out (rpc_tls_server_free). */
WT_HIDDEN wt_status *rpc_tls_server_new(const wt_rpc_tls *tls,
                                        rpc_tls_server **out);
WT_HIDDEN void rpc_tls_server_free(rpc_tls_server *t);

/* One connection's TLS, relayed to gRPC as plaintext over a socketpair.
 * The relay owns neither descriptor. rpc_relay_pump never blocks: it
 * moves at most `budget` bytes each way and says which events each
 * descriptor waits for (level-triggered). */
typedef struct rpc_relay rpc_relay;
enum {
  RPC_RELAY_HANDSHAKE, /* handshaking; wait for *net_events */
  RPC_RELAY_READY,     /* the handshake is done: attach the pair, pump again */
  RPC_RELAY_OPEN,      /* relaying; wait for the events */
  RPC_RELAY_AGAIN,     /* the budget ran out: pump again soon */
  RPC_RELAY_DONE,      /* over; *why is NULL or what failed (the relay's) */
};
/* NULL when out of memory. */
WT_HIDDEN rpc_relay *rpc_relay_new(rpc_tls_server *t, int net_fd);
WT_HIDDEN void rpc_relay_attach(rpc_relay *r, int pair_fd);
WT_HIDDEN bool rpc_relay_handshaken(const rpc_relay *r);
WT_HIDDEN int rpc_relay_pump(rpc_relay *r, size_t budget, uint32_t *net_events,
                             uint32_t *pair_events, const char **why);
WT_HIDDEN void rpc_relay_free(rpc_relay *r);

/* --- rpc_tls.c ------------------------------------------------------------ */

/* The PEM file `path` (for `what`: "--tls-cert") as a NUL-terminated string
 * the caller frees; errors name the option and the file. */
WT_HIDDEN wt_status *rpc_read_pem(const char *what, const char *path,
                                  char **out);
/* Channel credentials for `tls` (NULL: insecure). */
WT_HIDDEN wt_status *rpc_channel_credentials(const wt_rpc_tls *tls,
                                             grpc_channel_credentials **out);
/* The scope the call's "authorization: Bearer" token grants among
 * tokens[0..n) (0: none); *presented says whether it carried one. */
WT_HIDDEN uint32_t rpc_token_scope(const wt_token *tokens, size_t n,
                                   const grpc_metadata_array *md,
                                   bool *presented);

/* --- rpc_call.c ----------------------------------------------------------- */

/* A call of `m` accepted on the polling thread (takes over `call`, `peer`
 * and `request`), with its RECV_CLOSE_ON_SERVER batch started; `scope` is
 * what authorization granted its caller. NULL when out of memory (the
 * caller rejects the call). */
WT_HIDDEN wt_rpc_call *rpc_call_new(wt_rpc_server *s, const wt_rpc_method *m,
                                    rpc_pool *pool, grpc_call *call,
                                    gpr_timespec deadline, uint32_t scope,
                                    ProtobufCMessage *request);
/* Runs the call's handler on a pool thread and returns its status (the
 * caller's); then rpc_call_finish sends it without waiting and drops the
 * pool's reference. The pool frees the call's place in between, so the
 * place is free before the reply goes out. */
WT_HIDDEN wt_status *rpc_call_handle(wt_rpc_call *c);
WT_HIDDEN void rpc_call_finish(wt_rpc_call *c, wt_status *st);
/* Completions, on the polling thread. */
WT_HIDDEN void rpc_call_on_op(wt_rpc_call *c, int ok);
WT_HIDDEN void rpc_call_on_close(wt_rpc_call *c);
WT_HIDDEN void rpc_call_on_status(wt_rpc_call *c, int ok);

/* --- rpc_stream.c --------------------------------------------------------- */

/* A WT_RPC_WATCH call accepted on the polling thread (takes over `call`;
 * `request` is freed here): opens the stream through the method's `open`.
 * Counts in the pool until the call is over. */
WT_HIDDEN void rpc_stream_accept(wt_rpc_server *s, const wt_rpc_method *m,
                                 rpc_pool *pool, grpc_call *call,
                                 ProtobufCMessage *request,
                                 rpc_peer *peer_slot);
/* Completions, on the polling thread. */
WT_HIDDEN void rpc_stream_on_send(wt_rpc_stream *st, int ok);
WT_HIDDEN void rpc_stream_on_close(wt_rpc_stream *st);

#endif /* WT_RPC_INTERNAL_H */
