/* Queue pairs: create, modify, query, destroy, and the post verbs. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gv.h"
#include "gv_exports.h"

static void gv_init_qp_ex(struct gv_qp *q);

/* gv_qp_alloc allocates a QP's C object, or sets errno and returns NULL. */
static struct gv_qp *gv_qp_alloc(void)
{
	struct gv_qp *q;

	if (gv_fork_guard())
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		errno = ENOMEM;
	return q;
}

/* gv_qp_publish fills what every QP's ibv_qp holds; the PD, CQs and SRQ are the caller's. */
static struct ibv_qp *gv_qp_publish(struct gv_qp *q, struct ibv_context *context, void *qp_context,
				    uint32_t qpn, enum ibv_qp_type type)
{
	struct ibv_qp *qp = &q->qpx.qp_base;

	qp->context = context;
	qp->qp_context = qp_context;
	qp->qp_num = qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	gv_init_qp_ex(q);
	return qp;
}

static struct ibv_qp *gv_create(struct ibv_pd *pd, void *qp_context, struct ibv_cq *send_cq,
				struct ibv_cq *recv_cq, struct ibv_srq *srq, struct ibv_qp_cap *cap,
				enum ibv_qp_type type, int sq_sig_all)
{
	struct gv_qp *q;
	uint32_t qpn;
	int rc;

	/* An XRC_SEND QP has no receive queue: recv_cq is ignored (and may be NULL). */
	if (type == IBV_QPT_XRC_SEND)
		recv_cq = NULL, srq = NULL;
	if (!pd || !send_cq || (!recv_cq && type != IBV_QPT_XRC_SEND) || !cap) {
		errno = EINVAL;
		return NULL;
	}
	q = gv_qp_alloc();
	if (!q)
		return NULL;
	rc = gv_create_qp(((struct gv_pd *)pd)->h, ((struct gv_cq *)send_cq)->h,
			  recv_cq ? ((struct gv_cq *)recv_cq)->h : 0,
			  srq ? ((struct gv_srq *)srq)->h : 0, type, sq_sig_all, cap, &q->qpx.qp_base,
			  &q->h, &qpn);
	if (rc) {
		free(q);
		errno = rc;
		return NULL;
	}
	rc = gv_inline_init(q, ((struct gv_pd *)pd)->h, cap);
	if (rc) {
		gv_destroy_qp(q->h);
		free(q);
		errno = rc;
		return NULL;
	}
	struct ibv_qp *qp = gv_qp_publish(q, pd->context, qp_context, qpn, type);
	qp->pd = pd;
	qp->send_cq = send_cq;
	qp->recv_cq = recv_cq;
	qp->srq = srq;
	return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	return gv_create(pd, attr->qp_context, attr->send_cq, attr->recv_cq, attr->srq, &attr->cap,
			 attr->qp_type, attr->sq_sig_all);
}

/*
 * An XRC_RECV QP (IBTA Annex A14) belongs to an XRC domain, not a PD, and has no queues:
 * its ibv_qp has no PD, CQs or SRQ, and nothing to post.
 */
