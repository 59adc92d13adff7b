/*
 * The control connection to `goverbs serve` (docs/attach-protocol.md, "Finding the
 * daemon", "Messages"): the rendezvous directory and socket, message framing, one
 * command at a time per connection, and starting a daemon when none listens.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "gva.h"

static int gva_nthreads; /* the library's threads now running (atomic) */

void gva_debug(const char *fmt, ...)
{
	va_list ap;

	if (!getenv("GOVERBS_DEBUG"))
		return;
	va_start(ap, fmt);
	fputs("goverbs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Little-endian fields (the protocol's byte order, whatever the host's). */

void gva_msg_init(struct gva_msg *m) { m->n = GVA_HDR; }

void gva_putn(struct gva_msg *m, const void *p, size_t n)
{
	if (m->n + n > sizeof(m->b)) {
		m->n = sizeof(m->b) + 1; /* too long: gva_call refuses it */
		return;
	}
	memcpy(m->b + m->n, p, n);
	m->n += n;
}

static void gva_putle(struct gva_msg *m, uint64_t v, int bytes)
{
	uint8_t b[8];

	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	gva_putn(m, b, bytes);
}

void gva_put8(struct gva_msg *m, uint8_t v) { gva_putle(m, v, 1); }
void gva_put16(struct gva_msg *m, uint16_t v) { gva_putle(m, v, 2); }
void gva_put32(struct gva_msg *m, uint32_t v) { gva_putle(m, v, 4); }
void gva_put64(struct gva_msg *m, uint64_t v) { gva_putle(m, v, 8); }

static uint64_t gva_getle(struct gva_rd *r, int bytes)
{
	uint64_t v = 0;

	if (r->short_ || r->n < (size_t)bytes) {
		r->short_ = 1;
		return 0;
	}
	for (int i = 0; i < bytes; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += bytes;
	r->n -= bytes;
	return v;
}

uint8_t gva_get8(struct gva_rd *r) { return (uint8_t)gva_getle(r, 1); }
uint16_t gva_get16(struct gva_rd *r) { return (uint16_t)gva_getle(r, 2); }
uint32_t gva_get32(struct gva_rd *r) { return (uint32_t)gva_getle(r, 4); }
uint64_t gva_get64(struct gva_rd *r) { return gva_getle(r, 8); }

void gva_getn(struct gva_rd *r, void *dst, size_t n)
{
	if (r->short_ || r->n < n) {
		r->short_ = 1;
		memset(dst, 0, n);
		return;
	}
	memcpy(dst, r->p, n);
	r->p += n;
	r->n -= n;
}

void gva_getstr(struct gva_rd *r, char *dst, size_t cap)
{
	size_t n = gva_get16(r), k;

	if (r->short_ || r->n < n) {
		r->short_ = 1;
		if (cap)
			dst[0] = 0;
		return;
	}
	k = n < cap - 1 ? n : cap - 1;
	memcpy(dst, r->p, k);
	dst[k] = 0;
	r->p += n;
	r->n -= n;
}

static void gva_close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* gva_send writes one datagram with descriptors attached. */
static int gva_send(int sock, const void *b, size_t n, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * GVA_MAX_FDS)];
	} u;
	struct iovec iov = { .iov_base = (void *)b, .iov_len = n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t w;

	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		w = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	return w == (ssize_t)n ? 0 : -1;
}

/*
 * gva_recv reads one datagram and its descriptors (close-on-exec). It returns the
 * length, 0 at the peer's end, -1 on error; a truncated message is an error.
 */
static ssize_t gva_recv(int sock, void *b, size_t cap, int *fds, int *nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * GVA_MAX_FDS)];
	} u;
	struct iovec iov = { .iov_base = b, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n;

	*nfds = 0;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < GVA_MAX_FDS)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		gva_close_fds(fds, *nfds);
		*nfds = 0;
		errno = EPROTO;
		return -1;
	}
	return n;
}

/*
 * gva_pid_page caches this process's pid in a page the kernel empties in a child
 * (MADV_WIPEONFORK, Linux 4.14): a fork of any kind, glibc's or a raw clone, reads 0
 * there and asks getpid once. Every post and poll checks that its device is this
 * process's; a getpid syscall each was ~1.7 syscalls per message of ib_write_bw.
 * Without the page (an older kernel), getpid every time.
 */
