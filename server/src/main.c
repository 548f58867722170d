/* main.c: wt-server, the weight-transfer service as a process.
 *
 * Prints exactly one line on stdout once serving, "wt-server listening on
 * HOST:PORT", so that scripts and tests read the port from it (with
 * --listen HOST:0). Logs go to stderr. SIGINT/SIGTERM stop it cleanly
 * (exit 0); a bad option exits 2, a failed start 1.
 *
 * The options are one table (name, value, help, parser); the usage text is
 * printed from it, so a new option is one row and one parser.
 */

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt/parse.h"
#include "wt/rpc.h"
#include "wt/secure.h"
#include "wt/server.h"
#include "wt/signals.h"
#include "wt/synthetic.h"

/* At most this many --engine-option settings. */
#define MAX_ENGINE_OPTIONS 64
#define MAX_ALLOW 64

/* What the command line builds. */
typedef struct cli {
  wt_server_options opts;
  wt_backend_option engine_options[MAX_ENGINE_OPTIONS];
  char *engine_option_text[MAX_ENGINE_OPTIONS]; /* "KEY=VALUE" copies */
  bool no_auth;
  unsigned allow_uids[MAX_ALLOW], allow_gids[MAX_ALLOW];
} cli;

/* A parser sets its field from `value` (NULL for a flag), or writes why
 * not into err[ERR_MAX] and returns false. */
#define ERR_MAX 256
typedef bool (*option_fn)(cli *c, const char *value, char *err);

typedef struct option_row {
  const char *name;  /* without the leading "--" */
  const char *value; /* "N", "PATH"; NULL for a flag */
  const char *help;  /* wrapped by hand at 40 columns; "\n" separated */
  option_fn parse;
  long dflt; /* printed as "(default N)" from server.h's macro; 0: none */
} option_row;

static bool fail(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static bool fail(char *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, ERR_MAX, fmt, ap);
  va_end(ap);
  return false;
}

static bool parse_seconds(const char *name, const char *v, uint32_t *ms,
                          char *err) {
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end != '\0' || !isfinite(d) || d < 0.001 ||
      d > 86400.0 * 30)
    return fail(err, "--%s '%s' is not a number of seconds (0.001 to 2592000)",
                name, v);
  *ms = (uint32_t)(d * 1000.0 + 0.5);
  return true;
}

static bool parse_count(const char *name, const char *v, uint64_t max, int *out,
                        char *err) {
  uint64_t n = 0;
  if (!wt_parse_u64(v, &n) || n < 1 || n > max)
    return fail(err, "--%s '%s' is not a number from 1 to %" PRIu64, name, v,
                max);
  *out = (int)n;
  return true;
}

static bool opt_listen(cli *c, const char *v, char *err) {
  if (strrchr(v, ':') == NULL)
    return fail(err, "--listen '%s' is not HOST:PORT", v);
  c->opts.listen = v;
  return true;
}

static bool opt_model(cli *c, const char *v, char *err) {
  if (*v == '\0') return fail(err, "--model is empty");
  c->opts.model = v;
  return true;
}

static bool opt_device(cli *c, const char *v, char *err) {
  wt_device *list = NULL;
  size_t n = 0;
  wt_status *e = wt_device_list_parse(v, &list, &n);
  free(list);
  if (e != NULL) {
    fail(err, "--device: %s", wt_status_message(e));
    wt_status_free(e);
    return false;
  }
  c->opts.devices = v;
  return true;
}

static bool opt_workers(cli *c, const char *v, char *err) {
  uint64_t n = 0;
  if (!wt_parse_u64(v, &n) || n < 1 || n > 1024)
    return fail(err, "--workers '%s' is not a number from 1 to 1024", v);
  c->opts.workers = (uint32_t)n;
  return true;
}

