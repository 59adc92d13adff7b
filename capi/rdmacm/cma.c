/*
 * goverbs' drop-in librdmacm.so.1 for C programs, with no Go runtime: a thin client of
 * the rdma_cm service of a `goverbs serve` daemon (docs/attach-protocol.md, "rdma_cm",
 * ops 29-45, 50 and 51), over the C flavour of libibverbs.so.1 (capi/attach), which it reaches
 * through GOVERBS_PRIVATE_1 (capi/attach/gva_private.c). Struct layouts are the
 * installed <rdma/rdma_cma.h>'s; the behaviour follows rdma-core's librdmacm (cma.c).
 *
 * Shape:
 * - Devices are the C libibverbs' devices, each opened once (rdma_get_devices); a
 *   device's address is the IPv4-mapped (or first global) GID of its port 1. Every CM
 *   id and every QP rdma_create_qp makes is on that context, the daemon connection
 *   whose QPs the daemon lets the id connect.
 * - Per device, one daemon channel (CM_CREATE_CHANNEL) and one library thread reading
 *   its event socket, handing each event to the rdma_event_channel of the id its uid
 *   names. An rdma_event_channel is a queue and a socket pair: one byte per queued
 *   event, so its fd is pollable and O_NONBLOCK works as on the kernel's rdma_cm.
 * - A daemon id is made when the id first needs one (bind, resolve, listen, join),
 *   since only then is its device known.
 * Whatever is not served fails with a clear errno, and a line on stderr under
 * GOVERBS_DEBUG=1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/rdma_cma.h>

#include "rsocket_dgram.h" /* goverbs_cm_bind_device's declaration */

/* GOVERBS_PRIVATE_1 of the C flavour's libibverbs.so.1 (capi/attach/gva_private.c). */
int goverbs_attach_command(struct ibv_context *ctx, unsigned op, const void *req, size_t reqlen, void *rep,
			   size_t repcap, size_t *replen, int *fds, int want_fds);
int goverbs_attach_thread(pthread_t *t, void *(*fn)(void *), void *arg);
void goverbs_attach_join(pthread_t t);
void goverbs_attach_park(void);
int goverbs_attach_qp(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t *handle, uint32_t *qpn);
void goverbs_attach_unpark(void);

enum {
	OP_CREATE_CHANNEL = 29, OP_DESTROY_CHANNEL, OP_CREATE_ID, OP_DESTROY_ID, OP_BIND_ADDR,
	OP_RESOLVE_ADDR, OP_RESOLVE_ROUTE, OP_QUERY_ADDR, OP_LISTEN, OP_CONNECT, OP_ACCEPT, OP_REJECT,
	OP_ESTABLISH, OP_DISCONNECT, OP_INIT_QP_ATTR, OP_JOIN_MCAST, OP_LEAVE_MCAST,
	OP_SET_OPTION = 50, OP_NOTIFY, /* after XRC's 46-49 */
	MAX_MSG = 4096,
	EV_HDR = 108,
	ADDR_LEN = 20,
	MAX_PRIV = 255,
};

