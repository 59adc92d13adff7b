/*
 * Queue pairs and shared receive queues: control operations are commands; posting
 * writes WQEs into the rings the daemon consumes (docs/attach-protocol.md, "Shared
 * queues", "Doorbells and wake-ups"), one lock per queue.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "gva.h"
#include "../gv.h"

int gva_put_av(struct gva_msg *m, const struct ibv_ah_attr *a);
void gva_get_av(struct gva_rd *r, struct ibv_ah_attr *a);

static void st32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void st64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }

/* gva_wq_init attaches a ring of slots × slot_size at ring, checked against the region's size. */
static int gva_wq_init(struct gva_wq *wq, uint8_t *mem, size_t size, uint64_t off, uint32_t slots,
		       uint32_t slot_size, uint32_t max_sge, uint32_t hdr)
{
	if (!slots || (slots & (slots - 1)) || slots > (1u << 24) || slot_size % 8 ||
	    slot_size < hdr + GVA_SGE * (max_sge ? max_sge : 1) || off % 8 ||
	    off + GVA_RING_CTRL + (uint64_t)slots * slot_size > size)
		return EIO;
	wq->ring = mem + off;
	wq->slots = slots;
	wq->slot_size = slot_size;
	wq->max_sge = max_sge;
	wq->head = wq->tail = __atomic_load_n((uint64_t *)(wq->ring + GVA_OFF_HEAD), __ATOMIC_SEQ_CST);
	pthread_mutex_init(&wq->mu, NULL);
	return 0;
}

/* gva_wq_slot returns the next free slot, or NULL when the ring is full (or corrupt). */
static uint8_t *gva_wq_slot(struct gva_wq *wq)
{
	if (wq->head - wq->tail >= wq->slots) {
		uint64_t t = __atomic_load_n((uint64_t *)(wq->ring + GVA_OFF_TAIL), __ATOMIC_SEQ_CST);

		if (wq->head - t > wq->slots)
			return NULL; /* an impossible tail: the daemon will have failed the queue */
		wq->tail = t;
		if (wq->head - wq->tail >= wq->slots)
			return NULL;
	}
	return wq->ring + GVA_RING_CTRL + (wq->head & (wq->slots - 1)) * (uint64_t)wq->slot_size;
}

/*
 * gva_wq_publish stores the new head, then rings the doorbell only if the daemon said
 * it sleeps (or may): either we see its flag or it sees our head.
 */
static void gva_wq_publish(struct gva_dev *d, struct gva_wq *wq)
{
	uint32_t *sleeping = (uint32_t *)(wq->ring + GVA_OFF_SLEEPING);

	__atomic_store_n((uint64_t *)(wq->ring + GVA_OFF_HEAD), wq->head, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST) && __atomic_exchange_n(sleeping, 0, __ATOMIC_SEQ_CST))
		gva_ring_doorbell(d);
}

static void gva_put_sgl(uint8_t *p, const struct ibv_sge *sg, int n)
{
	for (int i = 0; i < n; i++, p += GVA_SGE) {
		st64(p, sg[i].addr);
		st32(p + 8, sg[i].length);
		st32(p + 12, sg[i].lkey);
	}
}

static int gva_sgl_ok(const struct ibv_sge *sg, int n, uint32_t max)
{
	return n >= 0 && (uint32_t)n <= max && (n == 0 || sg);
}

/*
 * gva_wq_wait_taken waits until the daemon has taken the ring's WQEs up to head and
 * handed them to its engine (it moves the tail after that). A UD or UC QP needs it: a
 * message that finds no receive is dropped, and a program that posts a receive and then
 * has a peer send expects the receive to be there, as it is on an RNIC once
 * ibv_post_recv returns. (RC needs no wait: a message that comes first draws an RNR NAK
 * and is sent again.) The wait is the daemon's wake-up when it sleeps, and bounded.
 */
static void gva_wq_wait_taken(struct gva_dev *d, struct gva_wq *wq, uint64_t head)
{
	uint64_t *tailp = (uint64_t *)(wq->ring + GVA_OFF_TAIL);
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned spins = 0; (int64_t)(__atomic_load_n(tailp, __ATOMIC_SEQ_CST) - head) < 0; spins++) {
		if (gva_usable(d))
			return;
		if (spins % 64 == 63) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - start.tv_sec >= 2) {
				gva_debug("the daemon has not taken receives posted 2 s ago");
				return;
			}
		}
		sched_yield();
	}
}