static bool opt_memory(cli *c, const char *v, char *err) {
  wt_status *e = wt_mem_kind_parse(v, &c->opts.memory);
  if (e != NULL) {
    wt_status_free(e);
    return fail(err, "--memory '%s' is not host, shared or pinned", v);
  }
  if (!wt_mem_kind_host_addressable(c->opts.memory))
    return fail(err,
                "--memory '%s': cpu workers hold host, shared or pinned "
                "memory; device memory comes with --device cuda:N",
                v);
  return true;
}

static bool opt_staging(cli *c, const char *v, char *err) {
  wt_status *e = wt_staging_parse(v, &c->opts.staging);
  if (e == NULL) return true;
  wt_status_free(e);
  return fail(err, "--staging '%s' is not shadow or inplace", v);
}

static bool opt_round_timeout(cli *c, const char *v, char *err) {
  return parse_seconds("round-timeout", v, &c->opts.round_timeout_ms, err);
}

static bool opt_health_grace(cli *c, const char *v, char *err) {
  return parse_seconds("health-grace", v, &c->opts.health_grace_ms, err);
}

static bool opt_header_timeout(cli *c, const char *v, char *err) {
  return parse_seconds("header-timeout", v, &c->opts.header_timeout_ms, err);
}

static bool opt_round_calls(cli *c, const char *v, char *err) {
  return parse_count("max-round-calls", v, 4096, &c->opts.max_round_calls, err);
}

static bool opt_reader_calls(cli *c, const char *v, char *err) {
  return parse_count("max-reader-calls", v, 4096, &c->opts.max_reader_calls,
                     err);
}

static bool opt_watchers(cli *c, const char *v, char *err) {
  return parse_count("max-watchers", v, 1000000, &c->opts.max_watchers, err);
}

static bool opt_reader_peer(cli *c, const char *v, char *err) {
  return parse_count("max-reader-calls-per-peer", v, 4096,
                     &c->opts.max_reader_calls_per_peer, err);
}

static bool opt_watchers_peer(cli *c, const char *v, char *err) {
  return parse_count("max-watchers-per-peer", v, 1000000,
                     &c->opts.max_watchers_per_peer, err);
}

static bool opt_max_adapters(cli *c, const char *v, char *err) {
  int n = 0;
  if (!parse_count("max-adapters", v, 4096, &n, err)) return false;
  c->opts.max_adapters = (uint32_t)n;
  return true;
}

static bool opt_adapter_mib(cli *c, const char *v, char *err) {
  uint64_t n = 0;
  if (!wt_parse_u64(v, &n) || n < 1 || n > (1ull << 30))
    return fail(err, "--max-adapter-mib '%s' is not a number from 1 to %llu", v,
                1ull << 30);
  c->opts.max_adapter_bytes = n << 20;
  return true;
}

static bool opt_reader_rate(cli *c, const char *v, char *err) {
  uint64_t n = 0;
  if (!wt_parse_u64(v, &n) || n < 1 || n > 1000000)
    return fail(err,
                "--reader-mib-per-sec '%s' is not a number from 1 to "
                "1000000",
                v);
  c->opts.reader_bytes_per_sec = n << 20;
  return true;
}

static bool opt_metrics_listen(cli *c, const char *v, char *err) {
  const char *colon = strrchr(v, ':');
  if (colon == NULL || colon == v || colon[1] == '\0')
    return fail(err, "--metrics-listen '%s' is not HOST:PORT", v);
  c->opts.metrics_listen = v;
  return true;
}

static bool opt_export(cli *c, const char *v, char *err) {
  if (*v != '/') return fail(err, "--export '%s' is not an absolute path", v);
  c->opts.export_path = v;
  return true;
}

static bool add_id(const char *name, const char *v, unsigned *ids, size_t *n,
                   char *err) {
  uint64_t id = 0;
  if (!wt_parse_u64(v, &id) || id > 0xfffffffeu)
    return fail(err, "--%s '%s' is not a numeric id", name, v);
  if (*n == MAX_ALLOW) return fail(err, "--%s: at most %d", name, MAX_ALLOW);
  ids[(*n)++] = (unsigned)id;
  return true;
}

