/*
 * Protection domains, memory regions, completion queues and channels, shared receive
 * queues and address handles.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <endian.h>
#include "gv.h"
#include "gv_exports.h"

#define GV_FAIL(e) do { errno = (e); return NULL; } while (0)

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct gv_pd *p;
	int rc;

	if (!context)
		GV_FAIL(EINVAL);
	if (gv_fork_guard())
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		GV_FAIL(ENOMEM);
	rc = gv_alloc_pd(gv_ctx(context)->h, &p->h);
	if (rc) {
		free(p);
		GV_FAIL(rc);
	}
	p->pd.context = context;
	return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int rc;

	if (!pd)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_dealloc_pd(((struct gv_pd *)pd)->h);
	if (!rc)
		free(pd);
	return rc;
}

/*
 * gv_mapped reports whether [addr, addr+length) is mapped: the engine reads and writes
 * registered memory in place, and an unmapped page would crash the process later, in
 * the middle of a transfer, where the kernel's registration would have failed now.
 */
static int gv_mapped(void *addr, size_t length)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page - 1);
	uintptr_t end = (uintptr_t)addr + length;
	unsigned char vec[256];

	if (end < (uintptr_t)addr)
		return 0;
	while (start < end) {
		size_t chunk = (end - start + page - 1) / page;

		if (chunk > sizeof(vec))
			chunk = sizeof(vec);
		if (mincore((void *)start, chunk * page, vec) < 0)
			return 0; /* ENOMEM: a page of the range is not mapped */
		start += chunk * page;
	}
	return 1;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct gv_mr *m;
	int rc;

	if (!pd || !addr || !length)
		GV_FAIL(EINVAL);
	if (iova != (uintptr_t)addr)
		GV_FAIL(EOPNOTSUPP); /* the engine addresses a region by its virtual address */
	if (gv_fork_guard())
		return NULL;
	if (!gv_mapped(addr, length))
		GV_FAIL(EFAULT);
	m = calloc(1, sizeof(*m));
	if (!m)
		GV_FAIL(ENOMEM);
	rc = gv_reg_mr(((struct gv_pd *)pd)->h, addr, length, access, &m->h, &m->mr.lkey, &m->mr.rkey);
	if (rc) {
		free(m);
		GV_FAIL(rc);
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
				 int fd, int access)
{
	(void)pd; (void)offset; (void)length; (void)iova; (void)fd; (void)access;
	GV_FAIL(EOPNOTSUPP);
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr; (void)flags; (void)pd; (void)addr; (void)length; (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	int rc;

	if (!mr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_dereg_mr(((struct gv_mr *)mr)->h);
	if (!rc)
		free(mr);
	return rc;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct gv_channel *c;
	int fds[2], rc;

	if (!context)
		GV_FAIL(EINVAL);
	if (gv_fork_guard())
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		GV_FAIL(ENOMEM);
#ifdef GOVERBS_ATTACH
	/* the channel's fd is the backend's own (an epoll set of the CQs' eventfds) */
	(void)fds;
	rc = gv_create_comp_channel(gv_ctx(context)->h, -1, &c->h);
	if (rc) {
		free(c);
		GV_FAIL(rc);
	}
	c->wfd = -1;
	c->ch.context = context;
	c->ch.fd = gv_comp_channel_fd(c->h);
	c->ch.refcnt = 0;
	return &c->ch;
#endif
	if (pipe2(fds, O_CLOEXEC) < 0) {
		free(c);
		return NULL;
	}
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	rc = gv_create_comp_channel(gv_ctx(context)->h, fds[1], &c->h);
	if (rc) {
		close(fds[0]);
		close(fds[1]);
		free(c);
		GV_FAIL(rc);
	}
	c->wfd = fds[1];
	c->ch.context = context;
	c->ch.fd = fds[0];
	c->ch.refcnt = 0;
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct gv_channel *c = (struct gv_channel *)channel;

	if (!channel)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	if (__atomic_load_n(&channel->refcnt, __ATOMIC_SEQ_CST))
		return EBUSY; /* CQs still report here */
	gv_destroy_comp_channel(c->h);
	if (c->wfd >= 0) { /* a pipe's; the backend closes a fd of its own */
		close(c->ch.fd);
		close(c->wfd);
	}
	free(c);
	return 0;
}

static void gv_init_cq_ex(struct gv_cq *q);

static struct ibv_cq *gv_new_cq(struct ibv_context *context, int cqe, void *cq_context,
				   struct ibv_comp_channel *channel, int comp_vector)
{
	struct gv_cq *q;
	int rc;

	if (!context || cqe <= 0 || comp_vector < 0 || comp_vector >= context->num_comp_vectors)
		GV_FAIL(EINVAL);
	if (channel && channel->context != context)
		GV_FAIL(EINVAL);
	if (gv_fork_guard())
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		GV_FAIL(ENOMEM);
	rc = gv_create_cq(gv_ctx(context)->h, &cqe, channel ? ((struct gv_channel *)channel)->h : 0, &q->cq, &q->h);
	if (rc) {
		free(q);
		GV_FAIL(rc);
	}
	q->cq.context = context;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	q->cq.cqe = cqe;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	gv_init_cq_ex(q);
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_SEQ_CST);
	return &q->cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	return gv_new_cq(context, cqe, cq_context, channel, comp_vector);
}

/*
 * ibv_create_cq_ex: the standard completion fields only (no timestamps, VLAN, flow tag
 * or tag matching), and no parent domain.
 */
struct ibv_cq_ex *gv_op_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	const uint32_t known_flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	struct ibv_cq *cq;

	if (!context || !attr)
		GV_FAIL(EINVAL);
	if ((attr->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) || (attr->comp_mask & ~IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~known_flags)))
		GV_FAIL(EOPNOTSUPP);
	if (attr->cqe > INT32_MAX)
		GV_FAIL(EINVAL);
	cq = gv_new_cq(context, (int)attr->cqe, attr->cq_context, attr->channel, (int)attr->comp_vector);
	return cq ? &((struct gv_cq *)cq)->cqx : NULL;
}

