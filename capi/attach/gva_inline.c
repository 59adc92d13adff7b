/*
 * IBV_SEND_INLINE in the C flavour (it replaces capi/inline.c). The daemon reads a
 * WQE's payload when it takes the WQE, after the post call returned, so inline bytes are
 * staged per send-ring index by gv_post_send (gva_qp.c), not per call as inline.c does.
 * What remains here is the ibv_wr_* builder's ibv_wr_set_inline_data, which copies at
 * the call (the program may reuse its buffer before ibv_wr_complete) into a private
 * area of the QP; wr_complete's post then stages those bytes like any inline request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../gv.h"

int gv_inline_init(struct gv_qp *q, uintptr_t pd, const struct ibv_qp_cap *cap)
{
	(void)pd;
	q->max_inline = cap->max_inline_data;
	q->max_send_sge = cap->max_send_sge;
	q->stage = NULL;
	if (!q->max_inline)
		return 0;
	q->stage = malloc((size_t)GV_WR_BATCH * q->max_inline);
	return q->stage ? 0 : ENOMEM;
}

void gv_inline_free(struct gv_qp *q)
{
	free(q->stage);
	q->stage = NULL;
}

/* gv_post_send stages inline requests itself. */
int gv_wants_staging(const struct gv_qp *q, const struct ibv_send_wr *wr)
{
	(void)q; (void)wr;
	return 0;
}

int gv_post_send_staged(struct gv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)q; (void)wr; (void)bad;
	return EINVAL; /* unreachable: gv_wants_staging is 0 */
}

void gv_wr_inline(struct gv_qp *q, struct ibv_send_wr *w, size_t n, const struct ibv_data_buf *bufs)
{
	uint8_t *slot;
	size_t total = 0;

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
	slot = q->stage + (size_t)(w - q->wrs) * q->max_inline;
	for (size_t i = 0; i < n; i++) {
		if (bufs[i].length > q->max_inline - total) {
			q->wr_err = EINVAL;
			return;
		}
		memcpy(slot + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	w->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)slot, .length = (uint32_t)total, .lkey = 0 };
	w->num_sge = total ? 1 : 0;
	w->send_flags |= IBV_SEND_INLINE;
}
