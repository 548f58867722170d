/* rpc_listener.c: the server's listening sockets, owned here rather than
 * by gRPC, so that descriptors are a budget no stranger can exhaust (see
 * docs/trust.md, "Connections").
 *
 * gRPC 1.51's own listener stops accepting for good after one accept4()
 * fails with EMFILE, never closes a connection that sends the HTTP/2
 * preface and then nothing, and has no connection cap. Here one thread
 * accepts, and hands each connection to gRPC with
 * grpc_server_add_channel_from_fd. That takes plaintext only, so a TLS
 * server's connections are terminated here (rpc_relay.c: OpenSSL, on this
 * thread) and gRPC gets one end of a socketpair carrying the plaintext.
 *
 * A plaintext connection is two descriptors: gRPC owns a dup, this file
 * owns the original. A TLS connection is three: the socket and our end of
 * the pair (ours), gRPC's end (gRPC's). Ours is never closed while its record
 * lives, so shutting the socket down through it can never hit another file that
 * reused a number (gRPC's copy may be closed at any time). gRPC shuts a socket
 * down before it closes it (ev_epoll1's orphan path), which wakes our epoll
 * with a hang-up; a check that gRPC's number still names the same socket
 * catches any other way out.
 *
 * Policy: at most `max_connections` open. A new connection over the cap
 * takes the place of the oldest connection that has made no authorized
 * call, else of the one that made only reader calls longest ago; with
 * neither it is closed at once (a trainer's connection is never closed to
 * make room). A connection that has made no authorized call within the
 * grace is closed. When descriptors run out anyway (EMFILE), a spare
 * descriptor is given up to accept and close the waiting connection, so
 * the listener never stalls.
 */

#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc_posix.h>
#include <grpc/support/alloc.h>
#include <grpc/support/string_util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt/secure.h"
#include "wt/lock.h"

#include "rpc_internal.h"

#define MAX_LISTENERS 4
/* Closing connections (shut down, their hang-up not yet seen) kept on top
 * of the cap; past it the oldest is forgotten (its socket is shut down
 * already; gRPC closes its copy when it gets to it). */
#define CLOSING_HEADROOM 64
/* A connection shut down this long without its hang-up is let go. */
#define CLOSING_GIVE_UP_MS 5000
#define TICK_MS 100
#define GONE_CHECK_MS 1000
/* Accepting pauses this long after an error that is not about one
 * connection (ENOBUFS, ENOMEM, a spare descriptor that cannot be had). */
#define PAUSE_MS 100

/* Bytes one relay step moves each way before the others get their turn. */
#define RELAY_BUDGET (1u << 20)
/* TLS handshakes done in one pass of the loop before the rest wait for
 * the next pass, after the relays that are moving bytes. */
#define HANDSHAKE_PASS_MS 10

#define EV_WAKE UINT64_MAX
#define EV_LISTEN(i) (UINT64_MAX - 1 - (uint64_t)(i))

typedef struct rpc_conn {
  int fd;      /* ours */
  int grpc_fd; /* gRPC's dup; "fd:N" in its peer strings */
  ino_t ino;
  int64_t accepted_ms;
  int64_t last_call_ms; /* the last authorized call */
  int64_t closing_ms;   /* when we shut it down; 0: open */
  uint32_t scope;       /* WT_SCOPE_* of its authorized calls; 0: none */
  char key[80];         /* the quota key once worked out; "" before */
  struct sockaddr_storage addr, local; /* the peer's and ours */
  char peer[72]; /* as gRPC writes peers: "ipv4:127.0.0.1:5555" */
  /* TLS (accept thread only, but for grpc_fd): the relay, our end of the
   * pair (-1 before the handshake is done; grpc_fd too), the events each
   * descriptor waits for, and whether a step ran out of budget. */
  rpc_relay *relay;
  int pair;
  uint32_t ev_net, ev_pair;
  bool again;
} rpc_conn;

struct rpc_listener {
  grpc_server *gs;
  grpc_server_credentials *creds;
  rpc_tls_server *tls; /* borrowed; NULL: plaintext */
  int handshake_ms;
  int lfd[MAX_LISTENERS];
  size_t nl;
  int port;
  int epfd, wakefd, spare;
  pthread_t thread;
  bool started;
  int max_conns, grace_ms;

  wt_mutex mu; /* the table and the counts */
  rpc_conn *conns;
  size_t nconns, slots;
  bool quit;
  bool accepting; /* false from rpc_listener_stop */
  /* Held around every hand-over to gRPC, and by rpc_listener_stop to
   * clear `handing`: after stop returns, gRPC gets no new connection. */
  wt_mutex hand_mu;
  bool handing;
  wt_rpc_conn_counts counts;

