/* rpc_relay.c: TLS terminated by wt, for the listener (rpc_listener.c).
 *
 * gRPC 1.51 takes an accepted connection from a descriptor
 * (grpc_server_add_channel_from_fd) in plaintext only, and its own TLS
 * listener has none of the listener's defences (a cap, the grace, accepting
 * after EMFILE). So a TLS server's connections are accepted by the
 * listener like plaintext ones; the TLS handshake and the records are
 * OpenSSL's, here; and gRPC is handed one end of a socketpair that carries
 * the plaintext HTTP/2. The relay runs on the listener's thread: it never
 * blocks, and each step does at most a budget of bytes, so one busy
 * connection cannot hold the others (or the accept path) up.
 *
 * Three descriptors a connection: the TCP socket and our end of the pair
 * (ours), gRPC's end (gRPC's). Memory: OpenSSL's buffers (released while
 * a connection is idle) and, for each direction with bytes in flight, one
 * RELAY_CHUNK buffer, freed when it drains.
 */

#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wt/secure.h"

#include "rpc_internal.h"

#define RELAY_CHUNK (256 * 1024)

struct rpc_tls_server {
  SSL_CTX *ctx;
  BIO_METHOD *bio; /* a socket's, through send(MSG_NOSIGNAL) */
};

/* Where a direction waits. */
enum { WAIT_NONE, WAIT_NET_IN, WAIT_NET_OUT, WAIT_PAIR_IN, WAIT_PAIR_OUT };

typedef struct relay_dir {
  unsigned char *buf;
  size_t off, len;
  int wait;
  bool eof;  /* its source ended */
  bool done; /* and its end was passed on */
} relay_dir;

struct rpc_relay {
  SSL *ssl;
  int net, pair;
  bool handshaken;
  relay_dir up;   /* net -> pair: SSL_read, write */
  relay_dir down; /* pair -> net: read, SSL_write */
  char why[160];
};

/* ---- the socket under TLS
 * -------------------------------------------------------- */

/* OpenSSL's socket BIO writes with write(2): a peer that reset raises
 * SIGPIPE, which a library may not ignore for its process. This one sends
 * with MSG_NOSIGNAL. */
static int sock_write(BIO *b, const char *buf, int len) {
  int fd = (int)(intptr_t)BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_write(b);
  return (int)n;
}