static pid_t *gva_pid_page;

pid_t gva_getpid(void)
{
	pid_t p;

	if (!gva_pid_page)
		return getpid();
	p = __atomic_load_n(gva_pid_page, __ATOMIC_RELAXED);
	if (!p) {
		p = getpid();
		__atomic_store_n(gva_pid_page, p, __ATOMIC_RELAXED);
	}
	return p;
}

static void gva_pid_init(void)
{
	long sz = sysconf(_SC_PAGESIZE);
	void *pg = mmap(NULL, sz > 0 ? (size_t)sz : 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif
	if (pg == MAP_FAILED)
		return;
	if (madvise(pg, sz > 0 ? (size_t)sz : 4096, MADV_WIPEONFORK)) {
		munmap(pg, sz > 0 ? (size_t)sz : 4096);
		return;
	}
	gva_pid_page = pg;
}

int gva_usable(struct gva_dev *d)
{
	if (d->pid != gva_getpid())
		return EIO; /* a child's copy of its parent's context */
	if (__atomic_load_n(&d->dead, __ATOMIC_SEQ_CST))
		return EIO;
	return 0;
}

static void gva_kill(struct gva_dev *d)
{
	__atomic_store_n(&d->dead, 1, __ATOMIC_SEQ_CST);
}

int gva_call(struct gva_dev *d, uint16_t op, struct gva_msg *req, const int *fds, int nfds,
	     uint8_t *buf, struct gva_rd *rep, int *rfds, int want_fds)
{
	int got[GVA_MAX_FDS], ngot = 0, rc;
	uint32_t seq, len;
	ssize_t n;

	if ((rc = gva_usable(d)))
		return rc;
	if (req->n > GVA_MAX_MSG)
		return EINVAL;
	len = (uint32_t)(req->n - GVA_HDR);
	pthread_mutex_lock(&d->mu);
	seq = ++d->seq;
	struct gva_msg h;
	h.n = 0;
	gva_put16(&h, op);
	gva_put16(&h, 0);
	gva_put32(&h, seq);
	gva_put32(&h, 0);
	gva_put32(&h, len);
	memcpy(req->b, h.b, GVA_HDR);
	if (__atomic_load_n(&d->dead, __ATOMIC_SEQ_CST) || gva_send(d->sock, req->b, req->n, fds, nfds) < 0) {
		gva_kill(d);
		pthread_mutex_unlock(&d->mu);
		return EIO;
	}
	n = gva_recv(d->sock, buf, GVA_MAX_MSG, got, &ngot);
	pthread_mutex_unlock(&d->mu);
	if (n < GVA_HDR) {
		gva_close_fds(got, ngot);
		gva_kill(d);
		gva_debug("the goverbs serve daemon is gone");
		return EIO;
	}
	struct gva_rd r = { .p = buf, .n = (size_t)n };
	uint16_t rop = gva_get16(&r);
	gva_get16(&r);
	uint32_t rseq = gva_get32(&r);
	int32_t err = (int32_t)gva_get32(&r);
	uint32_t rlen = gva_get32(&r);
	if (rop != (op | GVA_REPLY) || rseq != seq || rlen != (uint32_t)(n - GVA_HDR)) {
		gva_close_fds(got, ngot);
		gva_kill(d);
		gva_debug("malformed reply from the goverbs serve daemon");
		return EIO;
	}
	if (err) {
		char msg[512];

		gva_close_fds(got, ngot);
		gva_get32(&r); /* the Go sentinel's kind */
		gva_getstr(&r, msg, sizeof(msg));
		gva_debug("command %u: %s", op, msg);
		return err > 0 && err < 4096 ? err : EIO;
	}
	if (ngot != want_fds) {
		gva_close_fds(got, ngot);
		gva_debug("reply to command %u carried %d descriptors, want %d", op, ngot, want_fds);
		return EIO;
	}
	for (int i = 0; i < ngot; i++)
		rfds[i] = got[i];
	*rep = r;
	return 0;
}

int gva_simple(struct gva_dev *d, uint16_t op, uint32_t h)
{
	struct gva_msg m;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_rd r;

	gva_msg_init(&m);
	gva_put32(&m, h);
	return gva_call(d, op, &m, NULL, 0, buf, &r, NULL, 0);
}

void gva_ring_doorbell(struct gva_dev *d)
{
	uint64_t one = 1;
	ssize_t w;

	do
		w = write(d->doorbell, &one, sizeof(one));
	while (w < 0 && errno == EINTR);
}

/* The rendezvous directory: $XDG_RUNTIME_DIR/goverbs, or $TMPDIR/goverbs-UID. */
static int gva_dir(char *out, size_t cap)
{
	const char *x = getenv("XDG_RUNTIME_DIR"), *t = getenv("TMPDIR");
	int n;

	if (x && *x)
		n = snprintf(out, cap, "%s/goverbs", x);
	else
		n = snprintf(out, cap, "%s/goverbs-%u", t && *t ? t : "/tmp", (unsigned)getuid());
	return n > 0 && (size_t)n < cap ? 0 : ENAMETOOLONG;
}

/* The directory must be ours alone: in a shared /tmp another user could have made it. */
static int gva_check_dir(const char *dir)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		return errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
		fprintf(stderr, "goverbs: %s is not a directory private to this user (mode %o, uid %u): refusing it\n",
			dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		return EPERM;
	}
	return 0;
}

