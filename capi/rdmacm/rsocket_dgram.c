/*
 * Datagram rsockets: SOCK_DGRAM over a UD QP, in rsockets' datagram protocol (rdma-core's
 * librdmacm/docs/rsocket, "Datagram Overview"; docs/guide/cm-rdmanet.md, "Datagram
 * rsockets", writes down the wire format; goverbs' Go package rdmanet speaks it too).
 *
 * A datagram rsocket is a kernel UDP socket (its number is the socket's) and, made at
 * its first need, one UD QP on the device of the socket's address. A datagram to a peer
 * whose QPN is not known yet goes over the UDP socket behind a ds_udp_header carrying
 * this socket's QPN; the peer answers a data message with a header-only control message
 * carrying its own QPN. Once a peer's QPN is known, datagrams go as UD SENDs behind a
 * ds_header naming the sender's address and UDP port. Both headers are checked on the
 * way in, and anything malformed is dropped.
 *
 * This file's own choices within the protocol:
 *  - no service thread: whichever call runs (send, receive, rpoll) reads the UDP socket
 *    and the CQ; a blocking call waits in poll(2) on both;
 *  - one QP per socket, on the device whose address the socket is bound to; a socket
 *    bound to no address (a client that only connects or sends) is first bound to its
 *    device's address, port 0, so that the kernel's choice of source (127.0.0.1 on
 *    loopback) cannot name an address without a device;
 *  - a datagram that came over UDP is queued directly for the reader (rsockets sends
 *    it to itself through its own QP);
 *  - datagrams of at most 2048 bytes with the header (rsockets' receive buffers), less
 *    the larger UDP header: longer sends fail with EMSGSIZE;
 *  - a queue of 512 received datagrams beside 256 posted receives: what arrives when
 *    both are full is dropped, as a UDP socket drops;
 *  - sends complete on a CQ of their own, armed only while a call waits for a send
 *    buffer, so that a send wakes nobody: on one CQ, a program waiting for an answer
 *    was woken first for its own send's completion.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rsocket_dgram.h"


#define UDP_TAG 0x55555555u
#define UDP_HDR4 16 /* tag, version, op, length, reserved, qpn, IPv4 address */
#define UDP_HDR6 28 /* ... IPv6 address */
#define UD_HDR4 8   /* version, length, port, IPv4 address */
#define UD_HDR6 24  /* version, length, port, flow label, IPv6 address */
#define OP_DATA 0
#define OP_CTRL 7
#define GRH_LEN 40
#define SLOT 2048 /* a datagram with its header, as rsockets' receive buffers */
#define RQ_N 256
#define SQ_N 64
#define QUEUE_N 512
#define DEST_MAX 256

struct dest {
	struct sockaddr_storage sa;
	uint32_t qpn;
	struct ibv_ah *ah;
};

struct rmsg {
	struct sockaddr_storage from;
	uint32_t len;
	uint8_t data[SLOT];
};

struct dsk {
	pthread_mutex_t mu;
	int fd, family;
	int connected;
	struct sockaddr_storage peer;
	int sndbuf, rcvbuf;
	/* the QP, made at the first need */
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq, *scq; /* receives' (armed whenever a call waits), sends' */
	struct ibv_qp *qp;
	struct ibv_mr *rmr, *smr;
	uint8_t *rbuf, *sbuf;
	int armed, sarmed, gid_index, port;
	unsigned scans; /* dg_revents' calls, for its reads of the UDP socket */
	int sfree[SQ_N], nfree;
	uint8_t hdr[UD_HDR6];
	int hdrlen;
	struct sockaddr_storage local;
	/* peers */
	struct dest *dests;
	int ndest;
	/* received, not yet read */
	struct rmsg *q;
	int qhead, qn;
};

static int fail(int e)
{
	errno = e;
	return -1;
}

