/*
 * Completion queues and channels. A CQ is a ring the daemon writes completions into
 * and we map (docs/attach-protocol.md, "Shared queues"): polling reads it with no
 * syscall. A completion channel is an epoll set of its CQs' eventfds (written by the
 * daemon when an armed CQ gets a completion), whose fd programs poll and
 * ibv_get_cq_event waits on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include "gva.h"

/*
 * gva_map maps a region the daemon sent, after checking that it holds at least size
 * bytes and is sealed against shrinking (else a later access could be SIGBUS). The
 * mapping is MADV_DONTFORK: a child after fork() must not write the parent's queues.
 */
int gva_map(int fd, size_t size, uint8_t **mem)
{
	struct stat st;
	int seals;
	void *p;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < size ||
	    (uint64_t)st.st_size > size + (1u << 16))
		return EIO;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return EIO;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return errno;
	madvise(p, size, MADV_DONTFORK);
	*mem = p;
	return 0;
}

/*
 * A channel is an epoll set of its CQs' eventfds, and that epoll fd is the channel's
 * fd: the daemon's eventfd write wakes a program waiting in poll(2) on it directly.
 * (It was a thread that waited on the set and wrote each CQ's ibv_cq pointer to a
 * pipe, the channel's fd: every event woke that thread and then the program, two
 * wake-ups, and on 2 loaded cores the thread's tens of microseconds per wake-up came
 * out of the daemon's CPU; iperf3 under librspreload spent 12% of a core in it.)
 * ibv_get_cq_event takes a ready CQ from the set and reads its eventfd (below).
 */
int gv_create_comp_channel(uintptr_t ch, int wfd, uintptr_t *out)
{
	struct gva_dev *d = (struct gva_dev *)ch;
	struct gva_chan *c;
	int rc;

	(void)wfd; /* the channel's fd is its epoll set (gv_comp_channel_fd) */
	if (!d)
		return EINVAL;
	if ((rc = gva_usable(d)))
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return ENOMEM;
	c->d = d;
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (c->epfd < 0) {
		rc = errno;
		free(c);
		return rc ? rc : ENOMEM;
	}
	pthread_mutex_init(&c->mu, NULL);
	*out = (uintptr_t)c;
	return 0;
}

/* gv_comp_channel_fd is the fd a program polls for the channel's events. */
int gv_comp_channel_fd(uintptr_t h)
{
	return ((struct gva_chan *)h)->epfd;
}

/*
 * gv_get_cq_event takes one event: a CQ of the channel whose eventfd the daemon wrote
 * (an armed CQ that got a completion); wait says whether to block until there is one.
 * It returns 0 with the program's ibv_cq in *cq, EAGAIN when there is none and wait is
 * 0, or the error of the wait (EINTR, as a read of the kernel's event file gives).
 * Each read of an eventfd is one event, as each arming of a CQ is at most one.
 */
int gv_get_cq_event(uintptr_t h, int wait, void **cq)
{
	struct gva_chan *c = (struct gva_chan *)h;
	struct epoll_event ev;

	if (!c)
		return EINVAL;
	if (c->d->pid != gva_getpid())
		return EIO; /* a child's copy: the CQs' events are the parent's */
	for (;;) {
		int n = epoll_wait(c->epfd, &ev, 1, wait ? -1 : 0), found = 0;
		struct gva_cq *q;

		if (n < 0)
			return errno;
		if (n == 0)
			return EAGAIN;
		q = ev.data.ptr;
		pthread_mutex_lock(&c->mu);
		for (size_t k = 0; k < c->ncqs && !found; k++)
			found = c->cqs[k] == q;
		if (found) {
			/* another thread may have taken this event since epoll_wait said so:
			 * read only what is there (the eventfd is the daemon's, left blocking) */
			struct pollfd p = {.fd = q->evfd, .events = POLLIN};
			uint64_t v;

			found = poll(&p, 1, 0) == 1 && read(q->evfd, &v, sizeof(v)) == sizeof(v);
			if (found)
				*cq = q->cobj;
		}
		pthread_mutex_unlock(&c->mu);
		if (found)
			return 0;
	}
}

int gv_destroy_comp_channel(uintptr_t h)
{
	struct gva_chan *c = (struct gva_chan *)h;

	if (!c)
		return EINVAL;
	close(c->epfd);
	if (c->d->pid == gva_getpid()) /* a child's copy of the lock may be held */
		pthread_mutex_destroy(&c->mu);
	free(c->cqs);
	free(c);
	return 0;
}

static int gva_chan_add(struct gva_chan *c, struct gva_cq *q)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = q };
	int rc = 0;

	pthread_mutex_lock(&c->mu);
	if (c->ncqs == c->capcqs) {
		size_t cap = c->capcqs ? 2 * c->capcqs : 8;
		void *p = realloc(c->cqs, cap * sizeof(*c->cqs));

		if (!p) {
			rc = ENOMEM;
			goto out;
		}
		c->cqs = p;
		c->capcqs = cap;
	}
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, q->evfd, &ev) < 0) {
		rc = errno;
		goto out;
	}
	c->cqs[c->ncqs++] = q;
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static void gva_chan_remove(struct gva_chan *c, struct gva_cq *q)
{
	pthread_mutex_lock(&c->mu);
	for (size_t k = 0; k < c->ncqs; k++) {
		if (c->cqs[k] == q) {
			c->cqs[k] = c->cqs[--c->ncqs];
			break;
		}
	}
	epoll_ctl(c->epfd, EPOLL_CTL_DEL, q->evfd, NULL);
	pthread_mutex_unlock(&c->mu);
}