static void dbg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void dbg(const char *fmt, ...)
{
	va_list ap;
	const char *e = getenv("GOVERBS_DEBUG");

	if (!e || !*e || !strcmp(e, "0"))
		return;
	va_start(ap, fmt);
	fputs("goverbs librdmacm: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int err(int e)
{
	errno = e;
	return -1;
}

/* Little-endian fields. */
struct wr {
	uint8_t b[MAX_MSG];
	size_t n;
};

static void put(struct wr *w, const void *p, size_t n)
{
	if (w->n + n > sizeof(w->b))
		return;
	memcpy(w->b + w->n, p, n);
	w->n += n;
}
static void putle(struct wr *w, uint64_t v, int k)
{
	uint8_t b[8];

	for (int i = 0; i < k; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, k);
}
#define put8(w, v) putle(w, v, 1)
#define put16(w, v) putle(w, v, 2)
#define put32(w, v) putle(w, v, 4)
#define put64(w, v) putle(w, v, 8)

struct rd {
	const uint8_t *p;
	size_t n;
	int bad;
};
static uint64_t getle(struct rd *r, int k)
{
	uint64_t v = 0;

	if (r->n < (size_t)k) {
		r->bad = 1;
		r->n = 0;
		return 0;
	}
	for (int i = 0; i < k; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += k;
	r->n -= k;
	return v;
}
static uint8_t get8(struct rd *r) { return (uint8_t)getle(r, 1); }
static uint16_t get16(struct rd *r) { return (uint16_t)getle(r, 2); }
static uint32_t get32(struct rd *r) { return (uint32_t)getle(r, 4); }
static uint64_t get64(struct rd *r) { return getle(r, 8); }
static void getn(struct rd *r, void *d, size_t n)
{
	if (r->n < n) {
		r->bad = 1;
		memset(d, 0, n);
		r->n = 0;
		return;
	}
	memcpy(d, r->p, n);
	r->p += n;
	r->n -= n;
}

/* An addr field: u16 family, u16 port, 16 bytes (IPv4 as ::ffff:a.b.c.d). */
static int put_addr(struct wr *w, const struct sockaddr *sa)
{
	uint8_t a[16] = { 0 };

	if (!sa || sa->sa_family == AF_UNSPEC) {
		put16(w, 0);
		put16(w, 0);
		put(w, a, 16);
		return 0;
	}
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		a[10] = a[11] = 0xff;
		memcpy(a + 12, &s->sin_addr, 4);
		put16(w, 2);
		put16(w, ntohs(s->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		memcpy(a, &s->sin6_addr, 16);
		put16(w, 10);
		put16(w, ntohs(s->sin6_port));
	} else {
		return EAFNOSUPPORT;
	}
	put(w, a, 16);
	return 0;
}

static void get_addr(struct rd *r, struct sockaddr_storage *ss)
{
	uint16_t fam = get16(r), port = get16(r);
	uint8_t a[16];

	getn(r, a, 16);
	memset(ss, 0, sizeof(*ss));
	if (fam == 2) {
		struct sockaddr_in *s = (void *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, a + 12, 4);
	} else if (fam == 10) {
		struct sockaddr_in6 *s = (void *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, a, 16);
	}
}

static size_t sa_len(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	}
	return 0;
}

/* sa_gid is sa's address as a GID (IPv4 mapped); 0 if it has none. */
static int sa_gid(const struct sockaddr *sa, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(g->raw + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 1;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(g->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 1;
	}
	return 0;
}

static int sa_any(const struct sockaddr *sa)
{
	union ibv_gid g, z;

	if (!sa_gid(sa, &g))
		return 1;
	memset(&z, 0, sizeof(z));
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == INADDR_ANY;
	return !memcmp(g.raw, z.raw, 16);
}

/* sa_loopback: 127.0.0.0/8 or ::1, which the kernel's rdma_cm binds as it binds the any
 * address (cma_any_addr). */
static int sa_loopback(const struct sockaddr *sa)
{
	static const uint8_t one[16] = { [15] = 1 };

	if (sa && sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa && sa->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr, one, 16);
	return 0;
}

/* ---- objects ---- */

struct cm_dev {
	struct ibv_context *verbs;
	int family; /* AF_INET, AF_INET6; 0: no address known */
	union ibv_gid gid;
	int gid_index;
	uint8_t max_rd, max_init;
	enum ibv_mtu mtu;
	/* the daemon channel and its reader, made at first use */
	uint32_t ch;
	int evsock;
	pthread_t thr;
	int started;
	struct ibv_pd *pd; /* rdma_create_qp's and rdma_create_ep's when given none */
};

struct raw {
	struct raw *next;
	uint64_t uid;
	size_t n;
	uint8_t b[];
};

struct cm_chan {
	struct rdma_event_channel ch; /* ch.fd: the read end of a socket pair of tokens */
	int wfd;
	struct raw *head, *tail;
	int waiters, closing, nids;
	int doomed; /* destroyed with ids on it: destroyed with its last id */
	struct cm_chan *next;
};

struct cm_mc {
	struct cm_mc *next;
	struct sockaddr_storage addr;
	void *context;
	int send_only, attached;
	union ibv_gid mgid;
};

struct cm_id {
	struct rdma_cm_id id; /* first: the program's pointer is ours */
	uint64_t uid;
	struct cm_dev *dev;
	uint32_t h; /* the daemon's id, 0 before it has one */
	int sync;   /* made with a NULL channel: calls wait for their events */
	struct cm_chan *own; /* the sync channel it made */
	int reported, completed;
	int connect_error, destroying;
	uint8_t resp_res, init_depth; /* a request's, for rdma_accept without parameters */
	struct ibv_sa_path_rec path;
	struct cm_mc *mcs;
	struct ibv_qp_init_attr *qp_init; /* a passive rdma_create_ep's, for rdma_get_request */
	void *connect;			  /* rdma_getaddrinfo's connect data */
	size_t connect_len;
	int own_cqs, listening;
	/* bound to the any address, or to a loopback one no device has: the kernel's rdma_cm
	 * binds such an id to no device (id->verbs NULL) until a resolve gives it one, and a
	 * program (libfabric) relies on it. The daemon's id is on dev all the same, which
	 * holds the port and serves a listen. */
	int nodev;
	/* rdma_set_option's, kept for an id the daemon has not heard of yet (set_options) */
	uint8_t tos, timeout;
	int tos_set, timeout_set, reuseaddr, afonly;
	struct cm_id *next;
};

struct cm_evt {
	struct rdma_cm_event ev; /* first */
	struct cm_id *counted;	 /* whose events_completed the ack advances */
	struct cm_evt *next;	 /* the live events */
	uint8_t priv[MAX_PRIV + 1];
};

/* One lock for the library's state: the rdma_cm path is not a data path. */
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gcv = PTHREAD_COND_INITIALIZER;
static struct cm_id *ids;
static struct cm_chan *chans;
static struct cm_evt *evts;
static uint64_t next_uid = 1;

static pthread_once_t devs_once = PTHREAD_ONCE_INIT;
static struct cm_dev *devs;
static int ndevs;

static struct cm_id *id_find(struct rdma_cm_id *p)
{
	for (struct cm_id *i = ids; i; i = i->next)
		if (&i->id == p && !i->destroying)
			return i;
	return NULL;
}

static struct cm_id *id_by_uid(uint64_t uid)
{
	for (struct cm_id *i = ids; i; i = i->next)
		if (i->uid == uid)
			return i->destroying ? NULL : i;
	return NULL;
}

static struct cm_chan *chan_find(struct rdma_event_channel *p)
{
	for (struct cm_chan *c = chans; c; c = c->next)
		if (&c->ch == p && !c->closing)
			return c;
	return NULL;
}

/* checked: the id a program passed, or NULL with errno EINVAL (and a debug line). */
static struct cm_id *checked(struct rdma_cm_id *p, const char *fn)
{
	struct cm_id *i;

	pthread_mutex_lock(&gmu);
	i = id_find(p);
	pthread_mutex_unlock(&gmu);
	if (!i) {
		dbg("%s: %p is not a live rdma_cm_id: EINVAL", fn, (void *)p);
		errno = EINVAL;
	}
	return i;
}

/*
 * live_qp is the id's QP if it is still alive: a program may destroy it with
 * ibv_destroy_qp rather than rdma_destroy_qp (rping does), leaving id->qp dangling; then
 * the id has no QP as far as the library is concerned.
 */
static struct ibv_qp *live_qp(struct rdma_cm_id *id)
{
	if (!id->qp)
		return NULL;
	if (!id->verbs || goverbs_attach_qp(id->verbs, id->qp, NULL, NULL)) {
		dbg("the id's QP was destroyed without rdma_destroy_qp: the id has no QP now");
		id->qp = NULL;
	}
	return id->qp;
}

static void devs_init(void)
{
	struct ibv_device **list;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n <= 0) {
		dbg("no devices (GOVERBS_DEVICES names none?)");
		if (list)
			ibv_free_device_list(list);
		return;
	}
	devs = calloc(n, sizeof(*devs));
	if (!devs) {
		ibv_free_device_list(list);
		return;
	}
	for (int i = 0; i < n; i++) {
		struct cm_dev *d = &devs[ndevs];
		struct ibv_device_attr da;
		struct ibv_port_attr pa;

		d->verbs = ibv_open_device(list[i]);
		if (!d->verbs) {
			dbg("%s: ibv_open_device: %s", ibv_get_device_name(list[i]), strerror(errno));
			continue;
		}
		d->evsock = -1;
		d->max_rd = d->max_init = 16;
		if (!ibv_query_device(d->verbs, &da)) {
			d->max_rd = da.max_qp_rd_atom > 255 ? 255 : da.max_qp_rd_atom;
			d->max_init = da.max_qp_init_rd_atom > 255 ? 255 : da.max_qp_init_rd_atom;
		}
		d->mtu = IBV_MTU_1024;
		if (!ibv_query_port(d->verbs, 1, &pa)) {
			d->mtu = pa.active_mtu;
			for (int k = 0; k < pa.gid_tbl_len && k < 64; k++) {
				union ibv_gid g;
				static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

				if (ibv_query_gid(d->verbs, 1, k, &g))
					break;
				if (!memcmp(g.raw, v4, 12)) {
					d->family = AF_INET, d->gid = g, d->gid_index = k;
					break;
				}
				static const uint8_t zero[16];

				if (!d->family && g.raw[0] != 0xfe && memcmp(g.raw, zero, 16)) { /* ::1 too */
					d->family = AF_INET6, d->gid = g, d->gid_index = k;
				}
			}
		}
		ndevs++;
	}
	ibv_free_device_list(list);
}

/*
 * After fork() the child's devices are its parent's contexts, which the C libibverbs
 * fails with EIO in a child (capi/attach): the child opens the devices anew at its
 * first rdma_cm call. Its parent's ids and channels stay the parent's (their calls fail
 * with EIO in the child). The lock may have been held by another of the parent's threads.
 */
static void child_after_fork(void)
{
	pthread_mutex_init(&gmu, NULL);
	pthread_cond_init(&gcv, NULL);
	devs = NULL; /* the parent's: never freed in the child */
	ndevs = 0;
	devs_once = (pthread_once_t)PTHREAD_ONCE_INIT;
}

__attribute__((constructor)) static void cma_init(void)
{
	pthread_atfork(NULL, NULL, child_after_fork);
}

static int have_devs(void)
{
	pthread_once(&devs_once, devs_init);
	return ndevs;
}

/* pick_dev chooses the device for an id given its source (or bind) and destination addresses. */
static struct cm_dev *pick_dev(const struct sockaddr *src, const struct sockaddr *dst, int *e)
{
	union ibv_gid g;

	if (!have_devs()) {
		*e = ENODEV;
		dbg("no goverbs devices: set GOVERBS_DEVICES (e.g. sw0=127.0.0.2@serve)");
		return NULL;
	}
	if (src && !sa_any(src)) {
		sa_gid(src, &g);
		for (int i = 0; i < ndevs; i++)
			if (!memcmp(devs[i].gid.raw, g.raw, 16))
				return &devs[i];
		*e = EADDRNOTAVAIL;
		dbg("no goverbs device has the address of the source or bind address: EADDRNOTAVAIL");
		return NULL;
	}
	int fam = dst ? dst->sa_family : (src ? src->sa_family : 0);
	if (dst && sa_gid(dst, &g))
		for (int i = 0; i < ndevs; i++)
			if (!memcmp(devs[i].gid.raw, g.raw, 16))
				return &devs[i];
	for (int i = 0; i < ndevs; i++)
		if (!fam || devs[i].family == fam)
			return &devs[i];
	if (dst) {
		*e = EAFNOSUPPORT;
		dbg("no goverbs device of the destination's address family: EAFNOSUPPORT");
		return NULL;
	}
	return &devs[0];
}

static int command(struct cm_dev *d, unsigned op, struct wr *w, uint8_t *rep, size_t *replen, int *fds, int nfds)
{
	size_t n = 0;
	int rc = goverbs_attach_command(d->verbs, op, w ? w->b : NULL, w ? w->n : 0, rep, rep ? MAX_MSG : 0,
					&n, fds, nfds);

	if (replen)
		*replen = n;
	return rc;
}

static int cmd_h(struct cm_dev *d, unsigned op, uint32_t h)
{
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];

	put32(&w, h);
	return command(d, op, &w, rep, NULL, NULL, 0);
}

/* cmd_h32 is a command of an id and one u32 (a timeout, a backlog, an event). */
static int cmd_h32(struct cm_dev *d, unsigned op, uint32_t h, uint32_t v)
{
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];

	put32(&w, h);
	put32(&w, v);
	return command(d, op, &w, rep, NULL, NULL, 0);
}

/* ---- channels ---- */

static void chan_push(struct cm_chan *c, struct raw *r)
{
	char t = 'e';

	r->next = NULL;
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	if (write(c->wfd, &t, 1) != 1)
		dbg("an event channel's token could not be written: %s", strerror(errno));
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_chan *c = calloc(1, sizeof(*c));
	int sv[2];

	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		free(c);
		return NULL;
	}
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	c->ch.fd = sv[0];
	c->wfd = sv[1];
	pthread_mutex_lock(&gmu);
	c->next = chans;
	chans = c;
	pthread_mutex_unlock(&gmu);
	return &c->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cm_chan *c;

	pthread_mutex_lock(&gmu);
	c = chan_find(channel);
	if (!c) {
		pthread_mutex_unlock(&gmu);
		dbg("rdma_destroy_event_channel: %p is not a live channel: ignored (EINVAL)", (void *)channel);
		errno = EINVAL;
		return;
	}
	if (c->nids) {
		c->doomed = 1;
		pthread_mutex_unlock(&gmu);
		dbg("rdma_destroy_event_channel: %d ids still use the channel: destroyed with the last of them (EBUSY)",
		    c->nids);
		errno = EBUSY;
		return;
	}
	for (struct cm_chan **p = &chans; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->closing = 1;
	if (c->waiters) {
		/*
		 * A thread is blocked in rdma_get_cm_event on it. On the kernel's rdma_cm it
		 * stays blocked (closing an fd does not wake a read of it), and programs rely
		 * on that: rping destroys the channel under its cm_thread and returns from
		 * main. So it stays blocked here too, on the channel's socket, which is kept
		 * (with the channel's memory) for it; it returns EBADF if it ever wakes.
		 */
		pthread_mutex_unlock(&gmu);
		dbg("rdma_destroy_event_channel: %d threads wait in rdma_get_cm_event on it: they stay blocked",
		    c->waiters);
		return;
	}
	pthread_mutex_unlock(&gmu);
	for (struct raw *r = c->head, *n; r; r = n) {
		n = r->next;
		free(r);
	}
	close(c->ch.fd);
	close(c->wfd);
	free(c);
}

/* ---- the device's event reader ---- */

/*
 * id_by_h is the live id of device d with daemon handle h. Events name ids by handle:
 * their uid is the one CM_CREATE_ID was given, which an id made by a connection
 * request shares with its listener.
 */
static struct cm_id *id_by_h(struct cm_dev *d, uint32_t h)
{
	for (struct cm_id *i = ids; i; i = i->next)
		if (i->dev == d && i->h == h)
			return i->destroying ? NULL : i;
	return NULL;
}

static void deliver(struct cm_dev *d, const uint8_t *b, size_t n)
{
	uint32_t ev = le32toh(*(const uint32_t *)b);
	uint32_t h = le32toh(*(const uint32_t *)(b + (ev == RDMA_CM_EVENT_CONNECT_REQUEST ? 20 : 16)));
	struct cm_id *i;
	struct raw *r;

	pthread_mutex_lock(&gmu);
	i = id_by_h(d, h);
	if (!i || !i->id.channel) {
		pthread_mutex_unlock(&gmu);
		if (ev == RDMA_CM_EVENT_CONNECT_REQUEST) /* for a listener gone: refuse the new id */
			cmd_h(d, OP_DESTROY_ID, le32toh(*(const uint32_t *)(b + 16)));
		return;
	}
	r = malloc(sizeof(*r) + n);
	if (r) {
		r->uid = i->uid;
		r->n = n;
		memcpy(r->b, b, n);
		chan_push((struct cm_chan *)i->id.channel, r);
	}
	pthread_mutex_unlock(&gmu);
}

static void *dev_reader(void *arg)
{
	struct cm_dev *d = arg;
	uint8_t b[MAX_MSG];

	for (;;) {
		ssize_t n = recv(d->evsock, b, sizeof(b), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if ((size_t)n < EV_HDR)
			continue;
		deliver(d, b, (size_t)n);
	}
	/* The daemon is gone: every id of the device gets DEVICE_REMOVAL, as on a kernel device. */
	dbg("%s: the daemon's rdma_cm events ended: DEVICE_REMOVAL to each id", ibv_get_device_name(d->verbs->device));
	pthread_mutex_lock(&gmu);
	for (struct cm_id *i = ids; i; i = i->next) {
		struct raw *r;

		if (i->dev != d || i->destroying || !i->id.channel || !(r = calloc(1, sizeof(*r) + EV_HDR)))
			continue;
		r->uid = i->uid;
		r->n = EV_HDR;
		r->b[0] = RDMA_CM_EVENT_DEVICE_REMOVAL;
		*(uint64_t *)(r->b + 8) = htole64(i->uid);
		*(uint32_t *)(r->b + 16) = htole32(i->h);
		chan_push((struct cm_chan *)i->id.channel, r);
	}
	pthread_mutex_unlock(&gmu);
	return NULL;
}

/* dev_start makes the device's daemon channel and starts its reader (under gmu). */
static int dev_start(struct cm_dev *d)
{
	uint8_t rep[MAX_MSG];
	size_t n;
	int fd, rc;

	if (d->started)
		return 0;
	if ((rc = command(d, OP_CREATE_CHANNEL, NULL, rep, &n, &fd, 1)))
		return rc;
	struct rd r = { rep, n, 0 };
	d->ch = get32(&r);
	d->evsock = fd;
	if ((rc = goverbs_attach_thread(&d->thr, dev_reader, d))) {
		close(fd);
		return rc;
	}
	d->started = 1;
	return 0;
}

/* default_pd is the device's PD of ids that were given none (librdmacm's per device). */
static struct ibv_pd *default_pd(struct cm_dev *d)
{
	pthread_mutex_lock(&gmu);
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->verbs);
	pthread_mutex_unlock(&gmu);
	return d->pd;
}

/* set_option is CM_SET_OPTION for an id the daemon knows. */
static int set_option(struct cm_id *i, int opt, uint32_t val)
{
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];

	put32(&w, i->h);
	put32(&w, (uint32_t)opt);
	put32(&w, val);
	return command(i->dev, OP_SET_OPTION, &w, rep, NULL, NULL, 0);
}