static bool opt_allow_uid(cli *c, const char *v, char *err) {
  c->opts.export_allow_uids = c->allow_uids;
  return add_id("export-allow-uid", v, c->allow_uids,
                &c->opts.n_export_allow_uids, err);
}

static bool opt_allow_gid(cli *c, const char *v, char *err) {
  c->opts.export_allow_gids = c->allow_gids;
  return add_id("export-allow-gid", v, c->allow_gids,
                &c->opts.n_export_allow_gids, err);
}

static bool opt_lease_wait(cli *c, const char *v, char *err) {
  return parse_seconds("lease-wait", v, &c->opts.lease_wait_ms, err);
}

static bool opt_connections(cli *c, const char *v, char *err) {
  return parse_count("max-connections", v, 1000000, &c->opts.max_connections,
                     err);
}

static bool opt_auth_grace(cli *c, const char *v, char *err) {
  return parse_count("auth-grace-ms", v, 600000, &c->opts.auth_grace_ms, err);
}

/* BACKEND.KEY=VALUE: the backend's own table checks it at start. */
static bool opt_engine_option(cli *c, const char *v, char *err) {
  size_t i = c->opts.n_engine_options;
  const char *eq = strchr(v, '=');
  const char *dot = strchr(v, '.');
  if (eq == NULL || dot == NULL || dot > eq || dot == v || dot + 1 == eq)
    return fail(err,
                "--engine-option '%s' is not BACKEND.KEY=VALUE (e.g. "
                "ucx.transports=tcp)",
                v);
  if (i == MAX_ENGINE_OPTIONS)
    return fail(err, "--engine-option: at most %d", MAX_ENGINE_OPTIONS);
  char *copy = strdup(v);
  if (copy == NULL) return fail(err, "--engine-option: out of memory");
  copy[eq - v] = '\0';
  c->engine_option_text[i] = copy;
  c->engine_options[i] = (wt_backend_option){copy, copy + (eq - v) + 1};
  c->opts.engine_options = c->engine_options;
  c->opts.n_engine_options = i + 1;
  return true;
}

static bool opt_tls_cert(cli *c, const char *v, char *err) {
  (void)err;
  c->opts.tls_cert = v;
  return true;
}

static bool opt_tls_key(cli *c, const char *v, char *err) {
  (void)err;
  c->opts.tls_key = v;
  return true;
}

static bool opt_tls_ca(cli *c, const char *v, char *err) {
  (void)err;
  c->opts.tls_ca = v;
  return true;
}

static bool opt_token_file(cli *c, const char *v, char *err) {
  (void)err;
  c->opts.token_file = v;
  return true;
}

static bool opt_insecure(cli *c, const char *v, char *err) {
  (void)v;
  (void)err;
  c->opts.insecure = true;
  return true;
}

static bool opt_no_auth(cli *c, const char *v, char *err) {
  (void)v;
  (void)err;
  c->no_auth = true;
  return true;
}

static bool opt_log_level(cli *c, const char *v, char *err) {
  (void)c;
  wt_log_level level;
  if (wt_log_level_parse(v, &level) != 0)
    return fail(err, "--log-level '%s' is not debug, info, warn, error or off",
                v);
  wt_log_set_level(level);
  return true;
}

/* --config is read before the command line (read_config); here it only
 * has to be accepted. */
static bool opt_config(cli *c, const char *v, char *err) {
  (void)c;
  (void)v;
  (void)err;
  return true;
}

static bool print_config;

static bool opt_print_config(cli *c, const char *v, char *err) {
  (void)c;
  (void)v;
  (void)err;
  print_config = true;
  return true;
}

static bool opt_log_format(cli *c, const char *v, char *err) {
  (void)c;
  wt_log_format f;
  if (wt_log_format_parse(v, &f) != 0)
    return fail(err, "--log-format '%s' is not text or json", v);
  wt_log_set_format(f);
  return true;
}

