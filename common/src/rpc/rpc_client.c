/* rpc_client.c: the client half of the RPC layer (see wt/rpc.h).
 *
 * Each call owns a completion queue of the pluck kind, so a call is waited
 * for on the caller's own thread and calls never share a polling thread. A
 * call keeps one batch holding GRPC_OP_RECV_STATUS_ON_CLIENT outstanding from
 * its start; that batch ends when the call ends for any reason, and is
 * plucked (after a cancel if need be) before the queue is destroyed.
 *
 * Every wait ends by the call's deadline (or its cancel) plus
 * WT_RPC_DEADLINE_GRACE_MS, whatever gRPC does. gRPC 1.51 ends a call at its
 * deadline, but holds the completion of a batch that sends while its
 * transport's write to the socket is unfinished (chttp2's run_after_write),
 * and a server that stopped reading holds that write until the connection
 * dies: at TCP_USER_TIMEOUT, or never while its kernel answers the probes
 * of a shut window and no user timeout is set. Past the grace the channel's
 * connections are shut down (the socket mutator below knows their
 * sockets), which fails that write, so gRPC lets go of the call and of the
 * bytes it was sending; a call whose batch it still holds a moment later is
 * handed to a thread of its own, which waits for gRPC and frees it, so that
 * nothing gRPC may still write into is freed under it.
 */

#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/sync.h>
#include <grpc/support/time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wt/clock.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/lock.h"

#include "rpc_internal.h"

/* Tags: each call has its own queue, so small constants are unique. */
#define TAG_STATUS ((void *)(intptr_t)1)
#define TAG_SEND ((void *)(intptr_t)2)
#define TAG_WRITE ((void *)(intptr_t)3)
#define TAG_FINISH ((void *)(intptr_t)4)
#define TAG_READ ((void *)(intptr_t)5)
#define TAG_UNARY ((void *)(intptr_t)6)
#define TAG_BIT(tag) (1u << (unsigned)(intptr_t)(tag))
#define ALL_TAGS 7

/* How long a wait blocks before it looks again at a cancel made by another
 * thread. */
#define WAIT_SLICE_MS 100
/* After the channel's connections were shut down under a held batch, how
 * long gRPC gets to let go of it before a thread of its own waits. */
#define HELD_WAIT_MS 200
/* Client sockets a channel remembers (it has one at a time; more while one
 * is replaced). */
#define MAX_CONN_SOCKS 8

typedef struct tcp_mutator tcp_mutator;

struct wt_rpc_channel {
  char *target;
  grpc_channel *channel;
  int64_t default_deadline_ms;
  grpc_metadata auth;       /* "authorization: Bearer ..." */
  size_t nmd;               /* 1 with a token, else 0 */
  int keepalive_timeout_ms; /* the pings' answer deadline; 0: no keepalive */
  int tcp_user_timeout_ms;  /* set on its sockets; 0: gRPC's own */
  tcp_mutator *mutator;     /* our reference; NULL: gRPC's own sockets */
};

/* What gRPC 1.51 says when a keepalive ping went unanswered. */
#define KEEPALIVE_WATCHDOG_DETAILS "keepalive watchdog timeout"
/* What it says when the kernel dropped the connection at
 * TCP_USER_TIMEOUT (ETIMEDOUT on the socket). */
#define USER_TIMEOUT_DETAILS "Connection timed out"

/* What every kind of client call shares: the first member of each, so that
 * a call handed to its own thread is freed through it. */
typedef struct client_call {
  wt_rpc_channel *ch; /* not touched once the call is handed off */
  char *method;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array initial_metadata;
  grpc_metadata_array trailing_metadata;
  grpc_status_code status;
  grpc_slice details;
  void *status_tag;     /* the batch that holds RECV_STATUS_ON_CLIENT */
  unsigned outstanding; /* TAG_BITs of batches started and not plucked */
  bool status_received;
  /* Everything a started batch sends or receives lives here, so that it
   * outlives a batch gRPC holds. */
  grpc_byte_buffer *send_bb;
  grpc_byte_buffer *recv_bb;
  int64_t deadline_ms;       /* relative, as resolved; < 0: none */
  int64_t give_up_ms;        /* wt_mono_ms() a wait ends by; INT64_MAX */
  _Atomic int64_t cancel_ms; /* wt_mono_ms() of the first cancel; 0 */
  /* What gRPC held past the grace ("write", ...); the call is abandoned:
   * no batch starts any more, and its errors say so. */
  const char *held;
  bool severed; /* the channel's connections were shut down for it */
} client_call;

struct wt_rpc_pending {
  client_call cc;
  const ProtobufCMessageDescriptor *type;
  bool done;
};

struct wt_rpc_client_stream {
  client_call cc;
  bool finished;
};

struct wt_rpc_server_stream {
  client_call cc;
  bool done;
};