/*
 * set_options gives the daemon the options a program set before its id had a daemon id
 * (rdma_set_option right after rdma_create_id, as rping's -T and perftest do): before
 * the bind or the resolution that made it, so REUSEADDR and the route's TOS count.
 */
static int set_options(struct cm_id *i)
{
	int rc = 0;

	if (i->tos_set)
		rc = set_option(i, RDMA_OPTION_ID_TOS, i->tos);
	if (!rc && i->timeout_set)
		rc = set_option(i, RDMA_OPTION_ID_ACK_TIMEOUT, i->timeout);
	if (!rc && i->reuseaddr)
		rc = set_option(i, RDMA_OPTION_ID_REUSEADDR, 1);
	if (!rc && i->afonly)
		rc = set_option(i, RDMA_OPTION_ID_AFONLY, 1);
	return rc;
}

/* expose gives the program's id its device: id->verbs, and as librdmacm the device's PD
 * (a program may create its own QP on id->pd: pyverbs' external-QP test does). */
static int expose(struct cm_id *i)
{
	i->nodev = 0;
	i->id.verbs = i->dev->verbs;
	i->id.port_num = 1;
	if (!i->id.pd && !(i->id.pd = default_pd(i->dev)))
		return ENOMEM;
	return 0;
}

/* ensure_h gives the id a daemon id on device d (its device from now on). */
static int ensure_h(struct cm_id *i, struct cm_dev *d)
{
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	size_t n;
	int rc;

	if (i->h) {
		if (d && d != i->dev) {
			dbg("the id is on %s already: EINVAL", ibv_get_device_name(i->dev->verbs->device));
			return EINVAL;
		}
		return 0;
	}
	pthread_mutex_lock(&gmu);
	rc = dev_start(d);
	pthread_mutex_unlock(&gmu);
	if (rc)
		return rc;
	put32(&w, d->ch);
	put16(&w, (uint16_t)i->id.ps); /* the daemon takes enum rdma_port_space's values */
	put16(&w, 0);
	put64(&w, i->uid);
	if ((rc = command(d, OP_CREATE_ID, &w, rep, &n, NULL, 0)))
		return rc;
	struct rd r = { rep, n, 0 };
	i->h = get32(&r);
	i->dev = d;
	if (!i->nodev && (rc = expose(i)))
		return rc;
	return set_options(i);
}

/* ---- ids ---- */

static struct cm_id *id_alloc(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
			      enum ibv_qp_type qpt, int *e)
{
	struct cm_id *i = calloc(1, sizeof(*i));
	struct cm_chan *c;

	if (!i) {
		*e = ENOMEM;
		return NULL;
	}
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel) {
			*e = errno;
			free(i);
			return NULL;
		}
		i->sync = 1;
	}
	pthread_mutex_lock(&gmu);
	c = chan_find(channel);
	if (!c) {
		pthread_mutex_unlock(&gmu);
		dbg("rdma_create_id: %p is not a live event channel: EINVAL", (void *)channel);
		free(i);
		*e = EINVAL;
		return NULL;
	}
	if (i->sync)
		i->own = c;
	c->nids++;
	i->id.channel = channel;
	i->id.context = context;
	i->id.ps = ps;
	i->id.qp_type = qpt;
	i->uid = next_uid++;
	i->next = ids;
	ids = i;
	pthread_mutex_unlock(&gmu);
	return i;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qpt;
	struct cm_id *i;
	int e = 0;

	if (!id)
		return err(EINVAL);
	switch (ps) {
	case RDMA_PS_TCP:
		qpt = IBV_QPT_RC;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB: /* UD as UDP is, in its own space of service IDs */
		qpt = IBV_QPT_UD;
		break;
	default:
		dbg("rdma_create_id: port space %#x is not served (RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IPOIB are): "
		    "EPROTONOSUPPORT", ps);
		return err(EPROTONOSUPPORT);
	}
	i = id_alloc(channel, context, ps, qpt, &e);
	if (!i)
		return err(e);
	*id = &i->id;
	return 0;
}

static void purge_events(struct cm_id *i, struct cm_chan *c)
{
	/* under gmu: the id's events not yet taken from its channel */
	struct raw **p = &c->head, *last = NULL;

	while (*p) {
		struct raw *r = *p;

		if (r->uid == i->uid) {
			*p = r->next;
			if (le32toh(*(uint32_t *)r->b) == RDMA_CM_EVENT_CONNECT_REQUEST && i->dev)
				cmd_h(i->dev, OP_DESTROY_ID, le32toh(*(uint32_t *)(r->b + 16)));
			free(r);
			char t;
			if (recv(c->ch.fd, &t, 1, MSG_DONTWAIT) != 1) {
				/* a waiter took its token: it finds the queue without it and reads on */
			}
			continue;
		}
		last = r;
		p = &r->next;
	}
	c->tail = last;
}