int gva_wq_post_recv(struct gva_dev *d, struct gva_wq *wq, struct ibv_recv_wr *wr, int *bad,
		     uint32_t *outstanding, uint32_t max, int sync)
{
	int i = 0, rc = 0;

	if ((rc = gva_usable(d))) {
		*bad = 0;
		return rc;
	}
	pthread_mutex_lock(&wq->mu);
	for (; wr; wr = wr->next, i++) {
		uint8_t *s;

		if (!gva_sgl_ok(wr->sg_list, wr->num_sge, wq->max_sge)) {
			rc = EINVAL;
			break;
		}
		if ((outstanding && __atomic_load_n(outstanding, __ATOMIC_SEQ_CST) >= max) || !(s = gva_wq_slot(wq))) {
			rc = ENOMEM;
			break;
		}
		if (outstanding)
			__atomic_add_fetch(outstanding, 1, __ATOMIC_SEQ_CST);
		st64(s, wr->wr_id);
		st32(s + 8, (uint32_t)wr->num_sge);
		st32(s + 12, 0);
		gva_put_sgl(s + GVA_RECV_HDR, wr->sg_list, wr->num_sge);
		wq->head++;
	}
	if (i > 0)
		gva_wq_publish(d, wq);
	uint64_t head = wq->head;
	pthread_mutex_unlock(&wq->mu);
	*bad = i;
	if (i > 0 && sync)
		gva_wq_wait_taken(d, wq, head);
	return rc;
}

static void gva_qp_unmap(struct gva_qp *q)
{
	if (q->stage_mr)
		gv_dereg_mr((uintptr_t)q->stage_mr);
	if (q->stage)
		munmap(q->stage, q->stage_size);
	if (q->mem) {
		munmap(q->mem, q->size);
		pthread_mutex_destroy(&q->sq.mu);
	}
	if (q->has_rq)
		pthread_mutex_destroy(&q->rq.mu);
}

/*
 * gva_stage_init registers the QP's inline staging: one slot of max_inline bytes per
 * send WQE the daemon may not yet have posted to its engine (the send ring's slots, and
 * the WQEs it took but holds back while its engine's queue is full), so a slot is free
 * again by the time the ring reuses its index (docs/attach-protocol.md, "Send WQE").
 */
static int gva_stage_init(struct gva_qp *q, struct gva_pd *p)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint32_t rkey;
	int rc;

	q->max_inline = q->cap.max_inline_data;
	if (!q->max_inline)
		return 0;
	q->stage_slots = q->sq.slots + GVA_DAEMON_BATCH;
	q->stage_size = ((size_t)q->stage_slots * q->max_inline + page - 1) & ~(page - 1);
	q->stage = mmap(NULL, q->stage_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q->stage == MAP_FAILED) {
		q->stage = NULL;
		return ENOMEM;
	}
	rc = gva_reg_internal(p, q->stage, q->stage_size, IBV_ACCESS_LOCAL_WRITE, &q->stage_mr, &q->stage_lkey, &rkey);
	if (rc)
		q->stage_mr = NULL;
	return rc;
}

int gv_create_qp(uintptr_t ph, uintptr_t sendCQ, uintptr_t recvCQ, uintptr_t srqH, int typ, int sigAll,
		 struct ibv_qp_cap *cap, void *qp, uintptr_t *out, uint32_t *qpn)
{
	struct gva_pd *p = (struct gva_pd *)ph;
	struct gva_cq *scq = (struct gva_cq *)sendCQ, *rcq = (struct gva_cq *)recvCQ;
	struct gva_srq *srq = (struct gva_srq *)srqH;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_qp *q;
	uint32_t sqs, sqsz, rqoff, rqs, rqsz;
	int fd, rc;

