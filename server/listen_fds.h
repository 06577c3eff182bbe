/*
 * listen_fds.h - listening sockets passed by a service manager (systemd's socket activation).
 *
 * The protocol, as sd_listen_fds(3) documents it: the manager opens the sockets, places them at
 * file descriptors 3, 4, ... and sets LISTEN_FDS to their count and LISTEN_PID to the pid of the
 * process meant to take them (LISTEN_FDNAMES may name them). Written here rather than linked from
 * libsystemd: it is a few lines, and normd then runs the same on machines without systemd.
 */
#ifndef ND_LISTEN_FDS_H
#define ND_LISTEN_FDS_H

#include "../kernels/nd_ops.h"

/* The first descriptor a service manager passes (SD_LISTEN_FDS_START). */
#define ND_LISTEN_FDS_START 3
/* The most inherited sockets normd serves (one libmicrohttpd daemon each). */
#define ND_LISTEN_FDS_MAX 16

/*
 * Takes the listening sockets passed to this process: fills fds[0..n) with descriptors
 * ND_LISTEN_FDS_START.. (each set close-on-exec) and returns n. Returns 0 when none were passed:
 * LISTEN_FDS unset, or LISTEN_PID unset or another process's (the variables were inherited, not
 * meant for us). Returns -1 with a message in err when LISTEN_FDS or LISTEN_PID is not a number,
 * when there are more than max sockets, or when a descriptor is not a listening stream socket.
 * Either way LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed from the environment, so that
 * no child process takes the sockets for its own.
 */
int nd_listen_fds(int *fds, int max, nd_error *err);

/* 1 when the listening socket fd is IPv6 (libmicrohttpd needs to be told), else 0. */
int nd_socket_ipv6(int fd);
/* 1 when only this machine can reach fd: a UNIX socket, or one bound to a loopback address. */
int nd_socket_local(int fd);

#endif /* ND_LISTEN_FDS_H */