static socklen_t sa_size(const struct sockaddr *a)
{
	return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int sa_valid(const struct sockaddr *a, socklen_t l, int family)
{
	return a && a->sa_family == family && l >= sa_size(a);
}

static int sa_same(const struct sockaddr_storage *x, const struct sockaddr *y)
{
	if (x->ss_family != y->sa_family)
		return 0;
	if (y->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)x, *b = (const void *)y;

		return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *a = (const void *)x, *b = (const void *)y;

	return a->sin6_port == b->sin6_port && !memcmp(&a->sin6_addr, &b->sin6_addr, 16);
}

static void gid_of(const struct sockaddr *a, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (a->sa_family == AF_INET) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(g->raw + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
	} else {
		memcpy(g->raw, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
	}
}

static int sa_any(const struct sockaddr *a)
{
	static const uint8_t zero[16];

	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, zero, 16);
}

struct dsk *dg_new(int domain)
{
	struct dsk *d = calloc(1, sizeof(*d));

	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	d->q = calloc(QUEUE_N, sizeof(*d->q));
	d->dests = calloc(DEST_MAX, sizeof(*d->dests));
	d->fd = socket(domain, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (!d->q || !d->dests || d->fd < 0) {
		int e = d->fd < 0 ? errno : ENOMEM;

		if (d->fd >= 0)
			close(d->fd);
		free(d->q);
		free(d->dests);
		free(d);
		errno = e;
		return NULL;
	}
	pthread_mutex_init(&d->mu, NULL);
	d->family = domain;
	d->sndbuf = d->rcvbuf = SLOT * RQ_N;
	return d;
}

int dg_fd(struct dsk *d) { return d->fd; }


/* ---- the QP ---- */

static void put_be32(uint8_t *b, uint32_t v) { v = htobe32(v); memcpy(b, &v, 4); }
static uint32_t get_be32(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return be32toh(v); }

/* ud_header writes the ds_header naming a (an address and UDP port) into h. */
static int ud_header(uint8_t *h, const struct sockaddr *a)
{
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)a;

		h[0] = 4, h[1] = UD_HDR4;
		memcpy(h + 2, &s->sin_port, 2);
		memcpy(h + 4, &s->sin_addr, 4);
		return UD_HDR4;
	}
	const struct sockaddr_in6 *s = (const void *)a;

	h[0] = 6, h[1] = UD_HDR6;
	memcpy(h + 2, &s->sin6_port, 2);
	memcpy(h + 4, &s->sin6_flowinfo, 4);
	memcpy(h + 8, &s->sin6_addr, 16);
	return UD_HDR6;
}

static int post_recv(struct dsk *d, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(d->rbuf + (size_t)i * (GRH_LEN + SLOT)),
		.length = GRH_LEN + SLOT,
		.lkey = d->rmr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;

	return ibv_post_recv(d->qp, &wr, &bad);
}

static void free_qp(struct dsk *d)
{
	for (int i = 0; i < d->ndest; i++)
		if (d->dests[i].ah) {
			ibv_destroy_ah(d->dests[i].ah);
			d->dests[i].ah = NULL;
		}
	if (d->id && d->id->qp)
		rdma_destroy_qp(d->id);
	d->qp = NULL;
	if (d->rmr)
		ibv_dereg_mr(d->rmr);
	if (d->smr)
		ibv_dereg_mr(d->smr);
	d->rmr = d->smr = NULL;
	if (d->cq)
		ibv_destroy_cq(d->cq);
	if (d->scq)
		ibv_destroy_cq(d->scq);
	d->cq = d->scq = NULL;
	if (d->cc)
		ibv_destroy_comp_channel(d->cc);
	d->cc = NULL;
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	d->pd = NULL;
	if (d->id)
		rdma_destroy_id(d->id);
	d->id = NULL;
	free(d->rbuf);
	free(d->sbuf);
	d->rbuf = d->sbuf = NULL;
}

/* local_addr gives the socket an address with a device: its own if it is bound to
 * one, else (bound to the any address, or not at all) its device's; an unbound socket
 * is bound to its device's address, port 0, first. It binds d->id on the way. */