/* ---- TCP's user timeout ---------------------------------------------------
 *
 * gRPC 1.51 sets TCP_USER_TIMEOUT on a client's socket to the keepalive
 * timeout, so one number would decide both how long a server process may
 * leave a ping unanswered (a loaded one: many seconds) and how long the link
 * may leave sent bytes unacknowledged (a cut one: the sooner the better).
 * Its C API takes no other value, but on the client it applies a
 * GRPC_ARG_SOCKET_MUTATOR after its own socket options
 * (grpc_tcp_client_prepare_fd: grpc_set_socket_tcp_user_timeout, then
 * grpc_apply_socket_mutator_in_args), so the channel's mutator sets the
 * channel's own value, and remembers the socket so that a wait gRPC holds
 * past its deadline can shut it down.
 *
 * No installed header declares the mutator (src/core/lib/iomgr/
 * socket_mutator.h). Its layout below is gRPC 1.51.1's, read in that
 * header and checked against Debian 12's libgrpc.so.29 (1.51.1-3):
 * grpc_socket_mutator_init stores the vtable at offset 0 and the
 * gpr_refcount at 8; grpc_socket_mutator_mutate_fd calls the vtable's
 * mutate_fd_2 at offset 24 with {fd, usage}; grpc_socket_mutator_unref
 * calls destroy at 16. It is used only when grpc_version_string() is one
 * so checked (MUTATOR_LAYOUT_VERSIONS); any other gRPC keeps its own
 * sockets, and each channel says so once. */

#define MUTATOR_LAYOUT_VERSIONS "29.0.0" /* gRPC 1.51.x's core */
#define FD_CLIENT_CONNECTION_USAGE 0     /* grpc_fd_usage */

typedef struct mutate_socket_info { /* grpc_mutate_socket_info */
  int fd;
  int usage;
} mutate_socket_info;

typedef struct mutator_vtable { /* grpc_socket_mutator_vtable */
  bool (*mutate_fd)(int fd, tcp_mutator *m);
  int (*compare)(tcp_mutator *a, tcp_mutator *b);
  void (*destroy)(tcp_mutator *m);
  bool (*mutate_fd_2)(const mutate_socket_info *info, tcp_mutator *m);
} mutator_vtable;

/* A client socket as the mutator saw it: its number may name another file
 * later, which dev and ino tell. */
typedef struct conn_sock {
  int fd;
  dev_t dev;
  ino_t ino;
} conn_sock;

struct tcp_mutator {
  /* gRPC's grpc_socket_mutator: these two first, in this order. */
  const mutator_vtable *vtable;
  gpr_refcount refcount;
  /* Ours. */
  int user_timeout_ms; /* 0: gRPC's own stays */
  char *target;        /* for its log lines */
  wt_mutex mu;
  conn_sock socks[MAX_CONN_SOCKS];
  size_t nsocks;
  bool said_unset; /* a setsockopt failure was logged */
};

/* Whether `c` still names the socket it named when recorded. */
static bool conn_sock_same(const conn_sock *c, int fd) {
  struct stat sb;
  return fstat(fd, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_dev == c->dev &&
         sb.st_ino == c->ino;
}

static void mutator_remember(tcp_mutator *m, int fd) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return;
  wt_mutex_lock(&m->mu);
  size_t kept = 0;
  for (size_t i = 0; i < m->nsocks; i++)
    if (m->socks[i].fd != fd && conn_sock_same(&m->socks[i], m->socks[i].fd))
      m->socks[kept++] = m->socks[i];
  if (kept == MAX_CONN_SOCKS) { /* the oldest goes */
    memmove(m->socks, m->socks + 1, (kept - 1) * sizeof(m->socks[0]));
    kept--;
  }
  m->socks[kept++] = (conn_sock){.fd = fd, .dev = sb.st_dev, .ino = sb.st_ino};
  m->nsocks = kept;
  wt_mutex_unlock(&m->mu);
}

static bool mutator_mutate_fd_2(const mutate_socket_info *info,
                                tcp_mutator *m) {
  if (info->usage != FD_CLIENT_CONNECTION_USAGE) return true;
  int ms = m->user_timeout_ms;
  /* A Unix socket has no such option; gRPC's own setting fails alike. */
  if (ms > 0 &&
      setsockopt(info->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms)) !=
          0 &&
      errno != EOPNOTSUPP && errno != ENOPROTOOPT) {
    wt_mutex_lock(&m->mu);
    bool say = !m->said_unset;
    m->said_unset = true;
    wt_mutex_unlock(&m->mu);
    if (say)
      WT_LOGW(RPC_MOD,
              "%s: cannot set TCP_USER_TIMEOUT to %d ms (tcp_user_timeout_ms): "
              "%s; gRPC's own stays",
              m->target, ms, strerror(errno));
  }
  mutator_remember(m, info->fd);
  return true; /* false would fail the connection */
}

static bool mutator_mutate_fd(int fd, tcp_mutator *m) {
  mutate_socket_info info = {fd, FD_CLIENT_CONNECTION_USAGE};
  return mutator_mutate_fd_2(&info, m);
}

/* Each channel's own: channels never share a connection whose sockets
 * another channel's mutator holds. */
static int mutator_compare(tcp_mutator *a, tcp_mutator *b) {
  return (a > b) - (a < b);
}

static void mutator_destroy(tcp_mutator *m) {
  wt_mutex_destroy(&m->mu);
  free(m->target);
  free(m);
}

static const mutator_vtable mutator_ops = {
    .mutate_fd = mutator_mutate_fd,
    .compare = mutator_compare,
    .destroy = mutator_destroy,
    .mutate_fd_2 = mutator_mutate_fd_2,
};

/* As grpc_socket_mutator_unref: gRPC and the channel args share the count. */
static void mutator_unref(tcp_mutator *m) {
  if (gpr_unref(&m->refcount)) m->vtable->destroy(m);
}