static struct gv_cq *gv_cqx(struct ibv_cq_ex *x) { return (struct gv_cq *)x; }

/* gv_cq_next moves the CQ's next completion into cur: 0, ENOENT when empty. */
static int gv_cq_next(struct ibv_cq_ex *x)
{
	struct gv_cq *q = gv_cqx(x);
	int n;

	if (gv_fork_guard())
		return ENOSYS;
	n = gv_poll_cq(q->h, 1, &q->cur);
	if (n < 0)
		return EINVAL;
	if (n == 0)
		return ENOENT;
	x->status = q->cur.status;
	x->wr_id = q->cur.wr_id;
	return 0;
}

static int gv_cq_start_poll(struct ibv_cq_ex *x, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	return gv_cq_next(x);
}

static void gv_cq_end_poll(struct ibv_cq_ex *x) { (void)x; }
static enum ibv_wc_opcode gv_cq_opcode(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.opcode; }
static uint32_t gv_cq_vendor_err(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.vendor_err; }
static uint32_t gv_cq_byte_len(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.byte_len; }
static uint32_t gv_cq_qp_num(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.qp_num; }
static uint32_t gv_cq_src_qp(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.src_qp; }
static unsigned int gv_cq_wc_flags(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.wc_flags; }
static uint32_t gv_cq_slid(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.slid; }
static uint8_t gv_cq_sl(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.sl; }
static uint8_t gv_cq_dlid_path_bits(struct ibv_cq_ex *x) { return gv_cqx(x)->cur.dlid_path_bits; }

static __be32 gv_cq_imm_data(struct ibv_cq_ex *x)
{
	struct ibv_wc *wc = &gv_cqx(x)->cur;

	return (wc->wc_flags & IBV_WC_WITH_INV) ? htobe32(wc->invalidated_rkey) : wc->imm_data;
}

static void gv_init_cq_ex(struct gv_cq *q)
{
	struct ibv_cq_ex *x = &q->cqx;

	x->start_poll = gv_cq_start_poll;
	x->next_poll = gv_cq_next;
	x->end_poll = gv_cq_end_poll;
	x->read_opcode = gv_cq_opcode;
	x->read_vendor_err = gv_cq_vendor_err;
	x->read_byte_len = gv_cq_byte_len;
	x->read_imm_data = gv_cq_imm_data;
	x->read_qp_num = gv_cq_qp_num;
	x->read_src_qp = gv_cq_src_qp;
	x->read_wc_flags = gv_cq_wc_flags;
	x->read_slid = gv_cq_slid;
	x->read_sl = gv_cq_sl;
	x->read_dlid_path_bits = gv_cq_dlid_path_bits;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	int rc;

	if (!cq || cqe <= 0)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_resize_cq(((struct gv_cq *)cq)->h, &cqe);
	if (!rc)
		cq->cqe = cqe;
	return rc;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct ibv_comp_channel *channel;
	int rc;

	if (!cq)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	channel = cq->channel;
	rc = gv_destroy_cq(((struct gv_cq *)cq)->h);
	if (rc)
		return rc;
	if (channel)
		__atomic_sub_fetch(&channel->refcnt, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(cq);
	return 0;
}

int gv_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	if (!cq || gv_fork_guard())
		return -1;
	return gv_poll_cq(((struct gv_cq *)cq)->h, n, wc);
}

int gv_op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	if (!cq)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	return gv_req_notify_cq(((struct gv_cq *)cq)->h, solicited_only);
}

