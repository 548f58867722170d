/* main.c: wt-server, the weight-transfer service as a process.
 *
 * Prints exactly one line on stdout once serving, "wt-server listening on
 * HOST:PORT", so that scripts and tests read the port from it (with
 * --listen HOST:0). Logs go to stderr. SIGINT/SIGTERM stop it cleanly
 * (exit 0); a bad option exits 2, a failed start 1.
 */

#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "wt/log.h"
#include "wt/parse.h"
#include "wt/rpc.h"
#include "wt/signals.h"
#include "wt/server.h"
#include "wt/synthetic.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: wt-server [options]\n"
          "\n"
          "Serves wt.v1.WeightTransfer: holds a model's parameters on one or\n"
          "more workers (host or GPU) and receives new weights from a\n"
          "trainer.\n"
          "\n"
          "options:\n"
          "  --listen HOST:PORT     address to serve on (default %s;\n"
          "                         port 0 picks a free port)\n"
          "  --model PATH           safetensors file or sharded\n"
          "                         *.safetensors.index.json\n"
          "  --model synthetic:NAME built-in layout with deterministic\n"
          "                         contents (default %s); NAME is one of:\n"
          "                        ",
          WT_SERVER_DEFAULT_LISTEN, WT_SERVER_DEFAULT_MODEL);
  for (const char *const *n = wt_synthetic_layout_names(); *n; n++)
    fprintf(f, " %s", *n);
  fprintf(
      f,
      "\n"
      "  --device LIST          cpu (default), or GPUs: cuda:0,cuda:1 (one\n"
      "                         worker per device, holding device memory)\n"
      "  --workers N            cpu workers, each holding the whole\n"
      "                         model (default 1)\n"
      "  --memory KIND          the cpu workers' memory: host (default),\n"
      "                         shared (a memfd another process can map)\n"
      "                         or pinned (page-locked; needs CUDA)\n"
      "  --staging MODE         shadow (a round writes spare buffers,\n"
      "                         finish swaps them in; default) or inplace\n"
      "                         (half the memory; the store is marked\n"
      "                         incomplete while a round writes)\n"
      "  --round-timeout SEC    abort a round idle longer than this\n"
      "                         between calls or chunks (default %u)\n"
      "  --header-timeout SEC   end a PushWeights stream that sends no\n"
      "                         header this long (default %u)\n"
      "  --max-round-calls N    round calls (init, start, update, push,\n"
      "                         finish, abort) served at once; never\n"
      "                         taken by readers (default %d)\n"
      "  --max-reader-calls N   reader calls (info, parameters, version,\n"
      "                         checksums) served at once; %d times as\n"
      "                         many wait (default %d)\n"
      "  --max-watchers N       open WatchWeightVersion streams; they\n"
      "                         hold no thread (default %d)\n"
      "  --ucx-transports LIST  UCX transports of the ucx backend's\n"
      "                         workers (UCX_TLS syntax, e.g. tcp or\n"
      "                         sm,self) when the init info's\n"
      "                         ucx.transports is empty; precedence:\n"
      "                         init info > this option (or\n"
      "                         $WT_UCX_TRANSPORTS) > $UCX_TLS > UCX's\n"
      "                         own choice\n"
      "  --tls-cert PATH        serve TLS with this certificate chain\n"
      "                         (PEM; with --tls-key)\n"
      "  --tls-key PATH         its private key\n"
      "  --tls-ca PATH          require client certificates signed by\n"
      "                         this CA (mutual TLS)\n"
      "  --token-file PATH      bearer tokens, lines \"trainer TOKEN\" or\n"
      "                         \"reader TOKEN\" (mode 600); every call\n"
      "                         must then carry one of its scope\n"
      "  --insecure             allow a non-loopback --listen without\n"
      "                         TLS (refused otherwise)\n"
      "  --log-level LEVEL      debug, info, warn, error or off\n"
      "                         (default: $WT_LOG, else info)\n"
      "  -h, --help             this text\n",
      WT_SERVER_DEFAULT_ROUND_TIMEOUT_MS / 1000,
      WT_SERVER_DEFAULT_HEADER_TIMEOUT_MS / 1000, WT_SERVER_DEFAULT_ROUND_CALLS,
      64, WT_SERVER_DEFAULT_READER_CALLS, WT_SERVER_DEFAULT_WATCHERS);
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

static int bad_option(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int bad_option(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "wt-server: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(try wt-server --help)\n");
  va_end(ap);
  return 2;
}

