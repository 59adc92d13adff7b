/*
 * rsockets: stream sockets over RDMA (rdma-core's librdmacm/docs/rsocket, the wire
 * protocol goverbs' Go package rdmanet speaks too), over this library's own rdma_cm and
 * the C flavour's verbs.
 *
 * Served: SOCK_STREAM over AF_INET/AF_INET6 (RC): rsocket, rbind, rlisten, raccept,
 * rconnect, the send and receive calls (rsend, rsendto, rsendmsg, rwrite, rwritev,
 * rrecv, rrecvfrom, rrecvmsg, rread, rreadv; MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL),
 * rshutdown, rclose, rgetpeername, rgetsockname, rsetsockopt/rgetsockopt (SOL_SOCKET
 * and IPPROTO_TCP options are accepted and remembered; SOL_RDMA's fail with
 * ENOPROTOOPT, but RDMA_IOMAPSIZE), rfcntl (F_GETFL/F_SETFL, O_NONBLOCK), rpoll and
 * rselect, riomap/riounmap/riowrite. Datagram rsockets (SOCK_DGRAM) are
 * rsocket_dgram.c's: the calls below hand a datagram socket to it.
 * Tested (capi/capitest/rsocket_test.go): rdmacm-utils' rstream and riostream, rstream
 * against goverbs rstream (package rdmanet) both ways, TCP programs under librspreload.so,
 * udpong (datagrams) against itself and goverbs udpong both ways.
 *
 * The shape of one connection (this file's own choices within the protocol):
 *  - a 2 MiB receive ring given to the peer in two halves: the first in the
 *    connection data, the second by an SGL update as soon as the connection is up, and
 *    each half again once the reader has consumed that much;
 *  - 256 message credits (a receive posted for each, and spare ones for the peer's
 *    control messages), returned by a credit update once half are used;
 *  - a 2 MiB staging ring the sender copies into and WRITEs from, every WRITE
 *    signaled; data messages of at most 256 KiB, each filling the peer's buffer in turn.
 *    With 256 KiB rings and 64 credits, iperf3 under librspreload moved 0.47x of the
 *    kernel's TCP on loopback, with a fifth of the machine idle (the writer waiting for
 *    the ring); with 1 MiB rings and 64 KiB messages (package rdmanet's sizes,
 *    rdmanet/proto.go), 0.57x (2026-11-27, by hand, 3 interleaved rounds each). Each
 *    message costs the daemon a receive, a completion each side and often a wake-up,
 *    so iperf3's 128 KiB writes now go as one WRITE each, not two, and the writer
 *    waits for the reader's next half less often: 1.21-1.28x the Gb/s (bench/
 *    rspreload.sh's setup by hand, 3 interleaved rounds; 256 KiB messages with 1 MiB
 *    rings did about 1.2x in 2 rounds, 4 MiB rings no better than 2). They cost 4 MiB
 *    of registered memory a connection;
 *  - at most 4 control messages in flight, two of them kept for SHUTDOWN/DISCONNECT;
 *  - a writer that has waited a second for room sends a keepalive (a zero-length RDMA
 *    WRITE without immediate), which a peer that is gone leaves unacknowledged;
 *  - an iomap of up to 16 entries after the target SGL, advertised only when
 *    RDMA_IOMAPSIZE is set before connecting (riostream sets it), so that riowrite
 *    RDMA-writes (no immediate) into the buffers the peer riomap'd;
 *  - rclose sends DISCONNECT, waits (1 s at most each) for its sends and then for the
 *    peer's own close, and destroys the QP before the rdma_cm id.
 * An rsocket's number is the file descriptor of its own rdma_cm event channel. Calls
 * never start a thread: progress is made by whichever call runs, and a blocking call
 * polls the CQ for a while (rsockets' polling_time: poll_first) and then waits in
 * poll(2) on the completion channel and the event channel.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rsocket_dgram.h"

#define RING_SZ (2 * 1024 * 1024)
#define HALF_SZ (RING_SZ / 2)
#define STAGE_SZ (2 * 1024 * 1024)
#define MAX_MSG (256 * 1024)
#define CREDITS 256
#define RQ_DEPTH (CREDITS + 32)
#define CTRL_MAX 4
#define SQ_DEPTH (CREDITS + CTRL_MAX + 1)
#define TSGL_N 2
#define SGE_LEN 16
#define CONN_LEN 40
#define IOMAP_MAX 16 /* entries of a target iomap (RDMA_IOMAPSIZE's most) */
#define IOMAP_LEN 24 /* an rs_iomap: offset (8), then an rs_sge */
#define META_IOMAP (TSGL_N * SGE_LEN) /* the target iomap follows the target SGL */
#define META_CTRL 1024 /* control message slots, 32 bytes each */
#define CTRL_SLOT 32

#define OP_DATA 0u
#define OP_SGL 4u
#define OP_IOMAP 6u
#define OP_CTRL 7u
#define CTRL_DISCONNECT 0u
#define CTRL_KEEPALIVE 1u
#define CTRL_SHUTDOWN 2u
#define IMM(op, v) (((uint32_t)(op) << 29) | ((uint32_t)(v) & 0x1fffffffu))

#define WR_DATA (1ull << 62)
#define WR_CTRL (2ull << 62)
#define WR_RECV (3ull << 62)
#define WR_KIND (3ull << 62)

enum { S_NEW, S_LISTEN, S_CONN, S_DEAD };

struct tgt {
	uint64_t addr;
	uint32_t key, len;
};

/* a buffer riomap registered: the peer writes it directly (riowrite) */
struct iomap {
	void *buf;
	size_t len;
	off_t off;
	struct ibv_mr *mr;
};

struct rsk {
	int fd, state, nonblock, err;
	struct dsk *dg; /* a datagram socket: everything else here unused */
	pthread_mutex_t mu;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int armed;
	uint8_t *ring, *stage, *meta; /* meta: the target SGL at 0, control slots from 64 */
	struct ibv_mr *ring_mr, *stage_mr, *meta_mr;
	/* the peer */
	int peer_be;
	uint16_t peer_credits;
	uint64_t peer_tsgl;
	uint32_t peer_tsgl_key, peer_tsgl_n, next_remote;
	/* sending */
	struct tgt tgt[TSGL_N];
	int cur, tsgl_next;
	uint16_t tx_seq, tx_comp;
	uint64_t staged, st_used;
	int data_out, ctrl_out;
	unsigned ctrl_seq;
	int shut_sent, disc_sent;
	/* receiving */
	uint16_t rx_seq, rx_comp, rx_due;
	uint64_t rx_head, rx_granted;
	uint32_t rx_avail;
	int eof, peer_closed, rd_shut, cm_gone;
	unsigned poll_misses, poll_skips; /* poll_first's record of unanswered polls */
	/* iomap: the size of this side's target iomap (RDMA_IOMAPSIZE), the peer's, the
	 * entries the peer wrote into ours, and the buffers riomap registered */
	int iomap_n, peer_iomap_n;
	struct tgt riomap_tgt[IOMAP_MAX];
	uint64_t riomap_off[IOMAP_MAX];
	struct iomap maps[IOMAP_MAX];
	off_t next_off;
	/* options, remembered */
	int sndbuf, rcvbuf, reuse, nodelay, keepalive;
	struct linger linger;
};

static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **tab;
static int tab_n;

static int debug_on(void)
{
	const char *e = getenv("GOVERBS_DEBUG");

	return e && *e && strcmp(e, "0");
}

