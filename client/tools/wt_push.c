/* wt-push: push one new version of the weights to one or more servers.
 *
 *   wt-push [--server HOST:PORT]... [--checkpoint PATH | --synthetic NAME]
 *           [--seed N] [--backend NAME] [--version STR] [--chunk-size SIZE]
 *           [--bucket-size SIZE] [--option KEY=VALUE]... [--timeout SECONDS]
 *           [--verify[=ALGO]]
 *
 * The backend's settings go to the backend's own trainer engine, which
 * builds its init info from them (wt_trainer_init_info): --bucket-size and
 * --chunk-size are the options bucket_size and chunk_size.
 *
 * Runs one round (init, start, update, finish) and prints a summary; with
 * --verify, compares every server's checksums with digests computed locally
 * from the source. Exit codes: 0 ok, 1 transfer or verification failure,
 * 2 usage. */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "wt/adapter_spec.h"
#include "wt/client.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/memory.h"
#include "wt/parse.h"
#include "wt/pb.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"

#include "tool_format.h"
#include "update_step.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define MAX_SERVERS 64
#define MAX_OPTIONS 32
/* Mismatches printed before "and N more". */
#define MAX_SHOWN 5
/* 30 days, as wt-server's --round-timeout. */
#define MAX_TIMEOUT_S 2592000

typedef struct options {
  const char *servers[MAX_SERVERS];
  size_t nservers;
  const char *checkpoint;
  const char *synthetic;
  uint64_t seed;
  bool have_seed;
  const char *backend;
  const char *version;
  /* The backend's options: --bucket-size, --chunk-size, --option. The
   * strings point into argv or into opt_text. */
  wt_backend_option opts[MAX_OPTIONS];
  size_t nopts;
  char opt_text[MAX_OPTIONS][256];
  double timeout_s;      /* 0: library default */
  double data_timeout_s; /* init_info.timeout_ms; 0: the servers' default */
  double keepalive_s;    /* --keepalive-timeout; 0: library default */
  double user_timeout_s; /* --tcp-user-timeout; 0: library default */
  bool verify;
  wt_hash_alg verify_alg;
  bool quiet;
  uint64_t rounds;     /* rounds on one init (default 1) */
  double change;       /* --change: the fraction a step changes; 0: none */
  bool delta_set;      /* --delta given (its stats are printed) */
  const char *device;  /* --device: the source in this GPU's memory */
  const char *adapter; /* --adapter: a LoRA adapter set (docs/lora.md) */
  double lora_alpha;   /* --lora-alpha; 0: not given */
  wt_tool_security sec;
} options;

/* A parser takes its option's value (NULL for a flag, or an optional
 * value not given) and returns 0, or EXIT_USAGE having said why. */
typedef int (*option_fn)(options *o, const char *name, const char *value);

typedef struct option_row {
  const char *name;  /* without "--" */
  int has_arg;       /* no_argument, required_argument, optional_argument */
  const char *usage; /* "--name VALUE" column */
  const char *help;  /* lines joined by "\n" */
  option_fn parse;
} option_row;

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "wt-push: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return EXIT_USAGE;
}

/* Adds a backend option, or replaces the value of one of the same key
 * given before (the environment's, an earlier --option); key and value are
 * copied. */
static int add_option(options *o, const char *key, const char *value) {
  for (size_t i = 0; i < o->nopts; i++)
    if (strcmp(o->opts[i].key, key) == 0) {
      memmove(&o->opts[i], &o->opts[i + 1],
              (o->nopts - i - 1) * sizeof(o->opts[0]));
      memmove(&o->opt_text[i], &o->opt_text[i + 1],
              (o->nopts - i - 1) * sizeof(o->opt_text[0]));
      o->nopts--;
      /* The moved entries point into opt_text: aim them again. */
      for (size_t j = i; j < o->nopts; j++) {
        char *text = o->opt_text[j];
        o->opts[j] = (wt_backend_option){text, text + strlen(text) + 1};
      }
      break;
    }
  if (o->nopts == MAX_OPTIONS)
    return usage_error("at most %d backend options", MAX_OPTIONS);
  char *text = o->opt_text[o->nopts];
  int n = snprintf(text, sizeof(o->opt_text[0]), "%s=%s", key, value);
  if (n < 0 || (size_t)n >= sizeof(o->opt_text[0]))
    return usage_error("option '%s' is too long", key);
  char *eq = text + strlen(key);
  *eq = '\0';
  o->opts[o->nopts++] = (wt_backend_option){text, eq + 1};
  return 0;
}

static int opt_server(options *o, const char *name, const char *v) {
  if (o->nservers == MAX_SERVERS)
    return usage_error("at most %d servers", MAX_SERVERS);
  for (size_t k = 0; k < o->nservers; k++)
    if (strcmp(o->servers[k], v) == 0)
      return usage_error("--%s %s is given twice", name, v);
  o->servers[o->nservers++] = v;
  return 0;
}