static int local_addr(struct dsk *d)
{
	struct sockaddr_storage ss, any;
	socklen_t l = sizeof(ss);

	if (getsockname(d->fd, (struct sockaddr *)&ss, &l))
		return -1;
	if (!sa_any((struct sockaddr *)&ss)) {
		struct sockaddr_storage b = ss;

		/* the rdma_cm id only picks the device: port 0, any free one */
		if (b.ss_family == AF_INET)
			((struct sockaddr_in *)&b)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&b)->sin6_port = 0;
		if (goverbs_cm_bind_device(d->id, (struct sockaddr *)&b))
			return -1;
		d->local = ss;
		return 0;
	}
	memset(&any, 0, sizeof(any));
	any.ss_family = d->family;
	if (goverbs_cm_bind_device(d->id, (struct sockaddr *)&any))
		return -1;
	union ibv_gid g = d->id->route.addr.addr.ibaddr.sgid;
	static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	struct sockaddr_storage dev;

	memset(&dev, 0, sizeof(dev));
	if (d->family == AF_INET) {
		struct sockaddr_in *s = (void *)&dev;

		if (memcmp(g.raw, v4, 12))
			return fail(EADDRNOTAVAIL);
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, g.raw + 12, 4);
		s->sin_port = ((struct sockaddr_in *)&ss)->sin_port;
	} else {
		struct sockaddr_in6 *s = (void *)&dev;

		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, g.raw, 16);
		s->sin6_port = ((struct sockaddr_in6 *)&ss)->sin6_port;
	}
	if (((struct sockaddr_in *)&ss)->sin_port == 0) { /* sin6_port sits there too */
		if (bind(d->fd, (struct sockaddr *)&dev, sa_size((struct sockaddr *)&dev)))
			return -1;
		l = sizeof(dev);
		if (getsockname(d->fd, (struct sockaddr *)&dev, &l))
			return -1;
	}
	d->local = dev;
	return 0;
}

/* ensure_qp makes the socket's UD QP if it has none. */
static int ensure_qp(struct dsk *d)
{
	struct ibv_qp_init_attr qa;
	struct ibv_port_attr pa;
	union ibv_gid want, g;
	int e;

	if (d->qp)
		return 0;
	if (rdma_create_id(NULL, &d->id, d, RDMA_PS_UDP))
		return -1;
	if (local_addr(d))
		goto bad;
	d->port = d->id->port_num ? d->id->port_num : 1;
	gid_of((struct sockaddr *)&d->local, &want);
	d->gid_index = 0;
	if (!ibv_query_port(d->id->verbs, d->port, &pa))
		for (int k = 0; k < pa.gid_tbl_len && k < 256; k++)
			if (!ibv_query_gid(d->id->verbs, d->port, k, &g) && !memcmp(g.raw, want.raw, 16)) {
				d->gid_index = k;
				break;
			}
	if (!(d->pd = ibv_alloc_pd(d->id->verbs)) || !(d->cc = ibv_create_comp_channel(d->id->verbs)))
		goto bad;
	fcntl(d->cc->fd, F_SETFL, fcntl(d->cc->fd, F_GETFL) | O_NONBLOCK);
	if (!(d->cq = ibv_create_cq(d->id->verbs, RQ_N, d, d->cc, 0)) ||
	    !(d->scq = ibv_create_cq(d->id->verbs, SQ_N, d, d->cc, 0)))
		goto bad;
	d->rbuf = malloc((size_t)RQ_N * (GRH_LEN + SLOT));
	d->sbuf = malloc((size_t)SQ_N * SLOT);
	if (!d->rbuf || !d->sbuf) {
		errno = ENOMEM;
		goto bad;
	}
	d->rmr = ibv_reg_mr(d->pd, d->rbuf, (size_t)RQ_N * (GRH_LEN + SLOT), IBV_ACCESS_LOCAL_WRITE);
	d->smr = ibv_reg_mr(d->pd, d->sbuf, (size_t)SQ_N * SLOT, 0);
	if (!d->rmr || !d->smr)
		goto bad;
	memset(&qa, 0, sizeof(qa));
	qa.qp_context = d;
	qa.send_cq = d->scq;
	qa.recv_cq = d->cq;
	qa.qp_type = IBV_QPT_UD;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = SQ_N;
	qa.cap.max_recv_wr = RQ_N;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(d->id, d->pd, &qa)) /* to RTS, Q_Key RDMA_UDP_QKEY */
		goto bad;
	d->qp = d->id->qp;
	for (int i = 0; i < RQ_N; i++)
		if (post_recv(d, i))
			goto bad;
	for (int i = 0; i < SQ_N; i++)
		d->sfree[i] = SQ_N - 1 - i;
	d->nfree = SQ_N;
	d->hdrlen = ud_header(d->hdr, (struct sockaddr *)&d->local);
	return 0;
bad:
	e = errno ? errno : ENOMEM;
	free_qp(d);
	return fail(e);
}

/* ---- peers ---- */

static struct dest *find_dest(struct dsk *d, const struct sockaddr *a)
{
	for (int i = 0; i < d->ndest; i++)
		if (sa_same(&d->dests[i].sa, a))
			return &d->dests[i];
	return NULL;
}

