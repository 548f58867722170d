/* wt-ctl: look at a wt server.
 *
 *   wt-ctl [--server HOST:PORT] [--timeout SECONDS] COMMAND
 *     info                      server, model, workers, version
 *     params [PREFIX]           every parameter (name, dtype, shape, bytes)
 *     version                   the committed version
 *     watch [--count N]         print each version as it commits
 *     checksum [--algo sha256|xxh3] [--all-workers] [NAME...]
 *     top [--interval SEC] [--count N]   a live view (top.c)
 *
 * Exit codes: 0 ok, 1 the server call failed, 2 usage. */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/adapter_spec.h"
#include "wt/client.h"
#include "wt/pb.h"

#include "tool_format.h"

/* export_info.c: wt-ctl export-info PATH [--worker W]; an exit code. */
int wt_ctl_export_info(const char *path, uint32_t worker);
/* top.c: wt-ctl top [--interval SEC] [--count N]; an exit code. */
int wt_ctl_top(wt_sync_client *c, int argc, char **argv);

#define EXIT_FAIL 1
#define EXIT_USAGE 2
/* 30 days, as wt-server's --round-timeout. */
#define MAX_TIMEOUT_S 2592000

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: wt-ctl [--server HOST:PORT] [--timeout SECONDS] [TLS and "
      "token options] COMMAND\n"
      "\n"
      "commands:\n"
      "  info                       server, model, workers and version\n"
      "  params [PREFIX]            parameters whose name starts with "
      "PREFIX\n"
      "  version                    the committed weight version\n"
      "  watch [--count N]          print versions as they commit "
      "(the current first, if any)\n"
      "  checksum [--algo sha256|xxh3] [--all-workers] [NAME...]\n"
      "                             digests of the committed bytes\n"
      "  top [--interval SEC] [--count N]\n"
      "                             a live view: version, the round in\n"
      "                             progress per worker, last rounds,\n"
      "                             admission (q or Ctrl-C ends it; not on\n"
      "                             a terminal: N plain frames, default 1)\n"
      "  export-info [--export] PATH [--worker W]\n"
      "                             what a consumer of wt-server --export\n"
      "                             PATH sees (acquires, then releases)\n"
      "\n"
      "  --server HOST:PORT         default 127.0.0.1:50051\n"
      "  --adapter NAME             params, version, watch, checksum of a\n"
      "                             LoRA adapter set (docs/lora.md)\n"
      "  --timeout SECONDS          deadline of each call (default 30; "
      "watch: none)\n" WT_TOOL_SECURITY_USAGE);
}

static int fail(wt_status *st) {
  /* The message names the server, the call and the code already. */
  char *msg = strdup(wt_status_message(st));
  fprintf(stderr, "wt-ctl: %s\n",
          msg ? wt_tool_printable(msg) : "(out of memory)");
  free(msg);
  wt_status_free(st);
  return EXIT_FAIL;
}

static const char *format_time(int64_t unix_ms, char *buf, size_t len) {
  time_t s = (time_t)(unix_ms / 1000);
  struct tm tm;
  if (unix_ms <= 0 || gmtime_r(&s, &tm) == NULL) {
    snprintf(buf, len, "-");
    return buf;
  }
  size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, len - n, ".%03dZ", (int)(unix_ms % 1000));
  return buf;
}

static void print_version(const wt_weight_version *v) {
  char t[64];
  if (v->sequence == 0 && (v->version == NULL || *v->version == '\0'))
    printf("version: (none committed yet)\n");
  else
    printf("version: %s (sequence %" PRIu64 ", committed %s)\n",
           wt_tool_printable(v->version), v->sequence,
           format_time(v->committed_unix_ms, t, sizeof(t)));
  fflush(stdout);
}