  /* accept thread only */
  bool paused;
  int64_t resume_ms, next_gone_check;
  size_t nagain; /* records with `again` set */
  int64_t hs_us; /* handshake time spent in this pass of the loop */
  wt_log_limit log_limit;
};

/* ---- the table (under mu) -------------------------------------------------
 */

static size_t open_count_locked(const rpc_listener *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->nconns; i++)
    if (l->conns[i].closing_ms == 0) n++;
  return n;
}

static void shut_locked(rpc_listener *l, rpc_conn *c, int64_t now) {
  (void)l;
  shutdown(c->fd, SHUT_RDWR);
  if (c->pair >= 0) shutdown(c->pair, SHUT_RDWR); /* gRPC sees the end */
  c->closing_ms = now > 0 ? now : 1;
}

/* The place a new connection may take over the cap: the oldest without an
 * authorized call, else the reader whose last call is oldest. */
static rpc_conn *victim_locked(rpc_listener *l) {
  rpc_conn *best = NULL;
  for (size_t i = 0; i < l->nconns; i++) {
    rpc_conn *c = &l->conns[i];
    if (c->closing_ms != 0 || c->scope != 0) continue;
    if (best == NULL || c->accepted_ms < best->accepted_ms) best = c;
  }
  if (best) return best;
  for (size_t i = 0; i < l->nconns; i++) {
    rpc_conn *c = &l->conns[i];
    if (c->closing_ms != 0 || (c->scope & WT_SCOPE_TRAINER)) continue;
    if (best == NULL || c->last_call_ms < best->last_call_ms) best = c;
  }
  return best;
}

/* Forgets record i: our descriptors leave epoll and are closed. */
static void drop_locked(rpc_listener *l, size_t i) {
  rpc_conn *c = &l->conns[i];
  epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  if (c->pair >= 0) {
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->pair, NULL);
    close(c->pair);
  }
  rpc_relay_free(c->relay);
  if (c->again) l->nagain--;
  l->conns[i] = l->conns[--l->nconns];
}

/* The record with our descriptor `fd` (the socket or, TLS, our end of the
 * pair); accept thread only, which alone changes the table. */
static rpc_conn *by_fd(rpc_listener *l, int fd) {
  for (size_t i = 0; i < l->nconns; i++)
    if (l->conns[i].fd == fd || l->conns[i].pair == fd) return &l->conns[i];
  return NULL;
}

static rpc_conn *by_grpc_fd_locked(rpc_listener *l, int grpc_fd) {
  for (size_t i = 0; i < l->nconns; i++)
    if (l->conns[i].grpc_fd == grpc_fd) return &l->conns[i];
  return NULL;
}

/* "fd:N" -> N; -1 for any other peer string. */
static int grpc_fd_of(const char *peer) {
  if (peer == NULL || strncmp(peer, "fd:", 3) != 0) return -1;
  char *end = NULL;
  long v = strtol(peer + 3, &end, 10);
  return end && *end == 0 && v >= 0 && v < INT32_MAX ? (int)v : -1;
}

/* ---- logging ---------------------------------------------------------------
 */

#define note(l, fmt, ...)                                                \
  wt_log_limited(&(l)->log_limit, WT_LOG_WARN, RPC_MOD, "port %d: " fmt, \
                 (l)->port, __VA_ARGS__)

/* ---- accepting -------------------------------------------------------------
 */

static void format_peer(const struct sockaddr_storage *a, char *out, size_t n) {
  char host[INET6_ADDRSTRLEN] = "?", serv[16] = "?";
  getnameinfo((const struct sockaddr *)a, sizeof(*a), host, sizeof(host), serv,
              sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
  if (a->ss_family == AF_INET6)
    snprintf(out, n, "ipv6:[%s]:%s", host, serv);
  else
    snprintf(out, n, "ipv4:%s:%s", host, serv);
}

static void pause_accepting(rpc_listener *l, int64_t now) {
  if (l->paused) return;
  for (size_t i = 0; i < l->nl; i++) {
    struct epoll_event ev = {.events = 0, .data.u64 = EV_LISTEN(i)};
    epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->lfd[i], &ev);
  }
  l->paused = true;
  l->resume_ms = now + PAUSE_MS;
}

static void resume_accepting(rpc_listener *l) {
  for (size_t i = 0; i < l->nl; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_LISTEN(i)};
    epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->lfd[i], &ev);
  }
  l->paused = false;
}