static void dbg(const char *fmt, ...)
{
	va_list ap;

	if (!debug_on())
		return;
	va_start(ap, fmt);
	fprintf(stderr, "goverbs librdmacm: rsocket: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int fail(int e)
{
	errno = e;
	return -1;
}

static struct rsk *get(int fd)
{
	struct rsk *s = NULL;

	pthread_mutex_lock(&tab_mu);
	if (fd >= 0 && fd < tab_n)
		s = tab[fd];
	pthread_mutex_unlock(&tab_mu);
	return s;
}

static int put(struct rsk *s)
{
	pthread_mutex_lock(&tab_mu);
	if (s->fd >= tab_n) {
		int n = s->fd + 64;
		struct rsk **t = realloc(tab, n * sizeof(*t));

		if (!t) {
			pthread_mutex_unlock(&tab_mu);
			return fail(ENOMEM);
		}
		memset(t + tab_n, 0, (n - tab_n) * sizeof(*t));
		tab = t;
		tab_n = n;
	}
	tab[s->fd] = s;
	pthread_mutex_unlock(&tab_mu);
	return 0;
}

static void drop(struct rsk *s)
{
	pthread_mutex_lock(&tab_mu);
	if (s->fd >= 0 && s->fd < tab_n && tab[s->fd] == s)
		tab[s->fd] = NULL;
	pthread_mutex_unlock(&tab_mu);
}

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int64_t now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void set_nonblock(int fd)
{
	int f = fcntl(fd, F_GETFL);

	if (f >= 0)
		fcntl(fd, F_SETFL, f | O_NONBLOCK);
}

static struct rsk *rsk_new(void)
{
	struct rsk *s = calloc(1, sizeof(*s));

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->ch = rdma_create_event_channel();
	if (!s->ch) {
		free(s);
		return NULL;
	}
	set_nonblock(s->ch->fd);
	s->fd = s->ch->fd;
	s->sndbuf = s->rcvbuf = RING_SZ;
	return s;
}

/* ---- the wire: rs_conn_data and SGEs ---- */

static void put_be64(uint8_t *b, uint64_t v) { v = htobe64(v); memcpy(b, &v, 8); }
static void put_be32(uint8_t *b, uint32_t v) { v = htobe32(v); memcpy(b, &v, 4); }
static uint64_t get_be64(const uint8_t *b) { uint64_t v; memcpy(&v, b, 8); return be64toh(v); }
static uint32_t get_be32(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return be32toh(v); }

static void conn_data(struct rsk *s, uint8_t *m)
{
	memset(m, 0, CONN_LEN);
	m[0] = 1; /* version */
	m[1] = __BYTE_ORDER == __BIG_ENDIAN ? 1 : 0;
	m[2] = CREDITS >> 8;
	m[3] = CREDITS & 0xff;
	if (s->iomap_n) {
		m[1] |= 2;
		m[7] = (uint8_t)s->iomap_n; /* small sizes are themselves in rsockets' scale */
	}
	put_be64(m + 8, (uintptr_t)s->meta);
	put_be32(m + 16, s->meta_mr->rkey);
	put_be32(m + 20, TSGL_N);
	put_be64(m + 24, (uintptr_t)s->ring);
	put_be32(m + 32, s->ring_mr->rkey);
	put_be32(m + 36, HALF_SZ);
}

static int take_peer(struct rsk *s, const void *pd, int len)
{
	const uint8_t *m = pd;

	if (!m || len < CONN_LEN || m[0] != 1)
		return -1;
	s->peer_be = m[1] & 1;
	s->peer_credits = (uint16_t)(m[2] << 8 | m[3]);
	s->peer_tsgl = get_be64(m + 8);
	s->peer_tsgl_key = get_be32(m + 16);
	s->peer_tsgl_n = get_be32(m + 20);
	s->tgt[0].addr = get_be64(m + 24);
	s->tgt[0].key = get_be32(m + 32);
	s->tgt[0].len = get_be32(m + 36);
	s->peer_iomap_n = 0;
	if ((m[1] & 2) && m[7]) {
		/* rsockets' scale: up to 127 the value, else a mantissa and an exponent */
		s->peer_iomap_n = m[7] & 0x80 ? (m[7] & 0x7f) << 8 : m[7];
		if (s->peer_iomap_n > IOMAP_MAX)
			s->peer_iomap_n = IOMAP_MAX; /* riomap uses no more than these */
	}
	if (!s->peer_credits || s->peer_credits == 0xffff || !s->peer_tsgl_n || !s->tgt[0].len)
		return -1;
	return 0;
}

/* ---- verbs resources ---- */

static void free_verbs(struct rsk *s)
{
	if (s->id && s->id->qp)
		rdma_destroy_qp(s->id);
	if (s->ring_mr)
		ibv_dereg_mr(s->ring_mr);
	if (s->stage_mr)
		ibv_dereg_mr(s->stage_mr);
	if (s->meta_mr)
		ibv_dereg_mr(s->meta_mr);
	s->ring_mr = s->stage_mr = s->meta_mr = NULL;
	if (s->cq) {
		if (s->armed) {
			/* an event may be pending: take it so the CQ can go */
			struct ibv_cq *c;
			void *ctx;

			if (ibv_get_cq_event(s->cc, &c, &ctx) == 0)
				ibv_ack_cq_events(c, 1);
		}
		ibv_destroy_cq(s->cq);
		s->cq = NULL;
	}
	if (s->cc)
		ibv_destroy_comp_channel(s->cc);
	s->cc = NULL;
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	s->pd = NULL;
	free(s->ring);
	free(s->stage);
	free(s->meta);
	s->ring = s->stage = s->meta = NULL;
}

static int post_recv(struct rsk *s)
{
	struct ibv_recv_wr wr = {.wr_id = WR_RECV}, *bad;
	int e = ibv_post_recv(s->id->qp, &wr, &bad);

	return e ? fail(e) : 0;
}

/* whole pages, as the C flavour registers only those */
static void *pages(size_t n)
{
	void *p = NULL;
	long ps = sysconf(_SC_PAGESIZE);

	n = (n + ps - 1) / ps * ps;
	if (posix_memalign(&p, ps, n))
		return NULL;
	memset(p, 0, n);
	return p;
}

static int make_verbs(struct rsk *s)
{
	struct ibv_qp_init_attr qa;
	int i;

	if (!s->id->verbs)
		return fail(ENODEV);
	if (!(s->pd = ibv_alloc_pd(s->id->verbs)) || !(s->cc = ibv_create_comp_channel(s->id->verbs)))
		goto bad;
	set_nonblock(s->cc->fd);
	if (!(s->cq = ibv_create_cq(s->id->verbs, SQ_DEPTH + RQ_DEPTH, s, s->cc, 0)))
		goto bad;
	if (!(s->ring = pages(RING_SZ)) || !(s->stage = pages(STAGE_SZ)) || !(s->meta = pages(1))) {
		errno = ENOMEM;
		goto bad;
	}
	s->ring_mr = ibv_reg_mr(s->pd, s->ring, RING_SZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	s->stage_mr = ibv_reg_mr(s->pd, s->stage, STAGE_SZ, IBV_ACCESS_LOCAL_WRITE);
	s->meta_mr = ibv_reg_mr(s->pd, s->meta, sysconf(_SC_PAGESIZE), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->ring_mr || !s->stage_mr || !s->meta_mr)
		goto bad;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = s->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = SQ_DEPTH;
	qa.cap.max_recv_wr = RQ_DEPTH;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(s->id, s->pd, &qa))
		goto bad;
	for (i = 0; i < RQ_DEPTH; i++)
		if (post_recv(s))
			goto bad;
	return 0;
bad:
	i = errno ? errno : ENOMEM;
	dbg("setting up the queue pair: %s", strerror(i));
	free_verbs(s);
	return fail(i);
}

static void conn_param(struct rsk *s, struct rdma_conn_param *p, uint8_t *m)
{
	conn_data(s, m);
	memset(p, 0, sizeof(*p));
	p->private_data = m;
	p->private_data_len = CONN_LEN;
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

/* ---- the protocol ---- */

static int post_write(struct rsk *s, uint64_t wrid, void *buf, uint32_t len, uint32_t lkey, uint64_t raddr,
		      uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr wr, *bad;
	int e;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wrid;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	e = ibv_post_send(s->id->qp, &wr, &bad);
	if (e) {
		s->err = e;
		return fail(e);
	}
	return 0;
}

/* keepalive probes a peer this side waits on: rsockets' keepalive, a zero-length RDMA
 * WRITE without immediate (no receive consumed, no key checked), which only a peer that
 * is gone leaves unacknowledged; its retries then fail the connection. */
static void keepalive(struct rsk *s)
{
	struct ibv_send_wr wr, *bad;

	if (s->state != S_CONN || s->err || s->ctrl_out >= CTRL_MAX - 2)
		return;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = WR_CTRL;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(s->id->qp, &wr, &bad) == 0)
		s->ctrl_out++;
}

static int post_ctrl(struct rsk *s, uint32_t imm)
{
	if (post_write(s, WR_CTRL, NULL, 0, 0, 0, 0, imm))
		return -1;
	s->ctrl_out++;
	return 0;
}

/* The credit update when it is due: half the ring read and not given back (an SGL
 * update with that half), or half of the message credits used (credits alone). */
static void give_credit(struct rsk *s)
{
	int buf_due;
	uint16_t comp;
	uint32_t imm;

	if (s->state != S_CONN || s->err || s->disc_sent || s->peer_closed || s->ctrl_out >= CTRL_MAX - 2)
		return;
	buf_due = RING_SZ - (s->rx_granted - s->rx_head) >= HALF_SZ;
	if (!buf_due && (int16_t)(s->rx_seq - s->rx_due) < 0)
		return;
	comp = s->rx_seq + CREDITS;
	imm = IMM(OP_SGL, comp);
	if (buf_due) {
		uint8_t *slot = s->meta + META_CTRL + (s->ctrl_seq % CTRL_MAX) * CTRL_SLOT;
		uint64_t a = (uintptr_t)s->ring + s->rx_granted % RING_SZ;
		uint32_t k = s->ring_mr->rkey, l = HALF_SZ;

		if (s->peer_be) {
			a = htobe64(a), k = htobe32(k), l = htobe32(l);
		} else {
			a = htole64(a), k = htole32(k), l = htole32(l);
		}
		memcpy(slot, &a, 8);
		memcpy(slot + 8, &k, 4);
		memcpy(slot + 12, &l, 4);
		if (post_write(s, WR_CTRL, slot, SGE_LEN, s->meta_mr->lkey, s->peer_tsgl + (uint64_t)s->next_remote * SGE_LEN,
			       s->peer_tsgl_key, imm))
			return;
		s->ctrl_out++;
		s->ctrl_seq++;
		s->rx_granted += HALF_SZ;
		s->next_remote = (s->next_remote + 1) % s->peer_tsgl_n;
	} else if (post_ctrl(s, imm)) {
		return;
	}
	s->rx_comp = comp;
	s->rx_due = s->rx_seq + CREDITS / 2;
}

/* A new buffer from the peer: the next entry of this side's target SGL. */
static void take_target(struct rsk *s)
{
	uint8_t *e = s->meta + s->tsgl_next * SGE_LEN;
	struct tgt t;

	memcpy(&t.addr, e, 8);
	memcpy(&t.key, e + 8, 4);
	memcpy(&t.len, e + 12, 4);
	if (__BYTE_ORDER == __BIG_ENDIAN) {
		t.addr = be64toh(t.addr), t.key = be32toh(t.key), t.len = be32toh(t.len);
	} else {
		t.addr = le64toh(t.addr), t.key = le32toh(t.key), t.len = le32toh(t.len);
	}
	if (s->tgt[s->tsgl_next].len || !t.len) {
		dbg("the peer's SGL update into entry %d is out of turn (in use %u, new %u at %#llx): EPROTO", s->tsgl_next, s->tgt[s->tsgl_next].len, t.len, (unsigned long long)t.addr);
		s->err = EPROTO;
		return;
	}
	s->tgt[s->tsgl_next] = t;
	memset(e, 0, SGE_LEN);
	s->tsgl_next = (s->tsgl_next + 1) % TSGL_N;
}

static void received(struct rsk *s, struct ibv_wc *wc)
{
	uint32_t imm, v;

	if (post_recv(s)) {
		s->err = errno;
		return;
	}
	if (!(wc->wc_flags & IBV_WC_WITH_IMM))
		return;
	imm = be32toh(wc->imm_data);
	v = imm & 0x1fffffffu;
	switch (imm >> 29) {
	case OP_DATA:
		if (!v || s->rx_avail + (uint64_t)v + s->rx_head > s->rx_granted) {
			dbg("data message of %u bytes beyond the buffers given: EPROTO", v);
			s->err = EPROTO;
			return;
		}
		s->rx_seq++;
		s->rx_avail += v;
		break;
	case OP_SGL:
		s->tx_comp = (uint16_t)v;
		if (wc->byte_len == SGE_LEN)
			take_target(s);
		break;
	case OP_IOMAP:
		if (v >= (uint32_t)s->iomap_n) {
			dbg("iomap update of entry %u beyond the %d advertised: EPROTO", v, s->iomap_n);
			s->err = EPROTO;
			return;
		} else {
			uint8_t *e = s->meta + META_IOMAP + v * IOMAP_LEN;
			uint64_t off, a;
			uint32_t k, l;

			memcpy(&off, e, 8), memcpy(&a, e + 8, 8), memcpy(&k, e + 16, 4), memcpy(&l, e + 20, 4);
			if (__BYTE_ORDER == __BIG_ENDIAN)
				off = be64toh(off), a = be64toh(a), k = be32toh(k), l = be32toh(l);
			else
				off = le64toh(off), a = le64toh(a), k = le32toh(k), l = le32toh(l);
			s->riomap_off[v] = off;
			s->riomap_tgt[v] = (struct tgt){.addr = a, .key = k, .len = l};
		}
		break;
	case OP_CTRL:
		if (v == CTRL_SHUTDOWN)
			s->eof = 1;
		else if (v == CTRL_DISCONNECT)
			s->eof = s->peer_closed = 1;
		break;
	default:
		dbg("immediate %#x: unknown operation: EPROTO", imm);
		s->err = EPROTO;
	}
}

/* progress takes what the CQ holds; it returns how many completions it took. */
static int progress(struct rsk *s)
{
	struct ibv_wc wc[16];
	int n, i, total = 0;

	if (!s->cq || s->state != S_CONN)
		return 0;
	while ((n = ibv_poll_cq(s->cq, 16, wc)) > 0) {
		total += n;
		for (i = 0; i < n; i++) {
			struct ibv_wc *w = &wc[i];
			uint64_t kind = w->wr_id & WR_KIND;

			if (kind == WR_DATA) {
				s->data_out--;
				s->st_used -= w->wr_id & ~WR_KIND;
			} else if (kind == WR_CTRL) {
				s->ctrl_out--;
			}
			if (w->status != IBV_WC_SUCCESS) {
				if (!s->err) {
					dbg("completion status %s: ECONNRESET", ibv_wc_status_str(w->status));
					s->err = ECONNRESET;
				}
				continue;
			}
			if (kind == WR_RECV)
				received(s, w);
		}
		if (n < 16)
			break;
	}
	if (n < 0 && !s->err)
		s->err = EIO;
	give_credit(s);
	return total;
}

/* cm_events takes the connected socket's rdma_cm events without waiting. */
static void cm_events(struct rsk *s)
{
	struct rdma_cm_event *ev;

	while (s->state == S_CONN && rdma_get_cm_event(s->ch, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
			s->cm_gone = 1;
			s->eof = 1;
			s->peer_closed = 1;
		}
		rdma_ack_cm_event(ev);
	}
}

static void drain_cq_events(struct rsk *s)
{
	struct ibv_cq *c;
	void *ctx;

	while (s->cc && ibv_get_cq_event(s->cc, &c, &ctx) == 0) {
		ibv_ack_cq_events(c, 1);
		s->armed = 0;
	}
}

/* arm readies a wait: it returns nonzero when completions came meanwhile. */
static int arm(struct rsk *s)
{
	if (s->state != S_CONN || !s->cq)
		return 0;
	if (!s->armed) {
		if (ibv_req_notify_cq(s->cq, 0) == 0)
			s->armed = 1;
	}
	return progress(s);
}

/*
 * polling_us is how long a wait polls the CQ before it blocks (rsockets' polling_time;
 * GOVERBS_RS_POLLING_TIME in microseconds, 0 to block at once). A blocked wait costs a
 * wake-up by the daemon, which on a small machine is tens of microseconds: with
 * bench/rspreload.sh, sockperf's TCP ping-pong under librspreload took 65 us one-way
 * blocking at once and 11.9 us polling 100 us, against the kernel's TCP at 39-41 us
 * (docs/perf/rspreload; capi guide, "rsockets"), while iperf3's stream did not move.
 */
#define POLLING_US_DEFAULT 100

static int polling_us(void)
{
	static int v = -1;
	int x = __atomic_load_n(&v, __ATOMIC_RELAXED);
	const char *e;

	if (x >= 0)
		return x;
	x = POLLING_US_DEFAULT;
	if ((e = getenv("GOVERBS_RS_POLLING_TIME")) && *e) {
		char *end;
		long l = strtol(e, &end, 10);

		if (*end == 0 && l >= 0 && l <= 1000000)
			x = (int)l;
	}
	__atomic_store_n(&v, x, __ATOMIC_RELAXED);
	return x;
}

/*
 * poll_wanted says whether a wait on s polls its CQ before it blocks: while its polls
 * have been answered lately, and on every 16th wait after four unanswered ones (a
 * server waiting for its next request, a writer waiting for a slow reader), so that an
 * idle socket costs no CPU. poll_record keeps the record. Both under s->mu; the record
 * is the socket's own, so that an idle socket does not turn polling off for a busy one.
 */
static int poll_wanted(struct rsk *s)
{
	if (polling_us() == 0 || (!s->dg && s->state != S_CONN))
		return 0;
	return s->poll_misses < 4 || (++s->poll_skips & 15) == 0;
}

static void poll_record(struct rsk *s, int answered)
{
	s->poll_misses = answered ? 0 : s->poll_misses + 1;
}

/*
 * poll_first polls s's CQ for up to polling_us before a wait blocks (when poll_wanted),
 * yielding between polls so that the daemon, on a machine with few cores, gets the CPU
 * it needs to answer. It returns nonzero when completions came.
 */
static int poll_first(struct rsk *s)
{
	int64_t end;

	if (!poll_wanted(s))
		return 0;
	end = now_us() + polling_us();
	do {
		if (progress(s)) {
			poll_record(s, 1);
			return 1;
		}
		pthread_mutex_unlock(&s->mu);
		sched_yield();
		pthread_mutex_lock(&s->mu);
		if (s->state != S_CONN)
			return 1;
	} while (now_us() < end);
	poll_record(s, 0);
	return 0;
}

/* wait blocks (s->mu released) until the CQ or the event channel has something, or
 * ms passes; s->mu is held on entry and on return. */
static void wait_rs(struct rsk *s, int ms)
{
	struct pollfd p[2];
	int n = 0;

	if (ms != 0 && poll_first(s))
		return;
	if (arm(s))
		return;
	if (s->cc)
		p[n++] = (struct pollfd){.fd = s->cc->fd, .events = POLLIN};
	p[n++] = (struct pollfd){.fd = s->ch->fd, .events = POLLIN};
	pthread_mutex_unlock(&s->mu);
	poll(p, n, ms);
	pthread_mutex_lock(&s->mu);
	drain_cq_events(s);
	cm_events(s);
}

/* send_room is the longest data message that may go now (0: none). */
static uint32_t send_room(struct rsk *s)
{
	struct tgt *t = &s->tgt[s->cur];
	uint64_t head = s->staged % STAGE_SZ, room;

	if (s->state != S_CONN || s->tx_seq == s->tx_comp || !t->len || s->data_out >= CREDITS)
		return 0;
	room = STAGE_SZ - s->st_used;
	if (room > STAGE_SZ - head)
		room = STAGE_SZ - head;
	if (room > t->len)
		room = t->len;
	if (room > MAX_MSG)
		room = MAX_MSG;
	return (uint32_t)room;
}

static int get_event(struct rsk *s, struct rdma_cm_event **ev, int ms)
{
	int64_t end = now_ms() + ms;

	for (;;) {
		struct pollfd p = {.fd = s->ch->fd, .events = POLLIN};
		int64_t left;

		if (rdma_get_cm_event(s->ch, ev) == 0)
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		left = end - now_ms();
		if (left <= 0)
			return fail(ETIMEDOUT);
		poll(&p, 1, (int)left);
	}
}

/* expect waits for event want on s's channel; on another it fails with errno. */
static int expect(struct rsk *s, enum rdma_cm_event_type want, uint8_t *priv, int *privlen)
{
	struct rdma_cm_event *ev;
	int st, e;

	if (get_event(s, &ev, 20000))
		return -1;
	if (ev->event == want) {
		if (priv && privlen) {
			*privlen = ev->param.conn.private_data_len;
			if (*privlen > 0 && ev->param.conn.private_data)
				memcpy(priv, ev->param.conn.private_data, *privlen > 255 ? 255 : *privlen);
		}
		rdma_ack_cm_event(ev);
		return 0;
	}
	dbg("waiting for %s, got %s (status %d)", rdma_event_str(want), rdma_event_str(ev->event), ev->status);
	st = ev->event;
	rdma_ack_cm_event(ev);
	switch (st) {
	case RDMA_CM_EVENT_REJECTED:
		e = ECONNREFUSED;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		e = EHOSTUNREACH;
		break;
	default:
		e = ECONNREFUSED;
	}
	return fail(e);
}

static void connected(struct rsk *s)
{
	s->state = S_CONN;
	s->cur = 0;
	s->tsgl_next = 1 % TSGL_N;
	s->next_remote = 1 % s->peer_tsgl_n; /* entry 0 is the buffer of the connection data */
	s->tx_seq = 0;
	s->tx_comp = s->peer_credits;
	s->rx_comp = CREDITS;
	s->rx_due = CREDITS / 2;
	s->rx_granted = HALF_SZ;
	give_credit(s); /* the second half of the ring */
}

/* ---- the socket calls ---- */

static int dgram_socket(int domain, int nb)
{
	struct rsk *s = calloc(1, sizeof(*s));

	if (!s)
		return fail(ENOMEM);
	if (!(s->dg = dg_new(domain))) {
		int e = errno;

		free(s);
		return fail(e);
	}
	pthread_mutex_init(&s->mu, NULL);
	s->fd = dg_fd(s->dg);
	s->nonblock = !!nb;
	if (put(s)) {
		dg_close(s->dg);
		free(s);
		return -1;
	}
	return s->fd;
}

int rsocket(int domain, int type, int protocol)
{
	struct rsk *s;
	int nb = type & SOCK_NONBLOCK;

	type &= ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	if ((domain != AF_INET && domain != AF_INET6) || (type != SOCK_STREAM && type != SOCK_DGRAM) ||
	    (protocol && protocol != (type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP))) {
		dbg("only stream and datagram rsockets over AF_INET/AF_INET6 are served: ENOTSUP");
		return fail(ENOTSUP);
	}
	if (type == SOCK_DGRAM)
		return dgram_socket(domain, nb);
	if (!(s = rsk_new()))
		return -1;
	s->nonblock = !!nb;
	if (rdma_create_id(s->ch, &s->id, s, RDMA_PS_TCP)) {
		int e = errno;

		rdma_destroy_event_channel(s->ch);
		free(s);
		return fail(e);
	}
	if (put(s)) {
		rdma_destroy_id(s->id);
		rdma_destroy_event_channel(s->ch);
		free(s);
		return -1;
	}
	return s->fd;
}

int rbind(int fd, const struct sockaddr *a, socklen_t l)
{
	struct rsk *s = get(fd);

	if (!s)
		return fail(EBADF);
	if (s->dg) {
		int r = dg_bind(s->dg, a, l);

		if (!r && a)
			dbg("datagram rsocket bound to port %u", ntohs(((const struct sockaddr_in *)a)->sin_port));
		return r;
	}
	return rdma_bind_addr(s->id, (struct sockaddr *)a);
}

int rlisten(int fd, int backlog)
{
	struct rsk *s = get(fd);

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return fail(EOPNOTSUPP);
	if (rdma_listen(s->id, backlog))
		return -1;
	s->state = S_LISTEN;
	return 0;
}

int raccept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	struct rsk *l = get(fd), *s;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct rdma_conn_param p;
	uint8_t priv[256], mine[CONN_LEN];
	int plen;

	if (!l)
		return fail(EBADF);
	if (l->dg)
		return fail(EOPNOTSUPP);
	if (l->state != S_LISTEN)
		return fail(EINVAL);
	for (;;) {
		if (rdma_get_cm_event(l->ch, &ev)) {
			struct pollfd pf = {.fd = l->ch->fd, .events = POLLIN};

			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				return -1;
			if (l->nonblock)
				return fail(EAGAIN);
			poll(&pf, 1, -1);
			continue;
		}
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			rdma_ack_cm_event(ev);
			continue;
		}
		id = ev->id;
		plen = ev->param.conn.private_data_len;
		memcpy(priv, ev->param.conn.private_data ? ev->param.conn.private_data : priv, plen);
		rdma_ack_cm_event(ev);
		if (!(s = rsk_new())) {
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			return -1;
		}
		s->id = id;
		id->context = s;
		s->iomap_n = l->iomap_n; /* the listener's options are the connection's */
		s->nonblock = l->nonblock;
		if (take_peer(s, priv, plen)) {
			dbg("a connection request without rsockets' connection data: rejected");
			goto reject;
		}
		if (rdma_migrate_id(id, s->ch) || make_verbs(s))
			goto reject;
		conn_param(s, &p, mine);
		if (rdma_accept(id, &p) || expect(s, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL)) {
			dbg("accepting: %s", strerror(errno));
			goto drop;
		}
		if (put(s))
			goto drop;
		pthread_mutex_lock(&s->mu);
		connected(s);
		pthread_mutex_unlock(&s->mu);
		if (addr && alen)
			rgetpeername(s->fd, addr, alen);
		return s->fd;
reject:
		rdma_reject(id, NULL, 0);
drop:
		free_verbs(s);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(s->ch);
		free(s);
		if (l->nonblock)
			return fail(EAGAIN);
	}
}

