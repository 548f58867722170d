/* tool_format.h: what wt-push and wt-ctl share: output formatting and the
 * options that reach a server over TLS with a token. */
#ifndef WT_TOOL_FORMAT_H
#define WT_TOOL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/client.h"

/* Writes `bytes` as "512 B", "1.5 MiB", ... into buf; returns buf. */
const char *wt_tool_human_bytes(uint64_t bytes, char *buf, size_t len);

/* --tls-ca, --tls-cert, --tls-key, --tls-server-name, --token-file. The
 * strings point into argv. */
typedef struct wt_tool_security {
  wt_rpc_tls tls;
  bool tls_on;
  const char *token_file;
} wt_tool_security;

#define WT_TOOL_SECURITY_USAGE                                              \
  "  --tls-ca PATH        CA of the servers' certificates: talk TLS "       \
  "(PEM)\n"                                                                 \
  "  --tls-cert PATH      this client's certificate, for mutual TLS (with " \
  "--tls-key)\n"                                                            \
  "  --tls-key PATH       its private key\n"                                \
  "  --tls-server-name N  the name the server's certificate carries "       \
  "(default: the host)\n"                                                   \
  "  --token-file PATH    file holding the bearer token (default "          \
  "$WT_TOKEN_FILE)\n"

/* If `name` (without the leading "--") is one of the options above, takes
 * `value` and returns true. */
bool wt_tool_security_option(wt_tool_security *s, const char *name,
                             const char *value);

/* Fills the client options' tls and token_file from `s`; without
 * --token-file, from $WT_TOKEN_FILE (the tools read the environment; the
 * library does not). */
void wt_tool_security_apply(const wt_tool_security *s, wt_client_options *o);

/* What a server sends is printed to a reader's terminal: a version or a
 * reason with ESC sequences (OSC 52, clear screen) or newlines must not
 * reach it raw. Replaces, in place, every control byte of `s` (below 0x20,
 * and 0x7f) by '?'; NULL stays NULL. Returns s. */
char *wt_tool_printable(char *s);

/* wt_tool_printable on every string field of `m` and of the messages in it
 * (repeated, nested, set oneof members), as the tools receive them. */
void wt_tool_printable_pb(ProtobufCMessage *m);

/* The log level from $WT_LOG, for the tools. */
void wt_tool_log_level(void);

#endif /* WT_TOOL_FORMAT_H */
