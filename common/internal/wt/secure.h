/* wt/secure.h: the small primitives wt's trust model rests on (see the
 * docs/trust.md): unpredictable ids and secrets, comparisons that
 * take the same time whatever the bytes, UTF-8 validation of what strangers
 * send, bearer tokens read from files, and the keyed digests that let a
 * data-plane peer prove it holds the secret of an init.
 */
#ifndef WT_SECURE_H
#define WT_SECURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Fills buf[0..n) from the kernel's CSPRNG (getrandom); INTERNAL naming the
 * errno when it cannot (it never returns predictable bytes). */
wt_status *wt_random_bytes(void *buf, size_t n);

/* A random 64-bit value that is neither 0 nor `not` (round ids: 0 is never a
 * round, `not` the previous one). Aborts the process when the kernel gives
 * no randomness, which a server must not paper over with a counter. */
uint64_t wt_random_u64(uint64_t not );

/* a[0..n) == b[0..n) in time that depends on n only. */
bool wt_ct_equal(const void *a, const void *b, size_t n);

/* Whether s[0..n) is well-formed UTF-8 (no overlongs, no surrogates, nothing
 * above U+10FFFF). On false, *bad (when not NULL) is the offset of the first
 * byte that is not. */
bool wt_utf8_valid(const char *s, size_t n, size_t *bad);

/* HMAC-SHA-256 of msg[0..n) under key[0..klen). */
void wt_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n,
                    uint8_t out[32]);

/* Opens `path` for reading (O_CLOEXEC) without ever blocking at the open:
 * a FIFO, a device, a socket or a directory is refused by what it is
 * ("<what> 'path': a FIFO, not a regular file") before anything is read,
 * so that a start-up given one never hangs. *fd is the caller's (close),
 * *sb (may be NULL) the file's stat. */
wt_status *wt_open_regular(const char *what, const char *path, int *fd,
                           struct stat *sb);

/* The whole of a small regular file (at most max_bytes) as a NUL-terminated
 * string the caller frees (wt_secret_free when it holds a secret). `what`
 * names it in errors ("token file", "--tls-key"); with private_only a file
 * that others than its owner may read is refused. A NUL byte in it is an
 * error naming its line (the text would silently end there). Opened with
 * wt_open_regular. */
wt_status *wt_read_small_file(const char *what, const char *path,
                              size_t max_bytes, bool private_only, char **out);

/* Overwrites and frees a string that held a secret. NULL is ignored. */
void wt_secret_free(char *s);

/* ---- bearer tokens --------------------------------------------------------
 */

/* What a token lets its holder call (wt_rpc_method.scope). A trainer token
 * holds both bits. */
#define WT_SCOPE_READER 1u  /* info, list, versions, watch, checksums */
#define WT_SCOPE_TRAINER 2u /* init and every call of a round */
#define WT_SCOPE_ALL (WT_SCOPE_READER | WT_SCOPE_TRAINER)
/* A method anyone may call without a token (the health probes: Kubernetes'
 * carry none). It reveals nothing but a serving status, and such a call
 * never counts as the connection's authorized one (wt/rpc.h): a stranger's
 * connection making only these stays evictable and is closed at the
 * grace. */
#define WT_SCOPE_PUBLIC 4u

/* The fewest characters a token may have: a guessable token is none. */
#define WT_TOKEN_MIN_CHARS 16
#define WT_TOKEN_MAX_CHARS 512

typedef struct wt_token {
  char *token; /* printable ASCII, no spaces */
  uint32_t scope;
} wt_token;

/* The server's tokens: a file of lines "trainer TOKEN" or "reader TOKEN"
 * (blank lines and lines starting with '#' are skipped). A line in another
 * form, a token shorter than WT_TOKEN_MIN_CHARS or with a character outside
 * '!'..'~', a token listed twice, or an empty file is INVALID_ARGUMENT
 * naming the file and the line; an unreadable file names the errno. A file
 * that others than its owner may read is refused too (chmod 600), as ssh
 * refuses a key anyone can read. The caller owns *out (wt_tokens_free). */
