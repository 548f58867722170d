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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

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
  bool verify;
  wt_hash_alg verify_alg;
  bool quiet;
  uint64_t rounds;    /* rounds on one init (default 1) */
  const char *device; /* --device: the source in this GPU's memory */
  wt_tool_security sec;
} options;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: wt-push [options]\n"
      "Push one new version of the weights to wt servers.\n"
      "\n"
      "  --server HOST:PORT   server to update (repeatable; default "
      "127.0.0.1:50051)\n"
      "  --checkpoint PATH    a .safetensors file or a sharded "
      "*.safetensors.index.json\n"
      "  --synthetic NAME     a synthetic layout (tiny, small, "
      "llama-256m, bench-1g,\n"
      "                       bench-8g, small-10k);\n"
      "                       default: the server's own, when it serves "
      "synthetic:NAME\n"
      "  --seed N             synthetic contents seed (default: the "
      "server's sequence + 1)\n"
      "  --backend NAME       transfer backend (default grpc)\n"
      "  --version STR        version to commit (default "
      "step-<sequence>)\n"
      "  --chunk-size SIZE    bytes per data message, e.g. 1M (grpc; "
      "default 1 MiB)\n"
      "  --bucket-size SIZE   packed bucket size, e.g. 64M (default "
      "64 MiB)\n"
      "  --option KEY=VALUE   a setting of the backend (repeatable), e.g. "
      "fanout=chain\n"
      "                       for ucx; the backend lists the ones it "
      "takes\n"
      "  --timeout SECONDS    deadline of the data calls (default 1800)\n"
      "  --data-timeout SEC   how long any side waits for the next data "
      "(a bucket,\n"
      "                       a chunk) before the round fails: the init "
      "info's\n"
      "                       timeout_ms (default: the servers' own, 60 "
      "s)\n"
      "  --verify[=ALGO]      compare checksums afterwards (sha256, "
      "the default, or xxh3)\n"
      "  --quiet              no progress output\n"
      "  --device DEV         cpu (default) or cuda:N: the update is loaded "
      "into that\n"
      "                       GPU's memory once, before any round, and "
      "pushed from\n"
      "                       there (--backend ipc or nccl, or ucx where "
      "its UCX moves\n"
      "                       GPU memory); packed (ipc's ring, nccl's "
      "buffers):\n"
      "                       --option packed=1\n"
      "  --rounds N           N rounds on one init, as a trainer that "
      "stays up does\n"
      "                       (default 1); prints the first round and "
      "the steady state\n" WT_TOOL_SECURITY_USAGE
      "  --help               this text\n"
      "\n"
      "Exit status: 0 ok, 1 transfer or verification failure, 2 usage.\n");
}

/* Adds a backend option; its key and value are copied. */
static int add_option(options *o, const char *key, const char *value) {
  if (o->nopts == MAX_OPTIONS) {
    fprintf(stderr, "wt-push: at most %d backend options\n", MAX_OPTIONS);
    return EXIT_USAGE;
  }
  char *text = o->opt_text[o->nopts];
  int n = snprintf(text, sizeof(o->opt_text[0]), "%s=%s", key, value);
  if (n < 0 || (size_t)n >= sizeof(o->opt_text[0])) {
    fprintf(stderr, "wt-push: option '%s' is too long\n", key);
    return EXIT_USAGE;
  }
  char *eq = text + strlen(key);
  *eq = '\0';
  o->opts[o->nopts++] = (wt_backend_option){text, eq + 1};
  return 0;
}