static const option_row rows[] = {
    {"listen", "HOST:PORT",
     "address to serve on (default " WT_SERVER_DEFAULT_LISTEN
     ";\nport 0 picks a free port; loopback unless told)",
     opt_listen, 0},
    {"model", "PATH",
     "safetensors file, sharded *.safetensors.index.json,\nor "
     "synthetic:NAME (default " WT_SERVER_DEFAULT_MODEL ")",
     opt_model, 0},
    {"device", "LIST",
     "cpu (default), or GPUs: cuda:0,cuda:1 (one\nworker per device, "
     "holding device memory)",
     opt_device, 0},
    {"workers", "N", "cpu workers, each holding the whole\nmodel (default 1)",
     opt_workers, 0},
    {"memory", "KIND",
     "the cpu workers' memory: host (default),\nshared (a memfd another "
     "process can map)\nor pinned (page-locked; needs CUDA)",
     opt_memory, 0},
    {"staging", "MODE",
     "shadow (a round writes spare buffers,\nfinish swaps them in; default) "
     "or inplace\n(half the memory; the store is marked\nincomplete while a "
     "round writes)",
     opt_staging, 0},
    {"round-timeout", "SEC",
     "abort a round idle longer than this\nbetween calls or chunks",
     opt_round_timeout, WT_SERVER_DEFAULT_ROUND_TIMEOUT_MS / 1000},
    {"metrics-listen", "HOST:PORT",
     "serve Prometheus metrics at\nhttp://HOST:PORT/metrics (loopback\nunless "
     "--insecure; docs/operations.md)",
     opt_metrics_listen, 0},
    {"health-grace", "SEC",
     "on SIGTERM, answer health probes\nNOT_SERVING this long before the "
     "drain\n(default 0: at once)",
     opt_health_grace, 0},
    {"header-timeout", "SEC",
     "end a PushWeights stream that sends no\nheader this long",
     opt_header_timeout, WT_SERVER_DEFAULT_HEADER_TIMEOUT_MS / 1000},
    {"max-round-calls", "N",
     "round calls (init, start, update, push,\nfinish, abort) served at "
     "once; never\ntaken by readers",
     opt_round_calls, WT_SERVER_DEFAULT_ROUND_CALLS},
    {"max-reader-calls", "N",
     "reader calls (info, parameters, version,\nchecksums) served at once; "
     "64 times as\nmany wait",
     opt_reader_calls, WT_SERVER_DEFAULT_READER_CALLS},
    {"max-watchers", "N",
     "open WatchWeightVersion streams; they\nhold no thread", opt_watchers,
     WT_SERVER_DEFAULT_WATCHERS},
    {"max-reader-calls-per-peer", "N",
     "reader calls one peer (a user on this\nhost, an address beyond) may "
     "have\nrunning or waiting",
     opt_reader_peer, WT_SERVER_DEFAULT_READER_CALLS_PER_PEER},
    {"max-watchers-per-peer", "N", "watch streams one peer may have open",
     opt_watchers_peer, WT_SERVER_DEFAULT_WATCHERS_PER_PEER},
    {"reader-mib-per-sec", "N", "MiB a second one peer's checksums may\nhash",
     opt_reader_rate, (int)(WT_SERVER_DEFAULT_READER_BYTES_PER_SEC >> 20)},
    {"max-adapters", "N",
     "LoRA adapter sets held beside the model\n(docs/lora.md)",
     opt_max_adapters, WT_SERVER_DEFAULT_MAX_ADAPTERS},
    {"max-adapter-mib", "N", "MiB per worker the adapter sets may hold\nin all",
     opt_adapter_mib, (int)(WT_SERVER_DEFAULT_MAX_ADAPTER_BYTES >> 20)},
    {"export", "PATH",
     "hand committed versions to consumers on\nthis host over a Unix "
     "socket (mode 0600;\nneeds --memory shared; docs/export.md)",
     opt_export, 0},
    {"export-allow-uid", "UID",
     "also let this uid's consumers in\n(repeatable)", opt_allow_uid, 0},
    {"export-allow-gid", "GID",
     "also let consumers of this primary gid\nin (repeatable)", opt_allow_gid,
     0},
    {"lease-wait", "SEC",
     "how long a round waits for consumers'\nleases on the bytes it would "
     "write",
     opt_lease_wait, WT_SERVER_DEFAULT_LEASE_WAIT_MS / 1000},
    {"max-connections", "N",
     "connections open at once (lowered to\nwhat ulimit -n allows, 2 "
     "descriptors\neach); over it a new one replaces one\nthat made no "
     "authorized call",
     opt_connections, WT_RPC_DEFAULT_MAX_CONNECTIONS},
    {"auth-grace-ms", "MS",
     "close a connection that made no\nauthorized call within this",
     opt_auth_grace, WT_RPC_DEFAULT_AUTH_GRACE_MS},
    {"engine-option", "B.K=V",
     "a backend's own setting, repeatable; the\nbackend checks it at start. "
     "ucx.transports=LIST:\nthe ucx workers' UCX transports when an init\n"
     "info names none (init info > this >\n$UCX_TLS > UCX's own choice)",
     opt_engine_option, 0},
    {"tls-cert", "PATH",
     "serve TLS with this certificate chain\n(PEM; with "
     "--tls-key)",
     opt_tls_cert, 0},
    {"tls-key", "PATH", "its private key", opt_tls_key, 0},
    {"tls-ca", "PATH",
     "require client certificates signed by\nthis CA (mutual TLS)", opt_tls_ca,
     0},
    {"token-file", "PATH",
     "bearer tokens, lines \"trainer TOKEN\" or\n\"reader TOKEN\" (mode 600); "
     "every call\nmust then carry one of its scope",
     opt_token_file, 0},
    {"insecure", NULL,
     "allow a non-loopback --listen without\nTLS (refused otherwise)",
     opt_insecure, 0},
    {"no-auth", NULL,
     "no tokens: any process that reaches the\nport may call (by default "
     "fresh tokens\nare generated, mode 0600, in the user's\nruntime "
     "directory, where the tools\nfind them)",
     opt_no_auth, 0},
    {"log-level", "LEVEL",
     "debug, info, warn, error or off\n(default: $WT_LOG, else info)",
     opt_log_level, 0},
    {"config", "FILE",
     "read options from a JSON file first\n(docs/operations.md); options "
     "on the\ncommand line override it",
     opt_config, 0},
    {"print-config", NULL,
     "print the options set (file and command\nline) as JSON, and exit",
     opt_print_config, 0},
    {"log-format", "FORMAT",
     "text (default) or json: one object a line,\nfor log shippers",
     opt_log_format, 0},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static void usage(FILE *f) {
  fprintf(f,
          "usage: wt-server [options]\n\n"
          "Serves wt.v1.WeightTransfer: holds a model's parameters on one or\n"
          "more workers (host or GPU) and receives new weights from a\n"
          "trainer.\n\noptions:\n");
  for (size_t i = 0; i < NROWS; i++) {
    char head[48];
    snprintf(head, sizeof(head), "--%s%s%s", rows[i].name,
             rows[i].value ? " " : "", rows[i].value ? rows[i].value : "");
    const char *line = rows[i].help;
    bool first = true;
    while (*line) {
      size_t len = strcspn(line, "\n");
      bool last = line[len] == '\0';
      fprintf(f, "  %-22s %.*s", first ? head : "", (int)len, line);
      if (last && rows[i].dflt != 0) fprintf(f, " (default %ld)", rows[i].dflt);
      fprintf(f, "\n");
      first = false;
      line += len + (line[len] == '\n');
    }
  }
  fprintf(f, "  %-22s this text\n\nsynthetic layouts:", "-h, --help");
  for (const char *const *n = wt_synthetic_layout_names(); *n; n++)
    fprintf(f, " %s", *n);
  fprintf(f, "\n");
}

/* Raises the open-file limit to its hard maximum: every connection is a
 * descriptor, and gRPC 1.51's accept loop handles running out of them
 * badly (CVE-2023-4785), so a flood of connections should meet the
 * kernel's limit as late as possible. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    WT_LOGD("server", "open-file limit raised from %llu to %llu",
            (unsigned long long)was, (unsigned long long)rl.rlim_cur);
}

/* --- the configuration file and what was set ---------------------------- */

/* Every option set, in order (the file's, then the command line's), for
 * --print-config; and the strings a file gave the parsers, which keep
 * pointers to them until the process ends. */
static json_t *set_options;
static char **kept;
static size_t nkept;

/* The options that add up when given again (their help says
 * "repeatable"); any other given again replaces. */
static bool repeatable(const char *name) {
  for (size_t i = 0; i < NROWS; i++)
    if (strcmp(rows[i].name, name) == 0)
      return strstr(rows[i].help, "repeatable") != NULL;
  return false;
}

static void record(const char *name, const char *value) {
  if (set_options == NULL) set_options = json_object();
  json_t *v = value ? json_string(value) : json_true();
  json_t *old = json_object_get(set_options, name);
  if (old == NULL || !value || !repeatable(name)) {
    json_object_set_new(set_options, name, v);
  } else if (json_is_array(old)) {
    json_array_append_new(old, v);
  } else {
    json_t *a = json_array();
    json_array_append(a, old);
    json_array_append_new(a, v);
    json_object_set_new(set_options, name, a);
  }
}

static const option_row *row_named(const char *name) {
  for (size_t i = 0; i < NROWS; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
  return NULL;
}

/* The line of the first `"key"` in the file's text (jansson keeps no
 * positions for keys): enough to point a person at it. */
static int key_line(const char *text, const char *key) {
  char needle[160];
  snprintf(needle, sizeof(needle), "\"%s\"", key);
  const char *at = strstr(text, needle);
  int line = 1;
  for (const char *p = text; at && p < at; p++) line += *p == '\n';
  return at ? line : 0;
}

static char *keep(const char *s) {
  char **k = realloc(kept, (nkept + 1) * sizeof(*kept));
  if (k == NULL) return NULL;
  kept = k;
  return kept[nkept++] = strdup(s);
}

/* One value of key `name` as the command line would give it. */
static bool apply_value(cli *c, const option_row *r, json_t *v, char *err) {
  char buf[64];
  const char *text = NULL;
  if (json_is_string(v)) {
    text = json_string_value(v);
  } else if (json_is_integer(v)) {
    snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
    text = buf;
  } else if (json_is_real(v)) {
    snprintf(buf, sizeof(buf), "%.17g", json_real_value(v));
    text = buf;
  } else if (json_is_boolean(v) && r->value == NULL) {
    if (!json_is_true(v)) return true; /* false: not set */
    record(r->name, NULL);
    return r->parse(c, NULL, err);
  } else {
    return fail(err, "expected %s",
                r->value ? "a string or a number" : "true or false");
  }
  if (r->value == NULL) return fail(err, "is a flag: true or false");
  char *copy = keep(text);
  if (copy == NULL) return fail(err, "out of memory");
  record(r->name, copy);
  return r->parse(c, copy, err);
}

static int bad_option(const char *msg);

/* --config FILE (or --config=FILE) anywhere on the command line: a JSON
 * object whose keys are the long options' names; a flag takes true, a
 * repeatable option an array. 0, or the exit code after saying why. */
static int read_config(int argc, char **argv, cli *c) {
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      path = argv[++i];
    else if (strncmp(argv[i], "--config=", 9) == 0)
      path = argv[i] + 9;
  }
  if (path == NULL) return 0;
  char err[ERR_MAX + 256], why[ERR_MAX];
  wt_status *st = NULL;
  char *text = NULL;
  st = wt_read_small_file("--config", path, 1 << 20, false, &text);
  size_t len = text ? strlen(text) : 0;
  if (st != NULL) {
    snprintf(err, sizeof(err), "%s", wt_status_message(st));
    wt_status_free(st);
    return bad_option(err);
  }
  json_error_t je;
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  int rc = 0;
  if (o == NULL || !json_is_object(o)) {
    snprintf(err, sizeof(err), "--config %s line %d: %s", path, o ? 1 : je.line,
             o ? "not a JSON object" : je.text);
    rc = bad_option(err);
  }
  const char *key;
  json_t *v;
  if (rc == 0) {
    json_object_foreach(o, key, v) {
      const option_row *r = row_named(key);
      bool ok = true;
      why[0] = '\0';
      if (r == NULL || r->parse == opt_config || r->parse == opt_print_config) {
        snprintf(why, sizeof(why),
                 "unknown key (a long option's name, "
                 "without --)");
        ok = false;
      } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (ok) ok = apply_value(c, r, e, why);
      } else {
        ok = apply_value(c, r, v, why);
      }
      if (!ok) {
        snprintf(err, sizeof(err), "--config %s line %d: key '%s': %s", path,
                 key_line(text, key), key, why);
        rc = bad_option(err);
        break;
      }
    }
  }
  json_decref(o);
  free(text);
  return rc;
}