	switch (typ) {
	case IBV_QPT_RC: case IBV_QPT_UC: case IBV_QPT_UD:
		break;
	case IBV_QPT_XRC_SEND: /* an initiator: a send queue only (capi/qp.c passes no recv_cq or SRQ) */
		if (rcq || srq)
			return EINVAL;
		break;
	case IBV_QPT_XRC_RECV: /* made from an XRC domain: gv_create_xrc_recv_qp */
		return EINVAL;
	case IBV_QPT_RAW_PACKET: case IBV_QPT_DRIVER:
		return EOPNOTSUPP;
	default:
		return EINVAL;
	}
	if (!p || !scq || (!rcq && typ != IBV_QPT_XRC_SEND) || scq->d != p->d || (rcq && rcq->d != p->d) ||
	    (srq && srq->d != p->d))
		return EINVAL;
	if (cap->max_send_sge > GVA_MAX_SGE || cap->max_recv_sge > GVA_MAX_SGE)
		return EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return ENOMEM;
	gva_msg_init(&m);
	gva_put32(&m, p->h);
	gva_put8(&m, (uint8_t)typ);
	gva_put8(&m, sigAll ? 1 : 0);
	gva_put8(&m, 0);
	gva_put8(&m, 0);
	gva_put32(&m, scq->h);
	gva_put32(&m, rcq ? rcq->h : 0);
	gva_put32(&m, srq ? srq->h : 0);
	gva_put32(&m, cap->max_send_wr);
	gva_put32(&m, cap->max_recv_wr);
	gva_put32(&m, cap->max_send_sge);
	gva_put32(&m, cap->max_recv_sge);
	gva_put32(&m, cap->max_inline_data);
	if ((rc = gva_call(p->d, GVA_CREATE_QP, &m, NULL, 0, buf, &r, &fd, 1))) {
		free(q);
		return rc;
	}
	q->d = p->d;
	q->type = typ;
	q->h = gva_get32(&r);
	q->qpn = gva_get32(&r);
	q->cap.max_send_wr = gva_get32(&r);
	q->cap.max_recv_wr = gva_get32(&r);
	q->cap.max_send_sge = gva_get32(&r);
	q->cap.max_recv_sge = gva_get32(&r);
	q->cap.max_inline_data = gva_get32(&r);
	sqs = gva_get32(&r);
	sqsz = gva_get32(&r);
	rqoff = gva_get32(&r);
	rqs = gva_get32(&r);
	rqsz = gva_get32(&r);
	q->size = gva_get32(&r);
	rc = EIO;
	if (r.short_ || q->cap.max_send_sge > GVA_MAX_SGE || q->cap.max_recv_sge > GVA_MAX_SGE)
		goto fail_fd;
	if ((rc = gva_map(fd, q->size, &q->mem)))
		goto fail_fd;
	close(fd);
	if ((rc = gva_wq_init(&q->sq, q->mem, q->size, 0, sqs, sqsz, q->cap.max_send_sge, GVA_SEND_HDR))) {
		munmap(q->mem, q->size);
		goto fail;
	}
	if (!srq && rcq) {
		if ((rc = gva_wq_init(&q->rq, q->mem, q->size, rqoff, rqs, rqsz, q->cap.max_recv_sge, GVA_RECV_HDR))) {
			pthread_mutex_destroy(&q->sq.mu);
			munmap(q->mem, q->size);
			goto fail;
		}
		q->has_rq = 1;
	}
	if ((rc = gva_stage_init(q, p)) || (q->has_rq && (rc = gva_cq_add_rq(rcq, q)))) {
		gva_qp_unmap(q);
		goto fail;
	}
	if (q->has_rq)
		q->rcq = rcq;
	q->state = IBV_QPS_RESET;
	q->cobj = qp;
	*cap = q->cap;
	*qpn = q->qpn;
	gva_track(q->d, GVA_EV_QP, q->h, qp);
	*out = (uintptr_t)q;
	return 0;
fail_fd:
	close(fd);
fail:
	gva_simple(p->d, GVA_DESTROY_QP, q->h);
	free(q);
	return rc;
}

int gv_destroy_qp(uintptr_t h)
{
	struct gva_qp *q = (struct gva_qp *)h;
	int rc;

	if (!q)
		return EINVAL;
	rc = gva_simple(q->d, GVA_DESTROY_QP, q->h);
	if (rc && !gva_usable(q->d))
		return rc;
	gva_untrack(q->d, GVA_EV_QP, q->h);
	if (q->rcq && q->d->pid == gva_getpid()) /* a child cannot poll: no count to keep (and maybe a held lock) */
		gva_cq_remove_rq(q->rcq, q);
	gva_qp_unmap(q);
	free(q);
	return 0;
}