int rconnect(int fd, const struct sockaddr *a, socklen_t l)
{
	struct rsk *s = get(fd);
	struct rdma_conn_param p;
	uint8_t priv[256], mine[CONN_LEN];
	int plen = 0;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return dg_connect(s->dg, a, l);
	if (s->state == S_CONN)
		return fail(EISCONN);
	if (s->state != S_NEW)
		return fail(EINVAL);
	/* always completes before returning, O_NONBLOCK or not (a valid outcome) */
	if (rdma_resolve_addr(s->id, NULL, (struct sockaddr *)a, 2000) ||
	    expect(s, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL))
		return -1;
	if (rdma_resolve_route(s->id, 2000) || expect(s, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL))
		return -1;
	if (make_verbs(s))
		return -1;
	conn_param(s, &p, mine);
	if (rdma_connect(s->id, &p) || expect(s, RDMA_CM_EVENT_ESTABLISHED, priv, &plen))
		goto bad;
	if (take_peer(s, priv, plen)) {
		dbg("the peer's reply lacks rsockets' connection data: ECONNREFUSED");
		rdma_disconnect(s->id);
		errno = ECONNREFUSED;
		goto bad;
	}
	pthread_mutex_lock(&s->mu);
	connected(s);
	pthread_mutex_unlock(&s->mu);
	return 0;
bad:
	plen = errno;
	free_verbs(s);
	s->state = S_DEAD;
	return fail(plen);
}