static int opt_checkpoint(options *o, const char *name, const char *v) {
  (void)name;
  o->checkpoint = v;
  return 0;
}

static int opt_synthetic(options *o, const char *name, const char *v) {
  (void)name;
  o->synthetic = v;
  return 0;
}

static int opt_seed(options *o, const char *name, const char *v) {
  if (!wt_parse_u64(v, &o->seed))
    return usage_error("--%s: '%s' is not a number", name, v);
  o->have_seed = true;
  return 0;
}

static int opt_backend(options *o, const char *name, const char *v) {
  (void)name;
  o->backend = v;
  return 0;
}

static int opt_version(options *o, const char *name, const char *v) {
  if (*v == '\0') return usage_error("--%s must not be empty", name);
  o->version = v;
  return 0;
}

/* --chunk-size and --bucket-size: the options chunk_size, bucket_size. */
static int opt_size(options *o, const char *name, const char *v) {
  uint64_t n = 0;
  if (!wt_parse_size(v, &n) || n == 0)
    return usage_error("--%s: '%s' is not a size (e.g. 1M)", name, v);
  return add_option(
      o, strcmp(name, "chunk-size") == 0 ? "chunk_size" : "bucket_size", v);
}

static int opt_option(options *o, const char *name, const char *v) {
  const char *eq = strchr(v, '=');
  if (eq == NULL || eq == v)
    return usage_error("--%s: '%s' is not KEY=VALUE", name, v);
  char key[128];
  snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
  return add_option(o, key, eq + 1);
}

/* --timeout, --data-timeout, --keepalive-timeout and --tcp-user-timeout.
 * The bounds keep the milliseconds an int64_t (a uint32_t for the init
 * info, an int for the socket's) and at least 1 (0 would mean the
 * default). */
static int opt_seconds(options *o, const char *name, const char *v) {
  bool data = strcmp(name, "data-timeout") == 0,
       ka = strcmp(name, "keepalive-timeout") == 0,
       ut = strcmp(name, "tcp-user-timeout") == 0;
  double max = data       ? 4000000
               : ka || ut ? 2000000
                          : MAX_TIMEOUT_S,
         *to = data ? &o->data_timeout_s
               : ka ? &o->keepalive_s
               : ut ? &o->user_timeout_s
                    : &o->timeout_s;
  char *end = NULL;
  *to = strtod(v, &end);
  if (end == v || *end || !isfinite(*to) || *to < 0.001 || *to > max)
    return usage_error(
        "--%s: '%s' is not a number of seconds from 0.001 to "
        "%.0f",
        name, v, max);
  return 0;
}

static int opt_verify(options *o, const char *name, const char *v) {
  o->verify = true;
  if (v == NULL) return 0;
  wt_status *st = wt_hash_alg_parse(v, &o->verify_alg);
  if (st == NULL) return 0;
  int rc = usage_error("--%s: %s", name, wt_status_message(st));
  wt_status_free(st);
  return rc;
}

static int opt_quiet(options *o, const char *name, const char *v) {
  (void)name;
  (void)v;
  o->quiet = true;
  return 0;
}

static int opt_rounds(options *o, const char *name, const char *v) {
  if (!wt_parse_u64(v, &o->rounds) || o->rounds == 0 || o->rounds > 1000000)
    return usage_error("--%s: '%s' is not a count from 1 to 1000000", name, v);
  return 0;
}

static int opt_delta(options *o, const char *name, const char *v) {
  const char *mode = v ? v : "on";
  if (strcmp(mode, "on") != 0 && strcmp(mode, "off") != 0 &&
      strcmp(mode, "auto") != 0)
    return usage_error("--%s: '%s' is not on, off or auto", name, mode);
  o->delta_set = true;
  return add_option(o, "delta", mode);
}

static int opt_change(options *o, const char *name, const char *v) {
  char *end = NULL;
  double f = strtod(v, &end);
  if (end == v || *end || !(f > 0 && f <= 1))
    return usage_error("--%s: '%s' is not a fraction above 0, at most 1", name,
                       v);
  o->change = f;
  return 0;
}

static int opt_device(options *o, const char *name, const char *v) {
  wt_device d;
  wt_status *st = wt_device_parse(v, &d);
  if (st != NULL) {
    int rc = usage_error("--%s: %s", name, wt_status_message(st));
    wt_status_free(st);
    return rc;
  }
  o->device = v;
  return 0;
}

static int opt_adapter(options *o, const char *name, const char *v) {
  wt_status *st = wt_adapter_name_check(v, "--adapter");
  if (st != NULL) {
    int rc = usage_error("%s", wt_status_message(st));
    wt_status_free(st);
    return rc;
  }
  (void)name;
  o->adapter = v;
  return 0;
}

static int opt_lora_alpha(options *o, const char *name, const char *v) {
  char *end = NULL;
  double a = strtod(v, &end);
  if (end == v || *end || !(a > 0) || a > 1e9)
    return usage_error("--%s: '%s' is not a positive number", name, v);
  o->lora_alpha = a;
  return 0;
}