static struct dest *get_dest(struct dsk *d, const struct sockaddr *a)
{
	struct dest *t = find_dest(d, a);

	if (t)
		return t;
	if (d->ndest == DEST_MAX) {
		errno = ENOBUFS;
		return NULL;
	}
	t = &d->dests[d->ndest++];
	memset(t, 0, sizeof(*t));
	memcpy(&t->sa, a, sa_size(a));
	return t;
}

/* learn records a peer's QPN and makes the address handle to reach it. */
static void learn(struct dsk *d, struct dest *t, uint32_t qpn)
{
	struct ibv_ah_attr aa;

	if (t->ah && t->qpn == qpn)
		return;
	if (t->ah)
		ibv_destroy_ah(t->ah);
	t->ah = NULL;
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	gid_of((struct sockaddr *)&t->sa, &aa.grh.dgid);
	aa.grh.sgid_index = d->gid_index;
	aa.grh.hop_limit = 64;
	aa.port_num = d->port;
	t->ah = ibv_create_ah(d->pd, &aa);
	t->qpn = qpn;
}

/* ---- the UDP socket: unresolved peers and QPN exchange ---- */

static ssize_t udp_send(struct dsk *d, const struct sockaddr *to, uint8_t op, const struct iovec *iov, int iovcnt)
{
	uint8_t h[UDP_HDR6];
	struct iovec v[9];
	struct msghdr m;
	int n = d->family == AF_INET ? UDP_HDR4 : UDP_HDR6;
	ssize_t r;

	if (iovcnt > 8)
		return fail(EMSGSIZE);
	memset(h, 0, sizeof(h));
	put_be32(h, UDP_TAG);
	h[4] = d->family == AF_INET ? 4 : 6;
	h[5] = op;
	h[6] = (uint8_t)n;
	put_be32(h + 8, d->qp->qp_num & 0xffffff);
	if (d->family == AF_INET)
		memcpy(h + 12, &((struct sockaddr_in *)&d->local)->sin_addr, 4);
	else
		memcpy(h + 12, &((struct sockaddr_in6 *)&d->local)->sin6_addr, 16);
	v[0] = (struct iovec){.iov_base = h, .iov_len = n};
	if (iovcnt)
		memcpy(v + 1, iov, iovcnt * sizeof(*iov));
	memset(&m, 0, sizeof(m));
	m.msg_name = (void *)to;
	m.msg_namelen = sa_size(to);
	m.msg_iov = v;
	m.msg_iovlen = iovcnt + 1;
	r = sendmsg(d->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	return r < 0 ? r : r - n;
}

static void enqueue(struct dsk *d, const struct sockaddr *from, const uint8_t *p, uint32_t n)
{
	struct rmsg *m;

	if (d->qn == QUEUE_N || n > SLOT)
		return; /* full: dropped, as a datagram may be */
	m = &d->q[(d->qhead + d->qn) % QUEUE_N];
	memset(&m->from, 0, sizeof(m->from));
	memcpy(&m->from, from, sa_size(from));
	m->len = n;
	memcpy(m->data, p, n);
	d->qn++;
}

/* udp_in handles one datagram of the UDP socket; it returns 0 when there was none. */
static int udp_in(struct dsk *d)
{
	uint8_t b[SLOT + UDP_HDR6];
	struct sockaddr_storage from;
	socklen_t fl = sizeof(from);
	ssize_t n = recvfrom(d->fd, b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
	int want = d->family == AF_INET ? UDP_HDR4 : UDP_HDR6;
	struct dest *t;
	uint8_t op;

	if (n < 0)
		return 0;
	if (n < want || get_be32(b) != UDP_TAG || b[4] != (d->family == AF_INET ? 4 : 6) || b[6] != want ||
	    from.ss_family != d->family)
		return 1; /* not an rsockets header: dropped */
	op = b[5];
	if (op != OP_DATA && op != OP_CTRL)
		return 1;
	if (ensure_qp(d) || !(t = get_dest(d, (struct sockaddr *)&from)))
		return 1;
	if (op == OP_DATA)
		udp_send(d, (struct sockaddr *)&from, OP_CTRL, NULL, 0); /* our QPN, for its replies */
	learn(d, t, get_be32(b + 8) & 0xffffff);
	if (op == OP_DATA)
		enqueue(d, (struct sockaddr *)&from, b + want, (uint32_t)(n - want));
	return 1;
}

/* ---- the CQ ---- */

/* ud_in takes a received UD datagram: its ds_header checked, the sender's address from it. */
static void ud_in(struct dsk *d, const uint8_t *p, uint32_t n)
{
	struct sockaddr_storage from;

	memset(&from, 0, sizeof(from));
	if (n < UD_HDR4)
		return;
	if (p[0] == 4 && p[1] == UD_HDR4 && d->family == AF_INET) {
		struct sockaddr_in *s = (void *)&from;

		s->sin_family = AF_INET;
		memcpy(&s->sin_port, p + 2, 2);
		memcpy(&s->sin_addr, p + 4, 4);
	} else if (p[0] == 6 && p[1] == UD_HDR6 && n >= UD_HDR6 && d->family == AF_INET6) {
		struct sockaddr_in6 *s = (void *)&from;

		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_port, p + 2, 2);
		memcpy(&s->sin6_flowinfo, p + 4, 4);
		memcpy(&s->sin6_addr, p + 8, 16);
	} else {
		return; /* wrong version, length or family: dropped */
	}
	enqueue(d, (struct sockaddr *)&from, p + p[1], n - p[1]);
}

/* progress_from reads what the CQs hold, and the UDP socket's datagrams if udp; nonzero
 * if anything came. */
static int progress_from(struct dsk *d, int udp)
{
	struct ibv_wc wc[16];
	int got = 0, n;

	while (udp && udp_in(d))
		got = 1;
	if (!d->cq)
		return got;
	while ((n = ibv_poll_cq(d->cq, 16, wc)) > 0) {
		got = 1;
		for (int i = 0; i < n; i++) {
			int k = (int)wc[i].wr_id; /* a receive's work request ID is its buffer */

			if (k < 0 || k >= RQ_N)
				continue;
			if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= GRH_LEN &&
			    wc[i].byte_len <= GRH_LEN + SLOT)
				ud_in(d, d->rbuf + (size_t)k * (GRH_LEN + SLOT) + GRH_LEN, wc[i].byte_len - GRH_LEN);
			if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
				post_recv(d, k);
		}
	}
	while ((n = ibv_poll_cq(d->scq, 16, wc)) > 0) { /* a send's work request ID is its buffer */
		got = 1;
		for (int i = 0; i < n; i++)
			if (wc[i].wr_id < SQ_N && d->nfree < SQ_N)
				d->sfree[d->nfree++] = (int)wc[i].wr_id;
	}
	return got;
}