static int cmd_info(wt_sync_client *c, int argc, char **argv) {
  Wt__V1__ServerInfo *info = NULL;
  wt_status *st = wt_sync_client_server_info(c, 0, &info);
  char b[32];
  if (st) return fail(st);
  wt_tool_printable_pb(&info->base);
  printf("server:       %s (wt %s)\n", wt_sync_client_target(c, 0),
         info->server_version);
  if (info->model)
    printf("model:        %s: %" PRIu64 " parameters, %s\n", info->model->name,
           info->model->num_parameters,
           wt_tool_human_bytes(info->model->total_bytes, b, sizeof(b)));
  printf("version:      %s\n", info->weight_version && *info->weight_version
                                   ? info->weight_version
                                   : "(none committed)");
  printf("staging:      %s%s\n", info->staging,
         info->store_complete ? "" : " (store INCOMPLETE: a round failed)");
  printf("world size:   %u\n", (unsigned)info->world_size);
  if (info->state && *info->state) printf("state:        %s\n", info->state);
  if (info->export_path && *info->export_path) {
    printf("export:       %s, %u lease(s) open\n", info->export_path,
           (unsigned)info->lease_count);
    for (size_t i = 0; i < info->n_leases; i++)
      printf("  lease:      pid %u (uid %u) on '%s' (sequence %" PRIu64 ")\n",
             (unsigned)info->leases[i]->pid, (unsigned)info->leases[i]->uid,
             info->leases[i]->version, info->leases[i]->sequence);
  }
  for (size_t i = 0; i < info->n_adapters; i++) {
    const Wt__V1__AdapterInfo *a = info->adapters[i];
    printf(
        "adapter:      %s: rank %u, alpha %g, %u tensors, %" PRIu64
        " bytes; version %s (sequence %" PRIu64 "), %s%s%s\n",
        a->name, (unsigned)a->rank, a->alpha, (unsigned)a->num_tensors,
        a->total_bytes,
        a->weight_version && *a->weight_version ? a->weight_version : "(none)",
        a->sequence, a->state,
        a->export_path && *a->export_path ? ", export " : "",
        a->export_path ? a->export_path : "");
  }
  if (info->auth && *info->auth)
    printf("auth:         %s\n",
           strcmp(info->auth, "none") == 0
               ? "none (any process that reaches the port may call)"
               : info->auth);
  printf("backends:    ");
  for (size_t i = 0; i < info->n_backends; i++)
    printf(" %s", info->backends[i]);
  printf("\n");
  for (size_t i = 0; i < info->n_backend_info; i++) {
    const Wt__V1__BackendInfo *bi = info->backend_info[i];
    if (!bi->loaded) {
      printf("  %-8s (module not loaded yet)\n", bi->name);
      continue;
    }
    printf("  %-8s memory", bi->name);
    for (size_t k = 0; k < bi->n_memory_kinds; k++)
      printf("%s%s", k ? "," : " ", bi->memory_kinds[k]);
    printf("%s%s", bi->cross_host ? ", across hosts" : ", one host",
           bi->survives_abort ? "" : ", needs a new init after an abort");
    if (!bi->available)
      printf("; unavailable here: %s",
             bi->unavailable_reason && *bi->unavailable_reason
                 ? bi->unavailable_reason
                 : "(no reason given)");
    printf("\n");
  }
  if (info->n_capabilities) {
    printf("capabilities:");
    for (size_t i = 0; i < info->n_capabilities; i++)
      printf(" %s", info->capabilities[i]);
    printf("\n");
  }
  printf("workers:      %zu\n", info->n_workers);
  for (size_t i = 0; i < info->n_workers; i++) {
    const Wt__V1__WorkerInfo *w = info->workers[i];
    printf("  rank %-3u %-8s %-6s memory, %s held, backend %-6s %s%s\n",
           (unsigned)w->rank, w->device,
           w->memory_kind && *w->memory_kind ? w->memory_kind : "?",
           wt_tool_human_bytes(w->bytes_held, b, sizeof(b)),
           *w->backend ? w->backend : "-", w->state,
           w->store_complete ? "" : " (store incomplete)");
    if (w->reason && *w->reason) printf("           %s\n", w->reason);
    if (w->bytes_received || w->bytes_forwarded) {
      char r[32], f[32];
      printf("           received %s, forwarded %s (ucx chain)\n",
             wt_tool_human_bytes(w->bytes_received, r, sizeof(r)),
             wt_tool_human_bytes(w->bytes_forwarded, f, sizeof(f)));
    }
  }
  wt_pb_free(&info->base);
  return 0;
}