/* ---- data ---- */

static ssize_t do_send(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct rsk *s = get(fd);
	size_t total = 0, sent = 0, vi = 0, vo = 0;
	int64_t waiting = 0;
	int i, nb;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return dg_send(s->dg, iov, iovcnt, flags, s->nonblock, NULL, 0);
	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	nb = s->nonblock || (flags & MSG_DONTWAIT);
	pthread_mutex_lock(&s->mu);
	for (;;) {
		uint32_t room, n, done;
		uint8_t *dst;

		if (s->state != S_CONN || s->err || s->peer_closed || s->shut_sent || s->disc_sent) {
			int e = s->err ? s->err : s->state != S_CONN ? ENOTCONN : EPIPE;

			pthread_mutex_unlock(&s->mu);
			if (sent)
				return sent;
			return fail(e);
		}
		if (sent == total)
			break;
		progress(s);
		room = send_room(s);
		if (!room) {
			if (nb) {
				if (sent)
					break;
				pthread_mutex_unlock(&s->mu);
				return fail(EAGAIN);
			}
			if (!waiting) {
				waiting = now_ms();
			} else if (now_ms() - waiting >= 1000) {
				keepalive(s); /* a second without room: is the peer there? */
				waiting = now_ms();
			}
			wait_rs(s, 100);
			continue;
		}
		waiting = 0;
		n = total - sent < room ? (uint32_t)(total - sent) : room;
		dst = s->stage + s->staged % STAGE_SZ;
		for (done = 0; done < n;) {
			size_t c = iov[vi].iov_len - vo;

			if (c > n - done)
				c = n - done;
			memcpy(dst + done, (const uint8_t *)iov[vi].iov_base + vo, c);
			done += c;
			vo += c;
			if (vo == iov[vi].iov_len)
				vi++, vo = 0;
		}
		if (post_write(s, WR_DATA | n, dst, n, s->stage_mr->lkey, s->tgt[s->cur].addr, s->tgt[s->cur].key,
			       IMM(OP_DATA, n)))
			continue; /* s->err reports it */
		s->staged += n;
		s->st_used += n;
		s->data_out++;
		s->tx_seq++;
		s->tgt[s->cur].addr += n;
		s->tgt[s->cur].len -= n;
		if (!s->tgt[s->cur].len)
			s->cur = (s->cur + 1) % TSGL_N;
		sent += n;
	}
	pthread_mutex_unlock(&s->mu);
	return sent;
}