/* Out of descriptors: gives up the spare one to take the waiting
 * connection off the queue and close it, then takes the spare back. */
static void shed(rpc_listener *l, int lfd, int err) {
  int64_t now = wt_mono_ms();
  if (l->spare < 0) l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (l->spare < 0) {
    note(l, "accept: %s, and no spare descriptor: pausing", strerror(err));
    pause_accepting(l, now);
    return;
  }
  close(l->spare);
  l->spare = -1;
  int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    wt_mutex_lock(&l->mu);
    l->counts.shed++;
    wt_mutex_unlock(&l->mu);
  }
  l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  note(l,
       "accept: %s: a new connection was closed at once (descriptors "
       "ran short; raise ulimit -n or lower --max-connections)",
       strerror(err));
  if (l->spare < 0) pause_accepting(l, now);
}

/* Hands `fd` to gRPC, which owns it from then on; false (fd still the
 * caller's) once the listener was stopped. */
static bool hand_to_grpc(rpc_listener *l, int fd) {
  wt_mutex_lock(&l->hand_mu);
  bool ok = l->handing;
  if (ok) grpc_server_add_channel_from_fd(l->gs, fd, l->creds);
  wt_mutex_unlock(&l->hand_mu);
  return ok;
}

static void admit_tls(rpc_listener *l, rpc_conn *c);

static void admit(rpc_listener *l, int fd, const struct sockaddr_storage *a) {
  int64_t now = wt_mono_ms();
  rpc_conn c;
  memset(&c, 0, sizeof(c));
  c.fd = fd;
  c.grpc_fd = c.pair = -1;
  c.accepted_ms = now;
  c.addr = *a;
  socklen_t llen = sizeof(c.local);
  getsockname(fd, (struct sockaddr *)&c.local, &llen);
  format_peer(a, c.peer, sizeof(c.peer));

  wt_mutex_lock(&l->mu);
  const char *refused = NULL;
  if (!l->accepting) {
    wt_mutex_unlock(&l->mu);
    close(fd);
    return;
  }
  if (l->nconns >= l->slots) {
    /* The connections shut down for strangers linger until gRPC closes its
     * copies (slowly, on a loaded machine): the oldest record goes, its
     * socket already shut down, so that they never keep a newcomer out. */
    size_t oldest = l->nconns;
    for (size_t i = 0; i < l->nconns; i++)
      if (l->conns[i].closing_ms != 0 &&
          (oldest == l->nconns ||
           l->conns[i].closing_ms < l->conns[oldest].closing_ms))
        oldest = i;
    if (oldest < l->nconns) drop_locked(l, oldest);
  }
  if (open_count_locked(l) >= (size_t)l->max_conns) {
    rpc_conn *v = victim_locked(l);
    if (v != NULL) {
      shut_locked(l, v, now);
      l->counts.evicted++;
    } else {
      refused = "every connection open made a trainer call";
    }
  }
  if (refused) l->counts.refused++;
  wt_mutex_unlock(&l->mu);
  if (refused) {
    close(fd);
    note(l,
         "%s refused: %d connections open (the limit; --max-connections) "
         "and %s",
         c.peer, l->max_conns, refused);
    return;
  }

  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  /* A client behind a cut link is dropped once what this side sent stays
   * unacknowledged (or the client's window shut) this long, as the
   * client's own sockets do (wt_rpc_channel_options.tcp_user_timeout_ms);
   * gRPC sets nothing on a socket it is handed. */
  int user_timeout = WT_RPC_TCP_USER_TIMEOUT_MS;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout,
             sizeof(user_timeout));
  if (l->tls != NULL) {
    admit_tls(l, &c);
    return;
  }
  struct stat st;
  c.grpc_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (c.grpc_fd < 0 || fstat(fd, &st) != 0) {
    int err = errno;
    if (c.grpc_fd >= 0) close(c.grpc_fd);
    close(fd);
    wt_mutex_lock(&l->mu);
    l->counts.shed++;
    wt_mutex_unlock(&l->mu);
    note(l, "%s closed at once: %s", c.peer, strerror(err));
    return;
  }
  c.ino = st.st_ino;
  struct epoll_event ev = {.events = EPOLLRDHUP, .data.u64 = (uint64_t)fd};
  if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    int err = errno;
    close(c.grpc_fd);
    close(fd);
    note(l, "%s closed at once: epoll: %s", c.peer, strerror(err));
    return;
  }
  wt_mutex_lock(&l->mu);
  /* gRPC closed a connection whose number the dup just reused. */
  for (size_t i = 0; i < l->nconns; i++)
    if (l->conns[i].grpc_fd == c.grpc_fd) {
      drop_locked(l, i);
      break;
    }
  l->conns[l->nconns++] = c;
  l->counts.accepted++;
  wt_mutex_unlock(&l->mu);
  /* gRPC owns c.grpc_fd from here, closing it when the connection ends. */
  if (!hand_to_grpc(l, c.grpc_fd)) {
    close(c.grpc_fd);
    wt_mutex_lock(&l->mu);
    rpc_conn *r = by_fd(l, fd);
    if (r != NULL) drop_locked(l, (size_t)(r - l->conns));
    wt_mutex_unlock(&l->mu);
  }
}

