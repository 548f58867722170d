/* top.c: wt-ctl top [--interval SEC] [--count N], a live view of one
 * server: the version, the round in progress with its bytes and rate per
 * worker, the last rounds with durations and outcomes, the admission
 * classes. Everything comes from GetServerInfo, asked every interval.
 *
 * On a terminal it redraws the screen (ANSI: home, clear) until `q`, Ctrl-C
 * or N frames, with the terminal put back as it was in every case. When
 * stdout is not a terminal it prints N frames (default 1) as plain text,
 * a blank line between them, and reads nothing. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "wt/client.h"
#include "wt/clock.h"
#include "wt/pb.h"

#include "tool_format.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define MAX_WORKERS_SHOWN 64

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

/* What the last frame saw, for rates. */
typedef struct top_prev {
  int64_t at_ms;
  size_t n;
  uint64_t bytes[MAX_WORKERS_SHOWN];
} top_prev;

static const char *clock_of(int64_t unix_ms, char *buf, size_t len) {
  time_t s = (time_t)(unix_ms / 1000);
  struct tm tm;
  if (unix_ms <= 0 || gmtime_r(&s, &tm) == NULL) return "-";
  strftime(buf, len, "%H:%M:%S", &tm);
  return buf;
}

static void frame(FILE *f, const char *target, const Wt__V1__ServerInfo *in,
                  top_prev *prev, bool tty) {
  char b1[32], b2[32], t[32];
  int64_t now_ms = wt_unix_ms(), mono = wt_mono_ms();
  const char *eol = tty ? "\033[K\n" : "\n";
  fprintf(f, "wt-ctl top: %s (wt %s), %s UTC%s%s", target, in->server_version,
          clock_of(now_ms, t, sizeof(t)), tty ? "   q: quit" : "", eol);
  if (in->model)
    fprintf(f, "model %s: %" PRIu64 " parameters, %s; staging %s; auth %s%s",
            in->model->name, in->model->num_parameters,
            wt_tool_human_bytes(in->model->total_bytes, b1, sizeof(b1)),
            in->staging, in->auth, eol);
  fprintf(f, "version %s; state %s%s",
          in->weight_version && *in->weight_version ? in->weight_version
                                                    : "(none committed)",
          in->state, eol);
  uint64_t model_bytes = in->model ? in->model->total_bytes : 0;
  if (in->round_started_unix_ms > 0) {
    uint64_t sum = 0;
    for (size_t i = 0; i < in->n_workers; i++)
      sum += in->workers[i]->round_bytes_received;
    uint64_t want = model_bytes * (in->n_workers ? in->n_workers : 1);
    fprintf(f, "round in progress: %.1f s, %s received",
            (double)(now_ms - in->round_started_unix_ms) / 1000.0,
            wt_tool_human_bytes(sum, b1, sizeof(b1)));
    if (want > 0)
      fprintf(f, " (%.1f%% of %s)", 100.0 * (double)sum / (double)want,
              wt_tool_human_bytes(want, b2, sizeof(b2)));
    fputs(eol, f);
  } else {
    fprintf(f, "no round in progress%s", eol);
  }
  fprintf(f, "%s  worker device   backend  state        this round   rate%s",
          eol, eol);
  double dt = prev->at_ms ? (double)(mono - prev->at_ms) / 1000.0 : 0;
  for (size_t i = 0; i < in->n_workers && i < MAX_WORKERS_SHOWN; i++) {
    const Wt__V1__WorkerInfo *w = in->workers[i];
    char rate[40] = "-";
    if (dt > 0 && prev->n == in->n_workers &&
        w->bytes_received >= prev->bytes[i]) {
      double r = (double)(w->bytes_received - prev->bytes[i]) / dt;
      wt_tool_human_bytes((uint64_t)r, b2, sizeof(b2));
      snprintf(rate, sizeof(rate), "%s/s", b2);
    }
    fprintf(f, "  %-6u %-8s %-8s %-12s %-12s %s%s", (unsigned)w->rank,
            w->device, *w->backend ? w->backend : "-", w->state,
            in->round_started_unix_ms > 0
                ? wt_tool_human_bytes(w->round_bytes_received, b1, sizeof(b1))
                : "-",
            rate, eol);
    prev->bytes[i] = w->bytes_received;
  }
  prev->n =
      in->n_workers < MAX_WORKERS_SHOWN ? in->n_workers : MAX_WORKERS_SHOWN;
  prev->at_ms = mono;
  fprintf(f, "%slast rounds (newest first):%s", eol, eol);
  if (in->n_recent_rounds == 0)
    fprintf(f, "  (none yet)%s", eol);
  else
    fprintf(f, "  %-6s %-10s %-24s %-9s %-11s %s%s", "seq", "outcome",
            "version or cause", "took", "bytes", "ended", eol);
  for (size_t i = 0; i < in->n_recent_rounds && i < 10; i++) {
    const Wt__V1__RoundRecord *r = in->recent_rounds[i];
    char seq[24] = "-", took[24];
    if (strcmp(r->outcome, "committed") == 0)
      snprintf(seq, sizeof(seq), "%" PRIu64, r->sequence);
    snprintf(took, sizeof(took), "%.3f s",
             (double)(r->ended_unix_ms - r->started_unix_ms) / 1000.0);
    char what[64];
    snprintf(what, sizeof(what), "%.60s",
             strcmp(r->outcome, "committed") == 0 ? r->version : r->cause);
    fprintf(f, "  %-6s %-10s %-24s %-9s %-11s %s%s", seq, r->outcome, what,
            took, wt_tool_human_bytes(r->bytes_received, b1, sizeof(b1)),
            clock_of(r->ended_unix_ms, t, sizeof(t)), eol);
  }
  fprintf(f, "%s  %-12s %-8s %-8s %s%s", eol, "admission", "running", "waiting",
          "refused since start", eol);
  for (size_t i = 0; i < in->n_admission; i++)
    fprintf(f, "  %-12s %-8u %-8u %" PRIu64 "%s", in->admission[i]->name,
            (unsigned)in->admission[i]->running,
            (unsigned)in->admission[i]->queued, in->admission[i]->refused, eol);
  if (tty) fputs("\033[J", f); /* clear what an older, longer frame left */
  fflush(f);
}

