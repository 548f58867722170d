/* secure.c: randomness, constant-time comparison, UTF-8, HMAC and bearer
 * token files (see wt/secure.h). */

#include "wt/secure.h"

#include <errno.h>
#include <openssl/hmac.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

wt_status *wt_random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return wt_status_new(WT_INTERNAL, "getrandom: %s", strerror(errno));
    }
    p += got;
    n -= (size_t)got;
  }
  return NULL;
}

uint64_t wt_random_u64(uint64_t not ) {
  for (;;) {
    uint64_t v = 0;
    wt_status *st = wt_random_bytes(&v, sizeof(v));
    if (st != NULL) {
      fprintf(stderr, "wt: no randomness: %s\n", wt_status_message(st));
      abort();
    }
    if (v != 0 && v != not ) return v;
  }
}

bool wt_ct_equal(const void *a, const void *b, size_t n) {
  const volatile unsigned char *x = a, *y = b;
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= (unsigned char)(x[i] ^ y[i]);
  return d == 0;
}

bool wt_utf8_valid(const char *str, size_t n, size_t *bad) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    unsigned min, cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      goto fail;
    }
    if (n - i < len) goto fail;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) goto fail;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) goto fail;
    i += len;
  }
  return true;
fail:
  if (bad) *bad = i;
  return false;
}

void wt_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n,
                    uint8_t out[32]) {
  unsigned int len = 32;
  HMAC(EVP_sha256(), key, (int)klen, msg, n, out, &len);
}

/* ---- token files --------------------------------------------------------- */

static bool token_chars_ok(const char *t, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (t[i] < '!' || t[i] > '~') return false;
  return true;
}

static const char *file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a plain file";
}

wt_status *wt_open_regular(const char *what, const char *path, int *fd,
                           struct stat *sb) {
  struct stat local;
  if (sb == NULL) sb = &local;
  *fd = -1;
  /* O_NONBLOCK: opening a FIFO with no writer (or a tty, a device) would
   * otherwise wait forever. A regular file's reads ignore it, and it is
   * cleared before the file is handed out anyway. */
  int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (f < 0)
    return wt_status_from_errno(errno, "%s '%s': cannot open", what, path);
  if (fstat(f, sb) != 0) {
    wt_status *st =
        wt_status_from_errno(errno, "%s '%s': cannot stat", what, path);
    close(f);
    return st;
  }
  if (!S_ISREG(sb->st_mode)) {
    close(f);
    return wt_status_new(WT_INVALID_ARGUMENT, "%s '%s': %s, not a regular file",
                         what, path, file_kind(sb->st_mode));
  }
  int flags = fcntl(f, F_GETFL);
  if (flags >= 0) (void)fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
  *fd = f;
  return NULL;
}

wt_status *wt_read_small_file(const char *what, const char *path,
                              size_t max_bytes, bool private_only, char **out) {
  wt_status *st = NULL;
  char *buf = NULL;
  int fd = -1;
  struct stat sb;
  *out = NULL;
  st = wt_open_regular(what, path, &fd, &sb);
  if (st != NULL) {
    /* The file's words come first: "token file 'x': ...". */
    wt_code code = wt_status_code(st) == WT_NOT_FOUND ||
                           wt_status_code(st) == WT_PERMISSION_DENIED
                       ? WT_INVALID_ARGUMENT
                       : wt_status_code(st);
    wt_status *named = wt_status_new(code, "%s", wt_status_message(st));
    wt_status_free(st);
    return named;
  }
  if (private_only && (sb.st_mode & 077) != 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s '%s': mode %03o lets others read the tokens; chmod 600 it",
            what, path, (unsigned)(sb.st_mode & 0777));
  if ((uint64_t)sb.st_size > max_bytes)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s '%s': %lld bytes, more than %zu", what,
            path, (long long)sb.st_size, max_bytes);
  buf = malloc((size_t)sb.st_size + 1);
  if (buf == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      st = wt_status_from_errno(errno, "%s '%s': cannot read", what, path);
      goto out;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  buf[got] = '\0';
  const char *nul = memchr(buf, '\0', got);
  if (nul != NULL) {
    int line = 1;
    for (const char *c = buf; c < nul; c++) line += *c == '\n';
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s '%s' line %d: a NUL byte (what follows it would be ignored)",
            what, path, line);
  }
  *out = buf;
  buf = NULL;
out:
  if (fd >= 0) close(fd);
  wt_secret_free(buf);
  return st;
}

void wt_secret_free(char *s) {
  if (s == NULL) return;
  memset(s, 0, strlen(s));
  free(s);
}

/* Splits the next line off *cur; returns NULL at the end. */
static char *next_line(char **cur) {
  char *s = *cur;
  if (s == NULL || *s == '\0') return NULL;
  char *nl = strchr(s, '\n');
  if (nl) {
    *nl = '\0';
    *cur = nl + 1;
  } else {
    *cur = s + strlen(s);
  }
  return s;
}

/* The words of a line (at most 3 are told apart); comments and blanks give
 * 0. */
static int split_words(char *line, char *w[3]) {
  int n = 0;
  char *save = NULL;
  if (line[strspn(line, " \t\r")] == '#') return 0;
  for (char *t = strtok_r(line, " \t\r", &save); t != NULL;
       t = strtok_r(NULL, " \t\r", &save)) {
    if (n < 3) w[n] = t;
    n++;
  }
  return n;
}