/*
 * A receive queue's WQEs are counted from post to poll, so that ibv_post_recv refuses the
 * one beyond max_recv_wr with ENOMEM as a provider does: the daemon takes them out of the
 * ring at once, so the ring's room says nothing. Every receive completes, flushed ones
 * too (opcode IBV_WC_RECV), through its QP's receive CQ, where polling counts it back.
 */
int gva_cq_add_rq(struct gva_cq *q, struct gva_qp *qp)
{
	int rc = 0;

	pthread_mutex_lock(&q->mu);
	if (q->nrqps == q->caprqps) {
		size_t cap = q->caprqps ? 2 * q->caprqps : 4;
		void *p = realloc(q->rqps, cap * sizeof(*q->rqps));

		if (!p) {
			rc = ENOMEM;
			goto out;
		}
		q->rqps = p;
		q->caprqps = cap;
	}
	q->rqps[q->nrqps++] = qp;
out:
	pthread_mutex_unlock(&q->mu);
	return rc;
}

void gva_cq_remove_rq(struct gva_cq *q, struct gva_qp *qp)
{
	pthread_mutex_lock(&q->mu);
	for (size_t i = 0; i < q->nrqps; i++) {
		if (q->rqps[i] == qp) {
			q->rqps[i] = q->rqps[--q->nrqps];
			break;
		}
	}
	pthread_mutex_unlock(&q->mu);
}