static void free_mcs(struct cm_id *i)
{
	for (struct cm_mc *m = i->mcs, *n; m; m = n) {
		n = m->next;
		if (m->attached && live_qp(&i->id))
			ibv_detach_mcast(i->id.qp, &m->mgid, 0);
		free(m);
	}
	i->mcs = NULL;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cm_id *i = checked(id, "rdma_destroy_id");
	struct cm_chan *c;

	if (!i)
		return -1;
	if (id->event) { /* a synchronous id's last event */
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	pthread_mutex_lock(&gmu);
	if (i->destroying || id_find(id) != i) { /* destroyed meanwhile by another thread */
		pthread_mutex_unlock(&gmu);
		return err(EINVAL);
	}
	i->destroying = 1; /* no event is handed to it from now on */
	pthread_mutex_unlock(&gmu);
	if (i->h)
		cmd_h(i->dev, OP_DESTROY_ID, i->h);
	pthread_mutex_lock(&gmu);
	c = (struct cm_chan *)i->id.channel;
	purge_events(i, c);
	/* librdmacm's rule: destroying an id waits until the program acked its events */
	while (i->completed < i->reported)
		pthread_cond_wait(&gcv, &gmu);
	for (struct cm_id **p = &ids; *p; p = &(*p)->next)
		if (*p == i) {
			*p = i->next;
			break;
		}
	c->nids--;
	int doomed = c->doomed && !c->nids && c != i->own;
	pthread_mutex_unlock(&gmu);
	free_mcs(i);
	if (i->own)
		rdma_destroy_event_channel(&i->own->ch);
	if (doomed) /* the program destroyed it already, while this id was on it */
		rdma_destroy_event_channel(&c->ch);
	free(i->qp_init);
	free(i->connect);
	free(i);
	return 0;
}

/* complete waits for a sync id's event (librdmacm's ucma_complete). */
static int complete(struct cm_id *i)
{
	struct rdma_cm_event *e;

	if (!i->sync)
		return 0;
	if (i->id.event) {
		rdma_ack_cm_event(i->id.event);
		i->id.event = NULL;
	}
	if (rdma_get_cm_event(i->id.channel, &i->id.event))
		return -1;
	e = i->id.event;
	if (e->status) {
		if (e->event == RDMA_CM_EVENT_REJECTED)
			return err(ECONNREFUSED);
		return err(e->status < 0 ? -e->status : e->status);
	}
	if (e->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
		return err(ENODEV);
	return 0;
}

/* dev_has says whether a device has sa's address. */
static int dev_has(const struct sockaddr *sa)
{
	union ibv_gid g;

	if (!have_devs() || !sa_gid(sa, &g))
		return 0;
	for (int i = 0; i < ndevs; i++)
		if (!memcmp(devs[i].gid.raw, g.raw, 16))
			return 1;
	return 0;
}

/*
 * bind_id binds the id to addr. An id bound to the any address, or to a loopback address no
 * device has, gets no device (id->verbs stays NULL), as the kernel's rdma_cm treats
 * loopback addresses as the any address (cma_any_addr) and acquires a device only for
 * another; its daemon id is on the family's first device, bound to the any address with
 * addr's port. need_dev (the datagram rsockets, which make their QP on the id's device
 * at once) gives an id bound to the any address that device, and refuses a loopback
 * address no device has (EADDRNOTAVAIL).
 */
static int bind_id(struct cm_id *i, struct sockaddr *addr, int need_dev)
{
	struct sockaddr_storage b;
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	struct cm_dev *d;
	size_t n;
	int rc = 0, wild;

	if (!addr || !sa_len(addr)) {
		dbg("rdma_bind_addr: no IPv4 or IPv6 address: %s", addr ? "EAFNOSUPPORT" : "EINVAL");
		return addr ? EAFNOSUPPORT : EINVAL;
	}
	memcpy(&b, addr, sa_len(addr));
	wild = sa_any(addr) || (!need_dev && sa_loopback(addr) && !dev_has(addr));
	if (wild && !sa_any(addr)) { /* the any address of its family, with its port */
		if (b.ss_family == AF_INET)
			((struct sockaddr_in *)&b)->sin_addr.s_addr = htonl(INADDR_ANY);
		else
			((struct sockaddr_in6 *)&b)->sin6_addr = in6addr_any;
	}
	if (!(d = i->h ? i->dev : pick_dev((struct sockaddr *)&b, NULL, &rc)))
		return rc;
	if (!i->h && wild && !need_dev)
		i->nodev = 1;
	if ((rc = ensure_h(i, d)))
		return rc;
	put32(&w, i->h);
	put_addr(&w, (struct sockaddr *)&b);
	if ((rc = command(d, OP_BIND_ADDR, &w, rep, &n, NULL, 0)))
		return rc;
	struct rd r = { rep, n, 0 };
	get_addr(&r, &b);
	if (b.ss_family == AF_UNSPEC) {
		memcpy(&i->id.route.addr.src_storage, addr, sa_len(addr));
	} else if (wild && !sa_any(addr)) { /* the program's loopback address, the daemon's port */
		memcpy(&i->id.route.addr.src_storage, addr, sa_len(addr));
		if (b.ss_family == AF_INET && addr->sa_family == AF_INET)
			((struct sockaddr_in *)&i->id.route.addr.src_storage)->sin_port =
				((struct sockaddr_in *)&b)->sin_port;
		else if (b.ss_family == AF_INET6 && addr->sa_family == AF_INET6)
			((struct sockaddr_in6 *)&i->id.route.addr.src_storage)->sin6_port =
				((struct sockaddr_in6 *)&b)->sin6_port;
	} else {
		i->id.route.addr.src_storage = b;
	}
	if (!i->nodev) {
		i->id.route.addr.addr.ibaddr.sgid = d->gid;
		i->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
	}
	return 0;
}

/* bind_api is rdma_bind_addr's body; need_dev as bind_id's. */
static int bind_api(struct rdma_cm_id *id, struct sockaddr *addr, int need_dev, const char *fn)
{
	struct cm_id *i = checked(id, fn);
	int rc;

	if (!i)
		return -1;
	if ((rc = bind_id(i, addr, need_dev)))
		return err(rc);
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return bind_api(id, addr, 0, "rdma_bind_addr");
}

/* goverbs_cm_bind_device is rdma_bind_addr for the library's datagram rsockets: an id
 * bound to the any address gets its device all the same. Library-internal (declared in
 * rsocket_dgram.h). */
int goverbs_cm_bind_device(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return bind_api(id, addr, 1, "goverbs_cm_bind_device");
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_id *i = checked(id, "rdma_resolve_addr");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	struct cm_dev *d;
	int rc = 0;

	if (!i)
		return -1;
	if (!dst_addr || !sa_len(dst_addr)) {
		dbg("rdma_resolve_addr: the destination is not an IPv4 or IPv6 address: EINVAL");
		return err(EINVAL);
	}
	if (src_addr && src_addr->sa_family != AF_UNSPEC && !sa_len(src_addr))
		return err(EAFNOSUPPORT);
	if (!(d = i->h ? i->dev : pick_dev(src_addr, dst_addr, &rc)))
		return err(rc);
	if ((rc = ensure_h(i, d)))
		return err(rc);
	put32(&w, i->h);
	put32(&w, timeout_ms < 0 ? 0 : (uint32_t)timeout_ms);
	put_addr(&w, src_addr);
	put_addr(&w, dst_addr);
	if ((rc = command(d, OP_RESOLVE_ADDR, &w, rep, NULL, NULL, 0)))
		return err(rc);
	memcpy(&i->id.route.addr.dst_storage, dst_addr, sa_len(dst_addr));
	return complete(i);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cm_id *i = checked(id, "rdma_resolve_route");
	int rc;

	if (!i)
		return -1;
	if (!i->h) {
		dbg("rdma_resolve_route: the address is not resolved: EINVAL");
		return err(EINVAL);
	}
	if ((rc = cmd_h32(i->dev, OP_RESOLVE_ROUTE, i->h, timeout_ms < 0 ? 0 : (uint32_t)timeout_ms)))
		return err(rc);
	return complete(i);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cm_id *i = checked(id, "rdma_listen");
	int rc;

	if (!i)
		return -1;
	if (!i->h) { /* the kernel binds an unbound listener to any address */
		struct sockaddr_in any = { .sin_family = AF_INET };

		if (rdma_bind_addr(id, (struct sockaddr *)&any))
			return -1;
	}
	if ((rc = cmd_h32(i->dev, OP_LISTEN, i->h, backlog < 0 ? 0 : (uint32_t)backlog)))
		return err(rc);
	i->listening = 1;
	/* a line a test (or a person) can wait for: the service answers from now on */
	dbg("listening on port %u of %s", ntohs(rdma_get_src_port(id)), ibv_get_device_name(i->dev->verbs->device));
	return 0;
}

static void decode_av(struct rd *r, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	getn(r, ah->grh.dgid.raw, 16);
	ah->grh.sgid_index = get8(r);
	ah->grh.hop_limit = get8(r);
	ah->grh.traffic_class = get8(r);
	ah->sl = get8(r);
	ah->port_num = get8(r);
	get8(r), get8(r), get8(r);
	ah->grh.flow_label = get32(r);
	ah->is_global = 1;
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	struct cm_id *i = checked(id, "rdma_init_qp_attr");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	size_t n;
	int rc;

	if (!i)
		return -1;
	if (!qp_attr || !qp_attr_mask)
		return err(EINVAL);
	if (!i->h) {
		dbg("rdma_init_qp_attr: the id is not bound to a device: EINVAL");
		return err(EINVAL);
	}
	put32(&w, i->h);
	put8(&w, qp_attr->qp_state);
	if ((rc = command(i->dev, OP_INIT_QP_ATTR, &w, rep, &n, NULL, 0)))
		return err(rc);
	struct rd r = { rep, n, 0 };
	uint32_t mask = get32(&r);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = get8(&r);
	a.cur_qp_state = get8(&r);
	a.path_mtu = get8(&r);
	a.port_num = get8(&r);
	a.min_rnr_timer = get8(&r);
	a.timeout = get8(&r);
	a.retry_cnt = get8(&r);
	a.rnr_retry = get8(&r);
	a.max_rd_atomic = get8(&r);
	a.max_dest_rd_atomic = get8(&r);
	a.pkey_index = get16(&r);
	a.qkey = get32(&r);
	a.rq_psn = get32(&r);
	a.sq_psn = get32(&r);
	a.dest_qp_num = get32(&r);
	a.qp_access_flags = get32(&r);
	a.cap.max_send_wr = get32(&r);
	a.cap.max_recv_wr = get32(&r);
	a.cap.max_send_sge = get32(&r);
	a.cap.max_recv_sge = get32(&r);
	a.cap.max_inline_data = get32(&r);
	decode_av(&r, &a.ah_attr);
	if (r.bad) {
		dbg("rdma_init_qp_attr: malformed reply: EIO");
		return err(EIO);
	}
	if (a.ah_attr.port_num == 0)
		a.ah_attr.port_num = 1;
	if (i->dev && (mask & IBV_QP_AV))
		a.ah_attr.grh.sgid_index = (uint8_t)i->dev->gid_index;
	*qp_attr = a;
	*qp_attr_mask = (int)mask;
	return 0;
}

/* ---- QPs ---- */

static int modify_to(struct cm_id *i, enum ibv_qp_state st, int limit, uint8_t v)
{
	struct ibv_qp_attr a = { .qp_state = st };
	int mask, rc;

	if (rdma_init_qp_attr(&i->id, &a, &mask))
		return errno;
	if (st == IBV_QPS_RTR && limit)
		a.max_dest_rd_atomic = v;
	if (st == IBV_QPS_RTS && limit)
		a.max_rd_atomic = v;
	if ((rc = ibv_modify_qp(i->id.qp, &a, mask)))
		dbg("moving QP %u to state %d: %s", i->id.qp->qp_num, st, strerror(rc));
	return rc;
}

static int modify_err(struct cm_id *i)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	return live_qp(&i->id) ? ibv_modify_qp(i->id.qp, &a, IBV_QP_STATE) : 0;
}

/* rtr_rts moves a connected QP to RTR and RTS (librdmacm's ucma_modify_qp_rtr/rts). */
static int rtr_rts(struct cm_id *i, uint8_t resp_res, uint8_t init_depth)
{
	int rc;

	if ((rc = modify_to(i, IBV_QPS_INIT, 0, 0)) ||
	    (rc = modify_to(i, IBV_QPS_RTR, resp_res != RDMA_MAX_RESP_RES, resp_res)) ||
	    (rc = modify_to(i, IBV_QPS_RTS, init_depth != RDMA_MAX_INIT_DEPTH, init_depth)))
		return rc;
	return 0;
}

static int ud_ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = RDMA_UDP_QKEY };
	int rc;

	if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		return rc;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static void destroy_own_cqs(struct cm_id *i)
{
	if (!i->own_cqs)
		return;
	if (i->id.recv_cq && i->id.recv_cq != i->id.send_cq)
		ibv_destroy_cq(i->id.recv_cq);
	if (i->id.send_cq)
		ibv_destroy_cq(i->id.send_cq);
	if (i->id.recv_cq_channel && i->id.recv_cq_channel != i->id.send_cq_channel)
		ibv_destroy_comp_channel(i->id.recv_cq_channel);
	if (i->id.send_cq_channel)
		ibv_destroy_comp_channel(i->id.send_cq_channel);
	i->id.recv_cq = i->id.send_cq = NULL;
	i->id.recv_cq_channel = i->id.send_cq_channel = NULL;
	i->own_cqs = 0;
}