static int cmd_params(wt_sync_client *c, int argc, char **argv) {
  const char *prefix = argc > 0 ? argv[0] : NULL;
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  uint64_t total = 0;
  char shape[128], b[32];
  wt_status *st = wt_sync_client_list_parameters(c, 0, prefix, &m, &n);
  if (st) return fail(st);
  for (size_t i = 0; i < n; i++) {
    printf("%-56s %-10s %-20s %" PRIu64 "\n", m[i].name,
           wt_dtype_torch_name(m[i].dtype),
           wt_shape_format(m[i].shape, m[i].ndim, shape, sizeof(shape)),
           m[i].nbytes);
    total += m[i].nbytes;
  }
  printf("%zu parameters, %" PRIu64 " bytes (%s)\n", n, total,
         wt_tool_human_bytes(total, b, sizeof(b)));
  wt_tensor_meta_array_free(m, n);
  return 0;
}

static int cmd_version(wt_sync_client *c, int argc, char **argv) {
  wt_weight_version v = {0};
  wt_status *st = wt_sync_client_get_version(c, 0, &v);
  if (st) return fail(st);
  print_version(&v);
  wt_weight_version_clear(&v);
  return 0;
}

typedef struct watch_state {
  uint64_t seen;
  uint64_t count; /* 0: forever */
} watch_state;

static bool on_version(const wt_weight_version *v, void *user) {
  watch_state *w = user;
  print_version(v);
  w->seen++;
  return w->count == 0 || w->seen < w->count;
}

static int cmd_watch(wt_sync_client *c, int argc, char **argv) {
  watch_state w = {0};
  for (int i = 0; i < argc; i++) {
    char *end = NULL;
    if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      errno = 0;
      w.count = strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end || errno == ERANGE || w.count == 0 ||
          argv[i][0] == '-') {
        fprintf(stderr,
                "wt-ctl: watch --count: '%s' is not a positive "
                "number\n",
                argv[i]);
        return EXIT_USAGE;
      }
    } else {
      fprintf(stderr, "wt-ctl: watch: unexpected argument '%s'\n", argv[i]);
      return EXIT_USAGE;
    }
  }
  wt_status *st =
      wt_sync_client_watch(c, 0, WT_RPC_NO_DEADLINE, on_version, &w);
  if (st) return fail(st);
  return 0;
}

static int cmd_checksum(wt_sync_client *c, int argc, char **argv) {
  wt_hash_alg alg = WT_HASH_SHA256;
  bool all_workers = false;
  const char **names = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*names));
  size_t nnames = 0;
  wt_param_checksum *sums = NULL;
  size_t n = 0;
  int rc = 0;
  if (names == NULL) return fail(wt_status_new(WT_RESOURCE_EXHAUSTED, "oom"));
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--algo") == 0 && i + 1 < argc) {
      wt_status *st = wt_hash_alg_parse(argv[++i], &alg);
      if (st) {
        fprintf(stderr, "wt-ctl: checksum --algo: %s\n", wt_status_message(st));
        wt_status_free(st);
        rc = EXIT_USAGE;
        goto out;
      }
    } else if (strcmp(argv[i], "--all-workers") == 0) {
      all_workers = true;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "wt-ctl: checksum: unknown option '%s'\n", argv[i]);
      rc = EXIT_USAGE;
      goto out;
    } else {
      names[nnames++] = argv[i];
    }
  }
  wt_status *st = wt_sync_client_checksums(c, 0, names, nnames, alg,
                                           all_workers, &sums, &n);
  if (st) {
    rc = fail(st);
    goto out;
  }
  /* sha256sum's layout, so that the output diffs against a local run. */
  for (size_t i = 0; i < n; i++) {
    if (all_workers)
      printf("%s  %s  worker %u\n", sums[i].digest, sums[i].name,
             (unsigned)sums[i].worker);
    else
      printf("%s  %s\n", sums[i].digest, sums[i].name);
  }
out:
  wt_param_checksums_free(sums, n);
  free(names);
  return rc;
}

typedef struct command {
  const char *name;
  int max_args;
  int (*run)(wt_sync_client *c, int argc, char **argv);
} command;

static const command commands[] = {
    {"info", 0, cmd_info},
    {"params", 1, cmd_params},
    {"version", 0, cmd_version},
    {"watch", 2, cmd_watch},
    {"checksum", 1 << 20, cmd_checksum},
    {"top", 4, wt_ctl_top},
};