static int opt_security(options *o, const char *name, const char *v) {
  wt_tool_security_option(&o->sec, name, v);
  return 0;
}

static const option_row rows[] = {
    {"server", required_argument, "--server HOST:PORT",
     "server to update (repeatable; default 127.0.0.1:50051)", opt_server},
    {"checkpoint", required_argument, "--checkpoint PATH",
     "a .safetensors file or a sharded *.safetensors.index.json",
     opt_checkpoint},
    {"synthetic", required_argument, "--synthetic NAME",
     "a synthetic layout (tiny, small, llama-256m, bench-1g,\nbench-8g, "
     "small-10k); default: the server's own, when it\nserves synthetic:NAME",
     opt_synthetic},
    {"seed", required_argument, "--seed N",
     "synthetic contents seed (default: the server's sequence + 1)", opt_seed},
    {"backend", required_argument, "--backend NAME",
     "transfer backend (default grpc)", opt_backend},
    {"version", required_argument, "--version STR",
     "version to commit (default step-<sequence>)", opt_version},
    {"chunk-size", required_argument, "--chunk-size SIZE",
     "bytes per data message, e.g. 1M (grpc; default 1 MiB)", opt_size},
    {"bucket-size", required_argument, "--bucket-size SIZE",
     "packed bucket size, e.g. 64M (default 64 MiB)", opt_size},
    {"option", required_argument, "--option KEY=VALUE",
     "a setting of the backend (repeatable), e.g. fanout=chain\nfor ucx; the "
     "backend lists the ones it takes. For ucx,\n$WT_UCX_CONNECT, "
     "$WT_UCX_PEER_ERRORS, $WT_UCX_FANOUT and\n$WT_UCX_SPLIT_TENSORS are the "
     "options connect, peer_errors,\nfanout and split_tensors (--option wins)",
     opt_option},
    {"timeout", required_argument, "--timeout SECONDS",
     "deadline of the data calls (default 1800)", opt_seconds},
    {"data-timeout", required_argument, "--data-timeout SEC",
     "how long any side waits for the next data (a bucket,\na chunk) before "
     "the round fails: the init info's\ntimeout_ms (default: the servers' "
     "own, 60 s)",
     opt_seconds},
    {"keepalive-timeout", required_argument, "--keepalive-timeout SEC",
     "how long a server may leave a keepalive ping unanswered\nbefore its "
     "connection is closed and the round fails\n(default 20; a ping every "
     "second while a call is open)",
     opt_seconds},
    {"tcp-user-timeout", required_argument, "--tcp-user-timeout SEC",
     "how long bytes sent to a server may stay unacknowledged\nby its "
     "kernel (or its window shut) before the connection\nis dropped and "
     "the round fails: a cut link (default 1)",
     opt_seconds},
    {"verify", optional_argument, "--verify[=ALGO]",
     "compare checksums afterwards (sha256, the default, or xxh3)", opt_verify},
    {"quiet", no_argument, "--quiet", "no progress output", opt_quiet},
    {"device", required_argument, "--device DEV",
     "cpu (default) or cuda:N: the update is loaded into that\nGPU's memory "
     "once, before any round, and pushed from\nthere (--backend ipc or nccl, "
     "or ucx where its UCX moves\nGPU memory); packed (ipc's ring, nccl's "
     "buffers):\n--option packed=1",
     opt_device},
    {"delta", optional_argument, "--delta[=MODE]",
     "grpc: rounds after the first send what changed to servers\nthat hold "
     "the last one (on, the default of the flag;\nauto; off); prints what "
     "went on the wire (docs/delta.md)",
     opt_delta},
    {"change", required_argument, "--change FRACTION",
     "with --rounds: each round after the first changes this\nfraction of "
     "the elements as an optimizer step does (one\nulp or a few, at random "
     "places; 1: every byte) instead of\nnew contents; the model is held "
     "in memory",
     opt_change},
    {"rounds", required_argument, "--rounds N",
     "N rounds on one init, as a trainer that stays up does\n(default 1); "
     "prints the first round and the steady state",
     opt_rounds},
    {"adapter", required_argument, "--adapter NAME",
     "push a LoRA adapter set of this name beside the model\n(docs/lora.md): "
     "--checkpoint is its adapter_model.\nsafetensors (PEFT's naming); rank "
     "and target modules\ncome from its tensors",
     opt_adapter},
    {"lora-alpha", required_argument, "--lora-alpha A",
     "with --adapter: PEFT's lora_alpha (adapter_config.json)", opt_lora_alpha},
    {"tls-ca", required_argument, "--tls-ca PATH",
     "CA of the servers' certificates: talk TLS (PEM)", opt_security},
    {"tls-cert", required_argument, "--tls-cert PATH",
     "this client's certificate, for mutual TLS (with --tls-key)",
     opt_security},
    {"tls-key", required_argument, "--tls-key PATH", "its private key",
     opt_security},
    {"tls-server-name", required_argument, "--tls-server-name N",
     "the name the server's certificate carries (default: the host)",
     opt_security},
    {"token-file", required_argument, "--token-file PATH",
     "file holding the bearer token (default $WT_TOKEN_FILE)", opt_security},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static void usage(FILE *f) {
  fprintf(f,
          "usage: wt-push [options]\n"
          "Push one new version of the weights to wt servers.\n\n");
  for (size_t i = 0; i < NROWS; i++) {
    const char *line = rows[i].help;
    bool first = true;
    while (*line) {
      size_t len = strcspn(line, "\n");
      fprintf(f, "  %-20s %.*s\n", first ? rows[i].usage : "", (int)len, line);
      first = false;
      line += len + (line[len] == '\n');
    }
  }
  fprintf(f,
          "  %-20s this text\n\n"
          "Exit status: 0 ok, 1 transfer or verification failure, 2 "
          "usage.\n",
          "--help");
}

/* The ucx trainer's settings a user may keep in the environment, as the
 * options they are (given before --option, which therefore wins). */
static int options_from_environment(options *o) {
  static const char *const env[][2] = {
      {"WT_UCX_CONNECT", "connect"},
      {"WT_UCX_PEER_ERRORS", "peer_errors"},
      {"WT_UCX_FANOUT", "fanout"},
      {"WT_UCX_SPLIT_TENSORS", "split_tensors"}};
  if (strcmp(o->backend, "ucx") != 0) return 0;
  for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++) {
    const char *v = getenv(env[i][0]);
    if (v == NULL || *v == '\0') continue;
    int rc = add_option(o, env[i][1], v);
    if (rc != 0) return rc;
  }
  return 0;
}