static struct ibv_qp *gv_create_xrc_recv(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct gv_qp *q;
	uint32_t qpn;
	int rc;

	if (!attr->xrcd || attr->xrcd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	q = gv_qp_alloc();
	if (!q)
		return NULL;
	rc = gv_create_xrc_recv_qp(((struct gv_xrcd *)attr->xrcd)->h, &q->qpx.qp_base, &q->h, &qpn);
	if (rc) {
		free(q);
		errno = rc;
		return NULL;
	}
	memset(&attr->cap, 0, sizeof(attr->cap));
	return gv_qp_publish(q, context, attr->qp_context, qpn, IBV_QPT_XRC_RECV);
}

/* ibv_create_qp_ex: the PD, CQs and SRQ, plus the ibv_wr_* send operations; or an XRC domain. */
struct ibv_qp *gv_op_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
			       IBV_QP_INIT_ATTR_CREATE_FLAGS;
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
			     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			     IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW;

	if (context && attr && attr->qp_type == IBV_QPT_XRC_RECV && !(attr->comp_mask & ~known)) {
		if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD)) {
			errno = EINVAL;
			return NULL;
		}
		return gv_create_xrc_recv(context, attr);
	}
	if (!context || !attr || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || (attr->comp_mask & ~known) ||
	    !attr->pd || attr->pd->context != context) {
		errno = attr && (attr->comp_mask & ~known) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~ops)) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return gv_create(attr->pd, attr->qp_context, attr->send_cq, attr->recv_cq, attr->srq, &attr->cap,
			 attr->qp_type, attr->sq_sig_all);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int rc;

	if (!qp || !attr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_modify_qp(((struct gv_qp *)qp)->h, attr, attr_mask);
	if (!rc && (attr_mask & IBV_QP_STATE))
		qp->state = attr->qp_state;
	return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	int rc;

	(void)attr_mask; /* every attribute is cheap to read */
	if (!qp || !attr || !init_attr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	memset(init_attr, 0, sizeof(*init_attr));
	rc = gv_query_qp(((struct gv_qp *)qp)->h, attr, init_attr);
	if (rc)
		return rc;
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	qp->state = attr->qp_state;
	return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp; (void)op; (void)flags;
	return 0; /* the engine writes a message's payload in PSN order, but promises nothing */
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	return EOPNOTSUPP;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	int rc;

	if (!qp)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_destroy_qp(((struct gv_qp *)qp)->h);
	if (rc)
		return rc;
	gv_inline_free((struct gv_qp *)qp);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(qp);
	return 0;
}

int gv_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int rc, idx = 0;

	if (!qp || !wr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	if (gv_wants_staging((struct gv_qp *)qp, wr))
		return gv_post_send_staged((struct gv_qp *)qp, wr, bad);
	rc = gv_post_send(((struct gv_qp *)qp)->h, wr, &idx);
	if (rc && bad) {
		for (*bad = wr; idx > 0 && (*bad)->next; idx--)
			*bad = (*bad)->next;
	}
	return rc;
}

int gv_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int rc, idx = 0;

	if (!qp || !wr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_post_recv(((struct gv_qp *)qp)->h, 0, wr, &idx);
	if (rc && bad) {
		for (*bad = wr; idx > 0 && (*bad)->next; idx--)
			*bad = (*bad)->next;
	}
	return rc;
}

/*
 * The ibv_wr_* interface: each call builds the next ibv_send_wr of a batch in the QP,
 * and wr_complete posts the batch through the same path as ibv_post_send.
 */
static struct gv_qp *gv_qpx(struct ibv_qp_ex *x) { return (struct gv_qp *)x; }

static struct ibv_send_wr *gv_wr_next(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct gv_qp *q = gv_qpx(x);
	struct ibv_send_wr *w;

	if (q->nwr == GV_WR_BATCH) {
		q->wr_err = ENOMEM;
		return NULL;
	}
	w = &q->wrs[q->nwr];
	memset(w, 0, sizeof(*w));
	w->wr_id = x->wr_id;
	w->send_flags = x->wr_flags;
	w->opcode = op;
	w->sg_list = q->sges[q->nwr];
	if (q->nwr > 0)
		q->wrs[q->nwr - 1].next = w;
	q->nwr++;
	return w;
}

static struct ibv_send_wr *gv_wr_cur(struct ibv_qp_ex *x)
{
	struct gv_qp *q = gv_qpx(x);

	return q->nwr ? &q->wrs[q->nwr - 1] : NULL;
}

static void gv_wr_start(struct ibv_qp_ex *x) { gv_qpx(x)->nwr = 0; gv_qpx(x)->wr_err = 0; }
static void gv_wr_abort(struct ibv_qp_ex *x) { gv_qpx(x)->nwr = 0; gv_qpx(x)->wr_err = 0; }

static int gv_wr_complete(struct ibv_qp_ex *x)
{
	struct gv_qp *q = gv_qpx(x);
	struct ibv_send_wr *bad;
	int rc = q->wr_err;

	if (!rc && q->nwr)
		rc = gv_op_post_send(&x->qp_base, q->wrs, &bad);
	q->nwr = 0;
	q->wr_err = 0;
	return rc;
}

static void gv_wr_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *w = gv_wr_next(x, op);

	if (w) {
		w->wr.rdma.rkey = rkey;
		w->wr.rdma.remote_addr = addr;
	}
}