int main(int argc, char **argv) {
  wt_tool_log_level();
  const char *server = "127.0.0.1:50051";
  double timeout_s = 0;
  wt_tool_security sec = {0};
  const char *adapter = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *eq = strchr(argv[i], '=');
    char name[32] = "";
    if (strncmp(argv[i], "--", 2) == 0) {
      size_t len = eq ? (size_t)(eq - argv[i] - 2) : strlen(argv[i] + 2);
      if (len < sizeof(name)) memcpy(name, argv[i] + 2, len), name[len] = 0;
    }
    if (eq != NULL && wt_tool_security_option(&sec, name, eq + 1)) continue;
    if (eq == NULL && i + 1 < argc &&
        wt_tool_security_option(&sec, name, argv[i + 1])) {
      i++;
      continue;
    }
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--server") == 0 && i + 1 < argc) {
      server = argv[++i];
    } else if (strncmp(argv[i], "--server=", 9) == 0) {
      server = argv[i] + 9;
    } else if (strcmp(argv[i], "--adapter") == 0 && i + 1 < argc) {
      adapter = argv[++i];
    } else if (strncmp(argv[i], "--adapter=", 10) == 0) {
      adapter = argv[i] + 10;
    } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
      char *end = NULL;
      timeout_s = strtod(argv[++i], &end);
      /* The bounds keep the milliseconds an int64_t and at least 1 (0
       * would mean the default). */
      if (end == argv[i] || *end || !isfinite(timeout_s) || timeout_s < 0.001 ||
          timeout_s > MAX_TIMEOUT_S) {
        fprintf(stderr,
                "wt-ctl: --timeout: '%s' is not a number of seconds from "
                "0.001 to %d\n",
                argv[i], MAX_TIMEOUT_S);
        return EXIT_USAGE;
      }
    } else {
      fprintf(stderr, "wt-ctl: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  if (i == argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[i++];
  int nargs = argc - i;
  char **args = argv + i;
  /* The export's socket, not the gRPC port: no client. */
  if (strcmp(name, "export-info") == 0) {
    const char *path = NULL;
    uint32_t worker = 0;
    for (int k = 0; k < nargs; k++) {
      if (strcmp(args[k], "--worker") == 0 && k + 1 < nargs) {
        char *end = NULL;
        unsigned long w = strtoul(args[++k], &end, 10);
        if (end == args[k] || *end != '\0' || w > UINT32_MAX) {
          fprintf(stderr,
                  "wt-ctl: export-info: --worker '%s' is not a worker "
                  "index\n",
                  args[k]);
          return EXIT_USAGE;
        }
        worker = (uint32_t)w;
      } else if (strcmp(args[k], "--export") == 0 && k + 1 < nargs &&
                 path == NULL) {
        path = args[++k];
      } else if (args[k][0] != '-' && path == NULL) {
        path = args[k];
      } else {
        path = NULL;
        break;
      }
    }
    if (path == NULL) {
      fprintf(stderr,
              "wt-ctl: export-info: usage: export-info [--export] "
              "PATH [--worker W]\n");
      return EXIT_USAGE;
    }
    return wt_ctl_export_info(path, worker);
  }
  const command *cmd = NULL;
  for (size_t j = 0; j < sizeof(commands) / sizeof(commands[0]); j++)
    if (strcmp(name, commands[j].name) == 0) cmd = &commands[j];
  if (cmd == NULL) {
    fprintf(stderr,
            "wt-ctl: unknown command '%s' (info, params, version, "
            "watch, checksum, top, export-info)\n",
            name);
    return EXIT_USAGE;
  }
  if (nargs > cmd->max_args) {
    fprintf(stderr, "wt-ctl: %s: unexpected argument '%s'\n", name,
            args[cmd->max_args]);
    return EXIT_USAGE;
  }

  if (adapter != NULL) {
    wt_status *bad = wt_adapter_name_check(adapter, "--adapter");
    if (bad != NULL) {
      fprintf(stderr, "wt-ctl: %s\n", wt_status_message(bad));
      wt_status_free(bad);
      return EXIT_USAGE;
    }
  }
  wt_client_options opts = {.adapter = adapter};
  wt_tool_security_apply(&sec, &opts);
  if (timeout_s > 0)
    opts.timeout_ms = opts.data_timeout_ms = (int64_t)(timeout_s * 1000);
  wt_sync_client *c = NULL;
  const char *targets[] = {server};
  wt_status *st = wt_sync_client_new(targets, 1, &opts, &c);
  if (st) return fail(st);
  int rc = cmd->run(c, nargs, args);
  wt_sync_client_destroy(c);
  return rc;
}