/* ---- TLS -------------------------------------------------------------------
 */

/* A TLS connection waits for its ClientHello; gRPC hears of it once the
 * handshake is done (attach). */
static void admit_tls(rpc_listener *l, rpc_conn *c) {
  c->relay = rpc_relay_new(l->tls, c->fd);
  c->ev_net = EPOLLIN;
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)c->fd};
  if (c->relay == NULL || epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    const char *why = c->relay ? strerror(errno) : "out of memory";
    rpc_relay_free(c->relay);
    close(c->fd);
    wt_mutex_lock(&l->mu);
    l->counts.shed++;
    wt_mutex_unlock(&l->mu);
    note(l, "%s closed at once: %s", c->peer, why);
    return;
  }
  wt_mutex_lock(&l->mu);
  l->conns[l->nconns++] = *c;
  l->counts.accepted++;
  wt_mutex_unlock(&l->mu);
}

/* The handshake is done: a socketpair, one end gRPC's. false: no
 * descriptors for it (the connection is dropped by the caller). */
static bool attach(rpc_listener *l, rpc_conn *c) {
  int sv[2];
  struct stat st;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) !=
      0) {
    int err = errno;
    wt_mutex_lock(&l->mu);
    l->counts.shed++;
    wt_mutex_unlock(&l->mu);
    note(l,
         "%s closed after its TLS handshake: socketpair: %s (descriptors "
         "ran short; raise ulimit -n or lower --max-connections)",
         c->peer, strerror(err));
    return false;
  }
  /* Room for a few records' worth each way between the relay and gRPC. */
  int buf = 1 << 20;
  for (int k = 0; k < 2; k++) {
    setsockopt(sv[k], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(sv[k], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  }
  struct epoll_event ev = {.events = 0, .data.u64 = (uint64_t)sv[0]};
  if (fstat(sv[1], &st) != 0 ||
      epoll_ctl(l->epfd, EPOLL_CTL_ADD, sv[0], &ev) != 0) {
    int err = errno;
    close(sv[0]);
    close(sv[1]);
    note(l, "%s closed after its TLS handshake: %s", c->peer, strerror(err));
    return false;
  }
  wt_mutex_lock(&l->mu);
  /* gRPC closed a connection whose number gRPC's end just reused: that
   * record no longer names a gRPC descriptor (its own hang-up ends it). */
  for (size_t i = 0; i < l->nconns; i++)
    if (l->conns[i].grpc_fd == sv[1]) {
      l->conns[i].grpc_fd = -1;
      shut_locked(l, &l->conns[i], wt_mono_ms());
    }
  c->pair = sv[0];
  c->grpc_fd = sv[1];
  c->ino = st.st_ino;
  c->ev_pair = 0;
  wt_mutex_unlock(&l->mu);
  rpc_relay_attach(c->relay, sv[0]);
  /* gRPC owns sv[1] from here, closing it when the connection ends. */
  if (!hand_to_grpc(l, sv[1])) { /* stopped: the caller drops the record */
    close(sv[1]);
    wt_mutex_lock(&l->mu);
    c->grpc_fd = -1;
    wt_mutex_unlock(&l->mu);
    return false;
  }
  return true;
}

static void set_again(rpc_listener *l, rpc_conn *c, bool again) {
  if (c->again == again) return;
  c->again = again;
  if (again)
    l->nagain++;
  else
    l->nagain--;
}

static void watch(rpc_listener *l, int fd, uint32_t *have, uint32_t want) {
  if (fd < 0 || *have == want) return;
  struct epoll_event ev = {.events = want, .data.u64 = (uint64_t)fd};
  epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
  *have = want;
}

/* Moves what a TLS connection can move now. */
static void relay_step(rpc_listener *l, rpc_conn *c) {
  for (;;) {
    uint32_t net = 0, pair = 0;
    const char *why = NULL;
    int rc = rpc_relay_pump(c->relay, RELAY_BUDGET, &net, &pair, &why);
    if (rc == RPC_RELAY_READY) {
      if (attach(l, c)) continue;
      rc = RPC_RELAY_DONE;
    }
    if (rc == RPC_RELAY_DONE) {
      if (why != NULL && c->closing_ms == 0)
        note(l, "%s: %s; closed", c->peer, why);
      wt_mutex_lock(&l->mu);
      drop_locked(l, (size_t)(c - l->conns));
      wt_mutex_unlock(&l->mu);
      return;
    }
    set_again(l, c, rc == RPC_RELAY_AGAIN);
    watch(l, c->fd, &c->ev_net, net);
    watch(l, c->pair, &c->ev_pair, pair);
    return;
  }
}

/* A step of a connection, but a handshake only while this pass of the
 * loop has spent less than HANDSHAKE_PASS_MS on handshakes: the rest wait
 * for the next pass, so a flood of handshakes (a CPU cost per connection
 * a stranger chooses) waits behind the bytes of connections relaying. */
static void step(rpc_listener *l, rpc_conn *c) {
  if (rpc_relay_handshaken(c->relay)) {
    relay_step(l, c);
    return;
  }
  if (l->hs_us >= HANDSHAKE_PASS_MS * 1000) {
    set_again(l, c, true);
    return;
  }
  int64_t t0 = wt_mono_us();
  relay_step(l, c);
  l->hs_us += wt_mono_us() - t0;
}

/* The relays whose last step ran out of budget, and the handshakes a
 * pass put off. */
static void relay_again(rpc_listener *l) {
  size_t left = l->nagain; /* those set now; a step may set its own again */
  for (size_t i = 0; i < l->nconns && left > 0;) {
    rpc_conn *c = &l->conns[i];
    size_t before = l->nconns;
    if (c->again) {
      left--;
      set_again(l, c, false);
      step(l, c);
    }
    if (l->nconns == before) i++; /* else record i is another one now */
  }
}

static void accept_some(rpc_listener *l, int lfd) {
  for (int k = 0; k < 64; k++) {
    struct sockaddr_storage a;
    socklen_t alen = sizeof(a);
    int fd = accept4(lfd, (struct sockaddr *)&a, &alen,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(l, fd, &a);
      continue;
    }
    switch (errno) {
      case EAGAIN:
#if EAGAIN != EWOULDBLOCK
      case EWOULDBLOCK:
#endif
        return;
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
        continue;
      case EMFILE:
      case ENFILE:
        shed(l, lfd, errno);
        return;
      default:
        note(l, "accept: %s: pausing for %d ms", strerror(errno), PAUSE_MS);
        pause_accepting(l, wt_mono_ms());
        return;
    }
  }
}

/* ---- closing
 * ----------------------------------------------------------------- */

/* Our descriptor's events: the socket was shut down both ways (by gRPC,
 * which closes it next, or by us) or failed: forget it. The peer only
 * half-closed: gRPC reads its last bytes and closes; the record stays until
 * then, with nothing more to report (hang-ups and errors still are). */
static void hung_up(rpc_listener *l, int fd, uint32_t events) {
  wt_mutex_lock(&l->mu);
  for (size_t i = 0; i < l->nconns; i++)
    if (l->conns[i].fd == fd) {
      if (events & (EPOLLHUP | EPOLLERR)) {
        drop_locked(l, i);
      } else {
        struct epoll_event ev = {.events = 0, .data.u64 = (uint64_t)fd};
        epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
      }
      break;
    }
  wt_mutex_unlock(&l->mu);
}

static void reap(rpc_listener *l, int64_t now) {
  bool gone_check = now >= l->next_gone_check;
  if (gone_check) l->next_gone_check = now + GONE_CHECK_MS;
  wt_mutex_lock(&l->mu);
  for (size_t i = 0; i < l->nconns;) {
    rpc_conn *c = &l->conns[i];
    if (c->closing_ms == 0 && c->scope == 0 &&
        (now - c->accepted_ms >= l->grace_ms ||
         (c->relay != NULL && !rpc_relay_handshaken(c->relay) &&
          now - c->accepted_ms >= l->handshake_ms))) {
      shut_locked(l, c, now);
      l->counts.expired++;
    }
    bool drop = c->closing_ms != 0 && now - c->closing_ms >= CLOSING_GIVE_UP_MS;
    if (!drop && gone_check && c->grpc_fd >= 0) {
      struct stat st;
      drop = fstat(c->grpc_fd, &st) != 0 || st.st_ino != c->ino;
    }
    if (drop)
      drop_locked(l, i);
    else
      i++;
  }
  wt_mutex_unlock(&l->mu);
}

static void *listener_main(void *arg) {
  rpc_listener *l = arg;
  struct epoll_event evs[64];
  int64_t next_reap = wt_mono_ms() + TICK_MS;
  for (;;) {
    wt_mutex_lock(&l->mu);
    bool quit = l->quit, accepting = l->accepting;
    wt_mutex_unlock(&l->mu);
    if (quit) break;
    if (!accepting && l->nl > 0) { /* stopped: the sockets close here */
      for (size_t i = 0; i < l->nl; i++) {
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->lfd[i], NULL);
        close(l->lfd[i]);
      }
      l->nl = 0;
    }
    int n = epoll_wait(l->epfd, evs, 64, l->nagain > 0 ? 0 : TICK_MS);
    l->hs_us = 0;
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64;
      if (tag == EV_WAKE) {
        uint64_t v;
        if (read(l->wakefd, &v, sizeof(v)) < 0) { /* nothing to do */
        }
      } else if (tag >= EV_LISTEN(MAX_LISTENERS - 1)) {
        size_t k = (size_t)(EV_LISTEN(0) - tag);
        if (k < l->nl) accept_some(l, l->lfd[k]);
      } else {
        rpc_conn *c = by_fd(l, (int)tag);
        if (c == NULL) continue; /* dropped earlier in this pass */
        if (c->relay == NULL)
          hung_up(l, (int)tag, evs[i].events);
        else if (!rpc_relay_handshaken(c->relay))
          set_again(l, c, true); /* after the relays' bytes (relay_again) */
        else
          relay_step(l, c);
      }
    }
    if (l->nagain > 0) relay_again(l);
    int64_t now = wt_mono_ms();
    if (l->paused && now >= l->resume_ms) resume_accepting(l);
    if (now >= next_reap) {
      reap(l, now);
      next_reap = now + TICK_MS;
    }
  }
  return NULL;
}