static void gv_wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	gv_wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void gv_wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	gv_wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	if (gv_wr_cur(x))
		gv_wr_cur(x)->imm_data = imm;
}

static void gv_wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	gv_wr_rdma(x, IBV_WR_RDMA_READ, rkey, addr);
}

static void gv_wr_atomic(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr,
			 uint64_t cmp_add, uint64_t swap)
{
	struct ibv_send_wr *w = gv_wr_next(x, op);

	if (w) {
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.remote_addr = addr;
		w->wr.atomic.compare_add = cmp_add;
		w->wr.atomic.swap = swap;
	}
}

static void gv_wr_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swap)
{
	gv_wr_atomic(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, cmp, swap);
}

static void gv_wr_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	gv_wr_atomic(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void gv_wr_send(struct ibv_qp_ex *x) { gv_wr_next(x, IBV_WR_SEND); }

static void gv_wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct ibv_send_wr *w = gv_wr_next(x, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm;
}

static void gv_wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct ibv_send_wr *w = gv_wr_next(x, IBV_WR_SEND_WITH_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void gv_wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct ibv_send_wr *w = gv_wr_next(x, IBV_WR_LOCAL_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void gv_wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey,
			  const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *w = gv_wr_next(x, IBV_WR_BIND_MW);

	if (w) {
		w->bind_mw.mw = mw;
		w->bind_mw.rkey = rkey;
		w->bind_mw.bind_info = *info;
	}
}

static void gv_wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *w = gv_wr_cur(x);

	if (w) {
		w->wr.ud.ah = ah;
		w->wr.ud.remote_qpn = qpn;
		w->wr.ud.remote_qkey = qkey;
	}
}

/* The XRC SRQ at the target of an XRC_SEND QP's request (wr.qp_type.xrc.remote_srqn). */
static void gv_wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t remote_srqn)
{
	struct ibv_send_wr *w = gv_wr_cur(x);

	if (w)
		w->qp_type.xrc.remote_srqn = remote_srqn;
}

static void gv_wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sges)
{
	struct ibv_send_wr *w = gv_wr_cur(x);

	if (!w)
		return;
	if (n > GV_WR_SGE) {
		gv_qpx(x)->wr_err = EINVAL;
		return;
	}
	memcpy(w->sg_list, sges, n * sizeof(*sges));
	w->num_sge = (int)n;
}

static void gv_wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = { .addr = addr, .length = length, .lkey = lkey };

	gv_wr_set_sge_list(x, 1, &s);
}

/* Inline data through ibv_wr_*: copied at the call (inline.c). */
static void gv_wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct ibv_send_wr *w = gv_wr_cur(x);

	if (w)
		gv_wr_inline(gv_qpx(x), w, n, bufs);
}

static void gv_wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = { .addr = addr, .length = length };

	gv_wr_set_inline_data_list(x, 1, &b);
}

static void gv_init_qp_ex(struct gv_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;

	x->wr_rdma_write = gv_wr_rdma_write;
	x->wr_rdma_write_imm = gv_wr_rdma_write_imm;
	x->wr_rdma_read = gv_wr_rdma_read;
	x->wr_atomic_cmp_swp = gv_wr_cmp_swp;
	x->wr_atomic_fetch_add = gv_wr_fetch_add;
	x->wr_send = gv_wr_send;
	x->wr_send_imm = gv_wr_send_imm;
	x->wr_send_inv = gv_wr_send_inv;
	x->wr_local_inv = gv_wr_local_inv;
	x->wr_bind_mw = gv_wr_bind_mw;
	x->wr_set_ud_addr = gv_wr_set_ud_addr;
	x->wr_set_xrc_srqn = gv_wr_set_xrc_srqn;
	x->wr_set_sge = gv_wr_set_sge;
	x->wr_set_sge_list = gv_wr_set_sge_list;
	x->wr_set_inline_data = gv_wr_set_inline_data;
	x->wr_set_inline_data_list = gv_wr_set_inline_data_list;
	x->wr_start = gv_wr_start;
	x->wr_complete = gv_wr_complete;
	x->wr_abort = gv_wr_abort;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (!qp) {
		errno = EINVAL;
		return NULL;
	}
	return &((struct gv_qp *)qp)->qpx;
}
