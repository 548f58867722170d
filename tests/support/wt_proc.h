/* wt_proc.h: real processes for the end-to-end suites (e2e, interop_python).
 *
 * Starts wt-server on an ephemeral port and reads the port from its
 * "wt-server listening on HOST:PORT" line, runs tools with a timeout, and
 * keeps a list of every child it started so that a test's teardown can kill
 * what an assertion left running (wt_proc_kill_all). Children also get
 * PR_SET_PDEATHSIG, so they die with the test process if it crashes.
 */
#ifndef WT_PROC_H
#define WT_PROC_H

#include "wt/clock.h"
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* A running wt-server. */
typedef struct wt_proc_server {
  pid_t pid;          /* 0 when not running */
  int out_fd;         /* read end of its stdout, -1 when closed */
  char addr[64];      /* "127.0.0.1:PORT" once serving */
  char log[PATH_MAX]; /* its stderr */
} wt_proc_server;

/* Starts argv[0] (argv NULL-terminated) with stdin from /dev/null, stderr
 * to the file `log` (truncated), and stdout to a pipe whose read end goes to
 * *out_fd when out_fd is not NULL, else to `log` too. The child is
 * registered for wt_proc_kill_all. Returns its pid, or -1 (errno set). */
pid_t wt_proc_spawn(const char *const argv[], const char *log, int *out_fd);

/* Waits up to timeout_ms for `pid` to exit. True, with the raw wait status in
 * *status, when it did (it is then unregistered); false on timeout. */
bool wt_proc_wait(pid_t pid, int64_t timeout_ms, int *status);

/* Runs argv to completion with stdout and stderr into `log`. Returns the exit
 * code, or -1 when it was killed by a signal or ran past timeout_ms (it is
 * then killed). *output, when not NULL, receives the log's contents (malloc'd,
 * NUL-terminated; the caller frees it). */
int wt_proc_run(const char *const argv[], const char *log, int64_t timeout_ms,
                char **output);

/* Starts wt-server (WT_SERVER_BIN) with `--listen 127.0.0.1:0` followed by
 * extra[] (NULL-terminated, may be NULL), logs to DIR/TAG.log, and waits up
 * to 60 s for its listening line. False (after printing its log) when it
 * exited or never said it was serving. It runs with --no-auth unless
 * extra[] has --token-file, or "--auth" (not passed on: the server's
 * default, generated tokens). */
bool wt_proc_server_start(wt_proc_server *s, const char *dir, const char *tag,
                          const char *const extra[]);
/* The same with another wt-server binary (an installed one). */
bool wt_proc_server_start_bin(wt_proc_server *s, const char *bin,
                              const char *dir, const char *tag,
                              const char *const extra[]);

/* Sends SIGTERM and waits up to timeout_ms. Returns the exit code, or -1
 * when it died of a signal or had to be killed (its log is then printed).
 * *elapsed_ms (may be NULL) receives how long it took to exit. */
int wt_proc_server_stop(wt_proc_server *s, int64_t timeout_ms,
                        int64_t *elapsed_ms);

/* True when the server is still running; otherwise prints how it ended and
 * its log (for a failure's diagnosis), without reaping it. */
bool wt_proc_server_alive(const wt_proc_server *s);

/* SIGKILLs and reaps every registered child still running, and closes the
 * servers' pipes it knows of. For a suite's test teardown. */
void wt_proc_kill_all(void);

/* The whole file as a malloc'd NUL-terminated string (NULL if unreadable). */
char *wt_proc_read_file(const char *path);

/* Prints the last 6 KiB of a child's log to stderr, with a title. */
void wt_proc_dump(const char *title, const char *path);

/* Polls `path` every 5 ms until it contains `needle`, up to timeout_ms, or
 * until `pid` (when > 0) exited. True when the text appeared. */
bool wt_proc_wait_for_text(const char *path, const char *needle, pid_t pid,
                           int64_t timeout_ms);

#endif /* WT_PROC_H */