/* make_cqs creates the CQs (and their channels) the attributes leave out, as librdmacm does. */
static int make_cqs(struct cm_id *i, uint32_t send_size, uint32_t recv_size)
{
	struct ibv_context *v = i->id.verbs;

	i->own_cqs = 1;
	if (recv_size) {
		i->id.recv_cq_channel = ibv_create_comp_channel(v);
		if (!i->id.recv_cq_channel)
			goto fail;
		i->id.recv_cq = ibv_create_cq(v, recv_size, i, i->id.recv_cq_channel, 0);
		if (!i->id.recv_cq)
			goto fail;
	}
	if (send_size) {
		i->id.send_cq_channel = ibv_create_comp_channel(v);
		if (!i->id.send_cq_channel)
			goto fail;
		i->id.send_cq = ibv_create_cq(v, send_size, i, i->id.send_cq_channel, 0);
		if (!i->id.send_cq)
			goto fail;
	}
	return 0;
fail:;
	int e = errno ? errno : ENOMEM;
	destroy_own_cqs(i);
	return e;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *i = checked(id, "rdma_create_qp_ex");
	struct ibv_qp *qp;
	int rc;

	if (!i)
		return -1;
	if (!attr)
		return err(EINVAL);
	if (live_qp(id)) {
		dbg("rdma_create_qp: the id has a QP already: EINVAL");
		return err(EINVAL);
	}
	if (!id->verbs) {
		dbg("rdma_create_qp: the id is not bound to a device (bind or resolve first): EINVAL");
		return err(EINVAL);
	}
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd ? id->pd : default_pd(i->dev);
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		if (!attr->pd)
			return -1;
	}
	if (attr->pd->context != id->verbs) {
		dbg("rdma_create_qp: the PD is of another context than the id's (id->verbs): EINVAL");
		return err(EINVAL);
	}
	if (!attr->send_cq || !attr->recv_cq) {
		if ((rc = make_cqs(i, attr->send_cq ? 0 : attr->cap.max_send_wr, attr->recv_cq ? 0 : attr->cap.max_recv_wr)))
			return err(rc);
		if (!attr->send_cq)
			attr->send_cq = id->send_cq;
		if (!attr->recv_cq)
			attr->recv_cq = id->recv_cq;
	}
	if (attr->srq == NULL && id->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		rc = errno ? errno : EINVAL;
		goto fail;
	}
	id->qp = qp;
	if (qp->qp_type == IBV_QPT_UD)
		rc = ud_ready(qp);
	else
		rc = modify_to(i, IBV_QPS_INIT, 0, 0);
	if (rc) {
		id->qp = NULL;
		ibv_destroy_qp(qp);
		goto fail;
	}
	id->pd = attr->pd;
	return 0;