static int gva_dial(const char *path, int *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int s;

	if (strlen(path) >= sizeof(sa.sun_path))
		return ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(s);
		return e;
	}
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.uid != getuid()) {
		close(s);
		return EPERM;
	}
	*sock = s;
	return 0;
}

/*
 * gva_find_goverbs finds the daemon's program: GOVERBS_SERVE, else `goverbs` beside
 * this library, else on PATH.
 */
static int gva_find_goverbs(char *out, size_t cap)
{
	const char *env = getenv("GOVERBS_SERVE");
	Dl_info info;

	if (env && *env) {
		snprintf(out, cap, "%s", env);
		return access(out, X_OK) == 0 ? 0 : ENOENT;
	}
	if (dladdr((void *)gva_find_goverbs, &info) && info.dli_fname) {
		const char *slash = strrchr(info.dli_fname, '/');

		if (slash && (size_t)(slash - info.dli_fname) + 9 < cap) {
			snprintf(out, cap, "%.*s/goverbs", (int)(slash - info.dli_fname), info.dli_fname);
			if (access(out, X_OK) == 0)
				return 0;
		}
	}
	const char *path = getenv("PATH");
	if (!path)
		return ENOENT;
	while (*path) {
		const char *end = strchr(path, ':');
		size_t n = end ? (size_t)(end - path) : strlen(path);

		if (n && n + 9 < cap) {
			snprintf(out, cap, "%.*s/goverbs", (int)n, path);
			if (access(out, X_OK) == 0)
				return 0;
		}
		path += n + (end ? 1 : 0);
	}
	return ENOENT;
}

/*
 * gva_spawn starts `goverbs serve --idle-exit 2s NAME=ADDR` detached from this process
 * (a grandchild in its own session, so that the program never sees it as its child), its
 * output in serve-ADDR.log in the rendezvous directory. It leaves by itself once no
 * client has been attached for the idle time.
 */