static void config_free(void) {
  for (size_t i = 0; i < nkept; i++) free(kept[i]);
  free(kept);
  json_decref(set_options);
}

static int bad_option(const char *msg) {
  fprintf(stderr, "wt-server: %s\n(try wt-server --help)\n", msg);
  return 2;
}

/* Fills c from argv: 0, or the exit code (2 a bad option, -1 help
 * printed). */
static int parse_args(int argc, char **argv, cli *c) {
  struct option longopts[NROWS + 2];
  for (size_t i = 0; i < NROWS; i++)
    longopts[i] = (struct option){
        rows[i].name, rows[i].value ? required_argument : no_argument, NULL,
        (int)(i + 256)};
  longopts[NROWS] = (struct option){"help", no_argument, NULL, 'h'};
  longopts[NROWS + 1] = (struct option){NULL, 0, NULL, 0};
  char err[ERR_MAX];
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    if (ch == 'h') {
      usage(stdout);
      return -1;
    }
    if (ch == ':') {
      snprintf(err, sizeof(err), "%s needs a value", argv[optind - 1]);
      return bad_option(err);
    }
    if (ch < 256 || (size_t)(ch - 256) >= NROWS) {
      snprintf(err, sizeof(err), "unknown option '%s'", argv[optind - 1]);
      return bad_option(err);
    }
    if (rows[ch - 256].parse == opt_config) continue; /* read first */
    record(rows[ch - 256].name, optarg);
    if (!rows[ch - 256].parse(c, optarg, err)) return bad_option(err);
  }
  if (optind < argc) {
    snprintf(err, sizeof(err), "unexpected argument '%s'", argv[optind]);
    return bad_option(err);
  }
  return 0;
}