static void *mutator_arg_copy(void *p) {
  gpr_ref(&((tcp_mutator *)p)->refcount);
  return p;
}

static void mutator_arg_destroy(void *p) {
  mutator_unref(p);
}

static int mutator_arg_cmp(void *a, void *b) {
  return mutator_compare(a, b);
}

static const grpc_arg_pointer_vtable mutator_arg_ops = {
    mutator_arg_copy, mutator_arg_destroy, mutator_arg_cmp};

bool wt_rpc_tcp_user_timeout_supported(void) {
  return strcmp(grpc_version_string(), MUTATOR_LAYOUT_VERSIONS) == 0;
}

static tcp_mutator *mutator_new(const char *target, int user_timeout_ms) {
  tcp_mutator *m = calloc(1, sizeof(*m));
  if (m == NULL || (m->target = strdup(target)) == NULL) {
    free(m);
    return NULL;
  }
  m->vtable = &mutator_ops;
  gpr_ref_init(&m->refcount, 1);
  m->user_timeout_ms = user_timeout_ms;
  wt_mutex_init(&m->mu, WT_LOCK_RPC_MUTATOR, 0, "tcp_mutator.mu");
  return m;
}

/* Shuts down every socket of the channel that is still the one its
 * mutator saw; returns how many. Through a copy of the number made first,
 * so that a socket gRPC closes meanwhile, and a number another file then
 * takes, are never touched. */
static int channel_sever(wt_rpc_channel *ch) {
  tcp_mutator *m = ch->mutator;
  int n = 0;
  if (m == NULL) return 0;
  wt_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->nsocks; i++) {
    int d = fcntl(m->socks[i].fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) continue;
    if (conn_sock_same(&m->socks[i], d) && shutdown(d, SHUT_RDWR) == 0) n++;
    close(d);
  }
  wt_mutex_unlock(&m->mu);
  return n;
}

bool wt_rpc_channel_link_silent(wt_rpc_channel *ch, int64_t *silent_ms) {
  tcp_mutator *m = ch->mutator;
  bool silent = false;
  if (silent_ms) *silent_ms = 0;
  if (m == NULL) return false;
  wt_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->nsocks && !silent; i++) {
    int d = fcntl(m->socks[i].fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) continue;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (conn_sock_same(&m->socks[i], d) &&
        getsockopt(d, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        ti.tcpi_state == TCP_ESTABLISHED && ti.tcpi_unacked > 0 &&
        ti.tcpi_retransmits >= WT_RPC_SILENT_RETRANSMITS) {
      silent = true;
      if (silent_ms) *silent_ms = ti.tcpi_last_ack_recv;
    }
    close(d);
  }
  wt_mutex_unlock(&m->mu);
  return silent;
}

/* ---- channel --------------------------------------------------------------
 */