fail:
	destroy_own_cqs(i);
	return err(rc);
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex x;
	int rc;

	if (!qp_init_attr)
		return err(EINVAL);
	memset(&x, 0, sizeof(x));
	x.qp_context = qp_init_attr->qp_context;
	x.send_cq = qp_init_attr->send_cq;
	x.recv_cq = qp_init_attr->recv_cq;
	x.srq = qp_init_attr->srq;
	x.cap = qp_init_attr->cap;
	x.qp_type = qp_init_attr->qp_type;
	x.sq_sig_all = qp_init_attr->sq_sig_all;
	x.comp_mask = IBV_QP_INIT_ATTR_PD;
	x.pd = pd;
	rc = rdma_create_qp_ex(id, &x);
	if (!rc) {
		qp_init_attr->cap = x.cap;
		qp_init_attr->send_cq = x.send_cq;
		qp_init_attr->recv_cq = x.recv_cq;
	}
	return rc;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct cm_id *i = checked(id, "rdma_destroy_qp");

	if (!i)
		return;
	if (live_qp(id))
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_own_cqs(i);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct cm_id *i = checked(id, "rdma_create_srq_ex");
	struct ibv_srq *srq;

	if (!i)
		return -1;
	if (!attr || !id->verbs)
		return err(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd ? id->pd : default_pd(i->dev);
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (!attr->pd)
		return -1;
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	id->pd = attr->pd;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex x;
	int rc;

	if (!attr)
		return err(EINVAL);
	memset(&x, 0, sizeof(x));
	x.srq_context = attr->srq_context;
	x.attr = attr->attr;
	x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	x.srq_type = IBV_SRQT_BASIC;
	x.pd = pd;
	rc = rdma_create_srq_ex(id, &x);
	if (!rc)
		attr->attr = x.attr;
	return rc;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!checked(id, "rdma_destroy_srq") || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* ---- connecting ---- */

static void put_param(struct wr *w, uint8_t rr, uint8_t id, uint8_t retry, uint8_t rnr, uint8_t srq, uint32_t qpn,
		      const void *priv, uint8_t len)
{
	put8(w, rr);
	put8(w, id);
	put8(w, retry);
	put8(w, rnr);
	put8(w, srq);
	put8(w, len);
	put16(w, 0);
	put32(w, qpn);
	if (len)
		put(w, priv, len);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *i = checked(id, "rdma_connect");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	uint8_t rr, idp, retry = 7, rnr = 7, srq = 0, len = 0;
	const void *priv = NULL;
	uint32_t qpn = 0;
	int rc;

	if (!i)
		return -1;
	if (!i->h) {
		dbg("rdma_connect: the route is not resolved: EINVAL");
		return err(EINVAL);
	}
	rr = i->dev->max_rd;
	idp = i->dev->max_init;
	if (p) {
		rr = p->responder_resources < rr ? p->responder_resources : rr;
		idp = p->initiator_depth < idp ? p->initiator_depth : idp;
		retry = p->retry_count;
		rnr = p->rnr_retry_count;
		srq = p->srq;
		qpn = p->qp_num;
		priv = p->private_data;
		len = p->private_data_len;
		if (len && !priv)
			return err(EINVAL);
	}
	if (!len && i->connect_len) {
		priv = i->connect;
		len = (uint8_t)i->connect_len;
	}
	if (live_qp(id)) {
		qpn = id->qp->qp_num;
		srq = id->qp->srq != NULL;
	}
	i->resp_res = rr;
	i->init_depth = idp;
	put32(&w, i->h);
	put_param(&w, rr, idp, retry, rnr, srq, qpn, priv, len);
	if ((rc = command(i->dev, OP_CONNECT, &w, rep, NULL, NULL, 0)))
		return err(rc);
	if (i->connect_len) {
		free(i->connect);
		i->connect = NULL;
		i->connect_len = 0;
	}
	return complete(i);
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *i = checked(id, "rdma_accept");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	uint8_t rr, idp, rnr = 7, srq = 0, len = 0;
	const void *priv = NULL;
	uint32_t qpn = 0;
	int rc;

	if (!i)
		return -1;
	if (!i->h) {
		dbg("rdma_accept: the id is not a connection request's: EINVAL");
		return err(EINVAL);
	}
	rr = i->resp_res;
	idp = i->init_depth;
	if (p) {
		rr = p->responder_resources < i->dev->max_rd ? p->responder_resources : i->dev->max_rd;
		idp = p->initiator_depth < i->dev->max_init ? p->initiator_depth : i->dev->max_init;
		rnr = p->rnr_retry_count;
		srq = p->srq;
		qpn = p->qp_num;
		priv = p->private_data;
		len = p->private_data_len;
		if (len && !priv)
			return err(EINVAL);
	}
	if (live_qp(id)) {
		qpn = id->qp->qp_num;
		srq = id->qp->srq != NULL;
		if (id->qp_type != IBV_QPT_UD && (rc = rtr_rts(i, rr, idp)))
			return err(rc);
	}
	put32(&w, i->h);
	put_param(&w, rr, idp, 7, rnr, srq, qpn, priv, len);
	if ((rc = command(i->dev, OP_ACCEPT, &w, rep, NULL, NULL, 0))) {
		modify_err(i);
		return err(rc);
	}
	if (id->qp_type == IBV_QPT_UD)
		return 0;
	return complete(i);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct cm_id *i = checked(id, "rdma_reject");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	int rc;

	if (!i)
		return -1;
	if (!i->h || (private_data_len && !private_data))
		return err(EINVAL);
	put32(&w, i->h);
	put8(&w, private_data_len);
	if (private_data_len)
		put(&w, private_data, private_data_len);
	if ((rc = command(i->dev, OP_REJECT, &w, rep, NULL, NULL, 0)))
		return err(rc);
	return 0;
}

int rdma_establish(struct rdma_cm_id *id)
{
	struct cm_id *i = checked(id, "rdma_establish");
	int rc;

	if (!i)
		return -1;
	if (!i->h)
		return err(EINVAL);
	if ((rc = cmd_h(i->dev, OP_ESTABLISH, i->h)))
		return err(rc);
	return 0;
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cm_id *i = checked(id, "rdma_disconnect");
	int rc;

	if (!i)
		return -1;
	if (!i->h)
		return err(EINVAL);
	modify_err(i);
	if ((rc = cmd_h(i->dev, OP_DISCONNECT, i->h)))
		return err(rc);
	return complete(i);
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	struct cm_id *i = checked(id, "rdma_notify");
	int rc;

	if (!i)
		return -1;
	if (!i->h) {
		dbg("rdma_notify: the id has no connection: EINVAL");
		return err(EINVAL);
	}
	if ((rc = cmd_h32(i->dev, OP_NOTIFY, i->h, (uint32_t)event))) {
		dbg("rdma_notify: event %d: %s", (int)event, strerror(rc));
		return err(rc);
	}
	return 0;
}

/* ---- events ---- */

static void copy_conn(struct cm_evt *e, struct rd *r)
{
	struct rdma_conn_param *c = &e->ev.param.conn;

	c->responder_resources = get8(r);
	c->initiator_depth = get8(r);
	c->retry_count = get8(r);
	c->rnr_retry_count = get8(r);
	c->srq = get8(r);
	c->private_data_len = get8(r);
	get16(r);
	c->qp_num = get32(r) & 0xffffff;
	if (c->private_data_len) {
		getn(r, e->priv, c->private_data_len);
		c->private_data = e->priv;
	}
	c->flow_control = 1;
}

static void copy_ud(struct cm_evt *e, uint32_t qkey, const struct ibv_ah_attr *ah, struct rd *r)
{
	struct rdma_ud_param *u = &e->ev.param.ud;
	uint8_t n;

	u->ah_attr = *ah;
	u->qkey = qkey;
	get8(r), get8(r), get8(r), get8(r), get8(r);
	n = get8(r);
	get16(r);
	u->qp_num = get32(r) & 0xffffff;
	u->private_data_len = n;
	if (n) {
		getn(r, e->priv, n);
		u->private_data = e->priv;
	}
}

static void fill_route(struct cm_id *i)
{
	struct ibv_sa_path_rec *p = &i->path;

	memset(p, 0, sizeof(*p));
	sa_gid(&i->id.route.addr.dst_addr, &p->dgid);
	p->sgid = i->dev ? i->dev->gid : p->sgid;
	p->hop_limit = 64;
	p->reversible = 1;
	p->numb_path = 1;
	p->pkey = htobe16(0xffff);
	p->mtu_selector = 2;
	p->mtu = i->dev ? i->dev->mtu : IBV_MTU_1024;
	p->rate_selector = 2;
	p->packet_life_time_selector = 2;
	i->id.route.path_rec = p;
	i->id.route.num_paths = 1;
	i->id.route.addr.addr.ibaddr.sgid = p->sgid;
	i->id.route.addr.addr.ibaddr.dgid = p->dgid;
	i->id.route.addr.addr.ibaddr.pkey = p->pkey;
}

/*
 * process turns a daemon event into the program's (librdmacm's rdma_get_cm_event):
 * 0 with *out, or 1 to drop it and read on.
 */
static int process(struct cm_chan *c, struct raw *raw, struct cm_evt **out)
{
	struct rd r = { raw->b, raw->n, 0 };
	uint32_t type = get32(&r);
	int32_t status = (int32_t)get32(&r);
	uint64_t uid = raw->uid; /* ours, as deliver found the id */
	uint32_t hid, lhid;
	struct sockaddr_storage local, remote;
	struct ibv_ah_attr ah;
	uint32_t qkey;
	struct cm_evt *e;
	struct cm_id *i;

	get64(&r); /* the daemon's uid: see id_by_h */
	hid = get32(&r);
	lhid = get32(&r);
	(void)lhid;
	get_addr(&r, &local);
	get_addr(&r, &remote);
	qkey = get32(&r);
	decode_av(&r, &ah);
	if (r.bad)
		return 1;
	e = calloc(1, sizeof(*e));
	if (!e)
		return 1;
	pthread_mutex_lock(&gmu);
	i = id_by_uid(uid);
	if (!i || (struct cm_chan *)i->id.channel != c) {
		pthread_mutex_unlock(&gmu);
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST && i && i->dev)
			cmd_h(i->dev, OP_DESTROY_ID, hid);
		free(e);
		return 1;
	}
	i->reported++;
	e->counted = i;
	pthread_mutex_unlock(&gmu);
	e->ev.id = &i->id;
	e->ev.event = type;
	e->ev.status = status;
	if (i->dev)
		ah.grh.sgid_index = (uint8_t)i->dev->gid_index;
	{
		/* an event with no address vector (a SIDR request's): the peer's, from its address */
		static const uint8_t zero[16];

		if (!memcmp(ah.grh.dgid.raw, zero, 16) && sa_gid((struct sockaddr *)&remote, &ah.grh.dgid)) {
			ah.grh.hop_limit = 64;
			ah.port_num = 1;
		}
	}
	if (!ah.port_num)
		ah.port_num = 1;
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (i->nodev && !status && expose(i))
			dbg("rdma_resolve_addr: no PD for the id's device: ENOMEM");
		if (local.ss_family)
			i->id.route.addr.src_storage = local;
		if (remote.ss_family)
			i->id.route.addr.dst_storage = remote;
		i->id.route.addr.addr.ibaddr.sgid = i->dev->gid;
		sa_gid(&i->id.route.addr.dst_addr, &i->id.route.addr.addr.ibaddr.dgid);
		i->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		fill_route(i);
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		int e2 = 0;
		struct cm_id *n = id_alloc(i->sync ? NULL : i->id.channel, i->id.context, i->id.ps, i->id.qp_type, &e2);

		if (!n) {
			dbg("a connection request could not get an id: %s", strerror(e2));
			cmd_h(i->dev, OP_DESTROY_ID, hid);
			goto drop;
		}
		n->h = hid;
		n->dev = i->dev;
		n->id.verbs = i->dev->verbs; /* the listener's may be NULL: bound to the any address */
		n->id.pd = i->id.pd ? i->id.pd : default_pd(i->dev); /* the listener's, or the device's */
		n->id.port_num = 1;
		n->id.route.addr.src_storage = local;
		n->id.route.addr.dst_storage = remote;
		fill_route(n);
		if (i->id.qp_type == IBV_QPT_UD)
			copy_ud(e, qkey, &ah, &r);
		else
			copy_conn(e, &r);
		n->resp_res = e->ev.param.conn.responder_resources;
		n->init_depth = e->ev.param.conn.initiator_depth;
		if (i->id.qp_type == IBV_QPT_UD)
			n->resp_res = n->init_depth = 0;
		e->ev.listen_id = &i->id;
		e->ev.id = &n->id;
		break;
	}
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		copy_conn(e, &r);
		if (live_qp(&i->id)) {
			int rc = rtr_rts(i, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH);

			if (!rc)
				rc = cmd_h(i->dev, OP_ESTABLISH, i->h);
			if (!rc) {
				e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
			} else {
				e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
				e->ev.status = -rc;
				i->connect_error = 1;
			}
		}
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (i->id.qp_type == IBV_QPT_UD)
			copy_ud(e, qkey, &ah, &r);
		else
			copy_conn(e, &r);
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DISCONNECTED:
		if (i->connect_error)
			goto drop;
		copy_conn(e, &r);
		if (type == RDMA_CM_EVENT_REJECTED) {
			dbg("connection to port %u rejected: reason %d%s", ntohs(rdma_get_dst_port(&i->id)), status,
			    status == 8 ? " (no listener)" : status == 28 ? " (by the peer)" : "");
			modify_err(i);
		}
		break;
	case RDMA_CM_EVENT_MULTICAST_JOIN: {
		union ibv_gid g;
		struct cm_mc *m;

		sa_gid((struct sockaddr *)&remote, &g);
		pthread_mutex_lock(&gmu);
		for (m = i->mcs; m; m = m->next) {
			union ibv_gid mg;

			sa_gid((struct sockaddr *)&m->addr, &mg);
			if (!memcmp(mg.raw, g.raw, 16))
				break;
		}
		pthread_mutex_unlock(&gmu);
		copy_ud(e, qkey, &ah, &r);
		if (!m)
			goto drop; /* left already */
		e->ev.param.ud.private_data = m->context;
		e->ev.param.ud.private_data_len = 0;
		m->mgid = ah.grh.dgid;
		if (live_qp(&i->id) && !m->send_only && !m->attached) {
			int rc = ibv_attach_mcast(i->id.qp, &m->mgid, 0);

			if (rc) {
				e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
				e->ev.status = -rc;
			} else {
				m->attached = 1;
			}
		}
		if (e->ev.event == RDMA_CM_EVENT_MULTICAST_JOIN)
			dbg("joined a multicast group on %s", ibv_get_device_name(i->dev->verbs->device));
		break;
	}
	default:
		if (i->id.qp_type == IBV_QPT_UD)
			copy_ud(e, qkey, &ah, &r);
		else
			copy_conn(e, &r);
		break;
	}
	pthread_mutex_lock(&gmu);
	e->next = evts;
	evts = e;
	pthread_mutex_unlock(&gmu);
	*out = e;
	return 0;