/* ---- binding
 * ------------------------------------------------------------------ */

/* Splits "host:port" / "[v6]:port" into host and port. */
static bool split_listen(const char *listen, char *host, size_t hn, char *port,
                         size_t pn) {
  const char *colon = strrchr(listen, ':');
  if (colon == NULL || colon[1] == 0) return false;
  const char *h = listen;
  size_t len = (size_t)(colon - listen);
  if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
    h++;
    len -= 2;
  }
  if (len == 0 || len >= hn || strlen(colon + 1) >= pn) return false;
  memcpy(host, h, len);
  host[len] = 0;
  snprintf(port, pn, "%s", colon + 1);
  return true;
}

static wt_status *bind_all(rpc_listener *l, const char *addr) {
  char host[256], port[16];
  if (!split_listen(addr, host, sizeof(host), port, sizeof(port)))
    return wt_status_new(WT_UNAVAILABLE, "listen address '%s': not host:port",
                         addr);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc != 0)
    return wt_status_new(WT_UNAVAILABLE, "listen address '%s': %s", addr,
                         gai_strerror(rc));
  int err = 0;
  for (struct addrinfo *ai = res; ai && l->nl < MAX_LISTENERS;
       ai = ai->ai_next) {
    struct sockaddr_storage a;
    memcpy(&a, ai->ai_addr, ai->ai_addrlen);
    if (l->port > 0) { /* port 0: every address on the one picked first */
      if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)l->port);
      else if (a.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)l->port);
    }
    int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) /* "[::]" takes IPv4 too, as gRPC's */
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){0}, sizeof(int));
    if (bind(fd, (struct sockaddr *)&a, ai->ai_addrlen) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
      err = errno;
      close(fd);
      continue;
    }
    if (l->port == 0) {
      struct sockaddr_storage b;
      socklen_t blen = sizeof(b);
      getsockname(fd, (struct sockaddr *)&b, &blen);
      l->port =
          ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                        : ((struct sockaddr_in *)&b)->sin_port);
    }
    l->lfd[l->nl++] = fd;
  }
  freeaddrinfo(res);
  if (l->nl == 0)
    return wt_status_new(WT_UNAVAILABLE, "listen address '%s': cannot bind: %s",
                         addr, err ? strerror(err) : "no address");
  return NULL;
}