wt_status *wt_rpc_channel_new(const char *target,
                              const wt_rpc_channel_options *opts,
                              wt_rpc_channel **out) {
  wt_rpc_channel_options defaults;
  memset(&defaults, 0, sizeof(defaults));
  if (opts == NULL) opts = &defaults;
  *out = NULL;
  if (target == NULL || target[0] == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT, "channel target: empty");
  wt_rpc_channel *ch = calloc(1, sizeof(*ch));
  if (ch == NULL || (ch->target = strdup(target)) == NULL) {
    free(ch);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  ch->default_deadline_ms = opts->default_deadline_ms > 0
                                ? opts->default_deadline_ms
                                : WT_RPC_DEFAULT_DEADLINE_MS;
  if (opts->token != NULL) {
    size_t tl = strlen(opts->token);
    char *v = malloc(tl + 8);
    if (v == NULL) {
      free(ch->target);
      free(ch);
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    }
    memcpy(v, "Bearer ", 7);
    memcpy(v + 7, opts->token, tl + 1);
    ch->auth.key = grpc_slice_from_static_string("authorization");
    ch->auth.value = grpc_slice_from_copied_string(v);
    memset(v, 0, tl + 7);
    free(v);
    ch->nmd = 1;
  }
  grpc_init();
  grpc_channel_credentials *creds = NULL;
  wt_status *st = rpc_channel_credentials(opts->tls, &creds);
  if (st != NULL) {
    if (ch->nmd) grpc_slice_unref(ch->auth.value);
    free(ch->target);
    free(ch);
    grpc_shutdown();
    return st;
  }
  grpc_arg args[8];
  size_t nargs = wt_rpc_message_limit_args(
      args, opts->max_receive_message_bytes, opts->max_send_message_bytes);
  /* 0 keeps gRPC's own (the mutator then only remembers the sockets). */
  int ut = opts->tcp_user_timeout_ms < 0    ? 0
           : opts->tcp_user_timeout_ms == 0 ? WT_RPC_TCP_USER_TIMEOUT_MS
                                            : opts->tcp_user_timeout_ms;
  if (!wt_rpc_tcp_user_timeout_supported()) {
    if (ut > 0)
      WT_LOGW(RPC_MOD,
              "%s: gRPC core %s keeps its own TCP_USER_TIMEOUT (the keepalive "
              "timeout), not tcp_user_timeout_ms %d: this layer sets its own "
              "only on a gRPC whose socket mutator it knows (core %s, gRPC "
              "1.51)",
              target, grpc_version_string(), ut, MUTATOR_LAYOUT_VERSIONS);
  } else {
    if ((ch->mutator = mutator_new(target, ut)) != NULL) {
      ch->tcp_user_timeout_ms = ut;
      memset(&args[nargs], 0, sizeof(args[nargs]));
      args[nargs].type = GRPC_ARG_POINTER;
      args[nargs].key = (char *)GRPC_ARG_SOCKET_MUTATOR;
      args[nargs].value.pointer.p = ch->mutator;
      args[nargs].value.pointer.vtable = &mutator_arg_ops;
      nargs++;
    }
  }
  if (opts->keepalive_time_ms >= 0) {
    ch->keepalive_timeout_ms = opts->keepalive_timeout_ms > 0
                                   ? opts->keepalive_timeout_ms
                                   : WT_RPC_KEEPALIVE_TIMEOUT_MS;
    const struct {
      const char *key;
      int value;
    } ka[] = {
        {GRPC_ARG_KEEPALIVE_TIME_MS, opts->keepalive_time_ms
                                         ? opts->keepalive_time_ms
                                         : WT_RPC_KEEPALIVE_TIME_MS},
        {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ch->keepalive_timeout_ms},
        /* A push blocked by flow control sends no data: keep pinging. */
        {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},
    };
    for (size_t i = 0; i < sizeof(ka) / sizeof(ka[0]); i++) {
      memset(&args[nargs], 0, sizeof(args[nargs]));
      args[nargs].type = GRPC_ARG_INTEGER;
      args[nargs].key = (char *)ka[i].key;
      args[nargs].value.integer = ka[i].value;
      nargs++;
    }
  }
  if (opts->tls != NULL && opts->tls->server_name != NULL) {
    memset(&args[nargs], 0, sizeof(args[nargs]));
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[nargs].value.string = (char *)opts->tls->server_name;
    nargs++;
  }
  grpc_channel_args channel_args = {nargs, args};
  ch->channel = grpc_channel_create(target, creds, &channel_args);
  grpc_channel_credentials_release(creds);
  if (ch->channel == NULL) {
    if (ch->mutator) mutator_unref(ch->mutator);
    if (ch->nmd) grpc_slice_unref(ch->auth.value);
    free(ch->target);
    free(ch);
    grpc_shutdown();
    return wt_status_new(WT_INVALID_ARGUMENT, "channel target '%s': rejected",
                         target);
  }
  *out = ch;
  return NULL;
}

void wt_rpc_channel_destroy(wt_rpc_channel *ch) {
  if (ch == NULL) return;
  grpc_channel_destroy(ch->channel);
  if (ch->mutator) mutator_unref(ch->mutator);
  if (ch->nmd) grpc_slice_unref(ch->auth.value);
  free(ch->target);
  free(ch);
  grpc_shutdown();
}

const char *wt_rpc_channel_target(const wt_rpc_channel *ch) {
  return ch->target;
}

/* ---- calls in common ------------------------------------------------------
 */

static gpr_timespec after_ms(int64_t ms) {
  return ms <= 0 ? gpr_inf_past(GPR_CLOCK_MONOTONIC)
                 : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static wt_status *cc_open(client_call *cc, wt_rpc_channel *ch,
                          const char *method, int64_t deadline_ms) {
  memset(cc, 0, sizeof(*cc));
  cc->ch = ch;
  cc->details = grpc_empty_slice();
  cc->give_up_ms = INT64_MAX;
  atomic_init(&cc->cancel_ms, 0);
  grpc_metadata_array_init(&cc->initial_metadata);
  grpc_metadata_array_init(&cc->trailing_metadata);
  if (method == NULL || method[0] != '/')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: method '%s' is not a \"/package.Service/Method\" "
                         "path",
                         ch->target, method ? method : "(null)");
  cc->method = strdup(method);
  if (cc->method == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  if (deadline_ms == 0) deadline_ms = ch->default_deadline_ms;
  cc->deadline_ms = deadline_ms < 0 ? -1 : deadline_ms;
  gpr_timespec deadline = deadline_ms < 0 ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                                          : after_ms(deadline_ms);
  if (deadline_ms >= 0 && deadline_ms < INT64_MAX / 2)
    cc->give_up_ms = wt_mono_ms() + deadline_ms + WT_RPC_DEADLINE_GRACE_MS;
  cc->cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice path = grpc_slice_from_copied_string(method);
  cc->call =
      grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                               cc->cq, path, NULL, deadline, NULL);
  grpc_slice_unref(path);
  if (cc->call == NULL)
    return wt_status_new(WT_INTERNAL, "%s %s: cannot create the call",
                         ch->target, method);
  return NULL;
}

/* Fills `op` as the call's SEND_INITIAL_METADATA, with the channel's
 * token. */
static void cc_initial_metadata(const client_call *cc, grpc_op *op) {
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  op->data.send_initial_metadata.count = cc->ch->nmd;
  op->data.send_initial_metadata.metadata =
      cc->ch->nmd ? (grpc_metadata *)&cc->ch->auth : NULL;
}

/* Cancels the call; any thread. Waits on it end within the grace from
 * now. */
static void cc_cancel(client_call *cc) {
  int64_t none = 0, now = wt_mono_ms();
  atomic_compare_exchange_strong(&cc->cancel_ms, &none, now ? now : 1);
  grpc_call_cancel(cc->call, NULL);
}

/* Takes `tag` from the call's queue if it completes by `until`; *ok (may be
 * NULL) is the batch's success flag. */
static bool cc_take(client_call *cc, void *tag, gpr_timespec until, bool *ok) {
  grpc_event ev = grpc_completion_queue_pluck(cc->cq, tag, until, NULL);
  if (ev.type != GRPC_OP_COMPLETE) return false;
  cc->outstanding &= ~TAG_BIT(tag);
  if (tag == cc->status_tag) cc->status_received = true;
  if (ok) *ok = ev.success != 0;
  return true;
}

/* The wt_mono_ms() by which a wait on the call gives up: its deadline, or
 * its cancel, plus the grace. */
static int64_t cc_bound_ms(client_call *cc) {
  int64_t bound = cc->give_up_ms;
  int64_t c = atomic_load(&cc->cancel_ms);
  if (c != 0 && c + WT_RPC_DEADLINE_GRACE_MS < bound)
    bound = c + WT_RPC_DEADLINE_GRACE_MS;
  return bound;
}

/* gRPC holds `tag` past the call's bound: what holds it is a transport
 * write that cannot finish (see the top of this file), so the channel's
 * connections are shut down, and gRPC gets a moment more to let go. */
static bool cc_take_held(client_call *cc, void *tag, const char *what,
                         bool *ok) {
  grpc_call_cancel(cc->call, NULL);
  if (cc->held == NULL) {
    cc->held = what;
    int n = channel_sever(cc->ch);
    cc->severed = n > 0;
    bool cancelled = atomic_load(&cc->cancel_ms) != 0;
    WT_LOGW(RPC_MOD,
            "%s %s: gRPC still holds the call's %s %d ms after its %s; %s",
            cc->ch->target, cc->method, what, WT_RPC_DEADLINE_GRACE_MS,
            cancelled ? "cancel" : "deadline",
            n > 0 ? "shutting the channel's connection down (it cannot "
                    "write: the server stopped reading, or the link is gone)"
                  : "leaving the call to gRPC");
  }
  return cc_take(cc, tag, after_ms(HELD_WAIT_MS), ok);
}

/* Waits for `tag` until the call's bound, seeing a cancel from another
 * thread within WAIT_SLICE_MS, then as cc_take_held. False when gRPC
 * holds it still: the call is then abandoned (cc->held). */
static bool cc_wait(client_call *cc, void *tag, const char *what, bool *ok) {
  for (;;) {
    int64_t left = cc_bound_ms(cc) - wt_mono_ms();
    if (left <= 0)
      return cc_take(cc, tag, gpr_inf_past(GPR_CLOCK_MONOTONIC), ok) ||
             cc_take_held(cc, tag, what, ok);
    if (cc_take(cc, tag, after_ms(left < WAIT_SLICE_MS ? left : WAIT_SLICE_MS),
                ok))
      return true;
  }
}

static wt_status *cc_start(client_call *cc, const grpc_op *ops, size_t n,
                           void *tag) {
  grpc_call_error err = grpc_call_start_batch(cc->call, ops, n, tag, NULL);
  if (err != GRPC_CALL_OK)
    return wt_status_new(WT_INTERNAL, "%s %s: cannot start a batch: %s",
                         cc->ch->target, cc->method,
                         grpc_call_error_to_string(err));
  cc->outstanding |= TAG_BIT(tag);
  return NULL;
}

/* Starts the batch that learns the call's status, on its own. */
static wt_status *cc_start_status(client_call *cc) {
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[0].data.recv_initial_metadata.recv_initial_metadata =
      &cc->initial_metadata;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &cc->trailing_metadata;
  ops[1].data.recv_status_on_client.status = &cc->status;
  ops[1].data.recv_status_on_client.status_details = &cc->details;
  wt_status *st = cc_start(cc, ops, 2, TAG_STATUS);
  if (st == NULL) cc->status_tag = TAG_STATUS;
  return st;
}

static bool cc_status_outstanding(const client_call *cc) {
  return cc->status_tag != NULL && (cc->outstanding & TAG_BIT(cc->status_tag));
}

static void cc_wait_status(client_call *cc) {
  if (cc_status_outstanding(cc))
    cc_wait(cc, cc->status_tag,
            cc->status_tag == TAG_UNARY ? "request" : "status", NULL);
}

/* True when the status has arrived, waiting up to `ms` (0: not at all). */
static bool cc_poll_status_within(client_call *cc, int64_t ms) {
  if (!cc_status_outstanding(cc)) return cc->status_received;
  return cc_take(cc, cc->status_tag, after_ms(ms), NULL);
}

static bool cc_poll_status(client_call *cc) {
  return cc_poll_status_within(cc, 0);
}

/* Why the call failed when gRPC held one of its batches past the grace:
 * the status gRPC had given (normally DEADLINE_EXCEEDED), or the deadline,
 * and what held it. */
static wt_status *cc_held_status(const client_call *cc) {
  char why[256];
  snprintf(why, sizeof(why), "gRPC still held its %s %d ms after its %s, %s",
           cc->held, WT_RPC_DEADLINE_GRACE_MS,
           atomic_load(&cc->cancel_ms) != 0 ? "cancel" : "deadline",
           cc->severed ? "so its connection was shut down: it could not "
                         "write (the server stopped reading, or the link is "
                         "gone)"
                       : "and was left to finish it");
  if (cc->status_received && cc->status != GRPC_STATUS_OK) {
    wt_code code = wt_code_from_grpc((int)cc->status);
    return wt_status_new(code, "%s %s: %s: %.*s (%lld ms deadline; %s)",
                         cc->ch->target, cc->method, wt_code_name(code),
                         (int)GRPC_SLICE_LENGTH(cc->details),
                         (const char *)GRPC_SLICE_START_PTR(cc->details),
                         (long long)cc->deadline_ms, why);
  }
  return wt_status_new(
      WT_DEADLINE_EXCEEDED, "%s %s: DEADLINE_EXCEEDED: %lld ms deadline; %s",
      cc->ch->target, cc->method, (long long)cc->deadline_ms, why);
}

/* The received status as a wt_status (NULL when OK), naming target and
 * method. */
static wt_status *cc_status(const client_call *cc) {
  if (cc->held != NULL) return cc_held_status(cc);
  if (cc->status == GRPC_STATUS_OK) return NULL;
  wt_code code = wt_code_from_grpc((int)cc->status);
  size_t len = GRPC_SLICE_LENGTH(cc->details);
  if (len == 0)
    return wt_status_new(code, "%s %s: %s", cc->ch->target, cc->method,
                         wt_code_name(code));
  const char *details = (const char *)GRPC_SLICE_START_PTR(cc->details);
  /* gRPC's words name neither side nor the setting: say which. */
  const char *ka = KEEPALIVE_WATCHDOG_DETAILS;
  if (cc->ch->keepalive_timeout_ms > 0 && len == strlen(ka) &&
      memcmp(details, ka, len) == 0)
    return wt_status_new(
        code,
        "%s %s: %s: %s (the server left a keepalive ping unanswered for "
        "%d ms, this client's keepalive_timeout_ms; a server that is alive "
        "but loaded needs a longer one)",
        cc->ch->target, cc->method, wt_code_name(code), ka,
        cc->ch->keepalive_timeout_ms);
  const char *ut = USER_TIMEOUT_DETAILS;
  if (cc->ch->tcp_user_timeout_ms > 0 && len >= strlen(ut) &&
      memmem(details, len, ut, strlen(ut)) != NULL)
    return wt_status_new(
        code,
        "%s %s: %s: %.*s (bytes sent to the server stayed unacknowledged, or "
        "its receive window shut, for %d ms, this client's "
        "tcp_user_timeout_ms: the link is cut, or the server's process "
        "stopped reading)",
        cc->ch->target, cc->method, wt_code_name(code), (int)len, details,
        cc->ch->tcp_user_timeout_ms);
  return wt_status_new(code, "%s %s: %s: %.*s", cc->ch->target, cc->method,
                       wt_code_name(code), (int)len, details);
}

/* Opens a streaming call: starts `ops` (its opening batch, which begins with
 * SEND_INITIAL_METADATA and may send cc->send_bb), then the status batch,
 * and waits for the opening batch. A call the server ended at once returns
 * the server's status. */
static wt_status *cc_open_streaming(client_call *cc, const grpc_op *ops,
                                    size_t n) {
  wt_status *st = cc_start(cc, ops, n, TAG_SEND);
  if (st != NULL) return st;
  st = cc_start_status(cc);
  if (st != NULL) {
    cc_cancel(cc);
    cc_wait(cc, TAG_SEND, "opening", NULL);
    return st;
  }
  bool ok = false;
  if (!cc_wait(cc, TAG_SEND, "opening", &ok) || !ok) {
    cc_wait_status(cc);
    st = cc_status(cc);
    if (st == NULL)
      st = wt_status_new(WT_UNAVAILABLE, "%s %s: the call ended at once",
                         cc->ch->target, cc->method);
    return st;
  }
  if (cc->send_bb) grpc_byte_buffer_destroy(cc->send_bb);
  cc->send_bb = NULL;
  return NULL;
}

/* Frees what the call holds, once gRPC holds none of its batches. */
static void cc_close(client_call *cc) {
  if (cc->call != NULL) grpc_call_unref(cc->call);
  if (cc->cq != NULL) {
    grpc_completion_queue_shutdown(cc->cq);
    grpc_event ev;
    do {
      ev = grpc_completion_queue_pluck(
          cc->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    } while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(cc->cq);
  }
  grpc_metadata_array_destroy(&cc->initial_metadata);
  grpc_metadata_array_destroy(&cc->trailing_metadata);
  grpc_slice_unref(cc->details);
  if (cc->send_bb) grpc_byte_buffer_destroy(cc->send_bb);
  if (cc->recv_bb) grpc_byte_buffer_destroy(cc->recv_bb);
  free(cc->method);
}

/* Takes every batch still outstanding that completes by `until`; true when
 * none is left. */
static bool cc_take_all(client_call *cc, gpr_timespec until) {
  for (int t = 1; t < ALL_TAGS; t++) {
    void *tag = (void *)(intptr_t)t;
    if (cc->outstanding & TAG_BIT(tag)) cc_take(cc, tag, until, NULL);
  }
  return cc->outstanding == 0;
}

/* A call whose batch gRPC holds, on a thread of its own: waits until gRPC
 * lets go (the connection's write ends, at the latest when TCP's user
 * timeout or keepalive drops it), then frees it. Holds a grpc_init()
 * reference of its own, since the channel may be gone first. */
static void *cc_reap(void *arg) {
  client_call *cc = arg;
  cc_take_all(cc, gpr_inf_future(GPR_CLOCK_MONOTONIC));
  cc_close(cc);
  free(cc);
  grpc_shutdown();
  return NULL;
}

/* Ends the call (cancelling it if it has not ended) and frees `cc`, the
 * first member of a malloc'd call: at once, or on a thread of its own when
 * gRPC still holds a batch of it HELD_WAIT_MS after the cancel. */
static void cc_release(client_call *cc) {
  if (cc->call != NULL && cc->outstanding != 0) {
    cc_cancel(cc);
    if (!cc_take_all(cc, after_ms(HELD_WAIT_MS))) {
      pthread_attr_t attr;
      pthread_t th;
      bool handed = false;
      grpc_init();
      if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        handed = pthread_create(&th, &attr, cc_reap, cc) == 0;
        pthread_attr_destroy(&attr);
      }
      if (handed) return;
      grpc_shutdown();
      /* No thread: this one waits for gRPC. */
      cc_take_all(cc, gpr_inf_future(GPR_CLOCK_MONOTONIC));
    }
  }
  cc_close(cc);
  free(cc);
}

static wt_status *cc_unpack_response(const client_call *cc,
                                     grpc_byte_buffer *bb,
                                     const ProtobufCMessageDescriptor *type,
                                     ProtobufCMessage **response) {
  if (bb == NULL)
    return wt_status_new(WT_INTERNAL, "%s %s: the server sent no response",
                         cc->ch->target, cc->method);
  if (response == NULL) return NULL;
  wt_status *st = wt_pb_unpack(bb, type, response);
  if (st != NULL) {
    /* A response that does not parse is the server's fault (INTERNAL); one
     * this side has no memory for is RESOURCE_EXHAUSTED. */
    wt_code code = wt_status_code(st) == WT_RESOURCE_EXHAUSTED
                       ? WT_RESOURCE_EXHAUSTED
                       : WT_INTERNAL;
    wt_status *wrapped =
        wt_status_new(code, "%s %s: response %s", cc->ch->target, cc->method,
                      wt_status_message(st));
    wt_status_free(st);
    st = wrapped;
  }
  return st;
}

/* ---- unary ----------------------------------------------------------------
 */

wt_status *wt_rpc_unary_start(wt_rpc_channel *ch, const char *method,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_type,
                              int64_t deadline_ms, wt_rpc_pending **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_rpc_pending *p = calloc(1, sizeof(*p));
  if (p == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  p->type = response_type;
  WT_CHECK(cc_open(&p->cc, ch, method, deadline_ms));
  st = wt_pb_pack(request, &p->cc.send_bb);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s %s: request", ch->target, method);
    goto out;
  }
  grpc_op ops[6];
  memset(ops, 0, sizeof(ops));
  cc_initial_metadata(&p->cc, &ops[0]);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = p->cc.send_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata =
      &p->cc.initial_metadata;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &p->cc.recv_bb;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata =
      &p->cc.trailing_metadata;
  ops[5].data.recv_status_on_client.status = &p->cc.status;
  ops[5].data.recv_status_on_client.status_details = &p->cc.details;
  WT_CHECK(cc_start(&p->cc, ops, 6, TAG_UNARY));
  p->cc.status_tag = TAG_UNARY;
  *out = p;
  p = NULL;
out:
  if (p != NULL) cc_release(&p->cc);
  return st;
}

/* Past its bound a call counts as done: its wait then returns within
 * HELD_WAIT_MS, whatever gRPC holds. */
bool wt_rpc_pending_done(wt_rpc_pending *p) {
  if (!p->done)
    p->done = cc_poll_status(&p->cc) || wt_mono_ms() >= cc_bound_ms(&p->cc);
  return p->done;
}

bool wt_rpc_pending_done_within(wt_rpc_pending *p, int64_t ms) {
  if (!p->done) {
    int64_t left = cc_bound_ms(&p->cc) - wt_mono_ms();
    p->done = cc_poll_status_within(&p->cc, ms < left ? ms : left) ||
              wt_mono_ms() >= cc_bound_ms(&p->cc);
  }
  return p->done;
}

void wt_rpc_pending_cancel(wt_rpc_pending *p) {
  cc_cancel(&p->cc);
}

wt_status *wt_rpc_pending_wait(wt_rpc_pending *p, ProtobufCMessage **response) {
  if (response) *response = NULL;
  cc_wait_status(&p->cc);
  wt_status *st = cc_status(&p->cc);
  if (st == NULL)
    st = cc_unpack_response(&p->cc, p->cc.recv_bb, p->type, response);
  cc_release(&p->cc);
  return st;
}

wt_status *wt_rpc_unary(wt_rpc_channel *ch, const char *method,
                        const ProtobufCMessage *request,
                        const ProtobufCMessageDescriptor *response_type,
                        int64_t deadline_ms, ProtobufCMessage **response) {
  if (response) *response = NULL;
  wt_rpc_pending *p = NULL;
  wt_status *st =
      wt_rpc_unary_start(ch, method, request, response_type, deadline_ms, &p);
  if (st != NULL) return st;
  return wt_rpc_pending_wait(p, response);
}

/* ---- client stream --------------------------------------------------------
 */

wt_status *wt_rpc_client_stream_open(wt_rpc_channel *ch, const char *method,
                                     int64_t deadline_ms,
                                     wt_rpc_client_stream **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_rpc_client_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(cc_open(&s->cc, ch, method, deadline_ms));
  grpc_op op;
  memset(&op, 0, sizeof(op));
  cc_initial_metadata(&s->cc, &op);
  WT_CHECK(cc_open_streaming(&s->cc, &op, 1));
  *out = s;
  s = NULL;
out:
  if (s != NULL) cc_release(&s->cc);
  return st;
}

/* The status for a stream the server already ended. */
static wt_status *ended_status(const client_call *cc, const char *what) {
  wt_status *st = cc_status(cc);
  if (st == NULL)
    st = wt_status_new(WT_FAILED_PRECONDITION,
                       "%s %s: %s: the server already finished the call",
                       cc->ch->target, cc->method, what);
  return st;
}

wt_status *wt_rpc_client_stream_write_raw(wt_rpc_client_stream *s,
                                          grpc_byte_buffer *bb) {
  wt_status *st = NULL;
  client_call *cc = &s->cc;
  if (s->finished)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s %s: write after finish", cc->ch->target,
            cc->method);
  if (cc->held != NULL || cc_poll_status(cc)) {
    st = ended_status(cc, "write");
    goto out;
  }
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  WT_CHECK(cc_start(cc, &op, 1, TAG_WRITE));
  /* gRPC may hold it past this call when the connection cannot write. */
  cc->send_bb = bb;
  bb = NULL;
  bool ok = false;
  if (cc_wait(cc, TAG_WRITE, "write", &ok)) {
    grpc_byte_buffer_destroy(cc->send_bb);
    cc->send_bb = NULL;
  }
  if (cc->held != NULL || !ok) {
    /* The call is over; its status says why (the server's error, the
     * deadline, a cancel). */
    cc_wait_status(cc);
    st = ended_status(cc, "write");
  }
out:
  if (bb) grpc_byte_buffer_destroy(bb);
  return st;
}

