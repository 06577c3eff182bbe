/*
 * listen_fds.c - the receiving side of systemd's socket activation (sd_listen_fds(3)), with no
 * libsystemd: see listen_fds.h.
 */
#include "listen_fds.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void unset_listen_env(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* A decimal number in [min, max], nothing else; -1 otherwise. */
static long parse_count(const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    return v;
}

int nd_listen_fds(int *fds, int max, nd_error *err)
{
    const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
    int n = 0;
    if (!pid_s || !fds_s)
        goto done;
    long pid = parse_count(pid_s, 1, INT32_MAX);
    if (pid < 0) {
        nd_error_set(err, ND_EINVAL, "LISTEN_PID=\"%s\" is not a process id", pid_s);
        n = -1;
        goto done;
    }
    if ((pid_t)pid != getpid()) /* inherited from a parent that was activated, not for us */
        goto done;
    long count = parse_count(fds_s, 0, INT32_MAX - ND_LISTEN_FDS_START);
    if (count < 0) {
        nd_error_set(err, ND_EINVAL, "LISTEN_FDS=\"%s\" is not a count of sockets", fds_s);
        n = -1;
        goto done;
    }
    if (count > max) {
        nd_error_set(err, ND_EINVAL, "LISTEN_FDS=%ld: normd serves at most %d passed sockets",
                     count, max);
        n = -1;
        goto done;
    }
    for (int fd = ND_LISTEN_FDS_START; fd < ND_LISTEN_FDS_START + count; fd++) {
        int type = 0, listening = 0;
        socklen_t len = sizeof type, len2 = sizeof listening;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len2) < 0 ||
            type != SOCK_STREAM || !listening) {
            nd_error_set(err, ND_EINVAL,
                         "passed descriptor %d is not a listening stream socket (the socket "
                         "unit needs ListenStream=, and Accept=no)", fd);
            n = -1;
            goto done;
        }
        int flags = fcntl(fd, F_GETFD);
        if (flags >= 0)
            fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
        fds[n++] = fd;
    }
done:
    unset_listen_env();
    return n;
}

int nd_socket_ipv6(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    return getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET6;
}

int nd_socket_local(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return 0;
    if (ss.ss_family == AF_UNIX)
        return 1;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}
