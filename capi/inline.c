/*
 * IBV_SEND_INLINE from memory the program never registered. libibverbs' contract
 * (ibv_post_send(3)): an inline WR's bytes are copied at post time and its SGEs' lkeys
 * are not checked, so a stack buffer with lkey 0 is valid. The engine copies inline
 * payload only out of registered memory, during PostSend (internal/engine/post.go
 * enqueueSend). So each QP with max_inline_data > 0 owns a C staging area registered in
 * its PD: the post path copies each inline WR's bytes there and hands the engine a copy
 * of the WR whose one SGE names the staging. Since the engine has copied the bytes when
 * PostSend returns, the staging is free again when the post call returns.
 *
 * The area holds GV_WR_BATCH slots of max_inline_data bytes for ibv_post_send (a longer
 * list is posted in pieces, as the Go side does anyway), and GV_WR_BATCH more for the
 * ibv_wr_* builder, whose ibv_wr_set_inline_data copies at the call (the program may reuse
 * its buffer before ibv_wr_complete).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gv.h"
#include "gv_exports.h"

int gv_inline_init(struct gv_qp *q, uintptr_t pd, const struct ibv_qp_cap *cap)
{
	size_t size;
	uint32_t rkey;
	int rc;

	q->max_inline = cap->max_inline_data;
	q->max_send_sge = cap->max_send_sge;
	if (!q->max_inline)
		return 0;
	size = (size_t)2 * GV_WR_BATCH * q->max_inline;
	q->stage = malloc(size);
	if (!q->stage)
		return ENOMEM;
	rc = gv_reg_mr(pd, q->stage, size, IBV_ACCESS_LOCAL_WRITE, &q->stage_mr, &q->stage_lkey, &rkey);
	if (rc) {
		free(q->stage);
		q->stage = NULL;
		return rc;
	}
	pthread_mutex_init(&q->stage_mu, NULL);
	return 0;
}

void gv_inline_free(struct gv_qp *q)
{
	if (!q->stage)
		return;
	gv_dereg_mr(q->stage_mr);
	pthread_mutex_destroy(&q->stage_mu);
	free(q->stage);
	q->stage = NULL;
}

/* The opcodes the engine sends inline (the flag is ignored on the others). */
static int gv_inlinable(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
	       op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

int gv_wants_staging(const struct gv_qp *q, const struct ibv_send_wr *wr)
{
	if (!q->stage)
		return 0;
	for (; wr; wr = wr->next)
		if ((wr->send_flags & IBV_SEND_INLINE) && gv_inlinable(wr->opcode))
			return 1;
	return 0;
}

/*
 * gv_gather copies the n buffers into slot, if they fit in max_inline bytes, and
 * returns their total length, or -1.
 */
static long gv_gather(const struct gv_qp *q, uint8_t *slot, size_t n, const struct ibv_data_buf *bufs)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		if (bufs[i].length > q->max_inline - total)
			return -1;
		if (bufs[i].length)
			memcpy(slot + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	return (long)total;
}

/*
 * gv_stage points s, a copy of an inline WR, at slot i holding its bytes. A WR the
 * engine must refuse (too many SGEs, more than max_inline bytes) keeps its own SGEs, so
 * that it fails there with the engine's EINVAL.
 */
static void gv_stage(struct gv_qp *q, struct ibv_send_wr *s, int i)
{
	uint8_t *slot = q->stage + (size_t)i * q->max_inline;
	size_t total = 0;
	int k;

	if (s->num_sge < 0 || (uint32_t)s->num_sge > q->max_send_sge || (s->num_sge && !s->sg_list))
		return;
	for (k = 0; k < s->num_sge; k++) {
		if (s->sg_list[k].length > q->max_inline - total)
			return;
		total += s->sg_list[k].length;
	}
	total = 0;
	for (k = 0; k < s->num_sge; k++) {
		if (s->sg_list[k].length)
			memcpy(slot + total, (void *)(uintptr_t)s->sg_list[k].addr, s->sg_list[k].length);
		total += s->sg_list[k].length;
	}
	q->stage_sges[i] = (struct ibv_sge){ .addr = (uintptr_t)slot, .length = (uint32_t)total, .lkey = q->stage_lkey };
	s->sg_list = &q->stage_sges[i];
	s->num_sge = total ? 1 : 0;
}

int gv_post_send_staged(struct gv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int rc = 0;

	pthread_mutex_lock(&q->stage_mu);
	while (wr && !rc) {
		struct ibv_send_wr *first = wr;
		int n = 0, idx = 0;

		for (; wr && n < GV_WR_BATCH; wr = wr->next, n++) {
			struct ibv_send_wr *s = &q->stage_wrs[n];

			*s = *wr;
			s->next = NULL;
			if (n)
				q->stage_wrs[n - 1].next = s;
			if ((s->send_flags & IBV_SEND_INLINE) && gv_inlinable(s->opcode))
				gv_stage(q, s, n);
		}
		rc = gv_post_send(q->h, q->stage_wrs, &idx);
		if (rc && bad) {
			for (*bad = first; idx > 0 && (*bad)->next; idx--)
				*bad = (*bad)->next;
		}
	}
	pthread_mutex_unlock(&q->stage_mu);
	return rc;
}

/* The ibv_wr_* builder's inline data: copied now into the builder's slot of the WR. */
void gv_wr_inline(struct gv_qp *q, struct ibv_send_wr *w, size_t n, const struct ibv_data_buf *bufs)
{
	uint8_t *slot;
	long total;

	if (!q->stage) {
		for (size_t i = 0; i < n; i++) {
			if (bufs[i].length) {
				q->wr_err = EINVAL; /* max_inline_data is 0 */
				return;
			}
		}
		w->num_sge = 0;
		w->send_flags |= IBV_SEND_INLINE;
		return;
	}
	slot = q->stage + (size_t)(GV_WR_BATCH + (w - q->wrs)) * q->max_inline;
	total = gv_gather(q, slot, n, bufs);
	if (total < 0) {
		q->wr_err = EINVAL;
		return;
	}
	w->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)slot, .length = (uint32_t)total, .lkey = q->stage_lkey };
	w->num_sge = total ? 1 : 0;
	w->send_flags |= IBV_SEND_INLINE;
}
