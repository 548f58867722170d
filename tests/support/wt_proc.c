/* wt_proc.c: the process harness of the end-to-end suites (see wt_proc.h). */
#include "support/wt_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRACKED 16
#define LISTEN_PREFIX "wt-server listening on "

/* Children and server pipes still open: what a teardown must clean up. Test
 * code runs on one thread, so no lock. */
static pid_t g_pids[MAX_TRACKED];
static int g_fds[MAX_TRACKED];
static bool g_fds_init;

static void fds_init(void) {
  if (g_fds_init) return;
  for (int i = 0; i < MAX_TRACKED; i++) g_fds[i] = -1;
  g_fds_init = true;
}

static void track(pid_t *slots, pid_t v) {
  for (int i = 0; i < MAX_TRACKED; i++)
    if (slots[i] == 0) {
      slots[i] = v;
      return;
    }
  fprintf(stderr, "wt_proc: more than %d children alive\n", MAX_TRACKED);
}

static void untrack(pid_t *slots, pid_t v) {
  for (int i = 0; i < MAX_TRACKED; i++)
    if (slots[i] == v) slots[i] = 0;
}

static void track_fd(int fd) {
  fds_init();
  for (int i = 0; i < MAX_TRACKED; i++)
    if (g_fds[i] < 0) {
      g_fds[i] = fd;
      return;
    }
}

static void close_fd(int fd) {
  fds_init();
  if (fd < 0) return;
  for (int i = 0; i < MAX_TRACKED; i++)
    if (g_fds[i] == fd) g_fds[i] = -1;
  close(fd);
}

pid_t wt_proc_spawn(const char *const argv[], const char *log, int *out_fd) {
  int pfd[2] = {-1, -1};
  int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int nfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (lfd < 0 || nfd < 0 || (out_fd && pipe2(pfd, O_CLOEXEC) != 0)) {
    int err = errno;
    if (lfd >= 0) close(lfd);
    if (nfd >= 0) close(nfd);
    errno = err;
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* Only async-signal-safe calls until exec: the test process has gRPC
     * threads. The signal mask and ignored signals survive exec, so reset
     * them: the child must see SIGTERM and SIGPIPE as a shell would give
     * them. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGPIPE, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Dies with the test process; if that already happened, do not run. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
      _exit(127);
    dup2(nfd, STDIN_FILENO);
    dup2(out_fd ? pfd[1] : lfd, STDOUT_FILENO);
    dup2(lfd, STDERR_FILENO);
    /* Nothing else of the test process: UCX opens its sockets without
     * O_CLOEXEC, so a trainer's UCX listener in this process would
     * otherwise live on in the child and count as one of its ports. */
    if (close_range(3, ~0U, 0) != 0)
      for (int fd = 3; fd < 65536; fd++) close(fd);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  int err = errno;
  close(lfd);
  close(nfd);
  if (out_fd) close(pfd[1]);
  if (pid < 0) {
    if (out_fd) close(pfd[0]);
    errno = err;
    return -1;
  }
  track(g_pids, pid);
  if (out_fd) {
    *out_fd = pfd[0];
    track_fd(pfd[0]);
  }
  return pid;
}

bool wt_proc_wait(pid_t pid, int64_t timeout_ms, int *status) {
  int64_t end = wt_mono_ms() + timeout_ms;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) {
      if (r < 0) *status = -1;
      untrack(g_pids, pid);
      return true;
    }
    if (wt_mono_ms() >= end) return false;
    usleep(5000);
  }
}