static int parse_args(int argc, char **argv, options *o) {
  enum {
    O_SERVER = 256,
    O_CKPT,
    O_SYNTH,
    O_SEED,
    O_BACKEND,
    O_VERSION,
    O_CHUNK,
    O_BUCKET,
    O_OPTION,
    O_TIMEOUT,
    O_VERIFY,
    O_QUIET,
    O_ROUNDS,
    O_DATA_TIMEOUT,
    O_DEVICE,
    O_HELP,
    O_SECURITY
  };
  static const struct option longs[] = {
      {"server", required_argument, NULL, O_SERVER},
      {"checkpoint", required_argument, NULL, O_CKPT},
      {"synthetic", required_argument, NULL, O_SYNTH},
      {"seed", required_argument, NULL, O_SEED},
      {"backend", required_argument, NULL, O_BACKEND},
      {"version", required_argument, NULL, O_VERSION},
      {"chunk-size", required_argument, NULL, O_CHUNK},
      {"bucket-size", required_argument, NULL, O_BUCKET},
      {"option", required_argument, NULL, O_OPTION},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"verify", optional_argument, NULL, O_VERIFY},
      {"quiet", no_argument, NULL, O_QUIET},
      {"rounds", required_argument, NULL, O_ROUNDS},
      {"data-timeout", required_argument, NULL, O_DATA_TIMEOUT},
      {"device", required_argument, NULL, O_DEVICE},
      {"help", no_argument, NULL, O_HELP},
      {"tls-ca", required_argument, NULL, O_SECURITY},
      {"tls-cert", required_argument, NULL, O_SECURITY},
      {"tls-key", required_argument, NULL, O_SECURITY},
      {"tls-server-name", required_argument, NULL, O_SECURITY},
      {"token-file", required_argument, NULL, O_SECURITY},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  o->backend = "grpc";
  o->verify_alg = WT_HASH_SHA256;
  o->rounds = 1;
  opterr = 0;
  for (;;) {
    int li = -1;
    int c = getopt_long(argc, argv, "h", longs, &li);
    if (c == -1) break;
    switch (c) {
      case O_SECURITY:
        wt_tool_security_option(&o->sec, longs[li].name, optarg);
        break;
      case O_SERVER:
        if (o->nservers == MAX_SERVERS) {
          fprintf(stderr, "wt-push: at most %d servers\n", MAX_SERVERS);
          return EXIT_USAGE;
        }
        for (size_t k = 0; k < o->nservers; k++)
          if (strcmp(o->servers[k], optarg) == 0) {
            fprintf(stderr, "wt-push: --server %s is given twice\n", optarg);
            return EXIT_USAGE;
          }
        o->servers[o->nservers++] = optarg;
        break;
      case O_CKPT:
        o->checkpoint = optarg;
        break;
      case O_SYNTH:
        o->synthetic = optarg;
        break;
      case O_DEVICE: {
        wt_device d;
        wt_status *st = wt_device_parse(optarg, &d);
        if (st != NULL) {
          fprintf(stderr, "wt-push: --device: %s\n", wt_status_message(st));
          wt_status_free(st);
          return EXIT_USAGE;
        }
        o->device = optarg;
        break;
      }
      case O_ROUNDS:
        if (!wt_parse_u64(optarg, &o->rounds) || o->rounds == 0 ||
            o->rounds > 1000000) {
          fprintf(stderr,
                  "wt-push: --rounds: '%s' is not a count from 1 to 1000000\n",
                  optarg);
          return EXIT_USAGE;
        }
        break;
      case O_SEED:
        if (!wt_parse_u64(optarg, &o->seed)) {
          fprintf(stderr, "wt-push: --seed: '%s' is not a number\n", optarg);
          return EXIT_USAGE;
        }
        o->have_seed = true;
        break;
      case O_BACKEND:
        o->backend = optarg;
        break;
      case O_VERSION:
        if (*optarg == '\0') {
          fprintf(stderr, "wt-push: --version must not be empty\n");
          return EXIT_USAGE;
        }
        o->version = optarg;
        break;
      case O_CHUNK:
      case O_BUCKET: {
        uint64_t v = 0;
        if (!wt_parse_size(optarg, &v) || v == 0) {
          fprintf(stderr, "wt-push: %s: '%s' is not a size (e.g. 1M)\n",
                  c == O_CHUNK ? "--chunk-size" : "--bucket-size", optarg);
          return EXIT_USAGE;
        }
        int rc =
            add_option(o, c == O_CHUNK ? "chunk_size" : "bucket_size", optarg);
        if (rc != 0) return rc;
        break;
      }
      case O_OPTION: {
        const char *eq = strchr(optarg, '=');
        if (eq == NULL || eq == optarg) {
          fprintf(stderr, "wt-push: --option: '%s' is not KEY=VALUE\n", optarg);
          return EXIT_USAGE;
        }
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - optarg), optarg);
        int rc = add_option(o, key, eq + 1);
        if (rc != 0) return rc;
        break;
      }
      case O_TIMEOUT:
      case O_DATA_TIMEOUT: {
        char *end = NULL;
        double *to = c == O_TIMEOUT ? &o->timeout_s : &o->data_timeout_s;
        /* The bounds keep the milliseconds an int64_t (a uint32_t for the
         * init info) and at least 1 (0 would mean the default). */
        double max = c == O_TIMEOUT ? MAX_TIMEOUT_S : 4000000;
        *to = strtod(optarg, &end);
        if (end == optarg || *end || !isfinite(*to) || *to < 0.001 ||
            *to > max) {
          fprintf(stderr,
                  "wt-push: %s: '%s' is not a number of seconds from "
                  "0.001 to %.0f\n",
                  c == O_TIMEOUT ? "--timeout" : "--data-timeout", optarg, max);
          return EXIT_USAGE;
        }
        break;
      }
      case O_VERIFY:
        o->verify = true;
        if (optarg) {
          wt_status *st = wt_hash_alg_parse(optarg, &o->verify_alg);
          if (st) {
            fprintf(stderr, "wt-push: --verify: %s\n", wt_status_message(st));
            wt_status_free(st);
            return EXIT_USAGE;
          }
        }
        break;
      case O_QUIET:
        o->quiet = true;
        break;
      case 'h':
      case O_HELP:
        usage(stdout);
        exit(0);
      default:
        fprintf(stderr, "wt-push: unknown or incomplete option '%s'\n",
                argv[optind - 1]);
        usage(stderr);
        return EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "wt-push: unexpected argument '%s'\n", argv[optind]);
    return EXIT_USAGE;
  }
  if (o->checkpoint && o->synthetic) {
    fprintf(stderr,
            "wt-push: --checkpoint and --synthetic exclude each "
            "other\n");
    return EXIT_USAGE;
  }
  if (o->have_seed && o->checkpoint) {
    fprintf(stderr, "wt-push: --seed applies to a synthetic update only\n");
    return EXIT_USAGE;
  }
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

