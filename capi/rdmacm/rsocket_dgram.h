/*
 * Datagram rsockets (rsocket_dgram.c), called by rsocket.c's entry points for a socket
 * made with SOCK_DGRAM. Library-internal: the version script keeps these names local.
 */
#ifndef GOVERBS_RSOCKET_DGRAM_H
#define GOVERBS_RSOCKET_DGRAM_H

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

struct dsk;

struct dsk *dg_new(int domain);
int dg_fd(struct dsk *d);
int dg_bind(struct dsk *d, const struct sockaddr *a, socklen_t l);
int dg_connect(struct dsk *d, const struct sockaddr *a, socklen_t l);
ssize_t dg_send(struct dsk *d, const struct iovec *iov, int iovcnt, int flags, int nonblock,
		const struct sockaddr *to, socklen_t tolen);
ssize_t dg_recv(struct dsk *d, const struct iovec *iov, int iovcnt, int flags, int nonblock,
		struct sockaddr *from, socklen_t *fromlen);
int dg_getpeername(struct dsk *d, struct sockaddr *a, socklen_t *l);
int dg_setsockopt(struct dsk *d, int lv, int o, const void *v, socklen_t l);
int dg_getsockopt(struct dsk *d, int lv, int o, void *v, socklen_t *l);
/* dg_revents is what poll(2) would say of the socket now (progress made first; while
 * polling, the UDP socket only now and then). */
short dg_revents(struct dsk *d, short want, int polling);
/* dg_wait_fds arms the socket for a wait and puts in w (room for 2) the descriptors
 * to poll; it returns their number, or -1 when something came meanwhile (no wait). */
int dg_wait_fds(struct dsk *d, struct pollfd *w);
/* dg_after_wait takes the completion events a wait woke for. */
void dg_after_wait(struct dsk *d);
void dg_close(struct dsk *d);

/* cma.c's rdma_bind_addr that gives an id bound to the any address its device (an
 * rdma_cm id bound so has none, as the kernel's): the socket's QP is made there. */
struct rdma_cm_id;
int goverbs_cm_bind_device(struct rdma_cm_id *id, struct sockaddr *addr);

#endif