static int sock_read(BIO *b, char *buf, int len) {
  int fd = (int)(intptr_t)BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n = recv(fd, buf, (size_t)len, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_read(b);
  return (int)n;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b;
  (void)num;
  (void)ptr;
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sock_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

/* ---- the context ------------------------------------------------------------
 */

/* OpenSSL's first queued error as text (and the queue cleared). */
static void ssl_error(char *out, size_t n, const char *what) {
  unsigned long e = ERR_get_error();
  char buf[120] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  snprintf(out, n, "%s: %s", what, buf);
}

/* INVALID_ARGUMENT naming the option, its file and OpenSSL's reason. */
static wt_status *file_error(const char *option, const char *path,
                             const char *what) {
  char why[200];
  ssl_error(why, sizeof(why), what);
  return wt_status_new(WT_INVALID_ARGUMENT, "%s '%s': %s", option, path, why);
}

/* A key under a pass phrase is refused, never prompted for. */
static int no_pass_phrase(char *buf, int size, int rwflag, void *u) {
  (void)buf;
  (void)size;
  (void)rwflag;
  (void)u;
  return 0;
}

static int select_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                     const unsigned char *in, unsigned int inlen, void *arg) {
  (void)ssl;
  (void)arg;
  static const unsigned char h2[] = {2, 'h', '2'};
  unsigned char *sel = NULL;
  if (SSL_select_next_proto(&sel, outlen, h2, sizeof(h2), in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
  }
  /* A client that offers no h2 speaks no gRPC: the handshake fails. */
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* A ClientHello without the ALPN extension: OpenSSL would not call
 * select_h2 at all and go on; a gRPC client always offers h2, so one that
 * offers nothing is refused as one that offers something else is. */
static int need_alpn(SSL *ssl, int *alert, void *arg) {
  (void)arg;
  const unsigned char *ext = NULL;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(
          ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext,
          &len) == 1 &&
      len > 0)
    return SSL_CLIENT_HELLO_SUCCESS;
  *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
  return SSL_CLIENT_HELLO_ERROR;
}

static wt_status *load_chain(SSL_CTX *ctx, const char *path, const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  if (bio == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  X509 *leaf = PEM_read_bio_X509_AUX(bio, NULL, no_pass_phrase, NULL);
  wt_status *st = NULL;
  if (leaf == NULL || SSL_CTX_use_certificate(ctx, leaf) != 1) {
    st = file_error("--tls-cert", path, "not a certificate");
    goto out;
  }
  for (;;) { /* the intermediates, if any */
    X509 *ca = PEM_read_bio_X509(bio, NULL, no_pass_phrase, NULL);
    if (ca == NULL) break;
    if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) {
      X509_free(ca);
      st = file_error("--tls-cert", path, "its chain");
      goto out;
    }
  }
  ERR_clear_error(); /* the end of the file */
out:
  X509_free(leaf);
  BIO_free(bio);
  return st;
}

static wt_status *load_key(SSL_CTX *ctx, const char *path, const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  if (bio == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, no_pass_phrase, NULL);
  BIO_free(bio);
  wt_status *st = NULL;
  if (key == NULL)
    st = file_error("--tls-key", path,
                    "not a private key without a pass phrase");
  else if (SSL_CTX_use_PrivateKey(ctx, key) != 1 ||
           SSL_CTX_check_private_key(ctx) != 1)
    st = file_error("--tls-key", path, "does not match --tls-cert");
  EVP_PKEY_free(key);
  return st;
}

static wt_status *load_ca(SSL_CTX *ctx, const char *path, const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  if (bio == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  X509_STORE *store = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  wt_status *st = NULL;
  for (;;) {
    X509 *ca = PEM_read_bio_X509(bio, NULL, no_pass_phrase, NULL);
    if (ca == NULL) break;
    if (X509_STORE_add_cert(store, ca) != 1 ||
        SSL_CTX_add_client_CA(ctx, ca) != 1) {
      st = file_error("--tls-ca", path, "cannot use it");
      X509_free(ca);
      break;
    }
    X509_free(ca);
    n++;
  }
  ERR_clear_error();
  BIO_free(bio);
  if (st == NULL && n == 0)
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "--tls-ca '%s': no certificate in it", path);
  if (st == NULL)
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       NULL);
  return st;
}

wt_status *rpc_tls_server_new(const wt_rpc_tls *tls, rpc_tls_server **out) {
  *out = NULL;
  if (tls == NULL || tls->cert_file == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         tls && (tls->key_file || tls->ca_file)
                             ? "--tls-key and --tls-ca need --tls-cert (the "
                               "server's certificate)"
                             : "--tls-cert: missing");
  if (tls->key_file == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "--tls-cert '%s' needs --tls-key (its private key)",
                         tls->cert_file);
  wt_status *st = NULL;
  char *cert = NULL, *key = NULL, *ca = NULL;
  rpc_tls_server *t = calloc(1, sizeof(*t));
  if (t == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(rpc_read_pem("--tls-cert", tls->cert_file, &cert));
  WT_CHECK(rpc_read_pem("--tls-key", tls->key_file, &key));
  if (tls->ca_file) WT_CHECK(rpc_read_pem("--tls-ca", tls->ca_file, &ca));
  t->ctx = SSL_CTX_new(TLS_server_method());
  t->bio =
      BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "wt socket");
  if (t->ctx == NULL || t->bio == NULL ||
      BIO_meth_set_write(t->bio, sock_write) != 1 ||
      BIO_meth_set_read(t->bio, sock_read) != 1 ||
      BIO_meth_set_ctrl(t->bio, sock_ctrl) != 1 ||
      BIO_meth_set_create(t->bio, sock_create) != 1)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "TLS: cannot make a context");
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  /* TLS 1.2: forward-secret AEAD suites only (TLS 1.3's are all that). */
  SSL_CTX_set_cipher_list(t->ctx, "ECDHE+AESGCM:ECDHE+CHACHA20");
  SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                  SSL_OP_CIPHER_SERVER_PREFERENCE |
                                  SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                               SSL_MODE_RELEASE_BUFFERS);
  /* No resumption: no session state, no ticket keys to keep. */
  SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(t->ctx, 0);
  /* Read what the socket has, not one record per recv. */
  SSL_CTX_set_read_ahead(t->ctx, 1);
  SSL_CTX_set_default_read_buffer_len(t->ctx, 64 * 1024);
  SSL_CTX_set_alpn_select_cb(t->ctx, select_h2, NULL);
  SSL_CTX_set_client_hello_cb(t->ctx, need_alpn, NULL);
  WT_CHECK(load_chain(t->ctx, tls->cert_file, cert));
  WT_CHECK(load_key(t->ctx, tls->key_file, key));
  if (ca) WT_CHECK(load_ca(t->ctx, tls->ca_file, ca));
  *out = t;
  t = NULL;