static ssize_t do_recv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct rsk *s = get(fd);
	size_t total = 0, got = 0, vi = 0, vo = 0;
	int i, nb;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return dg_recv(s->dg, iov, iovcnt, flags, s->nonblock, NULL, NULL);
	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	nb = s->nonblock || (flags & MSG_DONTWAIT);
	pthread_mutex_lock(&s->mu);
	for (;;) {
		if (s->state != S_CONN) {
			pthread_mutex_unlock(&s->mu);
			return fail(ENOTCONN);
		}
		progress(s);
		if (s->rx_avail && got < total) {
			uint64_t head = s->rx_head;
			uint32_t avail = s->rx_avail;

			while (avail && got < total) {
				size_t off = head % RING_SZ, c = RING_SZ - off;

				if (c > avail)
					c = avail;
				if (c > iov[vi].iov_len - vo)
					c = iov[vi].iov_len - vo;
				memcpy((uint8_t *)iov[vi].iov_base + vo, s->ring + off, c);
				head += c, avail -= c, got += c, vo += c;
				if (vo == iov[vi].iov_len)
					vi++, vo = 0;
			}
			if (flags & MSG_PEEK)
				break;
			s->rx_head = head;
			s->rx_avail = avail;
			give_credit(s);
			if (!(flags & MSG_WAITALL) || got == total || nb)
				break;
			continue;
		}
		if (got == total || s->eof || s->rd_shut)
			break;
		if (s->err) {
			int e = s->err;

			pthread_mutex_unlock(&s->mu);
			if (got)
				return got;
			return fail(e);
		}
		if (nb) {
			if (got)
				break;
			pthread_mutex_unlock(&s->mu);
			return fail(EAGAIN);
		}
		wait_rs(s, 100);
	}
	pthread_mutex_unlock(&s->mu);
	return got;
}

ssize_t rsend(int s, const void *b, size_t n, int f)
{
	struct iovec v = {.iov_base = (void *)b, .iov_len = n};

	return do_send(s, &v, 1, f);
}

ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l)
{
	struct rsk *k = get(s);
	struct iovec v = {.iov_base = (void *)b, .iov_len = n};

	if (k && k->dg)
		return dg_send(k->dg, &v, 1, f, k->nonblock, a, l);
	return rsend(s, b, n, f);
}

ssize_t rsendmsg(int s, const struct msghdr *m, int f)
{
	struct rsk *k = get(s);

	if (k && k->dg)
		return dg_send(k->dg, m->msg_iov, m->msg_iovlen, f, k->nonblock, m->msg_name, m->msg_namelen);
	return do_send(s, m->msg_iov, m->msg_iovlen, f);
}

ssize_t rwrite(int s, const void *b, size_t n) { return rsend(s, b, n, 0); }
ssize_t rwritev(int s, const struct iovec *v, int n) { return do_send(s, v, n, 0); }

