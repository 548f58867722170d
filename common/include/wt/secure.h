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

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* WT_SECURE_H */