static int parse_args(int argc, char **argv, options *o) {
  struct option longs[NROWS + 2];
  for (size_t i = 0; i < NROWS; i++)
    longs[i] =
        (struct option){rows[i].name, rows[i].has_arg, NULL, (int)(256 + i)};
  longs[NROWS] = (struct option){"help", no_argument, NULL, 'h'};
  longs[NROWS + 1] = (struct option){NULL, 0, NULL, 0};
  memset(o, 0, sizeof(*o));
  o->backend = "grpc";
  o->verify_alg = WT_HASH_SHA256;
  o->rounds = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      exit(0);
    }
    if (c < 256 || (size_t)(c - 256) >= NROWS) {
      fprintf(stderr, "wt-push: unknown or incomplete option '%s'\n",
              argv[optind - 1]);
      usage(stderr);
      return EXIT_USAGE;
    }
    const option_row *r = &rows[c - 256];
    if (r->parse == opt_option || r->parse == opt_size) continue; /* below */
    int rc = r->parse(o, r->name, optarg);
    if (rc != 0) return rc;
  }
  if (optind < argc)
    return usage_error("unexpected argument '%s'", argv[optind]);
  /* Backend options, once the backend is known: the environment's, then
   * the command line's in order. */
  int rc = options_from_environment(o);
  if (rc != 0) return rc;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    const option_row *r = &rows[c - 256];
    if (r->parse != opt_option && r->parse != opt_size) continue;
    if ((rc = r->parse(o, r->name, optarg)) != 0) return rc;
  }
  if (o->checkpoint && o->synthetic)
    return usage_error("--checkpoint and --synthetic exclude each other");
  if (o->have_seed && o->checkpoint)
    return usage_error("--seed applies to a synthetic update only");
  if (o->adapter && (!o->checkpoint || o->lora_alpha == 0))
    return usage_error(
        "--adapter %s needs --checkpoint (its adapter_model.safetensors) and "
        "--lora-alpha (its adapter_config.json's lora_alpha)",
        o->adapter);
  if (o->lora_alpha > 0 && !o->adapter)
    return usage_error("--lora-alpha applies to --adapter only");
  if (o->nservers == 0) o->servers[o->nservers++] = "127.0.0.1:50051";
  return 0;
}

/* ---- progress ----------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct progress_state {
  bool tty;
  bool quiet;
  double start;
  double last_draw;
  int last_decile; /* plain mode: last 10% step printed */
  bool drawn;
} progress_state;