/*
 * A completion event is the ibv_cq pointer, written to the channel's pipe by the Go side
 * when an armed CQ gets a completion: read blocks like the kernel's event fd, and a
 * program may poll(2) the fd or make it non-blocking. In the C flavour the channel's fd
 * is an epoll set of its CQs' eventfds, which the daemon writes (capi/attach/gva_cq.c).
 */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct ibv_cq *got;
	ssize_t n;

	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
#ifdef GOVERBS_ATTACH
	{
		/* the channel's fd is an epoll set: a program makes it non-blocking as it
		 * would the kernel's event file, and a wait then returns EAGAIN */
		int fl = fcntl(channel->fd, F_GETFL), rc;
		void *p = NULL;

		rc = gv_get_cq_event(((struct gv_channel *)channel)->h, fl < 0 || !(fl & O_NONBLOCK), &p);
		if (rc) {
			errno = rc;
			return -1;
		}
		got = p;
		*cq = got;
		*cq_context = got->cq_context;
		return 0;
	}
#endif
	n = read(channel->fd, &got, sizeof(got));
	if (n != (ssize_t)sizeof(got)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	*cq = got;
	*cq_context = got->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct gv_srq *s;
	int rc;

	if (!pd || !attr)
		GV_FAIL(EINVAL);
	if (gv_fork_guard())
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		GV_FAIL(ENOMEM);
	rc = gv_create_srq(((struct gv_pd *)pd)->h, &attr->attr, &s->srq, &s->h);
	if (rc) {
		free(s);
		GV_FAIL(rc);
	}
	return gv_srq_publish(s, pd, attr->srq_context);
}

/* gv_srq_publish fills what every SRQ's ibv_srq holds (ibv_create_srq, and the XRC SRQs of xrc.c). */
struct ibv_srq *gv_srq_publish(struct gv_srq *s, struct ibv_pd *pd, void *srq_context)
{
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (!srq || !attr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	return gv_modify_srq(((struct gv_srq *)srq)->h, attr, mask);
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	return gv_query_srq(((struct gv_srq *)srq)->h, attr);
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	int rc;

	if (!srq)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_destroy_srq(((struct gv_srq *)srq)->h);
	if (rc)
		return rc;
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(srq);
	return 0;
}

int gv_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int rc, idx = 0;

	if (!srq || !wr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_post_recv(((struct gv_srq *)srq)->h, 1, wr, &idx);
	if (rc && bad) {
		for (*bad = wr; idx > 0 && (*bad)->next; idx--)
			*bad = (*bad)->next;
	}
	return rc;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct gv_ah *a;
	int rc;

	if (!pd || !attr)
		GV_FAIL(EINVAL);
	if (gv_fork_guard())
		return NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		GV_FAIL(ENOMEM);
	rc = gv_create_ah(((struct gv_pd *)pd)->h, attr, &a->h);
	if (rc) {
		free(a);
		GV_FAIL(rc);
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	return &a->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	int rc;

	if (!ah)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_destroy_ah(((struct gv_ah *)ah)->h);
	if (!rc)
		free(ah);
	return rc;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	int rc;

	if (!context || !wc || !grh || !ah_attr) {
		errno = EINVAL;
		return -1;
	}
	if (gv_fork_guard())
		return -1;
	rc = gv_init_ah_from_wc(port_num, wc, grh, ah_attr);
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (!pd)
		GV_FAIL(EINVAL);
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}

struct ibv_mw *gv_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct gv_mw *m;
	int rc;

	if (!pd)
		GV_FAIL(EINVAL);
	if (gv_fork_guard())
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		GV_FAIL(ENOMEM);
	rc = gv_alloc_mw(((struct gv_pd *)pd)->h, type, &m->h, &m->mw.rkey);
	if (rc) {
		free(m);
		GV_FAIL(rc);
	}
	m->mw.context = pd->context;
	m->mw.pd = pd;
	m->mw.type = type;
	return &m->mw;
}

int gv_op_dealloc_mw(struct ibv_mw *mw)
{
	int rc;

	if (!mw)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_dealloc_mw(((struct gv_mw *)mw)->h);
	if (!rc)
		free(mw);
	return rc;
}

/* A type 1 bind (ibv_bind_mw): the window's rkey changes as the bind executes. */
int gv_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	uint32_t rkey;
	int rc;

	if (!qp || !mw || !bind)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_bind_mw(((struct gv_qp *)qp)->h, ((struct gv_mw *)mw)->h, bind, &rkey);
	if (!rc)
		mw->rkey = rkey;
	return rc;
}

/* Multicast: a UD QP joins a group's IP multicast (verbs.QP.AttachMcast). */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return gv_mcast(((struct gv_qp *)qp)->h, (void *)gid->raw, lid, 1);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return gv_mcast(((struct gv_qp *)qp)->h, (void *)gid->raw, lid, 0);
}