/* ---- the interface
 * ---------------------------------------------------------------- */

int rpc_listener_budget(int max_connections, int per_connection,
                        int *limit_out) {
  struct rlimit rl;
  long nofile = 1024;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    nofile = (long)rl.rlim_cur;
  else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    nofile = 1 << 20;
  long room =
      (nofile - WT_RPC_FD_RESERVE) / (per_connection > 0 ? per_connection : 2);
  if (limit_out) *limit_out = (int)(nofile < INT32_MAX ? nofile : INT32_MAX);
  long cap =
      max_connections > 0 ? max_connections : WT_RPC_DEFAULT_MAX_CONNECTIONS;
  return (int)(cap < room ? cap : room);
}

wt_status *rpc_listener_start(grpc_server *gs, const char *listen,
                              rpc_tls_server *tls, int max_connections,
                              int grace_ms, int handshake_ms,
                              rpc_listener **out, int *port) {
  *out = NULL;
  int nofile = 0, each = tls ? 3 : 2;
  int cap = rpc_listener_budget(max_connections, each, &nofile);
  if (cap < 4)
    return wt_status_new(
        WT_FAILED_PRECONDITION,
        "listen address '%s': the descriptor limit (ulimit -n %d) leaves no "
        "room for connections after the %d kept for the server's own files "
        "(each connection takes %d); raise it",
        listen, nofile, WT_RPC_FD_RESERVE, each);
  if (max_connections > 0 && cap < max_connections)
    WT_LOGW(RPC_MOD,
            "max_connections %d: the descriptor limit (ulimit -n %d) allows "
            "%d (%d each, %d kept for the server's own files)",
            max_connections, nofile, cap, each, WT_RPC_FD_RESERVE);

  rpc_listener *l = calloc(1, sizeof(*l));
  if (l == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  l->gs = gs;
  l->tls = tls;
  l->handshake_ms = handshake_ms > 0 ? handshake_ms : 5000;
  l->epfd = l->wakefd = l->spare = -1;
  l->max_conns = cap;
  l->grace_ms = grace_ms > 0 ? grace_ms : WT_RPC_DEFAULT_AUTH_GRACE_MS;
  l->slots = (size_t)cap + CLOSING_HEADROOM;
  l->counts.limit = cap;
  l->accepting = l->handing = true;
  wt_mutex_init(&l->mu, WT_LOCK_RPC_LISTENER, 0, "listener.mu");
  wt_mutex_init(&l->hand_mu, WT_LOCK_RPC_LISTENER_HAND, 0, "listener.hand_mu");
  wt_status *st = NULL;
  l->conns = calloc(l->slots, sizeof(*l->conns));
  l->creds = grpc_insecure_server_credentials_create();
  l->epfd = epoll_create1(EPOLL_CLOEXEC);
  l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (l->conns == NULL || l->creds == NULL || l->epfd < 0 || l->wakefd < 0 ||
      l->spare < 0) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED,
                       "listen address '%s': cannot set up the listener: %s",
                       listen, strerror(errno));
    goto fail;
  }
  if ((st = bind_all(l, listen)) != NULL) goto fail;
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
  epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev);
  for (size_t i = 0; i < l->nl; i++) {
    struct epoll_event lev = {.events = EPOLLIN, .data.u64 = EV_LISTEN(i)};
    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd[i], &lev);
  }
  int rc = pthread_create(&l->thread, NULL, listener_main, l);
  if (rc != 0) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED,
                       "listen address '%s': cannot start the accept thread: "
                       "%s",
                       listen, strerror(rc));
    goto fail;
  }
  l->started = true;
  *port = l->port;
  *out = l;
  return NULL;