drop:
	pthread_mutex_lock(&gmu);
	i->completed++;
	pthread_cond_broadcast(&gcv);
	pthread_mutex_unlock(&gmu);
	free(e);
	return 1;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cm_chan *c;
	struct cm_evt *e = NULL;

	if (!event)
		return err(EINVAL);
	pthread_mutex_lock(&gmu);
	c = chan_find(channel);
	if (!c) {
		pthread_mutex_unlock(&gmu);
		dbg("rdma_get_cm_event: %p is not a live event channel: EINVAL", (void *)channel);
		return err(EINVAL);
	}
	c->waiters++;
	pthread_mutex_unlock(&gmu);
	for (;;) {
		char t;
		/* blocked here the thread cannot touch the program's memory: parked (gva_private.c) */
		goverbs_attach_park();
		ssize_t n = read(c->ch.fd, &t, 1);
		int e0 = errno;
		goverbs_attach_unpark();
		struct raw *r;

		pthread_mutex_lock(&gmu);
		if (c->closing || n == 0) {
			c->waiters--;
			pthread_cond_broadcast(&gcv);
			pthread_mutex_unlock(&gmu);
			dbg("rdma_get_cm_event: the channel was destroyed: EBADF");
			return err(EBADF);
		}
		if (n < 0) {
			c->waiters--;
			pthread_cond_broadcast(&gcv);
			pthread_mutex_unlock(&gmu);
			return err(e0);
		}
		r = c->head;
		if (r) {
			c->head = r->next;
			if (!c->head)
				c->tail = NULL;
		}
		pthread_mutex_unlock(&gmu);
		if (!r)
			continue; /* the token of an event purged with its id */
		int drop = process(c, r, &e);
		free(r);
		if (!drop)
			break;
	}
	pthread_mutex_lock(&gmu);
	c->waiters--;
	pthread_cond_broadcast(&gcv);
	pthread_mutex_unlock(&gmu);
	*event = &e->ev;
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cm_evt *e = (struct cm_evt *)event, **p;

	if (!event)
		return err(EINVAL);
	pthread_mutex_lock(&gmu);
	for (p = &evts; *p && *p != e; p = &(*p)->next)
		;
	if (!*p) {
		pthread_mutex_unlock(&gmu);
		dbg("rdma_ack_cm_event: %p is not an event to ack (acked already?): EINVAL", (void *)event);
		return err(EINVAL);
	}
	*p = e->next;
	e->counted->completed++;
	pthread_cond_broadcast(&gcv);
	pthread_mutex_unlock(&gmu);
	free(e);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default: return "UNKNOWN EVENT";
	}
}

/* ---- the rest of the id's calls ---- */

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **l;

	have_devs();
	l = calloc(ndevs + 1, sizeof(*l));
	if (!l)
		return NULL;
	for (int i = 0; i < ndevs; i++)
		l[i] = devs[i].verbs;
	if (num_devices)
		*num_devices = ndevs;
	return l;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	if (!id)
		return 0;
	const struct sockaddr *s = &id->route.addr.src_addr;
	return s->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)s)->sin6_port :
	       s->sa_family == AF_INET	? ((const struct sockaddr_in *)s)->sin_port : 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	if (!id)
		return 0;
	const struct sockaddr *s = &id->route.addr.dst_addr;
	return s->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)s)->sin6_port :
	       s->sa_family == AF_INET	? ((const struct sockaddr_in *)s)->sin_port : 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	struct cm_id *i = checked(id, "rdma_set_option");

	if (!i)
		return -1;
	if (!optval)
		return err(EINVAL);
	if (level == RDMA_OPTION_ID) {
		uint32_t val;

		switch (optname) {
		case RDMA_OPTION_ID_TOS:
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return err(EINVAL);
			val = *(uint8_t *)optval;
			break;
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return err(EINVAL);
			val = *(int *)optval != 0;
			break;
		default:
			dbg("rdma_set_option: option %d of level RDMA_OPTION_ID is not served: ENOSYS", optname);
			return err(ENOSYS);
		}
		if (i->h) {
			int rc = set_option(i, optname, val);

			if (rc) {
				dbg("rdma_set_option: option %d value %u: %s", optname, val, strerror(rc));
				return err(rc);
			}
		} else if (optname == RDMA_OPTION_ID_ACK_TIMEOUT && (val > 31 || i->id.qp_type != IBV_QPT_RC)) {
			return err(EINVAL); /* what the daemon would say, said now */
		}
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			i->tos = (uint8_t)val;
			i->tos_set = 1;
			break;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			i->timeout = (uint8_t)val;
			i->timeout_set = 1;
			break;
		case RDMA_OPTION_ID_REUSEADDR:
			i->reuseaddr = (int)val;
			break;
		default:
			i->afonly = (int)val;
		}
		return 0;
	}
	dbg("rdma_set_option: level %d option %d is not served: ENOSYS", level, optname);
	return err(ENOSYS);
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cm_id *i = checked(id, "rdma_migrate_id");
	struct rdma_event_channel *made = NULL;
	struct cm_chan *oc, *nc;

	if (!i)
		return -1;
	if (i->sync && !channel) {
		dbg("rdma_migrate_id: the id is synchronous already: EINVAL");
		return err(EINVAL);
	}
	/* as librdmacm, a synchronous id's last event (id->event, left for the program to
	 * read) is acked first: else the wait below would wait for ever (libfabric's verbs
	 * provider moves its endpoints' ids, resolved synchronously, to its event queue) */
	if (i->sync && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (!channel) {
		if (!(made = channel = rdma_create_event_channel()))
			return -1;
	}
	pthread_mutex_lock(&gmu);
	nc = chan_find(channel);
	oc = (struct cm_chan *)id->channel;
	if (!nc) {
		pthread_mutex_unlock(&gmu);
		dbg("rdma_migrate_id: %p is not a live event channel: EINVAL", (void *)channel);
		return err(EINVAL);
	}
	/* as librdmacm, wait until the program acked the id's events */
	while (i->completed < i->reported)
		pthread_cond_wait(&gcv, &gmu);
	/* the id's events not yet taken move with it */
	struct raw **p = &oc->head, *last = NULL;
	while (*p) {
		struct raw *r = *p;
		char t;

		if (r->uid == i->uid) {
			*p = r->next;
			if (recv(oc->ch.fd, &t, 1, MSG_DONTWAIT) != 1) {
				/* taken by a waiter, who reads on */
			}
			chan_push(nc, r);
			continue;
		}
		last = r;
		p = &r->next;
	}
	oc->tail = last;
	oc->nids--;
	nc->nids++;
	id->channel = channel;
	struct cm_chan *old_own = i->own;
	i->own = made ? nc : NULL;
	i->sync = made != NULL;
	pthread_mutex_unlock(&gmu);
	if (old_own)
		rdma_destroy_event_channel(&old_own->ch);
	return 0;
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *l = checked(listen, "rdma_get_request");
	struct rdma_cm_event *e;
	int rc;

	if (!l)
		return -1;
	if (!id || !l->sync || !l->listening) {
		dbg("rdma_get_request: not a listener made with a NULL channel: EINVAL");
		return err(EINVAL);
	}
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &e))
		return -1;
	if (e->status) {
		rc = e->status < 0 ? -e->status : e->status;
		goto fail;
	}
	if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		rc = EINVAL;
		goto fail;
	}
	if (l->qp_init) {
		struct ibv_qp_init_attr a = *l->qp_init;

		if (rdma_create_qp(e->id, listen->pd, &a)) {
			rc = errno;
			rdma_destroy_id(e->id);
			goto fail;
		}
	}
	*id = e->id;
	(*id)->event = e;
	return 0;