out:
  free(cert);
  wt_secret_free(key);
  free(ca);
  rpc_tls_server_free(t);
  return st;
}

void rpc_tls_server_free(rpc_tls_server *t) {
  if (t == NULL) return;
  SSL_CTX_free(t->ctx);
  if (t->bio) BIO_meth_free(t->bio);
  free(t);
}

/* ---- one connection
 * ------------------------------------------------------------ */

rpc_relay *rpc_relay_new(rpc_tls_server *t, int net_fd) {
  rpc_relay *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->ssl = SSL_new(t->ctx);
  BIO *bio = r->ssl ? BIO_new(t->bio) : NULL;
  if (bio == NULL) {
    ERR_clear_error();
    rpc_relay_free(r);
    return NULL;
  }
  BIO_set_data(bio, (void *)(intptr_t)net_fd);
  SSL_set_bio(r->ssl, bio, bio); /* the SSL owns it */
  SSL_set_accept_state(r->ssl);
  r->net = net_fd;
  r->pair = -1;
  return r;
}

void rpc_relay_attach(rpc_relay *r, int pair_fd) {
  r->pair = pair_fd;
}

bool rpc_relay_handshaken(const rpc_relay *r) {
  return r->handshaken;
}

void rpc_relay_free(rpc_relay *r) {
  if (r == NULL) return;
  SSL_free(r->ssl);
  free(r->up.buf);
  free(r->down.buf);
  free(r);
}

static bool ensure_buf(relay_dir *d) {
  if (d->buf == NULL) d->buf = malloc(RELAY_CHUNK);
  return d->buf != NULL;
}

/* Where an SSL call that returned `rc` waits; -1: it failed (why set). */
static int ssl_wait(rpc_relay *r, int rc, const char *what, bool *eof) {
  int e = SSL_get_error(r->ssl, rc);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      return WAIT_NET_IN;
    case SSL_ERROR_WANT_WRITE:
      return WAIT_NET_OUT;
    case SSL_ERROR_ZERO_RETURN:
      *eof = true;
      return WAIT_NONE;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        if (errno == 0 || errno == ECONNRESET || errno == EPIPE) {
          *eof = true; /* the peer went away */
          ERR_clear_error();
          return WAIT_NONE;
        }
        snprintf(r->why, sizeof(r->why), "%s: %s", what, strerror(errno));
        return -1;
      }
      /* fall through */
    default:
      ssl_error(r->why, sizeof(r->why), what);
      return -1;
  }
}

/* net -> pair. false: the connection failed. */
static bool pump_up(rpc_relay *r, size_t *budget) {
  relay_dir *d = &r->up;
  while (!d->done && *budget > 0) {
    if (d->len > 0) {
      ssize_t n = send(r->pair, d->buf + d->off, d->len, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        d->wait = WAIT_PAIR_OUT;
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        if (errno == EPIPE || errno == ECONNRESET) { /* gRPC closed its end */
          d->done = true;
          return true;
        }
        snprintf(r->why, sizeof(r->why), "to gRPC: %s", strerror(errno));
        return false;
      }
      d->off += (size_t)n;
      d->len -= (size_t)n;
      *budget -= (size_t)n < *budget ? (size_t)n : *budget;
      continue;
    }
    if (d->eof) {
      shutdown(r->pair, SHUT_WR);
      d->done = true;
      break;
    }
    if (!ensure_buf(d)) {
      snprintf(r->why, sizeof(r->why), "out of memory");
      return false;
    }
    /* Records into the buffer until it is full or the socket has no more:
     * one write to gRPC for many records. */
    d->off = d->len = 0;
    int n = 0;
    while (d->len < RELAY_CHUNK) {
      ERR_clear_error();
      errno = 0;
      n = SSL_read(r->ssl, d->buf + d->len, (int)(RELAY_CHUNK - d->len));
      if (n <= 0) break;
      d->len += (size_t)n;
    }
    if (d->len > 0) continue; /* what failed or waits is met again next */
    int w = ssl_wait(r, n, "TLS read", &d->eof);
    if (w < 0) return false;
    if (w != WAIT_NONE) {
      d->wait = w;
      /* Nothing in flight: the buffer goes back while it waits. */
      free(d->buf);
      d->buf = NULL;
      return true;
    }
  }
  d->wait = WAIT_NONE;
  return true;
}