static void on_progress(const wt_progress *p, void *user) {
  progress_state *ps = user;
  if (ps->quiet) return;
  double t = now_s();
  bool end =
      p->bytes_done == p->bytes_total && p->tensors_done == p->tensors_total;
  double frac =
      p->bytes_total ? (double)p->bytes_done / (double)p->bytes_total : 1.0;
  double el = t - ps->start;
  double gbps = el > 0 ? (double)p->bytes_done / el / 1e9 : 0;
  char a[32], b[32];
  if (ps->tty) {
    if (!end && t - ps->last_draw < 0.1) return;
    ps->last_draw = t;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int fill = (int)(frac * WIDTH);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr,
            "\r[%s] %3d%%  %" PRIu64 "/%" PRIu64
            " tensors  %s / %s  %.2f GB/s \x1b[K",
            bar, (int)(frac * 100), p->tensors_done, p->tensors_total,
            wt_tool_human_bytes(p->bytes_done, a, sizeof(a)),
            wt_tool_human_bytes(p->bytes_total, b, sizeof(b)), gbps);
    ps->drawn = true;
    if (end) {
      fputc('\n', stderr);
      ps->drawn = false;
    }
    fflush(stderr);
    return;
  }
  int decile = (int)(frac * 10);
  if (decile <= ps->last_decile && !(end && ps->last_decile < 10)) return;
  if (end) decile = 10;
  ps->last_decile = decile;
  fprintf(stderr,
          "progress: %3d%%  %" PRIu64 "/%" PRIu64
          " tensors  %s / %s  "
          "%.2f GB/s\n",
          decile * 10, p->tensors_done, p->tensors_total,
          wt_tool_human_bytes(p->bytes_done, a, sizeof(a)),
          wt_tool_human_bytes(p->bytes_total, b, sizeof(b)), gbps);
}

/* ---- verification ------------------------------------------------------- */

/* Compares every server's digests (every worker) with the local ones.
 * Returns the number of mismatches (missing digests count), or -1 with *st
 * set when a server could not be asked. */
static long verify(wt_sync_client *c, wt_source *src, wt_hash_alg alg,
                   wt_status **st) {
  char(*local)[WT_DIGEST_HEX_MAX] = NULL;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(src, &n);
  const char **names = NULL;
  long bad = 0, shown = 0;
  size_t checked = 0;
  *st = wt_source_checksums(src, alg, &local);
  if (*st) return -1;
  names = calloc(n > 0 ? n : 1, sizeof(*names));
  if (names == NULL) {
    free(local);
    *st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < n; i++) names[i] = metas[i].name;
  for (size_t k = 0; k < wt_sync_client_server_count(c) && n > 0; k++) {
    wt_param_checksum *sums = NULL;
    size_t ns = 0;
    *st = wt_sync_client_checksums(c, k, names, n, alg, true, &sums, &ns);
    if (*st) {
      bad = -1;
      break;
    }
    /* Each worker answers for every name, in the order asked. */
    size_t *seen = calloc(n, sizeof(*seen));
    for (size_t j = 0; j < ns; j++) {
      const wt_param_checksum *s = &sums[j];
      size_t i = j % n;
      if (strcmp(s->name, metas[i].name) != 0) {
        for (i = 0; i < n && strcmp(s->name, metas[i].name) != 0; i++) {
        }
      }
      if (i == n) continue;
      if (seen) seen[i]++;
      checked++;
      if (strcmp(s->digest, local[i]) == 0) continue;
      if (shown++ < MAX_SHOWN)
        printf(
            "verify: MISMATCH %s worker %u parameter '%s': server %s, "
            "local %s\n",
            wt_sync_client_target(c, k), (unsigned)s->worker, s->name,
            s->digest, local[i]);
      bad++;
    }
    for (size_t i = 0; seen && i < n; i++)
      if (seen[i] == 0) {
        if (shown++ < MAX_SHOWN)
          printf("verify: MISSING %s parameter '%s': no digest returned\n",
                 wt_sync_client_target(c, k), metas[i].name);
        bad++;
      }
    free(seen);
    wt_param_checksums_free(sums, ns);
  }
  if (bad > MAX_SHOWN)
    printf("verify: ... and %ld more mismatches\n", bad - MAX_SHOWN);
  if (bad == 0)
    printf(
        "verify: %zu parameters match (%s, %zu digests from %zu "
        "server(s))\n",
        n, wt_hash_alg_name(alg), checked, wt_sync_client_server_count(c));
  free(names);
  free(local);
  return bad;
}

/* ---- main --------------------------------------------------------------- */

/* The tensors of `host` copied once into one allocation on GPU `dev`
 * (each at a 256-byte boundary), as a trainer holds them: *out yields
 * them from there. *r and *ts are the caller's to free (after *out). */