static int exit_code(int status) {
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int wt_proc_run(const char *const argv[], const char *log, int64_t timeout_ms,
                char **output) {
  if (output) *output = NULL;
  pid_t pid = wt_proc_spawn(argv, log, NULL);
  if (pid < 0) {
    fprintf(stderr, "wt_proc: cannot start %s: %s\n", argv[0], strerror(errno));
    return -1;
  }
  int status = -1;
  if (!wt_proc_wait(pid, timeout_ms, &status)) {
    fprintf(stderr, "wt_proc: %s ran past %lld ms; killed\n", argv[0],
            (long long)timeout_ms);
    kill(pid, SIGKILL);
    wt_proc_wait(pid, 10000, &status);
    status = -1;
  }
  if (output) *output = wt_proc_read_file(log);
  int code = exit_code(status);
  if (code != 0) {
    if (status != -1 && WIFSIGNALED(status))
      fprintf(stderr, "wt_proc: %s died of signal %d\n", argv[0],
              WTERMSIG(status));
  }
  return code;
}

bool wt_proc_server_start(wt_proc_server *s, const char *dir, const char *tag,
                          const char *const extra[]) {
  return wt_proc_server_start_bin(s, WT_SERVER_BIN, dir, tag, extra);
}

bool wt_proc_server_start_bin(wt_proc_server *s, const char *bin,
                              const char *dir, const char *tag,
                              const char *const extra[]) {
  const char *argv[32] = {bin, "--listen", "127.0.0.1:0"};
  size_t n = 3;
  bool auth = false;
  for (size_t i = 0; extra && extra[i]; i++)
    if (strcmp(extra[i], "--token-file") == 0 ||
        strcmp(extra[i], "--auth") == 0)
      auth = true;
  /* Tests that are not about who may call run servers open; the trust
   * suite runs the default (generated tokens) on purpose ("--auth"). */
  if (!auth) argv[n++] = "--no-auth";
  for (size_t i = 0; extra && extra[i] && n + 1 < 32; i++)
    if (strcmp(extra[i], "--auth") != 0) argv[n++] = extra[i];
  argv[n] = NULL;
  memset(s, 0, sizeof(*s));
  s->out_fd = -1;
  snprintf(s->log, sizeof(s->log), "%s/%s.log", dir, tag);
  s->pid = wt_proc_spawn(argv, s->log, &s->out_fd);
  if (s->pid < 0) {
    fprintf(stderr, "wt_proc: cannot start %s: %s\n", argv[0], strerror(errno));
    s->pid = 0;
    return false;
  }
  /* Read stdout until the listening line; it is the only line the server
   * prints there, so a line-less EOF means it died. */
  char buf[1024];
  size_t len = 0;
  int64_t end = wt_mono_ms() + 60000;
  while (wt_mono_ms() < end && len + 1 < sizeof(buf)) {
    struct pollfd p = {.fd = s->out_fd, .events = POLLIN};
    int r = poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    ssize_t got = read(s->out_fd, buf + len, sizeof(buf) - 1 - len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    len += (size_t)got;
    buf[len] = '\0';
    char *line = strstr(buf, LISTEN_PREFIX);
    char *nl = line ? strchr(line, '\n') : NULL;
    if (nl) {
      line += strlen(LISTEN_PREFIX);
      size_t alen = (size_t)(nl - line);
      if (alen > 0 && alen < sizeof(s->addr)) {
        memcpy(s->addr, line, alen);
        s->addr[alen] = '\0';
        return true;
      }
      break;
    }
  }
  buf[len] = '\0';
  fprintf(stderr, "\n  wt-server (%s) did not report its port; stdout: '%s'\n",
          tag, buf);
  wt_proc_dump("wt-server log", s->log);
  kill(s->pid, SIGKILL);
  int status;
  wt_proc_wait(s->pid, 10000, &status);
  s->pid = 0;
  close_fd(s->out_fd);
  s->out_fd = -1;
  return false;
}

int wt_proc_server_stop(wt_proc_server *s, int64_t timeout_ms,
                        int64_t *elapsed_ms) {
  if (s->pid <= 0) return -1;
  int64_t t0 = wt_mono_ms();
  int status = -1;
  kill(s->pid, SIGTERM);
  bool exited = wt_proc_wait(s->pid, timeout_ms, &status);
  if (elapsed_ms) *elapsed_ms = wt_mono_ms() - t0;
  if (!exited) {
    fprintf(stderr, "\n  wt-server %s still running %lld ms after SIGTERM\n",
            s->addr, (long long)timeout_ms);
    kill(s->pid, SIGKILL);
    wt_proc_wait(s->pid, 10000, &status);
    status = -1;
  }
  s->pid = 0;
  close_fd(s->out_fd);
  s->out_fd = -1;
  int code = exit_code(status);
  if (code != 0) {
    if (status != -1 && WIFSIGNALED(status))
      fprintf(stderr, "\n  wt-server %s died of signal %d\n", s->addr,
              WTERMSIG(status));
    else if (code > 0)
      fprintf(stderr, "\n  wt-server %s exited with status %d\n", s->addr,
              code);
    wt_proc_dump("wt-server log", s->log);
  }
  return code;
}

bool wt_proc_server_alive(const wt_proc_server *s) {
  if (s->pid <= 0) return false;
  siginfo_t info = {0};
  if (waitid(P_PID, (id_t)s->pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != s->pid)
    return true;
  if (info.si_code == CLD_EXITED)
    fprintf(stderr, "\n  wt-server %s exited with status %d\n", s->addr,
            info.si_status);
  else
    fprintf(stderr, "\n  wt-server %s died of signal %d\n", s->addr,
            info.si_status);
  wt_proc_dump("wt-server log", s->log);
  return false;
}

void wt_proc_kill_all(void) {
  fds_init();
  for (int i = 0; i < MAX_TRACKED; i++) {
    pid_t pid = g_pids[i];
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    int status;
    wt_proc_wait(pid, 10000, &status);
    g_pids[i] = 0;
  }
  for (int i = 0; i < MAX_TRACKED; i++)
    if (g_fds[i] >= 0) close_fd(g_fds[i]);
}

char *wt_proc_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) break;
    if (cap - len - 1 == 0) {
      char *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

void wt_proc_dump(const char *title, const char *path) {
  char *text = wt_proc_read_file(path);
  if (!text) return;
  size_t len = strlen(text);
  const char *from = len > 6144 ? text + len - 6144 : text;
  fprintf(stderr, "\n----- %s (%s) -----\n%s\n----- end -----\n", title, path,
          from);
  free(text);
}

bool wt_proc_wait_for_text(const char *path, const char *needle, pid_t pid,
                           int64_t timeout_ms) {
  int64_t end = wt_mono_ms() + timeout_ms;
  for (;;) {
    char *text = wt_proc_read_file(path);
    bool found = text && strstr(text, needle) != NULL;
    free(text);
    if (found) return true;
    if (pid > 0) {
      siginfo_t info = {0};
      if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid)
        return false;
    }
    if (wt_mono_ms() >= end) return false;
    usleep(5000);
  }
}