/* pair -> net. false: the connection failed. */
static bool pump_down(rpc_relay *r, size_t *budget) {
  relay_dir *d = &r->down;
  while (!d->done && *budget > 0) {
    if (d->len > 0) {
      ERR_clear_error();
      errno = 0;
      int n = SSL_write(r->ssl, d->buf + d->off,
                        d->len > INT32_MAX ? INT32_MAX : (int)d->len);
      if (n > 0) {
        d->off += (size_t)n;
        d->len -= (size_t)n;
        *budget -= (size_t)n < *budget ? (size_t)n : *budget;
        continue;
      }
      bool eof = false;
      int w = ssl_wait(r, n, "TLS write", &eof);
      if (w < 0) return false;
      if (eof) { /* the peer is gone: nothing more can reach it */
        d->done = true;
        return true;
      }
      d->wait = w;
      return true;
    }
    if (d->eof) {
      /* gRPC closed its end: say so to the peer, best effort. */
      ERR_clear_error();
      if (SSL_shutdown(r->ssl) < 0) ERR_clear_error();
      d->done = true;
      break;
    }
    if (!ensure_buf(d)) {
      snprintf(r->why, sizeof(r->why), "out of memory");
      return false;
    }
    ssize_t n = recv(r->pair, d->buf, RELAY_CHUNK, 0);
    if (n > 0) {
      d->off = 0;
      d->len = (size_t)n;
      continue;
    }
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      d->eof = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      d->wait = WAIT_PAIR_IN;
      free(d->buf);
      d->buf = NULL;
      return true;
    }
    snprintf(r->why, sizeof(r->why), "from gRPC: %s", strerror(errno));
    return false;
  }
  d->wait = WAIT_NONE;
  return true;
}

static void wants(const relay_dir *d, uint32_t *net, uint32_t *pair) {
  switch (d->wait) {
    case WAIT_NET_IN:
      *net |= EPOLLIN;
      break;
    case WAIT_NET_OUT:
      *net |= EPOLLOUT;
      break;
    case WAIT_PAIR_IN:
      *pair |= EPOLLIN;
      break;
    case WAIT_PAIR_OUT:
      *pair |= EPOLLOUT;
      break;
    default:
      break;
  }
}

int rpc_relay_pump(rpc_relay *r, size_t budget, uint32_t *net_events,
                   uint32_t *pair_events, const char **why) {
  *net_events = *pair_events = 0;
  *why = NULL;
  if (!r->handshaken) {
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(r->ssl);
    if (rc == 1) {
      r->handshaken = true;
      return RPC_RELAY_READY;
    }
    bool eof = false;
    int w = ssl_wait(r, rc, "TLS handshake", &eof);
    if (w < 0 || eof) {
      if (eof) snprintf(r->why, sizeof(r->why), "TLS handshake: the peer left");
      *why = r->why;
      return RPC_RELAY_DONE;
    }
    *net_events = w == WAIT_NET_OUT ? EPOLLOUT : EPOLLIN;
    return RPC_RELAY_HANDSHAKE;
  }
  size_t ub = budget, db = budget;
  if (!pump_up(r, &ub) || !pump_down(r, &db)) {
    *why = r->why;
    return RPC_RELAY_DONE;
  }
  /* gRPC closed its end: the connection is over (what the peer still
   * sends has no reader). */
  if (r->down.done) return RPC_RELAY_DONE;
  wants(&r->up, net_events, pair_events);
  wants(&r->down, net_events, pair_events);
  bool more = (!r->up.done && r->up.wait == WAIT_NONE) ||
              (!r->down.done && r->down.wait == WAIT_NONE);
  return more ? RPC_RELAY_AGAIN : RPC_RELAY_OPEN;
}
