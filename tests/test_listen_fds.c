/*
 * test_listen_fds.c - the receiving side of systemd's socket activation: sockets at descriptors
 * 3, 4, ... are taken only when LISTEN_PID is this process, the variables are always removed,
 * and what is not a listening stream socket is refused.
 *
 * Each case runs in a child process of its own, because it must own descriptors 3 and up, which
 * the test runner may be using; the child's exit status is the number of the first check that
 * failed (0: all passed).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../server/listen_fds.h"

/* A listening socket on 127.0.0.1 (or any address when !loopback), any free port. */
static int tcp_listener(int loopback)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY)};
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 8) < 0)
        return -1;
    return fd;
}

/* A listening UNIX socket in the abstract namespace (no file to clean up). */
static int unix_listener(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "normd-test-%d", (int)getpid());
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 8) < 0)
        return -1;
    return fd;
}

/* Moves fd to exactly want (as a service manager would have placed it). */
static int place(int fd, int want)
{
    if (fd < 0)
        return -1;
    int high = fcntl(fd, F_DUPFD, 64); /* off the low numbers first: fd may itself be want+1 */
    close(fd);
    if (high < 0 || dup2(high, want) != want)
        return -1;
    close(high);
    return want;
}

static void set_env(const char *pid, const char *count)
{
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    setenv("LISTEN_PID", pid ? pid : self, 1);
    setenv("LISTEN_FDS", count, 1);
    setenv("LISTEN_FDNAMES", "a:b", 1);
}

static int env_cleared(void)
{
    return !getenv("LISTEN_PID") && !getenv("LISTEN_FDS") && !getenv("LISTEN_FDNAMES");
}

/* Runs body in a child process and returns its exit status (or 100 + signal). */
static int in_child(int (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(body());
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static int two_sockets(void)
{
    if (place(tcp_listener(1), 3) != 3 || place(unix_listener(), 4) != 4)
        return 1;
    set_env(NULL, "2");
    int fds[ND_LISTEN_FDS_MAX];
    nd_error err = {{0}};
    if (nd_listen_fds(fds, ND_LISTEN_FDS_MAX, &err) != 2)
        return 2;
    if (fds[0] != 3 || fds[1] != 4)
        return 3;
    if (!(fcntl(3, F_GETFD) & FD_CLOEXEC) || !(fcntl(4, F_GETFD) & FD_CLOEXEC))
        return 4;
    if (!env_cleared())
        return 5;
    if (!nd_socket_local(3) || !nd_socket_local(4) || nd_socket_ipv6(3) || nd_socket_ipv6(4))
        return 6;
    /* Taken once: the variables are gone, so a second call finds nothing. */
    if (nd_listen_fds(fds, ND_LISTEN_FDS_MAX, &err) != 0)
        return 7;
    return 0;
}

Test(listen_fds, sockets_for_this_process_are_taken_and_the_variables_removed)
{
    int rc = in_child(two_sockets);
    cr_assert_eq(rc, 0, "check %d failed", rc);
}

static int other_pid(void)
{
    if (place(tcp_listener(1), 3) != 3)
        return 1;
    char parent[32];
    snprintf(parent, sizeof parent, "%d", (int)getppid());
    set_env(parent, "1");
    int fds[ND_LISTEN_FDS_MAX];
    nd_error err = {{0}};
    if (nd_listen_fds(fds, ND_LISTEN_FDS_MAX, &err) != 0)
        return 2;
    if (!env_cleared())
        return 3;
    if (fcntl(3, F_GETFD) & FD_CLOEXEC) /* not ours: left alone */
        return 4;
    return 0;
}

Test(listen_fds, variables_meant_for_another_process_are_ignored)
{
    int rc = in_child(other_pid);
    cr_assert_eq(rc, 0, "check %d failed", rc);
}

static int none(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    int fds[ND_LISTEN_FDS_MAX];
    return nd_listen_fds(fds, ND_LISTEN_FDS_MAX, NULL) == 0 ? 0 : 1;
}

Test(listen_fds, no_variables_means_no_sockets)
{
    cr_assert_eq(in_child(none), 0);
}

static int not_listening(void)
{
    if (place(socket(AF_INET, SOCK_STREAM, 0), 3) != 3) /* a socket, but not listening */
        return 1;
    set_env(NULL, "1");
    int fds[ND_LISTEN_FDS_MAX];
    nd_error err = {{0}};
    if (nd_listen_fds(fds, ND_LISTEN_FDS_MAX, &err) != -1)
        return 2;
    if (!strstr(err.msg, "descriptor 3") || !env_cleared())
        return 3;
    int p[2];
    if (pipe(p) < 0 || place(p[0], 3) != 3) /* not a socket at all */
        return 4;
    set_env(NULL, "1");
    return nd_listen_fds(fds, ND_LISTEN_FDS_MAX, &err) == -1 ? 0 : 5;
}

Test(listen_fds, what_is_not_a_listening_stream_socket_is_refused)
{
    int rc = in_child(not_listening);
    cr_assert_eq(rc, 0, "check %d failed", rc);
}

static int bad_values(void)
{
    int fds[2];
    nd_error err = {{0}};
    set_env(NULL, "two");
    if (nd_listen_fds(fds, 2, &err) != -1 || !strstr(err.msg, "LISTEN_FDS"))
        return 1;
    set_env("self", "1");
    if (nd_listen_fds(fds, 2, &err) != -1 || !strstr(err.msg, "LISTEN_PID"))
        return 2;
    set_env(NULL, "3"); /* more than the caller can serve */
    if (nd_listen_fds(fds, 2, &err) != -1 || !env_cleared())
        return 3;
    return 0;
}

Test(listen_fds, malformed_variables_and_too_many_sockets_are_refused)
{
    int rc = in_child(bad_values);
    cr_assert_eq(rc, 0, "check %d failed", rc);
}

Test(listen_fds, a_socket_on_every_address_is_not_local)
{
    int fd = tcp_listener(0);
    cr_assert_geq(fd, 0);
    cr_assert_not(nd_socket_local(fd));
    close(fd);
}