/* The start on a thread of its own, so that the main thread takes SIGINT
 * and SIGTERM (blocked in every thread, for sigwait) while the model
 * loads: a signal during start-up ends the process at once, never waits
 * for a slow file. */
typedef struct starter {
  const wt_server_options *opts;
  wt_server *srv;
  wt_status *st;
  atomic_bool done;
} starter;

static void *start_main(void *arg) {
  starter *s = arg;
  s->st = wt_server_start(s->opts, &s->srv);
  atomic_store(&s->done, true);
  return NULL;
}

/* Runs wt_server_start while waiting for a signal: the started server, or
 * NULL after saying why (a failed start, or a signal). */
static wt_server *start_or_signal(const wt_server_options *opts) {
  static starter s;
  s.opts = opts;
  WT_LOGI("server", "starting: loading %s (SIGINT or SIGTERM stops it)",
          opts->model ? opts->model : WT_SERVER_DEFAULT_MODEL);
  atomic_init(&s.done, false);
  pthread_t th;
  int rc = pthread_create(&th, NULL, start_main, &s);
  if (rc != 0) {
    fprintf(stderr, "wt-server: cannot start: %s\n", strerror(rc));
    return NULL;
  }
  while (!atomic_load(&s.done)) {
    int sig = wt_signal_wait(20);
    if (sig > 0) {
      /* Nothing serves yet and nothing of a round exists: exiting now loses
       * nothing, and a start-up reading a slow file never outlives it. */
      fprintf(stderr, "wt-server: %s during start-up; exiting\n",
              strsignal(sig));
      fflush(stderr);
      _exit(1);
    }
  }
  pthread_join(th, NULL);
  if (s.st != NULL) {
    fprintf(stderr, "wt-server: %s: %s\n", wt_code_name(wt_status_code(s.st)),
            wt_status_message(s.st));
    wt_status_free(s.st);
    return NULL;
  }
  return s.srv;
}