int main(int argc, char **argv) {
  wt_server_options opts = {0};
  static const struct option longopts[] = {
      {"listen", required_argument, NULL, 'l'},
      {"model", required_argument, NULL, 'm'},
      {"workers", required_argument, NULL, 'w'},
      {"staging", required_argument, NULL, 's'},
      {"round-timeout", required_argument, NULL, 't'},
      {"log-level", required_argument, NULL, 'v'},
      {"ucx-transports", required_argument, NULL, 'u'},
      {"device", required_argument, NULL, 'd'},
      {"memory", required_argument, NULL, 'M'},
      {"header-timeout", required_argument, NULL, 'H'},
      {"max-round-calls", required_argument, NULL, 'R'},
      {"max-reader-calls", required_argument, NULL, 'E'},
      {"max-watchers", required_argument, NULL, 'W'},
      {"tls-cert", required_argument, NULL, 'C'},
      {"tls-key", required_argument, NULL, 'K'},
      {"tls-ca", required_argument, NULL, 'A'},
      {"token-file", required_argument, NULL, 'T'},
      {"insecure", no_argument, NULL, 'I'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  /* Before any thread exists, so every thread inherits the mask. */
  wt_status *st = wt_signal_block_termination();
  if (st != NULL) {
    fprintf(stderr, "wt-server: %s\n", wt_status_message(st));
    wt_status_free(st);
    return 1;
  }
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
      case 'l':
        if (strrchr(optarg, ':') == NULL)
          return bad_option("%s '%s' is not HOST:PORT", "--listen", optarg);
        opts.listen = optarg;
        break;
      case 'C':
        opts.tls_cert = optarg;
        break;
      case 'K':
        opts.tls_key = optarg;
        break;
      case 'A':
        opts.tls_ca = optarg;
        break;
      case 'T':
        opts.token_file = optarg;
        break;
      case 'I':
        opts.insecure = true;
        break;
      case 'm':
        if (*optarg == '\0')
          return bad_option("%s '%s' is empty", "--model", optarg);
        opts.model = optarg;
        break;
      case 'w': {
        uint64_t v = 0;
        if (!wt_parse_u64(optarg, &v) || v < 1 || v > 1024)
          return bad_option("%s '%s' is not a number from 1 to 1024",
                            "--workers", optarg);
        opts.workers = (uint32_t)v;
        break;
      }
      case 's': {
        wt_status *e = wt_staging_parse(optarg, &opts.staging);
        if (e != NULL) {
          wt_status_free(e);
          return bad_option("%s '%s' is not shadow or inplace", "--staging",
                            optarg);
        }
        break;
      }
      case 't':
      case 'H': {
        const char *name = c == 't' ? "--round-timeout" : "--header-timeout";
        char *end = NULL;
        errno = 0;
        double v = strtod(optarg, &end);
        if (errno || end == optarg || *end != '\0' || !isfinite(v) ||
            v < 0.001 || v > 86400.0 * 30)
          return bad_option(
              "%s '%s' is not a number of seconds (0.001 to "
              "2592000)",
              name, optarg);
        uint32_t ms = (uint32_t)(v * 1000.0 + 0.5);
        if (c == 't')
          opts.round_timeout_ms = ms;
        else
          opts.header_timeout_ms = ms;
        break;
      }
      case 'R':
      case 'E':
      case 'W': {
        const char *name = c == 'R'   ? "--max-round-calls"
                           : c == 'E' ? "--max-reader-calls"
                                      : "--max-watchers";
        uint64_t max = c == 'W' ? 1000000 : 4096, v = 0;
        if (!wt_parse_u64(optarg, &v) || v < 1 || v > max)
          return bad_option("%s '%s' is not a number from 1 to %" PRIu64, name,
                            optarg, max);
        *(c == 'R'   ? &opts.max_round_calls
          : c == 'E' ? &opts.max_reader_calls
                     : &opts.max_watchers) = (int)v;
        break;
      }
      case 'd': {
        wt_device *list = NULL;
        size_t n = 0;
        wt_status *e = wt_device_list_parse(optarg, &list, &n);
        free(list);
        if (e != NULL) {
          int rc = bad_option("--device: %s", wt_status_message(e));
          wt_status_free(e);
          return rc;
        }
        opts.devices = optarg;
        break;
      }
      case 'M': {
        wt_status *e = wt_mem_kind_parse(optarg, &opts.memory);
        if (e == NULL && !wt_mem_kind_host_addressable(opts.memory))
          return bad_option(
              "--memory '%s': cpu workers hold host, shared or pinned memory; "
              "device memory comes with --device cuda:N",
              optarg);
        if (e != NULL) {
          wt_status_free(e);
          return bad_option("--memory '%s' is not host, shared or pinned",
                            optarg);
        }
        break;
      }
      case 'v': {
        wt_log_level level;
        if (wt_log_level_parse(optarg, &level) != 0)
          return bad_option("%s '%s' is not debug, info, warn, error or off",
                            "--log-level", optarg);
        wt_log_set_level(level);
        break;
      }
      case 'u':
        /* The ucx engine reads it when the init info names no transports;
         * the environment carries it because engines see no server
         * options, and no thread exists yet to race setenv. */
        if (*optarg == '\0')
          return bad_option("%s is empty", "--ucx-transports");
        if (setenv("WT_UCX_TRANSPORTS", optarg, 1) != 0)
          return bad_option("%s '%s': cannot set WT_UCX_TRANSPORTS",
                            "--ucx-transports", optarg);
        break;
      case 'h':
        usage(stdout);
        return 0;
      case ':':
        return bad_option("%s needs a value", argv[optind - 1]);
      default:
        return bad_option("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return bad_option("unexpected argument '%s'", argv[optind]);

  raise_fd_limit();
  wt_server *srv = NULL;
  st = wt_server_start(&opts, &srv);
  if (st != NULL) {
    fprintf(stderr, "wt-server: %s: %s\n", wt_code_name(wt_status_code(st)),
            wt_status_message(st));
    wt_status_free(st);
    return 1;
  }
  const char *listen = opts.listen ? opts.listen : WT_SERVER_DEFAULT_LISTEN;
  int hostlen = (int)(strrchr(listen, ':') - listen);
  printf("wt-server listening on %.*s:%d\n", hostlen, listen,
         wt_server_port(srv));
  fflush(stdout);

  int sig = wt_signal_wait(-1);
  WT_LOGI("server", "%s received; stopping",
          sig > 0 ? strsignal(sig) : "signal");
  wt_server_stop(srv);
  return 0;
}