ssize_t rrecv(int s, void *b, size_t n, int f)
{
	struct iovec v = {.iov_base = b, .iov_len = n};

	return do_recv(s, &v, 1, f);
}

ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l)
{
	struct rsk *k = get(s);
	struct iovec v = {.iov_base = b, .iov_len = n};
	ssize_t r;

	if (k && k->dg)
		return dg_recv(k->dg, &v, 1, f, k->nonblock, a, l);
	r = rrecv(s, b, n, f);

	if (r >= 0 && a && l)
		rgetpeername(s, a, l);
	return r;
}

ssize_t rrecvmsg(int s, struct msghdr *m, int f)
{
	struct rsk *k = get(s);

	if (k && k->dg) {
		socklen_t l = m->msg_namelen;
		ssize_t r = dg_recv(k->dg, m->msg_iov, m->msg_iovlen, f, k->nonblock, m->msg_name,
				    m->msg_name ? &l : NULL);

		if (r >= 0 && m->msg_name)
			m->msg_namelen = l;
		m->msg_flags = 0;
		return r;
	}
	return do_recv(s, m->msg_iov, m->msg_iovlen, f);
}

ssize_t rread(int s, void *b, size_t n) { return rrecv(s, b, n, 0); }
ssize_t rreadv(int s, const struct iovec *v, int n) { return do_recv(s, v, n, 0); }

/* ctrl_now sends control message v once a slot is free, waiting up to 1 s. */
static int ctrl_now(struct rsk *s, uint32_t v)
{
	int64_t end = now_ms() + 1000;

	while (s->ctrl_out >= CTRL_MAX && !s->err && now_ms() < end) {
		if (!progress(s))
			wait_rs(s, 50);
	}
	if (s->err)
		return fail(s->err);
	return post_ctrl(s, IMM(OP_CTRL, v));
}