static int gva_spawn(const char *dir, const struct gva_entry *e)
{
	const char *addr = e->addr;
	char prog[PATH_MAX], log[PATH_MAX + 128];
	const char *idle = getenv("GOVERBS_SERVE_IDLE");
	pid_t pid;
	int status;

	if (gva_find_goverbs(prog, sizeof(prog))) {
		fprintf(stderr, "goverbs: no goverbs serve daemon serves %s, and no goverbs program to start one "
				"(GOVERBS_SERVE, beside libibverbs.so.1, or on PATH)\n", addr);
		return ENODEV;
	}
	snprintf(log, sizeof(log), "%s/serve-%s.log", dir, addr);
	pid = fork();
	if (pid < 0)
		return errno;
	if (pid == 0) {
		/* Only async-signal-safe calls from here: the parent may have threads. */
		if (setsid() < 0 || fork() != 0)
			_exit(0);
		int nul = open("/dev/null", O_RDWR);
		int lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
		}
		if (lf >= 0)
			dup2(lf, 2);
		char *argv[] = { prog, "serve", "--idle-exit", (char *)(idle && *idle ? idle : "2s"),
				 (char *)e->spec, NULL };
		execv(prog, argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	gva_debug("started %s serve %s", prog, e->spec);
	return 0;
}

int gva_connect(const struct gva_entry *e, int *sock)
{
	const char *name = e->name, *addr = e->addr;
	char dir[PATH_MAX], path[PATH_MAX + 128];
	const char *no = getenv("GOVERBS_NO_AUTOSTART");
	int rc;

	if ((rc = gva_dir(dir, sizeof(dir))))
		return rc;
	snprintf(path, sizeof(path), "%s/attach-%s.sock", dir, addr);
	rc = gva_check_dir(dir);
	if (!rc && !(rc = gva_dial(path, sock)))
		return 0;
	if (rc != ENOENT && rc != ECONNREFUSED)
		return rc;
	if (no && *no && strcmp(no, "0") != 0) {
		fprintf(stderr, "goverbs: %s: no goverbs serve daemon serves %s (%s)\n", name, addr, path);
		return ENODEV;
	}
	/* The daemon would make the directory too; its log goes there from the start. */
	if (mkdir(dir, 0700) == 0 || errno == EEXIST)
		rc = gva_check_dir(dir);
	else
		rc = errno;
	if (rc)
		return rc;
	if ((rc = gva_spawn(dir, e)))
		return rc;
	for (int i = 0; i < 200; i++) { /* up to 10 s for the daemon to listen */
		struct timespec ts = { 0, 50 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		if (gva_check_dir(dir) == 0 && gva_dial(path, sock) == 0)
			return 0;
	}
	fprintf(stderr, "goverbs: %s: the goverbs serve daemon started for %s does not answer (see %s/serve-%s.log)\n",
		name, addr, dir, addr);
	return ENODEV;
}

/* The device list: GOVERBS_DEVICES' NAME=ADDR[:PORT][@BACKEND] entries (verbs/soft/env.go). */

/* The node GUID a software device has (verbs/soft nodeGUID): FNV-1a of the address's bytes. */
static uint64_t gva_guid(const uint8_t *b, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return 0x020000fffe000000ULL | (h & 0xffffff) | ((h >> 24 & 0xff) << 32);
}

/* gva_parse_addr reads ADDR[:PORT] (or [V6]:PORT) into e's address text and GUID. */
static int gva_parse_addr(const char *s, struct gva_entry *e)
{
	char host[64];
	struct in_addr a4;
	struct in6_addr a6;
	const char *colon = strchr(s, ':');
	size_t n;

	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end)
			return -1;
		n = (size_t)(end - s - 1);
		if (n >= sizeof(host))
			return -1;
		memcpy(host, s + 1, n);
		host[n] = 0;
	} else if (colon && !strchr(colon + 1, ':')) {
		n = (size_t)(colon - s); /* IPv4 with a port */
		if (n >= sizeof(host))
			return -1;
		memcpy(host, s, n);
		host[n] = 0;
	} else {
		if (strlen(s) >= sizeof(host))
			return -1;
		strcpy(host, s);
	}
	if (inet_pton(AF_INET, host, &a4) == 1) {
		inet_ntop(AF_INET, &a4, e->addr, sizeof(e->addr));
		e->guid = gva_guid((uint8_t *)&a4, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a6) == 1) {
		e->guid = gva_guid(a6.s6_addr, 16);
		if (IN6_IS_ADDR_V4MAPPED(&a6)) /* the socket is named by the unmapped address */
			inet_ntop(AF_INET, &a6.s6_addr[12], e->addr, sizeof(e->addr));
		else
			inet_ntop(AF_INET6, &a6, e->addr, sizeof(e->addr));
		return 0;
	}
	return -1;
}