fail:
	rdma_ack_cm_event(e);
	return err(rc);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	struct cm_id *i = checked(id, "rdma_join_multicast");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	struct cm_dev *d;
	struct cm_mc *m;
	int rc = 0, send_only = 0;

	if (!i)
		return -1;
	if (!attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr || !sa_len(attr->addr)) {
		dbg("rdma_join_multicast: no IPv4 or IPv6 group address: EINVAL");
		return err(EINVAL);
	}
	if (attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))
		return err(EINVAL);
	if (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) {
		if (attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
			send_only = 1;
		else if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER) {
			dbg("rdma_join_multicast_ex: join flag %u is not served: EINVAL", attr->join_flags);
			return err(EINVAL);
		}
	}
	if (id->ps != RDMA_PS_UDP && id->ps != RDMA_PS_IPOIB) {
		dbg("rdma_join_multicast: only UD ids (RDMA_PS_UDP, RDMA_PS_IPOIB) join groups: EINVAL");
		return err(EINVAL);
	}
	if (!(d = i->h ? i->dev : pick_dev(NULL, attr->addr, &rc)))
		return err(rc);
	if ((rc = ensure_h(i, d)))
		return err(rc);
	if (!(m = calloc(1, sizeof(*m))))
		return err(ENOMEM);
	memcpy(&m->addr, attr->addr, sa_len(attr->addr));
	m->context = context;
	m->send_only = send_only;
	pthread_mutex_lock(&gmu);
	m->next = i->mcs;
	i->mcs = m;
	pthread_mutex_unlock(&gmu);
	put32(&w, i->h);
	put_addr(&w, attr->addr);
	put8(&w, (uint8_t)send_only);
	if ((rc = command(d, OP_JOIN_MCAST, &w, rep, NULL, NULL, 0))) {
		pthread_mutex_lock(&gmu);
		for (struct cm_mc **p = &i->mcs; *p; p = &(*p)->next)
			if (*p == m) {
				*p = m->next;
				break;
			}
		pthread_mutex_unlock(&gmu);
		free(m);
		return err(rc);
	}
	return complete(i);
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex a = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					     .join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER, .addr = addr };

	return rdma_join_multicast_ex(id, &a, context);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_id *i = checked(id, "rdma_leave_multicast");
	struct wr w = { .n = 0 };
	uint8_t rep[MAX_MSG];
	union ibv_gid g;
	struct cm_mc *m = NULL;
	int rc;

	if (!i)
		return -1;
	if (!addr || !sa_gid(addr, &g))
		return err(EINVAL);
	pthread_mutex_lock(&gmu);
	for (struct cm_mc **p = &i->mcs; *p; p = &(*p)->next) {
		union ibv_gid mg;

		sa_gid((struct sockaddr *)&(*p)->addr, &mg);
		if (!memcmp(mg.raw, g.raw, 16)) {
			m = *p;
			*p = m->next;
			break;
		}
	}
	pthread_mutex_unlock(&gmu);
	if (!m) {
		dbg("rdma_leave_multicast: the id has not joined that group: EADDRNOTAVAIL");
		return err(EADDRNOTAVAIL);
	}
	if (m->attached && live_qp(id))
		ibv_detach_mcast(id->qp, &m->mgid, 0);
	free(m);
	put32(&w, i->h);
	put_addr(&w, addr);
	if ((rc = command(i->dev, OP_LEAVE_MCAST, &w, rep, NULL, NULL, 0)))
		return err(rc);
	return 0;
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	dbg("rdma_set_local_ece: ECE is not served: EOPNOTSUPP");
	return err(EOPNOTSUPP);
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	dbg("rdma_get_remote_ece: ECE is not served: EOPNOTSUPP");
	return err(EOPNOTSUPP);
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

/* ---- rdma_getaddrinfo and endpoints ---- */

/* copy_sa sets *to to a copy of the n bytes of sa (none when n is 0); 0 or ENOMEM. */
static int copy_sa(struct sockaddr **to, socklen_t *tolen, const struct sockaddr *sa, socklen_t n)
{
	if (!n || !sa)
		return 0;
	if (!(*to = malloc(n)))
		return ENOMEM;
	memcpy(*to, sa, n);
	*tolen = n;
	return 0;
}

/*
 * addrinfo_of_hints is rdma_getaddrinfo with neither node nor service: the answer is
 * the hints' own addresses and settings, as librdmacm gives it (pyverbs' AddrInfo with a
 * source only, for a multicast join, asks that).
 */
static int addrinfo_of_hints(const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));

	if (!r)
		return err(ENOMEM);
	r->ai_flags = hints->ai_flags;
	r->ai_family = hints->ai_family;
	r->ai_qp_type = hints->ai_qp_type;
	r->ai_port_space = hints->ai_port_space;
	if (copy_sa(&r->ai_dst_addr, &r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len) ||
	    copy_sa(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr, hints->ai_src_len)) {
		rdma_freeaddrinfo(r);
		return err(ENOMEM);
	}
	*res = r;
	return 0;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct addrinfo h = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	struct rdma_addrinfo *r;
	int rc, passive = hints && (hints->ai_flags & RAI_PASSIVE);

	if (!res || (!node && !service && !hints))
		return err(EINVAL);
	if (!node && !service)
		return addrinfo_of_hints(hints, res);
	if (hints && (hints->ai_flags & RAI_NUMERICHOST))
		h.ai_flags |= AI_NUMERICHOST;
	if (passive)
		h.ai_flags |= AI_PASSIVE;
	if (hints && (hints->ai_family == AF_INET || hints->ai_family == AF_INET6))
		h.ai_family = hints->ai_family;
	else if (hints && hints->ai_family && hints->ai_family != AF_UNSPEC) {
		dbg("rdma_getaddrinfo: address family %d is not served (AF_INET, AF_INET6 are): EAFNOSUPPORT",
		    hints->ai_family);
		return err(EAFNOSUPPORT);
	}
	rc = getaddrinfo(node, service, &h, &ai);
	if (rc) {
		dbg("rdma_getaddrinfo: %s", gai_strerror(rc));
		return err(rc == EAI_SYSTEM ? errno : (rc == EAI_MEMORY ? ENOMEM : EADDRNOTAVAIL));
	}
	if (!(r = calloc(1, sizeof(*r)))) {
		freeaddrinfo(ai);
		return err(ENOMEM);
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type :
			(r->ai_port_space == RDMA_PS_UDP || r->ai_port_space == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC);
	struct sockaddr *a = malloc(ai->ai_addrlen);
	if (!a) {
		free(r);
		freeaddrinfo(ai);
		return err(ENOMEM);
	}
	memcpy(a, ai->ai_addr, ai->ai_addrlen);
	if (passive) {
		r->ai_src_addr = a;
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = a;
		r->ai_dst_len = ai->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = malloc(hints->ai_src_len);
			if (r->ai_src_addr) {
				memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				r->ai_src_len = hints->ai_src_len;
			}
		}
	}
	if (node)
		r->ai_dst_canonname = passive ? NULL : strdup(node);
	freeaddrinfo(ai);
	*res = r;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	struct cm_id *i;

	if (!id || !res)
		return err(EINVAL);
	if (res->ai_route_len) {
		dbg("rdma_create_ep: route data (ai_route) is not served: EINVAL");
		return err(EINVAL);
	}
	if (rdma_create_id(NULL, &cid, NULL, res->ai_port_space))
		return -1;
	i = (struct cm_id *)cid;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cid, res->ai_src_addr))
			goto fail;
		if (qp_init_attr) {
			i->qp_init = malloc(sizeof(*qp_init_attr));
			if (!i->qp_init) {
				errno = ENOMEM;
				goto fail;
			}
			*i->qp_init = *qp_init_attr;
			i->qp_init->qp_type = res->ai_qp_type;
		}
		cid->pd = pd;
		*id = cid;
		return 0;
	}
	if (rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000) || rdma_resolve_route(cid, 2000))
		goto fail;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		if (rdma_create_qp(cid, pd, qp_init_attr))
			goto fail;
	}
	if (res->ai_connect_len) {
		i->connect = malloc(res->ai_connect_len);
		if (!i->connect) {
			errno = ENOMEM;
			goto fail;
		}
		memcpy(i->connect, res->ai_connect, res->ai_connect_len);
		i->connect_len = res->ai_connect_len;
	}
	*id = cid;
	return 0;
fail:;
	int e = errno;
	rdma_destroy_ep(cid);
	return err(e);
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!checked(id, "rdma_destroy_ep"))
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}