/* Sleeps up to ms, returning early (true) on `q` or a signal. */
static bool wait_key(bool tty, int64_t ms) {
  int64_t end = wt_mono_ms() + ms;
  while (!g_stop) {
    int64_t left = end - wt_mono_ms();
    if (left <= 0) return false;
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int r = poll(&p, tty ? 1 : 0, (int)left);
    if (r > 0 && (p.revents & POLLIN)) {
      char c = 0;
      ssize_t n = read(STDIN_FILENO, &c, 1);
      if (n == 1 && (c == 'q' || c == 'Q' || c == 3 /* ^C in raw mode */))
        return true;
      if (n == 0) return false; /* stdin closed: go on until the count */
    } else if (r < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

int wt_ctl_top(wt_sync_client *c, int argc, char **argv) {
  double interval = 1.0;
  long count = -1;
  for (int i = 0; i < argc; i++) {
    char *end = NULL;
    if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
      interval = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !isfinite(interval) || interval < 0.05 ||
          interval > 3600) {
        fprintf(stderr,
                "wt-ctl: top: --interval '%s' is not a number of "
                "seconds from 0.05 to 3600\n",
                argv[i]);
        return EXIT_USAGE;
      }
    } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || count < 1) {
        fprintf(stderr,
                "wt-ctl: top: --count '%s' is not a positive "
                "number\n",
                argv[i]);
        return EXIT_USAGE;
      }
    } else {
      fprintf(stderr, "wt-ctl: top: usage: top [--interval SEC] [--count N]\n");
      return EXIT_USAGE;
    }
  }
  bool tty = isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
  if (!tty && count < 0) count = 1;
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  struct termios saved;
  bool raw = false;
  if (tty && tcgetattr(STDIN_FILENO, &saved) == 0) {
    struct termios t = saved;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    fputs("\033[?25l", stdout); /* no cursor while drawing */
  }
  int rc = 0;
  top_prev prev = {0};
  for (long k = 0; !g_stop && (count < 0 || k < count); k++) {
    Wt__V1__ServerInfo *info = NULL;
    wt_status *st = wt_sync_client_server_info(c, 0, &info);
    if (st == NULL) wt_tool_printable_pb(&info->base);
    if (tty) fputs("\033[H", stdout);
    if (st != NULL) {
      /* Said and retried on a terminal (the server may come back); the
       * end of plain output. */
      char *msg = strdup(wt_status_message(st));
      fprintf(tty ? stdout : stderr, "wt-ctl: top: %s%s\n",
              msg ? wt_tool_printable(msg) : "(out of memory)",
              tty ? "\033[K\033[J" : "");
      free(msg);
      fflush(stdout);
      wt_status_free(st);
      if (!tty) {
        rc = EXIT_FAIL;
        break;
      }
    } else {
      if (!tty && k > 0) fputc('\n', stdout);
      frame(stdout, wt_sync_client_target(c, 0), info, &prev, tty);
      wt_pb_free(&info->base);
    }
    if (count >= 0 && k + 1 >= count) break;
    if (wait_key(tty, (int64_t)(interval * 1000))) break;
  }
  if (tty) {
    fputs("\033[?25h\n", stdout);
    fflush(stdout);
  }
  if (raw) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  return rc;
}
