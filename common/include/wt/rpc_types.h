/* wt/rpc_types.h: the RPC layer's types that wt's public headers show: TLS
 * material, the deadline that means none, the client's channel (opaque)
 * and the server's connection and refusal counters. The RPC layer itself
 * (wt/rpc.h) is private to wt's libraries. */
#ifndef WT_RPC_TYPES_H
#define WT_RPC_TYPES_H

#include <stdint.h>
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* For deadline_ms: no deadline at all (watch streams). */
#define WT_RPC_NO_DEADLINE ((int64_t)-1)

/* TLS material, as file paths (read when the server starts or the channel
 * is made; the strings need not outlive that call).
 *   server: cert_file and key_file (PEM; the chain and its key) turn TLS on;
 *           ca_file then requires every client to present a certificate
 *           that this CA signed (mutual TLS) and refuses the others during
 *           the handshake.
 *   client: ca_file is the CA that signed the server's certificate (NULL:
 *           the system's roots); cert_file and key_file are the client's
 *           own, for a server that requires them; server_name overrides the
 *           name the server's certificate must carry (NULL: the target's
 *           host). */
typedef struct wt_rpc_tls {
  const char *cert_file;
  const char *key_file;
  const char *ca_file;
  const char *server_name;
} wt_rpc_tls;

/* One client channel to one server (made and owned by the sync client;
 * wt_sync_client_channel lends it). */
typedef struct wt_rpc_channel wt_rpc_channel;

/* The server's connections (plaintext or TLS): open now, the cap in force,
 * and since start: accepted, refused (over
 * the cap with nothing to close), evicted (closed to make room), expired
 * (no authorized call within the grace) and shed (closed at once because
 * descriptors ran out). */
typedef struct wt_rpc_conn_counts {
  int open;
  int limit;
  uint64_t accepted, refused, evicted, expired, shed;
} wt_rpc_conn_counts;

/* Calls the server refused before admission: with no or a wrong token
 * (unauthenticated), or a token of too narrow a scope (denied). */
typedef struct wt_rpc_auth_counts {
  uint64_t unauthenticated;
  uint64_t denied;
} wt_rpc_auth_counts;

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_RPC_TYPES_H */