wt_status *wt_rpc_client_stream_write(wt_rpc_client_stream *s,
                                      const ProtobufCMessage *msg) {
  grpc_byte_buffer *bb = NULL;
  wt_status *st = wt_pb_pack(msg, &bb);
  if (st != NULL)
    return wt_status_prefix(st, "%s %s: write", s->cc.ch->target, s->cc.method);
  return wt_rpc_client_stream_write_raw(s, bb);
}

wt_status *wt_rpc_client_stream_finish(
    wt_rpc_client_stream *s, const ProtobufCMessageDescriptor *response_type,
    ProtobufCMessage **response) {
  wt_status *st = NULL;
  client_call *cc = &s->cc;
  if (response) *response = NULL;
  if (s->finished)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s %s: finish called twice",
            cc->ch->target, cc->method);
  s->finished = true;
  if (cc->held == NULL) {
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &cc->recv_bb;
    WT_CHECK(cc_start(cc, ops, 2, TAG_FINISH));
    cc_wait(cc, TAG_FINISH, "half-close", NULL); /* the status tells */
  }
  cc_wait_status(cc);
  WT_CHECK(cc_status(cc));
  WT_CHECK(cc_unpack_response(cc, cc->recv_bb, response_type, response));
out:
  return st;
}

void wt_rpc_client_stream_cancel(wt_rpc_client_stream *s) {
  cc_cancel(&s->cc);
}

