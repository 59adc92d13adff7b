/*
 * rsockets are not served by goverbs' librdmacm.so.1: each call fails with ENOSYS (and a
 * line on stderr under GOVERBS_DEBUG=1), so that a program linked against them loads and
 * learns why, rather than failing to start.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rsocket.h>

static int no(const char *fn)
{
	const char *e = getenv("GOVERBS_DEBUG");

	if (e && *e && strcmp(e, "0"))
		fprintf(stderr, "goverbs librdmacm: %s: rsockets are not served: ENOSYS\n", fn);
	errno = ENOSYS;
	return -1;
}

int rsocket(int domain, int type, int protocol) { (void)domain, (void)type, (void)protocol; return no("rsocket"); }
int rbind(int s, const struct sockaddr *a, socklen_t l) { (void)s, (void)a, (void)l; return no("rbind"); }
int rlisten(int s, int b) { (void)s, (void)b; return no("rlisten"); }
int raccept(int s, struct sockaddr *a, socklen_t *l) { (void)s, (void)a, (void)l; return no("raccept"); }
int rconnect(int s, const struct sockaddr *a, socklen_t l) { (void)s, (void)a, (void)l; return no("rconnect"); }
int rshutdown(int s, int how) { (void)s, (void)how; return no("rshutdown"); }
int rclose(int s) { (void)s; return no("rclose"); }
ssize_t rrecv(int s, void *b, size_t n, int f) { (void)s, (void)b, (void)n, (void)f; return no("rrecv"); }
ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l)
{
	(void)s, (void)b, (void)n, (void)f, (void)a, (void)l;
	return no("rrecvfrom");
}
ssize_t rrecvmsg(int s, struct msghdr *m, int f) { (void)s, (void)m, (void)f; return no("rrecvmsg"); }
ssize_t rsend(int s, const void *b, size_t n, int f) { (void)s, (void)b, (void)n, (void)f; return no("rsend"); }
ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l)
{
	(void)s, (void)b, (void)n, (void)f, (void)a, (void)l;
	return no("rsendto");
}
ssize_t rsendmsg(int s, const struct msghdr *m, int f) { (void)s, (void)m, (void)f; return no("rsendmsg"); }
ssize_t rread(int s, void *b, size_t n) { (void)s, (void)b, (void)n; return no("rread"); }
ssize_t rreadv(int s, const struct iovec *v, int n) { (void)s, (void)v, (void)n; return no("rreadv"); }
ssize_t rwrite(int s, const void *b, size_t n) { (void)s, (void)b, (void)n; return no("rwrite"); }
ssize_t rwritev(int s, const struct iovec *v, int n) { (void)s, (void)v, (void)n; return no("rwritev"); }
int rpoll(struct pollfd *f, nfds_t n, int t) { (void)f, (void)n, (void)t; return no("rpoll"); }
int rselect(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	(void)n, (void)r, (void)w, (void)e, (void)t;
	return no("rselect");
}
int rgetpeername(int s, struct sockaddr *a, socklen_t *l) { (void)s, (void)a, (void)l; return no("rgetpeername"); }
int rgetsockname(int s, struct sockaddr *a, socklen_t *l) { (void)s, (void)a, (void)l; return no("rgetsockname"); }
int rsetsockopt(int s, int lv, int o, const void *v, socklen_t l)
{
	(void)s, (void)lv, (void)o, (void)v, (void)l;
	return no("rsetsockopt");
}
int rgetsockopt(int s, int lv, int o, void *v, socklen_t *l)
{
	(void)s, (void)lv, (void)o, (void)v, (void)l;
	return no("rgetsockopt");
}
int rfcntl(int s, int cmd, ...) { (void)s, (void)cmd; return no("rfcntl"); }
off_t riomap(int s, void *b, size_t n, int p, int f, off_t o)
{
	(void)s, (void)b, (void)n, (void)p, (void)f, (void)o;
	return no("riomap");
}
int riounmap(int s, void *b, size_t n) { (void)s, (void)b, (void)n; return no("riounmap"); }
size_t riowrite(int s, const void *b, size_t n, off_t o, int f)
{
	(void)s, (void)b, (void)n, (void)o, (void)f;
	no("riowrite");
	return 0;
}