/* The attribute mask bits the device takes (it checks them per transition). */
#define GVA_QP_MASK_KNOWN (IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS | \
	IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | \
	IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | \
	IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | \
	IBV_QP_CAP | IBV_QP_DEST_QPN)

int gv_modify_qp(uintptr_t h, struct ibv_qp_attr *a, int mask)
{
	struct gva_qp *q = (struct gva_qp *)h;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	int rc;

	if (!q || (mask & ~GVA_QP_MASK_KNOWN))
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, q->h);
	gva_put32(&m, (uint32_t)mask);
	gva_put8(&m, a->qp_state);
	gva_put8(&m, a->cur_qp_state);
	gva_put8(&m, a->path_mtu);
	gva_put8(&m, a->port_num);
	gva_put8(&m, a->min_rnr_timer);
	gva_put8(&m, a->timeout);
	gva_put8(&m, a->retry_cnt);
	gva_put8(&m, a->rnr_retry);
	gva_put8(&m, a->max_rd_atomic);
	gva_put8(&m, a->max_dest_rd_atomic);
	gva_put16(&m, a->pkey_index);
	gva_put32(&m, a->qkey);
	gva_put32(&m, a->rq_psn);
	gva_put32(&m, a->sq_psn);
	gva_put32(&m, a->dest_qp_num);
	gva_put32(&m, a->qp_access_flags);
	gva_put32(&m, a->cap.max_send_wr);
	gva_put32(&m, a->cap.max_recv_wr);
	gva_put32(&m, a->cap.max_send_sge);
	gva_put32(&m, a->cap.max_recv_sge);
	gva_put32(&m, a->cap.max_inline_data);
	if (mask & IBV_QP_AV) {
		if (gva_put_av(&m, &a->ah_attr)) {
			gva_debug("modify QP: RoCE address vector without a GRH (is_global 0)");
			return EINVAL;
		}
	} else {
		struct ibv_ah_attr none;

		memset(&none, 0, sizeof(none));
		none.is_global = 1;
		gva_put_av(&m, &none);
	}
	if ((rc = gva_call(q->d, GVA_MODIFY_QP, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	if (mask & IBV_QP_STATE)
		__atomic_store_n(&q->state, (int)a->qp_state, __ATOMIC_SEQ_CST);
	return 0;
}

int gv_query_qp(uintptr_t h, struct ibv_qp_attr *a, struct ibv_qp_init_attr *init)
{
	struct gva_qp *q = (struct gva_qp *)h;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	int rc;

	if (!q)
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, q->h);
	if ((rc = gva_call(q->d, GVA_QUERY_QP, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)gva_get8(&r);
	a->cur_qp_state = (enum ibv_qp_state)gva_get8(&r);
	a->path_mtu = (enum ibv_mtu)gva_get8(&r);
	a->port_num = gva_get8(&r);
	a->min_rnr_timer = gva_get8(&r);
	a->timeout = gva_get8(&r);
	a->retry_cnt = gva_get8(&r);
	a->rnr_retry = gva_get8(&r);
	a->max_rd_atomic = gva_get8(&r);
	a->max_dest_rd_atomic = gva_get8(&r);
	a->pkey_index = gva_get16(&r);
	a->qkey = gva_get32(&r);
	a->rq_psn = gva_get32(&r);
	a->sq_psn = gva_get32(&r);
	a->dest_qp_num = gva_get32(&r);
	a->qp_access_flags = gva_get32(&r);
	a->cap.max_send_wr = gva_get32(&r);
	a->cap.max_recv_wr = gva_get32(&r);
	a->cap.max_send_sge = gva_get32(&r);
	a->cap.max_recv_sge = gva_get32(&r);
	a->cap.max_inline_data = gva_get32(&r);
	gva_get_av(&r, &a->ah_attr);
	uint8_t st = gva_get8(&r);
	if (r.short_)
		return EIO;
	a->qp_state = a->cur_qp_state = (enum ibv_qp_state)st;
	__atomic_store_n(&q->state, (int)st, __ATOMIC_SEQ_CST);
	init->cap = a->cap;
	init->qp_type = (enum ibv_qp_type)q->type;
	return 0;
}

/* The opcodes whose payload the engine copies at post time when IBV_SEND_INLINE is set. */
static int gva_inlinable(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
	       op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/*
 * gva_put_send writes one send WQE into slot s; EINVAL for a request no provider would
 * take (a window or AH that is not ours, an inline payload beyond max_inline_data).
 */
static int gva_put_send(struct gva_qp *q, uint8_t *s, const struct ibv_send_wr *wr)
{
	uint32_t imm = 0, ah = 0, mw = 0, mr = 0, brkey = 0, bacc = 0, qpn = 0, qkey = 0, rkey = 0;
	uint64_t raddr = 0, cmp = 0, swap = 0, baddr = 0, blen = 0;
	int nsge = wr->num_sge;

	switch (wr->opcode) {
	case IBV_WR_SEND_WITH_IMM: case IBV_WR_RDMA_WRITE_WITH_IMM:
		imm = be32toh(wr->imm_data); /* the wire's order; the WQE holds host order */
		break;
	case IBV_WR_SEND_WITH_INV: case IBV_WR_LOCAL_INV:
		imm = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_RDMA_READ:
		raddr = wr->wr.rdma.remote_addr;
		rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
		raddr = wr->wr.atomic.remote_addr;
		rkey = wr->wr.atomic.rkey;
		cmp = wr->wr.atomic.compare_add;
		swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_BIND_MW: {
		const struct gv_mw *w = (const struct gv_mw *)wr->bind_mw.mw;
		const struct gv_mr *r = (const struct gv_mr *)wr->bind_mw.bind_info.mr;

		if (!w || !w->h)
			return EINVAL;
		mw = ((struct gva_mw *)w->h)->h;
		if (r) {
			if (!r->h)
				return EINVAL;
			mr = ((struct gva_mr *)r->h)->h;
		}
		brkey = wr->bind_mw.rkey;
		bacc = wr->bind_mw.bind_info.mw_access_flags;
		baddr = wr->bind_mw.bind_info.addr;
		blen = wr->bind_mw.bind_info.length;
		break;
	}
	default:
		break;
	}
	if (q->type == IBV_QPT_UD) {
		const struct gv_ah *a = (const struct gv_ah *)wr->wr.ud.ah;

		if (!a || !a->h)
			return EINVAL;
		ah = ((struct gva_ah *)a->h)->h;
		qpn = wr->wr.ud.remote_qpn;
		qkey = wr->wr.ud.remote_qkey;
	} else if (q->type == IBV_QPT_XRC_SEND) {
		qpn = wr->qp_type.xrc.remote_srqn; /* the remote_qpn word carries it */
	}
	st64(s, wr->wr_id);
	st32(s + 8, wr->opcode);
	st32(s + 12, wr->send_flags);
	st32(s + 16, imm);
	st64(s + 24, raddr);
	st32(s + 32, rkey);
	st32(s + 36, ah);
	st64(s + 40, cmp);
	st64(s + 48, swap);
	st32(s + 56, qpn);
	st32(s + 60, qkey);
	st32(s + 64, mw);
	st32(s + 68, brkey);
	st32(s + 72, mr);
	st32(s + 76, bacc);
	st64(s + 80, baddr);
	st64(s + 88, blen);
	if ((wr->send_flags & IBV_SEND_INLINE) && gva_inlinable(wr->opcode) && q->stage) {
		/* stage the bytes: the program may reuse its (unregistered) buffer at once */
		uint8_t *slot = q->stage + (q->sq.head % q->stage_slots) * (uint64_t)q->max_inline;
		uint32_t total = 0;

		for (int k = 0; k < nsge; k++) {
			if (wr->sg_list[k].length > q->max_inline - total)
				return EINVAL;
			total += wr->sg_list[k].length;
		}
		total = 0;
		for (int k = 0; k < nsge; k++) {
			memcpy(slot + total, (void *)(uintptr_t)wr->sg_list[k].addr, wr->sg_list[k].length);
			total += wr->sg_list[k].length;
		}
		struct ibv_sge one = { .addr = (uintptr_t)slot, .length = total, .lkey = q->stage_lkey };
		st32(s + 20, total ? 1 : 0);
		gva_put_sgl(s + GVA_SEND_HDR, &one, total ? 1 : 0);
		return 0;
	}
	st32(s + 20, (uint32_t)nsge);
	gva_put_sgl(s + GVA_SEND_HDR, wr->sg_list, nsge);
	return 0;
}

int gv_post_send(uintptr_t h, struct ibv_send_wr *wr, int *bad)
{
	struct gva_qp *q = (struct gva_qp *)h;
	int i = 0, rc = 0, st;

	*bad = 0;
	if (!q)
		return EINVAL;
	if ((rc = gva_usable(q->d)))
		return rc;
	if (!q->mem)
		return EINVAL; /* an XRC target has no send queue */
	st = __atomic_load_n(&q->state, __ATOMIC_SEQ_CST);
	if (st != IBV_QPS_RTS && st != IBV_QPS_SQD && st != IBV_QPS_SQE && st != IBV_QPS_ERR)
		return EINVAL;
	pthread_mutex_lock(&q->sq.mu);
	for (; wr; wr = wr->next, i++) {
		/* staged inline bytes go as one SGE, whatever the program's count */
		int staged = (wr->send_flags & IBV_SEND_INLINE) && q->stage && gva_inlinable(wr->opcode);
		uint8_t *s;

		if (!gva_sgl_ok(wr->sg_list, wr->num_sge, staged ? INT32_MAX : q->sq.max_sge)) {
			rc = EINVAL;
			break;
		}
		if ((unsigned)wr->opcode > IBV_WR_SEND_WITH_INV || (q->type == IBV_QPT_UD &&
		    wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM)) {
			rc = EINVAL; /* an opcode the device has not, or not for this QP type */
			break;
		}
		if (!(s = gva_wq_slot(&q->sq))) {
			rc = ENOMEM;
			break;
		}
		if ((rc = gva_put_send(q, s, wr)))
			break;
		q->sq.head++;
	}
	if (i > 0)
		gva_wq_publish(q->d, &q->sq);
	pthread_mutex_unlock(&q->sq.mu);
	*bad = i;
	return rc;
}

int gv_post_recv(uintptr_t h, int srq, struct ibv_recv_wr *wr, int *bad)
{
	*bad = 0;
	if (!h)
		return EINVAL;
	if (srq) {
		struct gva_srq *s = (struct gva_srq *)h;

		return gva_wq_post_recv(s->d, &s->rq, wr, bad, NULL, 0, 0);
	}
	struct gva_qp *q = (struct gva_qp *)h;
	if (!q->has_rq || __atomic_load_n(&q->state, __ATOMIC_SEQ_CST) == IBV_QPS_RESET)
		return EINVAL; /* its receives go to the SRQ; or not yet initialised */
	return gva_wq_post_recv(q->d, &q->rq, wr, bad, &q->rq_outstanding, q->cap.max_recv_wr,
				q->type == IBV_QPT_UD || q->type == IBV_QPT_UC);
}

int gv_bind_mw(uintptr_t qh, uintptr_t mwh, struct ibv_mw_bind *bind, uint32_t *rkey)
{
	struct gva_qp *q = (struct gva_qp *)qh;
	struct gva_mw *mw = (struct gva_mw *)mwh;
	const struct gv_mr *mr = (const struct gv_mr *)bind->bind_info.mr;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	int rc;

	if (!q || !mw || (mr && !mr->h))
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, q->h);
	gva_put32(&m, mw->h);
	gva_put64(&m, bind->wr_id);
	gva_put32(&m, bind->send_flags);
	gva_put32(&m, mr ? ((struct gva_mr *)mr->h)->h : 0);
	gva_put64(&m, bind->bind_info.addr);
	gva_put64(&m, bind->bind_info.length);
	gva_put32(&m, bind->bind_info.mw_access_flags);
	if ((rc = gva_call(q->d, GVA_BIND_MW, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	*rkey = gva_get32(&r);
	return 0;
}

int gv_mcast(uintptr_t qh, void *gid, uint16_t lid, int attach)
{
	struct gva_qp *q = (struct gva_qp *)qh;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;

	if (!q)
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, q->h);
	gva_putn(&m, gid, 16);
	gva_put16(&m, lid);
	return gva_call(q->d, attach ? GVA_ATTACH_MCAST : GVA_DETACH_MCAST, &m, NULL, 0, buf, &r, NULL, 0);
}

/* SRQs */

int gv_create_srq(uintptr_t ph, struct ibv_srq_attr *a, void *srq, uintptr_t *out)
{
	struct gva_pd *p = (struct gva_pd *)ph;
	struct gva_msg m;

	if (!p || a->max_sge > GVA_MAX_SGE)
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, p->h);
	gva_put32(&m, a->max_wr);
	gva_put32(&m, a->max_sge);
	gva_put32(&m, a->srq_limit);
	return gva_srq_create(p, GVA_CREATE_SRQ, &m, a, srq, out);
}

int gva_srq_create(struct gva_pd *p, uint16_t op, struct gva_msg *req, struct ibv_srq_attr *a, void *srq,
		   uintptr_t *out)
{
	uint8_t buf[GVA_MAX_MSG];
	struct gva_rd r;
	struct gva_srq *s;
	uint32_t max_wr, max_sge, slots, slot_size;
	int fd, rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return ENOMEM;
	if ((rc = gva_call(p->d, op, req, NULL, 0, buf, &r, &fd, 1))) {
		free(s);
		return rc;
	}
	s->d = p->d;
	s->h = gva_get32(&r);
	max_wr = gva_get32(&r);
	max_sge = gva_get32(&r);
	slots = gva_get32(&r);
	slot_size = gva_get32(&r);
	if (op == GVA_CREATE_XRC_SRQ)
		s->num = gva_get32(&r);
	rc = EIO;
	if (r.short_ || max_sge > GVA_MAX_SGE || !slots || slots > (1u << 24) || slot_size > (1u << 16)) {
		close(fd);
		goto fail;
	}
	s->size = GVA_RING_CTRL + (size_t)slots * slot_size;
	rc = gva_map(fd, s->size, &s->mem);
	close(fd);
	if (rc)
		goto fail;
	if ((rc = gva_wq_init(&s->rq, s->mem, s->size, 0, slots, slot_size, max_sge, GVA_RECV_HDR))) {
		munmap(s->mem, s->size);
		goto fail;
	}
	a->max_wr = max_wr;
	a->max_sge = max_sge;
	s->cobj = srq;
	gva_track(s->d, GVA_EV_SRQ, s->h, srq);
	*out = (uintptr_t)s;
	return 0;
fail:
	gva_simple(p->d, GVA_DESTROY_SRQ, s->h);
	free(s);
	return rc;
}

int gv_modify_srq(uintptr_t h, struct ibv_srq_attr *a, int mask)
{
	struct gva_srq *s = (struct gva_srq *)h;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;

	if (!s)
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return EOPNOTSUPP; /* an SRQ cannot be resized */
	if (!(mask & IBV_SRQ_LIMIT))
		return 0;
	gva_msg_init(&m);
	gva_put32(&m, s->h);
	gva_put32(&m, a->srq_limit);
	return gva_call(s->d, GVA_ARM_SRQ, &m, NULL, 0, buf, &r, NULL, 0);
}

int gv_query_srq(uintptr_t h, struct ibv_srq_attr *a)
{
	struct gva_srq *s = (struct gva_srq *)h;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	int rc;

	if (!s)
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, s->h);
	if ((rc = gva_call(s->d, GVA_QUERY_SRQ, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	a->max_wr = gva_get32(&r);
	a->max_sge = gva_get32(&r);
	a->srq_limit = gva_get32(&r);
	return 0;
}

int gv_destroy_srq(uintptr_t h)
{
	struct gva_srq *s = (struct gva_srq *)h;
	int rc;

	if (!s)
		return EINVAL;
	rc = gva_simple(s->d, GVA_DESTROY_SRQ, s->h);
	if (rc && !gva_usable(s->d))
		return rc; /* EBUSY while a QP uses it */
	gva_untrack(s->d, GVA_EV_SRQ, s->h);
	munmap(s->mem, s->size);
	pthread_mutex_destroy(&s->rq.mu);
	free(s);
	return 0;
}