int gva_parse_devices(struct gva_entry *out, int max)
{
	const char *spec = getenv("GOVERBS_DEVICES");
	char *copy, *save = NULL, *ent;
	int n = 0;

	if (!spec || !*spec)
		spec = "sw0=127.0.0.1";
	copy = strdup(spec);
	if (!copy)
		return -1;
	for (ent = strtok_r(copy, ",", &save); ent; ent = strtok_r(NULL, ",", &save)) {
		while (*ent == ' ' || *ent == '\t')
			ent++;
		char *end = ent + strlen(ent);
		while (end > ent && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = 0;
		if (!*ent)
			continue;
		char *eq = strchr(ent, '=');
		if (!eq || eq == ent || (size_t)(eq - ent) >= sizeof(out[0].name)) {
			fprintf(stderr, "goverbs: GOVERBS_DEVICES: entry \"%s\" is not NAME=ADDR[:PORT]\n", ent);
			free(copy);
			return -1;
		}
		size_t len = strlen(ent);
		if (len > 6 && strcmp(ent + len - 6, "@serve") == 0)
			ent[len - 6] = 0; /* the daemon runs the device itself */
		if (n < max)
			snprintf(out[n].spec, sizeof(out[n].spec), "%s", ent);
		*eq = 0;
		char *at = strchr(eq + 1, '@');
		if (at)
			*at = 0; /* every device of this library is attached, whatever its backend */
		if (n == max)
			break;
		snprintf(out[n].name, sizeof(out[n].name), "%s", ent);
		if (gva_parse_addr(eq + 1, &out[n]) < 0) {
			fprintf(stderr, "goverbs: GOVERBS_DEVICES: \"%s\" is not an IP address\n", eq + 1);
			free(copy);
			return -1;
		}
		n++;
	}
	free(copy);
	return n;
}

/*
 * fork(): a child must not use its parent's connections (its commands would mix with
 * the parent's on one socket) and must not keep them open (the daemon would keep the
 * parent's objects alive after the parent exits). The child's copies are closed at
 * fork; the parent's contexts fail in the child with EIO, and the child may open the
 * device anew. Moved pages and shared rings are MADV_DONTFORK: not in the child at all.
 */
static pthread_mutex_t gva_devs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gva_dev *gva_devs;

static void gva_prepare(void) { pthread_mutex_lock(&gva_devs_mu); }
static void gva_parent(void) { pthread_mutex_unlock(&gva_devs_mu); }

static void gva_child(void)
{
	for (struct gva_dev *d = gva_devs; d; d = d->next) {
		close(d->sock);
		close(d->evsock);
		close(d->doorbell);
		d->sock = d->evsock = d->doorbell = -1;
		d->dead = 1;
		d->have_thr = 0; /* the event thread is the parent's */
		/* the mutexes may have been held by the parent's other threads */
		pthread_mutex_init(&d->mu, NULL);
		pthread_mutex_init(&d->objmu, NULL);
	}
	gva_devs = NULL; /* the parent's: a child never frees them */
	gva_nthreads = 0; /* a child has only the thread that forked */
	pthread_mutex_unlock(&gva_devs_mu);
}

__attribute__((constructor)) static void gva_init(void)
{
	gva_pid_init();
	pthread_atfork(gva_prepare, gva_parent, gva_child);
}

int gva_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!rc)
		__atomic_add_fetch(&gva_nthreads, 1, __ATOMIC_SEQ_CST);
	return rc;
}

void gva_join(pthread_t t)
{
	pthread_join(t, NULL);
	__atomic_sub_fetch(&gva_nthreads, 1, __ATOMIC_SEQ_CST);
}

int gva_program_threads(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	int n = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n < 0 ? -1 : n - __atomic_load_n(&gva_nthreads, __ATOMIC_SEQ_CST) - gva_parked_threads();
}

int gva_dev_register(struct gva_dev *d)
{
	pthread_mutex_lock(&gva_devs_mu);
	d->next = gva_devs;
	gva_devs = d;
	pthread_mutex_unlock(&gva_devs_mu);
	return 0;
}

void gva_dev_unregister(struct gva_dev *d)
{
	pthread_mutex_lock(&gva_devs_mu);
	for (struct gva_dev **p = &gva_devs; *p; p = &(*p)->next) {
		if (*p == d) {
			*p = d->next;
			break;
		}
	}
	pthread_mutex_unlock(&gva_devs_mu);
}