int main(int argc, char **argv) {
  static cli c;
  /* Before any thread exists, so every thread inherits the mask. */
  wt_status *st = wt_signal_block_termination();
  if (st != NULL) {
    fprintf(stderr, "wt-server: %s\n", wt_status_message(st));
    wt_status_free(st);
    return 1;
  }
  wt_log_level_from(getenv("WT_LOG"), "WT_LOG");
  /* glibc gives threads arenas of their own as they first allocate, up to
   * 8 per core: a handler thread's first round then adds a step of about
   * 1 MiB that stays (bench/growth.sh: grpc with a new init per round, +4.8%
   * RSS from round 20 to 200). Two arenas keep RSS flat over 200 rounds
   * (+0.1%) at no cost measured to a round (llama-256m, grpc, steady
   * median); MALLOC_ARENA_MAX, when set, wins. */
  if (getenv("MALLOC_ARENA_MAX") == NULL) mallopt(M_ARENA_MAX, 2);
  int rc = read_config(argc, argv, &c);
  if (rc == 0) rc = parse_args(argc, argv, &c);
  if (rc == 0 && print_config) {
    json_object_del(set_options ? set_options : json_object(), "print-config");
    char *out = json_dumps(set_options ? set_options : json_object(),
                           JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", out ? out : "{}");
    free(out);
    rc = -1;
  }
  if (rc != 0) {
    config_free();
    return rc < 0 ? 0 : rc;
  }
  if (c.no_auth && c.opts.token_file != NULL)
    return bad_option("--no-auth and --token-file: choose one");
  /* Secure by default: tokens unless told otherwise. */
  c.opts.generate_tokens = !c.no_auth && c.opts.token_file == NULL;
  c.opts.runtime_base = getenv("XDG_RUNTIME_DIR");
  if (c.no_auth)
    WT_LOGW("server",
            "--no-auth: no tokens; any process that reaches the "
            "port may drive rounds and read the weights");

  raise_fd_limit();
  wt_server *srv = start_or_signal(&c.opts);
  if (srv == NULL) {
    rc = 1;
    goto out;
  }
  const char *listen = c.opts.listen ? c.opts.listen : WT_SERVER_DEFAULT_LISTEN;
  int hostlen = (int)(strrchr(listen, ':') - listen);
  printf("wt-server listening on %.*s:%d\n", hostlen, listen,
         wt_server_port(srv));
  fflush(stdout);

  int sig = wt_signal_wait(-1);
  WT_LOGI("server", "%s received; stopping",
          sig > 0 ? strsignal(sig) : "signal");
  wt_server_stop(srv);
out:
  for (size_t i = 0; i < c.opts.n_engine_options; i++)
    free(c.engine_option_text[i]);
  config_free();
  return rc;
}