/* progress reads what the UDP socket and the CQs hold; nonzero if anything came. */
static int progress(struct dsk *d)
{
	return progress_from(d, 1);
}

static void drain_events(struct dsk *d)
{
	struct ibv_cq *c;
	void *ctx;

	while (d->cc && ibv_get_cq_event(d->cc, &c, &ctx) == 0) {
		ibv_ack_cq_events(c, 1);
		if (c == d->scq)
			d->sarmed = 0;
		else
			d->armed = 0;
	}
}

/* wait_fds arms the CQs for a wait (the sends' too when sends says that the caller waits
 * for them) and gives the fds to wait on, or -1 if something came meanwhile. */
static int wait_fds(struct dsk *d, struct pollfd *w, int sends)
{
	int n = 0;

	if (d->cq && !d->armed && ibv_req_notify_cq(d->cq, 0) == 0)
		d->armed = 1;
	if (d->scq && sends && !d->sarmed && ibv_req_notify_cq(d->scq, 0) == 0)
		d->sarmed = 1;
	if (progress(d))
		return -1;
	w[n++] = (struct pollfd){.fd = d->fd, .events = POLLIN};
	if (d->cc)
		w[n++] = (struct pollfd){.fd = d->cc->fd, .events = POLLIN};
	return n;
}

int dg_wait_fds(struct dsk *d, struct pollfd *w)
{
	int n;

	pthread_mutex_lock(&d->mu);
	n = wait_fds(d, w, !d->nfree); /* POLLOUT waits for a free send buffer */
	pthread_mutex_unlock(&d->mu);
	return n;
}

void dg_after_wait(struct dsk *d)
{
	pthread_mutex_lock(&d->mu);
	drain_events(d);
	pthread_mutex_unlock(&d->mu);
}