void wt_rpc_client_stream_destroy(wt_rpc_client_stream *s) {
  if (s == NULL) return;
  cc_release(&s->cc);
}

/* ---- server stream --------------------------------------------------------
 */

wt_status *wt_rpc_server_stream_open(wt_rpc_channel *ch, const char *method,
                                     const ProtobufCMessage *request,
                                     int64_t deadline_ms,
                                     wt_rpc_server_stream **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_rpc_server_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(cc_open(&s->cc, ch, method, deadline_ms));
  st = wt_pb_pack(request, &s->cc.send_bb);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s %s: request", ch->target, method);
    goto out;
  }
  grpc_op ops[3];
  memset(ops, 0, sizeof(ops));
  cc_initial_metadata(&s->cc, &ops[0]);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = s->cc.send_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  WT_CHECK(cc_open_streaming(&s->cc, ops, 3));
  *out = s;
  s = NULL;
out:
  if (s != NULL) cc_release(&s->cc);
  return st;
}

wt_status *wt_rpc_server_stream_read(wt_rpc_server_stream *s,
                                     const ProtobufCMessageDescriptor *type,
                                     ProtobufCMessage **msg, bool *done) {
  client_call *cc = &s->cc;
  *msg = NULL;
  *done = false;
  if (!s->done && cc->held == NULL) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &cc->recv_bb;
    wt_status *st = cc_start(cc, &op, 1, TAG_READ);
    if (st != NULL) return st;
    if (cc_wait(cc, TAG_READ, "read", NULL) && cc->recv_bb != NULL) {
      st = cc_unpack_response(cc, cc->recv_bb, type, msg);
      grpc_byte_buffer_destroy(cc->recv_bb);
      cc->recv_bb = NULL;
      return st;
    }
    s->done = true;
    cc_wait_status(cc);
  }
  *done = true;
  return cc_status(cc);
}

void wt_rpc_server_stream_cancel(wt_rpc_server_stream *s) {
  cc_cancel(&s->cc);
}

void wt_rpc_server_stream_destroy(wt_rpc_server_stream *s) {
  if (s == NULL) return;
  cc_release(&s->cc);
}