fail:
  rpc_listener_destroy(l);
  return st;
}

static void wake(rpc_listener *l) {
  uint64_t one = 1;
  if (write(l->wakefd, &one, sizeof(one)) < 0) { /* it wakes within a tick */
  }
}

void rpc_listener_stop(rpc_listener *l) {
  if (l == NULL || !l->started) return;
  wt_mutex_lock(&l->hand_mu);
  l->handing = false;
  wt_mutex_unlock(&l->hand_mu);
  wt_mutex_lock(&l->mu);
  l->accepting = false;
  wt_mutex_unlock(&l->mu);
  wake(l);
}

void rpc_listener_destroy(rpc_listener *l) {
  if (l == NULL) return;
  if (l->started) {
    rpc_listener_stop(l);
    wt_mutex_lock(&l->mu);
    l->quit = true;
    wt_mutex_unlock(&l->mu);
    wake(l);
    pthread_join(l->thread, NULL);
    l->started = false;
  }
  for (size_t i = 0; i < l->nl; i++) close(l->lfd[i]);
  wt_mutex_lock(&l->mu);
  while (l->nconns > 0) drop_locked(l, l->nconns - 1);
  wt_mutex_unlock(&l->mu);
  if (l->epfd >= 0) close(l->epfd);
  if (l->wakefd >= 0) close(l->wakefd);
  if (l->spare >= 0) close(l->spare);
  if (l->creds) grpc_server_credentials_release(l->creds);
  free(l->conns);
  wt_mutex_destroy(&l->mu);
  wt_mutex_destroy(&l->hand_mu);
  free(l);
}