/* wait_dg blocks (d->mu released) until the UDP socket or a CQ has something (the
 * sends' CQ only if sends), 100 ms at most. */
static void wait_dg(struct dsk *d, int sends)
{
	struct pollfd w[2];
	int n = wait_fds(d, w, sends);

	if (n < 0)
		return;
	pthread_mutex_unlock(&d->mu);
	poll(w, n, 100);
	pthread_mutex_lock(&d->mu);
	drain_events(d);
}

/* ---- the calls ---- */

/* dg_bind binds the UDP socket; bound to an address, the socket makes its QP at once, so
 * that an address without a device fails here (EADDRNOTAVAIL) rather than silently later. */
int dg_bind(struct dsk *d, const struct sockaddr *a, socklen_t l)
{
	int r;

	if (!sa_valid(a, l, d->family))
		return fail(a && a->sa_family != d->family ? EAFNOSUPPORT : EINVAL);
	if (bind(d->fd, a, l))
		return -1;
	if (sa_any(a))
		return 0;
	pthread_mutex_lock(&d->mu);
	r = ensure_qp(d);
	pthread_mutex_unlock(&d->mu);
	return r;
}

int dg_connect(struct dsk *d, const struct sockaddr *a, socklen_t l)
{
	int r;

	if (!sa_valid(a, l, d->family))
		return fail(a && a->sa_family != d->family ? EAFNOSUPPORT : EINVAL);
	pthread_mutex_lock(&d->mu);
	/* bound (to the device's address, when unbound) and the QP made before the kernel
	 * picks a source for the UDP socket */
	r = ensure_qp(d);
	if (!r)
		r = connect(d->fd, a, l);
	if (!r) {
		memset(&d->peer, 0, sizeof(d->peer));
		memcpy(&d->peer, a, sa_size(a));
		d->connected = 1;
		if (!get_dest(d, a))
			r = -1;
	}
	pthread_mutex_unlock(&d->mu);
	return r;
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;

	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

ssize_t dg_send(struct dsk *d, const struct iovec *iov, int iovcnt, int flags, int nonblock,
		const struct sockaddr *to, socklen_t tolen)
{
	size_t total = iov_total(iov, iovcnt);
	int nb = nonblock || (flags & MSG_DONTWAIT);
	struct dest *t;
	ssize_t r;

	if (iovcnt < 0)
		return fail(EINVAL);
	if (!to) {
		if (!d->connected)
			return fail(EDESTADDRREQ);
		to = (struct sockaddr *)&d->peer;
	} else if (!sa_valid(to, tolen, d->family)) {
		return fail(to->sa_family != d->family ? EAFNOSUPPORT : EINVAL);
	}
	if (total > SLOT - (d->family == AF_INET ? UDP_HDR4 : UDP_HDR6))
		return fail(EMSGSIZE);
	pthread_mutex_lock(&d->mu);
	if (ensure_qp(d) || !(t = get_dest(d, to))) {
		pthread_mutex_unlock(&d->mu);
		return -1;
	}
	progress(d);
	if (!t->ah) { /* the peer's QPN is not known yet: over UDP, which asks for it */
		r = udp_send(d, to, OP_DATA, iov, iovcnt);
		pthread_mutex_unlock(&d->mu);
		return r;
	}
	while (!d->nfree) {
		if (nb) {
			pthread_mutex_unlock(&d->mu);
			return fail(EAGAIN);
		}
		wait_dg(d, 1);
		progress(d);
	}
	int k = d->sfree[--d->nfree];
	uint8_t *p = d->sbuf + (size_t)k * SLOT;
	size_t off = d->hdrlen;

	memcpy(p, d->hdr, d->hdrlen);
	for (int i = 0; i < iovcnt; i++) {
		memcpy(p + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	struct ibv_sge sge = {.addr = (uintptr_t)p, .length = (uint32_t)off, .lkey = d->smr->lkey};
	struct ibv_send_wr wr = {.wr_id = (uint64_t)k, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;

	wr.wr.ud.ah = t->ah;
	wr.wr.ud.remote_qpn = t->qpn;
	wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
	if ((r = ibv_post_send(d->qp, &wr, &bad))) {
		d->sfree[d->nfree++] = k;
		pthread_mutex_unlock(&d->mu);
		return fail((int)r);
	}
	pthread_mutex_unlock(&d->mu);
	return (ssize_t)total;
}

ssize_t dg_recv(struct dsk *d, const struct iovec *iov, int iovcnt, int flags, int nonblock,
		struct sockaddr *from, socklen_t *fromlen)
{
	int nb = nonblock || (flags & MSG_DONTWAIT);
	struct rmsg *m;
	size_t got = 0;

	if (iovcnt < 0)
		return fail(EINVAL);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		progress(d);
		if (d->qn)
			break;
		if (nb) {
			pthread_mutex_unlock(&d->mu);
			return fail(EAGAIN);
		}
		wait_dg(d, 0);
	}
	m = &d->q[d->qhead];
	for (int i = 0; i < iovcnt && got < m->len; i++) {
		size_t c = m->len - got < iov[i].iov_len ? m->len - got : iov[i].iov_len;

		memcpy(iov[i].iov_base, m->data + got, c);
		got += c;
	}
	if (from && fromlen) {
		socklen_t n = sa_size((struct sockaddr *)&m->from);

		memcpy(from, &m->from, *fromlen < n ? *fromlen : n);
		*fromlen = n;
	}
	if (!(flags & MSG_PEEK)) {
		d->qhead = (d->qhead + 1) % QUEUE_N;
		d->qn--;
	}
	pthread_mutex_unlock(&d->mu);
	return (ssize_t)got; /* the rest of a longer datagram is dropped, as UDP's */
}

int dg_getpeername(struct dsk *d, struct sockaddr *a, socklen_t *l)
{
	socklen_t n;

	if (!d->connected)
		return fail(ENOTCONN);
	if (!a || !l)
		return fail(EFAULT);
	n = sa_size((struct sockaddr *)&d->peer);
	memcpy(a, &d->peer, *l < n ? *l : n);
	*l = n;
	return 0;
}

/* Options go to the UDP socket, as rsockets' do; the buffer sizes are remembered too
 * (the QP's queues keep their depth). */
int dg_setsockopt(struct dsk *d, int lv, int o, const void *v, socklen_t l)
{
	if (lv == SOL_RDMA)
		return fail(ENOPROTOOPT);
	if (setsockopt(d->fd, lv, o, v, l))
		return -1;
	if (lv == SOL_SOCKET && v && l >= sizeof(int)) {
		if (o == SO_SNDBUF)
			memcpy(&d->sndbuf, v, sizeof(int));
		else if (o == SO_RCVBUF)
			memcpy(&d->rcvbuf, v, sizeof(int));
	}
	return 0;
}

int dg_getsockopt(struct dsk *d, int lv, int o, void *v, socklen_t *l)
{
	int x;

	if (lv == SOL_SOCKET && (o == SO_SNDBUF || o == SO_RCVBUF)) {
		if (!v || !l || *l < sizeof(int))
			return fail(EINVAL);
		x = o == SO_SNDBUF ? d->sndbuf : d->rcvbuf;
		memcpy(v, &x, sizeof(int));
		*l = sizeof(int);
		return 0;
	}
	if (lv == SOL_RDMA)
		return fail(ENOPROTOOPT);
	return getsockopt(d->fd, lv, o, v, l);
}

short dg_revents(struct dsk *d, short want, int polling)
{
	short r = 0;

	pthread_mutex_lock(&d->mu);
	/* rpoll's polling asks at every turn: there the UDP socket, which carries a peer's
	 * first datagrams only, is read every 8th time, a system call saved on the others
	 * (a 2000-echo udpong run made 165k of them); the wait after it reads it first. */
	progress_from(d, !polling || !d->qp || (++d->scans & 7) == 0);
	if (d->qn)
		r |= POLLIN;
	if (!d->qp || d->nfree)
		r |= POLLOUT;
	pthread_mutex_unlock(&d->mu);
	return r & want;
}

void dg_close(struct dsk *d)
{
	struct timespec t0, t;

	pthread_mutex_lock(&d->mu);
	/* what was posted goes before the QP does, a second at most */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (d->qp && d->nfree < SQ_N) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > 1000)
			break;
		if (!progress(d))
			wait_dg(d, 1);
	}
	free_qp(d);
	close(d->fd);
	pthread_mutex_unlock(&d->mu);
	pthread_mutex_destroy(&d->mu);
	free(d->q);
	free(d->dests);
	free(d);
}