int main(int argc, char **argv) {
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc != 0) return rc;

  wt_status *st = NULL;
  wt_sync_client *c = NULL;
  wt_source *src = NULL;
  /* --device: the same tensors in GPU memory, and what holds them. */
  wt_source *dev_src = NULL;
  wt_source_tensor *dev_tensors = NULL;
  wt_mem_region dev_region = {0};
  wt_trainer *trainer = NULL;
  Wt__V1__ServerInfo *info = NULL;
  Wt__V1__WeightTransferInitInfo *init = NULL;
  wt_weight_version ver = {0};
  char *version = NULL;
  char *layout = NULL;
  int exit_code = EXIT_FAIL;

  wt_client_options copts = {0};
  wt_tool_security_apply(&o.sec, &copts);
  if (o.timeout_s > 0) {
    copts.data_timeout_ms = (int64_t)(o.timeout_s * 1000);
    if (copts.data_timeout_ms < WT_CLIENT_DEFAULT_TIMEOUT_MS)
      copts.timeout_ms = copts.data_timeout_ms;
  }
  st = wt_sync_client_new(o.servers, o.nservers, &copts, &c);
  if (st) goto out;

  /* What the servers hold now decides the defaults. */
  st = wt_sync_client_get_version(c, 0, &ver);
  if (st) goto out;
  if (!o.checkpoint && !o.synthetic) {
    st = wt_sync_client_server_info(c, 0, &info);
    if (st) goto out;
    const char *model =
        info->model && info->model->name ? info->model->name : "";
    if (strncmp(model, "synthetic:", 10) != 0) {
      fprintf(stderr,
              "wt-push: server %s serves '%s', not a synthetic model: give "
              "--checkpoint PATH or --synthetic NAME\n",
              o.servers[0], model);
      exit_code = EXIT_USAGE;
      goto out;
    }
    layout = strdup(model + 10);
    o.synthetic = layout;
  }
  uint64_t next_seq = ver.sequence + 1;
  if (o.checkpoint) {
    st = wt_source_checkpoint_open(o.checkpoint, &src);
  } else {
    st =
        wt_source_synthetic(o.synthetic, o.have_seed ? o.seed : next_seq, &src);
  }
  if (st) goto out;
  if (o.device != NULL && strcmp(o.device, "cpu") != 0) {
    wt_device dev;
    wt_status_free(wt_device_parse(o.device, &dev)); /* checked already */
    st = load_on_device(src, dev, &dev_region, &dev_tensors, &dev_src);
    if (st) {
      st = wt_status_prefix(st, "--device %s", o.device);
      goto out;
    }
  }
  if (o.version == NULL) {
    if (asprintf(&version, "step-%" PRIu64, next_seq) < 0) {
      st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
      goto out;
    }
  }

  /* The backend builds its own init info from the options. */
  st = wt_trainer_init_info(o.backend, o.opts, o.nopts, &init);
  if (st) {
    if (wt_status_code(st) == WT_INVALID_ARGUMENT) {
      fprintf(stderr, "wt-push: %s\n", wt_status_message(st));
      wt_status_free(st);
      st = NULL;
      exit_code = EXIT_USAGE;
    }
    goto out;
  }
  if (o.data_timeout_s > 0)
    init->timeout_ms = (uint32_t)(o.data_timeout_s * 1000);
  /* Rounds push from the GPU copy when there is one. */
  wt_source *push_src = dev_src ? dev_src : src;
  st = wt_sync_client_init_transfer(c, init, push_src, &trainer);
  if (st) goto out;

  char a[32];
  if (!o.quiet)
    fprintf(stderr,
            "wt-push: %zu tensors, %s from %s %s to %zu server(s) "
            "(world size %u) with backend %s\n",
            wt_source_count(src),
            wt_tool_human_bytes(wt_source_total_bytes(src), a, sizeof(a)),
            wt_source_kind(src), o.checkpoint ? o.checkpoint : o.synthetic,
            o.nservers,
            (unsigned)(wt_sync_client_rank_offset(c, o.nservers - 1) +
                       wt_sync_client_server_world_size(c, o.nservers - 1)),
            o.backend);

  uint64_t bytes = wt_source_total_bytes(src);
  double *secs = calloc(o.rounds, sizeof(*secs));
  if (secs == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory for --rounds");
    goto out;
  }
  for (uint64_t r = 0; r < o.rounds; r++) {
    progress_state ps = {.tty = isatty(STDERR_FILENO) == 1,
                         .quiet = o.quiet || o.rounds > 1};
    double t0 = now_s();
    st = wt_sync_client_start(c);
    if (st) break;
    ps.start = now_s();
    st = wt_sync_client_update(c, trainer, push_src, on_progress, &ps);
    if (ps.drawn) fputc('\n', stderr);
    if (st) break;
    double t_push = now_s() - ps.start;
    /* Several rounds: each commits its own version. */
    char name[256];
    const char *commit = o.version ? o.version : version;
    if (o.rounds > 1) {
      if (o.version)
        snprintf(name, sizeof(name), "%.200s-%" PRIu64, o.version, r + 1);
      else
        snprintf(name, sizeof(name), "step-%" PRIu64, next_seq + r);
      commit = name;
    }
    st = wt_sync_client_finish(c, commit);
    if (st) break;
    double t_round = now_s() - t0;
    secs[r] = t_round;
    if (o.rounds == 1 || !o.quiet)
      printf("%spushed %zu tensors, %" PRIu64
             " bytes (%s) to %zu server(s) in "
             "%.3f s: %.3g GB/s (round %.3f s); committed version '%s'\n",
             o.rounds > 1 ? "round " : "", wt_source_count(src), bytes,
             wt_tool_human_bytes(bytes, a, sizeof(a)), o.nservers, t_push,
             t_push > 0 ? (double)bytes / t_push / 1e9 : 0.0, t_round, commit);
    fflush(stdout);
  }
  if (st == NULL && o.rounds > 1) {
    /* The RL loop is the steady state: rounds after the first. */
    size_t n = (size_t)o.rounds - 1;
    qsort(secs + 1, n, sizeof(*secs), cmp_double);
    double med = n % 2 ? secs[1 + n / 2] : (secs[n / 2] + secs[1 + n / 2]) / 2;
    printf("rounds: %" PRIu64
           " on one init; first %.3f s (%.3g GB/s); "
           "steady state median %.3f s (%.3g GB/s), best %.3f s, worst "
           "%.3f s\n",
           o.rounds, secs[0], (double)bytes / secs[0] / 1e9, med,
           (double)bytes / med / 1e9, secs[1], secs[n]);
  }
  free(secs);
  if (st) goto out;
  fflush(stdout);
  exit_code = 0;
  if (o.verify) {
    long bad = verify(c, src, o.verify_alg, &st);
    if (bad != 0) exit_code = EXIT_FAIL;
  }
out:
  if (st) exit_code = fail(st);
  /* A round this run opened and did not finish is dropped now rather than
   * at the servers' round timeout. */
  for (size_t k = 0; c && k < wt_sync_client_server_count(c); k++)
    if (wt_sync_client_round_id(c, k) != 0) {
      wt_status *ast = wt_sync_client_abort(c, "wt-push failed");
      if (ast) fail(ast);
      break;
    }
  wt_trainer_destroy(trainer);
  wt_source_destroy(dev_src);
  free(dev_tensors);
  if (dev_region.len != 0) wt_mem_free(&dev_region);
  wt_source_destroy(src);
  wt_pb_free(info ? &info->base : NULL);
  wt_pb_free(init ? &init->base : NULL);
  wt_weight_version_clear(&ver);
  wt_sync_client_destroy(c);
  free(version);
  free(layout);
  return exit_code;
}