void rpc_listener_authorized(rpc_listener *l, const char *grpc_peer,
                             uint32_t scope) {
  int gfd = grpc_fd_of(grpc_peer);
  if (l == NULL || gfd < 0) return;
  wt_mutex_lock(&l->mu);
  rpc_conn *c = by_grpc_fd_locked(l, gfd);
  if (c != NULL) {
    c->scope |= scope;
    c->last_call_ms = wt_mono_ms();
  }
  wt_mutex_unlock(&l->mu);
}

char *rpc_listener_peer(rpc_listener *l, char *grpc_peer) {
  int gfd = grpc_fd_of(grpc_peer);
  if (l == NULL || gfd < 0) return grpc_peer;
  char *named = NULL;
  wt_mutex_lock(&l->mu);
  rpc_conn *c = by_grpc_fd_locked(l, gfd);
  if (c != NULL) named = gpr_strdup(c->peer);
  wt_mutex_unlock(&l->mu);
  if (named == NULL) return grpc_peer;
  gpr_free(grpc_peer);
  return named;
}

/* "uid:N" for a peer on this host (the owner of its end of the
 * connection, by one netlink lookup of the 4-tuple; /proc/net/tcp when
 * netlink is refused), else "ip:ADDR". */
static void work_out_key(const char *peer, const struct sockaddr_storage *addr,
                         const struct sockaddr_storage *local, int server_port,
                         char *key, size_t n) {
  /* peer: "ipv4:127.0.0.1:41234" or "ipv6:[::1]:41234" */
  const char *at = strchr(peer, ':');
  const char *last = strrchr(peer, ':');
  at = at ? at + 1 : peer;
  int alen = last && last > at ? (int)(last - at) : (int)strlen(at);
  char a[64];
  snprintf(a, sizeof(a), "%.*s", alen, at);
  bool here = strncmp(a, "127.", 4) == 0 || strcmp(a, "[::1]") == 0 ||
              strncmp(a, "[::ffff:127.", 12) == 0;
  unsigned uid = 0;
  if (here && (wt_tcp_peer_uid((const struct sockaddr *)addr,
                               (const struct sockaddr *)local, &uid) ||
               (last != NULL && wt_tcp_socket_uid(atoi(last + 1), server_port,
                                                  1 /* established */, &uid))))
    snprintf(key, n, "uid:%u", uid);
  else
    snprintf(key, n, "ip:%s", a);
}

bool rpc_listener_peer_key(rpc_listener *l, const char *grpc_peer, char *key,
                           size_t n) {
  int gfd = grpc_fd_of(grpc_peer);
  if (l == NULL || gfd < 0) return false;
  char peer[sizeof(((rpc_conn *)0)->peer)] = "";
  struct sockaddr_storage addr, local;
  wt_mutex_lock(&l->mu);
  rpc_conn *c = by_grpc_fd_locked(l, gfd);
  if (c != NULL && c->key[0] != 0) snprintf(key, n, "%s", c->key);
  bool known = c != NULL && c->key[0] != 0, found = c != NULL;
  if (found) {
    snprintf(peer, sizeof(peer), "%s", c->peer);
    addr = c->addr;
    local = c->local;
  }
  wt_mutex_unlock(&l->mu);
  if (known || !found) return known;
  /* Once per connection, outside the lock: it asks the kernel. */
  char k[80];
  work_out_key(peer, &addr, &local, l->port, k, sizeof(k));
  wt_mutex_lock(&l->mu);
  c = by_grpc_fd_locked(l, gfd);
  if (c != NULL && strcmp(c->peer, peer) == 0)
    snprintf(c->key, sizeof(c->key), "%s", k);
  wt_mutex_unlock(&l->mu);
  snprintf(key, n, "%s", k);
  return true;
}

void rpc_listener_counts(rpc_listener *l, wt_rpc_conn_counts *out) {
  wt_mutex_lock(&l->mu);
  *out = l->counts;
  out->open = (int)open_count_locked(l);
  wt_mutex_unlock(&l->mu);
}