/* gva_count_recv counts a polled receive completion back to its QP; q->mu is held. */
static void gva_count_recv(struct gva_cq *q, const struct ibv_wc *w)
{
	if (!(w->opcode & IBV_WC_RECV))
		return;
	for (size_t i = 0; i < q->nrqps; i++) {
		struct gva_qp *qp = q->rqps[i];

		if (qp->qpn == w->qp_num) {
			uint32_t n = __atomic_load_n(&qp->rq_outstanding, __ATOMIC_SEQ_CST);

			while (n > 0 && !__atomic_compare_exchange_n(&qp->rq_outstanding, &n, n - 1, 0,
								     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				;
			return;
		}
	}
}

static void gva_cq_free(struct gva_cq *q)
{
	if (q->mem)
		munmap(q->mem, q->size);
	if (q->evfd >= 0)
		close(q->evfd);
	pthread_mutex_destroy(&q->mu);
	free(q->rqps);
	free(q);
}

int gv_create_cq(uintptr_t ch, int *cqe, uintptr_t chanH, void *cq, uintptr_t *out)
{
	struct gva_dev *d = (struct gva_dev *)ch;
	struct gva_chan *c = (struct gva_chan *)chanH;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_cq *q;
	int fds[2], rc;
	uint32_t ctl;

	if (!d || *cqe <= 0 || *cqe > (1 << 24) || (c && c->d != d))
		return EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return ENOMEM;
	q->evfd = -1;
	pthread_mutex_init(&q->mu, NULL);
	gva_msg_init(&m);
	gva_put32(&m, (uint32_t)*cqe);
	if ((rc = gva_call(d, GVA_CREATE_CQ, &m, NULL, 0, buf, &r, fds, 2))) {
		gva_cq_free(q);
		return rc;
	}
	q->d = d;
	q->h = gva_get32(&r);
	q->depth = gva_get32(&r);
	q->slots = gva_get32(&r);
	ctl = gva_get32(&r);
	q->size = gva_get32(&r);
	q->evfd = fds[1];
	rc = EIO;
	if (r.short_ || !q->slots || (q->slots & (q->slots - 1)) || q->slots > (1u << 24) ||
	    ctl < GVA_RING_CTRL + (uint64_t)q->slots * GVA_CQE || ctl % 64 || (uint64_t)ctl + 8 > q->size)
		goto fail;
	if ((rc = gva_map(fds[0], q->size, &q->mem)))
		goto fail;
	close(fds[0]);
	fds[0] = -1;
	q->arm = (uint32_t *)(q->mem + ctl);
	q->overflow = (uint32_t *)(q->mem + ctl + 4);
	q->tail = q->head = __atomic_load_n((uint64_t *)(q->mem + GVA_OFF_TAIL), __ATOMIC_SEQ_CST);
	q->cobj = cq;
	if (c && (rc = gva_chan_add(c, q)))
		goto fail;
	q->chan = c;
	gva_track(d, GVA_EV_CQ, q->h, cq);
	*cqe = (int)q->depth;
	*out = (uintptr_t)q;
	return 0;
fail:
	if (fds[0] >= 0)
		close(fds[0]);
	gva_simple(d, GVA_DESTROY_CQ, q->h);
	gva_cq_free(q);
	return rc;
}

int gv_destroy_cq(uintptr_t h)
{
	struct gva_cq *q = (struct gva_cq *)h;
	int rc;

	if (!q)
		return EINVAL;
	if (q->d->pid == gva_getpid()) {
		/* as the daemon says while a QP uses it, even a dead one: the QP names this CQ */
		pthread_mutex_lock(&q->mu);
		size_t users = q->nrqps;
		pthread_mutex_unlock(&q->mu);
		if (users)
			return EBUSY;
	}
	rc = gva_simple(q->d, GVA_DESTROY_CQ, q->h);
	if (rc && !gva_usable(q->d))
		return rc; /* EBUSY while a QP uses it */
	gva_untrack(q->d, GVA_EV_CQ, q->h);
	if (q->chan && q->d->pid == gva_getpid()) /* a child's copy of a channel lock may be held */
		gva_chan_remove(q->chan, q);
	gva_cq_free(q);
	return 0;
}

int gv_resize_cq(uintptr_t h, int *cqe)
{
	struct gva_cq *q = (struct gva_cq *)h;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	int rc;

	if (!q || *cqe <= 0)
		return EINVAL;
	/* the daemon refuses a depth below the completions not yet polled (ours and its own) */
	gva_msg_init(&m);
	gva_put32(&m, q->h);
	gva_put32(&m, (uint32_t)*cqe);
	if ((rc = gva_call(q->d, GVA_RESIZE_CQ, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	q->depth = gva_get32(&r);
	*cqe = (int)q->depth;
	return 0;
}

/* Arming is a store: the daemon fires the CQ's eventfd with its next completion. */
int gv_req_notify_cq(uintptr_t h, int solicitedOnly)
{
	struct gva_cq *q = (struct gva_cq *)h;
	int rc;

	if (!q)
		return EINVAL;
	if ((rc = gva_usable(q->d)))
		return rc;
	__atomic_store_n(q->arm, solicitedOnly ? 2u : 1u, __ATOMIC_SEQ_CST);
	return 0;
}

/* gva_put_wc converts a completion slot (docs/attach-protocol.md, "Completion"). */
static void gva_put_wc(struct ibv_wc *w, const uint8_t *s)
{
	struct gva_rd r = { .p = s, .n = GVA_CQE };
	uint32_t imm;

	memset(w, 0, sizeof(*w));
	w->wr_id = gva_get64(&r);
	w->status = (enum ibv_wc_status)gva_get8(&r);
	w->opcode = (enum ibv_wc_opcode)gva_get8(&r);
	gva_get16(&r);
	w->byte_len = gva_get32(&r);
	imm = gva_get32(&r);
	w->qp_num = gva_get32(&r);
	w->src_qp = gva_get32(&r);
	w->wc_flags = gva_get32(&r);
	w->vendor_err = gva_get32(&r);
	/* imm_data is big-endian in ibv_wc; an invalidated rkey is not */
	if (w->wc_flags & IBV_WC_WITH_IMM)
		w->imm_data = htobe32(imm);
	else
		w->invalidated_rkey = imm;
}

/*
 * gv_poll_cq reads up to n completions from the ring: slots from our tail up to the
 * daemon's head, then one store of the new tail. A program spinning on an empty CQ
 * yields now and then: the daemon needs a CPU to make the completions it waits for.
 */
int gv_poll_cq(uintptr_t h, int n, struct ibv_wc *out)
{
	struct gva_cq *q = (struct gva_cq *)h;
	uint64_t *headp, *tailp;
	int k = 0;

	if (!q || n < 0 || (n > 0 && !out))
		return -1;
	if (gva_usable(q->d) && q->d->pid != gva_getpid())
		return -1;
	headp = (uint64_t *)(q->mem + GVA_OFF_HEAD);
	tailp = (uint64_t *)(q->mem + GVA_OFF_TAIL);
	pthread_mutex_lock(&q->mu);
	while (k < n) {
		if (q->tail == q->head) {
			uint64_t hd = __atomic_load_n(headp, __ATOMIC_SEQ_CST);

			if (hd - q->tail > q->slots) { /* an impossible head: take nothing */
				gva_debug("CQ %u: the daemon's head is impossible", q->h);
				break;
			}
			if (hd == q->tail)
				break;
			q->head = hd;
		}
		gva_put_wc(&out[k], q->mem + GVA_RING_CTRL + (q->tail & (q->slots - 1)) * GVA_CQE);
		gva_count_recv(q, &out[k]);
		q->tail++;
		k++;
	}
	if (k > 0) {
		__atomic_store_n(tailp, q->tail, __ATOMIC_SEQ_CST);
		q->empties = 0;
	} else if (++q->empties % 16 == 0) {
		sched_yield();
	}
	pthread_mutex_unlock(&q->mu);
	if (k == 0 && __atomic_load_n(q->overflow, __ATOMIC_SEQ_CST))
		return -1; /* completions were lost, as an overrun CQ reports */
	return k;
}