static wt_status *load_on_device(wt_source *host, wt_device dev,
                                 wt_mem_region *r, wt_source_tensor **ts,
                                 wt_source **out) {
  wt_status *st = NULL;
  size_t n = 0;
  const wt_tensor_meta *m = wt_source_metas(host, &n);
  uint64_t total = 0;
  for (size_t k = 0; k < n; k++) total += (m[k].nbytes + 255) & ~255ull;
  *ts = calloc(n ? n : 1, sizeof(**ts));
  if (*ts == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(wt_cuda_bind(dev.index));
  WT_CHECK(wt_mem_alloc(WT_MEM_DEVICE, dev, total ? total : 256,
                        "wt-push --device", r));
  WT_CHECK(wt_source_rewind(host));
  uint64_t off = 0;
  for (size_t k = 0; k < n; k++) {
    wt_source_tensor t;
    bool done = false;
    const void *data = NULL;
    WT_CHECK(wt_source_next(host, &t, &done));
    WT_CHECK(wt_source_tensor_data(host, &t, &data));
    WT_CHECK(wt_mem_write(r, off, data, (size_t)t.nbytes, NULL));
    (*ts)[k] = (wt_source_tensor){.name = m[k].name,
                                  .dtype = m[k].dtype,
                                  .ndim = m[k].ndim,
                                  .shape = m[k].shape,
                                  .data = (char *)r->base + off,
                                  .nbytes = m[k].nbytes,
                                  .kind = WT_MEM_DEVICE,
                                  .device = dev};
    off += (m[k].nbytes + 255) & ~255ull;
  }
  WT_CHECK(wt_source_memory(*ts, n, out));
out:
  return st;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int fail(wt_status *st) {
  /* The message names the server, the call and the code already. */
  fprintf(stderr, "wt-push: %s\n", wt_status_message(st));
  wt_status_free(st);
  return EXIT_FAIL;
}

/* One run of wt-push: what it opened, released by run_close. */
typedef struct run {
  options o;
  wt_sync_client *c;
  wt_source *src;
  /* --device: the same tensors in GPU memory, and what holds them. */
  wt_source *dev_src;
  wt_source_tensor *dev_tensors;
  wt_mem_region dev_region;
  wt_trainer *trainer;
  Wt__V1__ServerInfo *info;
  Wt__V1__WeightTransferInitInfo *init;
  wt_weight_version ver; /* what server 0 held at the start */
  char *version;         /* the default version to commit */
  char *layout;
  int usage_exit; /* EXIT_USAGE when a step found a usage error */
  /* --change: the model in host memory, which each step changes. */
  unsigned char *held;
  wt_source_tensor *held_tensors;
  wt_source *held_src;
} run;

/* --change: a copy of the source in one host buffer, and a memory source
 * over it that the rounds push (wt_update_step changes it in place). */
static wt_status *hold_in_memory(run *r) {
  wt_status *st = NULL;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(r->src, &n);
  uint64_t total = wt_source_total_bytes(r->src);
  r->held = malloc(total ? total : 1);
  r->held_tensors = calloc(n ? n : 1, sizeof(*r->held_tensors));
  if (r->held == NULL || r->held_tensors == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "--change: out of memory for the model (%" PRIu64 " bytes)", total);
  WT_CHECK(wt_source_rewind(r->src));
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    wt_source_tensor t;
    bool done = false;
    WT_CHECK(wt_source_next(r->src, &t, &done));
    if (done) WT_FAIL(WT_INTERNAL, "--change: the source ended early");
    if (t.nbytes)
      WT_CHECK(wt_source_read(r->src, &t, 0, r->held + off, t.nbytes));
    r->held_tensors[i] = (wt_source_tensor){.name = metas[i].name,
                                            .dtype = metas[i].dtype,
                                            .ndim = metas[i].ndim,
                                            .shape = metas[i].shape,
                                            .data = r->held + off,
                                            .nbytes = metas[i].nbytes};
    off += metas[i].nbytes;
  }
  WT_CHECK(wt_source_memory(r->held_tensors, n, &r->held_src));
out:
  return st;
}

/* --change: step `i` of the trainer changes the held model. */
static void change_held(run *r, uint64_t i) {
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(r->held_src, &n);
  for (size_t k = 0; k < n; k++)
    wt_update_step(&metas[k], (void *)r->held_tensors[k].data, r->o.change,
                   r->o.have_seed ? r->o.seed : 1, i);
}

/* Step 1: the client, and what server 0 holds (it decides the defaults). */
static wt_status *run_connect(run *r) {
  wt_status *st = NULL;
  wt_client_options copts = {0};
  wt_tool_security_apply(&r->o.sec, &copts);
  if (r->o.keepalive_s > 0)
    copts.keepalive_timeout_ms = (int64_t)(r->o.keepalive_s * 1000);
  if (r->o.user_timeout_s > 0)
    copts.tcp_user_timeout_ms = (int64_t)(r->o.user_timeout_s * 1000);
  if (r->o.timeout_s > 0) {
    copts.data_timeout_ms = (int64_t)(r->o.timeout_s * 1000);
    if (copts.data_timeout_ms < WT_CLIENT_DEFAULT_TIMEOUT_MS)
      copts.timeout_ms = copts.data_timeout_ms;
  }
  copts.adapter = r->o.adapter;
  WT_CHECK(wt_sync_client_new(r->o.servers, r->o.nservers, &copts, &r->c));
  st = wt_sync_client_get_version(r->c, 0, &r->ver);
  /* An adapter set's first round makes it: no version yet. */
  if (st != NULL && r->o.adapter && wt_status_code(st) == WT_NOT_FOUND) {
    wt_status_free(st);
    st = NULL;
  }
out:
  return st;
}

/* --adapter: the init's adapter spec; its tensors, rank and target
 * modules come from the source (wt_sync_client_init_transfer). */
static wt_status *adapter_spec(run *r) {
  Wt__V1__AdapterSpec *spec = calloc(1, sizeof(*spec));
  if (spec == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  wt__v1__adapter_spec__init(spec);
  r->init->adapter = spec; /* freed with the init info */
  spec->alpha = r->o.lora_alpha;
  if ((spec->name = strdup(r->o.adapter)) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  return NULL;
}

/* Step 2: the source: the checkpoint, the synthetic layout named, or the
 * one the server serves; on a GPU with --device. */
static wt_status *run_source(run *r) {
  wt_status *st = NULL;
  options *o = &r->o;
  if (!o->checkpoint && !o->synthetic) {
    WT_CHECK(wt_sync_client_server_info(r->c, 0, &r->info));
    const char *model =
        r->info->model && r->info->model->name ? r->info->model->name : "";
    if (strncmp(model, "synthetic:", 10) != 0) {
      r->usage_exit = EXIT_USAGE;
      WT_FAIL(WT_INVALID_ARGUMENT,
              "server %s serves '%s', not a synthetic model: give "
              "--checkpoint PATH or --synthetic NAME",
              o->servers[0], model);
    }
    if ((r->layout = strdup(model + 10)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    o->synthetic = r->layout;
  }
  uint64_t next_seq = r->ver.sequence + 1;
  if (o->checkpoint)
    WT_CHECK(wt_source_checkpoint_open(o->checkpoint, &r->src));
  else
    WT_CHECK(wt_source_synthetic(o->synthetic,
                                 o->have_seed ? o->seed : next_seq, &r->src));
  if (o->change > 0) WT_CHECK(hold_in_memory(r));
  if (o->device != NULL && strcmp(o->device, "cpu") != 0) {
    wt_device dev;
    wt_status_free(wt_device_parse(o->device, &dev)); /* checked already */
    WT_CHECK(wt_status_prefix(load_on_device(r->src, dev, &r->dev_region,
                                             &r->dev_tensors, &r->dev_src),
                              "--device %s", o->device));
  }
  if (asprintf(&r->version, "step-%" PRIu64, next_seq) < 0) {
    r->version = NULL;
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
out:
  return st;
}

/* The source rounds push from: the GPU copy when there is one. */
static wt_source *push_source(const run *r) {
  return r->dev_src ? r->dev_src : r->held_src ? r->held_src : r->src;
}

/* Step 3: the backend builds its init info from the options; every server
 * inits, and the trainer engine is made. */
static wt_status *run_init(run *r) {
  wt_status *st =
      wt_trainer_init_info(r->o.backend, r->o.opts, r->o.nopts, &r->init);
  if (st != NULL) {
    if (wt_status_code(st) == WT_INVALID_ARGUMENT) r->usage_exit = EXIT_USAGE;
    return st;
  }
  if (r->o.data_timeout_s > 0)
    r->init->timeout_ms = (uint32_t)(r->o.data_timeout_s * 1000);
  if (r->o.adapter && (st = adapter_spec(r)) != NULL) return st;
  st = wt_sync_client_init_transfer(r->c, r->init, push_source(r), &r->trainer);
  if (st != NULL || r->o.quiet) return st;
  char a[32];
  size_t last = r->o.nservers - 1;
  fprintf(stderr,
          "wt-push: %zu tensors, %s from %s %s to %zu server(s) (world size "
          "%u) with backend %s\n",
          wt_source_count(r->src),
          wt_tool_human_bytes(wt_source_total_bytes(r->src), a, sizeof(a)),
          wt_source_kind(r->src),
          r->o.checkpoint ? r->o.checkpoint : r->o.synthetic, r->o.nservers,
          (unsigned)(wt_sync_client_rank_offset(r->c, last) +
                     wt_sync_client_server_world_size(r->c, last)),
          r->o.backend);
  return NULL;
}

/* The version round `i` commits: --version, or step-<sequence>, with the
 * round's number when there are several. */
static const char *round_version(const run *r, uint64_t i, char *buf,
                                 size_t len) {
  if (r->o.rounds == 1) return r->o.version ? r->o.version : r->version;
  if (r->o.version)
    snprintf(buf, len, "%.200s-%" PRIu64, r->o.version, i + 1);
  else
    snprintf(buf, len, "step-%" PRIu64, r->ver.sequence + 1 + i);
  return buf;
}

/* One round: start, update, finish; *secs its time. */
static wt_status *run_round(run *r, uint64_t i, double *secs) {
  wt_status *st = NULL;
  progress_state ps = {.tty = isatty(STDERR_FILENO) == 1,
                       .quiet = r->o.quiet || r->o.rounds > 1};
  if (r->held_src != NULL && i > 0) change_held(r, i);
  double t0 = now_s();
  WT_CHECK(wt_sync_client_start(r->c));
  ps.start = now_s();
  st =
      wt_sync_client_update(r->c, r->trainer, push_source(r), on_progress, &ps);
  if (ps.drawn) fputc('\n', stderr);
  if (st != NULL) goto out;
  double t_push = now_s() - ps.start;
  char name[256];
  const char *commit = round_version(r, i, name, sizeof(name));
  WT_CHECK(wt_sync_client_finish(r->c, commit));
  *secs = now_s() - t0;
  if (r->o.rounds == 1 || !r->o.quiet) {
    uint64_t bytes = wt_source_total_bytes(r->src);
    char a[32];
    printf("%spushed %zu tensors, %" PRIu64
           " bytes (%s) to %zu server(s) in %.3f s: %.3g GB/s (round %.3f "
           "s); committed version '%s'\n",
           r->o.rounds > 1 ? "round " : "", wt_source_count(r->src), bytes,
           wt_tool_human_bytes(bytes, a, sizeof(a)), r->o.nservers, t_push,
           t_push > 0 ? (double)bytes / t_push / 1e9 : 0.0, *secs, commit);
    wt_delta_stats ds;
    wt_status *dst = wt_trainer_delta_stats(r->trainer, &ds);
    if (dst == NULL && r->o.delta_set) {
      char w[32];
      printf("  delta: %u server(s) took %" PRIu64
             " bytes (%s) on the wire "
             "(%.1fx fewer than %" PRIu64 "), %u full; encode %.3f s\n",
             (unsigned)ds.delta_servers, ds.delta_wire_bytes,
             wt_tool_human_bytes(ds.delta_wire_bytes, w, sizeof(w)),
             ds.delta_wire_bytes
                 ? (double)ds.raw_bytes / (double)ds.delta_wire_bytes
                 : 0.0,
             ds.raw_bytes, (unsigned)ds.full_servers, ds.encode_s);
    }
    wt_status_free(dst);
    fflush(stdout);
  }
out:
  return st;
}

/* The RL loop is the steady state: the rounds after the first, apart. */
static void print_steady_state(const run *r, double *secs) {
  uint64_t bytes = wt_source_total_bytes(r->src);
  size_t n = (size_t)r->o.rounds - 1;
  qsort(secs + 1, n, sizeof(*secs), cmp_double);
  double med = n % 2 ? secs[1 + n / 2] : (secs[n / 2] + secs[1 + n / 2]) / 2;
  printf("rounds: %" PRIu64
         " on one init; first %.3f s (%.3g GB/s); steady state median %.3f "
         "s (%.3g GB/s), best %.3f s, worst %.3f s\n",
         r->o.rounds, secs[0], (double)bytes / secs[0] / 1e9, med,
         (double)bytes / med / 1e9, secs[1], secs[n]);
}

/* Step 4: every round on the one init. */
static wt_status *run_rounds(run *r) {
  wt_status *st = NULL;
  double *secs = calloc(r->o.rounds, sizeof(*secs));
  if (secs == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory for --rounds");
  for (uint64_t i = 0; i < r->o.rounds && st == NULL; i++)
    st = run_round(r, i, &secs[i]);
  if (st == NULL && r->o.rounds > 1) print_steady_state(r, secs);
  free(secs);
  fflush(stdout);
  return st;
}

/* A round this run opened and did not finish is dropped now rather than
 * at the servers' round timeout; then everything is released. */
static void run_close(run *r) {
  for (size_t k = 0; r->c && k < wt_sync_client_server_count(r->c); k++)
    if (wt_sync_client_round_id(r->c, k) != 0) {
      wt_status *ast = wt_sync_client_abort(r->c, "wt-push failed");
      if (ast) fail(ast);
      break;
    }
  wt_trainer_destroy(r->trainer);
  wt_source_destroy(r->dev_src);
  free(r->dev_tensors);
  if (r->dev_region.len != 0) wt_mem_free(&r->dev_region);
  wt_source_destroy(r->held_src);
  free(r->held_tensors);
  free(r->held);
  wt_source_destroy(r->src);
  wt_pb_free(r->info ? &r->info->base : NULL);
  wt_pb_free(r->init ? &r->init->base : NULL);
  wt_weight_version_clear(&r->ver);
  wt_sync_client_destroy(r->c);
  free(r->version);
  free(r->layout);
}

int main(int argc, char **argv) {
  static run r;
  wt_tool_log_level();
  int rc = parse_args(argc, argv, &r.o);
  if (rc != 0) return rc;
  wt_status *st = NULL;
  int exit_code = 0;
  if ((st = run_connect(&r)) == NULL && (st = run_source(&r)) == NULL &&
      (st = run_init(&r)) == NULL && (st = run_rounds(&r)) == NULL &&
      r.o.verify) {
    long bad =
        verify(r.c, r.held_src ? r.held_src : r.src, r.o.verify_alg, &st);
    if (bad != 0) exit_code = EXIT_FAIL;
  }
  if (st != NULL) {
    exit_code = r.usage_exit ? r.usage_exit : EXIT_FAIL;
    fail(st);
  }
  run_close(&r);
  return exit_code;
}