/* The words of the next line that is not blank or a comment (its number in
 * *lineno), or -1 at the end. */
static int next_entry(char **cur, int *lineno, char *w[3]) {
  char *line;
  while ((line = next_line(cur)) != NULL) {
    ++*lineno;
    int nw = split_words(line, w);
    if (nw > 0) return nw;
  }
  return -1;
}

static wt_status *check_token(const char *what, const char *path, int lineno,
                              const char *t) {
  size_t n = strlen(t);
  if (n < WT_TOKEN_MIN_CHARS || n > WT_TOKEN_MAX_CHARS)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s '%s' line %d: a token of %zu characters (it "
                         "needs %d to %d; e.g. openssl rand -hex 32)",
                         what, path, lineno, n, WT_TOKEN_MIN_CHARS,
                         WT_TOKEN_MAX_CHARS);
  if (!token_chars_ok(t, n))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s '%s' line %d: the token has a character outside "
                         "printable ASCII",
                         what, path, lineno);
  return NULL;
}

/* A control byte other than tab, CR and LF anywhere in a token file (a
 * comment included) is a mistake or an attack: refused naming its line. */
static wt_status *check_control_bytes(const char *what, const char *path,
                                      const char *buf) {
  int line = 1;
  for (const unsigned char *c = (const unsigned char *)buf; *c; c++) {
    if (*c == '\n') {
      line++;
      continue;
    }
    if ((*c < 0x20 && *c != '\t' && *c != '\r') || *c == 0x7f)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s '%s' line %d: control byte 0x%02x", what, path,
                           line, *c);
  }
  return NULL;
}

static uint32_t scope_of(const char *w) {
  if (strcmp(w, "trainer") == 0) return WT_SCOPE_ALL;
  if (strcmp(w, "reader") == 0) return WT_SCOPE_READER;
  return 0;
}

void wt_tokens_free(wt_token *t, size_t n) {
  for (size_t i = 0; t != NULL && i < n; i++) {
    if (t[i].token) {
      memset(t[i].token, 0, strlen(t[i].token));
      free(t[i].token);
    }
  }
  free(t);
}

wt_status *wt_tokens_load(const char *path, wt_token **out, size_t *n) {
  const char *what = "token file";
  wt_status *st = NULL;
  char *buf = NULL;
  wt_token *toks = NULL;
  size_t count = 0;
  *out = NULL;
  *n = 0;
  WT_CHECK(wt_read_small_file(what, path, 1 << 20, true, &buf));
  WT_CHECK(check_control_bytes(what, path, buf));
  char *cur = buf, *w[3];
  int lineno = 0, nw;
  while ((nw = next_entry(&cur, &lineno, w)) >= 0) {
    uint32_t scope = nw == 2 ? scope_of(w[0]) : 0;
    if (scope == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s '%s' line %d: expected \"trainer TOKEN\" or \"reader "
              "TOKEN\"",
              what, path, lineno);
    WT_CHECK(check_token(what, path, lineno, w[1]));
    for (size_t i = 0; i < count; i++)
      if (strcmp(toks[i].token, w[1]) == 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s '%s' line %d: the token is listed twice", what, path,
                lineno);
    wt_token *grown = realloc(toks, (count + 1) * sizeof(*toks));
    if (grown == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    toks = grown;
    toks[count].scope = scope;
    if ((toks[count].token = strdup(w[1])) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    count++;
  }
  if (count == 0)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s '%s': no token in it", what, path);
  *out = toks;
  *n = count;
  toks = NULL;
  count = 0;
out:
  wt_tokens_free(toks, count);
  wt_secret_free(buf);
  return st;
}

uint32_t wt_tokens_match(const wt_token *tokens, size_t n,
                         const char *presented, size_t len) {
  uint32_t scope = 0;
  for (size_t i = 0; i < n; i++) {
    size_t tl = strlen(tokens[i].token);
    /* Lengths are not secret enough to hide (the minimum is public); the
     * bytes are compared in full either way. */
    bool eq = tl == len && wt_ct_equal(tokens[i].token, presented, len);
    if (eq) scope = tokens[i].scope;
  }
  return scope;
}

wt_status *wt_token_read(const char *path, char **out) {
  const char *what = "token file";
  wt_status *st = NULL;
  char *buf = NULL;
  *out = NULL;
  WT_CHECK(wt_read_small_file(what, path, 1 << 20, false, &buf));
  WT_CHECK(check_control_bytes(what, path, buf));
  char *cur = buf, *w[3];
  int lineno = 0, nw;
  while ((nw = next_entry(&cur, &lineno, w)) >= 0) {
    const char *tok = nw == 1 ? w[0] : nw == 2 && scope_of(w[0]) ? w[1] : NULL;
    if (tok == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s '%s' line %d: expected the token alone (or \"trainer "
              "TOKEN\")",
              what, path, lineno);
    WT_CHECK(check_token(what, path, lineno, tok));
    if ((*out = strdup(tok)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    goto out;
  }
  WT_FAIL(WT_INVALID_ARGUMENT, "%s '%s': no token in it", what, path);
out:
  wt_secret_free(buf);
  return st;
}