wt_status *wt_tokens_load(const char *path, wt_token **out, size_t *n);
void wt_tokens_free(wt_token *t, size_t n);

/* The scope of `presented` (the bytes after "Bearer "), or 0 when it matches
 * none of tokens[0..n). Every token is compared, each in constant time, so
 * the time taken says nothing about which one nearly matched. */
uint32_t wt_tokens_match(const wt_token *tokens, size_t n,
                         const char *presented, size_t len);

/* A client's token: the first line of `path` that is not blank or a
 * comment, either the token alone or in the server's form "trainer TOKEN" /
 * "reader TOKEN" (so one file can serve both sides of a test); the token
 * must be printable ASCII of at least WT_TOKEN_MIN_CHARS. The caller frees
 * *out. */
wt_status *wt_token_read(const char *path, char **out);

/* ---- generated tokens (secure by default; docs/trust.md) -------------------
 *
 * wt-server without --token-file makes fresh tokens and writes them where
 * clients of the same user on this host find them: DIR/tokens-PORT, mode
 * 0600, in a runtime directory only its user can enter. */

/* The runtime directory: BASE/wt when `base` is given (tools pass
 * $XDG_RUNTIME_DIR; the library reads no environment), else
 * /run/user/UID/wt when /run/user/UID is this user's, else /tmp/wt-UID.
 * With `create` it is made (mode 0700) when missing. It must be a
 * directory (not a link) owned by this user that no one else may enter:
 * anything else is FAILED_PRECONDITION naming it (someone may have made it
 * to read what a server writes there). */
wt_status *wt_runtime_dir(const char *base, bool create, char *out, size_t cap);

/* DIR/tokens-PORT. */
void wt_runtime_token_path(const char *dir, int port, char *out, size_t cap);

/* Two fresh tokens, a trainer's and a reader's (43 characters each, 256
 * bits from the kernel's CSPRNG). The caller owns *out (wt_tokens_free). */
wt_status *wt_tokens_generate(wt_token **out, size_t *n);

/* Writes tokens[0..n) in wt_tokens_load's form to `path` (mode 0600; a
 * temporary file beside it renamed over it, so a reader never sees half a
 * file). Errors name the path. */
wt_status *wt_tokens_write(const char *path, const wt_token *tokens, size_t n);

/* Removes `path` when it still holds `tokens` (a newer server on the same
 * port may have written its own); errors are ignored. */
void wt_tokens_unlink_if_ours(const char *path, const wt_token *tokens,
                              size_t n);

/* Whether a socket of this user listens on TCP `port` on this host
 * (/proc/net/tcp and tcp6). A generated token is sent only to such a
 * server: after ours stopped, another user's server may hold the port. */
bool wt_port_listener_is_mine(int port);

/* The owner (uid) of the TCP socket on this host, in this network
 * namespace, whose local port is `local_port`, remote port `remote_port`
 * (0: any) and kernel state `state` (1 established, 10 listening), from
 * /proc/net/tcp and tcp6; false when there is none. */
bool wt_tcp_socket_uid(int local_port, int remote_port, unsigned state,
                       unsigned *uid);

/* The owner (uid) of the client's end of a TCP connection on this host:
 * `client` is the peer's address as the server's socket sees it, `server`
 * the server's own. One kernel lookup by the 4-tuple (netlink sock_diag),
 * not a scan of every socket; false when the client's end is not in this
 * network namespace (another host) or the lookup is refused. */
struct sockaddr;
bool wt_tcp_peer_uid(const struct sockaddr *client,
                     const struct sockaddr *server, unsigned *uid);

/* For a client with no token file: the trainer token a server of this user
 * on this host generated for `target` ("host:port" with a loopback host),
 * from the runtime directory of `base` (as wt_runtime_dir). *out is NULL
 * (and no error) when the target is not on loopback, no file is there, or
 * the port's listener is not this user's; a file that is there but
 * unreadable or malformed is an error naming it. The caller frees *out
 * (wt_secret_free). */
wt_status *wt_token_discover(const char *base, const char *target, char **out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SECURE_H */