int rshutdown(int fd, int how)
{
	struct rsk *s = get(fd);
	int r = 0;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return 0; /* nothing to tell a peer */
	pthread_mutex_lock(&s->mu);
	if (s->state != S_CONN) {
		pthread_mutex_unlock(&s->mu);
		return fail(ENOTCONN);
	}
	progress(s);
	if (how == SHUT_RD || how == SHUT_RDWR)
		s->rd_shut = 1;
	if (how == SHUT_RDWR && !s->disc_sent) {
		if (!s->peer_closed && !s->err)
			r = ctrl_now(s, CTRL_DISCONNECT);
		s->disc_sent = 1;
	} else if (how == SHUT_WR && !s->shut_sent && !s->disc_sent) {
		if (!s->peer_closed && !s->err)
			r = ctrl_now(s, CTRL_SHUTDOWN);
		s->shut_sent = 1;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

int rclose(int fd)
{
	struct rsk *s = get(fd);

	if (!s)
		return fail(EBADF);
	drop(s);
	if (s->dg) {
		dg_close(s->dg);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	if (s->state == S_CONN) {
		int64_t end = now_ms() + 1000;

		progress(s);
		if (!s->disc_sent && !s->peer_closed && !s->err)
			ctrl_now(s, CTRL_DISCONNECT);
		s->disc_sent = 1;
		/* what was posted goes before the QP does: nothing of ours outlives the process */
		while ((s->data_out || s->ctrl_out) && !s->err && now_ms() < end) {
			if (!progress(s))
				wait_rs(s, 50);
		}
		/* and the QP stays until the peer has closed too (its DISCONNECT, or its
		 * rdma_cm disconnect), 1 s at most: a peer half-closing (SHUTDOWN) after reading
		 * ours would otherwise find its QP flushed by our disconnect */
		end = now_ms() + 1000;
		while (!s->peer_closed && !s->err && now_ms() < end) {
			if (!progress(s))
				wait_rs(s, 50);
		}
		if (s->id->qp)
			rdma_destroy_qp(s->id);
		cm_events(s);
		if (!s->cm_gone)
			rdma_disconnect(s->id);
	}
	s->state = S_DEAD;
	for (int i = 0; i < IOMAP_MAX; i++)
		if (s->maps[i].mr)
			ibv_dereg_mr(s->maps[i].mr);
	free_verbs(s);
	rdma_destroy_id(s->id);
	rdma_destroy_event_channel(s->ch);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_destroy(&s->mu);
	free(s);
	return 0;
}

/* ---- names and options ---- */

static int copy_addr(struct sockaddr *src, struct sockaddr *a, socklen_t *l)
{
	socklen_t n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

	if (!a || !l)
		return fail(EFAULT);
	memcpy(a, src, *l < n ? *l : n);
	*l = n;
	return 0;
}

int rgetpeername(int fd, struct sockaddr *a, socklen_t *l)
{
	struct rsk *s = get(fd);

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return dg_getpeername(s->dg, a, l);
	if (s->state != S_CONN)
		return fail(ENOTCONN);
	return copy_addr(rdma_get_peer_addr(s->id), a, l);
}

int rgetsockname(int fd, struct sockaddr *a, socklen_t *l)
{
	struct rsk *s = get(fd);

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return getsockname(s->fd, a, l);
	return copy_addr(rdma_get_local_addr(s->id), a, l);
}

static int int_opt(const void *v, socklen_t l, int *out)
{
	if (!v || l < sizeof(int))
		return fail(EINVAL);
	memcpy(out, v, sizeof(int));
	return 0;
}

int rsetsockopt(int fd, int lv, int o, const void *v, socklen_t l)
{
	struct rsk *s = get(fd);
	int x;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return dg_setsockopt(s->dg, lv, o, v, l);
	if (lv == SOL_SOCKET) {
		switch (o) {
		case SO_REUSEADDR:
			return int_opt(v, l, &s->reuse);
		case SO_SNDBUF:
			return int_opt(v, l, &s->sndbuf); /* remembered; the rings keep their size */
		case SO_RCVBUF:
			return int_opt(v, l, &s->rcvbuf);
		case SO_KEEPALIVE:
			return int_opt(v, l, &s->keepalive);
		case SO_LINGER:
			if (!v || l < sizeof(struct linger))
				return fail(EINVAL);
			memcpy(&s->linger, v, sizeof(struct linger));
			return 0;
		case SO_OOBINLINE:
			return int_opt(v, l, &x);
		}
	} else if (lv == IPPROTO_TCP) {
		switch (o) {
		case TCP_NODELAY:
			return int_opt(v, l, &s->nodelay); /* every send goes at once anyway */
		case TCP_MAXSEG:
		case TCP_KEEPIDLE:
		case TCP_KEEPINTVL:
		case TCP_KEEPCNT:
			return int_opt(v, l, &x);
		}
	} else if (lv == SOL_RDMA && o == RDMA_IOMAPSIZE) {
		if (int_opt(v, l, &x))
			return -1;
		if (s->state != S_NEW && s->state != S_LISTEN)
			return fail(EINVAL); /* advertised when connecting */
		s->iomap_n = x < 0 ? 0 : x > IOMAP_MAX ? IOMAP_MAX : x;
		return 0;
	}
	dbg("rsetsockopt level %d option %d: ENOPROTOOPT", lv, o);
	return fail(ENOPROTOOPT);
}

static int give_int(void *v, socklen_t *l, int x)
{
	if (!v || !l || *l < sizeof(int))
		return fail(EINVAL);
	memcpy(v, &x, sizeof(int));
	*l = sizeof(int);
	return 0;
}

/* path_mss: the path MTU's payload, 2048 before a route is known (rsockets' answer to
 * TCP_MAXSEG). */
static int path_mss(struct rsk *s)
{
	int mss = 2048;

	pthread_mutex_lock(&s->mu); /* rclose may be destroying the id */
	if (s->id && s->id->route.num_paths && s->id->route.path_rec)
		mss = 1 << (7 + s->id->route.path_rec->mtu);
	pthread_mutex_unlock(&s->mu);
	return mss;
}

int rgetsockopt(int fd, int lv, int o, void *v, socklen_t *l)
{
	struct rsk *s = get(fd);
	int e;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return dg_getsockopt(s->dg, lv, o, v, l);
	if (lv == SOL_SOCKET) {
		switch (o) {
		case SO_REUSEADDR:
			return give_int(v, l, s->reuse);
		case SO_SNDBUF:
			return give_int(v, l, s->sndbuf);
		case SO_RCVBUF:
			return give_int(v, l, s->rcvbuf);
		case SO_KEEPALIVE:
			return give_int(v, l, s->keepalive);
		case SO_TYPE:
			return give_int(v, l, SOCK_STREAM);
		case SO_ERROR:
			e = s->err;
			s->err = s->state == S_CONN ? s->err : 0;
			return give_int(v, l, e);
		case SO_LINGER:
			if (!v || !l || *l < sizeof(struct linger))
				return fail(EINVAL);
			memcpy(v, &s->linger, sizeof(struct linger));
			*l = sizeof(struct linger);
			return 0;
		}
	} else if (lv == IPPROTO_TCP && o == TCP_NODELAY) {
		return give_int(v, l, s->nodelay);
	} else if (lv == IPPROTO_TCP && o == TCP_MAXSEG) {
		/*
		 * The path MTU's payload, as rsockets answers it (2048 before a route is
		 * known): iperf3 asks for it on every connection, and prints an error
		 * when the call fails. TCP_CONGESTION stays ENOPROTOOPT, as in rsockets.
		 */
		return give_int(v, l, path_mss(s));
	} else if (lv == IPPROTO_TCP && o == TCP_INFO) {
		/*
		 * rsockets fails this, and iperf3, which asks at every interval and at
		 * the end, then reports whatever its tcp_info held: 32 thousand
		 * "retransmits" a run. There is no TCP state behind an rsocket, so the
		 * answer says only what is true of it: established or closed, the
		 * segment size, and no retransmission the socket ever saw (the RC
		 * transport's own are below it). The rest is zero: no RTT or window is
		 * made up. Like the kernel, it fills at most *l bytes.
		 */
		struct tcp_info ti;

		if (!v || !l)
			return fail(EINVAL);
		memset(&ti, 0, sizeof(ti));
		ti.tcpi_state = s->state == S_CONN && !s->err && !s->peer_closed ? TCP_ESTABLISHED : TCP_CLOSE;
		ti.tcpi_snd_mss = ti.tcpi_rcv_mss = ti.tcpi_advmss = path_mss(s);
		if (*l > sizeof(ti))
			*l = sizeof(ti);
		memcpy(v, &ti, *l);
		return 0;
	}
	return fail(ENOPROTOOPT);
}

int rfcntl(int fd, int cmd, ...)
{
	struct rsk *s = get(fd);
	va_list ap;
	long arg;

	if (!s)
		return fail(EBADF);
	switch (cmd) {
	case F_GETFL:
		return O_RDWR | (s->nonblock ? O_NONBLOCK : 0);
	case F_SETFL:
		va_start(ap, cmd);
		arg = va_arg(ap, long);
		va_end(ap);
		s->nonblock = !!(arg & O_NONBLOCK);
		return 0;
	case F_GETFD:
	case F_SETFD:
		return 0;
	}
	return fail(ENOTSUP);
}

/* ---- readiness ---- */

static short revents(struct rsk *s, short want, int polling)
{
	short r = 0;

	if (s->dg)
		return dg_revents(s->dg, want, polling);
	if (s->state == S_LISTEN) {
		struct pollfd p = {.fd = s->ch->fd, .events = POLLIN};

		if (poll(&p, 1, 0) > 0)
			r |= POLLIN;
		return r & want;
	}
	if (s->state != S_CONN)
		return POLLHUP | (want & POLLOUT);
	progress(s);
	if (s->rx_avail || s->eof || s->rd_shut || s->err)
		r |= POLLIN;
	if (send_room(s) || s->err || s->peer_closed)
		r |= POLLOUT;
	r &= want;
	if (s->err)
		r |= POLLERR;
	if (s->peer_closed && !s->rx_avail)
		r |= POLLHUP; /* once what came before the peer's close is read */
	return r;
}

/* rpoll_wanted: whether some connected stream rsocket or datagram rsocket among fds
 * wants its wait polled first (poll_wanted); with none (plain fds, listeners) rpoll blocks
 * at once, as there is no CQ to poll. A datagram socket polls as a stream socket does:
 * blocking at once, udpong's echo through the daemon took 1.5x the time (capi guide). */
static int rpoll_wanted(struct pollfd *fds, nfds_t nfds)
{
	int want = 0;
	nfds_t i;

	for (i = 0; i < nfds && !want; i++) {
		struct rsk *s = get(fds[i].fd);

		if (s) {
			pthread_mutex_lock(&s->mu);
			want = poll_wanted(s);
			pthread_mutex_unlock(&s->mu);
		}
	}
	return want;
}

/* rpoll_record records on each connected stream rsocket and datagram rsocket among fds
 * whether rpoll's polling was answered. */
static void rpoll_record(struct pollfd *fds, nfds_t nfds, int answered)
{
	nfds_t i;

	for (i = 0; i < nfds; i++) {
		struct rsk *s = get(fds[i].fd);

		if (s) {
			pthread_mutex_lock(&s->mu);
			if (s->state == S_CONN || s->dg)
				poll_record(s, answered);
			pthread_mutex_unlock(&s->mu);
		}
	}
}

/* scan sets the revents of rpoll's fds and returns how many are ready; polling: one of
 * rpoll's polls before it blocks. */
static int scan(struct pollfd *fds, nfds_t nfds, int polling)
{
	nfds_t i;
	int ready = 0;

	for (i = 0; i < nfds; i++) {
		struct rsk *s = get(fds[i].fd);

		fds[i].revents = 0;
		if (s) {
			pthread_mutex_lock(&s->mu);
			fds[i].revents = revents(s, fds[i].events, polling);
			pthread_mutex_unlock(&s->mu);
		} else if (fds[i].fd >= 0) {
			struct pollfd p = fds[i];

			if (poll(&p, 1, 0) > 0)
				fds[i].revents = p.revents;
		}
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	/* microseconds: a 1 ms timeout waits a whole millisecond, as poll(2)'s does, not
	 * whatever is left of the current one (udpong's echo test waits 1 ms for each answer) */
	int64_t end = timeout > 0 ? now_us() + (int64_t)timeout * 1000 : 0;
	struct pollfd *w = calloc(2 * nfds + 1, sizeof(*w));
	nfds_t i;

	int polled = 0;

	if (!w && nfds)
		return fail(ENOMEM);
	for (;;) {
		int ready = scan(fds, nfds, 0), nw = 0, again = 0, ms;

		if (!ready && !polled && timeout != 0 && rpoll_wanted(fds, nfds)) {
			/* rsockets' polling_time: poll before arming and blocking (poll_first) */
			int64_t pend = now_us() + polling_us();

			polled = 1;
			while (!ready && now_us() < pend && (timeout < 0 || now_us() < end)) {
				sched_yield();
				ready = scan(fds, nfds, 1);
			}
			rpoll_record(fds, nfds, ready > 0);
		}
		if (ready || timeout == 0 || (timeout > 0 && now_us() >= end)) {
			free(w);
			return ready;
		}
		for (i = 0; i < nfds; i++) {
			struct rsk *s = get(fds[i].fd);

			if (!s) {
				w[nw++] = fds[i];
				continue;
			}
			if (s->dg) {
				int k = dg_wait_fds(s->dg, w + nw);

				if (k < 0)
					again = 1;
				else
					nw += k;
				continue;
			}
			pthread_mutex_lock(&s->mu);
			if (arm(s))
				again = 1;
			if (s->cc)
				w[nw++] = (struct pollfd){.fd = s->cc->fd, .events = POLLIN};
			w[nw++] = (struct pollfd){.fd = s->ch->fd, .events = POLLIN};
			pthread_mutex_unlock(&s->mu);
		}
		if (again)
			continue;
		ms = 100;
		if (timeout > 0 && end - now_us() < (int64_t)ms * 1000)
			ms = (int)((end - now_us() + 999) / 1000);
		if (ms < 0)
			ms = 0;
		if (poll(w, nw, ms) < 0 && errno != EINTR) {
			free(w);
			return -1;
		}
		for (i = 0; i < nfds; i++) {
			struct rsk *s = get(fds[i].fd);

			if (!s)
				continue;
			if (s->dg) {
				dg_after_wait(s->dg);
				continue;
			}
			pthread_mutex_lock(&s->mu);
			drain_cq_events(s);
			cm_events(s);
			pthread_mutex_unlock(&s->mu);
		}
	}
}

int rselect(int nfds, fd_set *r, fd_set *wr, fd_set *ex, struct timeval *t)
{
	struct pollfd *p = calloc(nfds > 0 ? nfds : 1, sizeof(*p));
	int n = 0, fd, ret, to = t ? (int)(t->tv_sec * 1000 + t->tv_usec / 1000) : -1;

	if (!p)
		return fail(ENOMEM);
	for (fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (r && FD_ISSET(fd, r))
			ev |= POLLIN;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	ret = rpoll(p, n, to);
	if (ret >= 0) {
		int i;

		if (r)
			FD_ZERO(r);
		if (wr)
			FD_ZERO(wr);
		if (ex)
			FD_ZERO(ex);
		ret = 0;
		for (i = 0; i < n; i++) {
			if (!p[i].revents)
				continue;
			if (r && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN))
				FD_SET(p[i].fd, r), ret++;
			if (wr && (p[i].revents & (POLLOUT | POLLERR | POLLHUP)) && (p[i].events & POLLOUT))
				FD_SET(p[i].fd, wr), ret++;
			if (ex && (p[i].revents & POLLPRI))
				FD_SET(p[i].fd, ex), ret++;
		}
	}
	free(p);
	return ret;
}

/* ---- iomap: riomap, riounmap, riowrite ---- */

/* riomap registers buf for the peer to write directly (riowrite at offset), and tells
 * the peer where it is by an iomap update into its target iomap. */
off_t riomap(int fd, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsk *s = get(fd);
	struct iomap *m = NULL;
	uint8_t *slot;
	uint64_t off, a;
	uint32_t k, l;
	int i;

	(void)flags;
	if (!s)
		return fail(EBADF);
	if (s->dg)
		return fail(ENOTSUP);
	if (!buf || !len || len > 0xffffffffu || !(prot & PROT_WRITE))
		return fail(EINVAL);
	pthread_mutex_lock(&s->mu);
	if (s->state != S_CONN) {
		pthread_mutex_unlock(&s->mu);
		return fail(ENOTCONN);
	}
	for (i = 0; i < s->peer_iomap_n && i < IOMAP_MAX; i++)
		if (!s->maps[i].mr) {
			m = &s->maps[i];
			break;
		}
	if (!m) {
		pthread_mutex_unlock(&s->mu);
		dbg("riomap: the peer's target iomap (%d entries) is full: ENOMEM", s->peer_iomap_n);
		return fail(ENOMEM);
	}
	if (offset == -1)
		offset = s->next_off;
	m->mr = ibv_reg_mr(s->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!m->mr) {
		int e = errno;

		pthread_mutex_unlock(&s->mu);
		dbg("riomap: ibv_reg_mr: %s", strerror(e));
		return fail(e);
	}
	m->buf = buf, m->len = len, m->off = offset;
	if ((off_t)(offset + len) > s->next_off)
		s->next_off = offset + len;
	while (s->ctrl_out >= CTRL_MAX - 2 && !s->err)
		if (!progress(s))
			wait_rs(s, 50);
	slot = s->meta + META_CTRL + (s->ctrl_seq % CTRL_MAX) * CTRL_SLOT;
	off = offset, a = (uintptr_t)buf, k = m->mr->rkey, l = (uint32_t)len;
	if (s->peer_be)
		off = htobe64(off), a = htobe64(a), k = htobe32(k), l = htobe32(l);
	else
		off = htole64(off), a = htole64(a), k = htole32(k), l = htole32(l);
	memcpy(slot, &off, 8), memcpy(slot + 8, &a, 8), memcpy(slot + 16, &k, 4), memcpy(slot + 20, &l, 4);
	if (s->err || post_write(s, WR_CTRL, slot, IOMAP_LEN, s->meta_mr->lkey,
				 s->peer_tsgl + (uint64_t)s->peer_tsgl_n * SGE_LEN + (uint64_t)i * IOMAP_LEN, s->peer_tsgl_key,
				 IMM(OP_IOMAP, i))) {
		int e = s->err ? s->err : errno;

		ibv_dereg_mr(m->mr);
		m->mr = NULL;
		pthread_mutex_unlock(&s->mu);
		return fail(e);
	}
	s->ctrl_out++;
	s->ctrl_seq++;
	pthread_mutex_unlock(&s->mu);
	return offset;
}

/* riounmap deregisters a buffer riomap registered; the peer is not told (as rsockets). */
int riounmap(int fd, void *buf, size_t len)
{
	struct rsk *s = get(fd);
	int i;

	if (!s)
		return fail(EBADF);
	if (s->dg)
		return fail(ENOTSUP);
	pthread_mutex_lock(&s->mu);
	for (i = 0; i < IOMAP_MAX; i++)
		if (s->maps[i].mr && s->maps[i].buf == buf && s->maps[i].len == len) {
			ibv_dereg_mr(s->maps[i].mr);
			memset(&s->maps[i], 0, sizeof(s->maps[i]));
			pthread_mutex_unlock(&s->mu);
			return 0;
		}
	pthread_mutex_unlock(&s->mu);
	return fail(EINVAL);
}

/* riowrite copies into the staging buffer and RDMA-writes (no immediate: the peer's
 * CPU is not involved) into the peer's buffer mapped at offset. */
size_t riowrite(int fd, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsk *s = get(fd);
	size_t done = 0;
	int nb, i;

	if (!s || s->dg) {
		errno = s ? ENOTSUP : EBADF;
		return (size_t)-1;
	}
	nb = s->nonblock || (flags & MSG_DONTWAIT);
	pthread_mutex_lock(&s->mu);
	while (done < count) {
		struct tgt *t = NULL;
		uint64_t at = offset + done, head, room;

		if (s->state != S_CONN || s->err || s->peer_closed || s->disc_sent || s->shut_sent) {
			int e = s->err ? s->err : s->state != S_CONN ? ENOTCONN : EPIPE;

			pthread_mutex_unlock(&s->mu);
			if (done)
				return done;
			errno = e;
			return (size_t)-1;
		}
		progress(s);
		for (i = 0; i < s->iomap_n; i++)
			if (s->riomap_tgt[i].len && at >= s->riomap_off[i] && at < s->riomap_off[i] + s->riomap_tgt[i].len) {
				t = &s->riomap_tgt[i];
				break;
			}
		if (!t) {
			pthread_mutex_unlock(&s->mu);
			if (done)
				return done;
			dbg("riowrite: nothing of the peer's is mapped at offset %llu: EINVAL", (unsigned long long)at);
			errno = EINVAL;
			return (size_t)-1;
		}
		head = s->staged % STAGE_SZ;
		room = STAGE_SZ - s->st_used;
		if (room > STAGE_SZ - head)
			room = STAGE_SZ - head;
		if (room > MAX_MSG)
			room = MAX_MSG;
		if (room > count - done)
			room = count - done;
		if (room > s->riomap_off[i] + t->len - at)
			room = s->riomap_off[i] + t->len - at;
		if (!room || s->data_out >= CREDITS) {
			if (nb) {
				pthread_mutex_unlock(&s->mu);
				if (done)
					return done;
				errno = EAGAIN;
				return (size_t)-1;
			}
			wait_rs(s, 100);
			continue;
		}
		memcpy(s->stage + head, (const uint8_t *)buf + done, room);
		{
			struct ibv_sge sge = {.addr = (uintptr_t)(s->stage + head), .length = room, .lkey = s->stage_mr->lkey};
			struct ibv_send_wr wr, *bad;
			int e;

			memset(&wr, 0, sizeof(wr));
			wr.wr_id = WR_DATA | room;
			wr.sg_list = &sge;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_RDMA_WRITE;
			wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.rdma.remote_addr = t->addr + (at - s->riomap_off[i]);
			wr.wr.rdma.rkey = t->key;
			if ((e = ibv_post_send(s->id->qp, &wr, &bad))) {
				s->err = e;
				continue;
			}
		}
		s->staged += room;
		s->st_used += room;
		s->data_out++;
		done += room;
	}
	pthread_mutex_unlock(&s->mu);
	return done;
}
